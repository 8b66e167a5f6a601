#!/usr/bin/env python3
"""Schedules and memory tiers, simulated (issue 26).

For GPT-3 175B and Llama 3 70B on 8, 32 and 64 H100s: `plan` picks a plan; `simulate --json`
then plays it under each pipeline schedule (1f1b, zb-h1; pp > 1 only) and each memory tier
(no offload, optimizer states on the host, ZeRO-3 offload of parameters and gradients to host
memory, ZeRO-Infinity's NVMe tier; the last two need ZeRO-3), reporting the step time, the
bubble fraction, the device peak and the host and NVMe memory. Writes table.md (a markdown
table), tiers.svg (step time against device peak, per tier and schedule) and report.json into
OUT.

Usage: bench/scripts/schedules_and_tiers.py BUILD_DIR OUT_DIR
"""
import html
import json
import math
import os
import subprocess
import sys

MODELS = [("gpt3", "models/gpt3.json"), ("llama3-70b", "models/llama3-70b.json")]
GPUS = [8, 32, 64]
TIERS = [("none", "none", "cpu"), ("optimizer", "optimizer", "cpu"),
         ("params:cpu", "optimizer+params", "cpu"), ("params:nvme", "optimizer+params", "nvme")]


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def simulate(build, model, gpus, plan, out, name):
    path = os.path.join(out, "raw", name + ".plan.json")
    with open(path, "w") as f:
        json.dump(plan, f)
    rc, stdout, stderr = run([os.path.join(build, "tools", "simulate"), "--model", model,
                              "--plan", path, "--gpus", str(gpus), "--json"])
    if rc != 0:
        return {"error": (stderr.strip().splitlines() or ["?"])[-1]}
    rep = json.loads(stdout)
    ranks = rep["ranks"]
    peak = max(sum(r["memory"].get(k, 0) for k in
                   ("weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes",
                    "buffers_bytes", "runtime_bytes")) for r in ranks)
    host = max(r["memory"].get("host_optimizer_bytes", 0) + r["memory"].get("host_param_bytes", 0)
               for r in ranks)
    nvme = max(r["memory"].get("nvme_bytes", 0) for r in ranks)
    return {"step_time_s": rep["step_time_s"], "bubble_fraction": rep.get("bubble_fraction", 0),
            "peak_GB": peak / 1e9, "host_GB_per_gpu": host / 1e9, "nvme_GB_per_gpu": nvme / 1e9}


TIER_COLOURS = {"none": "#444444", "optimizer": "#1f77b4", "params:cpu": "#2ca02c",
                "params:nvme": "#d62728"}


