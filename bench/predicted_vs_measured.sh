#!/usr/bin/env bash
# Predicted against measured on the machine at hand (issue 6): for a matrix of plans on a small
# GPT and a small MoE GPT, calibrate, predict (simulate --hardware), execute (mpirun execute) and compare, and write
# a report (markdown + JSON + SVG chart) into bench/results/cpu-<date>/. Each plan's error is its
# median over ROUNDS rounds (round-K/). Each plan also gets its predicted and measured Chrome
# traces (round-K/runs/NAME.{predicted,measured}_trace.json, to open side by side in Perfetto)
# and their per-task difference (NAME.trace_diff.txt).
#
#   bench/predicted_vs_measured.sh [BUILD_DIR]        (default BUILD_DIR: build)
#   env: MODEL=models/tiny.json MOE_MODEL=tests/executor/models/tiny-moe.json STEPS=8 WARMUP=3
#        ROUNDS=5 FIRST_ROUND=1 TRIES=3 DRIFT_PCT=5 OTHER_PCT=10 REF_PCT=5 OUT=DIR
#        OFFLOAD_DIR=DIR (the NVMe tier's files; default OUT/offload)
#        ONLY="dp2 tp2" (a subset of the matrix, by name)
# The matrix covers every plan kind the CPU executor runs: data, tensor (with and without
# sequence parallelism), pipeline (gpipe, 1f1b, interleaved, zb-h1, zb-v, dualpipe) and context
# parallelism, ZeRO 1-3, selective and full recompute (some layers; partitioned checkpoints),
# and an MoE model (MOE_MODEL: a dense first layer, 4 experts top-2, a shared expert) on one
# rank, over dp, with expert parallelism (ZeRO 0 and 1), tp 2 with SP, cp 2, pp 2, and
# Megatron-Core's parallel folding over tp 2 (the experts over ep 2, or split over expert_tp 2),
# and the offload tiers in host memory (ZeRO-Offload's optimizer at ZeRO-2, ZeRO-Infinity's
# optimizer+params at ZeRO-3; calibrate's cluster prices their copies and host AdamW,
# calibration/profile.h cpu_cluster_json), and ZeRO-Infinity's NVMe tier at ZeRO-3, its files in
# OFFLOAD_DIR (default OUT/offload), where `calibrate --offload-dir` times the same file I/O.
# This host's speed jumps between states some 40% apart and stays in one for tens of seconds
# (a shared VM: the same step measured 20 to 47 ms within a minute), so a calibration is only
# good for the minute it was taken in. Each plan is therefore its own attempt: a reference plan
# (REFERENCE_PLAN, data parallel over both cores), a calibration of the kind the plan needs
# (calibrate --quick, about 2 s; one-rank plans with rank 0 computing alone), the prediction,
# the run, and the reference plan again. The attempt is steady when the two reference runs
# agree within DRIFT_PCT of their mean: the machine ran at one speed from the calibration to
# the run. The reference runs bracket the attempt but do not see inside it, and the host is
# shared: a build of another session that starts and ends within the run slows it and not the
# references (cpu-2026-11-22b's two misses, NOTES.md of cpu-2026-11-25). So the run itself is
# watched too: the CPU time this machine spent on other processes while it ran (busy time in
# /proc/stat less the ranks' and the launcher's own, from /usr/bin/time), as a share of all the
# cores' time, must be at most OTHER_PCT; both figures and the load average are kept per
# attempt (NAME.contention). Neither sees a speed change between `calibrate` and the run that
# the reference runs around the attempt miss (cpu-2026-12-02: a one-rank plan moved 33 points
# between rounds called steady), so the run is also gated from inside: `execute` times a fixed
# reference GEMM after every step, outside the step's time (executor/cpu/reference_gemm.h),
# `calibrate` timed the same kernel, and `compare --hardware` says whether the run's median rate
# is within REF_PCT of the calibration's and the calibration's own samples within REF_PCT of each
# other (validation/reference_gate.h; NAME.compare.json's reference_gate). An unsteady attempt is tried again, up to TRIES times (the last one is kept). The
# report takes each plan's median over its steady rounds (every round, marked, if none was) and
# lists the attempts. Targets (issue 6): every plan's step time within 15%, median within 7%;
# bytes per group exact; peak memory within 10%. The script reports them; it fails only if a
# tool fails.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="$(cd "${1:-$ROOT/build}" && pwd)"
TOOLS="$BUILD/tools"
MODEL="${MODEL:-$ROOT/models/tiny.json}"
MOE_MODEL="${MOE_MODEL:-$ROOT/tests/executor/models/tiny-moe.json}"
STEPS="${STEPS:-8}"
ROUNDS="${ROUNDS:-5}"
WARMUP="${WARMUP:-3}"
OUT="${OUT:-$ROOT/bench/results/cpu-$(date -u +%Y-%m-%d)}"
OFFLOAD_DIR="${OFFLOAD_DIR:-$OUT/offload}"
OFFLOAD_ARGS=()
TRIES="${TRIES:-3}"
DRIFT_PCT="${DRIFT_PCT:-5}"
OTHER_PCT="${OTHER_PCT:-10}"
# compare's default --reference-tolerance-pct (validation/reference_gate.h, where it comes from).
REF_PCT="${REF_PCT:-5}"
REFERENCE_PLAN='"tp":1,"pp":1,"dp":2,"micro_batch_size":2,"global_batch_size":8'
MPIRUN=(mpirun --oversubscribe)
[ "$(id -u)" = 0 ] && MPIRUN+=(--allow-run-as-root)

