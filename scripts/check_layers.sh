#!/usr/bin/env bash
# The layer check (docs/architecture.md, "Allowed arrows"): fails, naming file:line, on an
# #include that points up a layer and on a main() outside tools/, bench/ and tests/.
#   scripts/check_layers.sh [ROOT]      (default: the repository this script is in)
# Allowed: core <- simulator <- planner; core <- executor <- executor/cpu, executor/cuda;
# core, executor (and its backends) <- calibration; core, simulator <- validation;
# tools and tests -> anything; bench -> anything but tools. Only quoted includes whose first
# folder is one of the layers are checked ("planner/plan.h"); "./x.h" and "../x/y.h" are read
# relative to the including file. scripts/test.sh runs it before the build;
# scripts/check_layers_test.sh checks that it catches planted violations.
set -euo pipefail
root="$(cd "${1:-$(dirname "$0")/..}" && pwd)"
cd "$root"

# Every C++/CUDA source under the layers, build folders and hidden folders left out.
mapfile -d '' files < <(find core simulator planner executor calibration validation tools bench \
  tests models -type d \( -name 'build*' -o -name '.*' \) -prune -o -type f \
  \( -name '*.h' -o -name '*.hh' -o -name '*.hpp' -o -name '*.cc' -o -name '*.cpp' \
     -o -name '*.cu' -o -name '*.cuh' \) -print0 2>/dev/null | sort -z)
if [ "${#files[@]}" -eq 0 ]; then
  echo "check_layers: no sources under $root" >&2
  exit 2
fi

awk '
  # The layer a repository path belongs to, or "" when it is none of them.
  function layer_of(path,   n, part) {
    n = split(path, part, "/")
    if (part[1] == "executor" && n > 2 && (part[2] == "cpu" || part[2] == "cuda"))
      return "executor/" part[2]
    if (part[1] ~ /^(core|simulator|planner|executor|calibration|validation|tools|bench|tests|models)$/)
      return part[1]
    return ""
  }
  # "a/b/../c/./d.h" -> "a/c/d.h"
  function normalize(path,   n, part, out, i, k, stack) {
    n = split(path, part, "/"); k = 0
    for (i = 1; i <= n; i++) {
      if (part[i] == "." || part[i] == "") continue
      if (part[i] == "..") { if (k > 0) k--; continue }
      stack[++k] = part[i]
    }
    out = ""
    for (i = 1; i <= k; i++) out = out (i > 1 ? "/" : "") stack[i]
    return out
  }
  BEGIN {
    allowed["core"]          = " core "
    allowed["simulator"]     = " core simulator "
    allowed["planner"]       = " core simulator planner "
    allowed["executor"]      = " core executor "
    allowed["executor/cpu"]  = " core executor executor/cpu "
    allowed["executor/cuda"] = " core executor executor/cuda "
    allowed["calibration"]   = " core executor executor/cpu executor/cuda calibration "
    allowed["validation"]    = " core simulator validation "
    allowed["models"]        = " "
    allowed["bench"]         = " core simulator planner executor executor/cpu executor/cuda calibration validation bench tests "
    bad = 0
  }
  FNR == 1 { from = layer_of(FILENAME); dir = FILENAME; sub(/\/[^\/]*$/, "", dir) }
  /^[ \t]*#[ \t]*include[ \t]*"/ {
    target = $0
    sub(/^[^"]*"/, "", target); sub(/".*$/, "", target)
    if (target ~ /^\.\.?\//) target = normalize(dir "/" target)
    to = layer_of(target)
    if (to == "" || from == "tools" || from == "tests") next
    if (index(allowed[from], " " to " ") == 0) {
      printf "%s:%d: %s may not include \"%s\" (layer %s; %s may include:%s)\n", \
        FILENAME, FNR, from, target, to, from, allowed[from]
      bad = 1
    }
  }
  /^[ \t]*(int|auto)[ \t]+main[ \t]*\(/ {
    if (from != "tools" && from != "bench" && from != "tests") {
      printf "%s:%d: main() outside tools/, bench/ and tests/\n", FILENAME, FNR
      bad = 1
    }
  }
  END { exit bad }
' "${files[@]}" || { echo "check_layers: FAILED (docs/architecture.md, \"Allowed arrows\")" >&2; exit 1; }
echo "check_layers: ${#files[@]} files, every include points down and every main() is in tools/, bench/ or tests/"
