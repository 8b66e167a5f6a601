#!/usr/bin/env python3
"""Report of bench/predicted_vs_measured.sh: reads DIR/runs/*.compare.json (schema
trainplan.compare/1) and DIR/profile.json; writes DIR/report.md, DIR/report.json and
DIR/step_time.svg (predicted against measured step time, drawn here without a plotting library).

    python3 bench/scripts/report.py bench/results/cpu-<date>
"""
import glob
import json
import os
import statistics
import sys

STEP_TARGET_PCT, MEDIAN_TARGET_PCT, MEMORY_TARGET_PCT = 15.0, 7.0, 10.0


def load_runs(out):
    runs = []
    for path in sorted(glob.glob(os.path.join(out, "runs", "*.compare.json"))):
        name = os.path.basename(path)[: -len(".compare.json")]
        cmp = json.load(open(path))
        if cmp.get("schema") != "trainplan.compare/1":
            sys.exit(f"report: {path}: field 'schema': expected trainplan.compare/1")
        plan = json.load(open(os.path.join(out, "runs", name + ".plan.json")))
        step = next(r for r in cmp["rows"] if r["quantity"] == "step_time")
        runs.append({
            "name": name,
            "ranks": plan["tp"] * plan["pp"] * plan["dp"],
            "plan": plan,
            "predicted_step_s": step["predicted"],
            "measured_step_s": step["measured"],
            "step_error_pct": cmp["step_time_error_pct"],
            "bytes_exact": cmp["bytes_exact"],
            "max_abs_memory_error_pct": cmp["max_abs_memory_error_pct"],
        })
    return runs


def svg_chart(runs):
    """Grouped horizontal bars: predicted and measured step time per plan, error on the right."""
    bar, gap, left, right, top = 9, 8, 130, 90, 40
    width = 760
    plot_w = width - left - right
    height = top + len(runs) * (2 * bar + gap) + 40
    vmax = max([r["predicted_step_s"] for r in runs] + [r["measured_step_s"] for r in runs]) * 1.05
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="11">',
           f'<text x="{left}" y="18" font-size="13">Step time: predicted (blue) vs measured '
           f'(orange), ms</text>']
    for i in range(6):  # grid and axis labels
        v = vmax * i / 5
        x = left + plot_w * i / 5
        out.append(f'<line x1="{x:.1f}" y1="{top - 8}" x2="{x:.1f}" y2="{height - 30}" '
                   f'stroke="#ddd"/>')
        out.append(f'<text x="{x:.1f}" y="{height - 16}" text-anchor="middle">{v * 1e3:.1f}</text>')
    y = top
    for r in runs:
        out.append(f'<text x="{left - 6}" y="{y + bar + 3}" text-anchor="end">{r["name"]}</text>')
        for value, colour in ((r["predicted_step_s"], "#4c78a8"), (r["measured_step_s"], "#f58518")):
            w = plot_w * value / vmax
            out.append(f'<rect x="{left}" y="{y}" width="{w:.1f}" height="{bar}" fill="{colour}"/>')
            y += bar
        err = r["step_error_pct"]
        colour = "#2a7" if abs(err) <= STEP_TARGET_PCT else "#c33"
        out.append(f'<text x="{width - right + 8}" y="{y - bar + 3}" fill="{colour}">'
                   f'{err:+.1f}%</text>')
        y += gap
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    runs = load_runs(out)
    if not runs:
        sys.exit(f"report: no runs/*.compare.json under {out}")
    profile = json.load(open(os.path.join(out, "profile.json")))
    errors = [abs(r["step_error_pct"]) for r in runs]
    summary = {
        "plans": len(runs),
        "max_abs_step_error_pct": max(errors),
        "median_abs_step_error_pct": statistics.median(errors),
        "plans_within_step_target": sum(e <= STEP_TARGET_PCT for e in errors),
        "bytes_exact_all": all(r["bytes_exact"] for r in runs),
        "max_abs_memory_error_pct": max(r["max_abs_memory_error_pct"] for r in runs),
    }
    summary["targets_met"] = {
        "every_step_within_15pct": summary["max_abs_step_error_pct"] <= STEP_TARGET_PCT,
        "median_within_7pct": summary["median_abs_step_error_pct"] <= MEDIAN_TARGET_PCT,
        "bytes_exact": summary["bytes_exact_all"],
        "memory_within_10pct": summary["max_abs_memory_error_pct"] <= MEMORY_TARGET_PCT,
    }
    report = {"schema": "trainplan.bench_predicted_vs_measured/1", "device": profile["device"],
              "date": profile["date"], "summary": summary, "runs": runs}
    with open(os.path.join(out, "report.json"), "w") as f:
        json.dump(report, f, indent=2)
    with open(os.path.join(out, "step_time.svg"), "w") as f:
        f.write(svg_chart(runs))
    yes = lambda b: "yes" if b else "**no**"
    t = summary["targets_met"]
    md = [f"# Predicted vs measured: {profile['device']}", "",
          f"Calibrated {profile['date']}; profile: `profile.json`, cluster: `cpu_cluster.json`; "
          f"raw tables: `calibrate.txt`. Per plan: `runs/NAME.{{plan,predicted,measured,compare}}.json`.",
          "", "![step time](step_time.svg)", "",
          "| plan | ranks | predicted (ms) | measured (ms) | error | bytes exact | peak memory max abs error |",
          "|---|---:|---:|---:|---:|:---:|---:|"]
    for r in runs:
        md.append(f"| {r['name']} | {r['ranks']} | {r['predicted_step_s'] * 1e3:.2f} | "
                  f"{r['measured_step_s'] * 1e3:.2f} | {r['step_error_pct']:+.1f}% | "
                  f"{yes(r['bytes_exact'])} | {r['max_abs_memory_error_pct']:.1f}% |")
    md += ["", "| target (issue 6) | figure | met |", "|---|---:|:---:|",
           f"| every plan's step time within 15% | max {summary['max_abs_step_error_pct']:.1f}% | {yes(t['every_step_within_15pct'])} |",
           f"| median step-time error within 7% | {summary['median_abs_step_error_pct']:.1f}% | {yes(t['median_within_7pct'])} |",
           f"| bytes per group exact | {'all' if summary['bytes_exact_all'] else 'not all'} | {yes(t['bytes_exact'])} |",
           f"| peak memory within 10% | max {summary['max_abs_memory_error_pct']:.1f}% | {yes(t['memory_within_10pct'])} |",
           ""]
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write("\n".join(md))
    print("\n".join(md))


if __name__ == "__main__":
    main()
