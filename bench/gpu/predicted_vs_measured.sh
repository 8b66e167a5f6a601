#!/usr/bin/env bash
# Predicted against measured on a GPU machine (issue 6, its GPU half): bench/predicted_vs_measured.sh
# with the CUDA executor. Calibrates the GPU (calibrate --backend cuda: the executor's own
# kernels per cost-model task from traced steps, device copies, NCCL with 2+ GPUs), then for a
# matrix of plans predicts (simulate --hardware), runs (execute --backend cuda --report --trace)
# and compares (compare), and writes the report with bench/scripts/report.py against the GPU
# target (every plan within 10%). One rank per GPU: on a one-GPU machine the matrix is the
# one-GPU plans (micro-batch sizes, recompute, two models); with N GPUs, GPUS=N adds DP, TP and
# PP plans over them.
#
# From a session with the device tool, after building here (no GPU needed):
#   cmake -S . -B build-cuda -DTRAINPLAN_WITH_MPI=OFF -DTRAINPLAN_BUILD_BENCH=OFF \
#         -DCMAKE_CUDA_ARCHITECTURES=90 && cmake --build build-cuda -j2 --target \
#         execute calibrate simulate compare
#   run(command="OUT2=$OUT OUT=/tmp/pvm bash bench/gpu/predicted_vs_measured.sh; cp /tmp/pvm/report.* \
#       /tmp/pvm/step_time.svg /tmp/pvm/all.tar.gz $OUT2/", carry=["build-cuda"], timeout_s=600)
#   (the device tool brings back at most 8 files: the report and the packed folder)
# env: TRAINPLAN_BUILD (default build-cuda), OUT (default bench/results/gpu-pvm-<date>),
#      GPUS (default 1), ROUNDS (default 3), STEPS (default 12), WARMUP (default 4), QUICK=1
#      (calibration --quick).
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
BUILD=${TRAINPLAN_BUILD:-build-cuda}
OUT=${OUT:-$ROOT/bench/results/gpu-pvm-$(date -u +%Y-%m-%d)}
GPUS=${GPUS:-1}
ROUNDS=${ROUNDS:-3}
STEPS=${STEPS:-12}
WARMUP=${WARMUP:-4}
BENCH="$BUILD/tools/execute"
CALIBRATE="$BUILD/tools/calibrate"
SIMULATE="$BUILD/tools/simulate"
COMPARE="$BUILD/tools/compare"
for tool in "$BENCH" "$CALIBRATE" "$SIMULATE" "$COMPARE"; do
  [ -x "$tool" ] || { echo "predicted_vs_measured (gpu): $tool is not built" >&2; exit 2; }
done
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
mkdir -p "$OUT"
# Whatever happens, pack the folder (the device tool brings back at most 8 files).
trap 'tar -C "$OUT" -czf "$OUT/all.tar.gz" --exclude=all.tar.gz . 2>/dev/null' EXIT
exec > >(tee -a "$OUT/run.log") 2>&1
echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)  git: $(git rev-parse HEAD 2>/dev/null)  gpus: $GPUS"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1

# Models without dropout (the executor's steps are deterministic in what they compute).
for m in tiny gpt2-124m; do
  python3 -c "import json,sys; m=json.load(open('models/$m.json')); m['dropout']=False; json.dump(m, open(sys.argv[1],'w'))" "$OUT/$m.json"
done

# launch N ARGS...: N ranks of a CUDA program, torchrun-style, one GPU each.
PORT=29700
launch() {
  local n=$1; shift
  PORT=$((PORT + 1))
  local pids=() rc=0
  for ((r = 0; r < n; r++)); do
    RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$PORT \
      timeout 300 "$@" > "$OUT/launch.rank$r.log" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  cat "$OUT/launch.rank0.log"
  return $rc
}

