#!/usr/bin/env bash
# `cmake --install` into a fresh prefix, then checks what a user gets: the tools (answering
# --version), the model zoo, the headers, and a CMake package that a separate project
# (tests/install/consumer) finds with find_package(trainplan), builds against and runs.
# Usage: install_test.sh BUILD_DIR SOURCE_DIR   (registered with CTest by tests/CMakeLists.txt)
set -euo pipefail
build="$1"; src="$2"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
prefix="$tmp/prefix"
cmake --install "$build" --prefix "$prefix" >/dev/null
for tool in plan simulate compare; do
  "$prefix/bin/$tool" --version | grep -q "^$tool (trainplan) "
done
test -f "$prefix/share/trainplan/models/gpt3.json"
test -f "$prefix/share/trainplan/examples/cluster.json"
test -f "$prefix/include/trainplan/core/model_spec.h"
test -f "$prefix/include/trainplan/planner/planner.h"
ls "$prefix"/lib*/cmake/trainplan/trainplanConfig.cmake >/dev/null
ls "$prefix"/lib*/cmake/trainplan/trainplanConfigVersion.cmake >/dev/null
# The installed tool runs from the prefix on the installed zoo.
"$prefix/bin/plan" --model "$prefix/share/trainplan/models/tiny.json" --gpus 8 --top 1 >/dev/null
# A consumer project, configured and built on its own against the prefix.
launcher=()
if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
cmake -S "$src/tests/install/consumer" -B "$tmp/consumer" -DCMAKE_PREFIX_PATH="$prefix" \
      -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" >/dev/null
cmake --build "$tmp/consumer" -j2 >/dev/null
out="$("$tmp/consumer/consumer" "$src/models/tiny.json")"
echo "$out"
grep -q "^recommended tp=" <<<"$out"
grep -q "^consumer (trainplan) " <<<"$out"
# A version the package does not promise is refused by find_package.
mkdir "$tmp/wrong"
cat > "$tmp/wrong/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.22)
project(wrong LANGUAGES CXX)
find_package(trainplan 99 REQUIRED)
CMAKE
if cmake -S "$tmp/wrong" -B "$tmp/wrong/build" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null 2>&1; then
  echo "FAIL: find_package(trainplan 99) was satisfied"; exit 1
fi
echo "install_test: passed"
