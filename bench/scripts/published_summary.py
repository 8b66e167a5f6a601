#!/usr/bin/env python3
"""Summarise `simulate --published FILE --json` by source: runs, median and largest absolute
error of each run's headline figure (its first throughput figure, as a throughput error:
positive when the prediction is faster than the measurement), and memory.

    ./build/tools/simulate --published validation/corpus/published_runs.json --cross-validate > r.json
    python3 bench/scripts/published_summary.py r.json      # markdown table on stdout

Groups are listed in file order; entries not simulated are counted per group.
"""
import json
import re
import statistics
import sys


def group_of(run_id: str) -> str:
    """The source of a run from its id: the first field ('mpt', 'llama3', 'bloom176b'), with a
    table ('t2') and a scheme ('zero3', 'ptdp') or a sub-source ('docs', 'trainy') after it."""
    parts = run_id.split("_")
    group = parts[:1]
    for p in parts[1:3]:
        if re.fullmatch(r"t\d+", p) or p in ("zero3", "ptdp", "docs", "trainy"):
            group.append(p)
        else:
            break
    return "_".join(group)


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    with open(sys.argv[1], encoding="utf-8") as f:
        report = json.load(f)
    groups: dict[str, dict] = {}
    for run in report["runs"]:
        g = groups.setdefault(group_of(run["id"]), {"head": [], "mem": [], "skipped": 0})
        if "error" in run:
            g["skipped"] += 1
            continue
        metrics = run.get("metrics", [])
        if "headline_throughput_error" in run:
            g["head"].append(run["headline_throughput_error"])
        g["mem"] += [m["error"] for m in metrics if m["name"] == "memory_gb"]
    print("| source group | simulated | not simulated | median abs error | largest abs error |"
          " signed median (+: predicted faster) | memory median abs error |")
    print("|---|---|---|---|---|---|---|")
    for name, g in groups.items():
        h = [abs(e) for e in g["head"]]
        cells = [name, str(len(h)), str(g["skipped"])]
        if h:
            cells += [f"{100 * statistics.median(h):.1f}%", f"{100 * max(h):.1f}%",
                      f"{100 * statistics.median(g['head']):+.1f}%"]
        else:
            cells += ["-", "-", "-"]
        cells.append(f"{100 * statistics.median(abs(e) for e in g['mem']):.1f}%" if g["mem"] else "-")
        print("| " + " | ".join(cells) + " |")
    s = report["summary"]
    print(f"\nAll: {s['simulated']} of {s['runs']} runs simulated; median absolute headline error "
          f"{100 * s['headline_median_abs_error']:.1f}%; memory {100 * s['memory_median_abs_error']:.1f}%.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
