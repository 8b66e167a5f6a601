#!/usr/bin/env bash
# Issue 28, "no allocation in the step" with one scratch arena per rank (executor/cpu/workspace.h):
# per plan, `execute --memory-report` of this build and of another build's `execute` (BEFORE,
# the executor before the change), beside `simulate --json`'s memory breakdown of the same plan,
# and the heap allocations per step that tests/executor/step_allocations_test.cc counts (this
# build's test binary, and BEFORE_TEST's when given). Plans: issue 28's shape dense and MoE
# (bench/scripts/issue28_dense.model.json, issue28_moe.model.json), micro-batch 4, 6 steps of
# random tokens, over the layouts the executor runs: dp, tp + SP, cp, pipelines (1F1B, ZB-H1,
# zb-v, DualPipe), ZeRO-3 with full recompute, ep, ep at a capacity factor, offload.
#
#   bench/scripts/executor_arena_memory.sh BUILD_DIR OUT_DIR BEFORE_EXECUTE [BEFORE_TEST]
#
# Writes OUT_DIR/report.md (bench/scripts/executor_arena_report.py) and the raw JSON beside it.
set -euo pipefail
[ $# -ge 3 ] || { echo "usage: executor_arena_memory.sh BUILD_DIR OUT_DIR BEFORE_EXECUTE [BEFORE_TEST]" >&2; exit 2; }
build="$(cd "$1" && pwd)" out="$2" before="$3" before_test="${4:-}"
root="$(cd "$(dirname "$0")/../.." && pwd)"
mkdir -p "$out"
export OMP_NUM_THREADS=1
mpirun=(mpirun --oversubscribe --mca btl_vader_single_copy_mechanism none)
[ "$(id -u)" = 0 ] && mpirun+=(--allow-run-as-root)
cp "$root/bench/scripts/issue28_moe.model.json" "$out/moe.json"
cp "$root/bench/scripts/issue28_dense.model.json" "$out/dense.json"
python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
m = json.load(open(f"{out}/moe.json"))
m["name"] += ", capacity factor 1"
m["moe_capacity_factor"] = 1.0
json.dump(m, open(f"{out}/moe_capacity.json", "w"), indent=1)
PY
# name, model, ranks, plan fields (micro-batch 4, fp32, unfused attention unless given).
plans=(
  "dense_dp2 dense 2 \"dp\":2,\"global_batch_size\":16"
  "dense_tp2_sp dense 2 \"tp\":2,\"sequence_parallel\":true,\"global_batch_size\":8"
  "dense_cp2 dense 2 \"cp\":2,\"attention\":\"fused\",\"global_batch_size\":8"
  "dense_pp2_1f1b dense 2 \"pp\":2,\"schedule\":\"1f1b\",\"global_batch_size\":16"
  "dense_pp2_zb_h1 dense 2 \"pp\":2,\"schedule\":\"zb-h1\",\"global_batch_size\":16"
  "dense_pp2_zb_v dense 2 \"pp\":2,\"schedule\":\"zb-v\",\"virtual_stages\":2,\"global_batch_size\":16"
  "dense_pp2_dualpipe dense 2 \"pp\":2,\"schedule\":\"dualpipe\",\"virtual_stages\":2,\"global_batch_size\":16"
  "dense_dp2_zero3_full dense 2 \"dp\":2,\"zero_stage\":3,\"recompute\":\"full\",\"global_batch_size\":16"
  "dense_dp2_zero2_offload_nvme dense 2 \"dp\":2,\"zero_stage\":2,\"offload\":\"optimizer\",\"offload_device\":\"nvme\",\"global_batch_size\":16"
  "moe_dp2 moe 2 \"dp\":2,\"global_batch_size\":16"
  "moe_ep2 moe 2 \"dp\":2,\"ep\":2,\"global_batch_size\":16"
  "moe_ep2_capacity moe_capacity 2 \"dp\":2,\"ep\":2,\"global_batch_size\":16"
  "moe_pp2_zb_h1 moe 2 \"pp\":2,\"schedule\":\"zb-h1\",\"global_batch_size\":16"
)
offload_dir="$(mktemp -d /tmp/executor-arena-offload.XXXXXX)"
names=()
for entry in "${plans[@]}"; do
  read -r name kind ranks fields <<< "$entry"
  names+=("$name")
  run="$out/$name"
  attention='"attention":"unfused",'
  [[ "$fields" == *attention* ]] && attention=""
  python3 - "$run.plan.json" "{$attention$fields}" <<'PY'
import json, sys
plan = {"tp": 1, "pp": 1, "dp": 1, "micro_batch_size": 4, "precision": "fp32"}
plan.update(json.loads(sys.argv[2]))
json.dump(plan, open(sys.argv[1], "w"))
PY
  cp "$out/$kind.json" "$run.model.json"
  "$build/tools/simulate" --model "$run.model.json" --plan "$run.plan.json" --gpus "$ranks" \
    --json --out "$run.predicted.json" > /dev/null
  nvme=()
  [[ "$fields" == *nvme* ]] && nvme=(--offload-dir "$offload_dir")
  for side in after before; do
    exe="$build/tools/execute"
    [ "$side" = before ] && exe="$before"
    # The capacity factor is new: the build before refuses the field, so it runs dropless.
    model="$run.model.json"
    [ "$side" = before ] && [ "$kind" = moe_capacity ] && model="$out/moe.json"
    "${mpirun[@]}" -np "$ranks" "$exe" --model "$model" --plan "$run.plan.json" \
      --steps 6 --random-tokens "${nvme[@]}" --out "$run.$side.json" \
      --memory-report "$run.$side.memory.json" > "$run.$side.txt"
  done
  echo "$name done" >&2
done
rmdir "$offload_dir"
for side in after before; do
  test_bin="$build/tests/executor/executor_step_allocations_test"
  [ "$side" = before ] && test_bin="$before_test"
  [ -n "$test_bin" ] || continue
  {
    "$test_bin" --gtest_filter='StepAllocations.*' | grep -E '^rank' || true
    "${mpirun[@]}" -np 4 "$test_bin" --gtest_filter='StepAllocationsMpi.*' | grep -E '^rank 0' || true
  } > "$out/allocations.$side.txt"
done
python3 "$root/bench/scripts/executor_arena_report.py" "$out" "${names[@]}"
