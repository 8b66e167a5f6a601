#!/usr/bin/env bash
# The whole test suite, as CI runs it: install what is missing, check the layers
# (scripts/check_layers.sh, and its own test), build (Release, warnings as errors), run every
# test with CTest, then the sanitizer pass (ASan + UBSan over the whole suite) and the fuzzers.
#   scripts/test.sh            everything
#   TRAINPLAN_QUICK=1 scripts/test.sh   the layer check, build and CTest only
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
jobs="$(nproc 2>/dev/null || echo 2)"
TRAINPLAN_SANITIZE_DEPS=1 TRAINPLAN_REFERENCE_DEPS=1 scripts/setup.sh
scripts/check_layers_test.sh
scripts/check_layers.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DTRAINPLAN_BUILD_BENCH=ON -DTRAINPLAN_WERROR=ON \
  -DTRAINPLAN_REQUIRE_TEST_DEPS=ON >/dev/null
cmake --build build -j "$jobs"
ctest --test-dir build --output-on-failure -j "$jobs"
if [ "${TRAINPLAN_QUICK:-0}" = 1 ]; then exit 0; fi
if [ -x .ci/sanitize.sh ]; then .ci/sanitize.sh; fi
if [ -x .ci/fuzz.sh ]; then .ci/fuzz.sh; fi
echo "test.sh: all passed"
