#!/usr/bin/env bash
# One unit convention across the tools (issue 24, item 6): everything `plan` and `simulate`
# write for a person or a program (the report, the JSON, the emitted plan, the Chrome trace,
# the HTML picture, warnings on stderr, "nothing fits" with host memory and NVMe) labels
# memory and traffic in GB (10^9 bytes), never GiB, MiB or TiB, and the cluster they echo says
# host memory in GB too.
# Usage: units_cli_test.sh TOOLS_DIR SOURCE_DIR   (registered with CTest by CMakeLists.txt)
set -u
tools="$1"; src="$2"
source "$(dirname "${BASH_SOURCE[0]}")/expect.sh"
plan="$tools/plan"; simulate="$tools/simulate"
tiny="$src/models/tiny.json"; l70="$src/models/llama3-70b.json"; l405="$src/models/llama3-405b.json"

# Runs a command (it must exit with CODE), keeps stdout and stderr in OUT_DIR/NAME.
run() {  # NAME CODE -- command...
  local name="$1" code="$2"; shift 3
  "$@" >"$tmp/$name.out" 2>"$tmp/$name.err"
  local rc=$?
  if [ "$rc" != "$code" ]; then
    echo "FAIL: $name: $* exited $rc (want $code)"; head -5 "$tmp/$name.err"
    failures=$((failures + 1))
  else
    passed=$((passed + 1))
  fi
}
run plan_text 0 -- "$plan" --model "$l70" --gpus 64 --emit-plan "$tmp/l70.plan.json" \
  --html "$tmp/plan.html" --quiet
run plan_json 0 -- "$plan" --model "$l70" --gpus 64 --json --quiet
# Nothing fits on 8 GPUs: the sentences on model states, host memory and NVMe.
run plan_nothing_fits 0 -- "$plan" --model "$l405" --gpus 8 --simulate-top 0 --quiet
run plan_nothing_fits_json 0 -- "$plan" --model "$l405" --gpus 8 --simulate-top 0 --json --quiet
run simulate_text 0 -- "$simulate" --model "$l70" --gpus 64 --plan "$tmp/l70.plan.json" \
  --trace "$tmp/sim.trace.json" --html "$tmp/sim.html" --quiet
run simulate_json 0 -- "$simulate" --model "$l70" --gpus 64 --plan "$tmp/l70.plan.json" --json --quiet
# Over capacity: the warning on stderr names its sizes.
printf '{"tp": 1, "pp": 1, "dp": 8, "micro_batch_size": 1, "global_batch_size": 8}' >"$tmp/over.json"
run simulate_over 4 -- "$simulate" --model "$l70" --gpus 8 --plan "$tmp/over.json" --quiet

for f in "$tmp"/*.out "$tmp"/*.err "$tmp"/*.json "$tmp"/*.html; do
  if grep -qE 'GiB|MiB|TiB|KiB' "$f"; then
    echo "FAIL: $(basename "$f") labels a binary unit: $(grep -oE '.{0,30}(GiB|MiB|TiB|KiB).{0,10}' "$f" | head -3)"
    failures=$((failures + 1))
  else
    passed=$((passed + 1))
  fi
done
# Each human output says GB, and the figures are there to say it about.
for name in plan_text plan_nothing_fits simulate_text; do
  if grep -q ' GB' "$tmp/$name.out"; then passed=$((passed + 1)); else
    echo "FAIL: $name says no GB"; failures=$((failures + 1)); fi
done
expect 0 "GB" -- cat "$tmp/simulate_over.err"
expect 0 '"host_memory_GB_per_node"' -- cat "$tmp/plan_json.out"
expect 0 '"memory GB"' -- cat "$tmp/sim.trace.json"

echo "units_cli_test: $passed passed, $failures failed"
[ "$failures" -eq 0 ]
