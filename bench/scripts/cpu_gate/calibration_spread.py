#!/usr/bin/env python3
# python3 calibration_spread.py DIR
# A matrix run's raw calibrations (DIR: the OUT of bench/predicted_vs_measured.sh):
# the reference shape's rate (the forward sweep at 256^3) and STREAM triad at 32 MiB, each
# relative to its median over the calibrations of the same kind (1 or 2 ranks computing).
import glob, json, os, statistics, sys
rows = {1: [], 2: []}
for p in sorted(glob.glob(os.path.join(sys.argv[1], "round-*/runs/*.profile.json"))):
    j = json.load(open(p)); plan = json.load(open(p.replace(".profile.json", ".plan.json")))
    n = plan["tp"] * plan.get("cp", 1) * plan["pp"] * plan["dp"]
    t = [x for x in j["measurements"]["tasks"] if x["name"] == "sweep" and abs(x["flops"] - 2 * 256**3) < 1][0]
    tri = [x for x in j["measurements"]["stream"] if x["kernel"] == "triad" and 30 < x["array_MB"] < 40][0]
    rows[n].append((t["flops"] / (t["time_us"] * 1e-6), tri["GBps"]))
for n, v in rows.items():
    g = [a for a, _ in v]; s = [b for _, b in v]
    mg, ms = statistics.median(g), statistics.median(s)
    def rng(x, m):
        q = statistics.quantiles(x, n=10)
        return f"p10 {100*(q[0]/m-1):+.0f}%, p90 {100*(q[-1]/m-1):+.0f}%, min {100*(min(x)/m-1):+.0f}%"
    print(f"{n} rank(s) computing, {len(v)} calibrations: GEMM 256^3 median {mg/1e9:.0f} GFLOP/s ({rng(g, mg)}); "
          f"triad 32 MiB median {ms:.0f} GB/s ({rng(s, ms)}); correlation {statistics.correlation(g, s):.2f}")
    q = statistics.quantiles(g, n=4)
    print(f"  GEMM quartiles {100*(q[0]/mg-1):+.1f}% / {100*(q[2]/mg-1):+.1f}%; within 5% of the median: "
          f"{sum(abs(x/mg-1) <= 0.05 for x in g)} of {len(g)}, within 10%: {sum(abs(x/mg-1) <= 0.10 for x in g)}")
