// The cluster: a GPU type, how many per node, how many nodes, and the links between them.
// GPU presets cite ../shared/reference/hardware.json. All rates are stored in SI units
// (bytes, bytes/s, FLOP/s, seconds); JSON keys carry their unit and are converted at parse time.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/json_util.h"
#include "core/status.h"

namespace trainplan {

enum class Precision { kBf16, kFp16, kFp32 };
std::string_view to_string(Precision p);
double bytes_per_element(Precision p);  // 2 for bf16/fp16, 4 for fp32

// The MAMF fraction assumed for a part that has none measured (custom GPUs without a "base"):
// 0.8, the middle of the measured 0.776-0.869 of Bekman's table.
inline constexpr double kUnmeasuredMatmulFraction = 0.8;
// The presets' two measured-efficiency constants: the share of a part's achievable matmul rate
// that the step's GEMMs reach, and the memory-bound kernels' fraction of HBM bandwidth. Both are
// the one point over the whole published-run corpus that `simulate --published FILE
// --cross-validate` reports as "one fit over all runs" (validation/accuracy.h;
// bench/results/published-2026-12-02-third, 335 runs: share 0.8, memory 0.6; before it, from
// published-2026-11-25d's 229 runs, 0.9 and 0.45), so that `plan` and `simulate` predict at the
// constants whose held-out errors give their error band (40 of the 57 folds chose this point).
// Since 2026-12-03 the folds weigh each family as one and all choose share 0.85, memory 0.45
// (bench/results/foldcrit-2026-12-03); the presets were not moved to it (docs/validation.md says
// why). The accuracy headline does not use them: there each family is predicted with constants
// chosen without it.
inline constexpr double kPresetGemmShare = 0.8;
// Since the fifty-first pass (validation/corpus/NOTES.md) the presets time memory-bound kernels at
// published per-kind rates (MemoryRates::kPublished, core/cost/memory_kernel_rates.h) and the
// folds no longer choose a memory efficiency; this figure is then the GEMMs' and attention's
// operand streaming only: the published single elementwise kernel's 0.873 (before: 0.6, the
// corpus's fit of one efficiency for every kernel).
inline constexpr double kPresetMemoryEfficiency = 0.873;

// How a GPU's memory-bound kernels are timed. published: each kind, direction and implementation
// at its published fraction of HBM peak (core/cost/memory_kernel_rates.h); every preset, and a
// custom GPU whose JSON gives no memory_efficiency. uniform: every memory-bound kernel at
// GpuSpec::memory_efficiency (a custom GPU that gives one, or says "memory_rates": "uniform").
enum class MemoryRates { kUniform, kPublished };

struct GpuSpec {
  std::string name;                     // preset name, e.g. "H100-80GB"
  double peak_bf16_flops_per_s = 0;     // dense tensor-core peak
  double peak_fp16_flops_per_s = 0;
  double peak_fp32_flops_per_s = 0;     // non-tensor-core FP32 (fp32 training, no TF32)
  double peak_fp8_flops_per_s = 0;      // dense FP8 tensor-core peak; 0: no FP8 tensor cores
  double peak_fp4_flops_per_s = 0;      // dense FP4 (NVFP4) tensor-core peak; 0: no FP4 cores
  double hbm_bytes = 0;                 // device memory capacity
  double hbm_bytes_per_s = 0;           // device memory bandwidth
  double nvlink_bytes_per_s = 0;        // per-GPU unidirectional NVLink line rate
  std::int64_t sm_count = 0;            // streaming multiprocessors (for GEMM wave quantization)
  // The die's architecture ("ampere", "hopper", "blackwell", "blackwell-ultra", "volta"): which
  // published attention kernel rates apply (core/cost/attention_rates.h). Empty for a custom GPU
  // without a "base".
  std::string architecture;
  // Fraction of dense peak that the step's large, well-shaped GEMMs reach on the part: by
  // default kPresetGemmShare of achievable_matmul_fraction (in_step_gemm_efficiency).
  double gemm_efficiency = kPresetGemmShare * kUnmeasuredMatmulFraction;
  // The part's maximum achievable matmul rate (MAMF: the best large GEMM of a search over shapes,
  // torch.matmul on cuBLAS, mean of 100 iterations) as a fraction of its dense peak; 0: not
  // measured. Presets: S. Bekman, "Machine Learning Engineering", compute/accelerator/README.md,
  // "Maximum Achievable Matmul FLOPS comparison table" (bf16: A100 SXM 271.2 of 312 = 0.869,
  // H100 SXM 794.5 of 989 = 0.803, "H200 is the same", B200 SXM 1745 of 2250 = 0.776); V100,
  // which the table lacks: DeepBench's best fp16 cuBLAS GEMM, 112.3 of 125 = 0.898
  // (cluster_spec.cc). A framework's GEMMs reach a share of it: cross-validation chooses that
  // share (in_step_gemm_efficiency), so that parts with a lower MAMF fraction run their GEMMs
  // slower.
  double achievable_matmul_fraction = 0;
  // FP8 GEMMs take the same fraction of the FP8 peak. The table's FP8 rows are lower (H100 SXM
  // 1402.6 of 1979 = 0.709), but scaling FP8 GEMMs by FP8 MAMF / bf16 MAMF made the predicted
  // FP8-over-bf16 gain smaller than the measured one on all 20 published pairs
  // (bench/results/published-2026-11-25d/NOTES.md), so it is not applied.
  // Fraction of HBM bandwidth that memory-bound kernels reach: under MemoryRates::kUniform every
  // memory-bound kernel's (norms, softmax, dropout, bias-GELU, residual adds, the optimizer);
  // under kPublished only a GEMM's and fused attention's operand traffic, the kernels having
  // their published rates. `calibrate` measures the machine's own figures.
  double memory_efficiency = kPresetMemoryEfficiency;
  MemoryRates memory_rates = MemoryRates::kUniform;
  std::string source;                   // where the figures come from
  // The board power (W) the peak figures above are for: the datasheet's maximum for a preset,
  // or the limit at_power_limit set. 0: not known (a custom GPU without a "base").
  double board_power_w = 0;

