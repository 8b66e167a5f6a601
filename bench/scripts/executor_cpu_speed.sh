#!/usr/bin/env bash
# Tokens/s of `execute` (one rank) against PyTorch and llm.c's CPU trainer on one thread, same
# GPT shape, paired: each round runs every implementation once, back to back, so that a busy
# machine slows them alike. The shape is issue 28's (4 layers, hidden 256, 4 heads, sequence
# 128, micro-batch 8, fp32, AdamW).
#   - PyTorch trains the executor's own initial weights (execute --dump-reference) on the same
#     batches, with bench/scripts/reference_check.py --time-steps.
#   - llm.c: train_gpt2.c from the checkout LLMC_SRC names, patched in a temporary folder (data
#     and checkpoint paths, B, T, step count; its validation and sampling turned off) and built
#     at -Ofast with OpenMP (as llm.c's Makefile) and the -march of the build's TRAINPLAN_ARCH,
#     run with OMP_NUM_THREADS=1 on a random checkpoint and the corpus as tokens, both written
#     by bench/scripts/llmc_inputs.py. Its figure is its own printed step time. Nothing of llm.c
#     is downloaded or kept: without LLMC_SRC the row is skipped, with a line saying so.
#
#   [LLMC_SRC=DIR|FILE] [EXECUTE_THREADS="1 2"] \
#     bench/scripts/executor_cpu_speed.sh BUILD_DIR OUT_DIR [ROUNDS=5] [STEPS=12] [EXTRA_EXECUTE...]
#
# LLMC_SRC: an llm.c checkout (a folder with train_gpt2.c and llmc/), its train_gpt2.c, or a bare
# git clone of it (read with git archive). EXECUTE_THREADS: the --threads values to run the
# first `execute` with (default "1"); each is a row. EXTRA_EXECUTE: more `execute` binaries
# (e.g. one built with -DTRAINPLAN_ARCH=portable), one thread, labelled by their path.
# Writes OUT_DIR/rounds.json (every round), OUT_DIR/llmc.log (llm.c's last output) and
# OUT_DIR/report.md (median tokens/s, the paired ratio to PyTorch and execute's ratio to each,
# the load average; bench/scripts/executor_cpu_speed_report.py), and prints the report.
# PyTorch is Debian's python3-torch on libopenblas0-pthread; OPENBLAS_NUM_THREADS=1.
# Its input errors and helpers are tested by tests/bench/speed_report_test.py; the study it
# wrote last is bench/results/executor-cpu-speed-2026-11-25/.
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: executor_cpu_speed.sh BUILD_DIR OUT_DIR [ROUNDS] [STEPS] [EXTRA_EXECUTE...]" >&2; exit 2; }
build="$1" out="$2" rounds="${3:-5}" steps="${4:-12}"
shift $(( $# < 4 ? $# : 4 ))
root="$(cd "$(dirname "$0")/../.." && pwd)"
threads_list="${EXECUTE_THREADS:-1}"
warmup=2 sequences=8 seq_len=128

# The llm.c source: a folder holding train_gpt2.c and llmc/, or empty when LLMC_SRC is unset.
llmc_source() {
  local src="$1" tmp="$2"
  [ -f "$src" ] && [ "$(basename "$src")" = train_gpt2.c ] && src="$(dirname "$src")"
  if [ -d "$src" ] && [ -f "$src/HEAD" ] && [ -d "$src/objects" ]; then
    mkdir -p "$tmp/llmc-src"
    git --git-dir="$src" archive HEAD train_gpt2.c llmc | tar -x -C "$tmp/llmc-src" 2>/dev/null \
      || { echo "executor_cpu_speed: LLMC_SRC=$1: a git directory without train_gpt2.c and llmc/ at HEAD" >&2; return 1; }
    src="$tmp/llmc-src"
  fi
  if [ ! -f "$src/train_gpt2.c" ] || [ ! -f "$src/llmc/dataloader.h" ]; then
    echo "executor_cpu_speed: LLMC_SRC=$1 is not an llm.c checkout (no train_gpt2.c with llmc/dataloader.h beside it)" >&2
    return 1
  fi
  echo "$src"
}

for t in $threads_list; do
  [[ "$t" =~ ^[1-9][0-9]*$ ]] || { echo "executor_cpu_speed: EXECUTE_THREADS holds '$t', not a positive integer" >&2; exit 1; }
done
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
llmc_src=""
if [ -n "${LLMC_SRC:-}" ]; then
  llmc_src="$(llmc_source "$LLMC_SRC" "$work")" || exit 1
else
  echo "executor_cpu_speed: LLMC_SRC is not set, skipping the llm.c row (point it at an llm.c checkout to include it)" >&2
fi
data="$root/data/kjv-genesis.txt"

# llm.c's train_gpt2.c, patched (bench/scripts/llmc_patch.py) and built in the temporary folder,
# and its inputs (bench/scripts/llmc_inputs.py).
build_llmc() {
  python3 "$root/bench/scripts/llmc_patch.py" "$llmc_src/train_gpt2.c" "$work/train_gpt2.c"
  local arch march=()
  arch="$(sed -n 's/^TRAINPLAN_ARCH:[A-Z]*=//p' "$build/CMakeCache.txt")"
  case "${arch:-native}" in portable) ;; *) march=("-march=${arch:-native}") ;; esac
  cc -Ofast "${march[@]}" -fopenmp -DOMP -DLLMC_B="$sequences" -DLLMC_T="$seq_len" \
     -DLLMC_STEPS="$steps" -Wno-unused-result -I "$llmc_src" "$work/train_gpt2.c" -lm \
     -o "$work/llmc_train"
  python3 "$root/bench/scripts/llmc_inputs.py" --layers 4 --hidden 256 --heads 4 \
    --seq-len "$seq_len" --corpus "$data" --checkpoint "$work/llmc.bin" --tokens "$work/llmc_tokens.bin"
  echo "llm.c: built with -Ofast ${march[*]} -fopenmp from $llmc_src" >&2
}
[ -z "$llmc_src" ] || build_llmc

