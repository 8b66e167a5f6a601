#!/usr/bin/env bash
# The reference kernel's spread on this host: N times, `calibrate --quick` of a one-rank plan's
# kind (rank 0 computing alone, as bench/predicted_vs_measured.sh calibrates single_mbs4), then
# `execute` of single_mbs4 (8 steps, 3 warm-up). Summarise with spread_summary.py OUT.
#   N=5 OUT=/tmp/spread bash bench/scripts/cpu_gate/spread.sh [BUILD_DIR]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
BUILD="$(cd "${1:-$ROOT/build}" && pwd)"
OUT="${OUT:?set OUT=DIR}"
MPIRUN=(mpirun --oversubscribe)
[ "$(id -u)" = 0 ] && MPIRUN+=(--allow-run-as-root)
mkdir -p "$OUT"
echo '{"tp":1,"pp":1,"dp":1,"micro_batch_size":4,"global_batch_size":4,"precision":"fp32","attention":"unfused"}' > "$OUT/plan.json"
for i in $(seq 1 "${N:-5}"); do
  echo "load $(cut -d' ' -f1 /proc/loadavg) $(date -u +%T)" > "$OUT/load.$i"
  "${MPIRUN[@]}" -np 2 "$BUILD/tools/calibrate" --quick --out "$OUT/profile.$i.json" \
    --models "$ROOT/models/tiny.json" --micro-batches 4 --tp 1 --active-ranks 1 \
    --ranks-per-node 1 > "$OUT/cal.$i.txt" 2>&1
  "${MPIRUN[@]}" -np 1 "$BUILD/tools/execute" --model "$ROOT/models/tiny.json" --plan "$OUT/plan.json" \
    --steps 8 --warmup 3 --random-tokens --out "$OUT/measured.$i.json" > "$OUT/exe.$i.txt" 2>&1
done
