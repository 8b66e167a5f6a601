#!/usr/bin/env python3
"""The bubble of 1F1B, ZB-H1, ZB-V and DualPipe on the same plan, simulated (issue 26).

For GPT-3 175B and Llama 3 70B on 8, 32 and 64 H100s: `plan` picks a plan; where it pipelines
(pp > 1), `simulate --json` plays that plan's layout, batch, ZeRO stage, recompute and offload
tier under 1f1b, zb-h1, zb-v (two chunks per stage in a V) and dualpipe (DeepSeek-V3's two
directions, every chunk held twice; only where pp is even and the micro-batches even and at
least 2pp, else the row says why), and reports each one's
`bubble_fraction`, step time and device peak. Writes table.md and report.json into OUT.

Usage: bench/scripts/schedule_bubbles.py BUILD_DIR OUT_DIR
"""
import json
import os
import subprocess
import sys

MODELS = [("gpt3", "models/gpt3.json"), ("llama3-70b", "models/llama3-70b.json")]
GPUS = [8, 32, 64]
SCHEDULES = ["1f1b", "zb-h1", "zb-v", "dualpipe"]
MEMORY_KEYS = ("weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes",
               "buffers_bytes", "runtime_bytes")


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def simulate(build, model, gpus, plan, path):
    with open(path, "w") as f:
        json.dump(plan, f)
    rc, stdout, stderr = run([os.path.join(build, "tools", "simulate"), "--model", model,
                              "--plan", path, "--gpus", str(gpus), "--json"])
    # A plan over the GPU's memory exits non-zero but still reports its figures: keep them,
    # marked (the schedule's bubble is what this study compares).
    try:
        rep = json.loads(stdout)
    except json.JSONDecodeError:
        return {"error": (stderr.strip().splitlines() or ["?"])[-1]}
    peak = max(sum(r["memory"].get(k, 0) for k in MEMORY_KEYS) for r in rep["ranks"])
    return {"step_time_s": rep["step_time_s"], "bubble_fraction": rep.get("bubble_fraction", 0),
            "peak_GB": peak / 1e9, "over_memory": rc != 0}


def with_schedule(base, schedule):
    plan = dict(base)
    plan["schedule"] = schedule
    plan.pop("virtual_stages", None)
    plan.pop("layers_per_stage", None)
    plan.pop("ep_overlap", None)
    if schedule in ("zb-v", "dualpipe"):
        plan["virtual_stages"] = 2
    return plan


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    build, out = sys.argv[1], sys.argv[2]
    raw = os.path.join(out, "raw")
    os.makedirs(raw, exist_ok=True)
    rows = []
    for short, model in MODELS:
        for gpus in GPUS:
            emitted = os.path.join(raw, f"{short}.g{gpus}.plan.json")
            rc, _, stderr = run([os.path.join(build, "tools", "plan"), "--model", model,
                                 "--gpus", str(gpus), "--emit-plan", emitted])
            if rc != 0 or not os.path.exists(emitted):
                rows.append({"model": short, "gpus": gpus, "error": stderr.strip()[-200:]})
                continue
            base = json.load(open(emitted))
            if base["pp"] < 2:
                rows.append({"model": short, "gpus": gpus, "plan": base,
                             "error": f"plan picks pp=1 ({base['schedule']}): no pipeline"})
                continue
            for sched in SCHEDULES:
                r = simulate(build, model, gpus, with_schedule(base, sched),
                             os.path.join(raw, f"{short}.g{gpus}.{sched}.plan.json"))
                r.update({"model": short, "gpus": gpus, "schedule": sched, "plan": base})
                rows.append(r)
    json.dump(rows, open(os.path.join(out, "report.json"), "w"), indent=1)
    lines = ["| model | GPUs | planned (tp/pp/dp, ZeRO, M, offload) | schedule | bubble | step s | "
             "peak GB/GPU |", "|" + "---|" * 7]
    for r in rows:
        p = r.get("plan")
        if p is None:
            lines.append(f"| {r['model']} | {r['gpus']} | no plan: {r['error']} |||||")
            continue
        m = p["global_batch_size"] // (p["micro_batch_size"] * p["dp"])
        shape = (f"{p['tp']}/{p['pp']}/{p['dp']}, {p.get('zero_stage', 0)}, {m}, "
                 f"{p.get('offload', 'none')}")
        if "error" in r:
            lines.append(f"| {r['model']} | {r['gpus']} | {shape} | {r.get('schedule', '-')} | "
                         f"{r['error'][:100]} |||")
            continue
        over = " (over the GPU's memory)" if r.get("over_memory") else ""
        lines.append(f"| {r['model']} | {r['gpus']} | {shape} | {r['schedule']} | "
                     f"{r['bubble_fraction']:.3f} | {r['step_time_s']:.2f} | "
                     f"{r['peak_GB']:.1f}{over} |")
    with open(os.path.join(out, "table.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