for tool in calibrate simulate execute compare; do
  if [ ! -x "$TOOLS/$tool" ]; then
    echo "predicted_vs_measured: $TOOLS/$tool is not built (cmake --build $BUILD --target $tool)" >&2
    exit 2
  fi
done
mkdir -p "$OUT" "$OFFLOAD_DIR"

# The matrix: name, ranks, model (tiny: MODEL; moe: MOE_MODEL), plan fields. float32 and
# unfused attention (fused with cp > 1): what the CPU executor runs.
MATRIX=(
  "single_mbs1            1 tiny \"tp\":1,\"pp\":1,\"dp\":1,\"micro_batch_size\":1,\"global_batch_size\":4"
  "single_mbs2            1 tiny \"tp\":1,\"pp\":1,\"dp\":1,\"micro_batch_size\":2,\"global_batch_size\":4"
  "single_mbs4            1 tiny \"tp\":1,\"pp\":1,\"dp\":1,\"micro_batch_size\":4,\"global_batch_size\":4"
  "single_full_rc         1 tiny \"tp\":1,\"pp\":1,\"dp\":1,\"micro_batch_size\":2,\"global_batch_size\":4,\"recompute\":\"full\""
  "dp2                    2 tiny \"tp\":1,\"pp\":1,\"dp\":2,\"micro_batch_size\":2,\"global_batch_size\":8"
  "dp2_mbs4               2 tiny \"tp\":1,\"pp\":1,\"dp\":2,\"micro_batch_size\":4,\"global_batch_size\":8"
  "dp2_zero1              2 tiny \"tp\":1,\"pp\":1,\"dp\":2,\"zero_stage\":1,\"micro_batch_size\":2,\"global_batch_size\":8"
  "dp2_zero2              2 tiny \"tp\":1,\"pp\":1,\"dp\":2,\"zero_stage\":2,\"micro_batch_size\":2,\"global_batch_size\":8"
  "dp2_zero3              2 tiny \"tp\":1,\"pp\":1,\"dp\":2,\"zero_stage\":3,\"micro_batch_size\":2,\"global_batch_size\":8"
  "dp2_full_rc            2 tiny \"tp\":1,\"pp\":1,\"dp\":2,\"micro_batch_size\":2,\"global_batch_size\":8,\"recompute\":\"full\""
  "dp2_full_rc2           2 tiny \"tp\":1,\"pp\":1,\"dp\":2,\"micro_batch_size\":4,\"global_batch_size\":8,\"recompute\":\"full\",\"recompute_num_layers\":2"
  "tp2                    2 tiny \"tp\":2,\"pp\":1,\"dp\":1,\"micro_batch_size\":2,\"global_batch_size\":4"
  "tp2_mbs4               2 tiny \"tp\":2,\"pp\":1,\"dp\":1,\"micro_batch_size\":4,\"global_batch_size\":8"
  "tp2_full_rc_pa         2 tiny \"tp\":2,\"pp\":1,\"dp\":1,\"micro_batch_size\":4,\"global_batch_size\":8,\"recompute\":\"full\",\"partition_activations\":true"
  "pp2_gpipe              2 tiny \"tp\":1,\"pp\":2,\"dp\":1,\"micro_batch_size\":1,\"global_batch_size\":4,\"schedule\":\"gpipe\""
  "pp2_1f1b               2 tiny \"tp\":1,\"pp\":2,\"dp\":1,\"micro_batch_size\":1,\"global_batch_size\":4,\"schedule\":\"1f1b\""
  "pp2_1f1b_mbs2          2 tiny \"tp\":1,\"pp\":2,\"dp\":1,\"micro_batch_size\":2,\"global_batch_size\":8,\"schedule\":\"1f1b\""
  "dp2_selective          2 tiny \"tp\":1,\"pp\":1,\"dp\":2,\"micro_batch_size\":2,\"global_batch_size\":8,\"recompute\":\"selective\""
  "tp2_sp                 2 tiny \"tp\":2,\"pp\":1,\"dp\":1,\"micro_batch_size\":2,\"global_batch_size\":4,\"sequence_parallel\":true"
  "pp2_interleaved        2 tiny \"tp\":1,\"pp\":2,\"dp\":1,\"micro_batch_size\":1,\"global_batch_size\":4,\"schedule\":\"interleaved\",\"virtual_stages\":2"
  "pp2_zb_h1              2 tiny \"tp\":1,\"pp\":2,\"dp\":1,\"micro_batch_size\":1,\"global_batch_size\":4,\"schedule\":\"zb-h1\""
  "pp2_zb_v               2 tiny \"tp\":1,\"pp\":2,\"dp\":1,\"micro_batch_size\":1,\"global_batch_size\":4,\"schedule\":\"zb-v\",\"virtual_stages\":2"
  "cp2                    2 tiny \"tp\":1,\"pp\":1,\"dp\":1,\"cp\":2,\"micro_batch_size\":2,\"global_batch_size\":4"
  "cp2_full_rc            2 tiny \"tp\":1,\"pp\":1,\"dp\":1,\"cp\":2,\"micro_batch_size\":2,\"global_batch_size\":4,\"recompute\":\"full\""
  "moe_single             1 moe \"tp\":1,\"pp\":1,\"dp\":1,\"micro_batch_size\":2,\"global_batch_size\":4"
  "moe_dp2                2 moe \"tp\":1,\"pp\":1,\"dp\":2,\"micro_batch_size\":2,\"global_batch_size\":8"
  "moe_ep2                2 moe \"tp\":1,\"pp\":1,\"dp\":2,\"ep\":2,\"micro_batch_size\":2,\"global_batch_size\":8"
  "moe_ep2_zero1          2 moe \"tp\":1,\"pp\":1,\"dp\":2,\"ep\":2,\"zero_stage\":1,\"micro_batch_size\":2,\"global_batch_size\":8"
  "moe_tp2_sp             2 moe \"tp\":2,\"pp\":1,\"dp\":1,\"sequence_parallel\":true,\"micro_batch_size\":2,\"global_batch_size\":4"
  "moe_cp2                2 moe \"tp\":1,\"pp\":1,\"dp\":1,\"cp\":2,\"micro_batch_size\":2,\"global_batch_size\":4"
  "moe_pp2_1f1b           2 moe \"tp\":1,\"pp\":2,\"dp\":1,\"micro_batch_size\":1,\"global_batch_size\":4,\"schedule\":\"1f1b\""
  "pp2_dualpipe           2 tiny \"tp\":1,\"pp\":2,\"dp\":1,\"micro_batch_size\":1,\"global_batch_size\":4,\"schedule\":\"dualpipe\",\"virtual_stages\":2"
  "moe_fold_tp2_etp2      2 moe \"tp\":2,\"pp\":1,\"dp\":1,\"sequence_parallel\":true,\"expert_layout\":\"folded\",\"expert_tp\":2,\"micro_batch_size\":2,\"global_batch_size\":4"
  "moe_fold_tp2_ep2       2 moe \"tp\":2,\"pp\":1,\"dp\":1,\"ep\":2,\"sequence_parallel\":true,\"expert_layout\":\"folded\",\"expert_tp\":1,\"micro_batch_size\":2,\"global_batch_size\":4"
  "dp2_offload_opt        2 tiny \"tp\":1,\"pp\":1,\"dp\":2,\"zero_stage\":2,\"offload\":\"optimizer\",\"micro_batch_size\":2,\"global_batch_size\":8"
  "dp2_offload_params     2 tiny \"tp\":1,\"pp\":1,\"dp\":2,\"zero_stage\":3,\"offload\":\"optimizer+params\",\"micro_batch_size\":2,\"global_batch_size\":8"
  "dp2_offload_nvme       2 tiny \"tp\":1,\"pp\":1,\"dp\":2,\"zero_stage\":3,\"offload\":\"optimizer+params\",\"offload_device\":\"nvme\",\"micro_batch_size\":2,\"global_batch_size\":8"
)

