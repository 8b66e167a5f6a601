#!/usr/bin/env bash
# One device-tool call that runs every GPU check of issue 27 inside a time cap, each part under
# its own timeout, and packs everything into $OUT/gpu.tar.gz (the tool brings back at most 8
# files). Parts, in order: the GPU tests, the layouts on one GPU, GPT-2 124M next to PyTorch,
# predicted vs measured (calibrate --backend cuda, then the one-GPU matrix), GPT-2 1.5B.
#
# Here (no GPU needed), build and stage the binaries the parts use into gpu-carry/ (ignored):
#   bash bench/gpu/lease.sh --stage build-cuda
# Then: run(command="bash bench/gpu/lease.sh", carry=["gpu-carry"], timeout_s=...)
# env: CAP_S (default 420: the whole call's budget), PARTS (default "tests layouts t124m pvm
#      t1558m"), and run_all.sh's and predicted_vs_measured.sh's own variables.
set -u
cd "$(dirname "$0")/../.."
if [ "${1:-}" = --stage ]; then
  B=${2:-build-cuda}
  rm -rf gpu-carry && mkdir -p gpu-carry/tools gpu-carry/tests/executor/cuda gpu-carry/lib
  for t in execute calibrate simulate compare; do cp "$B/tools/$t" gpu-carry/tools/; done
  for t in kernels gpt comm; do
    cp "$B/tests/executor/cuda/executor_cuda_${t}_test" gpu-carry/tests/executor/cuda/
  done
  strip gpu-carry/tools/* gpu-carry/tests/executor/cuda/*
  # Libraries of this machine's image that the device image may lack (not the CUDA ones).
  for l in $(ldd gpu-carry/tools/* gpu-carry/tests/executor/cuda/* | awk '/=> \//{print $3}' |
             grep -vE "cuda|nccl|cublas|libc\.so|libm\.so|ld-linux|libpthread|libdl|librt" | sort -u); do
    cp -L "$l" gpu-carry/lib/
  done
  du -sh gpu-carry; ls gpu-carry/lib
  exit 0
fi
T0=$(date +%s)
CAP_S=${CAP_S:-420}
R=/tmp/lease
rm -rf "$R" && mkdir -p "$R"
OUT=${OUT:-$R/out}
mkdir -p "$OUT"
left() { echo $(( CAP_S - ($(date +%s) - T0) )); }
# The tool brings back at most 8 files of 16 MiB each (64 MiB in all): the first lease's one
# archive was 23 MB (the layouts' weight dumps) and came back empty. So: drop any single file
# over 24 MB (named in dropped.txt), pack, and split the archive into 15 MiB parts
# (cat gpu.tar.gz.part-* | tar xz), with the summaries beside them.
pack() {
  find "$R" -path "$OUT" -prune -o -type f -size +24M -print > "$OUT/dropped.txt" 2>/dev/null
  xargs -r rm -f < "$OUT/dropped.txt"
  tar -C "$R" -czf "$R/gpu.tar.gz" --exclude=out --exclude=gpu.tar.gz . 2>/dev/null
  split -b 15m -d -a 1 "$R/gpu.tar.gz" "$OUT/gpu.tar.gz.part-" && rm -f "$R/gpu.tar.gz"
  cat "$R"/*/summary.md "$R"/pvm/report.md > "$OUT/summary.md" 2>/dev/null
  ls -la "$OUT"
}
trap pack EXIT
export TRAINPLAN_BUILD=$PWD/gpu-carry
# The carried libraries go last: the device image's own come first where it has them.
NV_LIBS=$(python3 -c 'import glob, nvidia; print(":".join(d for r in nvidia.__path__ for d in glob.glob(r + "/*/lib")))' 2>/dev/null)
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:/usr/local/cuda/lib:${NV_LIBS}:${LD_LIBRARY_PATH:-}:$PWD/gpu-carry/lib"
export TRAINPLAN_NCCL_TIMEOUT_S=${TRAINPLAN_NCCL_TIMEOUT_S:-30}
PARTS=${PARTS:-tests layouts t124m pvm t1558m}
want() { [[ " $PARTS " == *" $1 "* ]]; }
part() {  # NAME TIMEOUT_S CMD...: runs CMD with at most min(TIMEOUT_S, what is left - 15) s
  local name=$1 t=$2; shift 2
  local l=$(( $(left) - 15 ))
  [ "$t" -gt "$l" ] && t=$l
  if [ "$t" -lt 20 ]; then echo "== $name: skipped, $(left) s left of the cap"; return; fi
  echo "== $name (at most $t s; $(( $(date +%s) - T0 )) s into the call)"
  timeout --kill-after=5 "$t" "$@"
  echo "== $name: rc $? after $(( $(date +%s) - T0 )) s"
}
{
  date -u; nvidia-smi 2>&1 | head -15
  ldd gpu-carry/tools/execute | grep -E "not found|nccl|cublas|cudart|gomp|stdc"
  python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda, torch.cuda.nccl.version())' 2>&1
} | tee "$R/env.txt"
want tests && part tests 90 env OUT=$R/tests PARTS=tests bash bench/gpu/run_all.sh
# The failed tests' names, one a line ("Suite.Name/param"), from the kernels' and stage's logs.
failed() { sed -n 's/^\[  FAILED  \] \([^ ,]*\).*/\1/p' "$R"/tests/test_kernels.log "$R"/tests/test_gpt.log 2>/dev/null | sort -u; }
# q, k, v as one batched product (TRAINPLAN_CUDA_QKV): if its checks fail on this device, the
# rest of the lease runs three products, and says so.
if want tests && [ -z "${TRAINPLAN_CUDA_QKV:-}" ] && failed | grep -qE 'SharedInputBatched|_batched$'; then
  echo "the batched q, k, v product failed its check: TRAINPLAN_CUDA_QKV=separate from here" |
    tee -a "$R/env.txt"
  export TRAINPLAN_CUDA_QKV=separate
