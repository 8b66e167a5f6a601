#!/usr/bin/env python3
"""Before/after at the presets' constants: two outputs of `simulate --published FILE --json`
(no cross-validation), per family (median |error|, mean signed error of the headline
throughput metric; memory where published) and every run whose error moved by 0.05 points or
more. Writes OUT/presets_compare.md. For a study whose cross-validated run could not be made
(a loaded machine); the headline stays the cross-validated one (accuracy_report.py).

Usage: presets_compare.py BEFORE.json AFTER.json OUT
Run by hand in a study (see its NOTES.md); no test: it only formats two outputs.
"""
import json
import statistics
import sys
from pathlib import Path


def load(path):
    runs = {}
    for r in json.loads(Path(path).read_text())["runs"]:
        f = r.get("family") or {}
        family = " / ".join(str(f.get(k, "?")) for k in ("source", "framework", "gpu_generation"))
        mem = [m["error"] for m in r.get("metrics", []) if m.get("name") == "memory_gb"]
        runs[r["id"]] = (family, r.get("headline_throughput_error"), mem[0] if mem else None)
    return runs


def stats(errors):
    errors = [e for e in errors if e is not None]
    if not errors:
        return "-"
    return (f"{100 * statistics.median(abs(e) for e in errors):.1f}%, "
            f"{100 * statistics.mean(errors):+.1f}% ({len(errors)})")


def main():
    if len(sys.argv) != 4:
        sys.exit("usage: presets_compare.py BEFORE.json AFTER.json OUT")
    before, after = load(sys.argv[1]), load(sys.argv[2])
    out = Path(sys.argv[3])
    out.mkdir(parents=True, exist_ok=True)
    ids = [i for i in before if i in after]
    families = sorted({before[i][0] for i in ids})
    lines = ["# Presets' constants, before and after (no cross-validation)", "",
             f"Runs in both: {len(ids)}.", "",
             "| family | throughput before: median, mean (n) | after | memory before | after |",
             "|---|---|---|---|---|"]
    for fam in families:
        sel = [i for i in ids if before[i][0] == fam]
        cells = [stats(before[i][1] for i in sel), stats(after[i][1] for i in sel),
                 stats(before[i][2] for i in sel), stats(after[i][2] for i in sel)]
        if all(c == "-" for c in cells):
            continue  # runs not simulated
        if cells[0] != cells[1] or cells[2] != cells[3]:
            fam = f"**{fam}**"
        lines.append(f"| {fam} | " + " | ".join(cells) + " |")
    for name, idx in (("throughput", 1), ("memory", 2)):
        b = [before[i][idx] for i in ids if before[i][idx] is not None]
        a = [after[i][idx] for i in ids if after[i][idx] is not None]
        lines.append("")
        lines.append(f"All runs, {name}: median |error| {100 * statistics.median(abs(e) for e in b):.2f}% "
                     f"-> {100 * statistics.median(abs(e) for e in a):.2f}%, mean "
                     f"{100 * statistics.mean(b):+.2f}% -> {100 * statistics.mean(a):+.2f}% "
                     f"({len(b)} / {len(a)} runs)")
    lines += ["", "Runs that moved:", "", "| run | family | throughput before | after | memory before | after |",
              "|---|---|---:|---:|---:|---:|"]
    pct = lambda e: "" if e is None else f"{100 * e:+.1f}%"
    for i in ids:
        fb, tb, mb = before[i]
        _, ta, ma = after[i]
        moved = lambda x, y: x is not None and y is not None and abs(x - y) >= 5e-4
        if moved(tb, ta) or moved(mb, ma):
            lines.append(f"| {i} | {fb} | {pct(tb)} | {pct(ta)} | {pct(mb)} | {pct(ma)} |")
    (out / "presets_compare.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
