#!/usr/bin/env python3
"""Report of bench/predicted_vs_measured.sh: reads DIR/round-K/runs/*.compare.json (schema
trainplan.compare/1) of every round (or DIR/runs without rounds); writes DIR/report.md,
DIR/report.json and DIR/step_time.svg (predicted against measured step time, drawn here without
a plotting library).

Each plan in each round is one attempt: a reference plan run, a calibration, the prediction and
the run, and the reference plan again. DIR/round-K/reference.txt has "LABEL MS" per line:
"NAME:before MS" and "NAME MS" around plan NAME (an older layout without ":before" lines
brackets a plan with the line before its own). The attempt is steady when its two reference runs
agree within DRIFT_PCT of their mean: the machine ran at one speed from the calibration to the
run. A plan's step-time error is its median over its steady rounds (over every round, said so,
if none was), shown with the predicted and measured times of the round nearest to it, and every
round's error listed; the number of tries
each round took is read from runs/NAME.attempts.

runs/NAME.contention (written since cpu-2026-11-25) holds "other_cpu_pct X load1 L own_cpu_s O
wall_s W" for the kept attempt: the share of all cores' time that other processes took while the
plan ran. With it, an attempt is steady only if X is also at most OTHER_PCT; without it (older
studies), the references alone decide.

NAME.compare.json's "reference_gate" (compare --hardware, since cpu-gate-2026-12-02;
validation/reference_gate.h) is the in-run gate: the reference kernel's rate `execute` timed
between its steps against the one `calibrate` timed, within compare's tolerance. With it, an
attempt is steady only if the gate also says so; its signed deviation is listed per round.

NAME.measured.json's cluster.reference_gemm.per_rank (the same kernel, every rank's rate) says
whether the ranks ran at one speed: this host's vCPUs can sit 15-30% apart for minutes, and a
pipeline's step is then set by the stage on the slow one (cpu-2026-12-05c: pp2_dualpipe misses by
-14..-24% with a slow vCPU under either rank and -4% with equal ones; pp2_1f1b only when the slow
vCPU hosts the last stage). Per round, "slow rN -X%" names the slowest rank and how far its median
rate fell below the fastest rank's, when that is at least SLOW_RANK_PCT.

    python3 bench/scripts/report.py [--drift-pct 5] [--other-pct 10] [--targets 15,7,10] DIR

--targets: every plan's step-time error, the median's and peak memory's, in percent (issue 6:
15,7,10 on CPU, the default; the GPU script, bench/gpu/predicted_vs_measured.sh, asks 10,10,10).
"""
import glob
import json
import os
import statistics
import sys

STEP_TARGET_PCT, MEDIAN_TARGET_PCT, MEMORY_TARGET_PCT = 15.0, 7.0, 10.0
# A rank whose reference GEMM ran this much below the fastest rank's is named per round.
SLOW_RANK_PCT = 5.0


def slowest_rank(measured):
    """(rank, percent below the fastest rank's median reference-GEMM rate) of the slowest rank,
    or None with fewer than two ranks' rates (one-rank plans, older or GPU measurements)."""
    per_rank = (measured.get("cluster", {}).get("reference_gemm") or {}).get("per_rank") or []
    rates = [(statistics.median(r["flops_per_s"]), r["rank"]) for r in per_rank
             if r.get("flops_per_s")]
    if len(rates) < 2:
        return None
    slow, fast = min(rates), max(rates)
    return slow[1], 100.0 * (1.0 - slow[0] / fast[0])


