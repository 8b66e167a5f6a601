#!/usr/bin/env bash
# Test of scripts/check_layers.sh: a small tree that follows the allowed arrows passes, and
# each planted violation (an include pointing up, a library including tools/, bench including
# tools/, a relative include climbing out of its layer, a main() in a library) fails, naming
# its file:line. scripts/test.sh runs it before the build.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
check="$root/scripts/check_layers.sh"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
failures=0

plant() {  # plant FILE LINE...: writes FILE under the scratch tree, one argument per line
  local file="$work/tree/$1"; shift
  mkdir -p "$(dirname "$file")"
  printf '%s\n' "$@" > "$file"
}

# The include the planted violations use, assembled so that this file itself does not read as
# a library including tools/ to scanners of the tree.
tools_dir=tools
include_cli="#include \"$tools_dir/cli.h\""
clean_tree() {
  rm -rf "$work/tree"
  plant core/units.h '#pragma once'
  plant core/cost/cost_model.h '#include "core/units.h"'
  plant simulator/engine.h '#include "core/cost/cost_model.h"'
  plant planner/planner.cc '#include "simulator/engine.h"' '#include "planner/planner.h"'
  plant executor/comm.h '#include "core/units.h"'
  plant executor/cpu/comm_mpi.cc '#include "executor/comm.h"' '#include "comm_mpi.h"'
  plant executor/cuda/device.cc '#include "executor/comm.h"' '#include "../comm.h"'
  plant calibration/probe.cc '#include "executor/cpu/comm_mpi.h"' '#include "core/units.h"'
  plant validation/compare.cc '#include "simulator/engine.h"'
  plant tools/plan.cc '#include "planner/planner.h"' "$include_cli" 'int main() {}'
  plant bench/planner/bench_planner.cc '#include "planner/planner.h"' 'int main() {}'
  plant tests/core/units_test.cc "$include_cli" 'int main() {}'
}

expect_pass() {  # expect_pass WHAT
  if ! out="$("$check" "$work/tree" 2>&1)"; then
    echo "FAIL: $1: check_layers.sh failed on a clean tree:"; echo "$out"
    failures=$((failures + 1))
  fi
}

expect_fail() {  # expect_fail WHAT FILE:LINE
  local out rc=0
  out="$("$check" "$work/tree" 2>&1)" || rc=$?
  if [ "$rc" = 0 ]; then
    echo "FAIL: $1: check_layers.sh passed"; failures=$((failures + 1))
  elif ! grep -q "^$2: " <<<"$out"; then
    echo "FAIL: $1: the message does not name $2:"; echo "$out"; failures=$((failures + 1))
  fi
}

clean_tree; expect_pass "allowed arrows"

clean_tree; plant core/units.h '#pragma once' '#include "planner/planner.h"'
expect_fail "core includes planner" core/units.h:2

clean_tree; plant core/cost/cost_model.h '#include "simulator/engine.h"'
expect_fail "core/cost includes simulator" core/cost/cost_model.h:1

clean_tree; plant executor/trainer.cc '#include "executor/comm.h"' '#include "simulator/engine.h"'
expect_fail "executor includes simulator" executor/trainer.cc:2

clean_tree; plant executor/cuda/bench_main.cc "$include_cli"
expect_fail "a library includes tools" executor/cuda/bench_main.cc:1

clean_tree; plant executor/cpu/stage.cc '#include "executor/cuda/device.h"'
expect_fail "one backend includes the other" executor/cpu/stage.cc:1

clean_tree; plant simulator/program.cc '#include "../planner/planner.h"'
expect_fail "a relative include climbs up" simulator/program.cc:1

clean_tree; plant bench/simulator/bench.cc "$include_cli"
expect_fail "bench includes tools" bench/simulator/bench.cc:1

clean_tree; plant validation/run.cc '#include "planner/planner.h"'
expect_fail "validation includes planner" validation/run.cc:1

clean_tree; plant executor/cuda/calibrate_main.cc '// a program' 'int main(int argc, char** argv) {'
expect_fail "main() in a library" executor/cuda/calibrate_main.cc:2

if [ "$failures" -ne 0 ]; then
  echo "check_layers_test: $failures failed"; exit 1
fi
echo "check_layers_test: all passed (a clean tree and 9 planted violations)"
