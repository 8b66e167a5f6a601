#!/usr/bin/env bash
# The executor against the PyTorch reference on issue 28's shape (4 layers, hidden 256, 4 heads,
# sequence 128, 8 sequences per step, lr 1e-3, 50 steps), one run per seed: step 1's logits,
# loss and gradients, and both 50-step loss curves (bench/scripts/reference_check.py).
#
#   bench/scripts/executor_reference_study.sh BUILD_DIR OUT_DIR [SEED...]   (default: 1234 7 99)
#   REFERENCE_MODEL=moe bench/scripts/executor_reference_study.sh ...
#
# REFERENCE_MODEL=moe runs the same shape as a mixture of experts instead (a dense first layer,
# then 8 experts of width 512, top-2, with a shared expert of width 512: the layer of
# executor/cpu/moe.h) in 2 micro-batches of 4, so that each has its own load-balancing loss.
# Its reference runs twice (reference_check.py --routing both): routing on its own, and
# replaying the executor's routing at near-ties (the check); bench/scripts/
# reference_check_moe_report.py then writes OUT_DIR/report-moe.md (where the routing first
# differs, both sides' gaps there, where the free curves part) and OUT_DIR/curves.svg. The
# reference also runs as it did before 2026-11-25 (--skip-idle-experts: an expert that no token
# chose got no gradient, and AdamW skipped it), for the report's last columns.
#
# Writes OUT_DIR/seed-S/{check.txt,curves.json} and OUT_DIR/report.md (per seed: the check's
# verdict, the largest curve difference, and the steps where either curve jumps by more than
# 1 nat over the previous step). About 2 minutes per seed on an idle core (MoE: four reference
# curves, about 5).
set -euo pipefail
build="$1" out="$2"
shift 2
seeds=("$@")
[ ${#seeds[@]} -gt 0 ] || seeds=(1234 7 99)
root="$(cd "$(dirname "$0")/../.." && pwd)"
python=""
for p in python3 /usr/bin/python3; do
  if command -v "$p" >/dev/null && "$p" -c "import torch" 2>/dev/null; then python="$p"; break; fi
done
[ -n "$python" ] || { echo "executor_reference_study: needs python3 with PyTorch" >&2; exit 1; }
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
mkdir -p "$out"
case "${REFERENCE_MODEL:-dense}" in
  dense)
    cat > "$out/model.json" <<'JSON'
{"name": "issue 28 shape", "source": "bench/scripts/executor_reference_study.sh",
 "num_layers": 4, "hidden_size": 256, "num_attention_heads": 4, "ffn_hidden_size": 1024,
 "vocab_size": 256, "seq_len": 128, "tie_word_embeddings": true, "activation": "gelu",
 "norm": "layernorm", "position_embedding": "learned", "bias": true, "dropout": false}
JSON
    echo '{"tp": 1, "pp": 1, "dp": 1, "micro_batch_size": 8, "global_batch_size": 8, "precision": "fp32"}' \
      > "$out/plan.json" ;;
  moe)
    cp "$root/bench/scripts/issue28_moe.model.json" "$out/model.json"
    echo '{"tp": 1, "pp": 1, "dp": 1, "micro_batch_size": 4, "global_batch_size": 8, "precision": "fp32"}' \
      > "$out/plan.json" ;;
  *) echo "executor_reference_study: REFERENCE_MODEL=${REFERENCE_MODEL} is neither dense nor moe" >&2
     exit 2 ;;
esac
data="$root/data/kjv-genesis.txt"
routing=()
[ "${REFERENCE_MODEL:-dense}" = moe ] && routing=(--routing both)
for seed in "${seeds[@]}"; do
  d="$out/seed-$seed"
  mkdir -p "$d"
  mpirun --oversubscribe --allow-run-as-root -np 1 "$build/tools/execute" --model "$out/model.json" \
    --plan "$out/plan.json" --steps 50 --data "$data" --seed "$seed" --out "$d/execute.json" \
    --dump-reference "$d/weights" >/dev/null
  "$python" "$root/bench/scripts/reference_check.py" --prefix "$d/weights" --data "$data" \
    --executor-report "$d/execute.json" --curve-json "$d/curves.json" "${routing[@]}" \
    > "$d/check.txt" || true
  # And as this check ran before 2026-11-25: an expert no token chose got no gradient in the
  # reference, so AdamW skipped it there and stepped it in the executor.
  [ "${REFERENCE_MODEL:-dense}" = moe ] &&
    { "$python" "$root/bench/scripts/reference_check.py" --prefix "$d/weights" --data "$data" \
        --executor-report "$d/execute.json" --curve-json "$d/curves-skip-idle.json" \
        --routing both --skip-idle-experts > "$d/check-skip-idle.txt" || true; }
  echo "seed $seed done" >&2
done
"$python" - "$out" "${seeds[@]}" <<'PY'
import json, re, sys
out, seeds = sys.argv[1], sys.argv[2:]


def step1_verdict(text):
    """Step 1 alone (the check's last line also counts the curve): the batch identical, logits,
    loss and every gradient within the tolerances reference_check.py prints."""
    if "batch of step 1: identical" not in text or "\n  gradient " in text:
        return "FAIL"
    for what in ("logits: max", "loss: executor"):
        line = next(l for l in text.splitlines() if l.startswith(what))
        diff, tol = re.search(r"\|diff\| ([0-9.e+-]+) \(tolerance ([0-9.e+-]+)\)", line).groups()
        if float(diff) > float(tol):
            return "FAIL"
    return "PASS"


rows = ["| seed | step 1 | curves (check) | max curve diff | curves within 1e-3 through step | "
        "spikes (step: executor / torch) | loss at step 50 (executor / torch) |",
        "|---:|---|---|---:|---:|---|---:|"]
for s in seeds:
    c = json.load(open(f"{out}/seed-{s}/curves.json"))
    e, t = c["executor"], c["torch"]
    text = open(f"{out}/seed-{s}/check.txt").read()
    verdict = text.strip().splitlines()[-1].split(": ")[-1]
    spikes = [i for i in range(1, len(e)) if e[i] - e[i - 1] > 1 or t[i] - t[i - 1] > 1]
    spike_text = ", ".join(f"{i + 1}: {e[i]:.2f} / {t[i]:.2f}" for i in spikes) or "none"
    diffs = [abs(a - b) for a, b in zip(e, t)]
    agree = next((i for i, d in enumerate(diffs) if d > 1e-3), len(diffs))
    rows.append(f"| {s} | {step1_verdict(text)} | {verdict} | {max(diffs):.4f} | {agree} | "
                f"{spike_text} | {e[-1]:.3f} / {t[-1]:.3f} |")
open(f"{out}/report.md", "w").write("\n".join(rows) + "\n")
print("\n".join(rows))
PY
if [ "${REFERENCE_MODEL:-dense}" = moe ]; then
  "$python" "$root/bench/scripts/reference_check_moe_report.py" "$out" "${seeds[@]}"
fi
