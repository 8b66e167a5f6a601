#!/usr/bin/env bash
# bench/scripts/executor_step_allocations.sh's input errors, with no build: too few arguments
# (usage, exit 2) and a binary that is not there (exit 1, naming it). Nothing is run or written.
set -u
script="$(dirname "${BASH_SOURCE[0]}")/../../bench/scripts/executor_step_allocations.sh"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
failures=0
expect() {  # EXIT-CODE NEEDLE -- command...
  local code="$1" needle="$2"; shift 3
  local out rc; out="$("$@" 2>&1)"; rc=$?
  if [ "$rc" != "$code" ] || ! grep -qF -- "$needle" <<<"$out"; then
    echo "FAIL: $* exited $rc (wanted $code) saying: $out"; failures=$((failures + 1))
  fi
}
expect 2 "usage: executor_step_allocations.sh" -- bash "$script" "$tmp/build" "$tmp/out"
expect 1 "$tmp/build/tools/execute is not an executable" -- \
  bash "$script" "$tmp/build" "$tmp/out" "$tmp/no-such-execute"
[ ! -e "$tmp/out" ] || { echo "FAIL: the output folder was created on error"; failures=$((failures + 1)); }
echo "step_allocations_script_test: $failures failed"
[ "$failures" -eq 0 ]
