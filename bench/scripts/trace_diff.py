#!/usr/bin/env python3
"""Per-task time of one rank's step, predicted against measured, from two Chrome traces.

    trace_diff.py PREDICTED_TRACE MEASURED_TRACE [--rank R] [--top N]

PREDICTED_TRACE is `simulate --trace`'s, MEASURED_TRACE `execute --trace`'s (the executor's last
measured step). Both name events "<pass> mb<m> L<l> <task>" after the cost model's tasks; the
executor names one call that does several tasks by joining them with '+', and the predicted
tasks are grouped the same way. Prints, per (pass, task) on the compute track, the summed
duration over the step, and the compute time not inside any span (the executor's glue).
"""
import argparse
import collections
import json
import sys


def load(path, rank):
    with open(path) as f:
        trace = json.load(f)
    events = [e for e in trace["traceEvents"]
              if e.get("ph") == "X" and e.get("pid") == rank]
    return events


def split_name(name):
    parts = name.split(" ")
    task = parts[-1]
    pass_ = parts[0] if parts[0] in ("F", "B", "R", "O") else "-"
    return pass_, task


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("predicted")
    ap.add_argument("measured")
    ap.add_argument("--rank", type=int, default=0)
    ap.add_argument("--top", type=int, default=40)
    a = ap.parse_args()
    pred = load(a.predicted, a.rank)
    meas = load(a.measured, a.rank)
    if not meas:
        sys.exit(f"trace_diff: no events of rank {a.rank} in {a.measured}")
    # The executor's composite spans decide how predicted tasks are grouped.
    group_of = {}
    for e in meas:
        _, task = split_name(e["name"])
        if "+" in task:
            for part in task.split("+"):
                group_of[part] = task
    totals = collections.defaultdict(lambda: [0.0, 0.0])
    span = {}
    for which, events in ((0, pred), (1, meas)):
        lo, hi = float("inf"), 0.0
        for e in events:
            lo, hi = min(lo, e["ts"]), max(hi, e["ts"] + e["dur"])
            if e.get("tid") != 0:
                continue
            pass_, task = split_name(e["name"])
            if task.startswith("recv"):
                continue
            totals[(pass_, group_of.get(task, task))][which] += e["dur"]
        span[which] = hi - lo
    rows = sorted(totals.items(), key=lambda kv: -abs(kv[1][1] - kv[1][0]))
    print(f"# rank {a.rank}: step {span[0] / 1e3:.2f} ms predicted, {span[1] / 1e3:.2f} ms measured")
    print(f"# {'pass':4} {'task':44} {'pred(us)':>10} {'meas(us)':>10} {'diff(us)':>10}")
    sums = [0.0, 0.0]
    for (pass_, task), (p, m) in rows:
        sums[0] += p
        sums[1] += m
    for (pass_, task), (p, m) in rows[: a.top]:
        print(f"  {pass_:4} {task[:44]:44} {p:10.1f} {m:10.1f} {m - p:+10.1f}")
    print(f"  {'all':4} {'compute spans':44} {sums[0]:10.1f} {sums[1]:10.1f} {sums[1] - sums[0]:+10.1f}")


if __name__ == "__main__":
    main()
