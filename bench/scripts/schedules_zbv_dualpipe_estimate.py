#!/usr/bin/env python3
"""Issue 26: the bubble of 1F1B, ZB-H1, ZB-V (send-blind and send-aware orders) and DualPipe
on the same plans, simulated, and the planner's estimate beside each.

For GPT-3 175B and Llama 3 70B on 32 and 64 H100s `plan` picks a plan (all four pipeline);
Mixtral 8x7B on 64 H100s adds an MoE layout (tp 1, pp 8, dp 8, ep 8, ZeRO-2, the dualpipe
candidate `plan` now ranks second there). Each layout is played under every schedule with
`simulate --json` (`bubble_fraction`, step time, device peak); zb-v twice: the default order
(send-aware where its replay with the pipeline sends is shorter) and `--zb-v-send-blind`.
`build/bench/planner/plan_estimate` gives the planner's estimate of the same plan.
Writes report.json and table.md into OUT (raw plans and outputs under OUT/raw).

Usage: bench/scripts/schedules_zbv_dualpipe_estimate.py BUILD_DIR OUT_DIR
"""
import json
import os
import subprocess
import sys

MODELS = [("gpt3", "models/gpt3.json"), ("llama3-70b", "models/llama3-70b.json")]
GPUS = [32, 64]
MOE = ("mixtral-8x7b", "models/mixtral-8x7b.json", 64,
       {"attention": "fused", "dp": 8, "ep": 8, "global_batch_size": 512,
        "grad_precision": "compute", "micro_batch_size": 1, "offload": "none",
        "optimizer": "adamw", "pp": 8, "precision": "bf16", "recompute": "none",
        "schedule": "1f1b", "schema": "trainplan.plan/1", "sequence_parallel": False, "tp": 1,
        "virtual_stages": 1, "zero_stage": 2})
# (label, schedule, extra simulate flags)
RUNS = [("1f1b", "1f1b", []), ("zb-h1", "zb-h1", []), ("zb-v blind", "zb-v", ["--zb-v-send-blind"]),
        ("zb-v", "zb-v", []), ("dualpipe", "dualpipe", [])]
MEMORY_KEYS = ("weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes",
               "buffers_bytes", "runtime_bytes")


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def with_schedule(base, schedule):
    plan = dict(base)
    plan["schedule"] = schedule
    for k in ("virtual_stages", "layers_per_stage", "ep_overlap"):
        plan.pop(k, None)
    if schedule in ("zb-v", "dualpipe"):
        plan["virtual_stages"] = 2
    return plan


def measure(build, model, gpus, plan, path, flags):
    with open(path, "w") as f:
        json.dump(plan, f)
    rc, out, err = run([os.path.join(build, "tools", "simulate"), "--model", model, "--plan", path,
                        "--gpus", str(gpus), "--json"] + flags)
    try:
        rep = json.loads(out)
    except json.JSONDecodeError:
        return {"error": (err.strip().splitlines() or ["?"])[-1]}
    peak = max(sum(r["memory"].get(k, 0) for k in MEMORY_KEYS) for r in rep["ranks"])
    row = {"step_time_s": rep["step_time_s"], "bubble_fraction": rep.get("bubble_fraction", 0),
           "peak_GB": peak / 1e9, "over_memory": rc != 0}
    rc, out, err = run([os.path.join(build, "bench", "planner", "plan_estimate"), model, path,
                        str(gpus)])
    if rc == 0:
        est = json.loads(out)
        row["estimate_s"] = est["step_time_s"]
        row["estimate_error"] = est["step_time_s"] / row["step_time_s"] - 1
    return row


def bases(build, raw):
    for short, model in MODELS:
        for gpus in GPUS:
            emitted = os.path.join(raw, f"{short}.g{gpus}.plan.json")
            rc, _, err = run([os.path.join(build, "tools", "plan"), "--model", model, "--gpus",
                              str(gpus), "--emit-plan", emitted])
            if rc != 0 or not os.path.exists(emitted):
                sys.exit(f"plan failed for {short} on {gpus} GPUs: {err.strip()[-300:]}")
            yield short, model, gpus, json.load(open(emitted))
    yield MOE[0], MOE[1], MOE[2], MOE[3]


def table(rows):
    lines = ["| model | GPUs | layout (tp/pp/dp/ep, ZeRO, M) | schedule | bubble | step s "
             "(simulated) | estimate s | estimate error | peak GB |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        p = r["plan"]
        m = p["global_batch_size"] // (p["dp"] * p["micro_batch_size"])
        layout = f"{p['tp']}/{p['pp']}/{p['dp']}/{p.get('ep', 1)}, {p['zero_stage']}, {m}"
        if "error" in r:
            lines.append(f"| {r['model']} | {r['gpus']} | {layout} | {r['schedule']} | "
                         f"{r['error']} | | | | |")
            continue
        est = f"{r['estimate_s']:.3f}" if "estimate_s" in r else "-"
        err = f"{100 * r['estimate_error']:+.1f}%" if "estimate_error" in r else "-"
        over = " (over)" if r["over_memory"] else ""
        lines.append(f"| {r['model']} | {r['gpus']} | {layout} | {r['schedule']} | "
                     f"{r['bubble_fraction']:.3f} | {r['step_time_s']:.3f} | {est} | {err} | "
                     f"{r['peak_GB']:.1f}{over} |")
    return "\n".join(lines) + "\n"


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    build, out = sys.argv[1], sys.argv[2]
    raw = os.path.join(out, "raw")
    os.makedirs(raw, exist_ok=True)
    rows = []
    for short, model, gpus, base in bases(build, raw):
        for label, sched, flags in RUNS:
            path = os.path.join(raw, f"{short}.g{gpus}.{label.replace(' ', '-')}.plan.json")
            r = measure(build, model, gpus, with_schedule(base, sched), path, flags)
            r.update({"model": short, "gpus": gpus, "schedule": label, "plan": base})
            rows.append(r)
            print(short, gpus, label, {k: r.get(k) for k in ("bubble_fraction", "step_time_s",
                                                             "estimate_s")}, flush=True)
    with open(os.path.join(out, "report.json"), "w") as f:
        json.dump(rows, f, indent=1)
    with open(os.path.join(out, "table.md"), "w") as f:
        f.write(table(rows))


if __name__ == "__main__":
    main()
