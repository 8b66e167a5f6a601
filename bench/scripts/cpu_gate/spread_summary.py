#!/usr/bin/env python3
"""spread.sh's attempts: each calibration's three reference samples and the run's per-step rates
(GFLOP/s), and the run's median against the calibration's.   python3 spread_summary.py OUT"""
import json, glob, statistics, sys
O = sys.argv[1]
cal = []
for i in range(1, 100):
    try: p = json.load(open(f"{O}/profile.{i}.json"))
    except FileNotFoundError: break
    r = p["measurements"]["reference_gemm"]
    m = json.load(open(f"{O}/measured.{i}.json"))
    g = m["cluster"]["reference_gemm"]
    w = g["warmup_steps"]
    steps = g["per_rank"][0]["flops_per_s"][w:]
    med = statistics.median(steps)
    load = open(f"{O}/load.{i}").read().split()[1]
    cal.append(r["flops_per_s"])
    print(f"attempt {i} (load1 {load}): calibrate samples "
          + ", ".join(f"{x/1e9:.1f}" for x in r["samples_flops_per_s"])
          + f" GFLOP/s (median {r['flops_per_s']/1e9:.1f}, spread {r['spread_pct']:.1f}%); "
          f"run: steps {min(steps)/1e9:.1f}-{max(steps)/1e9:.1f}, median {med/1e9:.1f} "
          f"({100*(med/r['flops_per_s']-1):+.1f}% from calibrate); step time {m['step_time_s']*1e3:.2f} ms")
med = statistics.median(cal)
print(f"calibrations' medians across attempts: {min(cal)/1e9:.1f}-{max(cal)/1e9:.1f} GFLOP/s, "
      f"spread (max-min)/median {100*(max(cal)-min(cal))/med:.1f}%")
