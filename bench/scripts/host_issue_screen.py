#!/usr/bin/env python3
"""Which published runs a host-issue model could act on: a screen, not a model.

For every corpus entry, the cost model's layer forward and backward (published_tasks: GPU time
with the profile's per-launch overhead, kernel launches) give the GPU time per launch. A host
that issues each launch in h seconds stalls an eager GPU only where h exceeds that figure over a
stretch of launches with no host wait in between (the host otherwise runs ahead; see
validation/corpus/NOTES.md, forty-first pass). The script prints, per run, the GPU microseconds
per launch of a layer's forward and backward, the host microseconds per launch at which the
layer would become host-bound, and the run's presets error; then the runs grouped by that
break-even figure, with the error statistics of each group.

Run (from the repository root):
  build/tools/simulate --published validation/corpus/published_runs.json --json > P.json
  python3 bench/scripts/host_issue_screen.py build validation/corpus/published_runs.json P.json OUT
OUT gets screen.json (one row per run) and screen.md (the groups).
"""
import json
import statistics
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path


def passes(build, corpus, run_id):
    out = subprocess.run([str(Path(build) / "bench/simulator/published_tasks"), corpus, run_id],
                         capture_output=True, text=True, check=False)
    if out.returncode != 0:
        return None
    totals = {}
    for line in out.stdout.splitlines():
        j = json.loads(line)
        if "total_s" in j:
            totals[j["pass"]] = j
    return totals


def main(argv):
    if len(argv) != 5:
        sys.exit(__doc__)
    build, corpus, presets, out_dir = argv[1:]
    runs = {r["id"]: r for r in json.loads(Path(corpus).read_text(encoding="utf-8"))}
    errors = {r["id"]: r["headline_throughput_error"]
              for r in json.loads(Path(presets).read_text(encoding="utf-8"))["runs"]
              if r.get("headline_throughput_error") is not None}
    ids = [i for i in runs if i in errors]
    with ThreadPoolExecutor(max_workers=2) as pool:
        totals = dict(zip(ids, pool.map(lambda i: passes(build, corpus, i), ids)))
    rows = []
    for i in ids:
        t = totals[i]
        if not t:
            continue
        r = runs[i]
        f, b = t["layer_forward"], t["layer_backward"]
        us = lambda p: 1e6 * p["total_s"] / p["launches"] if p["launches"] else None
        rows.append({
            "id": i, "family": r["family"]["source"], "framework": r["family"]["framework"],
            "gpu": r["family"]["gpu_generation"], "precision": r.get("precision"),
            "micro_batch": r["parallel"].get("micro_batch"), "seq_len": r["model"].get("seq_len"),
            "forward_ms": 1e3 * f["total_s"], "forward_launches": f["launches"],
            "forward_us_per_launch": us(f), "backward_us_per_launch": us(b),
            "error": errors[i]})
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "screen.json").write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    bins = [(0, 10), (10, 20), (20, 40), (40, 80), (80, 160), (160, 1e9)]
    lines = ["| forward GPU us per launch | runs | median abs error | mean signed error | "
             "frameworks |", "|---|---:|---:|---:|---|"]
    for lo, hi in bins:
        g = [x for x in rows if lo <= x["forward_us_per_launch"] < hi]
        if not g:
            continue
        e = [x["error"] for x in g]
        fw = {}
        for x in g:
            fw[x["framework"]] = fw.get(x["framework"], 0) + 1
        lines.append(f"| {lo:g}-{hi:g} | {len(g)} | {100 * statistics.median(map(abs, e)):.1f}% | "
                     f"{100 * sum(e) / len(e):+.1f}% | "
                     + ", ".join(f"{k} {v}" for k, v in sorted(fw.items(), key=lambda kv: -kv[1]))
                     + " |")
    lines += ["", "Lowest 25 runs by forward GPU us per launch:", "",
              "| run | framework | precision | mbs | seq | fwd us/launch | bwd us/launch | "
              "launches/layer fwd | error |", "|---|---|---|---:|---:|---:|---:|---:|---:|"]
    for x in sorted(rows, key=lambda x: x["forward_us_per_launch"])[:25]:
        lines.append(f"| {x['id']} | {x['framework']} | {x['precision']} | {x['micro_batch']} | "
                     f"{x['seq_len']} | {x['forward_us_per_launch']:.1f} | "
                     f"{x['backward_us_per_launch']:.1f} | {x['forward_launches']} | "
                     f"{100 * x['error']:+.1f}% |")
    (out / "screen.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main(sys.argv)
