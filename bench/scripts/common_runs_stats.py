#!/usr/bin/env python3
"""Overall headline-throughput error at the presets' constants, before and after a change, over
every run each side simulated and over the runs both sides simulated (so that runs a change lets
in, or leaves out, do not move the comparison): median |error|, p90 |error| (nearest rank, as
validation/accuracy.cc) and mean signed error (+ = predicted faster); then every run that only
one side simulated, and every run whose error moved by 0.05 points or more.

Usage: common_runs_stats.py BEFORE.json AFTER.json
  BEFORE.json / AFTER.json: outputs of `simulate --published FILE --json`.
Run by hand in a study (bench/results/published-2026-12-02-moe/NOTES.md); no test: it only
formats two outputs.
"""
import json
import math
import statistics
import sys
from pathlib import Path


def errors(path):
    runs = json.loads(Path(path).read_text(encoding="utf-8"))["runs"]
    return {r["id"]: r["headline_throughput_error"] for r in runs
            if r.get("headline_throughput_error") is not None}


def stats(values):
    values = list(values)
    if not values:
        return "-"
    a = sorted(abs(v) for v in values)
    p90 = a[max(0, math.ceil(0.9 * len(a)) - 1)]
    return (f"{100 * statistics.median(a):.2f}% / {100 * p90:.2f}% / "
            f"{100 * sum(values) / len(values):+.2f}% over {len(values)} runs")


def main(argv):
    if len(argv) != 3:
        sys.exit(__doc__)
    before, after = errors(argv[1]), errors(argv[2])
    both = sorted(set(before) & set(after))
    print(f"- every run simulated: before {stats(before.values())}; after {stats(after.values())}")
    print(f"- the runs both sides simulated: before {stats(before[i] for i in both)}; "
          f"after {stats(after[i] for i in both)}")
    for i in sorted(set(after) - set(before)):
        print(f"- only after: {i} {100 * after[i]:+.1f}%")
    for i in sorted(set(before) - set(after)):
        print(f"- only before: {i} {100 * before[i]:+.1f}%")
    for i in both:
        if abs(after[i] - before[i]) >= 0.0005:
            print(f"- moved: {i} {100 * before[i]:+.1f}% -> {100 * after[i]:+.1f}%")


if __name__ == "__main__":
    main(sys.argv)