python=""
for p in python3 /usr/bin/python3; do
  if command -v "$p" >/dev/null && "$p" -c "import torch" 2>/dev/null; then python="$p"; break; fi
done
[ -n "$python" ] || { echo "executor_cpu_speed: needs python3 with PyTorch (apt-get install python3-torch)" >&2; exit 1; }
mkdir -p "$out"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1

cat > "$out/model.json" <<'EOF'
{"name": "issue 28 speed shape", "source": "bench/scripts/executor_cpu_speed.sh",
 "num_layers": 4, "hidden_size": 256, "num_attention_heads": 4, "ffn_hidden_size": 1024,
 "vocab_size": 256, "seq_len": 128, "tie_word_embeddings": true, "activation": "gelu",
 "norm": "layernorm", "position_embedding": "learned", "bias": true, "dropout": false}
EOF
echo "{\"tp\": 1, \"pp\": 1, \"dp\": 1, \"micro_batch_size\": $sequences, \"global_batch_size\": $sequences, \"precision\": \"fp32\"}" \
  > "$out/plan.json"
# --bind-to none: PyTorch and llm.c are not pinned either, and --threads 2 needs two cores.
mpirun=(mpirun --oversubscribe --allow-run-as-root --mca btl_vader_single_copy_mechanism none
        --bind-to none -np 1)
executes=("$build/tools/execute" "$@")
common=(--model "$out/model.json" --plan "$out/plan.json" --data "$data" --seed 1234)

# llm.c's median step time after the warm-up steps, as tokens/s, from its "step N: ... (took X ms)".
run_llmc() {
  LLMC_CHECKPOINT="$work/llmc.bin" LLMC_TOKENS="$work/llmc_tokens.bin" "$work/llmc_train" \
    > "$out/llmc.log"
  "$python" - "$out/llmc.log" "$warmup" $((sequences * seq_len)) <<'EOF'
import re, statistics, sys
steps = [(float(loss), float(ms)) for loss, ms in
         re.findall(r"^step \d+: train loss ([-\d.naif]+) \(took ([\d.]+) ms\)", open(sys.argv[1]).read(), re.M)]
timed = steps[int(sys.argv[2]):]
if not timed:
    sys.exit(f"executor_cpu_speed: llm.c printed {len(steps)} step lines; see its log")
print(int(sys.argv[3]) * 1000.0 / statistics.median(ms for _, ms in timed), steps[-1][0])
EOF
}

record() {  # round, implementation, tokens/s [, last loss]
  local extra=""; [ -n "${4:-}" ] && extra=", \"last_loss\": $4"
  echo "  {\"round\": $1, \"implementation\": \"$2\", \"tokens_per_s\": $3$extra}," >> "$out/rounds.jsonl"
}

run_execute() {  # binary, threads (--threads only when > 1: EXTRA_EXECUTE may predate it)
  local threads=(); [ "$2" = 1 ] || threads=(--threads "$2")
  "${mpirun[@]}" "$1" "${common[@]}" "${threads[@]}" --steps "$steps" --warmup "$warmup" \
    --out "$out/execute.json" >/dev/null
  "$python" -c "import json,sys; print(json.load(open(sys.argv[1]))['tokens_per_s'])" "$out/execute.json"
}

"${mpirun[@]}" "${executes[0]}" "${common[@]}" --steps 1 --warmup 0 --out "$out/dump.json" \
  --dump-reference "$out/weights" >/dev/null
: > "$out/rounds.jsonl"
loads=()
for r in $(seq 1 "$rounds"); do
  loads+=("$(cut -d' ' -f1 /proc/loadavg)")
  for t in $threads_list; do
    tps=$(run_execute "${executes[0]}" "$t"); record "$r" "execute ${executes[0]}, $t thread(s)" "$tps"
  done
  for exe in "${executes[@]:1}"; do tps=$(run_execute "$exe" 1); record "$r" "execute $exe, 1 thread(s)" "$tps"; done
  tps=$("$python" "$root/bench/scripts/reference_check.py" --prefix "$out/weights" --data "$data" \
        --time-steps "$steps" | "$python" -c "import json,sys; print(json.load(sys.stdin)['tokens_per_s'])")
  record "$r" "pytorch" "$tps"
  if [ -n "$llmc_src" ]; then res=$(run_llmc); read -r tps loss <<< "$res"; record "$r" "llm.c" "$tps" "$loss"; fi
  echo "round $r/$rounds done" >&2
done
loads+=("$(cut -d' ' -f1 /proc/loadavg)")
{ echo "["; sed '$ s/,$//' "$out/rounds.jsonl"; echo "]"; } > "$out/rounds.json"
rm -f "$out/rounds.jsonl"
"$python" "$root/bench/scripts/executor_cpu_speed_report.py" "$out" "$steps" "$warmup" "${loads[@]}"
