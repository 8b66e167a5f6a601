#!/usr/bin/env bash
# End-to-end tests of issue 24 through the tools: the default batch and --tokens-per-step, the
# usual layout and --baseline beside the pick, "nothing fits" naming its cause, simulate's
# over-capacity warning (stderr, JSON, exit 4), the offline HTML pictures, streamed traces
# refused over their limit without leaving a file, --threads giving byte-identical output, and
# the tiny model's default plan executed in seconds.
# Usage: recommend_cli_test.sh TOOLS_DIR SOURCE_DIR   (registered with CTest by CMakeLists.txt)
set -u
tools="$1"; src="$2"
source "$(dirname "${BASH_SOURCE[0]}")/expect.sh"
check() {  # DESCRIPTION -- command... (succeeds)
  local what="$1"; shift 2
  if "$@"; then passed=$((passed + 1)); else echo "FAIL: $what"; failures=$((failures + 1)); fi
}

plan="$tools/plan"; simulate="$tools/simulate"; execute="$tools/execute"
tiny="$src/models/tiny.json"; l70="$src/models/llama3-70b.json"

# 1. The batch: a default that follows the scale, said with its source; tokens per step.
expect 0 "Batch:   16 sequences (1024 tokens)" -- "$plan" --model "$tiny" --gpus 8 --quiet
expect 0 "one sequence per 8 GPUs, or per TP group" -- "$plan" --model "$tiny" --gpus 8 --quiet
expect 0 "Batch:   4096 sequences (262144 tokens)" -- "$plan" --model "$tiny" --gpus 16384 --top 1 --simulate-top 0 --quiet
expect 0 "Batch:   64 sequences (4096 tokens)" -- "$plan" --model "$tiny" --gpus 8 --tokens-per-step 4096 --quiet
expect 2 "--global-batch and --tokens-per-step cannot be combined" -- "$plan" --model "$tiny" --gpus 8 --global-batch 8 --tokens-per-step 4096
expect 2 "--tokens-per-step: 10 tokens is less than one sequence of 64 tokens" -- "$plan" --model "$tiny" --gpus 8 --tokens-per-step 10
expect 2 "--tokens-per-step: 'many'" -- "$plan" --model "$tiny" --gpus 8 --tokens-per-step many

# 2. The usual layout beside the pick; the user's baseline in the same table.
expect 0 "The usual layout (tp=8 pp=1 dp=8 zero=1" -- "$plan" --model "$l70" --gpus 64 --quiet
expect 0 " usual " -- "$plan" --model "$l70" --gpus 64 --quiet
expect 0 "the expected error (" -- "$plan" --model "$l70" --gpus 64 --quiet
printf '{"tp": 8, "pp": 2, "dp": 4, "zero_stage": 1, "micro_batch_size": 1, "global_batch_size": 256, "schedule": "1f1b", "sequence_parallel": true}' > "$tmp/base.json"
expect 0 "Your baseline (tp=8 pp=2 dp=4 zero=1" -- "$plan" --model "$l70" --gpus 64 --baseline "$tmp/base.json" --quiet
expect 0 '"label": "baseline"' -- "$plan" --model "$l70" --gpus 64 --baseline "$tmp/base.json" --json
printf '{"tp": "eight", "pp": 2, "dp": 4, "global_batch_size": 256}' > "$tmp/badfield.json"
expect 3 "field 'tp'" -- "$plan" --model "$l70" --gpus 64 --baseline "$tmp/badfield.json"
expect 6 "--baseline: cannot read" -- "$plan" --model "$l70" --gpus 64 --baseline "$tmp/absent.json"
printf '{"tp": 8, "pp": 2, "dp": 4, "micro_batch_size": 1, "global_batch_size": 512}' > "$tmp/batch.json"
expect 2 "global_batch_size 512 differs from the batch searched (256 sequences)" -- "$plan" --model "$l70" --gpus 64 --baseline "$tmp/batch.json"
printf '{"tp": 8, "pp": 2, "dp": 2, "micro_batch_size": 1, "global_batch_size": 256}' > "$tmp/world.json"
expect 4 "--baseline '$tmp/world.json'" -- "$plan" --model "$l70" --gpus 64 --baseline "$tmp/world.json"
printf '{"tp": 1, "pp": 1, "dp": 64, "micro_batch_size": 4, "global_batch_size": 256}' > "$tmp/oom.json"
expect 0 "Your baseline does not fit: tp=1 pp=1 dp=64" -- "$plan" --model "$l70" --gpus 64 --baseline "$tmp/oom.json" --quiet

# 3. Memory overflows said plainly.
expect 0 "The cause is model states" -- "$plan" --model "$src/models/gpt3.json" --gpus 32 --quiet
printf '{"tp": 8, "pp": 1, "dp": 1, "micro_batch_size": 6, "global_batch_size": 6}' > "$tmp/over.json"
expect 4 "over the GPU's 80.0 GB capacity; the largest part is activations" -- "$simulate" --model "$src/models/llama3-8b.json" --gpus 8 --plan "$tmp/over.json"
"$simulate" --model "$src/models/llama3-8b.json" --gpus 8 --plan "$tmp/over.json" --json >"$tmp/over.out" 2>/dev/null
check "simulate --json lists memory_warnings" -- grep -q '"memory_warnings"' "$tmp/over.out"
printf '{"tp": 8, "pp": 1, "dp": 1, "micro_batch_size": 1, "global_batch_size": 1}' > "$tmp/fits.json"
expect 0 "step time" -- "$simulate" --model "$src/models/llama3-8b.json" --gpus 8 --plan "$tmp/fits.json"
expect 0 "over the GPU's 7.2 GB usable" -- "$simulate" --model "$src/models/llama3-8b.json" --gpus 8 --plan "$tmp/fits.json" --memory-headroom 0.91

