#!/usr/bin/env python3
"""How much does a run's cross-validated prediction move when other families' rows are added?

The leave-one-family-out folds (validation/accuracy.cc cross_validate) choose the two efficiency
constants (gemm share, memory efficiency) on the other families. Under the family-weighted mean
|error| on the grid (gemm share by 0.05, memory efficiency by 0.15) a fold's choice jumps between
two grid points when the objective is flat between them: adding nine rows of three new families
moved 19 of 78 folds from share 0.85 to 0.8 and the headline median by 1.3 points
(validation/corpus/NOTES.md, forty-seventh pass). This script replays the folds offline from one
grid of per-run errors for the criteria registered there, on corpus variants a few rows apart,
and measures stability as what a user would see: how far the held-out error of a run common to two
variants moves, and how far the folds' constants move.

Criteria:
  current       the grid point with the lowest family-weighted mean |error| (ties: nearest the
                presets), as accuracy.cc chooses today.
  interpolated  (a) the current point, then along each axis the vertex of the parabola through it
                and its two grid neighbours (where both exist): the mean's optimum between grid
                points; within half a grid step of the current point by construction.
  bagged        (b) the median, per constant, of the current criterion's choices on the training
                families less each one of them in turn (leave-one-family-out inside the fold).

A run's held-out error at a point between grid points is interpolated bilinearly from the grid
(an approximation: the C++ cross-validation simulates the point itself).

usage: bench/scripts/cv_fold_stability.py GRID.jsonl VARIANTS.json [OUT.md]
GRID.jsonl: build/bench/simulator/published_grid CORPUS.json (every run of every variant)
VARIANTS.json: {"name": {"drop": [ids...], "what": "..."}, ...}; the first variant is the
reference that every other is compared with.
"""
import json
import math
import statistics
import sys
from collections import defaultdict

from cv_landscape import emit, median, p90, read_grid

PRESETS = (0.8, 0.6)  # core/cluster_spec.h kPresetGemmShare, kPresetMemoryEfficiency


class Grid:
    def __init__(self, errors):
        self.errors = errors
        self.points = sorted(errors)
        self.shares = sorted({p[0] for p in self.points})
        self.mems = sorted({p[1] for p in self.points})

    def error(self, run, point):
        """Bilinear interpolation of a run's error between the grid points around `point`."""
        def bracket(axis, x):
            for a, b in zip(axis, axis[1:]):
                if a - 1e-9 <= x <= b + 1e-9:
                    return a, b, (x - a) / (b - a)
            return axis[-1], axis[-1], 0.0
        g0, g1, tg = bracket(self.shares, point[0])
        m0, m1, tm = bracket(self.mems, point[1])
        e = self.errors
        return ((1 - tg) * (1 - tm) * e[(g0, m0)][run] + tg * (1 - tm) * e[(g1, m0)][run] +
                (1 - tg) * tm * e[(g0, m1)][run] + tg * tm * e[(g1, m1)][run])


def family_means(grid, runs, family):
    """F[f][p]: family f's mean |error| at grid point p (each family then weighs one)."""
    by = defaultdict(list)
    for r in runs:
        by[family[r]].append(r)
    return {f: {p: sum(abs(grid.errors[p][r]) for r in rs) / len(rs) for p in grid.points}
            for f, rs in by.items()}


def argmin_point(grid, totals, count):
    def key(p):
        return (totals[p] / count, math.hypot(p[0] - PRESETS[0], p[1] - PRESETS[1]))
    return min(grid.points, key=key)


def current(grid, F, train):
    totals = {p: sum(F[f][p] for f in train) for p in grid.points}
    return argmin_point(grid, totals, len(train)), totals


def vertex(x0, h, fm, f0, fp):
    curvature = fm - 2 * f0 + fp
    if curvature <= 0:
        return x0
    return x0 + h * (fm - fp) / (2 * curvature)


def interpolated(grid, F, train):
    best, totals = current(grid, F, train)
    g, m = best
    out = [g, m]
    for axis, values in ((0, grid.shares), (1, grid.mems)):
        i = values.index(best[axis])
        if 0 < i < len(values) - 1:
            def at(v):
                p = (v, m) if axis == 0 else (g, v)
                return totals[p]
            out[axis] = vertex(values[i], values[i + 1] - values[i], at(values[i - 1]),
                               at(values[i]), at(values[i + 1]))
    return tuple(out)


def bagged(grid, F, train):
    _, totals = current(grid, F, train)
    picks = []
    for leave in train:
        sub = {p: totals[p] - F[leave][p] for p in grid.points}
        picks.append(argmin_point(grid, sub, len(train) - 1))
    return (statistics.median(p[0] for p in picks), statistics.median(p[1] for p in picks))


