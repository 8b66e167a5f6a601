// Time of one task on one device: a roofline of FLOPs against bytes, with an efficiency that
// depends on the GEMM's shape, plus a fixed per-kernel overhead.
//
//   t = max(executed_flops / (peak * gemm_efficiency * shape_efficiency),
//           bytes / (hbm_bandwidth * memory_efficiency)) + kernel_overhead
//
// shape_efficiency models why small GEMMs run far below peak:
//  - wave quantization: output tiles of tile_m x tile_n are spread over sm_count units; a last,
//    partial wave leaves units idle (NVIDIA, "Matrix Multiplication Background User's Guide");
//  - tile padding: m and n are rounded up to whole tiles;
//  - a short reduction dimension k cannot hide the tile's load/store: k / (k + k_half).
// The defaults come from the GPU preset; `calibrate` fits them on the machine at hand and the
// fitted profile replaces them (--hardware FILE).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/cluster_spec.h"
#include "core/cost/cost_model.h"
#include "core/json_util.h"

namespace trainplan {

// One task's measured time, keyed by the task's identity and shape: what `calibrate` timed of
// the executor's own code at that task (calibration/executor_probe.h), per occurrence. Where a
// plan has a task of the same name, kind and shape (m, n, k, batch, FLOPs, bytes, memory kernel,
// direction, FP8, mask, launches), its time is this measurement rather than the fit's roofline
// (work_shape): the fit's functional form leaves residuals of -30% to +20% on its own probe on
// some hosts (bench/results/cpu-2026-12-06/NOTES.md), which a plan made of the probed tasks
// then carries. Shapes no probe ran keep the fit.
struct MeasuredTaskTime {
  std::string name;
  TaskKind kind = TaskKind::kGemm;
  std::int64_t m = 0, n = 0, k = 0, batch = 1;
  double executed_flops = 0, bytes = 0;
  MemoryKernel memory_kernel = MemoryKernel::kElementwise;
  bool backward = false, fp8 = false, fp4 = false, causal = true;
  std::int64_t launches = 1;
  double time_s = 0;         // one occurrence
  std::int64_t samples = 1;  // probe measurements the time is the median of
};
// The measurement of `task` taking time_s per occurrence (one sample).
MeasuredTaskTime measured_task(const Task& task, double time_s);
// Whether the measurement is of this task (the key above; FLOPs and bytes equal to 1e-9
// relative, as a JSON round trip leaves them).
bool same_task(const MeasuredTaskTime& measured, const Task& task);

struct DeviceRates {
  double peak_flops_per_s = 0;
  double fp8_peak_flops_per_s = 0;  // FP8 GEMMs (Task::fp8); 0: the device has no FP8 rate
  double fp4_peak_flops_per_s = 0;  // NVFP4 GEMMs (Task::fp4); 0: the device has no FP4 rate
  double hbm_bytes_per_s = 0;
  double gemm_efficiency = 0.8;    // large-GEMM fraction of peak (the forward product's)
  // The backward products' own fractions of peak (GemmDirection); 0 means gemm_efficiency.
  // On a CPU the transposed operands of dX = dY W^T and dW += X^T dY run at other rates than
  // the forward's Y = X W (Eigen packs a transposed operand differently); `calibrate` measures
  // the three. The GPU presets leave them at 0.
  double gemm_input_gradient_efficiency = 0;
  double gemm_weight_gradient_efficiency = 0;
  double memory_efficiency = 0.8;  // streaming-kernel fraction of bandwidth
  // Per kind of memory-bound kernel (MemoryKernel), its own fraction of bandwidth; 0 means
  // memory_efficiency. `calibrate` measures them; the GPU presets leave them at 0.
  std::array<double, kMemoryKernelCount> memory_kernel_efficiency{};
  // Kinds without a measured fraction above take their published rate by direction and
  // implementation (memory_kernel_rates.h) rather than memory_efficiency: a GPU with
  // MemoryRates::kPublished (device_rates sets it).
  bool published_memory_rates = false;
  double attention_efficiency = 0.6;  // fused attention kernel, fraction of gemm rate
  // The fused attention backward's own fraction (Task::backward); 0 means
  // attention_efficiency. A CPU's fused kernel runs its forward and backward at different
  // fractions of the GEMM rate; `calibrate --attention fused` measures both.
  double attention_backward_efficiency = 0;
  // A named attention kernel (Plan::attention_kernel) on a GPU architecture with published
  // rates for it: fused attention is timed at those (attention_rates.h), scaled by this part's
  // peak against the measured part's. kGeneric: attention_efficiency applies, floored on an
  // architecture with published rates by the slowest published kernel (FlashAttention-2) at the
  // task's length (compute_model.cc attention_flops_per_s).
  AttentionKernel attention_kernel = AttentionKernel::kGeneric;
  // The GPU's architecture (GpuSpec::architecture; device_rates sets it): which published
  // attention rates apply. Empty for a measured profile, which times attention at its own rate.
  std::string architecture;
  std::int64_t sm_count = 1;       // parallel units for wave quantization
  double tile_m = 128, tile_n = 128;
  double k_half = 64;              // k at which a GEMM reaches half its k-limited efficiency
  double kernel_overhead_s = 4e-6; // launch and tail per kernel
  // Seconds per exp/tanh evaluation (Task::transcendentals) of a memory-bound kernel, added to
  // its memory time: a CPU core evaluates them in software on the thread that also moves the
  // bytes, so the two do not overlap. 0 on GPUs (the presets): special-function units keep
  // them under the memory traffic.
  double transcendental_s = 0;
  // Whether a GEMM that leaves units idle may split its K across them (gemm_shape_efficiency):
  // GPU BLAS libraries do (the GPU presets and `calibrate --backend cuda` set it); Eigen's CPU
  // GEMM partitions M and N only (`calibrate --backend cpu` leaves it off).
  bool split_k = false;
  // Measured task times (MeasuredTaskTime); null for the GPU presets and profiles without them.
  // Shared: rates are copied per plan and per stage.
  std::shared_ptr<const std::vector<MeasuredTaskTime>> measured_tasks;
};
// The measured time of this task in the rates' table, or null.
const MeasuredTaskTime* measured_task_time(const Task& task, const DeviceRates& r);

DeviceRates device_rates(const GpuSpec& gpu, Precision precision);

// Which of a linear layer's three products a GEMM task is: the forward Y = X W, the input
// gradient dX = dY W^T (tasks named "*_dgrad") or the weight gradient dW = X^T dY ("*_wgrad",
// is_weight_gradient_task). Every other GEMM (unfused attention's batched products) counts as
// forward.
enum class GemmDirection { kForward, kInputGradient, kWeightGradient };
GemmDirection gemm_direction(const Task& task);
std::string_view to_string(GemmDirection d);
// The fraction of peak a GEMM of this direction reaches: its own efficiency when the rates
// have one, else gemm_efficiency.
double gemm_efficiency_of(const DeviceRates& r, GemmDirection d);
// The fused attention's fraction of the GEMM rate in this direction (backward: its own when
// set, else attention_efficiency).
double attention_efficiency_of(const DeviceRates& r, bool backward);

// The fraction of bandwidth a memory-bound kernel of kind k reaches (a measured one, else
// memory_efficiency).
double memory_efficiency_of(const DeviceRates& r, MemoryKernel k);
// The fraction a memory-bound task reaches: its kind's measured one; else, with
// published_memory_rates, the published rate of its kind, direction and implementation
// (Task::backward, Task::eager); else memory_efficiency.
double memory_efficiency_of(const DeviceRates& r, const Task& t);

// The shape's share of the GEMM rate: wave quantization x tile padding x k / (k + k_half).
// may_split_k (a GEMM task, not the generic attention's products): on rates with split_k, a
// product whose output tiles leave units idle may divide K into S slices, S in
// 1..min(floor(units / tiles), floor(k / 64)) (a slice is at least one 64-deep K-tile), and runs
// at the best of them (GPU BLAS libraries' split-K and
// Stream-K decompositions: CUTLASS's split-K GEMMs; Osama et al., "Stream-K", PPoPP 2023).
// Each slice pays k_eff on its own shorter K; the partial sums' reduction (S x m x n float32
// written and read once) is not counted. Registered in validation/corpus/NOTES.md (fifteenth
// pass), from our H200 run's weight-gradient GEMMs (bench/results/gpu-2026-12-04/notes.md).
double gemm_shape_efficiency(const DeviceRates& r, std::int64_t m, std::int64_t n, std::int64_t k,
                             std::int64_t batch, bool may_split_k = false);
// Seconds for one compute task (kGemm, kAttention or kMemory), all its Task::repeat copies; 0
// for kComm.
double task_time_s(const Task& task, const DeviceRates& r);
// Seconds of a GEMM that Plan::tp_comm_overlap decomposes beside a TP collective: with
// tp_comm_overlap_impl torch-async, tp chunks of ceil(m/tp) rows (tp_decomposed_chunk), each at
// its own shape efficiency (smaller chunks fill fewer waves); te-userbuffers: the GEMM as one
// (task_time_s).
double tp_decomposed_gemm_s(const Task& gemm, const Plan& plan, const DeviceRates& r);
// One copy's seconds (task_time_s is Task::repeat times it): what the simulator rounds to
// nanoseconds before multiplying, as each step's op is rounded when played step by step.
double task_copy_time_s(const Task& task, const DeviceRates& r);
// The roofline terms of one copy (task_copy_time_s = max(compute_s, memory_s) + overhead_s) and the output
// tiles a GEMM or attention kernel spreads over the SMs (0 for a memory-bound kernel): what
// core/cost/contention.h slows when a collective holds SMs and bandwidth beside it.
struct WorkShape {
  double compute_s = 0, memory_s = 0, overhead_s = 0;
  double tiles = 0;
  bool operator==(const WorkShape&) const;  // defaulted in compute_model.cc (nvcc: C++17)
};
WorkShape work_shape(const Task& task, const DeviceRates& r);

// A measured hardware profile (written by `calibrate`): the device's fitted rates and the
// measured links. Units in every key; see README "Hardware profiles".
struct HardwareProfile {
  std::string device;        // what was measured, e.g. "cpu: AMD EPYC 7B13 (1 thread/rank)"
  std::string date;          // ISO 8601
  DeviceRates rates;
  bool has_links = false;
  double intra_node_bytes_per_s = 0, intra_node_latency_s = 0;
  double inter_node_bytes_per_s = 0, inter_node_latency_s = 0;
  // The MPI library's rendezvous protocol over its eager limit (ClusterSpec, rendezvous_time_s);
  // 0: none fitted.
  std::int64_t eager_limit_bytes = 0;
  double rendezvous_latency_s = 0;
  // Bytes of memory a rank uses before the model (runtime, libraries): added to predictions.
  double baseline_memory_bytes = 0;
  // Rank skew: the relative standard deviation of a rank's compute time between two meetings
  // with other ranks (core/cost/straggler.h; the simulator waits for the expected straggler at
  // each collective). Measured by calibrate on a CPU; 0 where ranks run at one steady speed.
  double rank_compute_spread = 0;
  // Per-rank compute speed, by global rank id over the calibration's world: each rank's traced
  // compute time over the same probe tasks divided by the mean over the ranks (dimensionless;
  // > 1: that rank computes slower, e.g. {1.12, 0.88}). Measured by calibrate on a CPU, whose
  // vCPUs can run 15-30% apart for minutes (bench/results/cpu-2026-12-05c). The simulator
  // multiplies each compute op of rank r by entry r and plays every rank when they differ;
  // a plan of another world size is an error. Empty (absent from the file): every rank 1.0,
  // as every GPU preset and every profile written before the field.
  std::vector<double> rank_compute_time_factor;
};
// Whether the profile's rank_compute_time_factor has entries that differ from 1.0 (then the
// ranks are not symmetric and the simulator plays each of them).
bool has_uneven_rank_speeds(const HardwareProfile& profile);
// Entry `rank` of rank_compute_time_factor; 1.0 without the field.
double rank_compute_time_factor(const HardwareProfile& profile, std::int64_t rank);
Result<HardwareProfile> hardware_profile_from_json(const Json& json, std::string_view source);
Json hardware_profile_to_json(const HardwareProfile& profile);
// Replaces the cluster's link figures with the profile's measured ones (when it has them).
void apply_profile_links(const HardwareProfile& profile, ClusterSpec& cluster);
// The rates a plan runs at: a measured profile's, or the GPU preset's, with the preset's FP8
// peak when the profile has none (the profile's GEMM efficiency then applies to it). An FP8
// plan on a device without an FP8 rate is an error that names the device.
Result<DeviceRates> plan_rates(const Plan& plan, const GpuSpec& gpu,
                               const std::optional<HardwareProfile>& hardware);

}  // namespace trainplan