# The matrix: name, model, ranks, plan fields (bf16, fp32 gradients unless given; the CUDA
# executor's attention).
MATRIX=(
  "gpt2_mbs1       gpt2-124m 1 \"tp\":1,\"pp\":1,\"dp\":1,\"micro_batch_size\":1,\"global_batch_size\":8"
  "gpt2_mbs4       gpt2-124m 1 \"tp\":1,\"pp\":1,\"dp\":1,\"micro_batch_size\":4,\"global_batch_size\":8"
  "gpt2_mbs8       gpt2-124m 1 \"tp\":1,\"pp\":1,\"dp\":1,\"micro_batch_size\":8,\"global_batch_size\":8"
  "gpt2_full_rc    gpt2-124m 1 \"tp\":1,\"pp\":1,\"dp\":1,\"micro_batch_size\":4,\"global_batch_size\":8,\"recompute\":\"full\""
  "tiny_mbs2       tiny      1 \"tp\":1,\"pp\":1,\"dp\":1,\"micro_batch_size\":2,\"global_batch_size\":8"
  "tiny_mbs8       tiny      1 \"tp\":1,\"pp\":1,\"dp\":1,\"micro_batch_size\":8,\"global_batch_size\":8"
)
if [ "$GPUS" -ge 2 ]; then
  MATRIX+=(
    "gpt2_dp2        gpt2-124m 2 \"tp\":1,\"pp\":1,\"dp\":2,\"micro_batch_size\":4,\"global_batch_size\":16"
    "gpt2_dp2_bf16g  gpt2-124m 2 \"tp\":1,\"pp\":1,\"dp\":2,\"micro_batch_size\":4,\"global_batch_size\":16,\"grad_precision\":\"compute\""
    "gpt2_zero1      gpt2-124m 2 \"tp\":1,\"pp\":1,\"dp\":2,\"zero_stage\":1,\"micro_batch_size\":4,\"global_batch_size\":8"
    "gpt2_tp2        gpt2-124m 2 \"tp\":2,\"pp\":1,\"dp\":1,\"micro_batch_size\":4,\"global_batch_size\":8"
    "gpt2_pp2_1f1b   gpt2-124m 2 \"tp\":1,\"pp\":2,\"dp\":1,\"micro_batch_size\":2,\"global_batch_size\":8,\"schedule\":\"1f1b\""
  )
fi

echo "== calibrate ($GPUS GPU(s))"
CAL=(--backend cuda --models "$OUT/tiny.json,$OUT/gpt2-124m.json" --micro-batches 1,2,4,8
     --out "$OUT/profile.json" --cluster-out "$OUT/cluster.json")
[ "${QUICK:-0}" = 1 ] && CAL+=(--quick)
launch "$GPUS" "$CALIBRATE" "${CAL[@]}" > "$OUT/calibrate.txt" || {
  tail -20 "$OUT/calibrate.txt"; echo "calibration failed" >&2; exit 5; }
tail -12 "$OUT/calibrate.txt"

for round in $(seq 1 "$ROUNDS"); do
  DIR="$OUT/round-$round/runs"
  mkdir -p "$DIR"
  cp "$OUT/profile.json" "$OUT/round-$round/profile.json"  # the report's device and date
  for entry in "${MATRIX[@]}"; do
    read -r name model ranks fields <<< "$entry"
    run="$DIR/$name"
    # fp32 gradients unless the entry says otherwise: what the CUDA trainer accumulates.
    grads='"grad_precision":"fp32",'
    [[ $fields == *grad_precision* ]] && grads=
    echo "{$grads$fields,\"precision\":\"bf16\"}" > "$run.plan.json"
    "$SIMULATE" --model "$OUT/$model.json" --plan "$run.plan.json" --cluster "$OUT/cluster.json" \
      --hardware "$OUT/profile.json" --json --out "$run.predicted.json" \
      --trace "$run.predicted_trace.json" > "$run.simulate.txt" 2>&1 \
      || { echo "== $name: simulate failed: $(tail -2 "$run.simulate.txt")"; continue; }
    if ! launch "$ranks" "$BENCH" --backend cuda --model "$OUT/$model.json" --plan "$run.plan.json" \
         --steps "$STEPS" --warmup "$WARMUP" --out "$run.bench.json" \
         --report "$run.measured.json" --trace "$run.measured_trace.json" > "$run.execute.txt"; then
      echo "== $name: the run failed: $(tail -2 "$run.execute.txt")"
      continue
    fi
    echo "== $name (round $round)"
    "$COMPARE" --predicted "$run.predicted.json" --measured "$run.measured.json" \
      --out "$run.compare.json" | tee "$run.compare.txt" | grep -E "step_time|# step"
    python3 bench/scripts/trace_diff.py "$run.predicted_trace.json" "$run.measured_trace.json" \
      > "$run.trace_diff.txt" 2>&1 || true
  done
done
python3 bench/scripts/report.py --targets 10,10,10 "$OUT"
echo "report: $OUT/report.md (all.tar.gz: everything, packed on exit)"
