#!/usr/bin/env python3
"""The MoE reference study's report: where the executor's and PyTorch's routings first differ
and what follows from it (bench/scripts/executor_reference_study.sh with REFERENCE_MODEL=moe,
which runs reference_check.py --routing both per seed).

  reference_check_moe_report.py OUT_DIR SEED...

Reads OUT_DIR/seed-S/curves.json (and curves-skip-idle.json: the reference as it ran before
2026-11-25, idle experts left out of AdamW) and writes OUT_DIR/report-moe.md (one row per seed:
the first differently routed token with both sides' top-k gaps, how far the free curves agree
before it and where they part, the replayed curve, and both again with idle experts skipped)
and OUT_DIR/curves.svg (per seed, the |executor - torch| loss difference per step, free and
replayed, on a log scale, with the step of the first routing difference marked).
"""
import json
import math
import sys

FLOOR = 1e-7  # the chart's lowest difference (an exact match would have no logarithm)


def first_above(diffs, limit):
    return next((i + 1 for i, d in enumerate(diffs) if d > limit), None)


def row(seed, c, skip):
    e, free, replay = c["executor"], c["torch_free"], c["torch_replay"]
    d_free = [abs(a - b) for a, b in zip(e, free)]
    d_replay = [abs(a - b) for a, b in zip(e, replay)]
    first = c["routing_free"]["first"]
    rp = c["routing_replay"]
    if first is None:
        where = "none"
        before = max(d_free)
        gaps = "-"
    else:
        where = (f"step {first['step']}, MoE layer {first['moe_layer']}, micro-batch "
                 f"{first['micro_batch']}, token {first['token']}: executor "
                 f"{first['executor_experts']}, torch {first['torch_experts']}")
        before = max(d_free[:first["step"]])
        gaps = (f"{first['executor_gap']:.1e} / {first['torch_gap']:.1e} "
                f"({first['row_prob_diff']:.1e})")
    return (f"| {seed} | {where} | {gaps} | {before:.1e} | {first_above(d_free, 1e-3)} | "
            f"{max(d_free):.4f} | {sum(rp['differing_per_step'])} | {rp['violations']} | "
            f"{max(rp['prob_diff']):.1e} | {max(d_replay):.4f} | "
            f"{e[-1]:.4f} / {replay[-1]:.4f} / {free[-1]:.4f} | "
            f"{max(abs(a - b) for a, b in zip(e, skip['torch_free'])):.4f} | "
            f"{first_above([abs(a - b) for a, b in zip(e, skip['torch_free'])], 1e-3)} | "
            f"{max(abs(a - b) for a, b in zip(e, skip['torch_replay'])):.4f} |")


def svg_chart(curves):
    """Per seed, log10 |executor - torch| per step: free (dashed) and replayed (solid)."""
    w, h, left, top, plot_w, plot_h = 760, 360, 60, 20, 660, 290
    steps = max(len(c["executor"]) for c in curves.values())
    lo, hi = math.log10(FLOOR), 0.0
    colours = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"]

    def xy(i, d):
        y = (math.log10(max(d, FLOOR)) - lo) / (hi - lo)
        return left + plot_w * i / max(steps - 1, 1), top + plot_h * (1 - min(y, 1.0))

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
           f'font-family="sans-serif" font-size="11">',
           f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="none" '
           f'stroke="#888"/>']
    for p in range(int(lo), 1):
        _, y = xy(0, 10.0 ** p)
        out.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">1e{p}</text>')
        out.append(f'<line x1="{left}" x2="{left + plot_w}" y1="{y:.1f}" y2="{y:.1f}" '
                   f'stroke="#eee"/>')
    for s in range(0, steps + 1, 10):
        x, _ = xy(max(s - 1, 0), 1)
        out.append(f'<text x="{x:.1f}" y="{top + plot_h + 14}" text-anchor="middle">'
                   f'{max(s, 1)}</text>')
    out.append(f'<text x="{left + plot_w / 2}" y="{h - 6}" text-anchor="middle">step: '
               f'|executor - torch| loss, dashed torch routing freely, solid replaying at '
               f'near-ties; vertical: first routing difference</text>')
    for n, (seed, c) in enumerate(sorted(curves.items())):
        colour = colours[n % len(colours)]
        for key, dash in (("torch_free", ' stroke-dasharray="4 3"'), ("torch_replay", "")):
            pts = " ".join("%.1f,%.1f" % xy(i, abs(a - b))
                           for i, (a, b) in enumerate(zip(c["executor"], c[key])))
            out.append(f'<polyline points="{pts}" fill="none" stroke="{colour}"{dash}/>')
        first = c["routing_free"]["first"]
        if first is not None:
            x, _ = xy(first["step"] - 1, 1)
            out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top}" y2="{top + plot_h}" '
                       f'stroke="{colour}" stroke-width="0.6"/>')
        out.append(f'<text x="{left + 8}" y="{top + 14 + 13 * n}" fill="{colour}">seed {seed}'
                   f'</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    out, seeds = sys.argv[1], sys.argv[2:]
    curves = {s: json.load(open(f"{out}/seed-{s}/curves.json")) for s in seeds}
    skip = {s: json.load(open(f"{out}/seed-{s}/curves-skip-idle.json")) for s in seeds}
    rows = ["| seed | first differently routed token | its top-k gap, executor / torch (the two "
            "sides' probability difference there) | free curves: max diff through that step | "
            "free curves: first step above 1e-3 | free curves: max diff | tokens replayed | "
            "beyond the tolerance | router probabilities apart, replayed (max) | replayed "
            "curves: max diff | loss at step 50: executor / replayed / free | idle experts "
            "skipped (as before): free max diff | its first step above 1e-3 | replayed max "
            "diff |",
            "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|"]
    rows += [row(s, curves[s], skip[s]) for s in seeds]
    text = "\n".join(rows) + "\n"
    open(f"{out}/report-moe.md", "w").write(text)
    open(f"{out}/curves.svg", "w").write(svg_chart(curves))
    print(text)


if __name__ == "__main__":
    main()