def load_runs(out):
    runs = []
    for path in sorted(glob.glob(os.path.join(out, "runs", "*.compare.json"))):
        name = os.path.basename(path)[: -len(".compare.json")]
        cmp = json.load(open(path))
        if cmp.get("schema") != "trainplan.compare/1":
            sys.exit(f"report: {path}: field 'schema': expected trainplan.compare/1")
        plan = json.load(open(os.path.join(out, "runs", name + ".plan.json")))
        step = next(r for r in cmp["rows"] if r["quantity"] == "step_time")
        measured_path = os.path.join(out, "runs", name + ".measured.json")
        measured = json.load(open(measured_path)) if os.path.exists(measured_path) else {}
        # The same prediction from the profile's fit alone (its measured_tasks table removed):
        # what the fit's functional form gives where no probe ran the plan's tasks.
        fit_path = os.path.join(out, "runs", name + ".predicted_fit.json")
        fit_error = None
        if os.path.exists(fit_path):
            fit_s = json.load(open(fit_path)).get("step_time_s")
            if not isinstance(fit_s, (int, float)) or fit_s <= 0:
                sys.exit(f"report: {fit_path}: field 'step_time_s': expected a positive number, "
                         f"got {fit_s!r}")
            fit_error = 100.0 * (fit_s - step["measured"]) / step["measured"]
        runs.append({
            "name": name,
            "ranks": plan["tp"] * plan.get("cp", 1) * plan["pp"] * plan["dp"],
            "plan": plan,
            "predicted_step_s": step["predicted"],
            "measured_step_s": step["measured"],
            # On a shared machine, the step that ran with the least interference: a lower bound
            # of the plan's step time there, not its time (the median is), shown beside it.
            "fastest_step_s": min(measured.get("step_times_s") or [step["measured"]]),
            "step_error_pct": cmp["step_time_error_pct"],
            "fit_only_step_error_pct": fit_error,
            "bytes_exact": cmp["bytes_exact"],
            "max_abs_memory_error_pct": cmp["max_abs_memory_error_pct"],
            # The in-run reference gate; None for a comparison made without it.
            "reference_gate_steady": (cmp["reference_gate"]["steady"]
                                      if cmp.get("reference_gate") else None),
            "reference_gate_deviation_pct": (cmp["reference_gate"]["deviation_pct"]
                                             if cmp.get("reference_gate") else None),
            # [rank, percent below the fastest rank] of the slowest rank's reference GEMM, or None.
            "slowest_rank": slowest_rank(measured),
        })
    return runs


def svg_chart(runs):
    """Grouped horizontal bars: predicted and measured step time per plan, error on the right."""
    bar, gap, left, right, top = 9, 8, 130, 90, 40
    width = 760
    plot_w = width - left - right
    height = top + len(runs) * (2 * bar + gap) + 40
    vmax = max([r["predicted_step_s"] for r in runs] + [r["measured_step_s"] for r in runs]) * 1.05
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="11">',
           f'<text x="{left}" y="18" font-size="13">Step time: predicted (blue) vs measured '
           f'(orange), ms</text>']
    for i in range(6):  # grid and axis labels
        v = vmax * i / 5
        x = left + plot_w * i / 5
        out.append(f'<line x1="{x:.1f}" y1="{top - 8}" x2="{x:.1f}" y2="{height - 30}" '
                   f'stroke="#ddd"/>')
        out.append(f'<text x="{x:.1f}" y="{height - 16}" text-anchor="middle">{v * 1e3:.1f}</text>')
    y = top
    for r in runs:
        out.append(f'<text x="{left - 6}" y="{y + bar + 3}" text-anchor="end">{r["name"]}</text>')
        for value, colour in ((r["predicted_step_s"], "#4c78a8"), (r["measured_step_s"], "#f58518")):
            w = plot_w * value / vmax
            out.append(f'<rect x="{left}" y="{y}" width="{w:.1f}" height="{bar}" fill="{colour}"/>')
            y += bar
        err = r["step_error_pct"]
        colour = "#2a7" if abs(err) <= STEP_TARGET_PCT else "#c33"
        out.append(f'<text x="{width - right + 8}" y="{y - bar + 3}" fill="{colour}">'
                   f'{err:+.1f}%</text>')
        y += gap
    out.append("</svg>")
    return "\n".join(out) + "\n"


def reference_runs(round_dir):
    """The round's reference step times in run order, as (label, ms); [] without the file."""
    path = os.path.join(round_dir, "reference.txt")
    if not os.path.exists(path):
        return []
    runs = []
    for n, line in enumerate(open(path), 1):
        parts = line.split()
        if len(parts) != 2:
            sys.exit(f"report: {path}:{n}: expected 'LABEL MS', got {line.strip()!r}")
        try:
            runs.append((parts[0], float(parts[1])))
        except ValueError:
            sys.exit(f"report: {path}:{n}: MS {parts[1]!r} is not a number")
    return runs


