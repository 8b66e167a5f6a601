"""Names FlashAttention-1 (attention_kernel flash1) on the corpus entries whose code pins
flash-attn 1.x (validation/corpus/NOTES.md, thirty-eighth pass), with a note citing the pin.
Edits CORPUS in place (run it on a copy to study; the corpus on main has it applied).

    python3 bench/scripts/flash1_apply.py CORPUS
"""
import re
import sys

from corpus_edit import set_entry_field

MLPERF_V30 = (
    "attention_kernel flash1 (thirty-eighth pass): the submission's requirements.txt pins "
    "flash_attn==1.0.5 and its Dockerfile builds Transformer Engine TE_REVISION=release_v0.8 "
    "(mlcommons/training_results_v3.0, {impl}/benchmarks/gpt3/implementations/pytorch), whose "
    "DotProductAttention (NVIDIA/TransformerEngine @ 8e5f00f2 transformer_engine/pytorch/"
    "transformer.py:461-474, 536-552) calls flash-attn's flash_attn_unpadded_func when "
    "NVTE_FLASH_ATTN is unset (no config sets it), the mask causal, the device sm80+ and the "
    "dtype bf16. v3.1 installs flash-attn 2.0.8.")
README_2022 = (
    "attention_kernel flash1 (thirty-eighth pass): training/Dockerfile at 4a6eaa9f27df installs "
    "flash-attn==0.2.2 (FlashAttention-1, before flash-attn 2.0). The published FA1 rates are at "
    "head dim 128; this entry's head dim is {hdim}.")


def main():
    path = sys.argv[1]
    s = open(path).read()
    ids = re.findall(r'"id": "((?:mlperf30_\w*gpt3\w*)|(?:flashattn2211_\w+))"', s)
    assert len(ids) == 10, ids
    hdims = {"125m": 64, "355m": 64, "760m": 96, "1p3b": 128, "2p7b": 128}
    for run_id in ids:
        if run_id.startswith("mlperf30_"):
            impl = "NVIDIA_CoreWeave" if "coreweave" in run_id else "NVIDIA"
            note = MLPERF_V30.format(impl=impl)
        else:
            note = README_2022.format(hdim=hdims[run_id.split("_")[2]])
        s = set_entry_field(s, run_id, "attention", "attention_kernel", "flash1", note)
    open(path, "w").write(s)
    print("named flash1 on %d entries" % len(ids))


if __name__ == "__main__":
    main()
