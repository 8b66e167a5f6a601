#!/usr/bin/env bash
# Issue 24's long phases, before and after: `plan --simulate-top 200` (the simulator's
# refinement; Llama 3 70B on 64 GPUs, and GPT-3 on 512 with a batch of 1,024, the issue's 49 s
# case) and `simulate --all-ranks` on GPT-3 over 512 GPUs (the 21 s case), each with the tools
# of BEFORE (a build of the commit before the change) and AFTER on one thread and on every
# core. ROUNDS rounds (default 3), the runs of a round alternated, each under /usr/bin/time
# (wall, user and system seconds, peak RSS, minor page faults) with the 1-minute load average
# before it; bench/scripts/parallel_speed_report.py turns them into OUT_DIR/report.md (medians).
# The outputs of one thread and every core are compared byte for byte, and those of BEFORE and
# AFTER (less the build stamp, git_commit), in every round; a trace of GPT-3 on 1,024 ranks is
# refused with its size.
#   bench/scripts/parallel_speed.sh BEFORE_BUILD AFTER_BUILD OUT_DIR [ROUNDS]
# Writes OUT_DIR/rounds.tsv (one line per run), OUT_DIR/report.md and the raw outputs beside it.
set -uo pipefail
if [ $# -lt 3 ] || [ $# -gt 4 ]; then
  echo "usage: $0 BEFORE_BUILD AFTER_BUILD OUT_DIR [ROUNDS]" >&2; exit 2
fi
rounds="${4:-3}"
if ! [[ "$rounds" =~ ^[1-9][0-9]*$ ]]; then echo "$0: ROUNDS must be a positive integer, got '$rounds'" >&2; exit 2; fi
for b in "$1" "$2"; do
  if [ ! -x "$b/tools/plan" ] || [ ! -x "$b/tools/simulate" ]; then
    echo "$0: $b has no tools/plan and tools/simulate" >&2; exit 2
  fi
done
before="$(cd "$1" && pwd)"; after="$(cd "$2" && pwd)"; out="$(mkdir -p "$3" && cd "$3" && pwd)"
cd "$(dirname "$0")/../.."
raw="$out/rounds.tsv"
checks="$out/checks.md"
printf 'case\ttools\tthreads\tround\twall_s\tuser_s\tsys_s\trss_mb\tminor_faults\texit\tload1\n' >"$raw"
: >"$checks"

# One run: its row in rounds.tsv; stdout to FILE, stderr to FILE.err.
run() {
  local name="$1" tools="$2" threads="$3" round="$4" file="$5"; shift 6
  local load; load="$(cut -d' ' -f1 /proc/loadavg)"
  /usr/bin/time -f "%e %U %S %M %R" -o "$out/time.txt" "$@" >"$file" 2>"$file.err"
  local rc=$? wall user sys rss faults
  read -r wall user sys rss faults < <(tail -1 "$out/time.txt")
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$tools" "$threads" "$round" \
    "$wall" "$user" "$sys" "$((rss / 1024))" "$faults" "$rc" "$load" >>"$raw"
}

# BEFORE, then AFTER on one thread and on every core; their outputs compared.
case_round() {
  local name="$1" tag="$2" round="$3"; shift 3
  local b="$out/$tag.before.r$round.json" a1="$out/$tag.t1.r$round.json" a0="$out/$tag.t0.r$round.json"
  run "$name" before - "$round" "$b" -- "$before/tools/$1" "${@:2}"
  run "$name" after 1 "$round" "$a1" -- "$after/tools/$1" "${@:2}" --threads 1 --quiet
  run "$name" after 0 "$round" "$a0" -- "$after/tools/$1" "${@:2}" --threads 0 --quiet
  if cmp -s "$a1" "$a0"; then s="byte-identical"; else s="DIFFER"; fi
  echo "- round $round, $name: after on 1 thread and on every core: $s" >>"$checks"
  if cmp -s <(grep -v '"git_commit"' "$b") <(grep -v '"git_commit"' "$a1"); then
    s="byte-identical but for the build stamp"
  else
    s="DIFFER"
  fi
  echo "- round $round, $name: before and after: $s" >>"$checks"
}

# The GPT-3 plan on 512 H100s that `plan` recommends at its default batch.
plan_file="$out/gpt3-512.plan.json"
"$after/tools/plan" --model models/gpt3.json --gpus 512 --emit-plan "$plan_file" --quiet >/dev/null
l70=(--model models/llama3-70b.json --gpus 64 --simulate-top 200 --json)
g3=(--model models/gpt3.json --gpus 512 --global-batch 1024 --simulate-top 200 --json)
sim=(--model models/gpt3.json --gpus 512 --plan "$plan_file" --all-ranks --json)
for ((r = 1; r <= rounds; ++r)); do
  case_round "plan llama3-70b 64 GPUs --simulate-top 200" l70 "$r" plan "${l70[@]}"
  case_round "plan gpt3 512 GPUs --global-batch 1024 --simulate-top 200" g3 "$r" plan "${g3[@]}"
  case_round "simulate gpt3 512 GPUs --all-ranks" sim "$r" simulate "${sim[@]}"
done
"$after/tools/plan" --model models/gpt3.json --gpus 1024 --emit-plan "$out/gpt3-1024.plan.json" \
  --quiet --simulate-top 0 >/dev/null
"$after/tools/simulate" --model models/gpt3.json --gpus 1024 --plan "$out/gpt3-1024.plan.json" \
  --all-ranks --trace "$out/gpt3-1024.trace.json" --quiet >/dev/null 2>"$out/trace1024.err"
trace_rc=$?
{
  echo "- the 1,024-rank trace (exit $trace_rc): $(tail -1 "$out/trace1024.err")"
  echo "- trace file left behind: $(ls "$out" | grep -c 'gpt3-1024.trace' || true)"
} >>"$checks"
python3 bench/scripts/parallel_speed_report.py "$out" \
  "bench/scripts/parallel_speed.sh $1 $2 $3 $rounds" \
  "$(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
cat "$out/report.md"
