#!/usr/bin/env python3
"""The report of bench/scripts/executor_cpu_speed.sh: OUT/rounds.json -> OUT/report.md and
OUT/tokens_per_s.svg.

  executor_cpu_speed_report.py OUT STEPS WARMUP LOAD...

rounds.json lists {round, implementation, tokens_per_s[, last_loss]}. Per implementation the
report gives the median tokens/s over the rounds and two paired ratios, each the median over
rounds of a ratio taken within one round (a busy machine slows a round's runs alike): the
implementation against PyTorch, and the first `execute` row (one thread) against the
implementation, the issue's "`execute` relative to it". LOAD: the 1-minute load averages
sampled before each round and after the last, reported as their range. The chart draws each
implementation's median tokens/s as a bar and every round as a dot on it, so a busy machine's
spread is visible beside the medians.
Tested by tests/bench/speed_report_test.py.
"""
import html
import json
import statistics
import sys


def paired_ratio(rounds, numerator, denominator):
    """Median over rounds holding both of numerator's tokens/s / denominator's."""
    by_round = {}
    for r in rounds:
        by_round.setdefault(r["round"], {})[r["implementation"]] = r["tokens_per_s"]
    ratios = [v[numerator] / v[denominator] for v in by_round.values()
              if numerator in v and denominator in v]
    return statistics.median(ratios) if ratios else None


def fmt_ratio(value):
    return "—" if value is None else f"{value:.2f}x"


def table(rounds):
    names = list(dict.fromkeys(r["implementation"] for r in rounds))
    executes = [n for n in names if n.startswith("execute")]
    if not executes or "pytorch" not in names:
        raise SystemExit("executor_cpu_speed_report: rounds.json needs an execute row and a pytorch row")
    lines = ["| implementation | median tokens/s | paired ratio to PyTorch | "
             f"`{executes[0]}` relative to it |", "|---|---:|---:|---:|"]
    for n in names:
        median = statistics.median(r["tokens_per_s"] for r in rounds if r["implementation"] == n)
        to_torch = paired_ratio(rounds, n, "pytorch")
        execute_to_n = None if n == executes[0] else paired_ratio(rounds, executes[0], n)
        lines.append(f"| {n} | {median:,.0f} | {fmt_ratio(to_torch)} | {fmt_ratio(execute_to_n)} |")
    return "\n".join(lines)


def svg_chart(rounds):
    """Median tokens/s per implementation (bars) with each round's figure (dots), as SVG text."""
    names = list(dict.fromkeys(r["implementation"] for r in rounds))
    top = max(r["tokens_per_s"] for r in rounds) * 1.1
    bar_px, gap_px, left_px, plot_h_px = 60, 40, 60, 220
    width_px = left_px + len(names) * (bar_px + gap_px) + gap_px
    height_px = plot_h_px + 90

    def y(value):
        return 20 + plot_h_px * (1 - value / top)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width_px}" height="{height_px}" '
           'font-family="sans-serif" font-size="11">',
           f'<text x="{left_px}" y="12">tokens/s per implementation: median (bar), rounds (dots)</text>',
           f'<line x1="{left_px}" y1="{y(0):.1f}" x2="{width_px - 10}" y2="{y(0):.1f}" stroke="black"/>']
    for i, name in enumerate(names):
        values = [r["tokens_per_s"] for r in rounds if r["implementation"] == name]
        x = left_px + gap_px + i * (bar_px + gap_px)
        median = statistics.median(values)
        out.append(f'<rect x="{x}" y="{y(median):.1f}" width="{bar_px}" height="{y(0) - y(median):.1f}" '
                   'fill="#6b9bd1"/>')
        out += [f'<circle cx="{x + bar_px / 2}" cy="{y(v):.1f}" r="3" fill="black"/>' for v in values]
        out.append(f'<text x="{x}" y="{y(median) - 4:.1f}">{median:,.0f}</text>')
        for k, word in enumerate(name.replace(",", "").split()[:4]):
            out.append(f'<text x="{x}" y="{y(0) + 14 + 12 * k:.1f}">{html.escape(word)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main():
    out, steps, warmup = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    loads = [float(x) for x in sys.argv[4:]]
    rounds = json.load(open(f"{out}/rounds.json"))
    count = len({r["round"] for r in rounds})
    text = (f"{count} paired rounds of {steps} steps (median step after {warmup} warm-up steps); "
            "4 layers, hidden 256, 4 heads, sequence 128, micro-batch 8, fp32, AdamW.\n"
            + (f"Load average (1 min) before the rounds and after: {min(loads):.1f} to {max(loads):.1f}.\n"
               if loads else "") + "\n" + table(rounds) + "\n")
    llmc_losses = [r["last_loss"] for r in rounds if "last_loss" in r]
    if llmc_losses:
        text += f"\nllm.c's loss at its last step: {', '.join(f'{x:.3f}' for x in llmc_losses)}.\n"
    text += "\n![tokens/s](tokens_per_s.svg)\n"
    open(f"{out}/report.md", "w").write(text)
    open(f"{out}/tokens_per_s.svg", "w").write(svg_chart(rounds))
    print(text)


if __name__ == "__main__":
    main()
