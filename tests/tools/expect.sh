# Shared by the tools' end-to-end test scripts (tests/tools/*_test.sh): a temporary folder
# removed at exit, pass/fail counters, and `expect CODE SUBSTRING -- command...`, which runs the
# command and counts a failure unless it exits CODE with SUBSTRING in its output;
# `expect_each CODE SUBSTRING... -- command...` runs the command once and counts each substring
# (the planner's large cases take seconds each, minutes under the sanitizers: run them once).
# Source it after setting `tools` and `src`; end the script with `finish`.
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
failures=0; passed=0

expect() {
  local code="$1" needle="$2"; shift 3
  local out rc
  out="$("$@" 2>&1)"; rc=$?
  if [ "$rc" != "$code" ] || ! grep -qF -- "$needle" <<<"$out"; then
    echo "FAIL: $* -> exit $rc (want $code), output lacks '$needle':"; echo "$out" | head -8
    failures=$((failures + 1))
  else
    passed=$((passed + 1))
  fi
}

expect_each() {
  local code="$1"; shift
  local needles=()
  while [ "$#" -gt 0 ] && [ "$1" != "--" ]; do needles+=("$1"); shift; done
  shift
  local out rc needle
  out="$("$@" 2>&1)"; rc=$?
  for needle in "${needles[@]}"; do
    if [ "$rc" != "$code" ] || ! grep -qF -- "$needle" <<<"$out"; then
      echo "FAIL: $* -> exit $rc (want $code), output lacks '$needle':"; echo "$out" | head -8
      failures=$((failures + 1))
    else
      passed=$((passed + 1))
    fi
  done
}
