#!/usr/bin/env python3
"""Fifty-sixth pass (validation/corpus/NOTES.md): every Megatron-Bridge performance-summary row names
attention_kernel cudnn, the backend each Transformer Engine its container pins prefers on compute
capability >= 9.0. Rewrites the corpus in place (or to OUT) with bench/scripts/corpus_edit.py's
text edits, every other byte kept.

Usage: apply.py CORPUS [OUT]
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import corpus_edit  # noqa: E402

# Container (id prefix) -> where its TE pin and TE's preference are read.
PINS = {
    "mbridge2509": "Megatron-Bridge pyproject.toml:102 at fa0315ae pins TE 0289e763 (release_v2.7), "
                   "whose dot_product_attention/utils.py:916-922",
    "mbridge2511": "Megatron-Bridge pyproject.toml:120 at 5776a6d9 pins TE release_v2.9, "
                   "whose dot_product_attention/utils.py:1118-1124",
    "mbridge2602": "Megatron-Bridge pyproject.toml:115 at c0b9a000 pins TE 5671fd36, "
                   "whose dot_product_attention/utils.py:1147-1153",
    "mbridge260401": "Megatron-Bridge pyproject.toml:131 at 21d102f5 pins TE release_v2.16, "
                     "whose dot_product_attention/utils.py:1436-1442",
}


def edit(text, run):
    if run["family"]["source"] != "megatron-bridge-perf-summary":
        return None
    if run.get("attention") != "fused" or run.get("attention_kernel") is not None:
        sys.exit(f"{run['id']}: expected fused attention with no kernel named")
    note = ("attention_kernel cudnn (fifty-sixth pass): " + PINS[run["id"].split("_")[0]] +
            " give cuDNN's FusedAttention preference over FlashAttention on compute "
            "capability >= 9.0 ('Select FusedAttention for performance'); the recipe leaves "
            "attention_backend to TE.")
    return corpus_edit.set_entry_field(text, run["id"], "attention", "attention_kernel", "cudnn",
                                       note)

if __name__ == "__main__":
    corpus_edit.edit_corpus(sys.argv, edit, "name attention_kernel cudnn")
