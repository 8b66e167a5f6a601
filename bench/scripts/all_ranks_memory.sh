#!/usr/bin/env bash
# The simulator's own memory with --all-ranks, before and after a change: `simulate --all-ranks
# --json` on GPT-3 over 512 GPUs (the plan `plan` recommends at its default batch) and over
# 1,024 GPUs (the best estimate there), with the tools of BEFORE and AFTER, each with its wall
# time and peak RSS (/usr/bin/time), the operations in the program (from the trace-size
# refusal, which counts them before the step is played) and the outputs compared byte for byte.
#   bench/scripts/all_ranks_memory.sh BEFORE_BUILD AFTER_BUILD OUT_DIR
# Writes OUT_DIR/summary.md (the figures) and the raw outputs beside it.
set -uo pipefail
if [ $# -ne 3 ]; then echo "usage: $0 BEFORE_BUILD AFTER_BUILD OUT_DIR" >&2; exit 2; fi
before="$(cd "$1" && pwd)"; after="$(cd "$2" && pwd)"; out="$(mkdir -p "$3" && cd "$3" && pwd)"
cd "$(dirname "$0")/../.."
summary="$out/summary.md"
{
  echo "# simulate --all-ranks: wall time and peak memory"
  echo
  echo "Machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)."
  echo "Command: bench/scripts/all_ranks_memory.sh $1 $2 $3"
  echo "Load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)."
  echo
  echo "| case | operations | tools | wall s | peak RSS MB | bytes per op | exit |"
  echo "| --- | --- | --- | --- | --- | --- | --- |"
} >"$summary"
for gpus in 512 1024; do
  plan_file="$out/gpt3-$gpus.plan.json"
  if [ "$gpus" = 512 ]; then
    "$after/tools/plan" --model models/gpt3.json --gpus 512 --emit-plan "$plan_file" --quiet >/dev/null
  else
    "$after/tools/plan" --model models/gpt3.json --gpus 1024 --emit-plan "$plan_file" --quiet \
      --simulate-top 0 >/dev/null
  fi
  args=(--model models/gpt3.json --gpus "$gpus" --plan "$plan_file" --all-ranks)
  # The program's size, from the trace estimate's refusal (a limit of 1 MB; nothing is played).
  ops="$("$after/tools/simulate" "${args[@]}" --trace "$out/refused.json" --trace-limit-gb 0.001 \
    --quiet 2>&1 | grep -oE '[0-9,]+ operations' | tr -d ', operations')"
  for tools in before after; do
    dir="$before"; [ "$tools" = after ] && dir="$after"
    file="$out/sim$gpus.$tools.json"
    /usr/bin/time -f "%e %M" -o "$out/time.txt" "$dir/tools/simulate" "${args[@]}" --json \
      >"$file" 2>"$file.err"
    rc=$?
    read -r wall rss < <(tail -1 "$out/time.txt")
    per_op=$(( rss * 1024 / ${ops:-1} ))
    echo "| GPT-3, $gpus GPUs, --all-ranks | $ops | $tools | $wall | $((rss / 1024)) | $per_op | $rc |" >>"$summary"
  done
  # The same document but for the build stamp, and for the cluster's host memory where BEFORE
  # wrote it in GiB (host_memory_GiB_per_node; issue 24 made it GB): both are set aside.
  same() {
    python3 - "$1" "$2" <<'PY'
import json, sys
def norm(path):
    d = json.load(open(path))
    d.pop("build", None)
    c = d.get("cluster", {})
    if "host_memory_GiB_per_node" in c:
        c["host_memory_GB_per_node"] = round(c.pop("host_memory_GiB_per_node") * 2**30 / 1e9, 6)
    elif "host_memory_GB_per_node" in c:
        c["host_memory_GB_per_node"] = round(c["host_memory_GB_per_node"], 6)
    return json.dumps(d, indent=2, sort_keys=True)
sys.exit(0 if norm(sys.argv[1]) == norm(sys.argv[2]) else 1)
PY
  }
  if same "$out/sim$gpus.before.json" "$out/sim$gpus.after.json"; then
    echo "- $gpus GPUs: before and after identical but for the build stamp and host memory's unit" >>"$out/identical.txt"
  else
    echo "- $gpus GPUs: before and after DIFFER" >>"$out/identical.txt"
  fi
done
{ echo; cat "$out/identical.txt"; } >>"$summary"
cat "$summary"