echo "== probe: the executor's fixed memory (models/probe.json, 2 ranks)"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
echo '{"tp":1,"pp":1,"dp":2,"micro_batch_size":1,"global_batch_size":2,"precision":"fp32","attention":"unfused"}' > "$OUT/probe.plan.json"
"${MPIRUN[@]}" -np 2 "$TOOLS/execute" --model "$ROOT/models/probe.json" --plan "$OUT/probe.plan.json" \
  --steps 2 --random-tokens --out "$OUT/probe.measured.json" > "$OUT/probe.txt" 2>&1 \
  || { cat "$OUT/probe.txt" >&2; exit 5; }
# The reference plan's step time in ms, on stdout.
reference_ms() {
  local DIR="$1"
  "${MPIRUN[@]}" -np 2 "$TOOLS/execute" --model "$MODEL" --plan "$DIR/reference.plan.json" \
    --steps "$STEPS" --warmup "$WARMUP" --random-tokens --out "$DIR/reference.measured.json" \
    > /dev/null 2>&1 || { echo "predicted_vs_measured: the reference plan failed" >&2; exit 5; }
  python3 -c 'import json,sys; print(round(json.load(open(sys.argv[1]))["step_time_s"] * 1e3, 3))' \
    "$DIR/reference.measured.json"
}

