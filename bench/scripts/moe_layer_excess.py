#!/usr/bin/env python3
"""Per-run excess of the measured step over the predicted one, spread over the MoE layer
invocations of one pipeline stage (micro-batches x MoE layers per stage), for the corpus runs
whose id contains FILTER. Diagnosis for bench/results/blackwell-2026-12-02/NOTES.md: a fixed
cost per MoE layer invocation shows as the same milliseconds across models of different size.

Run: python3 bench/scripts/moe_layer_excess.py build/tools/simulate \
       validation/corpus/published_runs.json [FILTER]
Only runs with measured tokens_per_s and a global batch are read; exits 2 on bad arguments, an unreadable corpus,
no matching run or a simulate that does not run."""
import json
import subprocess
import sys
import tempfile


def main(argv):
    if len(argv) not in (3, 4):
        print(__doc__, file=sys.stderr)
        return 2
    simulate, corpus_path = argv[1], argv[2]
    wanted = argv[3] if len(argv) == 4 else ""
    try:
        corpus = json.load(open(corpus_path))
    except (OSError, ValueError) as e:
        print(f"moe_layer_excess: cannot read corpus '{corpus_path}': {e}", file=sys.stderr)
        return 2
    runs = [r for r in corpus if wanted in r["id"] and r["model"].get("num_experts")
            and r["measured"].get("tokens_per_s") and r["parallel"].get("global_batch")]
    if not runs:
        print(f"moe_layer_excess: no MoE run with tokens_per_s matches '{wanted}'", file=sys.stderr)
        return 2
    with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
        json.dump(runs, f)
        f.flush()
        try:
            done = subprocess.run([simulate, "--published", f.name], capture_output=True, text=True)
        except OSError as e:
            print(f"moe_layer_excess: cannot run simulate '{simulate}': {e}", file=sys.stderr)
            return 2
        if done.returncode not in (0, 1):
            print(f"moe_layer_excess: '{simulate} --published' exited {done.returncode}: "
                  f"{done.stderr.strip()[:300]}", file=sys.stderr)
            return 2
        out = done.stdout
    by_id = {r["id"]: r for r in runs}
    current = None
    for line in out.splitlines():
        words = line.split()
        if words and words[0] in by_id:
            current = words[0]
        if current and "tokens_per_s" in words:
            r, predicted = by_id[current], float(words[-2])
            m, p = r["model"], r["parallel"]
            tokens = p["global_batch"] * m["seq_len"]
            measured_s, predicted_s = tokens / r["measured"]["tokens_per_s"], tokens / predicted
            micro_batches = p["global_batch"] // (p["micro_batch"] * p["dp"])
            moe_layers_per_stage = (m["layers"] - m.get("first_dense_layers", 0)) / p.get("pp", 1)
            per_ms = 1e3 * (measured_s - predicted_s) / (micro_batches * moe_layers_per_stage)
            print(f"{current:44s} measured {measured_s:7.2f} s predicted {predicted_s:7.2f} s "
                  f"micro-batches {micro_batches:4d} MoE layers/stage {moe_layers_per_stage:5.1f} "
                  f"excess per MoE layer invocation {per_ms:6.2f} ms")
            current = None
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
