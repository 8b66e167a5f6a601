#!/usr/bin/env bash
# The CPU executor's offload tiers (executor/offload.h) on the tiny model: step time with and
# without each tier, and the bytes each rank moves per step against the cost model's
# offload_traffic_on_stage (execute writes both in cluster.offload_bytes_per_step, and what the
# prefetch read ahead).
#   bench/scripts/offload_study.sh [RAW_DIR] [ROUNDS] [STEPS]
# Environment: MODEL (default models/tiny.json; "wide" writes RAW_DIR/wide.json, the tiny model
# at hidden 512 and ffn 2048, 12.9M parameters, so that a rank's states are tens of MB) and
# CASES (default all; a space-separated subset of the case names below).
# RAW_DIR (default /tmp/offload-study): one step report per case and round, and the offload
# files' directory (on the disk under test; default RAW_DIR/offload). Rounds interleave the
# cases, so that a change in the machine's load hits them all alike. Then
#   python3 bench/scripts/offload_study_report.py RAW_DIR OUT_DIR
# writes the summary (report.md, report.json).
set -euo pipefail
cd "$(dirname "$0")/../.."
raw="${1:-/tmp/offload-study}"
rounds="${2:-5}"
steps="${3:-12}"
exe=build/tools/execute
offload_dir="${OFFLOAD_DIR:-$raw/offload}"
mkdir -p "$raw/plans" "$offload_dir"
model="${MODEL:-models/tiny.json}"
if [ "$model" = wide ]; then
  model="$raw/wide.json"
  python3 - "$model" <<'PY'
import json, sys
m = json.load(open("models/tiny.json"))
m.update(name="tiny GPT widened (offload study)", hidden_size=512, num_attention_heads=8,
         ffn_hidden_size=2048)
json.dump(m, open(sys.argv[1], "w"), indent=2)
PY
fi
mpirun=(mpirun --oversubscribe --allow-run-as-root --mca btl_vader_single_copy_mechanism none)

# dp 2, ZeRO-3, 4 micro-batches of 2 sequences per rank and step.
plan() {  # name, extra JSON fields
  echo "{\"tp\": 1, \"pp\": 1, \"dp\": 2, \"zero_stage\": 3, \"micro_batch_size\": 2, " \
       "\"global_batch_size\": 16, \"precision\": \"fp32\"$2}" >"$raw/plans/$1.json"
}
plan none ''
plan opt_cpu ', "offload": "optimizer"'
plan opt_nvme ', "offload": "optimizer", "offload_device": "nvme"'
plan params_cpu ', "offload": "optimizer+params"'
plan params_nvme ', "offload": "optimizer+params", "offload_device": "nvme"'

# case: plan, extra execute flags
cases=(
  "none:none:"
  "opt_cpu:opt_cpu:"
  "opt_nvme:opt_nvme:--offload-dir $offload_dir"
  "opt_nvme_no_prefetch:opt_nvme:--offload-dir $offload_dir --offload-prefetch off"
  "params_cpu:params_cpu:"
  "params_nvme:params_nvme:--offload-dir $offload_dir"
  "params_nvme_no_prefetch:params_nvme:--offload-dir $offload_dir --offload-prefetch off"
)
{
  echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
  echo "offload dir: $offload_dir on $(df --output=source,fstype "$offload_dir" | tail -1)"
  echo "load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "commit: $(git rev-parse --short HEAD)"
  echo "rounds $rounds, steps $steps (2 warm-up)"
  echo "model: $model"
} >"$raw/machine.txt"
for r in $(seq 1 "$rounds"); do
  for c in "${cases[@]}"; do
    IFS=: read -r name p flags <<<"$c"
    if [ -n "${CASES:-}" ] && [[ " $CASES " != *" $name "* ]]; then continue; fi
    # shellcheck disable=SC2086
    "${mpirun[@]}" -np 2 "$exe" --model "$model" --plan "$raw/plans/$p.json" \
      --steps "$steps" --warmup 2 --random-tokens --out "$raw/$name.r$r.json" $flags \
      >"$raw/$name.r$r.log" 2>&1
  done
  echo "round $r done (load $(cut -d' ' -f1 /proc/loadavg))"
done
echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$raw/machine.txt"
