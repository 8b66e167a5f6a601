#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz (clang, -DTRAINPLAN_FUZZ=ON) and runs each for a
# fixed time on a fresh copy of its seed corpus (tests/fuzz/corpus/<target>/). A crash, a
# sanitizer report, a timeout or an out-of-memory fails the script; the input that did it is
# printed (escaped and base64) and kept under build-fuzz/fuzz-work/<target>/artifacts/.
#
#   .ci/fuzz.sh                        # 20 s per target
#   FUZZ_SECONDS=300 .ci/fuzz.sh fuzz_plan
#
# Idempotent: the build directory is reused and each run starts from the seed corpus again.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${BUILD_DIR:-$ROOT/build-fuzz}"
JOBS="${JOBS:-2}"
SECONDS_PER_TARGET="${FUZZ_SECONDS:-20}"
ALL_TARGETS="fuzz_model fuzz_hf_config fuzz_cluster fuzz_plan fuzz_hardware_profile fuzz_step_report fuzz_planner fuzz_published_run"
TARGETS="${*:-$ALL_TARGETS}"

echo "== fuzz: configure $BUILD (clang++)"
cmake -S "$ROOT" -B "$BUILD" \
  -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" \
  -DTRAINPLAN_FUZZ=ON \
  -DTRAINPLAN_BUILD_TESTS=OFF \
  -DTRAINPLAN_BUILD_BENCH=OFF
echo "== fuzz: build"
# shellcheck disable=SC2086
cmake --build "$BUILD" -j "$JOBS" --target $TARGETS

export ASAN_OPTIONS="halt_on_error=1:abort_on_error=1:detect_leaks=1:print_stacktrace=1"
export UBSAN_OPTIONS="halt_on_error=1:abort_on_error=1:print_stacktrace=1"

failed=0
summary=""
for t in $TARGETS; do
  bin="$BUILD/tests/fuzz/$t"
  seeds="$ROOT/tests/fuzz/corpus/$t"
  work="$BUILD/fuzz-work/$t"
  rm -rf "$work"
  mkdir -p "$work/corpus" "$work/artifacts"
  cp "$seeds"/* "$work/corpus/"
  echo "== fuzz: $t for ${SECONDS_PER_TARGET}s ($(ls "$seeds" | wc -l) seeds)"
  set +e
  "$bin" -max_total_time="$SECONDS_PER_TARGET" -timeout=10 -rss_limit_mb=2048 \
    -dict="$ROOT/tests/fuzz/json.dict" -print_final_stats=1 -artifact_prefix="$work/artifacts/" \
    "$work/corpus" > "$work/log" 2>&1
  rc=$?
  set -e
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$work/log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$work/log" | tail -1 | cut -d' ' -f2)
  line=$(printf '%-24s rc=%-3s runs=%-10s exec/s=%-8s cov=%s' "$t" "$rc" "${runs:-?}" "${rate:-?}" "${cov:-?}")
  summary="$summary$line"$'\n'
  if [ "$rc" != 0 ] || ls "$work/artifacts/" | grep -q .; then
    failed=1
    echo "!! fuzz: $t FAILED (exit $rc). Last lines of its log:"
    tail -40 "$work/log" | sed 's/^/   | /'
    for a in "$work/artifacts"/*; do
      [ -e "$a" ] || continue
      echo "!! input $a ($(wc -c < "$a") bytes), escaped:"
      head -c 2048 "$a" | cat -v | sed 's/^/   > /'
      echo
      echo "!! base64:"
      base64 -w 76 "$a" | head -40 | sed 's/^/   > /'
    done
  fi
done
echo "== fuzz: summary"
printf '%s' "$summary"
if [ "$failed" != 0 ]; then
  echo "== fuzz: FAILED; turn each input above into a test in tests/core/loaders_test.cc"
  exit 1
fi
echo "== fuzz: OK, no crashes"
