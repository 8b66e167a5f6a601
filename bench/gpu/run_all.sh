#!/usr/bin/env bash
# Everything issue 5 needs from a GPU machine, in one call (about 8 minutes on one H100/H200):
#   1. build (or use a carried prebuilt build), 2. the GPU tests (every kernel and the stage
#   model against the CPU executor), 3. several ranks on the one GPU (DP 2, TP 2 with and
#   without SP, PP 2 GPipe/1F1B, ZeRO 1/2/3) against a single rank, 4. throughput of GPT-2 124M
#   and 1.5B (seq 1024) next to PyTorch (torch.compile, SDPA, bf16 autocast, fused AdamW),
#   5. measured peak memory against the simulator's prediction.
# Writes everything (logs, JSON, summary.md with device, driver, CUDA, NCCL, date and command)
# under $OUT when set (the device tool's output folder), else bench/results/gpu-<date>/.
#
# From a session with the device tool, after building here with nvcc (no GPU needed):
#   cmake -S . -B build-cuda -DTRAINPLAN_WITH_MPI=OFF -DTRAINPLAN_BUILD_BENCH=OFF \
#         -DCMAKE_CUDA_ARCHITECTURES=90 && cmake --build build-cuda -j2 --target \
#         execute executor_cuda_kernels_test executor_cuda_gpt_test executor_cuda_comm_test
#   run(command="bash bench/gpu/run_all.sh", carry=["build-cuda"], timeout_s=600)
# Options (environment): PARTS="tests layouts throughput" (the default: all), SKIP_TORCH=1,
# SKIP_1_5B=1, TRAINPLAN_BUILD=<build dir>. If one call runs past the device tool's 10-minute
# limit, split it: PARTS="tests layouts", then PARTS=throughput.
set -u
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
STAMP=$(date -u +%Y-%m-%d)
OUTDIR=${OUT:-$ROOT/bench/results/gpu-$STAMP}
mkdir -p "$OUTDIR"
LOG="$OUTDIR/run_all.log"
exec > >(tee -a "$LOG") 2>&1
T0=$(date +%s)
say() { echo "[$(( $(date +%s) - T0 ))s] $*"; }

# ---- environment ----
PY=python3
NV_LIBS=$($PY - <<'PY' 2>/dev/null
import glob, os
try:
    import nvidia
    roots = list(nvidia.__path__)
except Exception:
    roots = []
dirs = []
for r in roots:
    dirs += glob.glob(os.path.join(r, "*", "lib")) + glob.glob(os.path.join(r, "cu13", "lib"))
print(":".join(dirs))
PY
)
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:/usr/local/cuda/lib:${NV_LIBS}:${LD_LIBRARY_PATH:-}"
{
  echo "# trainplan CUDA executor: GPU run"
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "command: bash bench/gpu/run_all.sh (OUT=$OUTDIR)"
  echo "git: $(git rev-parse HEAD 2>/dev/null || echo unknown) $(git status --porcelain 2>/dev/null | wc -l) changed files"
  echo "host: $(uname -sr)"
  echo "nvidia-smi: $(nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>&1 | head -1)"
  echo "nvcc: $(nvcc --version 2>/dev/null | tail -1)"
  echo "torch: $($PY -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda, "nccl", ".".join(map(str, torch.cuda.nccl.version())))' 2>&1 | tail -1)"
} > "$OUTDIR/env.txt"
cat "$OUTDIR/env.txt"

