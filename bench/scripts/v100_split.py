#!/usr/bin/env python3
"""Splits predicted compute into a GEMM part and the rest, from two predictions that differ only
in the GEMM rate (bench/results/published-2026-12-02-v100/NOTES.md).

  v100_split.py rate BEFORE.json AFTER.json RATIO
    BEFORE/AFTER: `simulate --published ... --json` reports (raw/presets.json) of two builds whose
    only difference is the V100 GEMM efficiency; RATIO = after / before GEMM rate. For each V100
    run: predicted step before and after, and the GEMM time G (after) such that
    before - after = G x (RATIO - 1), the rest = after - G, and the measured step.
  v100_split.py fp8 BREAKDOWN.jsonl
    published_breakdown lines of the MaxText family: per precision the predicted compute, and
    the GEMM time G (bf16) such that compute_bf16 - compute_fp8 = G / 2 (FP8 GEMMs at twice the
    rate, everything else unchanged), the rest, and the measured BF16 -> FP8 step difference.
"""
import json
import sys


def step(run):
    for m in run["metrics"]:
        if m["name"] == "iteration_time_s":
            return m["predicted"], m["measured"]
    return None, None


def rate(before_path, after_path, ratio):
    before = {r["id"]: r for r in json.load(open(before_path))["runs"]}
    after = {r["id"]: r for r in json.load(open(after_path))["runs"]}
    print("id  measured  predicted_before  predicted_after  gemm_after  rest_after")
    for rid, a in after.items():
        if "V100" not in a.get("family", {}).get("gpu_generation", ""):
            continue
        pa, meas = step(a)
        pb, _ = step(before[rid])
        g = (pb - pa) / (ratio - 1) * 1.0
        print(f"{rid}  {meas:.3f}  {pb:.3f}  {pa:.3f}  {g:.3f}  {pa - g:.3f}")


def fp8(path):
    runs = [json.loads(l) for l in open(path) if l.strip()]
    by = {}
    for r in runs:
        key = (r["gpus"], bool(r["plan"].get("fp8")))
        by[key] = r
    for gpus in sorted({k[0] for k in by}):
        b, f = by[(gpus, False)], by[(gpus, True)]
        cb, cf = b["stages"][0]["compute_s"], f["stages"][0]["compute_s"]
        g = 2 * (cb - cf)
        exposed = b["stages"][0]["comm"]["dp"]["exposed_s"]
        print(f"{gpus} GPUs: compute bf16 {cb:.2f} s, fp8 {cf:.2f} s (x{cb / cf:.2f}); "
              f"GEMM (bf16) {g:.2f} s, rest {cb - g:.2f} s ({(cb - g) / cb:.0%}); "
              f"dp exposed {exposed:.2f} s; measured bf16 {b['measured_step_s']:.3f} s, "
              f"fp8 {f['measured_step_s']:.3f} s (x{b['measured_step_s'] / f['measured_step_s']:.2f},"
              f" difference {b['measured_step_s'] - f['measured_step_s']:.2f} s)")


if __name__ == "__main__":
    if sys.argv[1] == "rate":
        rate(sys.argv[2], sys.argv[3], float(sys.argv[4]))
    else:
        fp8(sys.argv[2])
