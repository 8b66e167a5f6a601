#!/usr/bin/env bash
# Predicted against measured on the machine at hand (issue 6): for a matrix of plans on a small
# GPT, calibrate, predict (simulate --hardware), execute (mpirun execute) and compare, and write
# a report (markdown + JSON + SVG chart) into bench/results/cpu-<date>/. Each plan's error is its
# median over ROUNDS rounds (round-K/). Each plan also gets its predicted and measured Chrome
# traces (round-K/runs/NAME.{predicted,measured}_trace.json, to open side by side in Perfetto)
# and their per-task difference (NAME.trace_diff.txt).
#
#   bench/predicted_vs_measured.sh [BUILD_DIR]        (default BUILD_DIR: build)
#   env: MODEL=models/tiny.json STEPS=8 WARMUP=3 ROUNDS=5 TRIES=3 DRIFT_PCT=5 OUT=DIR
#        ONLY="dp2 tp2" (a subset of the matrix, by name)
# This host's speed jumps between states some 40% apart and stays in one for tens of seconds
# (a shared VM: the same step measured 20 to 47 ms within a minute), so a calibration is only
# good for the minute it was taken in. Each plan is therefore its own attempt: a reference plan
# (REFERENCE_PLAN, data parallel over both cores), a calibration of the kind the plan needs
# (calibrate --quick, about 2 s; one-rank plans with rank 0 computing alone), the prediction,
# the run, and the reference plan again. The attempt is steady when the two reference runs
# agree within DRIFT_PCT of their mean: the machine ran at one speed from the calibration to
# the run. An unsteady attempt is tried again, up to TRIES times (the last one is kept). The
# report takes each plan's median over its steady rounds (every round, marked, if none was) and
# lists the attempts. Targets (issue 6): every plan's step time within 15%, median within 7%;
# bytes per group exact; peak memory within 10%. The script reports them; it fails only if a
# tool fails.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="$(cd "${1:-$ROOT/build}" && pwd)"
TOOLS="$BUILD/tools"
MODEL="${MODEL:-$ROOT/models/tiny.json}"
STEPS="${STEPS:-8}"
ROUNDS="${ROUNDS:-5}"
WARMUP="${WARMUP:-3}"
OUT="${OUT:-$ROOT/bench/results/cpu-$(date -u +%Y-%m-%d)}"
TRIES="${TRIES:-3}"
DRIFT_PCT="${DRIFT_PCT:-5}"
REFERENCE_PLAN='"tp":1,"pp":1,"dp":2,"micro_batch_size":2,"global_batch_size":8'
MPIRUN=(mpirun --oversubscribe)
[ "$(id -u)" = 0 ] && MPIRUN+=(--allow-run-as-root)

for tool in calibrate simulate execute compare; do
  if [ ! -x "$TOOLS/$tool" ]; then
    echo "predicted_vs_measured: $TOOLS/$tool is not built (cmake --build $BUILD --target $tool)" >&2
    exit 2
  fi
done
mkdir -p "$OUT"

