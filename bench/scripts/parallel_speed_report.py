#!/usr/bin/env python3
"""The report of bench/scripts/parallel_speed.sh: OUT/rounds.tsv and OUT/checks.md ->
OUT/report.md.

  parallel_speed_report.py OUT COMMAND MACHINE

rounds.tsv has one line per run (case, tools, threads, round, wall_s, user_s, sys_s, rss_mb,
minor_faults, exit, load1). Per case, tools and thread count the report gives the medians over
the rounds of the wall time, of the CPU time (user + system: on a shared machine the wall time
is mostly waiting for a core, the CPU time is the work) and of its parts, the CPU time's range,
the peak RSS and the minor page faults; then, per case, AFTER's median CPU time against BEFORE's.
A run that failed (exit != 0) is listed and left out of the medians. checks.md (the byte-for-
byte comparisons) is copied below the tables.
Tested by tests/bench/parallel_speed_report_test.py.
"""
import csv
import os
import statistics
import sys

FIELDS = ["case", "tools", "threads", "round", "wall_s", "user_s", "sys_s", "rss_mb",
          "minor_faults", "exit", "load1"]


def read_rounds(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    for i, row in enumerate(rows, start=2):
        missing = [k for k in FIELDS if row.get(k) in (None, "")]
        if missing:
            raise ValueError(f"{path} line {i}: no value for {', '.join(missing)}")
        for k in FIELDS[4:]:
            try:
                row[k] = float(row[k])
            except ValueError:
                raise ValueError(f"{path} line {i}: {k} is not a number: '{row[k]}'") from None
        row["cpu_s"] = row["user_s"] + row["sys_s"]
    return rows


def groups(rows):
    """(case, tools, threads) -> successful runs, in first-seen order."""
    out = {}
    for r in rows:
        out.setdefault((r["case"], r["tools"], r["threads"]), [])
        if r["exit"] == 0:
            out[(r["case"], r["tools"], r["threads"])].append(r)
    return out


def median_of(runs, key):
    return statistics.median(r[key] for r in runs)


def table(grouped):
    lines = ["| case | tools | threads | rounds | wall s | CPU s (user+sys) | CPU range | "
             "user s | sys s | peak RSS MB | minor faults |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for (case, tools, threads), runs in grouped.items():
        if not runs:
            lines.append(f"| {case} | {tools} | {threads} | 0 | - | - | - | - | - | - | - |")
            continue
        cpu = [r["cpu_s"] for r in runs]
        lines.append(
            f"| {case} | {tools} | {threads} | {len(runs)} | {median_of(runs, 'wall_s'):.2f} | "
            f"{statistics.median(cpu):.2f} | {min(cpu):.2f}-{max(cpu):.2f} | "
            f"{median_of(runs, 'user_s'):.2f} | {median_of(runs, 'sys_s'):.2f} | "
            f"{median_of(runs, 'rss_mb'):.0f} | {median_of(runs, 'minor_faults'):.0f} |")
    return lines


def ratios(grouped):
    lines = ["| case | threads | BEFORE CPU s | AFTER CPU s | AFTER / BEFORE |",
             "| --- | --- | --- | --- | --- |"]
    for (case, tools, threads), runs in grouped.items():
        base = grouped.get((case, "before", "-"), [])
        if tools != "after" or not runs or not base:
            continue
        b, a = median_of(base, "cpu_s"), median_of(runs, "cpu_s")
        lines.append(f"| {case} | {threads} | {b:.2f} | {a:.2f} | {a / b:.3f} |")
    return lines


def report(out_dir, command, machine):
    rows = read_rounds(os.path.join(out_dir, "rounds.tsv"))
    if not rows:
        raise ValueError(f"{out_dir}/rounds.tsv holds no runs")
    grouped = groups(rows)
    loads = [r["load1"] for r in rows]
    failed = [r for r in rows if r["exit"] != 0]
    lines = ["# Issue 24's long phases: CPU and wall time, before and after", "",
             f"Machine: {machine}.", f"Command: `{command}`.",
             f"Rounds: {max(int(r['round']) for r in rows)}; 1-minute load average before the "
             f"runs: {min(loads):.2f} to {max(loads):.2f} (median {statistics.median(loads):.2f}).",
             "", "Medians over the rounds:", ""]
    lines += table(grouped)
    lines += ["", "Median CPU time (user + system), AFTER against BEFORE:", ""]
    lines += ratios(grouped)
    if failed:
        lines += ["", "Failed runs (left out of the medians):", ""]
        lines += [f"- {r['case']}, {r['tools']}, threads {r['threads']}, round {r['round']}: "
                  f"exit {r['exit']:.0f}" for r in failed]
    checks = os.path.join(out_dir, "checks.md")
    if os.path.exists(checks):
        with open(checks) as f:
            lines += ["", "Outputs compared:", "", f.read().rstrip("\n")]
    with open(os.path.join(out_dir, "report.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


def main(argv):
    if len(argv) != 4:
        print(f"usage: {argv[0]} OUT COMMAND MACHINE", file=sys.stderr)
        return 2
    try:
        report(argv[1], argv[2], argv[3])
    except (OSError, ValueError) as e:
        print(f"{argv[0]}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
