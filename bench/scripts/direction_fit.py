#!/usr/bin/env python3
"""How well a calibrated profile times the executor's backward GEMMs and fused attention, with
each direction's own efficiency and with the single figures (the fallback of a profile without
the direction keys, core/cost/compute_model.h), from the profile's own measurements.

  python3 bench/scripts/direction_fit.py PROFILE.json [...]

For each of the executor's spans that is one task (measurements.tasks, the probe's, not the
sweep's): the measured time, the profile's fitted time (fit_us) and the fallback's. A GEMM or
fused attention on a CPU is compute-bound, so its time less the kernel overhead scales as
1 / efficiency: fallback = overhead + (fit - overhead) * own / single. Prints, per direction,
the median signed error (fit - measured) / measured of both. Tested by
tests/bench/direction_fit_test.py.
"""
import json
import statistics
import sys

FORWARD_GEMMS = {"qkv", "out_proj", "fc1", "fc2", "lm_head", "router", "expert_fc1",
                 "expert_fc2", "shared_fc1", "shared_fc2"}


def direction(name):
    """The direction of a one-task span, or None for spans that are not a GEMM or attention."""
    if name.endswith("_wgrad"):
        return "weight_gradient"
    if name.endswith("_dgrad"):
        return "input_gradient"
    if name == "attention":
        return "attention_forward"
    if name == "attention_bwd":
        return "attention_backward"
    return "forward" if name in FORWARD_GEMMS else None


def efficiencies(profile):
    """Own and single (fallback) efficiency per direction; own is 0 when not measured apart."""
    gemm = profile["gemm_efficiency"]
    attention = profile.get("attention_efficiency", 1.0)
    return {
        "forward": (gemm, gemm),
        "input_gradient": (profile.get("gemm_input_gradient_efficiency", 0) or gemm, gemm),
        "weight_gradient": (profile.get("gemm_weight_gradient_efficiency", 0) or gemm, gemm),
        "attention_forward": (attention, attention),
        "attention_backward": (profile.get("attention_backward_efficiency", 0) or attention,
                               attention),
    }


def errors(profile):
    """{direction: ([own errors %], [fallback errors %])} over the profile's one-task spans."""
    eff = efficiencies(profile)
    overhead = profile.get("kernel_overhead_us", 0.0)
    out = {}
    for s in profile["measurements"]["tasks"]:
        if s["probe"] == "sweep" or len(s["tasks"]) != 1:
            continue
        d = direction(s["tasks"][0])
        if d is None:
            continue
        own, single = eff[d]
        fit, measured = s["fit_us"], s["time_us"]
        fallback = overhead + (fit - overhead) * own / single
        own_err, fb_err = out.setdefault(d, ([], []))
        own_err.append(100 * (fit - measured) / measured)
        fb_err.append(100 * (fallback - measured) / measured)
    return out


def main(paths):
    if not paths:
        print(__doc__.strip().splitlines()[3].strip(), file=sys.stderr)
        return 2
    print("| profile | direction | spans | own efficiency | median error, own | median error, single figure |")
    print("|---|---|---:|---:|---:|---:|")
    for path in paths:
        try:
            with open(path) as f:
                profile = json.load(f)
            table = errors(profile)
            eff = efficiencies(profile)
        except (OSError, ValueError, KeyError) as e:
            print(f"direction_fit: {path}: {e!r}", file=sys.stderr)
            return 1
        for d in sorted(table):
            own_err, fb_err = table[d]
            print(f"| {path.split('/')[-1]} | {d} | {len(own_err)} | {eff[d][0]:.3f} | "
                  f"{statistics.median(own_err):+.1f}% | {statistics.median(fb_err):+.1f}% |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
