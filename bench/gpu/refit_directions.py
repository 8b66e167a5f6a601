#!/usr/bin/env python3
"""Applies calibrate's backward-GEMM direction step (calibration/fit.cc, fit_gemm_directions:
the compute-time-weighted median since 21ed2a3) to a lease's stored per-probe measurements, and
writes a copy of the lease's matrix record with the direction efficiencies it gives, for
bench/gpu/repredict.sh. For a lease fitted before that change; the next lease's calibrate does
this itself. Only single-task samples count (on the CUDA executor every GEMM span is one task).

  python3 bench/gpu/refit_directions.py RECORD OUT
    RECORD: a lease's matrix record (validation/gpu/*.json) with calibrate's per-probe task times
            (`task_measurements`, bench/gpu/matrix_record.py); OUT: the record to write
"""
import json
import sys


def weighted_median(pairs):
    """The smallest ratio at which the weights at or below it reach half the total."""
    pairs = sorted(pairs)
    total = sum(w for _, w in pairs)
    below = 0.0
    for ratio, w in pairs:
        below += w
        if below >= total / 2:
            return ratio
    return pairs[-1][0]


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    record_path, out = sys.argv[1:]
    try:
        record = json.load(open(record_path))
        rates = record["profile"]
        if "task_measurements" not in record:
            raise SystemExit(f"refit_directions: {record_path}: no 'task_measurements' (a record "
                             "packed before bench/gpu/matrix_record.py kept them)")
        tasks = record["task_measurements"]
        overhead = rates["kernel_overhead_us"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise SystemExit(f"refit_directions: {record_path}: {e!r}")
    if not tasks:
        raise SystemExit(f"refit_directions: {record_path}: 'task_measurements' is empty")
    forward = rates["gemm_efficiency"]
    for suffix, key in (("_dgrad", "gemm_input_gradient_efficiency"),
                        ("_wgrad", "gemm_weight_gradient_efficiency")):
        # Per sample: the modelled compute time at the lease's efficiency over the measured
        # time less the overhead (fit.cc, direction_ratio), weighted by the latter.
        pairs = [((t["fit_us"] - overhead) / (t["time_us"] - overhead), t["time_us"] - overhead)
                 for t in tasks if t["name"].endswith(suffix) and len(t["tasks"]) == 1 and
                 t["fit_us"] > overhead and t["time_us"] > overhead]
        if not pairs:
            continue
        lease = rates[key] or forward
        rates[key] = min(1.0, lease * weighted_median(pairs))
        print(f"{key}: {lease:.3f} at the lease, {rates[key]:.3f} weighted ({len(pairs)} samples)")
    json.dump(record, open(out, "w"), indent=1)


if __name__ == "__main__":
    main()
