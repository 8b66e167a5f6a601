#!/usr/bin/env bash
# The executor against the independent PyTorch GPT (bench/scripts/reference_check.py) on the
# tiny model: one rank, 4 sequences of 64 bytes of the shipped corpus, step 1's logits, loss
# and every gradient within the script's fp32 tolerances, then the loss curve of 20 steps with a
# 5-step learning-rate warm-up (--lr-warmup, against torch's LambdaLR).
# Exits 77 (CTest: skipped, with the reason) when no python3 with PyTorch is installed
# (python3-torch; scripts/setup.sh installs it with TRAINPLAN_REFERENCE_DEPS=1).
# Usage: reference_check_test.sh MPIRUN... -- EXECUTE SOURCE_DIR OUT_DIR
set -euo pipefail
mpirun=()
while [ "$1" != "--" ]; do mpirun+=("$1"); shift; done
shift
execute="$1" src="$2" out="$3"
python=""
for p in python3 /usr/bin/python3; do
  if command -v "$p" >/dev/null && "$p" -c "import torch" 2>/dev/null; then python="$p"; break; fi
done
if [ -z "$python" ]; then
  echo "reference_check_test: skipped: no python3 with PyTorch (apt-get install python3-torch)"
  exit 77
fi
mkdir -p "$out"
"${mpirun[@]}" -np 1 "$execute" --model "$src/models/tiny.json" \
  --plan "$src/tests/executor/plans/single.json" --steps 20 --seed 1234 --lr-warmup 5 \
  --data "$src/data/kjv-genesis.txt" --out "$out/reference.json" --dump-reference "$out/reference"
"$python" "$src/bench/scripts/reference_check.py" --prefix "$out/reference" \
  --data "$src/data/kjv-genesis.txt" --executor-report "$out/reference.json"