# 4. Pictures that open offline; traces refused over their limit, no file left behind.
"$plan" --model "$tiny" --gpus 8 --emit-plan "$tmp/tiny.plan.json" --quiet >/dev/null
expect 0 "step time" -- "$simulate" --model "$tiny" --gpus 8 --plan "$tmp/tiny.plan.json" --html "$tmp/step.html"
expect 0 "Recommendation" -- "$plan" --model "$l70" --gpus 64 --html "$tmp/plan.html" --quiet
for f in "$tmp/step.html" "$tmp/plan.html"; do
  check "$f is a document" -- grep -q '</html>' "$f"
  check "$f has no script" -- bash -c "! grep -q '<script' '$f'"
  check "$f names no URL but the SVG namespace" -- bash -c "! grep -o 'http[s]*://[^\"]*' '$f' | grep -v 'www.w3.org/2000/svg' | grep -q ."
done
check "plan.html marks the pick and the usual layout" -- grep -q '>usual</text>' "$tmp/plan.html"
feasible=$("$plan" --model "$l70" --gpus 64 --json --quiet | python3 -c "import json,sys; print(json.load(sys.stdin)['search']['feasible'])")
check "plan.html plots all $feasible feasible candidates" -- grep -q "Candidates: all $feasible the search found feasible" "$tmp/plan.html"
check "plan.html draws them as dots" -- test "$(grep -o 'r="2" fill="#bbbbbb"' "$tmp/plan.html" | wc -l)" -gt 100
check "plan.html marks the ties" -- grep -q 'fill="#CC79A7" fill-opacity="0.85"><title>' "$tmp/plan.html"
expect 2 "the Chrome trace would be about" -- "$simulate" --model "$l70" --gpus 64 --plan "$tmp/base.json" --all-ranks --trace "$tmp/big.trace.json" --trace-limit-gb 0.01
check "a refused trace leaves no file" -- bash -c "! ls '$tmp' | grep -q big.trace"
expect 0 "step time" -- "$simulate" --model "$tiny" --gpus 8 --plan "$tmp/tiny.plan.json" --all-ranks --trace "$tmp/t.json"
check "the streamed trace is JSON" -- python3 -c "import json,sys; json.load(open(sys.argv[1]))" "$tmp/t.json"

# 5. Threads change nothing in the output.
"$simulate" --model "$l70" --gpus 64 --plan "$tmp/base.json" --all-ranks --json --threads 1 >"$tmp/s1.json" 2>/dev/null
"$simulate" --model "$l70" --gpus 64 --plan "$tmp/base.json" --all-ranks --json --threads 0 >"$tmp/s0.json" 2>/dev/null
check "simulate --all-ranks: 1 thread and all cores byte-identical" -- cmp -s "$tmp/s1.json" "$tmp/s0.json"
for t in 1 0; do
  "$simulate" --model "$tiny" --gpus 8 --plan "$tmp/tiny.plan.json" --all-ranks --threads $t \
    --trace "$tmp/trace$t.json" --html "$tmp/step$t.html" >/dev/null 2>&1
done
check "simulate --all-ranks --trace: 1 thread and all cores byte-identical" -- cmp -s "$tmp/trace1.json" "$tmp/trace0.json"
check "simulate --all-ranks --html: 1 thread and all cores byte-identical" -- cmp -s "$tmp/step1.html" "$tmp/step0.html"
"$plan" --model "$l70" --gpus 64 --json --threads 1 >"$tmp/p1.json" 2>/dev/null
"$plan" --model "$l70" --gpus 64 --json --threads 0 >"$tmp/p0.json" 2>/dev/null
check "plan: 1 thread and all cores byte-identical" -- cmp -s "$tmp/p1.json" "$tmp/p0.json"
expect 0 "simulate: operations played" -- "$simulate" --model "$l70" --gpus 64 --plan "$tmp/base.json" --all-ranks --progress
expect 0 "plan: simulating the best candidates 1/" -- "$plan" --model "$tiny" --gpus 8 --progress
"$plan" --model "$tiny" --gpus 8 --quiet >/dev/null 2>"$tmp/quiet.err"
check "--quiet: nothing on stderr" -- test ! -s "$tmp/quiet.err"

# The tiny model's default plan runs in seconds (it held 32,768 sequences per step before).
if [ -x "$execute" ] && command -v mpirun >/dev/null; then
  # The CPU executor computes in fp32.
  "$plan" --model "$tiny" --gpus 2 --gpus-per-node 2 --gpu A100-80GB --precision fp32 \
    --emit-plan "$tmp/t2.json" --quiet >/dev/null
  start=$(date +%s)
  expect 0 "" -- timeout 60 mpirun --oversubscribe --allow-run-as-root --mca btl_vader_single_copy_mechanism none -np 2 "$execute" --model "$tiny" --plan "$tmp/t2.json" --steps 2 --random-tokens --out "$tmp/exec.json"
  check "execute of the default tiny plan took under 30 s" -- test $(( $(date +%s) - start )) -lt 30
fi

echo "recommend_cli_test: $passed passed, $failures failed"
[ "$failures" -eq 0 ]