# CPU time (s) this machine has spent busy since boot, over all cores (user, nice, system, irq,
# softirq and steal: steal is time the hypervisor gave to other guests).
busy_s() {
  awk -v hz="$(getconf CLK_TCK)" '/^cpu /{print ($2+$3+$4+$7+$8+$9)/hz; exit}' /proc/stat
}

# Runs `execute` for a plan, with the cluster and profile simulate was given (so that zb-v runs
# the order simulate plays, issue 26), and writes "other_cpu_pct OTHER load1 LOAD own_cpu_s OWN wall_s WALL"
# to $run.contention: the share of all cores' time spent on other processes during the run.
# Each rank runs under /usr/bin/time (mpirun's own rusage does not include its ranks).
execute_watched() {
  local model="$1" ranks="$2" run="$3" b0 b1 t0 t1 load
  load="$(cut -d' ' -f1 /proc/loadavg)"
  rm -f "$run".cpu.*
  b0="$(busy_s)"; t0="$(date +%s.%N)"
  RUN="$run" /usr/bin/time -f "%U %S" -o "$run.cpu.launcher" \
    "${MPIRUN[@]}" -np "$ranks" -x RUN sh -c '/usr/bin/time -f "%U %S" -o "$RUN.cpu.$OMPI_COMM_WORLD_RANK" "$@"' \
    sh "$TOOLS/execute" --model "$model" --plan "$run.plan.json" \
    --cluster "$run.cluster.json" --hardware "$run.profile.json" \
    --steps "$STEPS" --warmup "$WARMUP" --random-tokens --out "$run.measured.json" \
    --trace "$run.measured_trace.json" "${OFFLOAD_ARGS[@]}" > "$run.execute.txt" 2>&1 || return 1
  b1="$(busy_s)"; t1="$(date +%s.%N)"
  cat "$run".cpu.* | awk -v b="$b1" -v a="$b0" -v t1="$t1" -v t0="$t0" -v n="$(nproc)" -v l="$load" \
    '{own += $1 + $2} END {wall = t1 - t0; other = b - a - own; if (other < 0) other = 0;
      printf "other_cpu_pct %.1f load1 %s own_cpu_s %.2f wall_s %.2f\n", 100 * other / (n * wall), l, own, wall}' \
    > "$run.contention"
  rm -f "$run".cpu.*
}