def svg_chart(rows, usable_GB):
    """One panel per model: step time (log scale) against the device peak, a point per GPU count,
    schedule and tier (colour: tier; circle 1f1b, square zb-h1), the usable memory as a line."""
    models = list(dict.fromkeys(r["model"] for r in rows))
    played = [r for r in rows if "step_time_s" in r]
    lo = math.floor(math.log10(min(r["step_time_s"] for r in played)))
    hi = math.ceil(math.log10(max(r["step_time_s"] for r in played)))
    top_GB = max(max(r["peak_GB"] for r in played), usable_GB) * 1.1
    panel_w, panel_h, left, top_px = 420, 300, 60, 40
    width, height = left + len(models) * (panel_w + left), top_px + panel_h + 110

    def px(r):
        return (left + (math.log10(r["step_time_s"]) - lo) / (hi - lo) * panel_w,
                top_px + panel_h * (1 - r["peak_GB"] / top_GB))
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           'font-family="sans-serif" font-size="11">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{left}" y="16">Step time against device peak per GPU, simulated '
           '(H100 80 GB; label: GPU count)</text>']
    for m, model in enumerate(models):
        ox = m * (panel_w + left)
        g = [f'<g transform="translate({ox},0)">',
             f'<text x="{left}" y="{top_px - 8}" font-weight="bold">{html.escape(model)}</text>',
             f'<rect x="{left}" y="{top_px}" width="{panel_w}" height="{panel_h}" fill="none" '
             'stroke="black"/>']
        for e in range(lo, hi + 1):
            x = left + (e - lo) / (hi - lo) * panel_w
            g.append(f'<line x1="{x:.1f}" y1="{top_px}" x2="{x:.1f}" y2="{top_px + panel_h}" '
                     'stroke="#dddddd"/>')
            g.append(f'<text x="{x - 10:.1f}" y="{top_px + panel_h + 14}">{10 ** e:g} s</text>')
        for gb in range(0, int(top_GB) + 1, 20):
            y = top_px + panel_h * (1 - gb / top_GB)
            g.append(f'<text x="{left - 40}" y="{y + 4:.1f}">{gb} GB</text>')
        yu = top_px + panel_h * (1 - usable_GB / top_GB)
        g.append(f'<line x1="{left}" y1="{yu:.1f}" x2="{left + panel_w}" y2="{yu:.1f}" '
                 'stroke="#d62728" stroke-dasharray="4 3"/>')
        g.append(f'<text x="{left + panel_w - 90}" y="{yu - 4:.1f}" fill="#d62728">usable '
                 f'{usable_GB:.0f} GB</text>')
        for r in (r for r in played if r["model"] == model):
            x, y = px(r)
            colour = TIER_COLOURS[r["tier"]]
            if r["schedule"] == "zb-h1":
                g.append(f'<rect x="{x - 4:.1f}" y="{y - 4:.1f}" width="8" height="8" '
                         f'fill="none" stroke="{colour}" stroke-width="1.5"/>')
            else:
                g.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4" fill="{colour}"/>')
            g.append(f'<text x="{x + 6:.1f}" y="{y - 4:.1f}" font-size="9">{r["gpus"]}</text>')
        g.append("</g>")
        out += g
    ly = top_px + panel_h + 40
    for i, (tier, colour) in enumerate(TIER_COLOURS.items()):
        out.append(f'<circle cx="{left + 10 + i * 160}" cy="{ly}" r="4" fill="{colour}"/>')
        out.append(f'<text x="{left + 18 + i * 160}" y="{ly + 4}">offload: {tier}</text>')
    out.append(f'<circle cx="{left + 10}" cy="{ly + 24}" r="4" fill="#444444"/>')
    out.append(f'<text x="{left + 18}" y="{ly + 28}">1f1b (or the planned schedule)</text>')
    out.append(f'<rect x="{left + 226}" y="{ly + 20}" width="8" height="8" fill="none" '
               'stroke="#444444" stroke-width="1.5"/>')
    out.append(f'<text x="{left + 240}" y="{ly + 28}">zb-h1</text>')
    out.append(f'<text x="{left}" y="{ly + 52}">Points above the dashed line do not fit; refused '
               'plans (peak over the GPU) are left out, and host or NVMe fit is in table.md.</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    build, out = sys.argv[1], sys.argv[2]
    os.makedirs(os.path.join(out, "raw"), exist_ok=True)
    rows = []
    for short, model in MODELS:
        for gpus in GPUS:
            emitted = os.path.join(out, "raw", f"{short}.g{gpus}.plan.json")
            rc, _, stderr = run([os.path.join(build, "tools", "plan"), "--model", model,
                                 "--gpus", str(gpus), "--emit-plan", emitted])
            if rc != 0 or not os.path.exists(emitted):
                rows.append({"model": short, "gpus": gpus, "error": stderr.strip()[-200:]})
                continue
            base = json.load(open(emitted))
            schedules = ["1f1b", "zb-h1"] if base["pp"] > 1 else [base["schedule"]]
            for sched in schedules:
                for tier, offload, device in TIERS:
                    plan = dict(base)
                    if base["pp"] > 1:
                        plan["schedule"] = sched
                        plan.pop("virtual_stages", None)
                        plan.pop("layers_per_stage", None) if base.get("virtual_stages", 1) > 1 else None
                        plan.pop("ep_overlap", None)
                    plan["offload"] = offload
                    plan.pop("offload_device", None)
                    if device == "nvme":
                        plan["offload_device"] = "nvme"
                    if offload == "optimizer+params":
                        plan["zero_stage"] = 3
                    if offload != "none" and plan.get("zero_stage", 0) == 0:
                        plan["zero_stage"] = 1
                    name = f"{short}.g{gpus}.{sched}.{tier.replace(':', '-')}"
                    r = simulate(build, model, gpus, plan, out, name)
                    r.update({"model": short, "gpus": gpus, "schedule": sched, "tier": tier,
                              "plan": base, "planned": base.get("offload", "none")})
                    rows.append(r)
    json.dump(rows, open(os.path.join(out, "report.json"), "w"), indent=1)
    # H100-80GB and its DGX node (2 TiB host memory, 8 x 3.84 TB NVMe, 8 GPUs), less plan's
    # default 10% headroom on the device and the host.
    usable_GB, host_GB_per_gpu, nvme_GB_per_gpu = 80 * 0.9, 2048 * 1.073741824 * 0.9 / 8, 30720 / 8

    def fits(r):
        if r["peak_GB"] > usable_GB:
            return "no (device)"
        if r["host_GB_per_gpu"] > host_GB_per_gpu:
            return "no (host)"
        return "no (NVMe)" if r["nvme_GB_per_gpu"] > nvme_GB_per_gpu else "yes"
    lines = ["| model | GPUs | planned (tp/pp/dp, ZeRO) | schedule | tier | step s | bubble | "
             "peak GB/GPU | fits | host GB/GPU | NVMe GB/GPU |", "|" + "---|" * 11]
    for r in rows:
        if "plan" not in r:
            lines.append(f"| {r['model']} | {r['gpus']} | no plan: {r.get('error', '')} ||||||||")
            continue
        p = r["plan"]
        shape = f"{p['tp']}/{p['pp']}/{p['dp']}, {p.get('zero_stage', 0)}"
        if "error" in r:
            lines.append(f"| {r['model']} | {r['gpus']} | {shape} | {r['schedule']} | {r['tier']} "
                         f"| refused: {r['error'][:90]} ||||||")
            continue
        lines.append(f"| {r['model']} | {r['gpus']} | {shape} | {r['schedule']} | {r['tier']} | "
                     f"{r['step_time_s']:.2f} | {r['bubble_fraction']:.3f} | {r['peak_GB']:.1f} | "
                     f"{fits(r)} | "
                     f"{r['host_GB_per_gpu']:.0f} | {r['nvme_GB_per_gpu']:.0f} |")
    with open(os.path.join(out, "table.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(out, "tiers.svg"), "w") as f:
        f.write(svg_chart([r for r in rows if "plan" in r], usable_GB))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