CRITERIA = {"current": lambda g, F, t: current(g, F, t)[0],
            "(a) interpolated": interpolated,
            "(b) bagged": bagged}


def replay(grid, family, runs, choose):
    F = family_means(grid, runs, family)
    fams = sorted(F)
    chosen, held = {}, {}
    for f in fams:
        point = choose(grid, F, [g for g in fams if g != f])
        chosen[f] = point
        for r in runs:
            if family[r] == f:
                held[r] = grid.error(r, point)
    return chosen, held


def stats(values):
    a = [abs(v) for v in values]
    return median(a), p90(a), sum(values) / len(values)


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    errors, family = read_grid(sys.argv[1])
    grid = Grid(errors)
    variants = json.load(open(sys.argv[2]))
    names = list(variants)
    runs_of = {}
    for name, spec in variants.items():
        drop = set(spec.get("drop", []))
        missing = drop - set(family)
        if missing:
            sys.exit(f"variant {name}: ids not in the grid: {sorted(missing)}")
        runs_of[name] = [r for r in family if r not in drop]
    out = ["# Fold criteria: how far predictions move when other rows are added\n",
           f"Grid: {len(grid.points)} points (gemm share {grid.shares[0]}..{grid.shares[-1]}, "
           f"memory {grid.mems[0]}..{grid.mems[-1]}); runs in the grid: {len(family)}.\n"]
    for name in names:
        out.append(f"- **{name}**: {len(runs_of[name])} runs ({variants[name].get('what', '')})")
    out.append("\n## Held-out headline on each variant\n")
    out.append("| criterion | variant | folds' gemm share: min / median / max | memory: min / max "
               "| median | p90 | mean |")
    out.append("|---|---|---|---|---:|---:|---:|")
    results = {}
    for cname, choose in CRITERIA.items():
        for name in names:
            chosen, held = replay(grid, family, runs_of[name], choose)
            results[(cname, name)] = (chosen, held)
            shares = [p[0] for p in chosen.values()]
            mems = [p[1] for p in chosen.values()]
            med, q, mean = stats(list(held.values()))
            out.append(f"| {cname} | {name} | {min(shares):.3f} / {statistics.median(shares):.3f} / "
                       f"{max(shares):.3f} | {min(mems):.3f} / {max(mems):.3f} | "
                       f"{100 * med:.2f}% | {100 * q:.2f}% | {100 * mean:+.2f}% |")
    ref = names[0]
    out.append(f"\n## Stability against **{ref}**: the runs and families both variants hold\n")
    out.append("| criterion | variant | families whose fold moved (> 0.005) | largest move of a "
               "fold's share | runs whose held-out error moved > 1 point | mean / max move of a "
               "run's held-out error | median over the common runs: ref -> variant |")
    out.append("|---|---|---:|---:|---:|---|---|")
    summary = defaultdict(list)
    for cname in CRITERIA:
        rc, rh = results[(cname, ref)]
        for name in names[1:]:
            vc, vh = results[(cname, name)]
            fams = sorted(set(rc) & set(vc))
            moved = [f for f in fams
                     if abs(rc[f][0] - vc[f][0]) > 0.005 or abs(rc[f][1] - vc[f][1]) > 0.005]
            biggest = max((abs(rc[f][0] - vc[f][0]) for f in fams), default=0.0)
            common = sorted(set(rh) & set(vh))
            deltas = [abs(rh[r] - vh[r]) for r in common]
            over = sum(d > 0.01 for d in deltas)
            m_ref = median([abs(rh[r]) for r in common])
            m_var = median([abs(vh[r]) for r in common])
            summary[cname].append((sum(deltas) / len(deltas), abs(m_var - m_ref), len(moved)))
            out.append(f"| {cname} | {name} | {len(moved)} of {len(fams)} | {biggest:.3f} | "
                       f"{over} of {len(common)} | {100 * sum(deltas) / len(deltas):.2f} / "
                       f"{100 * max(deltas):.2f} points | {100 * m_ref:.2f}% -> {100 * m_var:.2f}% |")
    out.append("\n## Summary over the variants (lower is steadier)\n")
    out.append("| criterion | mean move of a common run's held-out error (average over variants) "
               "| largest move of the common runs' median | folds moved (total) |")
    out.append("|---|---:|---:|---:|")
    for cname, rows in summary.items():
        out.append(f"| {cname} | {100 * sum(r[0] for r in rows) / len(rows):.3f} points | "
                   f"{100 * max(r[1] for r in rows):.2f} points | {sum(r[2] for r in rows)} |")
    emit(out, sys.argv[3] if len(sys.argv) > 3 else None)


if __name__ == "__main__":
    main()
