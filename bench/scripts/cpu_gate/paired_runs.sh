#!/usr/bin/env bash
# Alternating pairs of `execute` runs of one plan of a predicted_vs_measured round, with and
# without one change, to see whether the change moves the step time (cpu-2026-12-02b/NOTES.md).
#   bench/scripts/cpu_gate/paired_runs.sh BUILD RUNS_DIR PLAN N WHAT
#   WHAT: reference-calls (--reference-calls 0 vs 5), trace (without vs with --trace), or
#         calibrate (alone vs right after `calibrate --quick` for a one-rank plan).
# Prints "PAIR VARIANT MEDIAN_STEP_MS" per run.
set -euo pipefail
[ $# -eq 5 ] || { echo "usage: paired_runs.sh BUILD RUNS_DIR PLAN N reference-calls|trace|calibrate" >&2; exit 2; }
T="$1/tools"; D="$2"; P="$3"; N="$4"; WHAT="$5"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
run() {  # run LABEL EXTRA...
  local label="$1"; shift
  mpirun --oversubscribe -np 1 "$T/execute" --model "$ROOT/models/tiny.json" --plan "$D/$P.plan.json" \
    --cluster "$D/$P.cluster.json" --hardware "$D/$P.profile.json" --steps 20 --warmup 3 \
    --random-tokens --out "$tmp/r.json" "$@" > /dev/null 2>&1
  python3 -c "import json,statistics,sys; j=json.load(open(sys.argv[1]));
print(sys.argv[2], sys.argv[3], round(statistics.median(j['step_times_s'])*1e3, 3))" "$tmp/r.json" "$i" "$label"
}
for i in $(seq 1 "$N"); do
  case "$WHAT" in
    reference-calls) run calls0 --reference-calls 0; run calls5 --reference-calls 5 ;;
    trace) run untraced; run traced --trace "$tmp/t.json" ;;
    calibrate)
      run alone
      mpirun --oversubscribe -np 2 "$T/calibrate" --quick --out "$tmp/p.json" --cluster-out "$tmp/c.json" \
        --models "$ROOT/models/tiny.json" --attention unfused --active-ranks 1 --ranks-per-node 1 > /dev/null 2>&1
      run after_calibrate ;;
    *) echo "paired_runs.sh: WHAT must be reference-calls, trace or calibrate, got '$WHAT'" >&2; exit 2 ;;
  esac
done
