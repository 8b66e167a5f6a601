// Compute measurements on the machine at hand, one thread per rank: GEMM throughput (Eigen,
// float32) over the shapes the cost model issues, a streaming memory kernel, the memory-bound
// kernels of a transformer layer (norm, GELU, softmax, residual add, optimizer update) and a
// causal attention core. No file I/O; `calibrate` (tools/calibrate.cc) runs these and fits.
// Tested by tests/calibration/kernels_test.cc.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/cost_model.h"
#include "models/model_spec.h"

namespace trainplan::calibration {

// How long each measurement runs: calls are repeated until min_time_s has passed (at least
// min_calls), and the median call time is kept (the steady state a training step sees).
struct TimingOptions {
  double min_time_s = 0.05;
  int min_calls = 3;
};

// One GEMM shape as the cost model names it: batch x (m x k) * (k x n).
struct GemmShape {
  std::string name;  // task name ("fc1", "qkv_dgrad", ...) or "sweep"
  std::int64_t m = 0, n = 0, k = 0, batch = 1;
};

struct GemmSample {
  GemmShape shape;
  double flops = 0;   // 2*batch*m*n*k
  double bytes = 0;   // float32 operands and result (the cost model's traffic)
  double time_s = 0;  // median time of one call
  double flops_per_s() const { return time_s > 0 ? flops / time_s : 0; }
};

// A memory-bound kernel of the cost model, run at the size of one of its tasks.
struct MemorySample {
  std::string kernel;     // "layernorm", "gelu", "softmax", "add", "adamw", "copy"
  std::string task;       // the cost-model task it stands for ("norm1", ...) or "sweep"
  double bytes = 0;       // bytes the cost model charges for it (task.bytes)
  double time_s = 0;
  double bytes_per_s() const { return time_s > 0 ? bytes / time_s : 0; }
};

// Causal multi-head attention core (scores, mask + softmax, times V), as an unfused CPU
// kernel computes it; executed FLOPs as the cost model counts them for a causal kernel.
struct AttentionSample {
  std::int64_t seq = 0, head_dim = 0, heads = 0;  // per micro-batch x heads = batch
  std::int64_t batch = 0;                         // micro_batch_size * heads
  double executed_flops = 0;
  double time_s = 0;
};

// STREAM-style kernels (McCalpin): copy a=b, scale a=s*b, add a=b+c, triad a=b+s*c, over
// arrays of `array_bytes` each. Bytes counted as STREAM does (no write-allocate traffic).
struct StreamSample {
  std::string kernel;
  double array_bytes = 0;
  double bytes_moved = 0;
  double time_s = 0;
  double bytes_per_s() const { return time_s > 0 ? bytes_moved / time_s : 0; }
};

// The GEMM and attention shapes, and memory tasks, of one rank for the given models, micro-
// batch sizes and tensor-parallel degrees (float32, fused attention replaced by the core).
std::vector<GemmShape> cost_model_gemm_shapes(const std::vector<ModelSpec>& models,
                                              const std::vector<std::int64_t>& micro_batches,
                                              const std::vector<std::int64_t>& tps);
// A memory task and the row width its kernel works on (hidden size for norms, vocabulary for
// cross-entropy, sequence length for softmax).
struct MemoryTask {
  Task task;
  std::int64_t row = 1;
};
// Includes one "optimizer" task per model and tp: the AdamW update of a rank's parameters.
std::vector<MemoryTask> cost_model_memory_tasks(const std::vector<ModelSpec>& models,
                                                const std::vector<std::int64_t>& micro_batches,
                                                const std::vector<std::int64_t>& tps);
// A sweep of m, n, k (each of `sizes`), batch 1.
std::vector<GemmShape> gemm_sweep_shapes(const std::vector<std::int64_t>& sizes);

GemmSample time_gemm(const GemmShape& shape, const TimingOptions& options);
// Picks the kernel that stands for a memory task by its name and sizes it to task.bytes.
MemorySample time_memory_task(const MemoryTask& task, const TimingOptions& options);
AttentionSample time_attention(std::int64_t seq, std::int64_t head_dim, std::int64_t batch,
                               const TimingOptions& options);
std::vector<StreamSample> time_stream(double array_bytes, const TimingOptions& options);

}  // namespace trainplan::calibration
