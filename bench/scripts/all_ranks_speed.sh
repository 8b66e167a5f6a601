#!/usr/bin/env bash
# `simulate --all-ranks` on the cores (issue 24): where its time goes, and its wall time before
# and after the per-rank work after the play went parallel.
#   bench/scripts/all_ranks_speed.sh BEFORE_BUILD AFTER_BUILD OUT_DIR
# Cases: the issue's GPT-3 on 512 GPUs (the plan `plan` recommends), report only; Llama 3 70B on
# 64 GPUs with its Chrome trace (about 1 GB, written to /dev/shm so that the disk does not set
# the pace) and its HTML picture. Each with BEFORE's tools and AFTER's on 1 thread and on every
# core: wall, user and system seconds, peak RSS. The outputs are compared byte for byte (the
# reports less their build stamp). Then a profile of AFTER on 1 thread (perf record, grouped by
# phase from the symbol names) says which phase holds the time.
# Writes OUT_DIR/summary.md; the raw outputs stay in OUT_DIR (the traces are deleted).
set -uo pipefail
if [ $# -ne 3 ]; then echo "usage: $0 BEFORE_BUILD AFTER_BUILD OUT_DIR" >&2; exit 2; fi
before="$(cd "$1" && pwd)"; after="$(cd "$2" && pwd)"; out="$(mkdir -p "$3" && cd "$3" && pwd)"
cd "$(dirname "$0")/../.."
shm="$(mktemp -d /dev/shm/all_ranks_speed.XXXXXX)"
trap 'rm -rf "$shm"' EXIT
summary="$out/summary.md"
# shellcheck source=bench/scripts/timing.sh
source bench/scripts/timing.sh
timing_header "simulate --all-ranks: wall time before and after, and where it goes" bench/scripts/all_ranks_speed.sh "$1" "$2" "$3"
gpt3_plan="$out/gpt3-512.plan.json"; l70_plan="$out/l70-64.plan.json"
"$after/tools/plan" --model models/gpt3.json --gpus 512 --emit-plan "$gpt3_plan" --quiet >/dev/null
"$after/tools/plan" --model models/llama3-70b.json --gpus 64 --emit-plan "$l70_plan" --quiet >/dev/null
gpt3=(--model models/gpt3.json --gpus 512 --plan "$gpt3_plan" --all-ranks --json)
l70=(--model models/llama3-70b.json --gpus 64 --plan "$l70_plan" --all-ranks --json)
for run in before:before:- after:t1:1 after:t0:0; do
  IFS=: read -r tools tag threads <<<"$run"
  dir=$before; extra=(); [ "$tools" = after ] && { dir=$after; extra=(--threads "$threads" --quiet); }
  timed "GPT-3 512 GPUs --all-ranks" "$tools" "$threads" "$out/gpt3.$tag.json" -- \
    "$dir/tools/simulate" "${gpt3[@]}" "${extra[@]}"
  timed "Llama 3 70B 64 GPUs --all-ranks --trace --html" "$tools" "$threads" "$out/l70.$tag.json" -- \
    "$dir/tools/simulate" "${l70[@]}" --trace "$shm/l70.$tag.trace.json" --html "$out/l70.$tag.html" \
    "${extra[@]}"
done
same() {  # LABEL A B: byte-identical?
  if cmp -s "$2" "$3"; then echo "- $1: byte-identical"; else echo "- $1: DIFFER"; fi
}
{
  echo
  echo "Outputs:"
  for c in gpt3 l70; do
    for tag in t1 t0; do
      grep -v '"git_commit"' "$out/$c.$tag.json" >"$out/$c.$tag.nostamp"
    done
    grep -v '"git_commit"' "$out/$c.before.json" >"$out/$c.before.nostamp"
    same "$c report, 1 thread and every core" "$out/$c.t1.nostamp" "$out/$c.t0.nostamp"
    same "$c report, before and after (build stamp aside)" "$out/$c.before.nostamp" "$out/$c.t0.nostamp"
  done
  same "l70 trace ($(stat -c %s "$shm/l70.t0.trace.json") bytes), 1 thread and every core" \
    "$shm/l70.t1.trace.json" "$shm/l70.t0.trace.json"
  same "l70 trace, before and after" "$shm/l70.before.trace.json" "$shm/l70.t0.trace.json"
  same "l70 HTML, 1 thread and every core" "$out/l70.t1.html" "$out/l70.t0.html"
  same "l70 HTML, before and after" "$out/l70.before.html" "$out/l70.t0.html"
} >>"$summary"
rm -f "$shm"/*.trace.json
# Where the time goes: AFTER on one thread, sampled by perf, self time per symbol grouped by
# phase (the kernel's share is mostly page faults of the program's first touch).
if command -v perf >/dev/null; then
  perf record -q -F 999 -o "$out/perf.data" "$after/tools/simulate" "${gpt3[@]}" --threads 1 \
    --quiet >/dev/null 2>"$out/perf.err"
  perf report -i "$out/perf.data" --no-children --sort dso,symbol --stdio -q 2>/dev/null \
    >"$out/perf.txt"
  python3 - "$out/perf.txt" >>"$summary" <<'PY'
import re, sys
phases = [("building the program",
           r"Builder|build_program|step_tasks|stage_schedule|Topology|topology|"
           r"Engine::(add_|join|reserve|reorder_tail|stream_tail)"),
          ("the event loop (Engine::run and what it calls)", r"sim::Engine::"),
          ("per-rank passes after the play (timelines, exposure, memory over time)",
           r"slot_timelines|covered_ns|slot_ops|last_predecessors|pipeline_end|introsort|insertion_sort|__adjust_heap|_M_realloc"),
          ("the kernel (page faults, memory)", r"\[kernel|\[k\]"),
          ("the rest", r"")]
share = {name: 0.0 for name, _ in phases}
for line in open(sys.argv[1]):
    m = re.match(r"\s*([\d.]+)%\s+(.*)", line)
    if not m:
        continue
    pct, rest = float(m.group(1)), m.group(2)
    for name, pattern in phases:
        if re.search(pattern, rest):
            share[name] += pct
            break
print("\nWhere the time of GPT-3 on 512 ranks goes (AFTER, 1 thread; perf record, self time):\n")
print("| phase | share of samples |")
print("| --- | --- |")
for name, _ in phases:
    print(f"| {name} | {share[name]:.1f}% |")
PY
  rm -f "$out/perf.data"
fi
cat "$summary"
