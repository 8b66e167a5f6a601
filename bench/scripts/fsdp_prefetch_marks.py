#!/usr/bin/env python3
"""Writes a copy of the published-runs corpus with the marks of PyTorch FSDP's runtime on the
entries whose framework runs it, each with a note citing the code:

- `zero3_backward_prefetch: before-reduce` (Plan::zero3_backward_prefetch): FSDP2's
  _backward_prefetch, FSDP1's default BACKWARD_PRE (fms-fsdp's main_training.py at 5e522b4
  builds FullyShardedDataParallel without backward_prefetch);
- `zero3_copies` (Plan::zero3_copies): `per-param` for FSDP2 (fully_shard: torchtitan, the
  torchao READMEs measured through torchtitan, OLMo-core), `flat-param` for FSDP1 (fms-fsdp).

Entries with pipeline parallelism are left out: the reader maps torchtitan's FSDP under a pipeline
to ZeRO-1 (no parameter gather in the backward). Entries that already name a field keep it.

Study bench/results/published-2026-11-25-titan measured the prefetch marks alone; study
bench/results/published-2026-12-02-fsdp measured them with the copies and applied both to the
corpus. Usage: fsdp_prefetch_marks.py IN.json OUT.json [--prefetch-only]
Run by hand in a study (see its NOTES.md); no test: it only adds fields and notes.
"""
import json
import sys

FSDP2_PREFETCH = (
    "zero3_backward_prefetch before-reduce: FSDP2 (fully_shard): PyTorch's FSDPParamGroup.pre_backward "
    "unshards the block, then _backward_prefetch issues the all-gather of the next block in backward order, "
    "before the block's compute and its post_backward reduce-scatter (torch/distributed/_composable/fsdp/"
    "_fsdp_param_group.py); all-gather and reduce-scatter use the same shard process group, one NCCL "
    "communicator, so they run in that order (Plan::zero3_backward_prefetch; study "
    "bench/results/published-2026-11-25-titan).")
FSDP1_PREFETCH = (
    "zero3_backward_prefetch before-reduce: FSDP1 with its default backward_prefetch BACKWARD_PRE "
    "(main_training.py at 5e522b4 passes none): _pre_backward_hook unshards the handle, then "
    "_prefetch_handle(BACKWARD) issues the next handle's all-gather before the gradient computation and "
    "the post-backward reduce-scatter, both on the one process group (torch/distributed/fsdp/"
    "_runtime_utils.py; Plan::zero3_backward_prefetch; study bench/results/published-2026-11-25-titan).")
FSDP2_COPIES = (
    "zero3_copies per-param: FSDP2's per-parameter sharding (torch/distributed/_composable/fsdp/"
    "_fsdp_collectives.py, in the torch this run names): each gather's shard cast and copy-in "
    "(FSDPParam.all_gather_inputs, _foreach_copy_), its copy-out into the parameters' storage on the compute "
    "stream (foreach_all_gather_copy_out: split_with_sizes_copy, PyTorch PR 119451), and each "
    "reduce-scatter's copy-in of the gradients in the reduce dtype (foreach_reduce: torch._chunk_cat) "
    "(Plan::zero3_copies; study bench/results/published-2026-12-02-fsdp).")
FSDP1_COPIES = (
    "zero3_copies flat-param: FSDP1's FlatParameter (torch/distributed/fsdp/_flat_param.py and "
    "_runtime_utils.py, the nightlies fms-fsdp's README recommends at 5e522b4): the all-gather writes the flat "
    "buffer the parameters are views of (no copy-out); the gradients are concatenated into the flat gradient "
    "by the views' split backward, then padded to the group when needed (F.pad) and divided by the "
    "predivide factor before the reduce-scatter (_reduce_grad) (Plan::zero3_copies; study "
    "bench/results/published-2026-12-02-fsdp).")


def fsdp_version(entry):
    """1 or 2 for an entry that runs PyTorch FSDP with ZeRO-3 and no pipeline, else None."""
    p = entry["parallel"]
    fam = entry["family"]
    if p.get("zero_stage") != 3 or (p.get("pp") or 1) > 1:
        return None
    if fam["source"].startswith("fms-fsdp"):
        return 1
    if fam["framework"] == "torchtitan" or fam["source"].startswith("olmo-core"):
        return 2
    return None


def mark(entry, version, prefetch_only):
    fields = [("zero3_backward_prefetch", "before-reduce",
               FSDP1_PREFETCH if version == 1 else FSDP2_PREFETCH)]
    if not prefetch_only:
        fields.append(("zero3_copies", "flat-param" if version == 1 else "per-param",
                       FSDP1_COPIES if version == 1 else FSDP2_COPIES))
    fields = [f for f in fields if f[0] not in entry]
    if not fields:
        return entry, False
    anchor = "zero3_recompute_gather" if "zero3_recompute_gather" in entry else "confidence"
    new = {}
    for k, v in entry.items():
        new[k] = v
        if k == anchor:
            for name, value, _ in fields:
                new[name] = value
    new["notes"] = list(entry["notes"]) + [note for _, _, note in fields]
    return new, True


def main():
    args = [a for a in sys.argv[1:] if a != "--prefetch-only"]
    if len(args) != 2:
        sys.exit(__doc__)
    prefetch_only = "--prefetch-only" in sys.argv[1:]
    runs = json.load(open(args[0]))
    out, marked = [], 0
    for r in runs:
        version = fsdp_version(r)
        if version is None:
            out.append(r)
            continue
        new, changed = mark(r, version, prefetch_only)
        out.append(new)
        marked += changed
    with open(args[1], "w") as f:
        f.write(json.dumps(out, indent=1, ensure_ascii=False) + "\n")
    print(f"{marked} entries marked", file=sys.stderr)


if __name__ == "__main__":
    main()
