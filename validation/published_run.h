// Published, measured training runs as the simulator's check: one entry of the schema of
// ../shared/reference/published_runs_dev.json (id, source, model, hardware, parallel, measured,
// precision, notes) mapped onto our model, plan, cluster and simulator options with nothing
// fitted per run, and the prediction set against every figure the source measured.
//
// Used by `simulate --published FILE` and tests/validation/validation_test.cc; tested by
// tests/validation/published_run_test.cc. No file I/O: callers pass parsed JSON.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/cluster_spec.h"
#include "core/cost/cost_model.h"
#include "core/json_util.h"
#include "core/model_spec.h"
#include "core/plan.h"
#include "core/status.h"
#include "simulator/simulator.h"
#include "validation/accuracy.h"

namespace trainplan {

// What the source measured; absent figures were not published. Each is compared with the
// prediction of the same quantity (see compare_published_run).
struct PublishedMeasurement {
  // Achieved TFLOP/s per GPU as such papers count them: the FLOPs executed, recomputed forward
  // included (Narayanan et al. 2021 eq. 3; Korthikanti et al. 2022's HFU; equal to model FLOPs
  // without recompute). Compared with hardware_tflops_per_gpu.
  std::optional<double> tflops_per_gpu;
  std::optional<double> mfu;               // model FLOPs (no recompute) / peak, a fraction
  std::optional<double> iteration_time_s;  // one optimizer step
  std::optional<double> tokens_per_s;      // the whole job's
  std::optional<double> memory_gb;         // peak device memory per GPU, 1e9 bytes
  // What memory_gb measured: what the framework allocated (torch.cuda.max_memory_allocated,
  // the default), what its allocator reserved (max_memory_reserved: compared with
  // reserved_bytes of the allocated peak under the run's allocator), or device memory in use
  // (nvidia-smi: that reserve plus device_runtime_bytes, the CUDA context and NCCL's buffers).
  enum class MemoryMeasure { kAllocated, kReserved, kDevice };
  MemoryMeasure memory_measure = MemoryMeasure::kAllocated;
};

// Where a run comes from: one source document x framework x GPU generation. Runs of a family
// share what made them fast or slow, so accuracy is reported, and constants are chosen, per
// family (validation/accuracy.h).
struct PublishedFamily {
  std::string source;          // short document id, e.g. "megatron2021-sc21-table1"
  std::string framework;       // "megatron", "nemo", "deepspeed", "torchtitan", ...
  std::string gpu_generation;  // "A100", "H100", ...
  std::string key() const { return source + " / " + framework + " / " + gpu_generation; }
};

struct PublishedRun {
  std::string id;
  std::string source;
  PublishedFamily family;  // "unknown" fields where the entry gives none
  ModelSpec model;
  Plan plan;
  ClusterSpec cluster;
  SimOptions options;
  PublishedMeasurement measured;
  bool zero_stage_given = false;  // parallel.zero_stage was in the entry
  // How the run's CUDA loaded its kernels (the entry's cuda_module_loading; lazy unless given):
  // sizes the CUDA context in a device-memory comparison.
  CudaModuleLoading cuda_module_loading = CudaModuleLoading::kLazy;
  // Which allocator held the run's memory (the entry's allocator; PyTorch's caching allocator
  // unless given): sizes the reserve in a reserved- or device-memory comparison.
  DeviceAllocator allocator = DeviceAllocator::kPyTorchCaching;
  // torchtitan's activation_checkpoint.selective_ac_option as the entry gives it: "op" or a
  // layer frequency N ("2"); empty when not given.
  std::string selective_ac_option;  // What the entry did not say and how it was decided ("attention: unfused (source dated
  // before FlashAttention)"), and fields present but not used: printed with the result, so
  // nothing a user gave is dropped unseen.
  std::vector<std::string> assumptions;
  std::vector<std::string> ignored_fields;
};

// Maps one entry. Errors name the entry and the field: a malformed entry (a missing or
// mistyped field) or one this simulator cannot express (fp8, an unknown GPU); the message says
// which.
Result<PublishedRun> published_run_from_json(const Json& entry, std::string_view where);

// One measured figure against its prediction.
struct PublishedMetric {
  std::string name;  // "tflops_per_gpu", "mfu", "iteration_time_s", "tokens_per_s", "memory_gb"
  double measured = 0;
  double predicted = 0;
  double error() const { return (predicted - measured) / measured; }  // signed fraction
  // The error as throughput: positive when the prediction is faster than the measurement (for
  // iteration time, measured / predicted - 1; for the rates, error()). Not for memory_gb.
  double throughput_error() const {
    return name == "iteration_time_s" ? measured / predicted - 1.0 : error();
  }
};
// The throughput figures first, the most direct first: iteration time (no FLOP convention in
// it), TFLOP/s, MFU, tokens/s; then memory. Empty when nothing was measured.
std::vector<PublishedMetric> compare_published_run(const PublishedRun& run,
                                                   const StepReport& predicted);
// The first throughput figure of compare_published_run, if any: the run's headline, whose
// throughput_error() summaries compare across runs that published different figures.
std::optional<PublishedMetric> headline_metric(const std::vector<PublishedMetric>& metrics);
// The headline's throughput error and the memory error, for accuracy statistics.
RunErrors run_errors(const std::vector<PublishedMetric>& metrics);

}  // namespace trainplan
