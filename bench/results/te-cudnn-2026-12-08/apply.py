#!/usr/bin/env python3
"""Fifty-sixth pass (validation/corpus/NOTES.md): every Megatron-Bridge performance-summary row names
attention_kernel cudnn, the backend each Transformer Engine its container pins prefers on compute
capability >= 9.0. Rewrites the corpus in place (or to OUT), keeping its formatting.

Usage: apply.py CORPUS [OUT]
"""
import json
import sys

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


def main():
    path = sys.argv[1]
    out = sys.argv[2] if len(sys.argv) > 2 else path
    corpus = json.load(open(path, encoding="utf-8"))
    runs = corpus["runs"] if isinstance(corpus, dict) else corpus
    changed = 0
    for i, run in enumerate(runs):
        if run["family"]["source"] != "megatron-bridge-perf-summary":
            continue
        prefix = run["id"].split("_")[0]
        if run.get("attention") != "fused" or run.get("attention_kernel") is not None:
            sys.exit(f"{run['id']}: expected fused attention with no kernel named")
        rebuilt = {}
        for key, value in run.items():
            rebuilt[key] = value
            if key == "attention":
                rebuilt["attention_kernel"] = "cudnn"
        rebuilt["notes"] = list(run["notes"]) + [
            "attention_kernel cudnn (fifty-sixth pass): " + PINS[prefix] + " give cuDNN's "
            "FusedAttention preference over FlashAttention on compute capability >= 9.0 "
            "('Select FusedAttention for performance'); the recipe leaves attention_backend to TE."]
        runs[i] = rebuilt
        changed += 1
    with open(out, "w", encoding="utf-8") as f:
        f.write(json.dumps(corpus, indent=1, ensure_ascii=False) + "\n")
    print(f"{changed} rows name attention_kernel cudnn")


if __name__ == "__main__":
    main()
