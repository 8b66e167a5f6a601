#!/usr/bin/env python3
"""Held-out (cross-validated) errors before and after, over the families both residual files
hold with the same number of runs, so that families a change adds do not move the comparison:
median |error|, p90 |error| (nearest rank, as validation/accuracy.cc) and mean signed error
(+ = predicted faster); then the families whose held-out median moved by half a point or more.

Usage: residuals_compare.py BEFORE.json AFTER.json
  BEFORE.json / AFTER.json: validation/corpus/error_residuals.json as `simulate --published
  FILE --cross-validate --write-residuals` writes it (e.g. `git show REV:PATH > BEFORE.json`).
Run by hand in a study (bench/results/published-2026-12-02-final/NOTES.md); it only formats.
"""
import json
import statistics
import sys

from common_runs_stats import stats  # the same median / p90 / mean line (this folder)


def families(path):
    with open(path, encoding="utf-8") as f:
        return {x["family"]: x["errors"] for x in json.load(f)["families"]}


def main(argv):
    if len(argv) != 3:
        sys.exit(__doc__)
    before, after = families(argv[1]), families(argv[2])
    common = [k for k in before if k in after and len(before[k]) == len(after[k])]
    flat = lambda d, keys: [e for k in keys for e in d[k]]
    print(f"- every family: before {stats(flat(before, before))}; after {stats(flat(after, after))}")
    print(f"- the {len(common)} families both hold: before {stats(flat(before, common))}; "
          f"after {stats(flat(after, common))}")
    new = [k for k in after if k not in before]
    if new:
        print(f"- only after ({len(new)} families): {stats(flat(after, new))}")
    moved = []
    for k in common:
        m0 = statistics.median(abs(e) for e in before[k])
        m1 = statistics.median(abs(e) for e in after[k])
        if abs(m1 - m0) >= 0.005:
            moved.append((m1 - m0, k, m0, m1))
    print(f"- held-out median better in {sum(1 for m in moved if m[0] < 0)} families, worse in "
          f"{sum(1 for m in moved if m[0] > 0)}:")
    for d, k, m0, m1 in sorted(moved):
        print(f"  - {k}: {100 * m0:.1f}% -> {100 * m1:.1f}%")


if __name__ == "__main__":
    main(sys.argv)
