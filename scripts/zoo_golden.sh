#!/usr/bin/env bash
# Byte-identical check over the model zoo: runs `plan --json` and `simulate --json` (and
# `simulate --published --json` over the published-run corpus) with the tools in BUILD_DIR and
# writes each case's stdout, stderr and exit status under OUT_DIR. Run it before and after a
# change that must not change behaviour, then compare the two folders:
#   scripts/zoo_golden.sh build-before /tmp/before
#   scripts/zoo_golden.sh build /tmp/after
#   diff -r /tmp/before /tmp/after && echo identical
# Models are taken from models/ (the zoo); the corpus from validation/corpus/ or, in trees from
# before the house move, tests/data and bench/simulator.
set -uo pipefail
if [ $# -ne 2 ]; then echo "usage: $0 BUILD_DIR OUT_DIR" >&2; exit 2; fi
build="$(cd "$1" && pwd)"
out="$(mkdir -p "$2" && cd "$2" && pwd)"
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
mkdir -p "$out"
plan="$build/tools/plan"
simulate="$build/tools/simulate"
for t in "$plan" "$simulate"; do
  [ -x "$t" ] || { echo "$0: no tool at $t" >&2; exit 2; }
done
# Models given as a path relative to the repository root, so that outputs naming the model
# file read the same in any checkout.
run_case() {  # name, command...
  local name="$1"; shift
  "$@" >"$out/$name.out" 2>"$out/$name.err"
  echo $? >"$out/$name.rc"
  # The output folder differs between the two runs; where a message names it, say OUT.
  sed -i "s#$out#OUT#g" "$out/$name.out" "$out/$name.err"
}
cases=0
for m in models/*.json; do
  base="$(basename "$m" .json)"
  for gpus in 8 64 512; do
    for gpu in H100-80GB A100-80GB; do
      name="$base.g$gpus.$gpu"
      run_case "plan.$name" "$plan" --model "$m" --gpus "$gpus" --gpu "$gpu" --json \
        --emit-plan "$out/plan.$name.plan.json"
      cases=$((cases + 1))
      if [ -s "$out/plan.$name.plan.json" ]; then
        run_case "simulate.$name" "$simulate" --model "$m" --plan "$out/plan.$name.plan.json" \
          --gpus "$gpus" --gpu "$gpu" --json
        cases=$((cases + 1))
      fi
    done
  done
done
corpus=()
if [ -d validation/corpus ]; then
  corpus=(validation/corpus/published_runs*.json)  # not error_residuals.json: no run list
else
  corpus=(tests/data/published_runs*.json bench/simulator/published_runs*.json)
fi
# Each corpus file is read from a copy at the same relative path in both runs (corpus/NAME.json
# under OUT_DIR), since messages name the file and the corpus moved once (to validation/corpus).
mkdir -p "$out/corpus"
for c in "${corpus[@]}"; do
  cp "$c" "$out/corpus/"
  name="published.$(basename "$c" .json)"
  (cd "$out" && run_case "$name" "$simulate" --published "corpus/$(basename "$c")" --json)
  cases=$((cases + 1))
done
echo "zoo_golden: $cases cases written to $out"
