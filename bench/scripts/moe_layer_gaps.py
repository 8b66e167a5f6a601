#!/usr/bin/env python3
"""Per MoE layer and micro-batch: where a mixture-of-experts run's measured step goes against the
prediction. For each run of a published_breakdown output (one JSON object per run) whose model
has experts: its MoE layers per pipeline stage (layers less the dense ones, over pp), the layer
passes per step on one GPU (those layers x micro-batches per step, forward with backward), and
per layer pass the measured and predicted step and their difference (measured - predicted), in
ms. A diagnosis of a cost that scales with layer passes rather than with FLOPs or bytes (host
time per layer), not a model. Writes markdown to stdout.

Usage: moe_layer_gaps.py CORPUS.json BREAKDOWN.jsonl
Run by hand in a study (bench/results/published-2026-12-02-moe/NOTES.md); no test: it only
formats the breakdown.
"""
import json
import sys
from pathlib import Path

from published_rows import breakdown_objects, measured_step_s


def main(argv):
    if len(argv) != 3:
        sys.exit(__doc__)
    corpus = {e["id"]: e for e in json.loads(Path(argv[1]).read_text(encoding="utf-8"))}
    lines = Path(argv[2]).read_text(encoding="utf-8").splitlines()
    print("| run | MoE layers per stage | micro-batches | layer passes | measured ms/pass | "
          "predicted ms/pass | measured - predicted, ms/pass | error |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for b in breakdown_objects(lines, argv[2]):
        e = corpus.get(b["id"])
        if e is None:
            sys.exit(f"{b['id']}: not in {argv[1]}")
        model = e["model"]
        if not model.get("num_experts"):
            continue
        plan = b["plan"]
        moe_layers = model["layers"] - (model.get("first_dense_layers") or 0)
        per_stage = moe_layers / plan["pp"]
        micro = plan["global_batch_size"] // (plan["dp"] * plan["micro_batch_size"])
        passes = per_stage * micro
        meas = measured_step_s(e)
        pred = b["predicted_step_s"]
        print(f"| {b['id']} | {per_stage:.1f} | {micro} | {passes:.0f} | "
              f"{1e3 * meas / passes:.2f} | {1e3 * pred / passes:.2f} | "
              f"{1e3 * (meas - pred) / passes:+.2f} | {meas / pred - 1:+.1%} |")


if __name__ == "__main__":
    main(sys.argv)