# One attempt at a plan: reference, calibrate, predict, execute, compare, reference. Appends
# "NAME:before MS" and "NAME MS" to DIR/reference.txt.tmp; the caller keeps the last attempt's.
# Steady: the references agree within DRIFT_PCT, other processes took at most OTHER_PCT, and the
# in-run reference kernel ran within REF_PCT of the calibration's rate (compare's reference gate,
# written to $run.compare.json; its line to $run.reference_gate).
attempt() {
  local DIR="$1" name="$2" ranks="$3" model="$4" attention="$5" run="$6"
  local before after
  local -a CAL
  # Inside `until`, set -e is off: every failure exits explicitly.
  before="$(reference_ms "$DIR")" || exit 5
  # One-rank plans run alone on the node: their profile is measured with rank 0 computing alone
  # (the ranks share caches and memory bandwidth), and their cluster has one "GPU".
  CAL=(--quick --out "$run.profile.json" --cluster-out "$run.cluster.json" --models "$model"
       --attention "$attention" --baseline-from "$OUT/probe.measured.json")
  [ "$ranks" = 1 ] && CAL+=(--active-ranks 1 --ranks-per-node 1)
  # The NVMe tier: its files go to OFFLOAD_DIR, where calibrate times the same file I/O.
  CAL+=("${OFFLOAD_ARGS[@]}")
  "${MPIRUN[@]}" -np 2 "$TOOLS/calibrate" "${CAL[@]}" > "$run.calibrate.txt" 2>&1 \
    || { cat "$run.calibrate.txt" >&2; exit 5; }
  # The CPU executor sums data-parallel gradients once the backward is done (executor/trainer.cc
  # finish_gradients): one thread per rank cannot run them beside it.
  "$TOOLS/simulate" --model "$model" --plan "$run.plan.json" --cluster "$run.cluster.json" \
    --hardware "$run.profile.json" --grad-reduce-after-backward --json --out "$run.predicted.json" \
    --trace "$run.predicted_trace.json" > /dev/null || exit 5
  # The same prediction from the fit alone (the profile's measured task times removed): the
  # report's "fit only" column, what the fit gives where no probe ran a plan's tasks.
  python3 -c 'import json, sys; p = json.load(open(sys.argv[1])); p.pop("measured_tasks", None); json.dump(p, open(sys.argv[2], "w"))' \
    "$run.profile.json" "$run.profile_fit.json" || exit 5
  "$TOOLS/simulate" --model "$model" --plan "$run.plan.json" --cluster "$run.cluster.json" \
    --hardware "$run.profile_fit.json" --grad-reduce-after-backward --json \
    --out "$run.predicted_fit.json" > /dev/null || exit 5
  execute_watched "$model" "$ranks" "$run" || { cat "$run.execute.txt" >&2; exit 5; }
  after="$(reference_ms "$DIR")" || exit 5
  printf '%s:before %s\n%s %s\n' "$name" "$before" "$name" "$after" > "$DIR/reference.txt.tmp"
  "$TOOLS/compare" --predicted "$run.predicted.json" --measured "$run.measured.json" \
    --hardware "$run.profile.json" --reference-tolerance-pct "$REF_PCT" \
    --out "$run.compare.json" > "$run.compare.txt" 2>&1 || { cat "$run.compare.txt" >&2; exit 5; }
  grep '^reference kernel:' "$run.compare.txt" > "$run.reference_gate" \
    || { echo "predicted_vs_measured: compare gave no reference gate" >&2; exit 5; }
  python3 -c 'import sys; b, a = float(sys.argv[1]), float(sys.argv[2]); sys.exit(0 if abs(a - b) <= float(sys.argv[3]) / 100 * (a + b) / 2 else 1)' \
    "$before" "$after" "$DRIFT_PCT" || return 1
  awk -v limit="$OTHER_PCT" '{exit !($2 <= limit)}' "$run.contention" || return 1
  grep -q '^reference kernel: steady' "$run.reference_gate"
}

