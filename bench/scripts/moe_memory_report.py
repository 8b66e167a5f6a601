#!/usr/bin/env python3
"""The MoE memory study's report (bench/scripts/moe_memory_study.sh): per plan and rank, the
peak resident memory `execute` measured (VmHWM) against `simulate`'s per-rank peak and its
parts, at micro-batch 2 and 4, and the difference between the two micro-batch sizes on both
sides (activations only: the fixed parts cancel).

  moe_memory_report.py OUT_DIR PLAN...

Writes OUT_DIR/report.md and OUT_DIR/memory.json.
"""
import json
import sys

MIB = 2.0 ** 20
PARTS = ("runtime_bytes", "weights_bytes", "gradients_bytes", "optimizer_bytes",
         "activations_bytes", "buffers_bytes")


def load(out, name, mbs):
    pred = json.load(open(f"{out}/{name}.mbs{mbs}.predicted.json"))
    meas = json.load(open(f"{out}/{name}.mbs{mbs}.measured.json"))
    rows = []
    for p, m in zip(pred["ranks"], meas["ranks"]):
        assert p["rank"] == m["rank"], (name, mbs)
        rows.append({"rank": p["rank"], "stage": p["stage"],
                     "parts": {k: p["memory"].get(k, 0.0) for k in PARTS},
                     "predicted": p["peak_memory_bytes"], "measured": m["peak_memory_bytes"]})
    return rows


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    out, plans = sys.argv[1], sys.argv[2:]
    data = {name: {mbs: load(out, name, mbs) for mbs in (2, 4)} for name in plans}
    json.dump(data, open(f"{out}/memory.json", "w"), indent=1)
    lines = ["| plan | micro-batch | rank | predicted: fixed + weights + grads + optimizer + "
             "activations (MiB) | predicted peak (MiB) | measured peak (MiB) | error |",
             "|---|---:|---:|---|---:|---:|---:|"]
    for name in plans:
        for mbs in (2, 4):
            for r in data[name][mbs]:
                p = r["parts"]
                parts = " + ".join(f"{p[k] / MIB:.1f}" for k in PARTS[:5])
                if p["buffers_bytes"]:
                    parts += f" + {p['buffers_bytes'] / MIB:.1f} buffers"
                err = (r["predicted"] - r["measured"]) / r["measured"] * 100
                lines.append(f"| {name} | {mbs} | {r['rank']} | {parts} | "
                             f"{r['predicted'] / MIB:.1f} | {r['measured'] / MIB:.1f} | "
                             f"{err:+.1f}% |")
    lines += ["", "Micro-batch 4 less micro-batch 2 (the activations of two more sequences; "
              "the fixed parts cancel):", "",
              "| plan | rank | predicted (MiB) | measured (MiB) | predicted / measured |",
              "|---|---:|---:|---:|---:|"]
    for name in plans:
        for r2, r4 in zip(data[name][2], data[name][4]):
            dp = (r4["predicted"] - r2["predicted"]) / MIB
            dm = (r4["measured"] - r2["measured"]) / MIB
            ratio = f"{dp / dm:.2f}" if dm > 0 else "-"
            lines.append(f"| {name} | {r2['rank']} | {dp:.1f} | {dm:.1f} | {ratio} |")
    text = "\n".join(lines) + "\n"
    open(f"{out}/report.md", "w").write(text)
    print(text)


if __name__ == "__main__":
    main()
