#!/usr/bin/env python3
"""Summary of bench/scripts/offload_study.sh's raw rounds: per case, the median over rounds of
the step time (each round's own median over its measured steps) and of rank 0's optimizer
time, the step time against the case without offload, and each rank's bytes per step between
the tiers against the cost model's (execute's cluster.offload_bytes_per_step).

    python3 bench/scripts/offload_study_report.py RAW_DIR OUT_DIR
writes OUT_DIR/report.md and OUT_DIR/report.json."""
import glob
import json
import os
import re
import statistics
import sys

CASES = ["none", "opt_cpu", "opt_nvme", "opt_nvme_no_prefetch", "params_cpu", "params_nvme",
         "params_nvme_no_prefetch"]
KINDS = ["device_to_host_bytes", "host_to_device_bytes", "nvme_read_bytes", "nvme_write_bytes"]


def main(raw, out):
    rows = {}
    for case in CASES:
        files = sorted(glob.glob(os.path.join(raw, case + ".r*.json")))
        files = [f for f in files if re.search(r"\.r\d+\.json$", f)]
        if not files:
            continue
        reports = [json.load(open(f)) for f in files]
        step = [r["step_time_s"] for r in reports]
        opt = [r["ranks"][0]["optimizer_s"] for r in reports]
        bytes_ = reports[-1]["cluster"].get("offload_bytes_per_step", [])
        rows[case] = {
            "rounds": len(reports),
            "step_time_s": statistics.median(step),
            "step_time_s_rounds": step,
            "optimizer_s_rank0": statistics.median(opt),
            "offload_bytes_per_step": bytes_,
            "bytes_equal_cost_model": all(b[k] == b["cost_model"][k] for b in bytes_ for k in KINDS),
        }
    base = rows.get("none", {}).get("step_time_s")
    for r in rows.values():
        r["vs_none"] = r["step_time_s"] / base if base else None
    os.makedirs(out, exist_ok=True)
    machine = open(os.path.join(raw, "machine.txt")).read() if os.path.exists(
        os.path.join(raw, "machine.txt")) else ""
    json.dump({"machine": machine, "cases": rows}, open(os.path.join(out, "report.json"), "w"),
              indent=2)
    model = re.search(r"^model: (.*)$", machine, re.M)
    model = os.path.basename(model.group(1)) if model else "models/tiny.json"
    lines = [f"# Offload tiers on the CPU executor: {model}, dp 2, ZeRO-3", "",
             "```", machine.strip(), "```", "",
             "| case | step s (median of rounds) | vs none | optimizer s (rank 0) | rounds |",
             "| --- | --- | --- | --- | --- |"]
    for case, r in rows.items():
        vs = "-" if r["vs_none"] is None else f"{r['vs_none']:.2f}x"
        lines.append(f"| {case} | {r['step_time_s']:.4f} | {vs} | "
                     f"{r['optimizer_s_rank0']:.4f} | {r['rounds']} |")
    lines += ["", "Bytes per step, rank 0 (executor / cost model; both ranks "
              "equal the cost model exactly where the last column says yes):", "",
              "| case | device->host | host->device | NVMe read | NVMe write | all equal | "
              "NVMe read ahead |",
              "| --- | --- | --- | --- | --- | --- | --- |"]
    for case, r in rows.items():
        if not r["offload_bytes_per_step"]:
            continue
        b = r["offload_bytes_per_step"][0]
        cells = [f"{b[k]:.0f} / {b['cost_model'][k]:.0f}" for k in KINDS]
        ahead = b.get("nvme_prefetched_bytes")
        lines.append(f"| {case} | " + " | ".join(cells) +
                     f" | {'yes' if r['bytes_equal_cost_model'] else 'NO'} | "
                     f"{'-' if ahead is None else f'{ahead:.0f}'} |")
    open(os.path.join(out, "report.md"), "w").write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
