#!/usr/bin/env bash
# Installs the Debian packages trainplan builds with, if any is missing. Idempotent.
# Uses sudo when not root. CUDA/cuBLAS/NCCL are taken from /usr/local/cuda when present.
set -euo pipefail
packages=(cmake g++ make libeigen3-dev nlohmann-json3-dev libboost-graph-dev libtbb-dev libopenmpi-dev
          openmpi-bin libgtest-dev libbenchmark-dev python3 python3-dev pybind11-dev
          libcli11-dev chromium)
# clang for the fuzz pass (.ci/fuzz.sh); libomp-dev because the CPU executor needs OpenMP
# (execute --threads) and clang's OpenMP runtime is a separate package (GCC's libgomp is not).
if [ "${TRAINPLAN_SANITIZE_DEPS:-0}" = 1 ]; then packages+=(clang libclang-rt-14-dev libomp-dev); fi
# The PyTorch reference check of the executor (tests/executor/reference_check_test.sh, dense and
# MoE; skipped without it, failed instead under TRAINPLAN_REQUIRE_TEST_DEPS) and
# bench/scripts/executor_cpu_speed.sh: PyTorch on OpenBLAS. Measured 2026-11-25 on Debian 12:
# 172 packages beyond the rest of this list, 151 MiB to download, 674 MiB installed, about 20 s
# to unpack on 2 loaded cores; the check itself takes 20-25 s. scripts/test.sh, and so CI,
# asks for it.
if [ "${TRAINPLAN_REFERENCE_DEPS:-0}" = 1 ]; then packages+=(python3-torch libopenblas0-pthread); fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then exit 0; fi
echo "setup: installing ${missing[*]}"
sudo=""
if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
