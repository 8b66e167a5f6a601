#!/usr/bin/env bash
# The CPU executor's offload tiers (executor/offload.h) on the tiny model: step time with and
# without each tier, and the bytes each rank moves per step against the cost model's
# offload_traffic_on_stage (execute writes both in cluster.offload_bytes_per_step).
#   bench/scripts/offload_study.sh [RAW_DIR] [ROUNDS] [STEPS]
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
} >"$raw/machine.txt"
for r in $(seq 1 "$rounds"); do
  for c in "${cases[@]}"; do
    IFS=: read -r name p flags <<<"$c"
    # shellcheck disable=SC2086
    "${mpirun[@]}" -np 2 "$exe" --model models/tiny.json --plan "$raw/plans/$p.json" \
      --steps "$steps" --warmup 2 --random-tokens --out "$raw/$name.r$r.json" $flags \
      >"$raw/$name.r$r.log" 2>&1
  done
  echo "round $r done (load $(cut -d' ' -f1 /proc/loadavg))"
done
echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$raw/machine.txt"
