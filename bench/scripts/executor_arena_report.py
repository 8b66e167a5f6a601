#!/usr/bin/env python3
"""The scratch arena's study report (bench/scripts/executor_arena_memory.sh).

Per plan and rank, before and after: the executor's memory account at its peak in use
(`execute --memory-report`, executor/memory_account.h) by class, its VmHWM, and beside them the
cost model's activations and buffers (`simulate --json`'s memory breakdown; buffers = a layer's
backward workspace, plus ZeRO-3's gathered blocks and ZeRO-2/3's block gradient); the routed
experts' unused capacity rows; then the allocations per step that
tests/executor/step_allocations_test.cc printed.

  executor_arena_report.py OUT_DIR PLAN...

Writes OUT_DIR/report.md and prints it.
"""
import json
import sys

MIB = 2.0 ** 20
# What the cost model's activations + buffers stand for in the executor's account: the kept
# activations (B and W), the W pass's copies, the scratch, the pipeline messages; and, for the
# buffers' ZeRO parts, the gathered blocks and block gradients (weights / gradients items
# below).
STEP_USES = ("kept_for_backward", "kept_for_weight_pass", "weight_pass_copies", "scratch",
             "comm_buffers")


def mib(x):
    return f"{x / MIB:.1f}"


def zero_parts(items):
    """The account's items that the cost model counts in buffers_bytes: ZeRO-3's gathered
    blocks (block.params under ZeRO-3, where the resident weights are the shard) and ZeRO-2/3's
    full block gradient."""
    return sum(i["bytes"] for i in items if i["name"] in ("block.params", "block.grad")
               and i["use"] in ("weights", "gradients"))


def load(out, name):
    pred = json.load(open(f"{out}/{name}.predicted.json"))
    plan = json.load(open(f"{out}/{name}.plan.json"))
    sides = {s: json.load(open(f"{out}/{name}.{s}.memory.json"))["ranks"]
             for s in ("before", "after")}
    rows = []
    for p in pred["ranks"]:
        r = {"rank": p["rank"], "stage": p["stage"], "memory": p["memory"]}
        for side, ranks in sides.items():
            m = next(x for x in ranks if x["rank"] == p["rank"])
            peak = m["at_peak"]
            zero = zero_parts(peak["items"]) if plan.get("zero_stage", 0) >= 2 else 0.0
            r[side] = {
                "vmhwm": m["vmhwm_bytes"],
                "in_use": peak["in_use_bytes"],
                "pooled": peak["pooled_bytes"],
                "scratch": peak["by_use"]["scratch"],
                "step": sum(peak["by_use"][u] for u in STEP_USES) + zero,
                "unused": sum(i["bytes"] for i in peak["items"]
                              if i["name"].endswith(".unused_capacity")),
            }
        rows.append(r)
    return plan, rows


def main():
    out, plans = sys.argv[1], sys.argv[2:]
    lines = ["# The scratch arena: memory per rank before and after", "",
             "MiB; `before -> after`. *step memory*: the executor's kept activations (for B and "
             "W), W-pass copies, scratch and pipeline messages at its peak in use, plus under "
             "ZeRO-2/3 the gathered blocks and block gradients; the cost model's counterpart is "
             "its activations + buffers (`simulate --json`, per rank). *ratio*: step memory / "
             "the cost model's.", "",
             "| plan | rank | scratch | step memory | cost model: activations + buffers | ratio "
             "| in use at peak | pooled | unused routed capacity | VmHWM |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    summary, same = [], []
    for name in plans:
        losses = [json.load(open(f"{out}/{name}.{side}.json"))["loss"]
                  for side in ("before", "after")]
        same.append((name, losses[0] == losses[1], len(losses[1])))
        plan, rows = load(out, name)
        for r in rows:
            b, a, m = r["before"], r["after"], r["memory"]
            model = m.get("activations_bytes", 0.0) + m.get("buffers_bytes", 0.0)
            ratio_b, ratio_a = b["step"] / model, a["step"] / model
            summary.append((name, r["rank"], ratio_b, ratio_a, b["vmhwm"], a["vmhwm"]))

            def pair(key):
                return f"{mib(b[key])} -> {mib(a[key])}"
            lines.append(f"| {name} | {r['rank']} | {pair('scratch')} | {pair('step')} | "
                         f"{mib(model)} | {ratio_b:.2f} -> {ratio_a:.2f} | {pair('in_use')} | "
                         f"{pair('pooled')} | {pair('unused')} | {pair('vmhwm')} |")
    ratios_b = sorted(s[2] for s in summary)
    ratios_a = sorted(s[3] for s in summary)
    mid = len(summary) // 2
    lines += ["", f"Step memory / the cost model's, over {len(summary)} ranks: median "
              f"{ratios_b[mid]:.2f} -> {ratios_a[mid]:.2f}, range {ratios_b[0]:.2f}-"
              f"{ratios_b[-1]:.2f} -> {ratios_a[0]:.2f}-{ratios_a[-1]:.2f}. VmHWM: "
              f"{sum(s[5] - s[4] for s in summary) / len(summary) / MIB:+.1f} MiB per rank on "
              f"average."]
    lines += ["", "Loss of every step, this build against the build before (`execute --out`'s loss "
              "curve, compared as doubles):", ""]
    for name, equal, steps in same:
        lines.append(f"- {name}: {'bitwise equal' if equal else 'DIFFERENT'} over {steps} steps")
    for side in ("before", "after"):
        try:
            text = open(f"{out}/allocations.{side}.txt").read().strip()
        except FileNotFoundError:
            continue
        steady = [l for l in text.splitlines() if "step 3:" in l]
        lines += ["", f"Heap allocations in step 3, {side} (tests/executor/step_allocations_test.cc;"
                  " under mpirun, rank 0):", ""] + ["    " + l for l in steady]
    report = "\n".join(lines) + "\n"
    open(f"{out}/report.md", "w").write(report)
    print(report)


if __name__ == "__main__":
    main()
