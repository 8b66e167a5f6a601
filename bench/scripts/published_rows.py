#!/usr/bin/env python3
"""Row-by-row table of published runs, before and after a change: for each run that
bench/simulator/published_breakdown printed (one JSON object per run), the measured step (the
entry's iteration time, else global batch x sequence / tokens per second), the predicted step on
each side, the error as throughput (+ = predicted faster, the corpus' convention), the micro-batches
per step and the exposed communication per group after the change. Writes markdown to stdout.

Usage: published_rows.py CORPUS.json BEFORE.jsonl AFTER.jsonl [BEFORE_CORPUS.json]
  BEFORE.jsonl / AFTER.jsonl: published_breakdown's output on the two sides (the same filter);
  BEFORE_CORPUS.json: the corpus the BEFORE side read, when the change edited entries (the
  measured figure is read from CORPUS.json either way; entries keep their measurements).
Run by hand in a study (see its NOTES.md); no test: it only formats two breakdowns.
"""
import json
import sys
from pathlib import Path


def measured_step_s(entry):
    m = entry["measured"]
    if m.get("iteration_time_s"):
        return m["iteration_time_s"]
    p = entry["parallel"]
    if not m.get("tokens_per_s"):
        sys.exit(f"{entry['id']}: neither iteration_time_s nor tokens_per_s is measured")
    return p["global_batch"] * entry["model"]["seq_len"] / m["tokens_per_s"]


def breakdown_objects(lines, where):
    """published_breakdown's output, one JSON object per non-empty line; exits naming the line
    (WHERE:N) that is not one. Also used by published_diagnosis.py."""
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            yield json.loads(line)
        except json.JSONDecodeError as e:
            sys.exit(f"{where}:{n}: not a JSON object ({e})")


def read_breakdown(path):
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    return {j["id"]: j for j in breakdown_objects(lines, path)}


def main(argv):
    if len(argv) not in (4, 5):
        sys.exit(__doc__)
    corpus = {e["id"]: e for e in json.loads(Path(argv[1]).read_text(encoding="utf-8"))}
    before, after = read_breakdown(argv[2]), read_breakdown(argv[3])
    print("| run | GPUs | layout (after) | micro-batches | measured step, s | predicted before | "
          "error before | predicted after | error after | exposed comm after, s |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|---|")
    for rid, a in after.items():
        if rid not in corpus:
            sys.exit(f"{rid}: not in {argv[1]}")
        e = corpus[rid]
        meas = measured_step_s(e)
        plan = a["plan"]
        dp = plan.get("dp", 1)
        mbs = plan.get("micro_batch_size", 1)
        gbs = plan.get("global_batch_size", 0)
        micro = gbs // (dp * mbs) if dp and mbs else 0
        layout = " ".join(f"{k}{plan[k]}" for k in ("tp", "pp", "dp", "ep", "cp")
                          if plan.get(k, 1) not in (1, None)) + f" mbs{mbs}"
        if plan.get("expert_layout") == "folded":
            layout += f" folded etp{plan.get('expert_tp') or plan.get('tp', 1)}"
        if plan.get("zero_stage"):
            layout += f" zero{plan['zero_stage']}"
        if plan.get("recompute", "none") != "none":
            layout += f" recompute {plan['recompute']}"
            if plan.get("recompute_num_layers"):
                layout += f" x{plan['recompute_num_layers']}"
        for flag in ("ep_overlap", "tp_comm_overlap"):
            if plan.get(flag):
                layout += " " + flag
        stage = a["stages"][0]
        comm = ", ".join(f"{g} {c['exposed_s']:.2f}" for g, c in sorted(stage["comm"].items())
                         if c["exposed_s"] >= 0.005)
        pa = a["predicted_step_s"]
        b = before.get(rid)
        pb = b["predicted_step_s"] if b else None
        cells = [rid, str(a["gpus"]), layout, str(micro), f"{meas:.2f}",
                 f"{pb:.2f}" if pb else "-", f"{meas / pb - 1:+.1%}" if pb else "-",
                 f"{pa:.2f}", f"{meas / pa - 1:+.1%}", comm or "-"]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main(sys.argv)
