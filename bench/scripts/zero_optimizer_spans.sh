#!/usr/bin/env bash
# The CPU executor's optimizer span by ZeRO stage, on one plan shape (issue 28: why dp2_zero3 is
# predicted too fast). For ZeRO 0-3 of dp 2 on models/tiny.json (micro-batch 2, global batch 8,
# fp32, unfused attention), runs `execute --trace` ROUNDS times and prints rank 0's optimizer
# time in the traced step (the sum of its "optimizer" spans: ZeRO-1/2 cut it where the parameter
# all-gathers run) beside the step time. The update touches all parameters at ZeRO 0 and half of
# them (the rank's shard) at ZeRO 1-3, so a per-element rate that held would halve the span.
#
#   bench/scripts/zero_optimizer_spans.sh [BUILD_DIR]      env: ROUNDS=3 STEPS=8 OUT=DIR
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
BUILD="${1:-build}"
case "$BUILD" in /*) ;; *) BUILD="$ROOT/$BUILD" ;; esac
ROUNDS="${ROUNDS:-3}" STEPS="${STEPS:-8}" REFERENCE_CALLS="${REFERENCE_CALLS:-0}"
OUT="${OUT:-$(mktemp -d)}"
mkdir -p "$OUT"
MPIRUN=(mpirun --oversubscribe)
[ "$(id -u)" = 0 ] && MPIRUN+=(--allow-run-as-root)
echo "zero_stage round optimizer_us step_ms"
for round in $(seq 1 "$ROUNDS"); do
  for zero in 0 1 2 3; do
    plan="$OUT/z$zero.plan.json"
    echo "{\"tp\":1,\"pp\":1,\"dp\":2,\"zero_stage\":$zero,\"micro_batch_size\":2,\"global_batch_size\":8,\"precision\":\"fp32\",\"attention\":\"unfused\"}" > "$plan"
    "${MPIRUN[@]}" -np 2 "$BUILD/tools/execute" --model "$ROOT/models/tiny.json" --plan "$plan" \
      --steps "$STEPS" --warmup 3 --random-tokens --reference-calls "$REFERENCE_CALLS" --reference-triad off \
      --out "$OUT/z$zero.json" --trace "$OUT/z$zero.trace.json" > "$OUT/z$zero.txt" 2>&1
    python3 - "$OUT/z$zero.trace.json" "$OUT/z$zero.json" "$zero" "$round" <<'EOF'
import json, sys
trace = json.load(open(sys.argv[1]))
events = trace["traceEvents"] if isinstance(trace, dict) else trace
spans = [e["dur"] for e in events
         if e.get("ph") == "X" and e.get("pid") == 0 and e["name"].endswith("optimizer")]
step_ms = json.load(open(sys.argv[2]))["step_time_s"] * 1e3
print(sys.argv[3], sys.argv[4], round(sum(spans)), f"{step_ms:.2f}")
EOF
  done
done