run_round() {
  local DIR="$1"
  mkdir -p "$DIR/runs"
  rm -f "$DIR/reference.txt"
  echo "{$REFERENCE_PLAN,\"precision\":\"fp32\",\"attention\":\"unfused\"}" > "$DIR/reference.plan.json"
  for entry in "${MATRIX[@]}"; do
    read -r name ranks model_key fields <<< "$entry"
    local model="$MODEL" attention=unfused
    [ "$model_key" = moe ] && model="$MOE_MODEL"
    # Context parallelism runs on fused attention (Megatron-Core's), so its plans say fused and
    # are calibrated with the executor's attention timed as the one task that names.
    [[ "$fields" == *'"cp"'* ]] && attention=fused
    if [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $name "* ]]; then continue; fi
    run="$DIR/runs/$name"
    OFFLOAD_ARGS=()
    [[ "$fields" == *'"offload_device":"nvme"'* ]] && OFFLOAD_ARGS=(--offload-dir "$OFFLOAD_DIR")
    # ZeRO-2/3: the executors fill a fresh gradient buffer per micro-batch and add each reduced
    # shard into an fp32 shard (Plan::grad_accumulation_pass shard-add, docs/inputs.md).
    local accumulate=""
    [[ "$fields" == *'"zero_stage":2'* || "$fields" == *'"zero_stage":3'* ]] &&
      accumulate=',"grad_accumulation_pass":"shard-add"'
    echo "{$fields$accumulate,\"precision\":\"fp32\",\"attention\":\"$attention\"}" > "$run.plan.json"
    local try=1
    until attempt "$DIR" "$name" "$ranks" "$model" "$attention" "$run"; do
      echo "== $name: unsteady attempt $try: $(tr '\n' ' ' < "$DIR/reference.txt.tmp")$(cat "$run.contention"); $(cat "$run.reference_gate" 2>/dev/null)"
      [ "$try" -ge "$TRIES" ] && break
      try=$((try + 1))
    done
    cat "$DIR/reference.txt.tmp" >> "$DIR/reference.txt"
    rm -f "$DIR/reference.txt.tmp"
    echo "$try" > "$run.attempts"
    echo "== $name ($ranks rank(s), attempt $try)"
    python3 "$ROOT/bench/scripts/trace_diff.py" "$run.predicted_trace.json" \
      "$run.measured_trace.json" > "$run.trace_diff.txt"
    "$TOOLS/compare" --predicted "$run.predicted.json" --measured "$run.measured.json" \
      --hardware "$run.profile.json" --reference-tolerance-pct "$REF_PCT" \
      --out "$run.compare.json" | tee "$run.compare.txt" | grep -E "step_time|# step|^reference kernel"
  done
}

# FIRST_ROUND=K adds rounds K..ROUNDS to an OUT that holds rounds 1..K-1 (a later, quieter
# moment on a shared machine); the report reads every round under OUT.
for r in $(seq "${FIRST_ROUND:-1}" "$ROUNDS"); do
  run_round "$OUT/round-$r"
done

python3 "$ROOT/bench/scripts/report.py" --drift-pct "$DRIFT_PCT" --other-pct "$OTHER_PCT" "$OUT"
echo "report: $OUT/report.md"
