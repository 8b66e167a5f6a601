#!/usr/bin/env python3
"""Where a simulated step's compute stream goes, from `simulate --trace FILE`: the busy time of
the compute stream per group of tasks (the linear layers' GEMMs, the attention kernels, FP8's
casts, the rest) and its idle gaps (what the compute stream waited for, by the two tasks around
each gap). Used by bench/results/published-2026-12-02-jax/NOTES.md.

Usage: trace_compute_split.py TRACE.json
Run by hand in a study; no test: it only sums a trace's events.
"""
import json
import re
import sys
from collections import Counter

LINEAR = ("qkv", "out_proj", "fc1", "fc2")


def group(name):
    task = re.sub(r"_(dgrad|wgrad)$", "", name.split(" ")[-1])
    if task in LINEAR:
        return "linear GEMMs"
    if task.startswith("attention"):
        return "attention"
    if task.startswith("fp8_cast"):
        return "FP8 casts"
    return "other"


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    trace = json.load(open(sys.argv[1], encoding="utf-8"))
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    threads = {(e.get("pid"), e.get("tid")): e["args"].get("name")
               for e in events if e.get("ph") == "M"}
    compute = sorted((e for e in events if e.get("ph") == "X"
                      and threads.get((e["pid"], e["tid"])) == "compute"), key=lambda e: e["ts"])
    busy = Counter()
    for e in compute:
        busy[group(e["name"])] += e["dur"] / 1e6
    print(f"compute busy {sum(busy.values()):.3f} s: " +
          ", ".join(f"{k} {v:.3f} s" for k, v in sorted(busy.items(), key=lambda kv: -kv[1])))
    gaps = Counter()
    end, before = 0.0, "start"
    for e in compute:
        if e["ts"] > end + 100:  # gaps over 0.1 ms
            key = f"{before.split(' ')[0]} {before.split(' ')[-1]} -> " \
                  f"{e['name'].split(' ')[0]} {e['name'].split(' ')[-1]}"
            gaps[key] += (e["ts"] - end) / 1e6
        end = max(end, e["ts"] + e["dur"])
        before = e["name"]
    print(f"compute idle {sum(gaps.values()):.3f} s; largest gaps by the tasks around them:")
    for k, v in gaps.most_common(4):
        print(f"  {k}: {v:.3f} s")


if __name__ == "__main__":
    main()
