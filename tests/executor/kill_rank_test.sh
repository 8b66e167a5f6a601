#!/bin/sh
# Kills one rank of a running `execute` job with SIGKILL and checks that the whole job ends
# within 30 s with a non-zero exit and a message naming the killed rank, leaving no
# (half-written) --out file.
#   kill_rank_test.sh MPIRUN_COMMAND... -- EXECUTE_ARGS...   (run by ctest)
set -u
out=$(mktemp) ; trap 'rm -f "$out"' EXIT
"$@" >"$out" 2>&1 &
job=$!
# Wait until training is under way (step 3 printed), at most 60 s.
i=0
while ! grep -q "step    3/" "$out"; do
  i=$((i + 1)); [ $i -gt 600 ] && { echo "job did not start"; cat "$out"; kill $job; exit 1; }
  sleep 0.1
done
# The process whose OMPI_COMM_WORLD_RANK is 1, among the job's descendants.
victim=""
for p in $(pgrep -P $job) $(for c in $(pgrep -P $job); do pgrep -P $c; done); do
  if tr '\0' '\n' < /proc/$p/environ 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=1"; then
    victim=$p; break
  fi
done
[ -n "$victim" ] || { echo "no rank 1 found"; cat "$out"; kill $job; exit 1; }
start=$(date +%s.%N)
kill -9 "$victim"
i=0
while kill -0 $job 2>/dev/null; do
  i=$((i + 1)); [ $i -gt 300 ] && { echo "job still running 30 s after the kill"; kill -9 $job; cat "$out"; exit 1; }
  sleep 0.1
done
wait $job; rc=$?
end=$(date +%s.%N)
cat "$out"
echo "killed rank 1 (pid $victim); job exited with $rc after $(echo "$end - $start" | bc) s"
[ $rc -ne 0 ] || { echo "expected a non-zero exit"; exit 1; }
grep -Eq "rank 1 .*(exited on signal 9|Killed)|process rank 1 with PID" "$out" || { echo "no message naming rank 1"; exit 1; }
report=$(echo "$@" | sed -n 's/.*--out \([^ ]*\).*/\1/p')
if [ -n "$report" ] && ls "$report"* >/dev/null 2>&1; then echo "a killed run left $report"; exit 1; fi
echo PASSED
