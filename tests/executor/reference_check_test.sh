#!/usr/bin/env bash
# The executor against the independent PyTorch GPT (bench/scripts/reference_check.py) on the
# tiny model: one rank, 4 sequences of 64 bytes of the shipped corpus, step 1's logits, loss
# and every gradient within the script's fp32 tolerances, then the loss curve of 20 steps with a
# 5-step learning-rate warm-up (--lr-warmup, against torch's LambdaLR); then that a 1% error planted
# in one gradient of the dump fails the check (the tolerances are tight enough to matter). The
# same for the MoE test model (router, routed and shared experts, the load-balancing loss).
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
# The check on a spoiled dump must fail, naming the gradient it catches.
# Usage: expect_fails PREFIX GRADIENT WHAT
expect_fails() {
  if "$python" "$src/bench/scripts/reference_check.py" --prefix "$1" \
       --data "$src/data/kjv-genesis.txt" > "$1.txt"; then
    echo "reference_check_test: $3 was not caught"; exit 1
  fi
  grep -q "gradient $2:" "$1.txt" || { cat "$1.txt"; exit 1; }
  echo "reference_check_test: $3 is caught"
}
# The check must catch a defect of 1%: scale one gradient tensor of a dump by 1.01 and expect a
# FAIL naming it. Usage: expect_caught PREFIX TENSOR
expect_caught() {
  "$python" - "$1" "$2" <<'PY'
import json, shutil, struct, sys
import numpy as np
prefix, name = sys.argv[1], sys.argv[2]
blob = bytearray(open(prefix + ".step1.tpt", "rb").read())
(n,) = struct.unpack("<Q", blob[8:16])
t = next(t for t in json.loads(blob[16:16 + n])["tensors"] if t["name"] == "grad." + name)
data = np.frombuffer(blob, dtype="<f4", offset=16 + n).copy()
count = int(np.prod(t["shape"]))
data[t["offset"]:t["offset"] + count] *= 1.01
open(prefix + "-defect.step1.tpt", "wb").write(bytes(blob[:16 + n]) + data.tobytes())
shutil.copy(prefix + ".init.tpt", prefix + "-defect.init.tpt")
PY
  expect_fails "$1-defect" "$2" "a 1% error in grad.$2"
}
expect_caught "$out/reference" h0.w1

# The MoE model (tests/executor/models/tiny-moe.json: a dense first layer, then 4 experts top-2
# with a shared expert) in two micro-batches, so that each has its own load-balancing loss.
"${mpirun[@]}" -np 1 "$execute" --model "$src/tests/executor/models/tiny-moe.json" \
  --plan "$src/tests/executor/plans/moe_reference.json" --steps 20 --seed 1234 --lr-warmup 5 \
  --data "$src/data/kjv-genesis.txt" --out "$out/moe.json" --dump-reference "$out/moe"
"$python" "$src/bench/scripts/reference_check.py" --prefix "$out/moe" \
  --data "$src/data/kjv-genesis.txt" --executor-report "$out/moe.json"
# A defect in the router's gradient (through the gates and the load-balancing loss) and in one
# routed expert's.
expect_caught "$out/moe" h1.router
expect_caught "$out/moe" h2.e3.w2
# And the load-balancing loss must matter: the same dump checked as if its coefficient were 0
# (the reference then leaves the loss out) fails.
"$python" - "$out/moe" <<'PY'
import json, shutil, struct, sys
prefix = sys.argv[1]
blob = open(prefix + ".init.tpt", "rb").read()
(n,) = struct.unpack("<Q", blob[8:16])
header = json.loads(blob[16:16 + n])
header["meta"]["router_aux_loss_coef"] = 0.0
text = json.dumps(header).encode()
open(prefix + "-noaux.init.tpt", "wb").write(blob[:8] + struct.pack("<Q", len(text)) + text +
                                             blob[16 + n:])
shutil.copy(prefix + ".step1.tpt", prefix + "-noaux.step1.tpt")
PY
expect_fails "$out/moe-noaux" h1.router "leaving the load-balancing loss out"
