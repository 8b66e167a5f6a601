#!/usr/bin/env python3
"""A what-if corpus of Megatron-Bridge's 25.09 token-drop MoE rows, for a diagnosis only.

docs/performance-summary.md at Megatron-Bridge commit 5776a6d90b (the commit the corpus' 25.11
entries cite) prints, under '25.09 NeMo Container', token-drop runs with the same GPUs, GBS, MBS
and TP/PP/VP/EP layout as five of the 25.11 dropless rows in the corpus. Each row below is the
corpus entry of that layout with the 25.09 figure in measured.tokens_per_s (tokens/s/GPU x GPUs)
and a new id; on B200 the table's plain figure is FP8-CS and the one in parentheses MXFP8 (its
footnote), so both are written, each with its fp8_scaling; on H100 the plain figure (the table
prints no precision column for 25.09; the 25.11 H100 rows of these layouts are FP8-CS). The rows are not corpus entries: the
corpus does not model token dropping's padding, and nothing here is committed as one.

  write CORPUS OUT.json     the what-if corpus (run `simulate --published OUT.json --json`)
  passes CORPUS OUT.json SIM.json [SIM.json ...]
                            per MoE layer pass (micro-batches x MoE layers per pipeline stage on
                            one GPU), measured and predicted ms, for the what-if rows and the
                            25.11 rows they copy; each SIM.json is simulate's --published --json
                            output over OUT.json or over the corpus.

Run by hand (bench/results/published-2026-12-02-b200/NOTES.md); no test: it only copies entries.
"""
import copy
import json
import sys
from pathlib import Path

# (new id, the 25.11 entry with the same layout, tokens/s/GPU in the 25.09 table, fp8_scaling)
ROWS = [
    ("whatif2509_b200_qwen3_30b_a3b_tokendrop", "mbridge2511_b200_qwen3_30b_a3b_8gpu", 18066,
     "block"),  # one figure, no parentheses; the 25.11 row of this layout is FP8-MX
    ("whatif2509_b200_qwen3_235b_a22b_tokendrop_cs", "mbridge2511_b200_qwen3_235b_a22b_64gpu",
     4104, "current"),
    ("whatif2509_b200_qwen3_235b_a22b_tokendrop_mx", "mbridge2511_b200_qwen3_235b_a22b_64gpu",
     4275, "block"),
    ("whatif2509_b200_deepseekv3_tokendrop_cs", "mbridge2511_b200_deepseekv3_mtp_256gpu", 2265,
     "current"),
    ("whatif2509_b200_deepseekv3_tokendrop_mx", "mbridge2511_b200_deepseekv3_mtp_256gpu", 2159,
     "block"),
    ("whatif2509_h100_qwen3_30b_a3b_tokendrop", "mbridge2511_h100_qwen3_30b_a3b_16gpu", 10494,
     "current"),
    ("whatif2509_h100_qwen3_235b_a22b_tokendrop", "mbridge2511_h100_qwen3_235b_a22b_256gpu", 1204,
     "current"),
]


def write(corpus, out):
    rows = []
    for new_id, base, per_gpu, scaling in ROWS:
        e = copy.deepcopy(corpus[base])
        e["id"] = new_id
        e["family"]["source"] = "whatif-mbridge2509-tokendrop"
        e["measured"]["tokens_per_s"] = per_gpu * e["hardware"]["num_gpus"]
        e["fp8_scaling"] = scaling
        e["notes"] = [f"What-if copy of {base} with the 25.09 token-drop figure {per_gpu} "
                      "tokens/s/GPU (bench/scripts/mbridge_tokendrop_whatif.py)."]
        rows.append(e)
    Path(out).write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")


def passes(corpus, sims):
    wanted = {r[0] for r in ROWS} | {r[1] for r in ROWS}
    runs = [r for sim in sims for r in json.loads(Path(sim).read_text(encoding="utf-8"))["runs"]]
    print("| run | tokens per pass | layer passes | measured ms/pass | predicted ms/pass | "
          "gap ms/pass | error |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in sorted(runs, key=lambda r: r["id"]):
        if r["id"] not in wanted:
            continue
        e = corpus[r["id"]]
        p, m = e["parallel"], e["model"]
        metric = next(x for x in r["metrics"] if x["name"] == "tokens_per_s")
        tokens = p["global_batch"] * m["seq_len"]
        measured_s = tokens / metric["measured"]
        predicted_s = tokens / metric["predicted"]
        micro_batches = p["global_batch"] // (p["dp"] * p["micro_batch"])
        moe_layers = (m["layers"] - m.get("first_dense_layers", 0)) / p["pp"]
        n = micro_batches * moe_layers
        print(f"| {r['id']} | {p['micro_batch'] * m['seq_len']} | {n:.0f} | "
              f"{measured_s / n * 1e3:.2f} | {predicted_s / n * 1e3:.2f} | "
              f"{(measured_s - predicted_s) / n * 1e3:+.2f} | {metric['error'] * 100:+.1f}% |")


def main(argv):
    if len(argv) < 4 or argv[1] not in ("write", "passes") or (argv[1] == "write") != (
            len(argv) == 4):
        sys.exit(__doc__)
    corpus = {e["id"]: e for e in json.loads(Path(argv[2]).read_text(encoding="utf-8"))}
    if argv[1] == "write":
        write(corpus, argv[3])
        return
    corpus.update({e["id"]: e for e in json.loads(Path(argv[3]).read_text(encoding="utf-8"))})
    passes(corpus, argv[4:])


if __name__ == "__main__":
    main(sys.argv)
