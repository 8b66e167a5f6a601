#!/usr/bin/env python3
"""What a slower inter-node network would do to the Ultra-Scale Playbook runs (issue 23, study
bench/results/published-2026-12-02-nanotron). Uses published_breakdown's SLOWDOWN knob (every
inter-node bandwidth divided by it; a what-if, not a model) and prints two markdown tables:

1. each run on 4+ nodes at slowdowns 1 ... 11 (throughput error, + is predicted too fast), and
2. each run at the slowdown its node count would get if the playbook's own all-reduce benchmark
   on the cluster were the network (bus bandwidth 160 / 100 / 85 / 65 / 33 GB/s on 4 / 8 / 16 /
   32 / 64 nodes, against the presets' 8 x 46 = 368 GB/s of NICs per node; the netscale study's
   divisors), and the family's median / p90 / mean throughput error both ways (the 1- and 2-node
   runs keep the presets' network: the benchmark has no 2-node figure and 1 node is NVLink).

Run: python3 bench/scripts/nanotron_network_whatif.py BUILD_DIR CORPUS
"""
import json
import subprocess
import sys

SLOWDOWNS = [1, 1.5, 2, 2.5, 3, 4, 6, 8, 11]
PRESET_NODE_GBPS = 8 * 46.0
BENCH_BUSBW = {4: 160, 8: 100, 16: 85, 32: 65, 64: 33}


def breakdown(build, corpus, filt, slowdown):
    # Exit status 1: some corpus entries were not read or simulated (named on stderr); the
    # runs it printed are complete.
    done = subprocess.run([f"{build}/bench/simulator/published_breakdown", corpus, filt,
                           str(slowdown)], capture_output=True, text=True)
    if done.returncode not in (0, 1):
        raise SystemExit(done.stderr)
    out = done.stdout
    return {j["id"]: j for j in (json.loads(l) for l in out.splitlines() if l.startswith("{"))}


def err(r):
    return r["measured_step_s"] / r["predicted_step_s"] - 1


def main(build, corpus):
    runs = {s: breakdown(build, corpus, "nanotron", s) for s in SLOWDOWNS}
    print("| run | nodes |" + "".join(f" /{s} |" for s in SLOWDOWNS))
    print("|---|---:|" + "---:|" * len(SLOWDOWNS))
    for rid, r in runs[1].items():
        if r["nodes"] < 4:
            continue
        cells = "".join(f" {err(runs[s][rid]):+.1%} |" for s in SLOWDOWNS)
        print(f"| {rid.replace('nanotron_ultrascale_h100_', '')} | {r['nodes']} |{cells}")
    print()
    print("| run | nodes | benchmark busbw (GB/s) | divisor | error at presets | error with the "
          "benchmark as the network |")
    print("|---|---:|---:|---:|---:|---:|")
    with_bench = {rid: err(r) for rid, r in runs[1].items()}
    for nodes, busbw in BENCH_BUSBW.items():
        div = PRESET_NODE_GBPS / busbw
        at = breakdown(build, corpus, f"_{nodes}node", round(div, 2))
        for rid, r in at.items():
            with_bench[rid] = err(r)
            print(f"| {rid.replace('nanotron_ultrascale_h100_', '')} | {nodes} | {busbw} | "
                  f"{div:.2f} | {err(runs[1][rid]):+.1%} | {err(r):+.1%} |")
    print()
    for label, errs in (("presets' network", [err(r) for r in runs[1].values()]),
                        ("the benchmark as the network", list(with_bench.values()))):
        print(f"- family at {label}: {summary(errs)} over {len(errs)} runs")


def summary(errs):
    """Median and p90 of |error| (nearest rank), mean error."""
    a = sorted(abs(e) for e in errs)
    n = len(a)
    med = (a[(n - 1) // 2] + a[n // 2]) / 2
    p90 = a[min(n - 1, -(-9 * n // 10) - 1)]
    return f"median {med:.1%}, p90 {p90:.1%}, mean {sum(errs) / n:+.1%}"


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
