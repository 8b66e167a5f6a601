#!/usr/bin/env python3
"""Writes a copy of the published-runs corpus with `zero3_backward_prefetch: before-reduce` on the
entries whose framework is PyTorch FSDP (Plan::zero3_backward_prefetch), each with a note citing
the code: FSDP2 (fully_shard) entries of torchtitan and OLMo-core, and fms-fsdp's FSDP1 entries
(main_training.py at 5e522b4 builds FullyShardedDataParallel without backward_prefetch, so its
default BACKWARD_PRE applies). Entries with pipeline parallelism are left out: the reader maps
torchtitan's FSDP under a pipeline to ZeRO-1 (no parameter gather in the backward).

The marks are not in the corpus on main: study bench/results/published-2026-11-25-titan measured
them (both sides, per family) and found them no progress overall on their own; this script makes
its "after" side. Usage: fsdp_prefetch_marks.py IN.json OUT.json
Run by hand in a study (see its NOTES.md); no test: it only adds one field and one note.
"""
import json
import sys

FSDP2_NOTE = (
    "zero3_backward_prefetch before-reduce: FSDP2 (fully_shard): PyTorch's FSDPParamGroup.pre_backward "
    "unshards the block, then _backward_prefetch issues the all-gather of the next block in backward order, "
    "before the block's compute and its post_backward reduce-scatter (torch/distributed/_composable/fsdp/"
    "_fsdp_param_group.py); all-gather and reduce-scatter use the same shard process group, one NCCL "
    "communicator, so they run in that order (Plan::zero3_backward_prefetch; study "
    "bench/results/published-2026-11-25-titan).")
FSDP1_NOTE = (
    "zero3_backward_prefetch before-reduce: FSDP1 with its default backward_prefetch BACKWARD_PRE "
    "(main_training.py at 5e522b4 passes none): _pre_backward_hook unshards the handle, then "
    "_prefetch_handle(BACKWARD) issues the next handle's all-gather before the gradient computation and "
    "the post-backward reduce-scatter, both on the one process group (torch/distributed/fsdp/"
    "_runtime_utils.py; Plan::zero3_backward_prefetch; study bench/results/published-2026-11-25-titan).")


def is_fsdp(entry):
    p = entry["parallel"]
    fam = entry["family"]
    if p.get("zero_stage") != 3 or p.get("pp", 1) > 1:
        return False
    return (fam["framework"] == "torchtitan" or fam["source"].startswith("olmo-core")
            or fam["source"].startswith("fms-fsdp"))


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    runs = json.load(open(sys.argv[1]))
    out, marked = [], 0
    for r in runs:
        if not is_fsdp(r) or "zero3_backward_prefetch" in r:
            out.append(r)
            continue
        anchor = "zero3_recompute_gather" if "zero3_recompute_gather" in r else "confidence"
        new = {}
        for k, v in r.items():
            new[k] = v
            if k == anchor:
                new["zero3_backward_prefetch"] = "before-reduce"
        note = FSDP1_NOTE if r["family"]["source"].startswith("fms-fsdp") else FSDP2_NOTE
        new["notes"] = list(r["notes"]) + [note]
        out.append(new)
        marked += 1
    with open(sys.argv[2], "w") as f:
        f.write(json.dumps(out, indent=1, ensure_ascii=False) + "\n")
    print(f"{marked} entries marked", file=sys.stderr)


if __name__ == "__main__":
    main()
