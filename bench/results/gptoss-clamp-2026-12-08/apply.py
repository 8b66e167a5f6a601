#!/usr/bin/env python3
"""Fifty-seventh pass (validation/corpus/NOTES.md): the GPT-OSS-120B entries give the clamp of
their gated activation, model.glu_clamp 7.0. Rewrites the corpus in place (or to OUT) with
bench/scripts/corpus_edit.py's text edits, every other byte kept.

Usage: apply.py CORPUS [OUT]
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import corpus_edit  # noqa: E402

SOURCE = {
    "mbridge2511": "gpt_oss_provider.py:84 at Megatron-Bridge 5776a6d9",
    "mbridge2602": "gpt_oss_provider.py:84 at Megatron-Bridge c0b9a000",
    "mbridge260401": "gpt_oss_bridge.py:83 at Megatron-Bridge 21d102f5",
}


def edit(text, run):
    if run["model"].get("name") != "gpt-oss-120b":
        return None
    note = ("model.glu_clamp 7.0 (fifty-seventh pass): activation_func_clamp_value = 7.0, " +
            SOURCE[run["id"].split("_")[0]] + "; Megatron-Core clamps the gated activation's "
            "inputs in eager PyTorch and adds the fc2 expert bias in a per-expert loop "
            "(megatron/core/fusions/fused_bias_geglu.py, megatron/core/transformer/moe/"
            "experts.py _apply_bias).")
    return corpus_edit.set_block_field(text, run["id"], "model", "activation", "glu_clamp", 7.0,
                                       note)

if __name__ == "__main__":
    corpus_edit.edit_corpus(sys.argv, edit, "give glu_clamp 7.0")