fi
# The stage model runs the FlashAttention-2 kernels by default (kernels.h); if their check or
# the stage's fails on this device, the rest of the lease measures the cuBLASLt path instead and
# says so, rather than timing wrong numbers. (With the batched product failing, the trainer's
# tests fail with it, so then only flash's and the separate stage's failures count.)
stage_failures='flash|StageModel|Trainer'
[ "${TRAINPLAN_CUDA_QKV:-}" = separate ] && stage_failures='flash|_separate$'
if want tests && [ -z "${TRAINPLAN_CUDA_ATTENTION:-}" ] &&
   failed | grep -vE 'SharedInputBatched|_batched$' | grep -qiE "$stage_failures"; then
  echo "flash attention or the stage failed its check: TRAINPLAN_CUDA_ATTENTION=gemm from here" |
    tee -a "$R/env.txt"
  export TRAINPLAN_CUDA_ATTENTION=gemm
fi
echo "attention: ${TRAINPLAN_CUDA_ATTENTION:-auto}; qkv: ${TRAINPLAN_CUDA_QKV:-batched}" | tee -a "$R/env.txt"
want layouts && part layouts 150 env OUT=$R/layouts PARTS=layouts RANK_TIMEOUT=45 bash bench/gpu/run_all.sh
want t124m && part t124m 150 env OUT=$R/t124m PARTS=throughput SKIP_1_5B=1 bash bench/gpu/run_all.sh
want pvm && part pvm 150 env OUT=$R/pvm QUICK=1 ROUNDS=${ROUNDS:-1} STEPS=${STEPS:-8} WARMUP=${WARMUP:-3} bash bench/gpu/predicted_vs_measured.sh
# The matrix as one record for validation/gpu/ (bench/gpu/repredict.sh predicts it again later).
[ -d "$R/pvm/round-1/runs" ] && python3 bench/gpu/matrix_record.py "$R/pvm" "$OUT/matrix-record.json" \
  --note "$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1); git $(git rev-parse --short HEAD 2>/dev/null); $(date -u +%Y-%m-%d)"
want t1558m && part t1558m 240 env OUT=$R/t1558m PARTS=throughput SKIP_124M=1 bash bench/gpu/run_all.sh
for f in "$R"/*/summary.md "$R"/pvm/report.md; do [ -f "$f" ] && { echo "---- $f"; tail -n +9 "$f"; }; done
echo "lease: $(( $(date +%s) - T0 )) s"
