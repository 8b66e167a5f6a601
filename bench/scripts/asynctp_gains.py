#!/usr/bin/env python3
"""Modelled against measured async-TP gains: for each pair of published rows that differ only in
torchtitan's async TP (the same table, the same layout), the measured gain (async tokens/s over
the row without it, minus one) and the modelled one (the same ratio of the simulator's
predictions), from outputs of `simulate --published FILE --json`. The pairs are those of
bench/results/published-2026-12-02-fsdp/NOTES.md section 3.

Usage:
  asynctp_gains.py strip CORPUS OUT.json     # the corpus without tp_comm_overlap_impl (before)
  asynctp_gains.py table LABEL=RUNS.json ... # a markdown table, one modelled column per file
Run by hand in a study (published-2026-12-02-asynctp/NOTES.md); no test: it only formats.
"""
import json
import sys
from pathlib import Path

PAIRS = [  # (label, row without async TP, row with it)
    ("2024-12 70B fp8 (Table 4)", "torchtitan2412_llama31_70b_256gpu_tp8",
     "torchtitan2412_llama31_70b_256gpu_asynctp8"),
    ("2024-08 405B fp8", "torchtitan2408_llama31_405b_128gpu_fsdp16_tp8_fp8",
     "torchtitan2408_llama31_405b_128gpu_fsdp16_tp8_fp8_asynctp"),
    ("2025-06 70B bf16", "torchtitan2506_llama31_70b_256gpu_fsdp32_tp8_bf16_vanillatp",
     "torchtitan2506_llama31_70b_256gpu_fsdp32_tp8_bf16_asynctp"),
    ("2025-06 70B fp8", "torchtitan2506_llama31_70b_256gpu_fsdp32_tp8_fp8_vanillatp",
     "torchtitan2506_llama31_70b_256gpu_fsdp32_tp8_fp8_asynctp"),
    ("2025-06 8B bf16", "torchtitan2506_llama31_8b_64gpu_fsdp8_tp8_bf16_vanillatp",
     "torchtitan2506_llama31_8b_64gpu_fsdp8_tp8_bf16_asynctp"),
    ("2025-06 8B fp8", "torchtitan2506_llama31_8b_64gpu_fsdp8_tp8_fp8_vanillatp",
     "torchtitan2506_llama31_8b_64gpu_fsdp8_tp8_fp8_asynctp"),
]


def tokens(path):
    out = {}
    for r in json.loads(Path(path).read_text())["runs"]:
        for m in r.get("metrics", []):
            if m.get("name") == "tokens_per_s":
                out[r["id"]] = (m["measured"], m["predicted"], m["error"])
    return out


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "strip":
        runs = json.loads(Path(sys.argv[2]).read_text())
        for r in runs:
            r.pop("tp_comm_overlap_impl", None)
        Path(sys.argv[3]).write_text(json.dumps(runs, indent=1, ensure_ascii=False) + "\n")
        return
    if len(sys.argv) < 3 or sys.argv[1] != "table":
        sys.exit(__doc__)
    cols = [(a.split("=", 1)[0], tokens(a.split("=", 1)[1])) for a in sys.argv[2:]]
    head = "| pair | measured gain | " + " | ".join(
        f"modelled ({c}) | async row error ({c})" for c, _ in cols) + " |"
    print(head)
    print("|---|---:|" + "---:|---:|" * len(cols))
    for label, plain, fused in PAIRS:
        first = cols[0][1]
        measured = first[fused][0] / first[plain][0] - 1
        cells = []
        for _, t in cols:
            cells.append(f"{100 * (t[fused][1] / t[plain][1] - 1):+.1f}%")
            cells.append(f"{100 * t[fused][2]:+.1f}%")
        print(f"| {label} | {100 * measured:+.1f}% | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
