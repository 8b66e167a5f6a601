# Shared by the wall-time studies (bench/scripts/parallel_speed.sh, all_ranks_speed.sh); sourced,
# not run. Needs $out (the output folder) and $summary (its summary.md) set by the caller.
#   timing_header TITLE COMMAND...   starts summary.md: the title, the machine, the command, the
#                                    load average, and the table's head
#   timed CASE TOOLS THREADS OUTFILE -- command...
#                                    runs the command under /usr/bin/time (stdout to OUTFILE,
#                                    stderr to OUTFILE.err) and adds a row: wall, user and
#                                    system seconds, peak RSS in MB, exit status
timing_header() {
  local title="$1"; shift
  {
    echo "# $title"
    echo
    echo "Machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)."
    echo "Command: $*"
    echo "Load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)."
    echo
    echo "| case | tools | threads | wall s | user s | sys s | peak RSS MB | exit |"
    echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
  } >"$summary"
}

timed() {
  local name="$1" tools="$2" threads="$3" file="$4"; shift 5
  /usr/bin/time -f "%e %U %S %M" -o "$out/time.txt" "$@" >"$file" 2>"$file.err"
  local rc=$?
  local wall user sys rss
  read -r wall user sys rss < <(tail -1 "$out/time.txt")
  echo "| $name | $tools | $threads | $wall | $user | $sys | $((rss / 1024)) | $rc |" >>"$summary"
}
