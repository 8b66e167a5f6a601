#!/usr/bin/env python3
"""How much of a one-rank plan's CPU step-time error is the calibration fit's own misfit.

`calibrate` times the executor's tasks in traced steps of its probes (the tiny GPT at tp 1,
micro-batch 1, 2 and 4) and fits the profile's rates to them; its text output lists, per task
and probe, the measured time and the fit's (calibration/executor_probe.h, fit.h). For the
matrix's one-rank plans, whose tasks have the probes' shapes, this script re-prices each task of
the predicted trace by the probe's measured / fit ratio for that task at the plan's micro-batch
and prints the step-time error before and after: the share of the error that the fit leaves on
its own probe, not the simulator.

Run on the rounds bench/predicted_vs_measured.sh writes (they are not kept in the repository):
  python3 bench/scripts/probe_fit_residuals.py OUT/round-1 OUT/round-2 ...
"""
import json
import re
import sys
from pathlib import Path

ROW = re.compile(r"\s+(\S+)\s+tiny GPT \(tests\), tp 1, micro-batch (\d+)\s+([\d.]+)\s+"
                 r"([\d.]+)\s+([\d.]+)\s+([-+\d.]+)\s*$")
STEP = re.compile(r"step ([\d.]+) ms predicted, ([\d.]+) ms measured")


def probe_ratios(calibrate_txt, micro_batch):
    ratios = {}
    for line in calibrate_txt.read_text(encoding="utf-8").splitlines():
        m = ROW.match(line)
        if m and int(m.group(2)) == micro_batch and float(m.group(5)) > 0:
            ratios[m.group(1)] = float(m.group(3)) / float(m.group(5))
    return ratios


def ratio_of(task, ratios):
    if task in ratios:
        return ratios[task]
    # trace_diff.txt truncates long joined names: match by prefix.
    hits = [k for k in ratios if k.startswith(task)]
    return ratios[hits[0]] if len(hits) == 1 else None


def one_plan(runs, name):
    diff = runs / f"{name}.trace_diff.txt"
    plan = json.loads((runs / f"{name}.plan.json").read_text(encoding="utf-8"))
    if plan.get("tp", 1) * plan.get("pp", 1) * plan.get("dp", 1) * plan.get("cp", 1) != 1:
        return None
    lines = diff.read_text(encoding="utf-8").splitlines()
    m = STEP.search(lines[0])
    step_pred, step_meas = float(m.group(1)), float(m.group(2))
    ratios = probe_ratios(runs / f"{name}.calibrate.txt", int(plan.get("micro_batch", 1)))
    if not ratios:
        return None  # no probe of this model (the MoE plans' probe is another model)
    delta_us, unmatched = 0.0, []
    for line in lines[2:]:
        parts = line.split()
        if len(parts) < 4 or line.strip().startswith("all"):
            continue
        task, pred_us = parts[1], float(parts[-3])
        r = ratio_of(task, ratios)
        if r is None:
            unmatched.append(task)
            continue
        delta_us += pred_us * (r - 1)
    corrected = step_pred + delta_us / 1000
    return step_pred, step_meas, corrected, unmatched


def main(argv):
    if len(argv) < 2:
        sys.exit(__doc__)
    print("| round | plan | predicted ms | measured ms | error | probe-repriced ms | error | "
          "tasks without a probe sample |")
    print("|---|---|---:|---:|---:|---:|---:|---|")
    for rnd in argv[1:]:
        runs = Path(rnd) / "runs"
        for diff in sorted(runs.glob("*.trace_diff.txt")):
            name = diff.name[: -len(".trace_diff.txt")]
            r = one_plan(runs, name)
            if r is None:
                continue
            p, meas, c, miss = r
            print(f"| {Path(rnd).name} | {name} | {p:.2f} | {meas:.2f} | {100 * (p / meas - 1):+.1f}% | "
                  f"{c:.2f} | {100 * (c / meas - 1):+.1f}% | {', '.join(miss) or '-'} |")


if __name__ == "__main__":
    main(sys.argv)
