// The planner's analytical estimate of one training step: sums of the cost model's task times
// per micro-batch, a closed-form pipeline schedule, data-parallel communication overlapped with
// the backward pass, the optimizer step, and memory per stage. Fast enough to rank millions of
// candidates (bench/planner): task lists are costed once per distinct (tp, cp, ep, micro-batch,
// sequence parallel, recompute, attention, precision, fp8, partitioned checkpoints, TP overlap)
// and cached. The event simulator refines the best candidates.
// Tested by tests/planner/planner_test.cc and tests/planner/estimate_vs_simulator_test.cc.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <map>
#include <unordered_map>
#include <vector>

#include "core/cluster_spec.h"
#include "core/cost/compute_model.h"
#include "core/cost/contention.h"
#include "core/cost/cost_model.h"
#include "core/cost/step_tasks.h"
#include "core/model_spec.h"
#include "core/plan.h"

namespace trainplan {

struct Estimate {
  double step_time_s = 0;
  double pipeline_s = 0;        // forward + backward of all micro-batches, bubble included
  double bubble_fraction = 0;   // stage 0 idle share of pipeline_s
  double compute_s = 0;         // compute per step on the busiest stage (incl. recompute)
  double tp_comm_s = 0;         // TP collectives per step on the busiest stage (exposed)
  double cp_comm_s = 0;         // CP K,V all-gathers and dK,dV reduce-scatters (not overlapped)
  double ep_comm_s = 0;         // expert all-to-all per step (not overlapped)
  double pp_comm_s = 0;         // stage-boundary transfers per step
  double dp_comm_s = 0;         // data-parallel collectives per step
  double dp_exposed_s = 0;      // the part not hidden behind compute
  double optimizer_s = 0;       // device optimizer step
  double offload_s = 0;         // PCIe transfers and host optimizer step (ZeRO-Offload)
  double tokens_per_s = 0;
  double model_tflops_per_gpu = 0;
  double hardware_tflops_per_gpu = 0;
  double mfu = 0;
  double peak_memory_bytes = 0;     // device, on the stage that needs most
  std::int64_t peak_stage = 0;
  MemoryBreakdown peak_memory;      // breakdown on that stage
  double host_memory_per_node_bytes = 0;  // offloaded states and checkpoints per node
  double nvme_per_node_bytes = 0;         // states on NVMe per node (offload_device nvme)
  // Offload traffic per step of one rank of the busiest-tail stage: over PCIe (both ways) and
  // to and from NVMe (offload_traffic_on_stage).
  double pcie_bytes_per_step = 0;
  double nvme_bytes_per_step = 0;
};

// DualPipe's F&B pair in closed form (planner/estimate.cc, dualpipe_pipeline_s): a forward
// and a backward whose compute and blocking collectives take `compute_s` together, whose expert
// all-to-alls take `all_to_all_s` and whose forward sends `forward_send_s`, overlapped with
// compute slowed by `sm_slowdown` beside an all-to-all. Tested by
// tests/planner/estimate_vs_simulator_test.cc.
double dualpipe_fb_pair_s(double compute_s, double all_to_all_s, double forward_send_s,
                          double sm_slowdown);

class Estimator {
 public:
  // A measured profile replaces the preset's rates and adds its baseline memory. Its rank
  // skew (rank_compute_spread) is left to the event simulator, which refines the best
  // candidates: where it matters (a CPU's ranks) it moves step times by a few percent.
  Estimator(const ModelSpec& model, const ClusterSpec& cluster,
            const std::optional<HardwareProfile>& hardware);
  // The plan must already pass validate_plan and check_plan_fits_model.
  Estimate estimate(const Plan& plan);
  // Memory only (for fast feasibility scans).
  double peak_memory_bytes(const Plan& plan, std::int64_t* peak_stage = nullptr) const;
  const DeviceRates& rates(Precision p);
  const ModelSpec& model() const { return model_; }
  const ClusterSpec& cluster() const { return cluster_; }

 private:
  struct PassTimes {
    double compute_s = 0, tp_s = 0, ep_s = 0, cp_s = 0;
    double blocking_comm_s() const { return tp_s + ep_s + cp_s; }
  };
  struct MicroBatchTimes {  // one micro-batch on one rank
    struct Layer {
      PassTimes fwd, bwd, re;
      double weight_gradient_s = 0;  // bwd's W part (backward_weight_tasks), compute only
      // The compute tasks' roofline terms, forward and backward (recompute included), for the
      // compute a collective slows beside it (contention.h).
      std::vector<WorkShape> fwd_shapes, bwd_shapes;
    };
    std::array<Layer, kLayerKindCount> layer;  // by LayerKind
    PassTimes embedding, head;                  // fwd + bwd
    double head_weight_gradient_s = 0;          // head's W part, compute only
    std::int64_t pipeline_message_bytes = 0;    // a stage boundary's send
    double pipeline_receive_s = 0;              // what its receiver runs (pipeline_receive_tasks)
    // The MoE layer's forward and backward compute beside an expert all-to-all on the dispatch
    // kernels of the overlapped MoE schedules (CommKernels::kExpertDispatch): how much longer.
    double dispatch_ratio = 1.0;
  };
  const MicroBatchTimes& micro_batch_times(const Plan& plan);
  // The peak over stages (the profile's baseline included), its stage and, when asked, that
  // stage's breakdown (without the baseline).
  double peak_memory(const Plan& plan, std::int64_t* peak_stage, MemoryBreakdown* breakdown) const;
  // A collective over n_inner ranks `stride_inner` apart, repeated n_outer times `stride_outer`
  // apart (n_outer = 1: one evenly spaced group). `spread`: an MoE all-to-all's (collectives.h).
  double group_time_s(Collective c, std::int64_t bytes, std::int64_t n_inner,
                      std::int64_t stride_inner, std::int64_t n_outer = 1,
                      std::int64_t stride_outer = 0, const RoutedSpread& spread = {}) const;
  PassTimes cost(const std::vector<Task>& tasks, const Plan& plan, const DeviceRates& r) const;
  // Contention (core/cost/contention.h), as the simulator's engine charges it: on GPU presets
  // only (not with a measured profile). The nodes and ranks per node of group_time_s's group;
  // what a collective over it holds; how much longer compute of `shapes` takes beside it.
  bool contention() const { return !hardware_ && cluster_.gpu.sm_count > 0; }
  std::pair<std::int64_t, std::int64_t> group_nodes(std::int64_t n_inner, std::int64_t stride_inner,
                                                    std::int64_t n_outer,
                                                    std::int64_t stride_outer) const;
  CommHold hold_of(CommKernels kernels, Collective c, std::int64_t bytes, std::int64_t n_inner,
                   std::int64_t stride_inner, std::int64_t n_outer = 1,
                   std::int64_t stride_outer = 0, const RoutedSpread& spread = {}) const;
  double beside_ratio(const std::vector<WorkShape>& shapes, const CommHold& hold,
                      const DeviceRates& r) const;
  // FLOPs per step; the per-sequence figures depend only on recompute and attention.
  StepFlops step_flops_cached(const Plan& plan);