# ---- 1. build ----
BUILD=${TRAINPLAN_BUILD:-build-cuda}
BENCH="$BUILD/tools/execute"
if [ ! -x "$BENCH" ]; then
  say "no prebuilt $BENCH: building with cmake"
  BUILD=build-gpu
  BENCH="$BUILD/tools/execute"
  NCCL_ROOT=$($PY -c 'import nvidia.nccl, os; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null || true)
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTRAINPLAN_WITH_MPI=OFF \
    -DTRAINPLAN_BUILD_BENCH=OFF -DCMAKE_CUDA_ARCHITECTURES=90 \
    ${NCCL_ROOT:+-DTRAINPLAN_NCCL_ROOT=$NCCL_ROOT} > "$OUTDIR/cmake.log" 2>&1 \
  && cmake --build "$BUILD" -j16 --target execute executor_cuda_kernels_test \
       executor_cuda_gpt_test executor_cuda_comm_test >> "$OUTDIR/cmake.log" 2>&1
  if [ ! -x "$BENCH" ]; then
    tail -20 "$OUTDIR/cmake.log"
    say "BUILD FAILED on this machine (see cmake.log; its dependencies such as Eigen, nlohmann_json,"
    say "GoogleTest and Boost may be missing here). Build on the CPU machine and carry build-cuda."
    exit 2
  fi
fi
ldd "$BENCH" | grep -E "not found|nccl|cublas|cudart" | tee "$OUTDIR/ldd.txt"
if grep -q "not found" "$OUTDIR/ldd.txt"; then say "missing shared libraries (ldd.txt)"; exit 2; fi

declare -a SUMMARY
add() { SUMMARY+=("$*"); }
PARTS=${PARTS:-tests layouts throughput}
want() { [[ " $PARTS " == *" $1 "* ]]; }

# ---- 2. GPU tests ----
want tests && for t in kernels gpt comm; do
  bin="$BUILD/tests/executor/cuda/executor_cuda_${t}_test"
  say "test $t"
  if timeout 240 "$bin" --gtest_output="json:$OUTDIR/test_$t.json" > "$OUTDIR/test_$t.log" 2>&1; then
    add "| test $t | PASS | $(grep -c '^\[       OK .*ms)$' "$OUTDIR/test_$t.log") passed, $(grep -c '^\[  SKIPPED .*ms)$' "$OUTDIR/test_$t.log") skipped |"
  else
    add "| test $t | FAIL | $(grep -E '^\[  FAILED|Failure|error' "$OUTDIR/test_$t.log" | head -3 | tr '\n' ' ') |"
  fi
done

# ---- 3. several ranks on one GPU ----
TINY="$OUTDIR/tiny.json"
cp models/tiny.json "$TINY"
PORT=29600
# launch NAME NRANKS PLAN STEPS WARMUP MODEL [extra args]: torchrun-style ranks sharing GPU 0.
launch() {
  local name=$1 n=$2 plan=$3 steps=$4 warm=$5 model=$6; shift 6
  PORT=$((PORT + 1))
  local pids=() rc=0
  for ((r = 0; r < n; r++)); do
    RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$PORT \
     TRAINPLAN_CUDA_DEVICE=0 TRAINPLAN_NCCL_TIMEOUT_S=${TRAINPLAN_NCCL_TIMEOUT_S:-60} \
    timeout "${RANK_TIMEOUT:-120}" "$BENCH" --backend cuda --model "$model" --plan "$plan" \
      --steps "$steps" --warmup "$warm" --out "$OUTDIR/$name.json" "$@" \
      > "$OUTDIR/$name.rank$r.log" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  return $rc
}
if want layouts; then
say "layouts on one GPU"
if launch single 1 bench/gpu/plans/single.json 4 1 "$TINY" --params-out "$OUTDIR/p_single"; then
  stuck=0
  # The noise floor (compare_layouts.py): one rank, the same batch in four micro-batches.
  FLOOR=()
  if launch single_m4 1 bench/gpu/plans/single_m4.json 4 1 "$TINY" --params-out "$OUTDIR/p_single_m4"; then
    FLOOR=("$OUTDIR/single_m4.json" "$OUTDIR/p_single_m4")
    add "| floor single_m4 | ran | $($PY bench/gpu/compare_layouts.py "$OUTDIR/single.json" "$OUTDIR/p_single" "$OUTDIR/single_m4.json" "$OUTDIR/p_single_m4" single_m4 2>&1 | tail -1) |"
  else
    add "| floor single_m4 | FAIL | $(tail -2 "$OUTDIR/single_m4.rank0.log" | tr '\n' ' ') |"
  fi
  # zero2_m2 (two micro-batches per replica) and pp2_interleaved: what the one Trainer gave the
  # CUDA backend (issue 22): per-micro-batch ZeRO-2 reduce-scatters, the interleaved schedule.
  for spec in dp2:2 tp2:2 tp2_sp:2 pp2_1f1b:2 pp2_gpipe:2 zero1:2 zero2:2 zero3:2 zero2_m2:2 \
              pp2_interleaved:2; do
    name=${spec%%:*}; n=${spec##*:}
    if [ "$stuck" -ge 2 ]; then
      add "| layout $name | SKIPPED | two layouts in a row did not start: see dp2.rank*.log |"
      continue
    fi
    say "layout $name ($n ranks)"
    if launch "$name" "$n" "bench/gpu/plans/$name.json" 4 1 "$TINY" --params-out "$OUTDIR/p_$name"; then
      stuck=0
      # The exit status decides, not the first word: a traceback or a SystemExit is a failure.
      if line=$($PY bench/gpu/compare_layouts.py "$OUTDIR/single.json" "$OUTDIR/p_single" \
                "$OUTDIR/$name.json" "$OUTDIR/p_$name" "$name" "${FLOOR[@]}" 2>&1); then st=PASS; else st=FAIL; fi
      add "| layout $name | $st | $(echo "$line" | tail -3 | tr '\n' ' ') |"
    else
      grep -q "^step 1/" "$OUTDIR/$name.rank0.log" || stuck=$((stuck + 1))
      add "| layout $name | FAIL | $(tail -2 "$OUTDIR/$name.rank0.log" | tr '\n' ' ') |"
    fi
  done
else
  add "| layout single | FAIL | $(tail -3 "$OUTDIR/single.rank0.log" | tr '\n' ' ') |"
fi
fi

# ---- 4 and 5. throughput next to PyTorch, memory against the simulator ----
bench_model() {  # NAME MODEL_JSON PLAN STEPS WARMUP
  local name=$1 src=$2 plan=$3 steps=$4 warm=$5
  local model="$OUTDIR/$name.model.json"
  $PY -c "import json,sys; m=json.load(open('$src')); m['dropout']=False; json.dump(m, open('$model','w'))"
  say "throughput $name (trainplan)"
  if RANK_TIMEOUT=300 launch "$name" 1 "$plan" "$steps" "$warm" "$model" --trace "$OUTDIR/$name.trace.json" --report "$OUTDIR/$name.measured.json"; then
    local r
    r=$($PY - "$OUTDIR/$name.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
peak, pred = j["peak_allocated_bytes_per_rank"][0], j["predicted_device_bytes_per_rank"][0]
err = (peak - pred) / pred
print(f"{j['tokens_per_s']:.0f} {j['mfu']:.3f} {peak / 2**30:.2f} {pred / 2**30:.2f} {100 * err:+.1f} "
      f"{j['model_flops_per_step']:.6g}")
PY
)
    read -r tps mfu peak pred err flops <<< "$r"
    add "| $name trainplan | ${tps} tok/s | MFU ${mfu}; peak ${peak} GiB vs simulator ${pred} GiB (${err}%, target within 5%) |"
    if [ "${SKIP_TORCH:-0}" != 1 ]; then
      say "throughput $name (pytorch)"
      local mbs gbs
      mbs=$($PY -c "import json; print(json.load(open('$plan'))['micro_batch_size'])")
      gbs=$($PY -c "import json; print(json.load(open('$plan'))['global_batch_size'])")
      if timeout 400 $PY bench/gpu/torch_gpt.py --model "$model" --micro-batch "$mbs" \
           --global-batch "$gbs" --steps "$steps" --warmup "$warm" --model-flops "$flops" \
           --out "$OUTDIR/$name.torch.json" > "$OUTDIR/$name.torch.log" 2>&1; then
        local t
        t=$($PY -c "import json; j=json.load(open('$OUTDIR/$name.torch.json')); print(f\"{j['tokens_per_s']:.0f} tok/s | MFU {j['mfu']:.3f}; peak {j['peak_allocated_bytes']/2**30:.2f} GiB ({j['implementation']})\")")
        add "| $name pytorch | $t |"
      else
        add "| $name pytorch | FAIL | $(tail -2 "$OUTDIR/$name.torch.log" | tr '\n' ' ') |"
      fi
    fi
  else
    add "| $name trainplan | FAIL | $(tail -2 "$OUTDIR/$name.rank0.log" | tr '\n' ' ') |"
  fi
}
if want throughput; then
[ "${SKIP_124M:-0}" = 1 ] || bench_model gpt2_124m models/gpt2-124m.json bench/gpu/plans/gpt2_124m_1gpu.json 12 4
[ "${SKIP_1_5B:-0}" = 1 ] || bench_model gpt2_1.5b models/gpt2-1.5b.json bench/gpu/plans/gpt2_1.5b_1gpu.json 8 3
fi

# ---- summary ----
{
  cat "$OUTDIR/env.txt"
  echo
  echo "| check | result | details |"
  echo "| --- | --- | --- |"
  printf '%s\n' "${SUMMARY[@]}"
  echo
  echo "total wall time: $(( $(date +%s) - T0 )) s"
} > "$OUTDIR/summary.md"
echo
cat "$OUTDIR/summary.md"
grep -q "| FAIL" "$OUTDIR/summary.md" && exit 1
exit 0
