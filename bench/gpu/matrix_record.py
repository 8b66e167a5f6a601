#!/usr/bin/env python3
"""Packs a GPU lease's predicted-vs-measured matrix into one record: what `simulate` needs to
predict each plan again without a GPU (the cluster, the fitted profile without its raw
measurements, the models, each plan), what was measured (step time, peak memory), with the
prediction made at the lease, and calibrate's per-probe task times and device-copy bandwidths
(`measurements`: what bench/gpu/refit_record.cc fits the profile again from). bench/gpu/repredict.sh reads it; bench/gpu/lease.sh writes it.

  python3 bench/gpu/matrix_record.py PVM_DIR OUT.json [--note TEXT]

PVM_DIR: the folder bench/gpu/predicted_vs_measured.sh wrote (cluster.json, profile.json, the
models, round-1/runs/NAME.{plan,measured,predicted}.json).
"""
import argparse
import glob
import json
import os
import sys


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        sys.exit(f"matrix_record: {path}: {e}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("pvm_dir")
    ap.add_argument("out")
    ap.add_argument("--note", default="")
    a = ap.parse_args()
    runs_dir = os.path.join(a.pvm_dir, "round-1", "runs")
    plans = sorted(glob.glob(os.path.join(runs_dir, "*.plan.json")))
    if not plans:
        sys.exit(f"matrix_record: no round-1/runs/*.plan.json under {a.pvm_dir}")
    profile = load(os.path.join(a.pvm_dir, "profile.json"))
    # The raw samples stay with the lease, but for what the compute fit reads (about 70 kB).
    raw = profile.pop("measurements", {})
    measurements = {"tasks": raw.get("tasks", []), "stream": raw.get("stream", [])}
    record = {"schema": "trainplan.gpu_matrix/1", "device": profile.get("device", ""),
              "calibrated": profile.get("date", ""), "note": a.note,
              "cluster": load(os.path.join(a.pvm_dir, "cluster.json")), "profile": profile,
              "models": {}, "runs": []}
    for plan_path in plans:
        name = os.path.basename(plan_path)[: -len(".plan.json")]
        model = "tiny" if name.startswith("tiny") else "gpt2-124m"
        if model not in record["models"]:
            record["models"][model] = load(os.path.join(a.pvm_dir, model + ".json"))
        measured = load(os.path.join(runs_dir, name + ".measured.json"))
        run = {"name": name, "model": model, "plan": load(plan_path),
               "measured_step_s": measured["step_time_s"],
               "measured_peak_bytes": [r["peak_memory_bytes"] for r in measured["ranks"]]}
        predicted = os.path.join(runs_dir, name + ".predicted.json")
        if os.path.exists(predicted):
            run["predicted_at_lease_step_s"] = load(predicted)["step_time_s"]
        record["runs"].append(run)
    record["measurements"] = measurements
    with open(a.out + ".tmp", "w") as f:
        json.dump(record, f, indent=1)
        f.write("\n")
    os.replace(a.out + ".tmp", a.out)
    print(f"{a.out}: {len(record['runs'])} runs")


if __name__ == "__main__":
    main()
