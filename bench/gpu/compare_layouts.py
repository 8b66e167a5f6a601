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
    The first GPU run (bench/results/gpu-2026-12-04/) put that 1e-3 at the noise floor: DP 2,
    whose math differs from one rank's only in the order of a bf16 gradient sum, measured
    9.3e-4, and TP 2 2.3e-3 with every loss within 2.6e-5. So with FLOOR_JSON FLOOR_PARAMS_PREFIX
    (one rank, the same global batch in four micro-batches instead of two: the same math with
    the sums in another order, run_all.sh's `single_m4`), the bound becomes
    max(1e-3, 3 * floor), floor being that run's relative L2 against REF. Why 3: AdamW's first
    steps move each weight by about +-lr whatever the gradient's size, so rounding differences
    show only where a tiny gradient changes sign, a fraction f of the weights, and the L2
    difference grows as sqrt(f); an extra bf16 rounding per TP all-reduce at most doubles f
    (sqrt 2 in L2), and 3 leaves room for that. An indexing or reduction bug changes the sign
    of about half the updates: f near 0.5 instead of a few per mille, an L2 difference ten
    times larger or more (for the tiny model, about 2.5e-2). Set before the second GPU run.
Bytes: the executor reports the tied embedding's gradient sum as its own group, `embedding`;
the cost model counts it with pp (comm_volume_on_stage; simulator/program.h's ReportGroup), so
it is added to pp before the comparison.
Prints one line and exits 1 when any check fails.

  python3 bench/gpu/compare_layouts.py REF.json REF_PARAMS RUN.json RUN_PARAMS NAME \
      [FLOOR.json FLOOR_PARAMS]
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


def difference(ref, run):
    """Relative L2 difference over the weights both hold, and the largest absolute one."""
    num = den = worst = 0.0
    for k, v in ref.items():
        if k in run:
            d = run[k] - v
            num += d * d
            den += v * v
            worst = max(worst, abs(d))
    return (math.sqrt(num / den) if den > 0 else math.sqrt(num)), worst


def moved_fraction(ref, run, threshold):
    """The fraction of shared weights that differ by more than `threshold`: with AdamW, the
    updates that rounding turned (a sign flip moves a weight by up to 2 lr a step). Reported
    beside the L2 check, not a bound: the H200 run of 2026-12-04 (second lease) measured
    0.02% (one rank, four micro-batches), 0.11% (PP), 0.22% (DP, ZeRO) and 0.47% (TP) at lr/4,
    where an indexing or reduction bug turns about half (bench/results/gpu-2026-12-04b)."""
    keys = [k for k in ref if k in run]
    return sum(1 for k in keys if abs(run[k] - ref[k]) > threshold) / max(1, len(keys))


def main():
    if len(sys.argv) not in (6, 8):
        raise SystemExit(__doc__)
    ref_json, ref_prefix, run_json, run_prefix, name = sys.argv[1:6]
    floor_prefix = sys.argv[7] if len(sys.argv) == 8 else None
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
    rel_l2, worst = difference(pr, pw)
    if worst > 2 * lr * steps:
        problems.append(f"max weight difference {worst:.2e} > {2 * lr * steps:.1e}")
    bound, floor_note = 1e-3, ""
    if floor_prefix is not None:
        floor, _ = difference(pr, load_params(floor_prefix))
        bound = max(bound, 3 * floor)
        floor_note = f" (floor {floor:.2e}, bound {bound:.2e})"
    if rel_l2 > bound:
        problems.append(f"weights rel L2 {rel_l2:.2e} > {bound:.2e}")
    bytes_ok = ""
    got = dict(run.get("bytes_sent_per_group_per_rank_last_step", {}))
    want = run.get("predicted_bytes_per_group_per_rank", {})
    if "embedding" in got:
        emb = got.pop("embedding")
        got["pp"] = [a + b for a, b in zip(got.get("pp", [0.0] * len(emb)), emb)]
    for g in ("tp", "pp", "dp"):
        if g in got and g in want and [round(x) for x in got[g]] != [round(x) for x in want[g]]:
            bytes_ok += f" {g}: sent {got[g]} predicted {want[g]};"
    status = "PASS" if not problems else "FAIL"
    moved = moved_fraction(pr, pw, lr / 4)
    print(f"{status} {name}: loss max rel {worst_loss:.2e}, weights max {worst:.2e} "
          f"rel L2 {rel_l2:.2e}{floor_note}, moved > lr/4 {100 * moved:.2f}%" + ("; " + "; ".join(problems) if problems else "") +
          (f" | bytes differ from the cost model:{bytes_ok}" if bytes_ok else " | bytes = cost model"))
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
