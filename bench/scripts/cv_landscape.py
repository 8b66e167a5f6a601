#!/usr/bin/env python3
"""What the cross-validation's folds choose between: each fold's best grid point and the runner-up,
with their objectives (median |throughput error| over the other families' runs, then p90, then
distance from the presets' (0.9, 0.45)), pooled over runs as validation/accuracy.cc chose them
before 2026-12-03; and the whole corpus's median and p90 at each grid point. The folds' criterion
of today (the family-weighted mean |error|) is replayed by bench/scripts/cv_criteria.py.

usage: bench/scripts/cv_landscape.py GRID.jsonl [OUT.md]
GRID.jsonl: build/bench/simulator/published_grid validation/corpus/published_runs.json > GRID.jsonl
"""
import json
import math
import sys
from collections import defaultdict

PRESETS = (0.9, 0.45)


def median(v):
    v = sorted(v)
    n = len(v)
    if n == 0:
        return 0.0
    return v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])


def p90(v):
    v = sorted(v)
    if not v:
        return 0.0
    rank = math.ceil(0.9 * len(v))
    return v[max(rank, 1) - 1]


def read_grid(path):
    """published_grid's JSON lines: errors[point][run id] = throughput error, and each run's
    family (runs without a throughput error left out)."""
    errors = defaultdict(dict)
    family = {}
    for line in open(path):
        if not line.strip():
            continue
        r = json.loads(line)
        if "throughput" not in r:
            continue
        point = (round(r["gemm_share"], 2), round(r["memory_efficiency"], 2))
        errors[point][r["id"]] = r["throughput"]
        family[r["id"]] = r["family"]
    return errors, family


def emit(out, path=None):
    """The report's lines as one text: written to `path` when given, and to stdout."""
    text = "\n".join(out) + "\n"
    if path:
        open(path, "w").write(text)
    sys.stdout.write(text)


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    errors, family = read_grid(sys.argv[1])
    points = sorted(errors)
    families = sorted(set(family.values()))

    def score(point, take):
        a = [abs(e) for run, e in errors[point].items() if take(run)]
        dist = math.hypot(point[0] - PRESETS[0], point[1] - PRESETS[1])
        return (median(a), p90(a), dist)

    out = []
    out.append("# The cross-validation's choices, point by point\n")
    out.append(f"Runs: {len(family)}; families: {len(families)}; grid points: {len(points)}.\n")
    out.append("## The whole corpus at each grid point (the five best by the folds' objective)\n")
    out.append("| gemm share, memory | median |error| | p90 |")
    out.append("|---|---:|---:|")
    ranked = sorted(points, key=lambda p: score(p, lambda run: True))
    for p in ranked[:5]:
        m, q, _ = score(p, lambda run: True)
        out.append(f"| {p[0]}, {p[1]} | {100 * m:.3f}% | {100 * q:.2f}% |")
    out.append("\n## Each fold: the point chosen on the other families, the runner-up, the margin\n")
    out.append("| held-out family | chosen | its median, p90 (training) | runner-up | its median, p90 | "
               "margin (median points) | held-out mean at chosen |")
    out.append("|---|---|---|---|---|---:|---:|")
    held = []
    for f in families:
        take = lambda run, f=f: family[run] != f
        best = sorted(points, key=lambda p: score(p, take))
        c, r = best[0], best[1]
        sc, sr = score(c, take), score(r, take)
        mine = [e for run, e in errors[c].items() if family[run] == f]
        held += mine
        mean = sum(mine) / len(mine) if mine else 0.0
        out.append(f"| {f} | {c[0]}, {c[1]} | {100 * sc[0]:.3f}%, {100 * sc[1]:.2f}% | {r[0]}, {r[1]} | "
                   f"{100 * sr[0]:.3f}%, {100 * sr[1]:.2f}% | {100 * (sr[0] - sc[0]):.3f} | {100 * mean:+.1f}% |")
    a = [abs(e) for e in held]
    out.append(f"\nCross-validated (held out): median {100 * median(a):.2f}%, p90 {100 * p90(a):.2f}%, "
               f"mean {100 * sum(held) / len(held):+.2f}% over {len(held)} runs.")
    emit(out, sys.argv[2] if len(sys.argv) > 2 else None)


if __name__ == "__main__":
    main()
