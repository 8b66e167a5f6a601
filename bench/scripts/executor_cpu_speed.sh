#!/usr/bin/env bash
# Tokens/s of `execute` (one rank, one thread) against PyTorch on one thread, same GPT, same
# batches, paired: each round runs every implementation once, back to back, so that a busy
# machine slows them alike. The shape is issue 28's (4 layers, hidden 256, 4 heads, sequence
# 128, micro-batch 8, fp32, AdamW); PyTorch trains the executor's own initial weights
# (execute --dump-reference) with bench/scripts/reference_check.py --time-steps.
#
#   bench/scripts/executor_cpu_speed.sh BUILD_DIR OUT_DIR [ROUNDS=5] [STEPS=12] [EXTRA_EXECUTE...]
#
# EXTRA_EXECUTE: more `execute` binaries to pair (e.g. one built with -DTRAINPLAN_ARCH=portable),
# labelled by their path. Writes OUT_DIR/rounds.json (every round) and OUT_DIR/report.md (median
# tokens/s per implementation and the ratio to PyTorch), and prints the report.
# PyTorch is Debian's python3-torch; its matrix products go to the system BLAS, so install
# libopenblas0-pthread (the issue's PyTorch figures are on OpenBLAS); OPENBLAS_NUM_THREADS=1.
set -euo pipefail
build="$1" out="$2" rounds="${3:-5}" steps="${4:-12}"
shift $(( $# < 4 ? $# : 4 ))
root="$(cd "$(dirname "$0")/../.." && pwd)"
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
echo '{"tp": 1, "pp": 1, "dp": 1, "micro_batch_size": 8, "global_batch_size": 8, "precision": "fp32"}' \
  > "$out/plan.json"
data="$root/data/kjv-genesis.txt"
mpirun=(mpirun --oversubscribe --allow-run-as-root --mca btl_vader_single_copy_mechanism none -np 1)
executes=("$build/tools/execute" "$@")
common=(--model "$out/model.json" --plan "$out/plan.json" --data "$data" --seed 1234)
"${mpirun[@]}" "${executes[0]}" "${common[@]}" --steps 1 --warmup 0 --out "$out/dump.json" \
  --dump-reference "$out/weights" >/dev/null
echo "[" > "$out/rounds.json"
for r in $(seq 1 "$rounds"); do
  for exe in "${executes[@]}"; do
    "${mpirun[@]}" "$exe" "${common[@]}" --steps "$steps" --warmup 2 --out "$out/execute.json" >/dev/null
    tps=$("$python" -c "import json,sys; print(json.load(open(sys.argv[1]))['tokens_per_s'])" "$out/execute.json")
    echo "  {\"round\": $r, \"implementation\": \"execute $exe\", \"tokens_per_s\": $tps}," >> "$out/rounds.json"
  done
  tps=$("$python" "$root/bench/scripts/reference_check.py" --prefix "$out/weights" --data "$data" \
        --time-steps "$steps" | "$python" -c "import json,sys; print(json.load(sys.stdin)['tokens_per_s'])")
  sep=$([ "$r" = "$rounds" ] && echo "" || echo ",")
  echo "  {\"round\": $r, \"implementation\": \"pytorch\", \"tokens_per_s\": $tps}$sep" >> "$out/rounds.json"
  echo "round $r/$rounds done" >&2
done
echo "]" >> "$out/rounds.json"
"$python" - "$out" <<'EOF'
import json, statistics, sys, torch
out = sys.argv[1]
rounds = json.load(open(f"{out}/rounds.json"))
names = list(dict.fromkeys(r["implementation"] for r in rounds))
med = {n: statistics.median(r["tokens_per_s"] for r in rounds if r["implementation"] == n)
       for n in names}
ratio = {n: statistics.median(a["tokens_per_s"] / b["tokens_per_s"] for a in rounds for b in rounds
                              if a["implementation"] == n and b["implementation"] == "pytorch"
                              and a["round"] == b["round"]) for n in names}
lines = ["| implementation | median tokens/s | paired ratio to PyTorch (median) |", "|---|---:|---:|"]
lines += [f"| {n} | {med[n]:,.0f} | {ratio[n]:.2f}x |" for n in names]
text = (f"{len(set(r['round'] for r in rounds))} paired rounds, one thread each, PyTorch "
        f"{torch.__version__}; 4 layers, hidden 256, 4 heads, sequence 128, micro-batch 8, fp32, AdamW.\n\n"
        + "\n".join(lines) + "\n")
open(f"{out}/report.md", "w").write(text)
print(text)
EOF
