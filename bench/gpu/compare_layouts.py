#!/usr/bin/env python3
"""Several ranks against one: loss of every step and final float32 master weights of a
parallel layout (execute --backend cuda --params-out) against the single-rank run.

  python3 bench/gpu/compare_layouts.py REF.json REF_PARAMS_PREFIX RUN.json RUN_PARAMS_PREFIX NAME

Tolerances (stated and justified here; the run is bf16 on both sides):
  - loss: |loss - ref| <= 5e-3 * ref at every step. The layouts compute the same math in a
    different order: TP splits GEMM reductions and sums bf16 partial activations (one extra
    bf16 rounding, 2^-9 relative, per all-reduce), DP/ZeRO reduce bf16 gradients. After a few
    AdamW steps the weights differ by O(lr * rounding), which moves the loss (about log(256)
    = 5.5 for the tiny model) by far less than 5e-3 relative.
  - weights: max |w - ref| <= 2 * lr * steps = 2e-3 * steps. AdamW moves each weight by at most
    about lr per step whatever the gradient's size (its update is m / sqrt(v)), so the
    worst case of a gradient whose sign differs between layouts (tiny gradients, rounding) is
    2 * lr per step. An indexing or reduction bug moves weights by the same order in one step
    but shows as a relative L2 error across all weights, so also: ||w - ref|| / ||ref|| <= 1e-3.
Prints one line and exits 1 when any check fails.
"""
import glob
import json
import math
import sys


def load_params(prefix):
    out = {}
    for path in glob.glob(prefix + ".rank*.txt"):
        with open(path) as f:
            for line in f:
                name, r, c, v = line.split()
                key = (name, int(r), int(c))
                # Replicated values (DP copies, the tied table on two stages) must agree.
                if key in out and abs(out[key] - float(v)) > 1e-6:
                    raise SystemExit(f"{prefix}: ranks disagree on {key}: {out[key]} vs {v}")
                out[key] = float(v)
    return out


def main():
    ref_json, ref_prefix, run_json, run_prefix, name = sys.argv[1:6]
    ref, run = json.load(open(ref_json)), json.load(open(run_json))
    lr, steps = 1e-3, len(ref["loss_per_step"])
    problems = []
    worst_loss = 0.0
    for i, (a, b) in enumerate(zip(run["loss_per_step"], ref["loss_per_step"])):
        rel = abs(a - b) / abs(b)
        worst_loss = max(worst_loss, rel)
        if not math.isfinite(a) or rel > 5e-3:
            problems.append(f"step {i + 1} loss {a:.6f} vs {b:.6f}")
    if len(run["loss_per_step"]) != len(ref["loss_per_step"]):
        problems.append("different step counts")
    pr, pw = load_params(ref_prefix), load_params(run_prefix)
    missing = set(pr) - set(pw)
    if missing:
        problems.append(f"{len(missing)} weights missing, e.g. {sorted(missing)[0]}")
    num = den = worst = 0.0
    for k, v in pr.items():
        if k in pw:
            d = pw[k] - v
            num += d * d
            den += v * v
            worst = max(worst, abs(d))
    rel_l2 = math.sqrt(num / den) if den > 0 else math.sqrt(num)
    if worst > 2 * lr * steps:
        problems.append(f"max weight difference {worst:.2e} > {2 * lr * steps:.1e}")
    if rel_l2 > 1e-3:
        problems.append(f"weights rel L2 {rel_l2:.2e} > 1e-3")
    bytes_ok = ""
    got, want = run.get("bytes_sent_per_group_per_rank_last_step", {}), run.get(
        "predicted_bytes_per_group_per_rank", {})
    for g in ("tp", "pp", "dp"):
        if g in got and g in want and [round(x) for x in got[g]] != [round(x) for x in want[g]]:
            bytes_ok += f" {g}: sent {got[g]} predicted {want[g]};"
    status = "PASS" if not problems else "FAIL"
    print(f"{status} {name}: loss max rel {worst_loss:.2e}, weights max {worst:.2e} "
          f"rel L2 {rel_l2:.2e}" + ("; " + "; ".join(problems) if problems else "") +
          (f" | bytes differ from the cost model:{bytes_ok}" if bytes_ok else " | bytes = cost model"))
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