def add_brackets(round_dir, runs, drift_pct, other_pct):
    """Adds to each run the reference step times around it and whether they agreed."""
    refs = reference_runs(round_dir)
    labels = [label for label, _ in refs]
    for r in runs:
        r["attempts"] = 1
        attempts = os.path.join(round_dir, "runs", r["name"] + ".attempts")
        if os.path.exists(attempts):
            text = open(attempts).read().strip()
            if not text.isdigit():
                sys.exit(f"report: {attempts}: expected a count of attempts, got {text!r}")
            r["attempts"] = int(text)
        contention = os.path.join(round_dir, "runs", r["name"] + ".contention")
        if os.path.exists(contention):
            fields = open(contention).read().split()
            try:
                values = dict(zip(fields[0::2], (float(v) for v in fields[1::2])))
                r["other_cpu_pct"], r["load1"] = values["other_cpu_pct"], values["load1"]
            except (ValueError, KeyError):
                sys.exit(f"report: {contention}: expected 'other_cpu_pct X load1 L ...', got "
                         f"{' '.join(fields)!r}")
        if r["name"] not in labels:
            continue
        k = labels.index(r["name"])
        if r["name"] + ":before" in labels:
            before = refs[labels.index(r["name"] + ":before")][1]
        elif k > 0:
            before = refs[k - 1][1]
        else:
            continue
        after = refs[k][1]
        r["reference_around_ms"] = [before, after]
        r["reference_steady"] = (abs(after - before) <= drift_pct / 100.0 * (before + after) / 2
                                 and r.get("other_cpu_pct", 0.0) <= other_pct
                                 and r.get("reference_gate_steady") is not False)


def median_rounds(round_runs):
    """Per plan, the median step-time error over its steady rounds (all rounds if none was
    steady) with the figures of the round nearest to it; every round's error alongside."""
    by_name = {}
    for k, runs in enumerate(round_runs):
        for r in runs:
            by_name.setdefault(r["name"], []).append((k, r))
    merged = []
    for name in sorted(by_name):
        steady = [(k, x) for k, x in by_name[name] if x.get("reference_steady")]
        rounds = sorted(steady or by_name[name], key=lambda kr: kr[1]["step_error_pct"])
        # The median error (of the middle two for an even count); the row shows the round
        # nearest to it (the lower one on a tie).
        median = statistics.median(x["step_error_pct"] for _, x in rounds)
        k, mid = min(rounds, key=lambda kr: abs(kr[1]["step_error_pct"] - median))
        r = dict(mid)
        r["step_error_pct"] = median
        fit = [x["fit_only_step_error_pct"] for _, x in rounds
               if x.get("fit_only_step_error_pct") is not None]
        r["fit_only_step_error_pct"] = statistics.median(fit) if fit else None
        r["round"] = k + 1
        r["round_step_errors_pct"] = [x["step_error_pct"] for _, x in by_name[name]]
        r["round_steady"] = [bool(x.get("reference_steady")) for _, x in by_name[name]]
        r["round_attempts"] = [x["attempts"] for _, x in by_name[name]]
        r["round_other_cpu_pct"] = [x.get("other_cpu_pct") for _, x in by_name[name]]
        r["round_reference_gate_pct"] = [x.get("reference_gate_deviation_pct")
                                         for _, x in by_name[name]]
        r["round_slowest_rank"] = [x.get("slowest_rank") for _, x in by_name[name]]
        r["steady_rounds"] = len(steady)
        r["bytes_exact"] = all(x["bytes_exact"] for _, x in by_name[name])
        r["max_abs_memory_error_pct"] = max(x["max_abs_memory_error_pct"]
                                            for _, x in by_name[name])
        merged.append(r)
    return merged


def first_profile(round_dirs):
    """The device and date: the round's profile.json, or the first plan's own calibration."""
    for d in round_dirs:
        for path in [os.path.join(d, "profile.json")] + sorted(
                glob.glob(os.path.join(d, "runs", "*.profile.json"))):
            if os.path.exists(path):
                return json.load(open(path))
    sys.exit("report: no profile.json or runs/*.profile.json under " + " ".join(round_dirs))


