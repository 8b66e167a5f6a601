#!/usr/bin/env python3
"""Re-predict a predicted_vs_measured.sh round's two-rank plans with calibrate's 2026-12-05 link
fit (the eager limit from the benchmark loop, the rendezvous latency and rates from the in-step
collectives; calibration/fit.cc, mirrored here) and with simulate --grad-reduce-after-backward,
against the same measured step times. Offline: the measurements are the round's own.

    python3 bench/scripts/link_refit_whatif.py BUILD_DIR ROUND_DIR [ROUND_DIR ...]

Prints, per plan and round, the signed step-time error (+ = predicted slower) of:
the profile as calibrated / with the DP sums after the backward / the refitted links / both /
both with the executors' ZeRO-2/3 gradient work priced (grad_accumulation_pass shard-add, set on
a ZeRO-2/3 plan as predicted_vs_measured.sh now sets it; the same as "both" otherwise).
The F test uses fixed critical values (12.5 for the loop's search over its sizes, about
F(1, 33) at 0.01/8; 7.5 for one given limit, F(1, 33) at 0.01), where calibrate computes them.
"""
import json
import pathlib
import subprocess
import sys


def steps(c, n):
    return 2 * (n - 1) if c == "all_reduce" else (1 if c == "send_recv" else n - 1)


def sent(c, b, n):
    if c == "all_reduce":
        return 2 * (n - 1) * b // n
    if c == "send_recv":
        return b
    return (n - 1) * b // n


def solve(m, v):
    n = len(v)
    m = [r[:] + [v[i]] for i, r in enumerate(m)]
    for i in range(n):
        piv = max(range(i, n), key=lambda r: abs(m[r][i]))
        m[i], m[piv] = m[piv], m[i]
        for r in range(n):
            if r != i:
                f = m[r][i] / m[i][i]
                m[r] = [a - f * b for a, b in zip(m[r], m[i])]
    return [m[i][n] / m[i][i] for i in range(n)]


def wls(x, y, cols):
    w = [1 / t for t in y]
    normal = [[sum(w[i] ** 2 * x[i][a] * x[i][b] for i in range(len(y))) for b in cols] for a in cols]
    rhs = [sum(w[i] ** 2 * x[i][a] * y[i] for i in range(len(y))) for a in cols]
    full = [0.0, 0.0, 0.0]
    for c, val in zip(cols, solve(normal, rhs)):
        full[c] = val
    sse = sum((w[i] * (sum(x[i][a] * full[a] for a in range(3)) - y[i])) ** 2 for i in range(len(y)))
    return full, sse


def fit(samples, f_crit, fixed=None):
    rows = [(steps(s["collective"], s["ranks"]), sent(s["collective"], s["size_bytes"], s["ranks"]),
             s["time_us"] * 1e-6) for s in samples if s["ranks"] >= 2]
    y = [r[2] for r in rows]
    per = [r[1] // r[0] for r in rows]
    line, line_sse = wls([[r[0], 0, r[1]] for r in rows], y, [0, 2])
    best = (line, 0, line_sse)
    candidates = sorted(set(per)) if fixed is None else ([fixed] if fixed > 0 else [])
    for limit in candidates:
        over = sum(1 for q in per if q > limit)
        if over < 2 or len(rows) - over < 2:
            continue
        x = [[r[0], r[0] if q > limit else 0, r[1]] for r, q in zip(rows, per)]
        xr, sse = wls(x, y, [0, 1, 2])
        if xr[0] < 0:
            xr, sse = wls(x, y, [1, 2])
        f = (line_sse - sse) * (len(rows) - 3) / sse
        if xr[1] > 0 and xr[2] > 0 and f > f_crit and sse < best[2]:
            best = (xr, limit, sse)
    return best


def refit(profile_path, out_path):
    p = json.loads(profile_path.read_text())
    m = p["measurements"]
    _, loop_limit, _ = fit(m["collectives"], 12.5)
    x, limit, _ = fit(m["step_collectives"], 7.5, loop_limit)
    links = p["links"]
    links["intra_node_GBps"] = links["inter_node_GBps"] = 1 / x[2] / 1e9
    links["intra_node_latency_us"] = links["inter_node_latency_us"] = x[0] * 1e6
    if limit:
        links["eager_limit_bytes"] = limit
        links["rendezvous_latency_us"] = x[1] * 1e6
    out_path.write_text(json.dumps(p))


def main():
    build = pathlib.Path(sys.argv[1])
    root = pathlib.Path(__file__).resolve().parents[2]
    for round_dir in map(pathlib.Path, sys.argv[2:]):
        runs = round_dir / "runs"
        for measured in sorted(runs.glob("*.measured.json")):
            name = measured.name[: -len(".measured.json")]
            plan = json.loads((runs / f"{name}.plan.json").read_text())
            ranks = 1
            for k in ("tp", "pp", "dp", "cp"):
                ranks *= plan.get(k, 1)
            if ranks < 2:
                continue
            model = root / ("tests/executor/models/tiny-moe.json" if name.startswith("moe")
                            else "models/tiny.json")
            meas = json.loads(measured.read_text())["step_time_s"]
            refitted = runs / f"{name}.profile.refit.json"
            refit(runs / f"{name}.profile.json", refitted)
            errors = []
            for profile in (runs / f"{name}.profile.json", refitted):
                for flag in ([], ["--grad-reduce-after-backward"]):
                    out = subprocess.run(
                        [str(build / "tools/simulate"), "--model", str(model), "--plan",
                         str(runs / f"{name}.plan.json"), "--cluster",
                         str(runs / f"{name}.cluster.json"), "--hardware", str(profile), "--json",
                         *flag], check=True, capture_output=True, text=True).stdout
                    t = json.loads(out)["step_time_s"]
                    errors.append(f"{100 * (t - meas) / meas:+.1f}%")
            priced = runs / f"{name}.plan.shard-add.json"
            if plan.get("zero_stage", 0) >= 2:
                plan["grad_accumulation_pass"] = "shard-add"
            priced.write_text(json.dumps(plan) + "\n")
            out = subprocess.run(
                [str(build / "tools/simulate"), "--model", str(model), "--plan", str(priced),
                 "--cluster", str(runs / f"{name}.cluster.json"), "--hardware", str(refitted),
                 "--json", "--grad-reduce-after-backward"],
                check=True, capture_output=True, text=True).stdout
            t = json.loads(out)["step_time_s"]
            errors.append(f"{100 * (t - meas) / meas:+.1f}%")
            print(round_dir.name, name, *errors)


if __name__ == "__main__":
    main()