  double peak_flops_per_s(Precision p) const;
};

// The part run at another board power limit (`nvidia-smi -pl`, or a vendor's lower-power
// configuration of the same die, such as a 750 W B200 or Meta's 500 W H100): its clock-bound
// peaks (tensor cores and FP32) scaled by the die's dense peak at that power over its peak at
// the part's own board power. The peak at a power is interpolated linearly between the board
// powers NVIDIA publishes peaks of the same die for (cluster_spec.cc, kPublishedPeakByPower);
// outside them, and for a die with fewer than two such points, it is an error naming the value.
// HBM bandwidth and the links are not scaled: a power limit lowers the SM clock, not the memory's.
Result<GpuSpec> at_power_limit(const GpuSpec& gpu, double watts);

// GEMM efficiency of a framework whose GEMMs reach `share` of the part's achievable rate.
double in_step_gemm_efficiency(const GpuSpec& gpu, double share);

// How a cluster's collectives are timed (core/cost/collectives.h).
// kAlphaBeta: ring steps x a per-hop latency + bytes / bandwidth, one protocol: what a measured
// link profile (`calibrate`) fits, and what a hand-made ClusterSpec gets by default.
// kNccl: NCCL's own choice among its algorithms and protocols (nccl_collective_time_s), the
// latencies of its tuning model; the GPU presets' model.
enum class CollectiveModel { kAlphaBeta, kNccl };

struct ClusterSpec {
  std::string name;
  GpuSpec gpu;
  std::int64_t num_nodes = 1;
  std::int64_t gpus_per_node = 8;
  // Achievable per-GPU unidirectional bandwidth of a ring over the node's NVLink/NVSwitch
  // (nccl-tests "busbw" of all_reduce without in-switch reduction).
  double intra_node_bytes_per_s = 0;
  double intra_node_latency_s = 0;       // per ring step inside a node
  // Achievable per-GPU bandwidth across nodes (one NIC per GPU; nccl-tests busbw per NIC).
  double inter_node_bytes_per_s = 0;
  double inter_node_latency_s = 0;       // per ring step across nodes
  // With kNccl the two latencies are the ring Simple protocol's per-hop latencies, NCCL's other
  // protocols and its tree scaled from them (collectives.h).
  CollectiveModel collective_model = CollectiveModel::kAlphaBeta;
  // kAlphaBeta only: an MPI library's rendezvous protocol (rendezvous_time_s, collectives.h),
  // what a measured link profile fits where its timings jump at the library's eager limit.
  // 0: none (NCCL's protocols are kNccl's; the presets have none).
  std::int64_t eager_limit_bytes = 0;
  double rendezvous_latency_s = 0;  // per ring step over the eager limit
  // NICs a node's GPUs share for inter-node traffic; 0: one per GPU (a DGX/HGX). With it, each
  // NIC's line rate is inter_node_bytes_per_s x gpus_per_node / nics_per_node /
  // kNicAchievableFraction. It sets how many channels NCCL runs across nodes (contention.h).
  std::int64_t nics_per_node = 0;
  double pcie_bytes_per_s = 0;           // host <-> one GPU, per direction
  double host_memory_bytes_per_node = 0; // for offloaded optimizer states
  double host_memory_bytes_per_s_per_node = 0;  // host DRAM bandwidth (host optimizer step)
  // NVMe drives of a node, for ZeRO-Infinity's NVMe tier (Rajbhandari et al. 2021,
  // arXiv:2104.07857): capacity and the aggregate sustained bandwidth of the node's drives (per
  // direction; the node's GPUs share it). 0: no NVMe tier.
  double nvme_bytes_per_node = 0;
  double nvme_bytes_per_s_per_node = 0;

