#!/usr/bin/env bash
# Issue 28's "no allocation in the step": the heap allocations of a CPU training step, and the
# tokens/s of `execute` with and without them, paired. Each round runs the build's `execute` and
# the BEFORE binary once each, back to back, on issue 28's speed shape (4 layers, hidden 256, 4
# heads, sequence 128, micro-batch 8, fp32, AdamW, one rank, one thread: the shape of
# bench/scripts/executor_cpu_speed.sh, which also needs PyTorch); a busy machine slows both
# alike, so the paired ratio is the figure to read. The allocation counts are those
# tests/executor/step_allocations_test.cc prints (one rank, then 4 ranks under mpirun).
#
#   bench/scripts/executor_step_allocations.sh BUILD_DIR OUT_DIR BEFORE_EXECUTE [ROUNDS=5] [STEPS=12]
#
# Writes OUT_DIR/rounds.json (every round), OUT_DIR/allocations.txt (the test's lines) and
# OUT_DIR/report.md (median tokens/s of each, the median paired ratio, the load average before
# and after), and prints the report. Used for bench/results/executor-step-allocations/.
set -euo pipefail
[ $# -ge 3 ] || { echo "usage: executor_step_allocations.sh BUILD_DIR OUT_DIR BEFORE_EXECUTE [ROUNDS] [STEPS]" >&2; exit 2; }
build="$1" out="$2" before="$3" rounds="${4:-5}" steps="${5:-12}"
root="$(cd "$(dirname "$0")/../.." && pwd)"
after="$build/tools/execute" test_bin="$build/tests/executor/executor_step_allocations_test"
for f in "$after" "$before" "$test_bin"; do
  [ -x "$f" ] || { echo "executor_step_allocations: $f is not an executable" >&2; exit 1; }
done
warmup=2
mkdir -p "$out"
export OMP_NUM_THREADS=1
mpirun=(mpirun --oversubscribe --allow-run-as-root --mca btl_vader_single_copy_mechanism none)

cat > "$out/model.json" <<'EOF'
{"name": "issue 28 speed shape", "source": "bench/scripts/executor_step_allocations.sh",
 "num_layers": 4, "hidden_size": 256, "num_attention_heads": 4, "ffn_hidden_size": 1024,
 "vocab_size": 256, "seq_len": 128, "tie_word_embeddings": true, "activation": "gelu",
 "norm": "layernorm", "position_embedding": "learned", "bias": true, "dropout": false}
EOF
echo '{"tp": 1, "pp": 1, "dp": 1, "micro_batch_size": 8, "global_batch_size": 8, "precision": "fp32"}' \
  > "$out/plan.json"

run() {  # binary -> tokens/s and peak resident bytes from its report
  "${mpirun[@]}" -np 1 "$1" --model "$out/model.json" --plan "$out/plan.json" \
    --data "$root/data/kjv-genesis.txt" --seed 1234 --steps "$steps" --warmup "$warmup" \
    --out "$out/execute.json" >/dev/null
  python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(r['tokens_per_s'])" "$out/execute.json"
}

{
  "$test_bin" --gtest_filter='StepAllocations.*' | grep -E '^rank'
  "${mpirun[@]}" -np 4 "$test_bin" --gtest_filter='StepAllocationsMpi.*' | grep -E '^rank 0'
} > "$out/allocations.txt"

load_before="$(cut -d' ' -f1 /proc/loadavg)"
echo "[" > "$out/rounds.json"
for r in $(seq 1 "$rounds"); do
  a=$(run "$after"); b=$(run "$before")
  sep=","; [ "$r" = "$rounds" ] && sep=""
  echo "  {\"round\": $r, \"after\": $a, \"before\": $b}$sep" >> "$out/rounds.json"
  echo "round $r/$rounds: after $a, before $b tokens/s" >&2
done
echo "]" >> "$out/rounds.json"
load_after="$(cut -d' ' -f1 /proc/loadavg)"

python3 - "$out" "$rounds" "$steps" "$load_before" "$load_after" "$before" <<'EOF' | tee "$out/report.md"
import json, statistics, sys
out, rounds, steps, l0, l1, before = sys.argv[1:]
rs = json.load(open(f"{out}/rounds.json"))
med = lambda xs: statistics.median(xs)
after_tps = med([r["after"] for r in rs]); before_tps = med([r["before"] for r in rs])
ratio = med([r["after"] / r["before"] for r in rs])
steady = [l for l in open(f"{out}/allocations.txt") if ", step 3:" in l]
print("# Heap allocations per step and tokens/s, with and without them\n")
print(f"{rounds} paired rounds of {steps} steps (2 warm-up), issue 28's shape, one rank, one thread;")
print(f"load average {l0} before, {l1} after (2 shared cores).\n")
print("| execute | median tokens/s |\n|---|---:|")
print(f"| this build (no allocation in the step) | {after_tps:,.0f} |")
print(f"| before (`{before}`) | {before_tps:,.0f} |")
print(f"\nMedian paired ratio (this build / before): {ratio:.3f}.\n")
print("Allocations in step 3 (tests/executor/step_allocations_test.cc; under mpirun, rank 0):\n")
for l in steady:
    print("    " + l.strip())
EOF
