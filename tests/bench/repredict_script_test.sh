#!/usr/bin/env bash
# bench/gpu/repredict.sh on the committed H200 matrix (bench/results/gpu-2026-12-04/matrix):
# the four GPT-2 124M plans predicted within 10% of their measured steps with the profile's
# split_k on (a ratchet on the GPU figure, notes.md), the prediction of the lease reproduced with
# it off, and the script's input errors.
#   repredict_script_test.sh SOURCE_DIR BUILD_DIR
set -uo pipefail
src=${1:?source dir}
build=${2:?build dir}
dir=$src/bench/results/gpu-2026-12-04
script=$src/bench/gpu/repredict.sh
fail() { echo "FAIL: $*"; exit 1; }

out=$(SPLIT_K=1 bash "$script" "$dir/matrix" "$build" "$dir/profile-h200.json") || fail "split_k run: $out"
echo "$out"
for plan in gpt2_mbs1 gpt2_mbs4 gpt2_mbs8 gpt2_full_rc; do
  err=$(echo "$out" | awk -v p="$plan" '$1 == p {gsub(/[%+]/, "", $4); print $4}')
  [ -n "$err" ] || fail "$plan: no row"
  awk -v e="$err" 'BEGIN {exit !(e >= -10 && e <= 10)}' || fail "$plan: error $err% outside 10%"
done
# Without split_k the lease's own prediction comes back (gpt2_mbs8: 42.85 ms, +17.1%).
out=$(bash "$script" "$dir/matrix" "$build" "$dir/profile-h200.json") || fail "plain run: $out"
echo "$out" | grep -qE '^gpt2_mbs8 +42\.85 +36\.58 +\+17\.1%$' || fail "the lease's prediction changed: $out"

# Input errors: a missing folder, a folder without plans, no argument.
msg=$(bash "$script" /nonexistent "$build" 2>&1); rc=$?
[ $rc -eq 2 ] && [[ $msg == *"/nonexistent/cluster.json does not exist"* ]] || fail "missing folder: rc $rc: $msg"
empty=$(mktemp -d); trap 'rm -rf "$empty"' EXIT
cp "$dir/matrix/cluster.json" "$dir/profile-h200.json" "$empty/"
mv "$empty/profile-h200.json" "$empty/profile.json"
msg=$(bash "$script" "$empty" "$build" 2>&1); rc=$?
[ $rc -eq 2 ] && [[ $msg == *"no round-1/runs/*.plan.json"* ]] || fail "no plans: rc $rc: $msg"
msg=$(bash "$script" 2>&1); rc=$?
[ $rc -ne 0 ] && [[ $msg == *usage* ]] || fail "no argument: rc $rc: $msg"
echo PASS