def main():
    global STEP_TARGET_PCT, MEDIAN_TARGET_PCT, MEMORY_TARGET_PCT
    args = sys.argv[1:]
    drift_pct, other_pct = 5.0, 10.0
    while len(args) >= 3 and args[0] in ("--drift-pct", "--other-pct", "--targets"):
        try:
            if args[0] == "--drift-pct":
                drift_pct = float(args[1])
            elif args[0] == "--other-pct":
                other_pct = float(args[1])
            else:
                STEP_TARGET_PCT, MEDIAN_TARGET_PCT, MEMORY_TARGET_PCT = (
                    float(x) for x in args[1].split(","))
        except ValueError:
            sys.exit(f"report: {args[0]}: '{args[1]}' is not "
                     + ("three numbers like 15,7,10" if args[0] == "--targets" else "a number"))
        args = args[2:]
    if len(args) != 1:
        sys.exit(__doc__)
    out = args[0]
    round_dirs = sorted(glob.glob(os.path.join(out, "round-*")),
                        key=lambda d: int(d.rsplit("-", 1)[1]))
    if not round_dirs:
        round_dirs = [out]
    all_round_runs = [load_runs(d) for d in round_dirs]
    for d, runs in zip(round_dirs, all_round_runs):
        add_brackets(d, runs, drift_pct, other_pct)
    runs = median_rounds(all_round_runs)
    if not runs:
        sys.exit(f"report: no runs/*.compare.json under {out}")
    profile = first_profile(round_dirs)
    errors = [abs(r["step_error_pct"]) for r in runs]
    samples = [x for rr in all_round_runs for x in rr]
    fit_errors = [abs(r["fit_only_step_error_pct"]) for r in runs
                  if r.get("fit_only_step_error_pct") is not None]
    summary = {
        "plans": len(runs),
        "rounds": len(round_dirs),
        "drift_limit_pct": drift_pct,
        "other_cpu_limit_pct": other_pct,
        "load1_range": [min((x["load1"] for x in samples if "load1" in x), default=None),
                        max((x["load1"] for x in samples if "load1" in x), default=None)],
        "steady_samples": sum(bool(x.get("reference_steady")) for x in samples),
        "refused_by_reference_gate": sum(x.get("reference_gate_steady") is False
                                         for x in samples),
        "samples": len(samples),
        "attempts": sum(x["attempts"] for x in samples),
        "plans_without_steady_round": [r["name"] for r in runs if r["steady_rounds"] == 0],
        "max_abs_step_error_pct": max(errors),
        "median_abs_step_error_pct": statistics.median(errors),
        "plans_within_step_target": sum(e <= STEP_TARGET_PCT for e in errors),
        "bytes_exact_all": all(r["bytes_exact"] for r in runs),
        "max_abs_memory_error_pct": max(r["max_abs_memory_error_pct"] for r in runs),
        # The fit-only prediction's figures (None without NAME.predicted_fit.json files).
        "median_abs_fit_only_step_error_pct": statistics.median(fit_errors) if fit_errors else None,
        "max_abs_fit_only_step_error_pct": max(fit_errors) if fit_errors else None,
        "round_median_signed_step_error_pct": [
            statistics.median(r["step_error_pct"] for r in rr) if rr else None
            for rr in all_round_runs],
    }
    summary["targets_met"] = {
        f"every_step_within_{STEP_TARGET_PCT:g}pct":
            summary["max_abs_step_error_pct"] <= STEP_TARGET_PCT,
        f"median_within_{MEDIAN_TARGET_PCT:g}pct":
            summary["median_abs_step_error_pct"] <= MEDIAN_TARGET_PCT,
        "bytes_exact": summary["bytes_exact_all"],
        f"memory_within_{MEMORY_TARGET_PCT:g}pct":
            summary["max_abs_memory_error_pct"] <= MEMORY_TARGET_PCT,
    }
    report = {"schema": "trainplan.bench_predicted_vs_measured/2", "device": profile["device"],
              "date": profile["date"], "summary": summary, "runs": runs}
    with open(os.path.join(out, "step_time.svg"), "w") as f:
        f.write(svg_chart(runs))
    yes = lambda b: "yes" if b else "**no**"
    t = summary["targets_met"]
    bracketed = any("reference_around_ms" in x for x in samples)
    how = (f"{len(round_dirs)} round(s) of the matrix (first calibrated {profile['date']}). Each "
          "plan in each round is an attempt: the reference plan (dp 2, both cores), a calibration "
          "of the kind the plan needs, the prediction, the run, and the reference plan again; the "
          f"attempt is steady when the two reference runs agree within {drift_pct:g}% (the "
          "machine ran at one speed from the calibration to the run)"
          + (f" and other processes took at most {other_pct:g}% of the cores' time while the "
             "plan ran (the percentage in brackets per round)"
             if any("other_cpu_pct" in x for x in samples) else "")
          + (" and the in-run reference kernel's rate was within compare's tolerance of the "
             "calibration's (its signed deviation, `ref`, per round)"
             if any(x.get("reference_gate_steady") is not None for x in samples) else "")
          + ", and an unsteady one was tried again. Per plan and round, `round-K/runs/`: "
          "`NAME.{plan,profile,predicted,measured,compare}.json`, `NAME.calibrate.txt`, the "
          "predicted and measured Chrome traces `NAME.{predicted,measured}_trace.json` and their "
          "per-task difference `NAME.trace_diff.txt`. A plan's error is its median over its "
          "steady rounds, shown with the times of the round nearest to it.")
    if not bracketed:
        # The GPU script (bench/gpu/predicted_vs_measured.sh) calibrates once and runs no
        # reference plan: no attempt can be called steady, and the text must not say otherwise.
        how = (f"{len(round_dirs)} round(s) of the matrix, after one calibration "
               f"({profile['date']}). No reference plan brackets the runs here, so no attempt is "
               "counted steady and each plan's error is its median over every round. Per plan "
               "and round, `round-K/runs/`: `NAME.{plan,predicted,measured,compare}.json`, the "
               "predicted and measured Chrome traces and their per-task difference "
               "`NAME.trace_diff.txt`.")
    md = [f"# Predicted vs measured: {profile['device']}", "", how, "", "![step time](step_time.svg)", "",
          "" if not bracketed else
          f"Steady attempts kept: {summary['steady_samples']} of {summary['samples']} "
          f"({summary['attempts']} attempts in all"
          + (f"; {summary['refused_by_reference_gate']} kept attempt(s) refused by the in-run "
             "reference gate" if any(x.get("reference_gate_steady") is not None for x in samples)
             else "") + ")."
          + (" Plans with no steady round (their rows use every round): "
             + ", ".join(summary["plans_without_steady_round"]) + "."
             if summary["plans_without_steady_round"] else ""), "",
          "| plan | ranks | predicted (ms, round nearest) | measured (ms, round nearest) | fastest step (ms) | median error | fit only | error per round (s: steady; attempts; other processes' CPU share; slow rN: that rank's reference GEMM that far below the fastest rank's) | steady rounds | bytes exact | peak memory max abs error |",
          "|---|---:|---:|---:|---:|---:|---:|---|---:|:---:|---:|"]
    for r in runs:
        per_round = ", ".join(
            f"{e:+.1f}%{' s' if st else ''} ({a}{'' if o is None else f'; {o:.0f}%'}"
            f"{'' if g is None else f'; ref {g:+.1f}%'}"
            f"{f'; slow r{w[0]} -{w[1]:.0f}%' if w and w[1] >= SLOW_RANK_PCT else ''})"
            for e, st, a, o, g, w in zip(r["round_step_errors_pct"], r["round_steady"],
                                         r["round_attempts"], r["round_other_cpu_pct"],
                                         r["round_reference_gate_pct"],
                                         r["round_slowest_rank"]))
        md.append(f"| {r['name']} | {r['ranks']} | {r['predicted_step_s'] * 1e3:.2f} | "
                  f"{r['measured_step_s'] * 1e3:.2f} | {r['fastest_step_s'] * 1e3:.2f} | "
                  f"{r['step_error_pct']:+.1f}% | "
                  + ("n/a" if r.get("fit_only_step_error_pct") is None
                     else f"{r['fit_only_step_error_pct']:+.1f}%") + " | "
                  f"{per_round} | {r['steady_rounds']} of {len(r['round_steady'])} | "
                  f"{yes(r['bytes_exact'])} | {r['max_abs_memory_error_pct']:.1f}% |")
    if summary["load1_range"][0] is not None:
        md += ["", "Load average (1 min) at the start of the kept attempts: "
               f"{summary['load1_range'][0]:g} to {summary['load1_range'][1]:g} "
               f"on {os.cpu_count()} cores."]
    md += ["", "Median signed step-time error of each round: " + ", ".join(
        "n/a" if e is None else f"{e:+.1f}%" for e in summary["round_median_signed_step_error_pct"])]
    md += ["", "| target (issue 6) | figure | met |", "|---|---:|:---:|",
           f"| every plan's step time within {STEP_TARGET_PCT:g}% | max {summary['max_abs_step_error_pct']:.1f}% | {yes(t[f'every_step_within_{STEP_TARGET_PCT:g}pct'])} |",
           f"| median step-time error within {MEDIAN_TARGET_PCT:g}% | {summary['median_abs_step_error_pct']:.1f}% | {yes(t[f'median_within_{MEDIAN_TARGET_PCT:g}pct'])} |",
           *([] if summary["median_abs_fit_only_step_error_pct"] is None else [
               f"| (fit only: the profile without its measured task times) | median {summary['median_abs_fit_only_step_error_pct']:.1f}%, max {summary['max_abs_fit_only_step_error_pct']:.1f}% | – |"]),
           f"| bytes per group exact | {'all' if summary['bytes_exact_all'] else 'not all'} | {yes(t['bytes_exact'])} |",
           f"| peak memory within {MEMORY_TARGET_PCT:g}% | max {summary['max_abs_memory_error_pct']:.1f}% | {yes(t[f'memory_within_{MEMORY_TARGET_PCT:g}pct'])} |",
           ""]
    with open(os.path.join(out, "report.json"), "w") as f:
        json.dump(report, f, indent=2)
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write("\n".join(md))
    print("\n".join(md))


if __name__ == "__main__":
    main()
