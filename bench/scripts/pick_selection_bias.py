#!/usr/bin/env python3
"""The optimizer's curse on a `plan` pick: how much faster than it will measure the fastest of
several near-equal predictions is expected to look, from the corpus's own error spread.

usage: pick_selection_bias.py PLAN_REPORT.json RESIDUALS.json GPU_GENERATION [DRAWS]

PLAN_REPORT.json is `plan --json` (its search.candidates, the simulated head of the ranking);
RESIDUALS.json is validation/corpus/error_residuals.json (held-out errors, = measured /
predicted step time - 1, per family). Each family's errors are split into the family's median
(shared by every layout of one setup: it shifts every candidate alike and cannot change which
is fastest) and the deviations from it (what differs between layouts of one setup, model and
hardware: the part that can reorder candidates). Taking the candidates' predictions as the true
step times, each draw gives every candidate an independent deviation drawn from the pool of the
generation's families (those with 3 runs or more), predicts t / (1 + u), takes the fastest
prediction, and records how much slower it measures than predicted (u of the pick). Independent
draws are the worst case: candidates that share a schedule or a degree share part of their
error, which shrinks the effect. Prints the mean and the 10th/50th/90th percentile of that
optimism, and how often the pick by prediction is not the truly fastest.
"""
import json
import random
import statistics
import sys


def main():
    if len(sys.argv) not in (4, 5):
        sys.exit(__doc__)
    report = json.load(open(sys.argv[1]))
    residuals = json.load(open(sys.argv[2]))
    generation = sys.argv[3]
    draws = int(sys.argv[4]) if len(sys.argv) == 5 else 20000
    pool = []
    for f in residuals["families"]:
        if f["gpu_generation"] != generation or len(f["errors"]) < 3:
            continue
        m = statistics.median(f["errors"])
        pool += [e - m for e in f["errors"]]
    if not pool:
        sys.exit("no family of %s with 3 runs or more" % generation)
    times = [c["step_time_s"] for c in report["search"]["candidates"] if c.get("simulated", True)]
    fastest = min(times)
    rng = random.Random(1)
    optimism, wrong = [], 0
    for _ in range(draws):
        u = [rng.choice(pool) for _ in times]
        predicted = [t / (1 + ui) for t, ui in zip(times, u)]
        i = min(range(len(times)), key=lambda k: predicted[k])
        optimism.append(times[i] / predicted[i] - 1)
        wrong += times[i] > fastest
    q = statistics.quantiles(optimism, n=10)
    print(json.dumps({
        "generation": generation,
        "deviations": len(pool),
        "deviation_sd": statistics.pstdev(pool),
        "candidates": len(times),
        "candidates_within_8pct": sum(t <= 1.08 * fastest for t in times),
        "draws": draws,
        "pick_optimism_mean": statistics.mean(optimism),
        "pick_optimism_p10_p50_p90": [q[0], q[4], q[8]],
        "pick_not_truly_fastest": wrong / draws,
    }, indent=1))


if __name__ == "__main__":
    main()
