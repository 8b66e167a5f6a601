#!/usr/bin/env python3
"""Where each published run's predicted step goes, one markdown row per run: the measured step
(the entry's iteration time, else global batch x sequence / tokens per second; '-' when the
source published only FLOP/s), the predicted step and the throughput error (+ = predicted
faster), then the busiest pipeline stage's compute-stream busy time, its idle time (bubble and
exposed communication), the schedule's bubble fraction and each group's communication as
in-flight / exposed seconds. Reads bench/simulator/published_breakdown's output (one JSON object
per run) on stdin.

Usage: published_breakdown CORPUS.json FILTER | published_diagnosis.py CORPUS.json
Run by hand in a study (bench/results/published-2026-11-25-slow/NOTES.md); no test: it only
formats the breakdown.
"""
import json
import sys
from pathlib import Path

from published_rows import breakdown_objects


def measured_step_s(entry):
    m = entry["measured"]
    if m.get("iteration_time_s"):
        return m["iteration_time_s"]
    if m.get("tokens_per_s"):
        return entry["parallel"]["global_batch"] * entry["model"]["seq_len"] / m["tokens_per_s"]
    return None


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    runs = {r["id"]: r for r in json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))}
    print("| run | measured, s | predicted, s | error | compute, s | idle, s | bubble | "
          "comm in flight / exposed, s |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for j in breakdown_objects(sys.stdin, "stdin"):
        if j["id"] not in runs:
            sys.exit(f"stdin: run {j['id']} is not in {sys.argv[1]}")
        meas = measured_step_s(runs[j["id"]])
        pred = j["predicted_step_s"]
        busiest = max(j["stages"], key=lambda s: s["compute_s"] + s["idle_s"])
        comm = ", ".join(f"{g} {c['time_s']:.2f} / {c['exposed_s']:.2f}"
                         for g, c in sorted(busiest["comm"].items()) if c["time_s"] > 0)
        err = f"{100 * (meas / pred - 1):+.1f}%" if meas else "-"
        print(f"| {j['id']} | {meas:.3f} | {pred:.3f} | {err} | {busiest['compute_s']:.3f} | "
              f"{busiest['idle_s']:.3f} | {j.get('bubble_fraction', 0):.3f} | {comm} |"
              if meas else
              f"| {j['id']} | - | {pred:.3f} | - | {busiest['compute_s']:.3f} | "
              f"{busiest['idle_s']:.3f} | {j.get('bubble_fraction', 0):.3f} | {comm} |")


if __name__ == "__main__":
    main()