# The matrix: name, ranks, plan fields. float32 and unfused attention: what the CPU executor runs.
MATRIX=(
  "single_mbs1     1 \"tp\":1,\"pp\":1,\"dp\":1,\"micro_batch_size\":1,\"global_batch_size\":4"
  "single_mbs2     1 \"tp\":1,\"pp\":1,\"dp\":1,\"micro_batch_size\":2,\"global_batch_size\":4"
  "single_mbs4     1 \"tp\":1,\"pp\":1,\"dp\":1,\"micro_batch_size\":4,\"global_batch_size\":4"
  "single_full_rc  1 \"tp\":1,\"pp\":1,\"dp\":1,\"micro_batch_size\":2,\"global_batch_size\":4,\"recompute\":\"full\""
  "dp2             2 \"tp\":1,\"pp\":1,\"dp\":2,\"micro_batch_size\":2,\"global_batch_size\":8"
  "dp2_mbs4        2 \"tp\":1,\"pp\":1,\"dp\":2,\"micro_batch_size\":4,\"global_batch_size\":8"
  "dp2_zero1       2 \"tp\":1,\"pp\":1,\"dp\":2,\"zero_stage\":1,\"micro_batch_size\":2,\"global_batch_size\":8"
  "dp2_zero2       2 \"tp\":1,\"pp\":1,\"dp\":2,\"zero_stage\":2,\"micro_batch_size\":2,\"global_batch_size\":8"
  "dp2_zero3       2 \"tp\":1,\"pp\":1,\"dp\":2,\"zero_stage\":3,\"micro_batch_size\":2,\"global_batch_size\":8"
  "dp2_full_rc     2 \"tp\":1,\"pp\":1,\"dp\":2,\"micro_batch_size\":2,\"global_batch_size\":8,\"recompute\":\"full\""
  "dp2_full_rc2    2 \"tp\":1,\"pp\":1,\"dp\":2,\"micro_batch_size\":4,\"global_batch_size\":8,\"recompute\":\"full\",\"recompute_num_layers\":2"
  "tp2             2 \"tp\":2,\"pp\":1,\"dp\":1,\"micro_batch_size\":2,\"global_batch_size\":4"
  "tp2_mbs4        2 \"tp\":2,\"pp\":1,\"dp\":1,\"micro_batch_size\":4,\"global_batch_size\":8"
  "tp2_full_rc_pa  2 \"tp\":2,\"pp\":1,\"dp\":1,\"micro_batch_size\":4,\"global_batch_size\":8,\"recompute\":\"full\",\"partition_activations\":true"
  "pp2_gpipe       2 \"tp\":1,\"pp\":2,\"dp\":1,\"micro_batch_size\":1,\"global_batch_size\":4,\"schedule\":\"gpipe\""
  "pp2_1f1b        2 \"tp\":1,\"pp\":2,\"dp\":1,\"micro_batch_size\":1,\"global_batch_size\":4,\"schedule\":\"1f1b\""
  "pp2_1f1b_mbs2   2 \"tp\":1,\"pp\":2,\"dp\":1,\"micro_batch_size\":2,\"global_batch_size\":8,\"schedule\":\"1f1b\""
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

# One attempt at a plan: reference, calibrate, predict, execute, compare, reference. Appends
# "NAME:before MS" and "NAME MS" to DIR/reference.txt.tmp; the caller keeps the last attempt's.
attempt() {
  local DIR="$1" name="$2" ranks="$3" run="$4"
  local before after
  local -a CAL
  # Inside `until`, set -e is off: every failure exits explicitly.
  before="$(reference_ms "$DIR")" || exit 5
  # One-rank plans run alone on the node: their profile is measured with rank 0 computing alone
  # (the ranks share caches and memory bandwidth), and their cluster has one "GPU".
  CAL=(--quick --out "$run.profile.json" --cluster-out "$run.cluster.json" --models "$MODEL"
       --baseline-from "$OUT/probe.measured.json")
  [ "$ranks" = 1 ] && CAL+=(--active-ranks 1 --ranks-per-node 1)
  "${MPIRUN[@]}" -np 2 "$TOOLS/calibrate" "${CAL[@]}" > "$run.calibrate.txt" 2>&1 \
    || { cat "$run.calibrate.txt" >&2; exit 5; }
  "$TOOLS/simulate" --model "$MODEL" --plan "$run.plan.json" --cluster "$run.cluster.json" \
    --hardware "$run.profile.json" --json --out "$run.predicted.json" \
    --trace "$run.predicted_trace.json" > /dev/null || exit 5
  "${MPIRUN[@]}" -np "$ranks" "$TOOLS/execute" --model "$MODEL" --plan "$run.plan.json" \
    --steps "$STEPS" --warmup "$WARMUP" --random-tokens --out "$run.measured.json" \
    --trace "$run.measured_trace.json" \
    > "$run.execute.txt" 2>&1 || { cat "$run.execute.txt" >&2; exit 5; }
  after="$(reference_ms "$DIR")" || exit 5
  printf '%s:before %s\n%s %s\n' "$name" "$before" "$name" "$after" > "$DIR/reference.txt.tmp"
  python3 -c 'import sys; b, a = float(sys.argv[1]), float(sys.argv[2]); sys.exit(0 if abs(a - b) <= float(sys.argv[3]) / 100 * (a + b) / 2 else 1)' \
    "$before" "$after" "$DRIFT_PCT"
}

run_round() {
  local DIR="$1"
  mkdir -p "$DIR/runs"
  rm -f "$DIR/reference.txt"
  echo "{$REFERENCE_PLAN,\"precision\":\"fp32\",\"attention\":\"unfused\"}" > "$DIR/reference.plan.json"
  for entry in "${MATRIX[@]}"; do
    read -r name ranks fields <<< "$entry"
    if [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $name "* ]]; then continue; fi
    run="$DIR/runs/$name"
    echo "{$fields,\"precision\":\"fp32\",\"attention\":\"unfused\"}" > "$run.plan.json"
    local try=1
    until attempt "$DIR" "$name" "$ranks" "$run"; do
      echo "== $name: the reference moved during attempt $try: $(tr '\n' ' ' < "$DIR/reference.txt.tmp")"
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
      --out "$run.compare.json" | tee "$run.compare.txt" | grep -E "step_time|# step"
  done
}

for r in $(seq 1 "$ROUNDS"); do
  run_round "$OUT/round-$r"
done

python3 "$ROOT/bench/scripts/report.py" --drift-pct "$DRIFT_PCT" "$OUT"
echo "report: $OUT/report.md"
