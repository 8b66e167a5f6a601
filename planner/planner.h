// The planner: enumerate every DP x TP x CP x PP x EP x ZeRO x micro-batch x schedule (x virtual
// stages) x recompute x sequence-parallel configuration for a GPU count and global batch
// (planner/search.h), prune the impossible ones with a stated reason (planner/prune.h, counted
// by reason code), rank the rest by estimated step time, and refine the best with the event
// simulator. Tested by tests/planner/planner_test.cc.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/cluster_spec.h"
#include "core/error_band.h"
#include "core/measured_layouts.h"
#include "core/cost/compute_model.h"
#include "core/cost/cost_model.h"
#include "core/model_spec.h"
#include "core/plan.h"
#include "planner/estimate.h"
#include "planner/prune.h"

namespace trainplan {

struct PlannerOptions {
  std::int64_t global_batch_size = 0;   // sequences per step; 0: default_global_batch()
  Precision precision = Precision::kBf16;
  Optimizer optimizer = Optimizer::kAdamW;
  AttentionImpl attention = AttentionImpl::kFused;
  GradPrecision grad_precision = GradPrecision::kCompute;
  bool fp8 = false;                     // every candidate trains its linear GEMMs in FP8 (Plan::fp8)
  Fp8Scaling fp8_scaling = Fp8Scaling::kCurrent;  // with fp8: Plan::fp8_scaling of every candidate
  bool fp8_weight_cache = false;                  // with fp8: Plan::fp8_weight_cache
  // MoE: candidates that can (ep > 1; pp = 1 with 1F1B or pp > 1 interleaved; not full
  // recompute or ZeRO-3) overlap their expert all-to-all across micro-batches (Plan::ep_overlap).
  bool ep_overlap = false;
  // Candidates with sequence parallelism overlap their TP collectives with the GEMMs beside
  // them (Plan::tp_comm_overlap).
  bool tp_comm_overlap = false;
  // Hybrid sharding (Plan::zero_shard_size): ZeRO candidates also shard over the dp*cp ranks
  // of one node, and of 2 and 4 nodes, where that is fewer than all of them, replicating
  // across the groups (FSDP's HYBRID_SHARD; MiCS). false: over all dp*cp ranks only.
  bool hybrid_shard = true;
  // MoE parallel folding (Plan::expert_layout folded): MoE candidates also place their expert
  // groups over each stage's tp*cp*dp ranks, with expert_tp 1 and tp, as Megatron-Core does
  // from core_v0.10.0. false: ep carved out of dp only (`plan --no-fold-experts`).
  bool fold_experts = true;
  // Usable device memory = capacity * (1 - headroom): room for the CUDA context, allocator
  // fragmentation and library workspaces that the model does not count.
  double memory_headroom = 0.10;
  // The allocator whose reserve the report's device-memory estimate adds over the pick's
  // allocated peak (core/cost reserved_bytes; `plan --allocator`). Not in the fit.
  DeviceAllocator allocator = DeviceAllocator::kPyTorchCaching;
  bool allow_cross_node_tp = false;     // TP groups larger than a node (slow; off by default)
  std::int64_t max_micro_batch_size = 64;
  // Context parallelism: cp is searched over powers of two up to max_cp (0: no bound but the
  // GPU count), for sequences of at least min_cp_seq_len tokens. Below that a sequence's
  // activations are small and dp, tp or pp split the work with less communication than CP's
  // per-layer K,V exchanges (Megatron-Core presents CP for long contexts; Llama 3 used it
  // only for its 128K-token stage, arXiv:2407.21783 sec. 3.3.2), and the search stays the size
  // it was without CP.
  std::int64_t max_cp = 0;
  std::int64_t min_cp_seq_len = 8192;
  // How every candidate with cp > 1 moves keys and values (Plan::cp_comm; `plan --cp-comm`).
  // p2p by default: the ring Transformer Engine runs unless told otherwise (its and
  // Megatron-Core's cp_comm_type default, "p2p", Megatron-LM 91a8a4c8dc; the only form TE had
  // before 1.10), whose exchange overlaps each step's attention.
  CpComm cp_comm = CpComm::kP2p;
  std::int64_t max_virtual_stages = 8;
  // Search the zero-bubble schedules zb-h1 and zb-v beside gpipe, 1f1b and interleaved (Qi et
  // al. 2023, 2024); `plan --no-zero-bubble` switches them off.
  bool zero_bubble = true;
  std::int64_t top_k = 10;              // candidates kept for the report
  std::int64_t simulate_top = 8;        // candidates re-ranked by the event simulator (0: none)
  std::optional<HardwareProfile> hardware;
  // Bound on the work: configurations evaluated before the search stops and says so.
  std::int64_t max_evaluations = 50'000'000;
  // Stop at the first feasible configuration (feasibility scans).
  bool stop_at_first_feasible = false;
  // The expected error of a prediction on this cluster (validation/error_band.h; `plan` fills
  // it from the cross-validated published runs). Refined candidates whose step times differ
  // from the fastest by less than its typical error are tied (see TieBreak); unknown: no ties.
  ErrorBand error_band;
  // Overrides the tie tolerance (relative step time; 0: no ties). Negative: the band's typical
  // error.
  double tie_tolerance = -1;
  // The pipeline layouts published runs measured on this GPU generation (`plan` fills it from
  // the corpus, validation/coverage.h). Among tied candidates the planner prefers those whose
  // schedule the corpus measured at their pipeline depth or deeper (TieBreak); empty: no
  // preference. The report says how many measured the pick's pipeline (planner/report.h).
  MeasuredLayouts measured;
  bool prefer_measured = true;  // false: the tie ignores `measured` (`plan --no-prefer-measured`)
  // Called about once a second during long searches (evaluated so far, total estimate).
  std::function<void(std::int64_t, std::int64_t)> progress;
  // Refinement by the simulator: threads that simulate candidates at once (0: every core; the
  // ranking does not depend on it), and a callback after each simulation (done, total).
  unsigned refine_threads = 0;
  std::function<void(std::int64_t, std::int64_t)> refine_progress;
};

// A layout with the options' precision, optimizer, attention, gradient precision, FP8 and, with
// cp > 1, context parallelism's exchange: the base every candidate (planner/search.cc) and every
// reference layout (planner/reference.cc) starts from.
Plan plan_with_options(const PlannerOptions& options, std::int64_t tp, std::int64_t cp,
                       std::int64_t pp, std::int64_t dp, std::int64_t global_batch);

struct Candidate {
  Plan plan;
  Estimate estimate;        // analytical
  bool simulated = false;   // estimate.step_time etc. replaced by the simulator's figures
  CommVolume comm;          // bytes per step sent by one rank of the peak-memory stage
};

// What an offloading search moves off the device, and where to (Plan::offload,
// Plan::offload_device).
struct OffloadTier {
  Offload offload = Offload::kOptimizer;
  OffloadDevice device = OffloadDevice::kCpu;
};

// Candidates the model cannot rank with confidence: predicted step times within the error
// band's typical error of the fastest. Among them the planner prefers, when PlannerOptions::
// measured is given and any tied candidate has it, a pipeline the published runs measured
// (measured_runs() > 0: the band's error is known for it; a schedule or depth no run measured is
// an extrapolation whose error is not), then the most memory headroom (within 5% of the
// device's capacity of the most), then the simplest layout (fewest parallel dimensions in use,
// then no interleaving, the lowest ZeRO stage, no recompute, no offload), then the fastest; the
// pick goes first and the others keep their order.
struct TieBreak {
  double tolerance = 0;        // relative step time; 0: no ties were called
  std::size_t tied = 0;        // candidates in the tie, the pick included (1: no tie)
  std::string fastest;         // describe() of the fastest, when the pick is another
  std::size_t measured = 0;    // tied candidates whose pipeline the corpus measured
  bool by_measured = false;    // the preference for a measured pipeline set the pick aside
                               // from candidates the other rules would have taken
};

struct PlanSearch {
  std::int64_t gpus = 0;
  std::int64_t global_batch_size = 0;
  std::int64_t evaluated = 0;     // configurations enumerated (feasible + rejected)
  std::int64_t feasible = 0;
  bool truncated = false;         // stopped at max_evaluations
  std::vector<Candidate> ranked;  // best first (plan_training: at most top_k)
  // Every feasible candidate's analytical estimate, (step time s, peak memory bytes per GPU), in
  // the order the search found them: the whole search drawn by plan --html.
  std::vector<std::pair<double, double>> feasible_estimates;
  Rejections rejections;         // by reason code (planner/prune.h)
  TieBreak ties;                 // how ranked.front() was chosen among near-equal candidates
  // Of the candidates the refinement dropped because their simulated peak exceeds the usable
  // memory (RejectReason::kMemorySimulated), the one with the lowest peak: what "nothing fits"
  // names when the simulator dropped every candidate that fit by the estimate.
  struct SimulatedDrop {
    std::string plan;           // describe()
    MemoryBreakdown breakdown;  // its peak rank's, as simulated
    double peak_bytes = 0;
  };
  std::optional<SimulatedDrop> least_simulated_drop;
};

struct PlanResult {
  PlanSearch search;                 // without offload
  // When nothing fits in device memory:
  double min_state_bytes_per_gpu = 0;  // model states fully sharded over all GPUs
  std::optional<std::int64_t> min_gpus_without_offload;
  std::optional<PlanSearch> offload_search;  // best plans with optimizer states on the host
  // When nothing fits with optimizer states on the host either: ZeRO-Infinity's tiers,
  // parameters and gradients off the device too, in host memory and on NVMe (in that order).
  std::vector<PlanSearch> infinity_searches;
  bool fits() const { return !search.ranked.empty(); }
};

// Enumerates and ranks; refines the top `simulate_top` with `refine` when given (the planner
// library does not depend on how: `plan` passes simulator_refine, planner/refine.h).
using RefineFn = std::function<Result<Estimate>(const Plan&)>;
Result<PlanResult> plan_training(const ModelSpec& model, const ClusterSpec& cluster,
                                 const PlannerOptions& options, const RefineFn& refine = {});

// Orders the tied head of `search.ranked` (TieBreak) so that ranked.front() is the pick. Only
// simulated candidates take part when `simulated_only` (a refined search: the pick is a figure
// the simulator confirmed). Capacity: the device's memory in bytes.
// With `measured` (PlannerOptions::measured) known, candidates whose pipeline it measured go
// before the rest of the tie, where any does.
void break_ties(PlanSearch& search, double tolerance, double capacity_bytes, bool simulated_only,
                const MeasuredLayouts& measured = {});

// One search at a fixed GPU count (used by plan_training and the benchmark): without offload,
// with optimizer states on the host (offload true), or with the states `tier` names.
PlanSearch search_plans(Estimator& estimator, const PlannerOptions& options, std::int64_t gpus,
                        bool offload);
PlanSearch search_plans(Estimator& estimator, const PlannerOptions& options, std::int64_t gpus,
                        const OffloadTier& tier);

// Default global batch in sequences, from the model's size and the GPU count, as published runs
// chose it (docs/planner.md "Default batch"):
//  - by model size: GPT-3's batch in tokens (Brown et al. 2020, arXiv:2005.14165, Table 2.1:
//    0.5M tokens for 125M-760M parameters, 1M for 1.3B-2.7B, 2M for 6.7B-13B, 3.2M for 175B),
//    interpolated in log(parameters) between its sizes, held at 3.2M above 175B, and below
//    125M scaled down in proportion to the parameters (our extrapolation: a model 1000x
//    smaller than GPT-3 Small takes 1000x fewer tokens per step);
//  - by scale: at least one sequence per data-parallel replica when tensor parallelism fills a
//    node, i.e. per 8 GPUs, or per tp GPUs for a model whose heads allow only tp < 8 (Llama 3
//    405B: 16M tokens = 2,048 sequences of 8,192 tokens on 16,384 GPUs with TP 8, Grattafiori
//    et al. 2024, arXiv:2407.21783, Table 4), so that a large cluster's replicas each get whole
//    sequences.
// The larger of the two, as sequences rounded to a power of two (the scale term up, the size
// term to the nearest), at least 1.
std::int64_t default_global_batch(const ModelSpec& model, std::int64_t gpus);
// The model-size term alone, in tokens per step (see default_global_batch).
double size_rule_tokens_per_step(double parameters);

}  // namespace trainplan
