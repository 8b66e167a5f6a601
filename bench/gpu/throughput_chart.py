#!/usr/bin/env python3
"""MFU of the CUDA executor next to PyTorch's, per model, from run_all.sh's throughput JSONs
(NAME.json and NAME.torch.json, or copies named throughput-NAME[.torch].json) in a folder.

  python3 bench/gpu/throughput_chart.py bench/results/gpu-2026-12-04  # writes throughput.svg
"""
import glob
import json
import os
import sys


def main():
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    d = sys.argv[1]
    pairs = []
    for ours in sorted(glob.glob(os.path.join(d, "*.json"))):
        torch = ours[:-5] + ".torch.json"
        if ours.endswith(".torch.json") or not os.path.exists(torch):
            continue
        a, b = json.load(open(ours)), json.load(open(torch))
        pairs.append((a["model"], a["mfu"], a["tokens_per_s"], b["mfu"], b["tokens_per_s"]))
    if not pairs:
        raise SystemExit(f"throughput_chart: no NAME.json with NAME.torch.json in {d}")
    w, bar, gap, top = 560, 22, 18, 40
    h = top + len(pairs) * (2 * bar + gap) + 30
    scale = (w - 240) / max(max(p[1], p[3]) for p in pairs)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
           'font-family="sans-serif" font-size="12">',
           f'<text x="10" y="20" font-size="14">MFU on one GPU: trainplan (CUDA executor) and '
           'PyTorch</text>']
    y = top
    for model, m1, t1, m2, t2 in pairs:
        for label, m, t, colour in (("trainplan", m1, t1, "#4878d0"), ("PyTorch", m2, t2, "#ee854a")):
            out.append(f'<text x="10" y="{y + 15}">{model}, {label}</text>')
            out.append(f'<rect x="170" y="{y}" width="{m * scale:.1f}" height="{bar - 4}" '
                       f'fill="{colour}"/>')
            out.append(f'<text x="{175 + m * scale:.1f}" y="{y + 15}">{100 * m:.1f}% '
                       f'({t / 1e3:.0f}k tok/s)</text>')
            y += bar
        y += gap
    out.append("</svg>")
    with open(os.path.join(d, "throughput.svg"), "w") as f:
        f.write("\n".join(out) + "\n")
    print(os.path.join(d, "throughput.svg"))


if __name__ == "__main__":
    main()