  std::int64_t total_gpus() const { return num_nodes * gpus_per_node; }
};

struct ClusterLimits {
  static constexpr std::int64_t kMaxGpus = std::int64_t{1} << 24;  // 16.7 million
  static constexpr std::int64_t kMaxGpusPerNode = 1024;
};

// Share of a NIC's line rate that NCCL's ring traffic achieves: 92%, NDR's 46 of 50 GB/s in
// nccl-tests #290. The presets' inter-node figures are this share of one NIC per GPU (HDR
// 25 GB/s line: 23; NDR 50: 46).
inline constexpr double kNicAchievableFraction = 0.92;
// Per-GPU inter-node bandwidth of a node whose `gpus_per_node` GPUs share `nics` NICs of
// `line_Gbps` each (all GPUs sending at once, as a data-parallel ring does).
double shared_nic_bytes_per_s(std::int64_t nics, double line_Gbps, std::int64_t gpus_per_node);

// Preset GPU names: A100-40GB, A100-80GB, H100-80GB, H800-80GB, H100-96GB, H200-141GB,
// B200-192GB, GB200-186GB and GB300-288GB (an NVL72 rack as one 72-GPU node), B300-270GB,
// V100-16GB (DGX-1), V100-32GB (DGX-2).
Result<GpuSpec> gpu_preset(std::string_view name);
std::vector<std::string> gpu_preset_names();
// GPUs per node of the preset's reference node (16 for DGX-2's V100-32GB, else 8).
Result<std::int64_t> preset_gpus_per_node(std::string_view name);

// A cluster of `total_gpus` GPUs of a preset, `gpus_per_node` per node, with the preset's node
// links (DGX/HGX defaults). total_gpus must be a multiple of gpus_per_node, or smaller than it
// (a partial node).
Result<ClusterSpec> make_cluster(std::string_view gpu_name, std::int64_t total_gpus,
                                 std::int64_t gpus_per_node);

// Cluster JSON: {"gpu": "H100-80GB" | {gpu object}, "num_nodes", "gpus_per_node",
//  "intra_node_GBps", "intra_node_latency_us", "inter_node_GBps", "inter_node_latency_us",
//  "pcie_GBps", "host_memory_GB_per_node", "host_memory_GBps_per_node", "nvme_TB_per_node",
//  "nvme_GBps_per_node", "collective_model": "nccl" | "alpha-beta"}; links default to the
// GPU preset's node figures. "host_memory_GiB_per_node" (GiB, earlier versions) is read in
// place of "host_memory_GB_per_node"; both at once is an error.
Result<ClusterSpec> cluster_from_json(const Json& json, std::string_view source);
Json cluster_to_json(const ClusterSpec& cluster);
Json gpu_to_json(const GpuSpec& gpu);

}  // namespace trainplan
