#!/usr/bin/env python3
"""The accuracy study of the simulator against the published-run corpus: per family and overall,
at the presets' constants and cross-validated (each family predicted with the efficiency
constants chosen on the others), with a chart of the held-out errors.

    bench/accuracy.sh OUT        # runs simulate twice, then this script
    python3 bench/scripts/accuracy_report.py PRESETS.json CV.json OUT_DIR

PRESETS.json: `simulate --published validation/corpus/published_runs.json --json`
(schema trainplan.published_comparison/2). CV.json: the same with `--cross-validate`
(schema trainplan.cross_validation/1). Writes OUT_DIR/report.md, report.json and
held_out_by_family.svg. Errors are throughput errors: + when the prediction is faster than the
measurement (= measured / predicted step time - 1).
"""
import json
import sys
from pathlib import Path


def pct(x):
    return f"{100 * x:.1f}%"


def spct(x):
    return f"{100 * x:+.1f}%"


def stats_cell(s):
    if not s or s["runs"] == 0:
        return "-", "-", "-", "0"
    return pct(s["median_abs"]), pct(s["p90_abs"]), spct(s["mean_signed"]), str(s["runs"])


def chart(families, path):
    """Horizontal bars: each family's held-out signed mean error, with its median |error| as a
    tick; a plain SVG that opens offline."""
    row, left, width = 22, 430, 360
    scale = width / 2 / 1.0  # +-100% spans the plot
    height = row * (len(families) + 3)
    mid = left + width / 2
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + width + 40}" '
           f'height="{height}" font-family="sans-serif" font-size="11">',
           f'<text x="10" y="16" font-size="13">Held-out throughput error per family '
           f'(bar: signed mean, + = predicted faster; tick: median |error|)</text>']
    for k in (-1.0, -0.5, 0.0, 0.5, 1.0):
        x = mid + k * scale
        out.append(f'<line x1="{x}" y1="{row}" x2="{x}" y2="{height - row}" stroke="#ccc"/>')
        out.append(f'<text x="{x - 12}" y="{height - 6}">{int(k * 100):+d}%</text>')
    for i, f in enumerate(families):
        y = row * (i + 1) + 6
        t = f["throughput"]
        mean = max(-1.0, min(1.0, t["mean_signed"]))
        x0, x1 = sorted((mid, mid + mean * scale))
        colour = "#c0392b" if abs(t["mean_signed"]) > 0.15 else "#2e86c1"
        out.append(f'<text x="10" y="{y + 11}">{f["family"][:68]} ({t["runs"]})</text>')
        out.append(f'<rect x="{x0}" y="{y}" width="{max(x1 - x0, 1)}" height="14" '
                   f'fill="{colour}"/>')
        xm = mid + min(t["median_abs"], 1.0) * scale
        out.append(f'<line x1="{xm}" y1="{y - 2}" x2="{xm}" y2="{y + 16}" stroke="black" '
                   f'stroke-width="2"/>')
    out.append("</svg>")
    path.write_text("\n".join(out) + "\n", encoding="utf-8")