  // The estimate's steps (estimate.cc), in order.
  // One stage's times per micro-batch: passes with their blocking collectives, and their parts.
  struct StageTimes {
    double fwd = 0, bwd = 0, compute = 0, tp = 0, ep = 0, cp = 0, pp = 0;
    double weight_gradient = 0;  // of bwd, the W passes (zero-bubble schedules move them)
    double ep_fwd = 0;  // of ep, the forward's all-to-alls (the rest: backward and recompute)
    double edge = 0;  // the embedding's or head's forward + backward, on the end stages
    double deferred = 0;  // Plan::defer_embedding_wgrad: head W moved to the flush, per step
    std::int64_t layers = 0;
    std::int64_t recomputed = 0;  // layers fully recomputed
  };
  struct CostedStages {
    std::vector<std::int64_t> stages;  // which stages were costed
    std::vector<StageTimes> times;     // by costed stage
    bool differ = false;               // every stage costed (else the middle one stands for all)
    double dispatch_ratio = 1.0;       // MicroBatchTimes::dispatch_ratio
  };
  CostedStages costed_stages(const Plan& plan, const MicroBatchTimes& mb) const;
  StageTimes stage_times(const Plan& plan, const MicroBatchTimes& mb, std::int64_t s,
                         double p2p_s) const;
  double add_layer_times(const Plan& plan, const MicroBatchTimes& mb, std::int64_t s,
                         StageTimes& st) const;
  static void halve_for_two_directions(StageTimes& st);
  double dualpipe_mirror_s(const Plan& plan, std::int64_t s) const;
  static void hide_expert_all_to_all(double ep_fwd, double ratio, StageTimes& st);
  static void add_edge_times(const PassTimes& pt, StageTimes& st);
  static void add_pipeline_sends(const Plan& plan, std::int64_t s, double p2p_s, StageTimes& st);
  void pipeline(const Plan& plan, const CostedStages& c, Estimate& e) const;
  double dualpipe_pipeline_s(const Plan& plan, const CostedStages& c) const;
  static double interleaved_steady_s(const Plan& plan, const std::vector<StageTimes>& times,
                                     double t_max);
  // After the pipeline: a stage's data-parallel collectives, optimizer step and offload.
  struct StageTail {
    double dp_comm_s = 0, dp_exposed_s = 0, optimizer_s = 0, offload_s = 0;
    double total_s() const { return dp_exposed_s + optimizer_s + offload_s; }
  };
  struct DpShape {
    double dense_elems = 0, expert_elems = 0;  // padded to the shard groups
    double blocks = 0;                          // parameter blocks on the stage
  };
  double offload_s(const Plan& plan, std::int64_t s, const StageTimes& st) const;
  StageTail stage_tail(const Plan& plan, std::int64_t s, const StageTimes& st,
                       const MicroBatchTimes& mb, const DeviceRates& r) const;
  DpShape dp_shape(const Plan& plan, std::int64_t s, const StageTimes& st) const;
  double per_block_s(Collective c, double elems, double bytes_per_elem, double blocks,
                     std::int64_t n_inner, std::int64_t stride_inner, std::int64_t n_outer,
                     std::int64_t stride_outer) const;
  double dp_collective_s(const Plan& plan, const DpShape& x, Collective c) const;
  void dp_times(const Plan& plan, std::int64_t s, const StageTimes& st, const MicroBatchTimes& mb,
                const DeviceRates& r, StageTail& tail) const;
  double tied_embedding_s(const Plan& plan, std::int64_t s) const;
  void fill_rates(const Plan& plan, Estimate& e);
  void fill_memory(const Plan& plan, Estimate& e) const;

  ModelSpec model_;
  ClusterSpec cluster_;
  std::optional<HardwareProfile> hardware_;
  std::map<std::array<std::int64_t, 16>, MicroBatchTimes> cache_;
  std::unordered_map<int, DeviceRates> rates_;
  std::unordered_map<int, StepFlops> flops_per_sequence_;
};

}  // namespace trainplan
