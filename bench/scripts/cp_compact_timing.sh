#!/usr/bin/env bash
# Planning and simulation time and peak memory of one build, REPS times each, one line per run:
#   label rep load1 wall_s user_s sys_s maxrss_kb
# usage (repository root): bench/scripts/cp_compact_timing.sh BUILD CP16_PLAN REPS > OUT.tsv
#   (CP16_PLAN: bench/recommendations/llama3-405b-cp16-p2p.plan.json; study bench/results/cp-compact-2026-12-02)
# The machine is shared: load1 is /proc/loadavg's one-minute figure when the run started.
set -uo pipefail
b="$1"; cp16="$2"; reps="${3:-3}"
run() {  # label, command...
  local label="$1"; shift
  for r in $(seq 1 "$reps"); do
    local load; load=$(cut -d' ' -f1 /proc/loadavg)
    local f; f=$(mktemp)
    /usr/bin/time -o "$f" -f "%e %U %S %M" "$@" >/dev/null 2>&1
    echo "$label $r $load $(tail -1 "$f")"
    rm -f "$f"
  done
}
run plan405b "$b/tools/plan" --model models/llama3-405b.json --gpus 16384 --tokens-per-step 16777216 \
  --baseline bench/recommendations/llama3-405b-meta.plan.json --memory-headroom 0.02
run plan70b "$b/tools/plan" --model models/llama3-70b.json --gpus 512
run simcp16 "$b/tools/simulate" --model models/llama3-405b.json --plan "$cp16" --gpus 16384 --json
