#!/usr/bin/env python3
"""PyTorch against itself: the reference GPT of reference_check.py trained twice from the
executor's initial weights (execute --dump-reference PREFIX), once as dumped and once with
every weight multiplied by 1 + 2^-23 (one float32 ulp), over STEPS steps of the same batches.
How far the two loss curves part is how far rounding alone, applied once, moves them: a floor
for the executor-against-PyTorch curves of bench/results/executor-reference-moe/.

  /usr/bin/python3 bench/scripts/reference_check_nudge.py PREFIX CORPUS [STEPS]   (default 50)

Prints one JSON line: the largest |difference|, its step, the first step above 1e-3, and both
curves' last losses.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference_check as rc  # noqa: E402 (exits 77 without torch)

import torch  # noqa: E402


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    prefix, data = sys.argv[1], sys.argv[2]
    steps = int(sys.argv[3]) if len(sys.argv) == 4 else 50
    torch.set_num_threads(1)
    meta, weights = rc.read_tensors(prefix + ".init.tpt")
    with open(data, "rb") as f:
        corpus = f.read()
    a, _ = rc.loss_curve(rc.Gpt(meta, weights), corpus, meta["seed"], steps, meta["lr"])
    nudged = {k: v * (1 + 2.0 ** -23) for k, v in weights.items()}
    b, _ = rc.loss_curve(rc.Gpt(meta, nudged), corpus, meta["seed"], steps, meta["lr"])
    diffs = [abs(x - y) for x, y in zip(a, b)]
    first = next((i + 1 for i, d in enumerate(diffs) if d > 1e-3), None)
    print(json.dumps({"prefix": prefix, "max_diff": max(diffs),
                      "at": diffs.index(max(diffs)) + 1, "first_above_1e-3": first,
                      "last": [a[-1], b[-1]]}))


if __name__ == "__main__":
    main()
