#!/usr/bin/env bash
# Issue 24's long phases, before and after: `plan --simulate-top 200` (the simulator's
# refinement) and `simulate --all-ranks` on GPT-3 over 512 GPUs, each with the tools of BEFORE
# (a build of the commit before the change) and AFTER on one thread and on every core, with
# wall time and peak RSS; the outputs of one thread and every core compared byte for byte, and
# those of BEFORE and AFTER (less the build stamp, git_commit); and
# a trace of GPT-3 on 1,024 ranks (std::bad_alloc before: not rerun here) refused with its size.
#   bench/scripts/parallel_speed.sh BEFORE_BUILD AFTER_BUILD OUT_DIR
# Writes OUT_DIR/summary.md (the figures) and the raw outputs beside it.
set -uo pipefail
if [ $# -ne 3 ]; then echo "usage: $0 BEFORE_BUILD AFTER_BUILD OUT_DIR" >&2; exit 2; fi
before="$(cd "$1" && pwd)"; after="$(cd "$2" && pwd)"; out="$(mkdir -p "$3" && cd "$3" && pwd)"
cd "$(dirname "$0")/../.."
summary="$out/summary.md"
# shellcheck source=bench/scripts/timing.sh
source bench/scripts/timing.sh
timing_header "parallel refinement and --all-ranks: wall time and peak memory" bench/scripts/parallel_speed.sh "$1" "$2" "$3"
# The GPT-3 plan on 512 H100s that `plan` recommends at its default batch (2,048 sequences).
plan_file="$out/gpt3-512.plan.json"
"$after/tools/plan" --model models/gpt3.json --gpus 512 --emit-plan "$plan_file" --quiet >/dev/null
l70=(--model models/llama3-70b.json --gpus 64 --simulate-top 200 --json)
timed "plan llama3-70b 64 GPUs --simulate-top 200" before - "$out/plan.before.json" -- \
  "$before/tools/plan" "${l70[@]}"
for t in 1 0; do
  timed "plan llama3-70b 64 GPUs --simulate-top 200" after "$t" "$out/plan.t$t.json" -- \
    "$after/tools/plan" "${l70[@]}" --threads "$t" --quiet
done
g3=(--model models/gpt3.json --gpus 512 --global-batch 1024 --simulate-top 200 --json)
timed "plan gpt3 512 GPUs --global-batch 1024 --simulate-top 200" before - "$out/g3.before.json" -- \
  "$before/tools/plan" "${g3[@]}"
for t in 1 0; do
  timed "plan gpt3 512 GPUs --global-batch 1024 --simulate-top 200" after "$t" "$out/g3.t$t.json" -- \
    "$after/tools/plan" "${g3[@]}" --threads "$t" --quiet
done
sim=(--model models/gpt3.json --gpus 512 --plan "$plan_file" --all-ranks --json)
timed "simulate gpt3 512 GPUs --all-ranks" before - "$out/sim.before.json" -- \
  "$before/tools/simulate" "${sim[@]}"
for t in 1 0; do
  timed "simulate gpt3 512 GPUs --all-ranks" after "$t" "$out/sim.t$t.json" -- \
    "$after/tools/simulate" "${sim[@]}" --threads "$t" --quiet
done
"$after/tools/plan" --model models/gpt3.json --gpus 1024 --emit-plan "$out/gpt3-1024.plan.json" \
  --quiet --simulate-top 0 >/dev/null
timed "simulate gpt3 1024 GPUs --all-ranks --trace" after 0 "$out/trace1024.txt" -- \
  "$after/tools/simulate" --model models/gpt3.json --gpus 1024 \
  --plan "$out/gpt3-1024.plan.json" --all-ranks --trace "$out/gpt3-1024.trace.json" --quiet
{
  echo
  for pair in "plan.t1.json plan.t0.json" "g3.t1.json g3.t0.json" "sim.t1.json sim.t0.json"; do
    set -- $pair
    if cmp -s "$out/$1" "$out/$2"; then echo "- $1 and $2: byte-identical"; else echo "- $1 and $2: DIFFER"; fi
  done
  for pair in "plan.before.json plan.t1.json" "g3.before.json g3.t1.json" "sim.before.json sim.t1.json"; do
    set -- $pair
    if cmp -s <(grep -v '"git_commit"' "$out/$1") <(grep -v '"git_commit"' "$out/$2"); then
      echo "- $1 and $2: byte-identical but for the build stamp"
    else
      echo "- $1 and $2: DIFFER"
    fi
  done
  echo "- the 1,024-rank trace: $(tail -1 "$out/trace1024.txt.err")"
  echo "- trace file left behind: $(ls "$out" | grep -c 'gpt3-1024.trace' || true)"
} >>"$summary"
cat "$summary"
