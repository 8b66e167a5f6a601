#!/usr/bin/env bash
# Does `plan`'s recommendation fit when `simulate` plays it? Over every zoo model, 8 to 4,096
# GPUs, H100 and A100, with the default tie rule and with --tie-tolerance 0 (the fastest
# simulated candidate): plan --emit-plan, then simulate the emitted plan and count the ranks it
# warns are over usable memory (memory_warnings). One line per case; the last line sums them.
#   bench/scripts/pick_fits.sh BUILD_DIR OUT_DIR
set -uo pipefail
if [ $# -ne 2 ]; then echo "usage: $0 BUILD_DIR OUT_DIR" >&2; exit 2; fi
build="$(cd "$1" && pwd)"; out="$(mkdir -p "$2" && cd "$2" && pwd)"
cd "$(dirname "$0")/../.."
over=0; cases=0
for m in models/*.json; do
  b=$(basename "$m" .json)
  for g in 8 64 256 512 1024 4096; do
    for gpu in H100-80GB A100-80GB; do
      for tie in default 0; do
        n=$b.g$g.$gpu.tie-$tie
        extra=(); [ "$tie" = 0 ] && extra=(--tie-tolerance 0)
        "$build/tools/plan" --model "$m" --gpus "$g" --gpu "$gpu" --quiet --json "${extra[@]}" \
          --emit-plan "$out/$n.plan.json" >"$out/$n.plan.out" 2>"$out/$n.plan.err"
        prc=$?
        cases=$((cases + 1))
        if [ ! -s "$out/$n.plan.json" ]; then echo "$n plan_rc=$prc no plan"; continue; fi
        "$build/tools/simulate" --model "$m" --gpus "$g" --gpu "$gpu" --plan "$out/$n.plan.json" \
          --json --quiet >"$out/$n.sim.out" 2>"$out/$n.sim.err"
        src=$?
        w=$(python3 -c "import json; print(len(json.load(open('$out/$n.sim.out')).get('memory_warnings', [])))")
        [ "$w" != 0 ] && over=$((over + 1))
        echo "$n plan_rc=$prc simulate_rc=$src ranks_over_usable=$w"
      done
    done
  done
done
echo "pick_fits: $cases cases, $over with a recommendation over usable memory in simulation"