def main():
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    presets = json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))
    cv = json.loads(Path(sys.argv[2]).read_text(encoding="utf-8"))
    out = Path(sys.argv[3])
    out.mkdir(parents=True, exist_ok=True)
    if presets.get("schema") != "trainplan.published_comparison/2":
        print(f"{sys.argv[1]}: not a trainplan.published_comparison/2 report", file=sys.stderr)
        return 2
    if cv.get("schema") != "trainplan.cross_validation/1":
        print(f"{sys.argv[2]}: not a trainplan.cross_validation/1 report", file=sys.stderr)
        return 2
    at_presets = {f["family"]: f for f in presets["summary"]["by_family"]}
    folds = {f["family"]: f for f in cv["folds"]}

    def rounded(value):
        return round(value, 2) if isinstance(value, float) else value

    def gemm_of(point):
        # "gemm_share" (a share of each part's achievable matmul rate) since 2026-11-25;
        # "gemm_efficiency" (one fraction of peak for every part) in earlier studies.
        return rounded(point.get("gemm_share", point.get("gemm_efficiency", "-")))

    lines = ["| family (source / framework / GPU) | runs | presets: median, p90, mean | "
             "cross-validated: median, p90, mean | chosen gemm share, memory | memory: median, mean (n) |",
             "|---|---:|---|---|---|---|"]
    for f in cv["by_family"]:
        p = at_presets.get(f["family"], {}).get("throughput")
        pm, pp, ps, _ = stats_cell(p)
        m, q, s, n = stats_cell(f["throughput"])
        mm, _, ms, mn = stats_cell(f["memory"])
        fold = folds.get(f["family"], {})
        lines.append(f"| {f['family']} | {n} | {pm}, {pp}, {ps} | {m}, {q}, {s} | "
                     f"{gemm_of(fold)}, {rounded(fold.get('memory_efficiency', '-'))} | "
                     + (f"{mm}, {ms} ({mn})" if mn != "0" else "-") + " |")
    t, mem = cv["throughput"], cv["memory"]
    pt = cv["presets"]["throughput"]
    fa = cv["fit_all"]
    summary = [
        f"- **Cross-validated (the headline):** median {pct(t['median_abs'])}, p90 "
        f"{pct(t['p90_abs'])}, mean {spct(t['mean_signed'])} over {t['runs']} runs.",
        f"- Memory where published, held out: median {pct(mem['median_abs'])}, mean "
        f"{spct(mem['mean_signed'])} over {mem['runs']} runs.",
        f"- For comparison only: the presets' constants {pct(pt['median_abs'])} / "
        f"{pct(pt['p90_abs'])} / {spct(pt['mean_signed'])}; one fit over every run (gemm share "
        f"{gemm_of(fa)}, memory {fa['memory_efficiency']}) "
        f"{pct(fa['throughput']['median_abs'])} / {pct(fa['throughput']['p90_abs'])} / "
        f"{spct(fa['throughput']['mean_signed'])}.",
        f"- Runs in the corpus: {presets['summary']['runs']}; simulated: "
        f"{presets['summary']['simulated']}.",
    ]
    # The folds' order (validation/accuracy.cc Score): the family-weighted mean |error|.
    surface = sorted(cv.get("objective_surface", []),
                     key=lambda s: (s["weighted_mean_abs"], s["weighted_median_abs"]))
    if surface:
        summary.append(
            "- The folds' objective over every run (family-weighted mean |error|; the weighted "
            "median and p90 beside it), best five grid points: " +
            "; ".join(
                f"({gemm_of(s)}, {rounded(s['memory_efficiency'])}) "
                f"mean {pct(s['weighted_mean_abs'])} (median {pct(s['weighted_median_abs'])}, "
                f"p90 {pct(s['weighted_p90_abs'])})"
                for s in surface[:5]) + ".")
    (out / "report.md").write_text(
        "# Accuracy against the published-run corpus\n\nMade by `bench/accuracy.sh`; see "
        "NOTES.md for what changed and why.\n\n" + "\n".join(summary) + "\n\n" +
        "\n".join(lines) + "\n\n![held-out error per family](held_out_by_family.svg)\n",
        encoding="utf-8")
    (out / "report.json").write_text(json.dumps(
        {"schema": "trainplan.accuracy_report/1", "cross_validated": cv["throughput"],
         "memory": cv["memory"], "presets": cv["presets"], "fit_all": cv["fit_all"],
         "by_family": cv["by_family"], "folds": cv["folds"],
         "runs": presets["summary"]["runs"], "simulated": presets["summary"]["simulated"]},
        indent=1) + "\n", encoding="utf-8")
    chart(cv["by_family"], out / "held_out_by_family.svg")
    print("\n".join(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
