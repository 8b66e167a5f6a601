// Analytical step estimate; see estimate.h. Tested by tests/planner/planner_test.cc and
// tests/planner/estimate_vs_simulator_test.cc.
#include "planner/estimate.h"

#include <algorithm>
#include <cmath>

#include "core/schedule.h"

namespace trainplan {

namespace {
double d(std::int64_t v) { return static_cast<double>(v); }
}  // namespace

Estimator::Estimator(const ModelSpec& model, const ClusterSpec& cluster,
                     const std::optional<HardwareProfile>& hardware)
    : model_(model), cluster_(cluster), hardware_(hardware) {}

const DeviceRates& Estimator::rates(Precision p) {
  const int key = static_cast<int>(p);
  auto it = rates_.find(key);
  if (it != rates_.end()) return it->second;
  // The same rates as the simulator's (plan_rates); plan_training checked the precision and
  // FP8, so this plan without fp8 cannot be refused.
  Plan by_precision;
  by_precision.precision = p;
  auto r = plan_rates(by_precision, cluster_.gpu, hardware_);
  TRAINPLAN_CHECK(r.ok()) << r.status().message();
  return rates_.emplace(key, *r).first->second;
}

// A group of n ranks spaced `stride` apart in the global rank order (TP stride 1, CP stride tp,
// DP (with CP) stride tp, PP stride tp*cp*dp with Megatron-Core's placement tp-cp-dp-pp), or two
// such levels (the experts' gradient group: cp ranks stride tp, then the dp/ep replicas holding
// the same experts stride tp*cp*ep); ranks fill nodes of gpus_per_node in order.
std::pair<std::int64_t, std::int64_t> Estimator::group_nodes(std::int64_t n_inner,
                                                             std::int64_t stride_inner,
                                                             std::int64_t n_outer,
                                                             std::int64_t stride_outer) const {
  const std::int64_t n = n_inner * n_outer;
  const std::int64_t g = cluster_.gpus_per_node;
  auto in_node = [g](std::int64_t count, std::int64_t stride) {
    return stride >= g ? 1 : std::min(count, std::max<std::int64_t>(1, g / stride));
  };
  std::int64_t per_node = in_node(n_inner, stride_inner);
  // When the inner level fits in a node, several outer repetitions may share it.
  if (n_outer > 1 && per_node == n_inner) per_node *= in_node(n_outer, stride_outer);
  return {(n + per_node - 1) / per_node, per_node};
}

double Estimator::group_time_s(Collective c, std::int64_t bytes, std::int64_t n_inner,
                               std::int64_t stride_inner, std::int64_t n_outer,
                               std::int64_t stride_outer, const RoutedSpread& spread) const {
  if (n_inner * n_outer <= 1) return 0.0;
  const auto [nodes, per_node] = group_nodes(n_inner, stride_inner, n_outer, stride_outer);
  if (cluster_.collective_model == CollectiveModel::kNccl && nccl_tuned(c)) {
    // NCCL's algorithm and protocol over the Simple protocol's transfer (collectives.h), as
    // the simulator's network times it.
    const double transfer_s =
        group_collective_time_s(c, bytes, nodes, per_node, cluster_.intra_node_bytes_per_s, 0.0,
                                cluster_.inter_node_bytes_per_s, 0.0, spread);
    return nccl_choice(c, bytes, nodes, per_node, transfer_s, cluster_.intra_node_latency_s,
                       cluster_.inter_node_latency_s, cluster_.gpu.architecture == "volta")
        .time_s;
  }
  return group_collective_time_s(c, bytes, nodes, per_node, cluster_.intra_node_bytes_per_s,
                                 cluster_.intra_node_latency_s, cluster_.inter_node_bytes_per_s,
                                 cluster_.inter_node_latency_s, spread);
}

CommHold Estimator::hold_of(CommKernels kernels, Collective c, std::int64_t bytes,
                            std::int64_t n_inner, std::int64_t stride_inner, std::int64_t n_outer,
                            std::int64_t stride_outer, const RoutedSpread& spread) const {
  if (!contention() || (n_inner * n_outer <= 1 && c != Collective::kSendRecv)) return {};
  const auto [nodes, per_node] = group_nodes(n_inner, stride_inner, n_outer, stride_outer);
  return comm_hold(cluster_, kernels, c, bytes, nodes, per_node,
                   group_time_s(c, bytes, n_inner, stride_inner, n_outer, stride_outer, spread));
}

// The time-weighted ratio of the compute `shapes` beside `hold` (contended_ratio per task).
double Estimator::beside_ratio(const std::vector<WorkShape>& shapes, const CommHold& hold,
                               const DeviceRates& r) const {
  if (!contention() || hold.empty()) return 1.0;
  double alone = 0, beside = 0;
  for (const WorkShape& w : shapes) {
    const double t = std::max(w.compute_s, w.memory_s) + w.overhead_s;
    alone += t;
    beside += t * contended_ratio(w, r.sm_count, r.hbm_bytes_per_s, hold);
  }
  return alone > 0 ? beside / alone : 1.0;
}

Estimator::PassTimes Estimator::cost(const std::vector<Task>& tasks, const Plan& plan,
                                     const DeviceRates& r) const {
  // Runs of steps (Task::repeat) are costed step by step: the steps' own sums, in their order
  // (the estimate is cached per layout, so the longer list costs little).
  if (has_repeats(tasks)) return cost(expand_repeats(tasks), plan, r);
  PassTimes t;
  const std::vector<std::int32_t> partner = tp_overlap_partners(tasks, plan);
  for (std::size_t i = 0; i < tasks.size(); ++i) {
    const Task& task = tasks[i];
    if (task.kind != TaskKind::kComm) {
      t.compute_s += task_time_s(task, r);
    } else if (task.group == CommGroup::kTp) {
      const double comm_s = group_time_s(task.collective, task.message_bytes, task.group_size, 1);
      if (partner.empty() || partner[i] < 0) {
        t.tp_s += comm_s;
      } else {  // Plan::tp_comm_overlap: only what the GEMM beside it does not hide
        // On Transformer Engine's userbuffers, as the simulator plays them (contention.h): a
        // forward GEMM before its reduce-scatter launched with a 16-SM margin throughout, a
        // backward one beside a bulk overlap's 16 SMs while in flight, copy engines for an
        // all-gather feeding its GEMM.
        // torch-async: the GEMM as tp chunks (tp_decomposed_gemm_s), copy engines both ways,
        // and the reduce-scatter's sum of partials after it (tp_partials_reduce_task).
        const Task& gemm = tasks[static_cast<std::size_t>(partner[i])];
        const bool torch_async = plan.tp_comm_overlap_impl == TpOverlapImpl::kTorchAsync;
        const double whole_s = task_time_s(gemm, r);
        const double gemm_s = tp_decomposed_gemm_s(gemm, plan, r);
        const bool before = partner[i] < static_cast<std::int32_t>(i);
        const bool margin = !torch_async && before && gemm_direction(gemm) == GemmDirection::kForward;
        const CommKernels kernels = !before || torch_async ? CommKernels::kCopyEngine
                                    : margin               ? CommKernels::kUserbuffersMargin
                                                           : CommKernels::kUserbuffersSm;
        CommHold hold = hold_of(kernels, task.collective, task.message_bytes, task.group_size, 1);
        if (margin && contention()) hold.sms = kUserbufferSms;
        const double slowdown = beside_ratio({work_shape(gemm, r)}, hold, r);
        t.tp_s += tp_overlapped_pair_s(comm_s, gemm_s, plan.tp, slowdown, margin) - whole_s;
        if (torch_async && before) t.tp_s += task_time_s(tp_partials_reduce_task(gemm, plan), r);
      }
    } else if (task.group == CommGroup::kExpertTp) {
      // Folded experts' gather and scatter over their expert_tp consecutive ranks.
      t.tp_s += group_time_s(task.collective, task.message_bytes, task.group_size, 1);
    } else if (task.group == CommGroup::kEp) {
      // Carved: ep replicas stride tp*cp; folded: stride expert_tp (core/rank_layout.h).
      const std::int64_t stride = plan.expert_layout == ExpertLayout::kFolded
                                      ? plan.expert_tp_size()
                                      : plan.tp * plan.cp;
      t.ep_s += group_time_s(task.collective, task.message_bytes, task.group_size, stride, 1, 0,
                             task.spread);
    } else if (task.group == CommGroup::kCp) {
      const double comm_s =
          group_time_s(task.collective, task.message_bytes, task.group_size, plan.tp);
      // Task::beside: the ring's exchange travels while the next compute tasks run; only what
      // they do not cover is exposed, as the simulator plays it.
      double covered_s = 0;
      std::int32_t left = task.beside;
      for (std::size_t j = i + 1; j < tasks.size() && left > 0; ++j)
        if (tasks[j].kind != TaskKind::kComm) {
          covered_s += task_time_s(tasks[j], r);
          --left;
        }
      t.cp_s += std::max(0.0, comm_s - covered_s);
    }
  }
  return t;
}

const Estimator::MicroBatchTimes& Estimator::micro_batch_times(const Plan& plan) {
  // Everything below depends only on these fields of the plan.
  const std::array<std::int64_t, 16> key{plan.tp, plan.cp, plan.ep, plan.micro_batch_size,
                                         static_cast<std::int64_t>(plan.expert_layout),
                                         plan.expert_tp_size(),
                                         plan.sequence_parallel ? 1 : 0,
                                         static_cast<std::int64_t>(plan.recompute),
                                         static_cast<std::int64_t>(plan.attention),
                                         static_cast<std::int64_t>(plan.precision),
                                         plan.fp8 ? 1 : 0,
                                         plan.partition_activations ? 1 : 0,
                                         plan.tp_comm_overlap ? 1 : 0,
                                         static_cast<std::int64_t>(plan.tp_comm_overlap_impl),
                                         static_cast<std::int64_t>(plan.cp_comm),
                                         plan.pipeline_scatter_gather ? 1 : 0};
  auto it = cache_.find(key);
  if (it != cache_.end()) return it->second;
  const DeviceRates& r = rates(plan.precision);
  const MicroBatchTasks tasks = micro_batch_tasks(model_, plan);
  MicroBatchTimes t;
  for (LayerKind kind : {LayerKind::kDense, LayerKind::kMoe}) {
    const LayerTasks& lt = tasks.of(kind);
    MicroBatchTimes::Layer& l = t.layer[static_cast<std::size_t>(kind)];
    l.fwd = cost(lt.forward, plan, r);
    l.bwd = cost(lt.backward, plan, r);
    l.re = cost(lt.recompute, plan, r);
    l.weight_gradient_s = cost(backward_weight_tasks(lt.backward), plan, r).compute_s;
    for (const Task& x : lt.forward)
      if (x.kind != TaskKind::kComm) l.fwd_shapes.push_back(work_shape(x, r));
    for (const auto* list : {&lt.backward, &lt.recompute})
      for (const Task& x : *list)
        if (x.kind != TaskKind::kComm) l.bwd_shapes.push_back(work_shape(x, r));
  }
  // An MoE layer's first expert all-to-all stands for them all (dispatch and combine move the
  // same buffer).
  const MicroBatchTimes::Layer& moe = t.layer[static_cast<std::size_t>(LayerKind::kMoe)];
  for (const Task& x : tasks.of(LayerKind::kMoe).forward)
    if (x.kind == TaskKind::kComm && x.group == CommGroup::kEp &&
        x.collective == Collective::kAllToAll) {
      std::vector<WorkShape> pair = moe.fwd_shapes;
      pair.insert(pair.end(), moe.bwd_shapes.begin(), moe.bwd_shapes.end());
      t.dispatch_ratio = beside_ratio(
          pair, hold_of(CommKernels::kExpertDispatch, x.collective, x.message_bytes,
                        x.group_size, plan.tp * plan.cp, 1, 0, x.spread), r);
      break;
    }
  auto add = [](PassTimes a, const PassTimes& b) {
    a.compute_s += b.compute_s;
    a.tp_s += b.tp_s;
    a.ep_s += b.ep_s;
    a.cp_s += b.cp_s;
    return a;
  };
  t.embedding = add(cost(tasks.embedding_forward, plan, r), cost(tasks.embedding_backward, plan, r));
  t.head = add(cost(tasks.head_forward, plan, r), cost(tasks.head_backward, plan, r));
  t.head_weight_gradient_s = cost(backward_weight_tasks(tasks.head_backward), plan, r).compute_s;
  t.pipeline_message_bytes = tasks.pipeline_message_bytes;
  t.pipeline_receive_s = cost(tasks.pipeline_receive, plan, r).tp_s;
  return cache_.emplace(key, t).first->second;
}

StepFlops Estimator::step_flops_cached(const Plan& plan) {
  // Partial full recompute depends on how the layers fall into chunks: not cached.
  if (plan.recompute_num_layers > 0) return step_flops(model_, plan);
  const int key = static_cast<int>(plan.recompute) * 4 + static_cast<int>(plan.attention);
  auto it = flops_per_sequence_.find(key);
  if (it == flops_per_sequence_.end()) {
    Plan one = plan;
    one.global_batch_size = 1;
    it = flops_per_sequence_.emplace(key, step_flops(model_, one)).first;
  }
  StepFlops f = it->second;
  f.model *= d(plan.global_batch_size);
  f.hardware *= d(plan.global_batch_size);
  return f;
}

double Estimator::peak_memory_bytes(const Plan& plan, std::int64_t* peak_stage) const {
  return peak_memory(plan, peak_stage, nullptr);
}

double Estimator::peak_memory(const Plan& plan, std::int64_t* peak_stage,
                              MemoryBreakdown* breakdown) const {
  // With an even split of a uniform stack, stage 0 (most micro-batches in flight, the
  // embedding) and the last stage (LM head, logits) bound every stage in between; an explicit
  // split, or a model whose layers differ (dense_layers), checks them all.
  double peak = -1;
  const double runtime = hardware_ ? hardware_->baseline_memory_bytes : 0.0;
  auto check = [&](std::int64_t s) {
    const MemoryBreakdown mem = memory_on_stage(model_, plan, s);
    const double m = mem.device_total() + runtime;
    if (m > peak) {
      peak = m;
      if (peak_stage) *peak_stage = s;
      if (breakdown) *breakdown = mem;
    }
  };
  if (!plan.layers_per_stage.empty() || !model_.dense_layers.empty()) {
    for (std::int64_t s = 0; s < plan.pp; ++s) check(s);
  } else {
    check(0);
    if (plan.pp > 1) check(plan.pp - 1);
  }
  return peak;
}

// ---------------------------------------------------------------------------------------------
// One stage's times per micro-batch

// TP, EP and CP collectives sit between a layer's kernels and block them (Megatron-Core overlaps
// the ring variant of CP with attention; the all-gather variant here is exposed, as Transformer
// Engine's AttnFuncWithCPAndKVAllGather says of itself). Returns the layers' forward EP time.
double Estimator::add_layer_times(const Plan& plan, const MicroBatchTimes& mb, std::int64_t s,
                                  StageTimes& st) const {
  const LayerKindCounts kinds = layer_kinds_on_stage(plan, model_, s);
  const LayerKindCounts recomputed = recomputed_layer_kinds_on_stage(plan, model_, s);
  st.recomputed = recomputed.dense + recomputed.moe;
  double ep_fwd = 0;
  for (LayerKind kind : {LayerKind::kDense, LayerKind::kMoe}) {
    // L layers; under full recompute R of them also run their forward again (selective's
    // work, when there is any, is in every layer: R = L).
    const double L = d(kinds.of(kind));
    const double R = plan.recompute == Recompute::kFull ? d(recomputed.of(kind)) : L;
    const MicroBatchTimes::Layer& l = mb.layer[static_cast<std::size_t>(kind)];
    st.fwd += L * (l.fwd.compute_s + l.fwd.blocking_comm_s());
    st.bwd += L * (l.bwd.compute_s + l.bwd.blocking_comm_s()) +
              R * (l.re.compute_s + l.re.blocking_comm_s());
    st.compute += L * (l.fwd.compute_s + l.bwd.compute_s) + R * l.re.compute_s;
    st.tp += L * (l.fwd.tp_s + l.bwd.tp_s) + R * l.re.tp_s;
    st.ep += L * (l.fwd.ep_s + l.bwd.ep_s) + R * l.re.ep_s;
    st.cp += L * (l.fwd.cp_s + l.bwd.cp_s) + R * l.re.cp_s;
    ep_fwd += L * l.fwd.ep_s;
    st.weight_gradient += L * l.weight_gradient_s;
    // Offloaded checkpoints: a recomputed layer's input goes to the host while the next
    // layer's forward runs and comes back while the layer above it is back-propagated; only
    // what outlasts that layer's compute shows.
    if (plan.offload_checkpoints && cluster_.pcie_bytes_per_s > 0) {
      const double copy_s = checkpoint_input_bytes(model_, plan) / cluster_.pcie_bytes_per_s;
      st.fwd += R * std::max(0.0, copy_s - l.fwd.compute_s);
      st.bwd += R * std::max(0.0, copy_s - l.bwd.compute_s - l.re.compute_s);
    }
  }
  return ep_fwd;
}

// A merged backward/forward pair (Plan::ep_overlap): the pair's all-to-alls travel while its
// compute runs, so the pair takes max(compute, all-to-all) where it took their sum; each pass
// gives up its share of what is hidden. Warm-up and cool-down passes, which are not paired, are
// taken as paired too (the simulator plays them as they are). Beside an all-to-all the compute
// runs `ratio` times longer (its dispatch kernels' SMs, contention.h), so an all-to-all A beside
// compute C hides min(C, A / ratio) of the pair: max(A - C, A (1 - 1 / ratio)) stays.
void Estimator::hide_expert_all_to_all(double ep_fwd, double ratio, StageTimes& st) {
  const double hidden = std::min(st.ep / ratio, st.compute);  // the layers' compute so far
  st.fwd -= hidden * ep_fwd / st.ep;
  st.bwd -= hidden * (st.ep - ep_fwd) / st.ep;
}

// The embedding/head's forward share is about a third of its forward + backward.
void Estimator::add_edge_times(const PassTimes& pt, StageTimes& st) {
  const double all = pt.compute_s + pt.tp_s + pt.ep_s;
  st.fwd += all / 3.0;
  st.bwd += all * 2.0 / 3.0;
  st.edge += all;
  st.compute += pt.compute_s;
  st.tp += pt.tp_s;
}

// Each model chunk sends its output forward unless it is the last chunk, and its input gradient
// backward unless it is the first, or the neighbour chunk is on this stage (the V's turn);
// half the sends are the forward's, half the backward's.
void Estimator::add_pipeline_sends(const Plan& plan, std::int64_t s, double p2p_s,
                                   StageTimes& st) {
  double sends = 0;
  for (std::int64_t c = 0; c < plan.virtual_stages; ++c) {
    const std::int64_t chunk = stage_chunk(plan, s, c);
    if (chunk < plan.num_chunks() - 1 && chunk_stage(plan, chunk + 1) != s) sends += 1;
    if (chunk > 0 && chunk_stage(plan, chunk - 1) != s) sends += 1;
  }
  st.pp = sends * p2p_s;
  st.fwd += st.pp / 2.0;
  st.bwd += st.pp / 2.0;
}

Estimator::StageTimes Estimator::stage_times(const Plan& plan, const MicroBatchTimes& mb,
                                             std::int64_t s, double p2p_s) const {
  StageTimes st;
  st.layers = layers_on_stage(plan, model_, s);
  const double ep_fwd = add_layer_times(plan, mb, s, st);
  st.ep_fwd = ep_fwd;
  if (plan.ep_overlap && st.ep > 0) hide_expert_all_to_all(ep_fwd, mb.dispatch_ratio, st);
  if (stage_holds_embedding(plan, s)) add_edge_times(mb.embedding, st);
  if (stage_holds_head(plan, s)) {
    add_edge_times(mb.head, st);
    // Plan::defer_embedding_wgrad: the head's weight gradient of the step's first
    // wgrad_deferral_limit micro-batches (all at 0) leaves their backwards for the flush; the
    // per-micro-batch time keeps the average of what stays.
    if (plan.defer_embedding_wgrad) {
      st.deferred = d(deferred_head_micro_batches(plan)) * mb.head_weight_gradient_s;
      st.bwd -= st.deferred / d(plan.num_micro_batches());
    }
  }
  if (plan.pp > 1) add_pipeline_sends(plan, s, p2p_s, st);
  if (plan.schedule == Schedule::kDualPipe) halve_for_two_directions(st);
  return st;
}

// DualPipe: each micro-batch passes one of the stage's two chunks (and the end stages' embedding
// or head), so a micro-batch's share of the stage's work is half of what it holds.
void Estimator::halve_for_two_directions(StageTimes& st) {
  for (double* x : {&st.fwd, &st.bwd, &st.compute, &st.tp, &st.ep, &st.cp, &st.pp,
                    &st.weight_gradient, &st.edge, &st.ep_fwd})
    *x /= 2.0;
}

// The stages costed: every one when they differ (an explicit split, or layers of different
// kinds), else the first, one middle stage standing for all pp - 2 of them, and the last.
Estimator::CostedStages Estimator::costed_stages(const Plan& plan, const MicroBatchTimes& mb) const {
  const std::int64_t pp = plan.pp;
  // Pipeline-boundary transfer: one per chunk boundary per micro-batch and direction.
  const std::int64_t stage_stride = plan.tp * plan.cp * plan.dp;
  // Each send is matched by its receiver's pipeline_receive_tasks (the scatter/gather's TP
  // all-gather), on the critical path as the send is.
  const double p2p_s =
      pp > 1 ? group_time_s(Collective::kSendRecv, mb.pipeline_message_bytes, 2, stage_stride) +
                   mb.pipeline_receive_s
             : 0.0;
  CostedStages c;
  c.dispatch_ratio = mb.dispatch_ratio;
  c.differ = !plan.layers_per_stage.empty() || !model_.dense_layers.empty();
  if (c.differ) {
    for (std::int64_t s = 0; s < pp; ++s) c.stages.push_back(s);
  } else {
    c.stages.push_back(0);
    if (pp > 2) c.stages.push_back(1);
    if (pp > 1) c.stages.push_back(pp - 1);
  }
  c.times.reserve(c.stages.size());
  for (std::int64_t s : c.stages) c.times.push_back(stage_times(plan, mb, s, p2p_s));
  return c;
}

// ---------------------------------------------------------------------------------------------
// The pipeline

// Interleaving's steady state per micro-batch. Each micro-batch passes the stages once per chunk
// position j, and a stage cannot run its j-th chunk before the stage above has run its own: with
// chunks of unequal size (layers that do not divide over pp * v), position j takes as long as
// its largest chunk, and a micro-batch the sum of those, not its busiest stage's total. Only an
// explicit split makes chunks unequal (an even split of layers of different kinds gives every
// chunk of a stage the stage's average); then every stage was costed.
double Estimator::interleaved_steady_s(const Plan& plan, const std::vector<StageTimes>& times,
                                       double t_max) {
  if (plan.layers_per_stage.empty()) return t_max;
  const std::int64_t pp = plan.pp, v = plan.virtual_stages;
  const std::vector<std::int64_t>& layers = plan.layers_per_stage;
  double steady = 0;
  for (std::int64_t j = 0; j < v; ++j) {
    double slowest = 0;
    for (std::int64_t stage = 0; stage < pp; ++stage) {
      const StageTimes& x = times[static_cast<std::size_t>(stage)];
      const double per_layer = x.layers > 0 ? (x.fwd + x.bwd - x.edge - x.pp) / d(x.layers) : 0.0;
      double c = d(layers[static_cast<std::size_t>(j * pp + stage)]) * per_layer + x.pp / d(v);
      if ((j == 0 && stage == 0) || (j == v - 1 && stage == pp - 1)) c += x.edge;
      slowest = std::max(slowest, c);
    }
    steady += slowest;
  }
  return std::max(steady, t_max);
}

// Closed-form schedules (Narayanan et al. 2021, sec. 2.2): GPipe and 1F1B take
// (M - 1) * slowest stage + the sum of all stages; interleaving divides the fill and drain by v.
// zb-h1 (Qi et al. 2023, sec. 2.1): the fill and drain shrink from (pp - 1)(T_F + T_B + T_W) to
// (pp - 1)(T_F + T_B - T_W), the W passes of the stages other than the slowest filling them.
// zb-v (Qi et al. 2024; core/schedule.h): at best every stage busy from its first forward to
// the end, M times the busiest stage plus the last stage's wait for the first chunk's forwards
// on the stages above it, half of each stage's forward (6M + pp - 1 unit passes with T_F = T_B
// = T_W). The greedy reaches that only with equal costs; with real ones the simulator finds it
// no better than zb-h1 (bench/results/schedule-bubbles-2026-11-24), so the estimate takes the
// larger of the two closed forms and the search does not rank zb-v ahead on a promise.
// Fills the pipeline figures of `e`, and the busiest stage's parts per step.
void Estimator::pipeline(const Plan& plan, const CostedStages& c, Estimate& e) const {
  const std::int64_t pp = plan.pp, M = plan.num_micro_batches(), v = plan.virtual_stages;
  double t_max = 0, t_sum = 0, t0 = 0, w_sum = 0, w_of_max = 0, f_sum = 0, f_last = 0;
  StageTimes busiest;
  for (std::size_t i = 0; i < c.stages.size(); ++i) {
    const std::int64_t s = c.stages[i];
    const StageTimes& st = c.times[i];
    const double t = st.fwd + st.bwd;
    // Middle stages stand for all pp - 2 of them when the split is even.
    const double copies = (!c.differ && pp > 2 && s == 1) ? d(pp - 2) : 1.0;
    t_sum += t * copies;
    w_sum += st.weight_gradient * copies;
    f_sum += st.fwd * copies;
    if (s == pp - 1) f_last = st.fwd;
    if (s == 0) t0 = t;
    if (t >= t_max) {
      t_max = t;
      w_of_max = st.weight_gradient;
      busiest = st;
    }
  }
  if (pp == 1) {
    e.pipeline_s = d(M) * t0;
  } else if (plan.schedule == Schedule::kInterleaved) {
    e.pipeline_s = d(M) * interleaved_steady_s(plan, c.times, t_max) + (t_sum - t_max) / d(v);
  } else if (plan.schedule == Schedule::kZbH1) {
    e.pipeline_s = std::max(d(M) * t_max, d(M - 1) * t_max + t_sum - 2.0 * (w_sum - w_of_max));
  } else if (plan.schedule == Schedule::kDualPipe) {
    e.pipeline_s = dualpipe_pipeline_s(plan, c);
  } else if (plan.schedule == Schedule::kZbV) {
    const double zb_h1 =
        std::max(d(M) * t_max, d(M - 1) * t_max + t_sum - 2.0 * (w_sum - w_of_max));
    e.pipeline_s = std::max(d(M) * t_max + (f_sum - f_last) / d(v), zb_h1);
  } else {
    e.pipeline_s = d(M - 1) * t_max + t_sum;
  }
  // Plan::defer_embedding_wgrad: the last stage runs the deferred head weight gradients after
  // its last backward, while the stages before it finish theirs (about one backward each, the
  // drain); what does not fit there lengthens the step.
  if (plan.defer_embedding_wgrad && pp > 1) {
    double deferred = 0, drain = 0;
    for (std::size_t i = 0; i < c.stages.size(); ++i) {
      const std::int64_t s = c.stages[i];
      const StageTimes& st = c.times[i];
      const double copies = (!c.differ && pp > 2 && s == 1) ? d(pp - 2) : 1.0;
      if (s == pp - 1) deferred = st.deferred;
      else drain += st.bwd * copies / d(v);
    }
    e.pipeline_s += std::max(0.0, deferred - drain);
  }
  e.bubble_fraction = e.pipeline_s > 0 ? std::max(0.0, 1.0 - d(M) * t0 / e.pipeline_s) : 0.0;
  e.compute_s = d(M) * busiest.compute;
  e.tp_comm_s = d(M) * busiest.tp;
  e.ep_comm_s = d(M) * busiest.ep;
  e.cp_comm_s = d(M) * busiest.cp;
  e.pp_comm_s = d(M) * busiest.pp;
}

// DualPipe (DeepSeek-V3, arXiv:2412.19437, sec. 3.2.1, fig. 4 and Table 2). An F&B pair, a
// forward and the other direction's backward overlapped, takes what the simulator's fb_pair
// plays, in closed form: each pass's expert all-to-alls (A) travel while the other pass
// computes (C: the pair's compute and blocking collectives), and so does the forward's pipeline
// send, which the backward no longer waits for. Beside an all-to-all compute runs on the SMs its
// kernels leave (DeepSeek-V3 sec. 3.2.2 / 3.5.1: 20 of the H800's 132; slowdown s =
// MicroBatchTimes::dispatch_ratio, contention.h), so an all-to-all of a hidden beside compute
// stretches it by a (1 - 1/s); compute shorter than A / s leaves the rest of A exposed:
//   pair = max(A + send_F, C + A (1 - 1/s)),  saving = F + B - pair per pair.
double dualpipe_fb_pair_s(double compute_s, double all_to_all_s, double forward_send_s,
                          double sm_slowdown) {
  const double stretch = all_to_all_s * (1.0 - 1.0 / sm_slowdown);
  return std::max(all_to_all_s + forward_send_s, compute_s + stretch);
}

// Each stage runs dualpipe_overlapped_pairs of them (core/schedule) among its M forwards and
// backwards: its work is M times its per-micro-batch time less each pair's saving. Its idle:
// Table 2's (pp/2 - 1)(F&B + B - 3W) is an upper bound; core/schedule's order, replayed with
// F&B = F + B, idles exactly (pp/2 - 1)(F&B - 2W) = (pp/2 - 1)(F + B_input - W) where F >=
// B_input, and at most (pp/2 - 1)(F&B - 2W + B_input - F) where B_input > F
// (tests/simulator/schedule_test.cc, DualPipeBubbleAndActivationsAgainstDeepSeekV3Table2).
// Table 2 counts that idle for stages alike. DualPipe's end stages are not: both hold the
// embedding and the output head (DeepSeek-V3 sec. 3.2.3 deploys the shallowest layers with the
// embedding and the deepest with the head on the same PP rank; deepseek-ai/DualPipe's example
// gives rank 0 and rank pp-1 modules 0 and pp-1), so they are the busiest pair, and the idle
// is a stage waiting for the passes of the others: the busiest pair never waits for lighter
// stages in the steady state (the others wait for it), so it idles only what they leave. The
// step is the larger of the busiest pair's work and every other stage's work plus its idle.
// Taking the busiest stage's own idle instead (with its embedding and head in the pass times)
// made the estimate 8% high at pp 8 on the MoE test model (M = 2pp) and ranked 1F1B ahead where
// the simulator ranks DualPipe ahead (tests/planner/estimate_vs_simulator_test.cc).
double Estimator::dualpipe_pipeline_s(const Plan& plan, const CostedStages& c) const {
  const std::int64_t pp = plan.pp, M = plan.num_micro_batches();
  const double s = plan.ep > 1 ? c.dispatch_ratio : 1.0;
  std::vector<double> work, idle;
  std::size_t busiest = 0;
  for (std::size_t i = 0; i < c.stages.size(); ++i) {
    const StageTimes& st = c.times[i];
    const double send_f = st.pp / 2.0, a2a = st.ep;
    const double pair = dualpipe_fb_pair_s(st.fwd + st.bwd - a2a - send_f, a2a, send_f, s);
    const double saving = std::max(0.0, st.fwd + st.bwd - pair);
    const double pairs = d(sim::dualpipe_overlapped_pairs(pp, c.stages[i], M));
    const double f_and_b = st.fwd + st.bwd - saving, w = st.weight_gradient;
    const double unit = f_and_b - 2.0 * w + std::max(0.0, st.bwd - w - st.fwd);
    work.push_back(d(M) * (st.fwd + st.bwd) - pairs * saving);
    idle.push_back(d(pp / 2 - 1) * std::max(0.0, unit));
    if (work[i] > work[busiest]) busiest = i;
  }
  // The busiest stage and its mirror (the same chunks, the same work).
  const std::int64_t b = c.stages[busiest], mirror = pp - 1 - b;
  double step = work[busiest];
  for (std::size_t i = 0; i < c.stages.size(); ++i)
    if (c.stages[i] != b && c.stages[i] != mirror) step = std::max(step, work[i] + idle[i]);
  return step;
}

// ---------------------------------------------------------------------------------------------
// Data parallel, optimizer and offload after (or overlapped with) the pipeline

// Weights are gathered in their precision, gradients reduced in theirs (grad_precision).
// Gradients are summed (and ZeRO shards) over the dp replicas and the cp ranks, which hold the
// same weights: dense over dp*cp ranks (stride tp), experts over their cp ranks (stride tp) of
// the dp/ep replicas that hold them (stride tp*cp*ep). With hybrid sharding
// (Plan::zero_shard_size) the ZeRO collectives run in groups of zero_shard_size consecutive
// ones of those ranks, and an all-reduce of the reduced shard across the groups (stride
// tp * zero_shard_size) follows the last backward.
Estimator::DpShape Estimator::dp_shape(const Plan& plan, std::int64_t s,
                                       const StageTimes& st) const {
  DpShape x;
  const std::int64_t dense_n = plan.zero_shard_ranks(), expert_n = expert_dp_cp(plan);
  const StageParameters sp = parameters_on_stage(model_, plan, s);
  x.dense_elems = std::ceil(sp.dense / d(dense_n)) * d(dense_n);
  x.expert_elems = sp.expert > 0 ? std::ceil(sp.expert / d(expert_n)) * d(expert_n) : 0.0;
  x.blocks = d(st.layers + (stage_holds_embedding(plan, s) ? 1 : 0) +
               (stage_holds_head(plan, s) ? 1 : 0));
  return x;
}

// One collective per block, as the simulator and the frameworks issue them (a bucket per
// block): each pays the ring's per-step latency, which at hundreds of ranks outweighs a small
// layer's bytes. Blocks are taken as equal shares of the stage.
double Estimator::per_block_s(Collective c, double elems, double bytes_per_elem, double blocks,
                              std::int64_t n_inner, std::int64_t stride_inner,
                              std::int64_t n_outer, std::int64_t stride_outer) const {
  if (elems <= 0) return 0.0;
  return blocks * group_time_s(c, std::llround(elems * bytes_per_elem / blocks), n_inner,
                               stride_inner, n_outer, stride_outer);
}

// A collective over the stage's dense and expert gradient (or weight) shards.
double Estimator::dp_collective_s(const Plan& plan, const DpShape& x, Collective c) const {
  const double b =
      c == Collective::kAllGather ? bytes_per_element(plan.precision) : grad_bytes_per_element(plan);
  const double dense =
      per_block_s(c, x.dense_elems, b, x.blocks, plan.zero_shard_ranks(), plan.tp, 1, 0);
  // Folded: the expert data-parallel ranks are one level, stride expert_tp*ep.
  if (plan.expert_layout == ExpertLayout::kFolded)
    return dense + per_block_s(c, x.expert_elems, b, x.blocks, plan.expert_dp(),
                               plan.expert_tp_size() * plan.ep, 1, 0);
  const std::int64_t edp = plan.dp / plan.ep;
  return dense + per_block_s(c, x.expert_elems, b, x.blocks, plan.cp, plan.tp, edp,
                             plan.tp * plan.cp * plan.ep);
}

// The data-parallel collectives of a stage per step (comm) and the part not hidden behind the
// backward (or, ZeRO-3, forward) pass (exposed).
void Estimator::dp_times(const Plan& plan, std::int64_t s, const StageTimes& st,
                         const MicroBatchTimes& mb, const DeviceRates& r,
                         StageTail& tail) const {
  const DpShape x = dp_shape(plan, s, st);
  // Per micro-batch through each chunk (dualpipe: each copy sees half of them).
  const double M = d(chunk_copy_micro_batches(plan)), blocks = x.blocks;
  // Gradient buckets go out as the backward pass finishes each block: all but the last block's
  // collective can hide behind the rest of the micro-batch's backward.
  const double bwd_window = st.bwd * (blocks - 1.0) / blocks;
  const double fwd_window = st.fwd * (blocks - 1.0) / blocks;
  // Beside a block's collective the window's compute runs f times longer (contention.h, the
  // stage's more numerous layer kind standing for its compute): of the C' that travels beside
  // the window W, max(C' - W, C' (1 - 1/f)) stays exposed (C' < W f: the compute stretched by
  // C' (1 - 1/f); else the collective outlasts it). At f = 1: max(C - W, C / blocks).
  auto hidden_behind = [&](double comm_s, double window, double f) {
    const double beside = comm_s * (blocks - 1.0) / blocks;
    return comm_s / blocks + std::max(beside - window, beside * (1.0 - 1.0 / f));
  };
  const LayerKindCounts kinds = layer_kinds_on_stage(plan, model_, s);
  const MicroBatchTimes::Layer& layer =
      mb.layer[static_cast<std::size_t>(kinds.moe > kinds.dense ? LayerKind::kMoe : LayerKind::kDense)];
  auto ratio = [&](Collective c, bool forward) {
    if (!contention() || blocks <= 1.0) return 1.0;
    const double b = c == Collective::kAllGather ? bytes_per_element(plan.precision)
                                                 : grad_bytes_per_element(plan);
    const bool dense = x.dense_elems > 0;
    const double elems = dense ? x.dense_elems : x.expert_elems;
    const std::int64_t bytes = std::llround(elems * b / blocks);
    const CommHold hold =
        dense ? hold_of(CommKernels::kNccl, c, bytes, plan.zero_shard_ranks(), plan.tp)
              : hold_of(CommKernels::kNccl, c, bytes, plan.cp, plan.tp, plan.dp / plan.ep,
                        plan.tp * plan.cp * plan.ep);
    return beside_ratio(forward ? layer.fwd_shapes : layer.bwd_shapes, hold, r);
  };
  // Hybrid sharding's all-reduce across shard groups, of each block's reduced shard, joins the
  // last micro-batch's gradient reduction.
  const std::int64_t dense_n = plan.zero_shard_ranks();
  const double cross =
      plan.zero_replicas() > 1
          ? per_block_s(Collective::kAllReduce, x.dense_elems / d(dense_n),
                        grad_bytes_per_element(plan), blocks, plan.zero_replicas(),
                        plan.tp * dense_n, 1, 0)
          : 0.0;
  double& comm = tail.dp_comm_s;
  double& exposed = tail.dp_exposed_s;
  if (plan.zero_stage == 0) {
    const double ar = dp_collective_s(plan, x, Collective::kAllReduce);
    comm = ar;
    exposed = hidden_behind(ar, bwd_window, ratio(Collective::kAllReduce, false));
    return;
  }
  const double rs = dp_collective_s(plan, x, Collective::kReduceScatter),
               ag = dp_collective_s(plan, x, Collective::kAllGather);
  const double f_rs = ratio(Collective::kReduceScatter, false);
  if (plan.zero_stage == 1) {
    comm = rs + cross + ag;
    exposed = hidden_behind(rs + cross, bwd_window, f_rs) + ag;
  } else if (plan.zero_stage == 2) {
    comm = M * rs + cross + ag;
    exposed = (M - 1.0) * hidden_behind(rs, bwd_window, f_rs) +
              hidden_behind(rs + cross, bwd_window, f_rs) + ag;
  } else {
    // Again before each recomputed layer's forward: the stage's share of its gathers.
    const double recomputed_share = st.layers > 0 ? d(st.recomputed) / d(st.layers) : 0.0;
    const double gathers_bwd = (1.0 + recomputed_share) * ag;
    comm = M * (ag + gathers_bwd + rs) + cross;
    // In the backward pass a block's gather queues on the data-parallel stream behind the
    // previous block's reduce-scatter, which waits for that block's backward: each block waits
    // for both, as the simulator plays it (one stream for gathers and reductions).
    exposed = M * (hidden_behind(ag, fwd_window, ratio(Collective::kAllGather, true)) +
                   gathers_bwd + rs) + cross;
  }
}

// Tied embeddings on two stages: the first and last stage sum their copies' gradients.
double Estimator::tied_embedding_s(const Plan& plan, std::int64_t s) const {
  if (plan.schedule == Schedule::kDualPipe) return dualpipe_mirror_s(plan, s);
  if (!splits_tied_embedding(plan) || !model_.tie_word_embeddings ||
      (s != 0 && s != head_stage(plan)))
    return 0.0;
  return group_time_s(Collective::kAllReduce,
                      std::llround(d(padded_vocab(model_, plan.tp)) / d(plan.tp) *
                                   d(model_.hidden_size) * grad_bytes_per_element(plan)),
                      2, plan.tp * plan.cp * plan.dp * (plan.pp - 1));
}

// DualPipe: stage s and its mirror pp-1-s sum the gradients of their two copies of each chunk
// (data_parallel.cc's dualpipe_mirror_grad_all_reduce), once per step; ZeRO-2/3 sum shards.
double Estimator::dualpipe_mirror_s(const Plan& plan, std::int64_t s) const {
  const StageParameters sp = parameters_on_stage(model_, plan, s);
  const double shard = plan.zero_stage >= 2 ? d(plan.zero_shard_ranks()) : 1.0;
  // The two ranks (stage s's and its mirror's, pp the outermost axis of the placement) share a
  // node or not; group_time_s's stride rule would put any pair more than half a node apart on
  // two nodes.
  const std::int64_t per_stage = plan.tp * plan.cp * plan.dp, g = cluster_.gpus_per_node;
  const bool same_node = g > 0 && (s * per_stage) / g == ((plan.pp - 1 - s) * per_stage) / g;
  return group_time_s(Collective::kAllReduce,
                      std::llround(sp.total() / shard * grad_bytes_per_element(plan)), 2,
                      same_node ? 1 : std::max<std::int64_t>(g, 1));
}

// Offload per step on stage s. ZeRO-Offload (Ren et al. 2021): gradients to the host, the CPU
// step (host DRAM bound, the node's bandwidth shared by its GPUs), weights back, none of it
// overlapped. optimizer+params (ZeRO-Infinity, Rajbhandari et al. 2021, sec. 6): the parameter
// shards stream in before each gather and the gradient shards out after each backward,
// prefetched and overlapped with the stage's compute, so only what outlasts it shows; NVMe
// reads and PCIe copies are pipelined (the slower sets the pace); the optimizer states' NVMe
// reads and writes around the CPU step are not overlapped. NVMe bandwidth is the node's,
// shared by its GPUs.
double Estimator::offload_s(const Plan& plan, std::int64_t s, const StageTimes& st) const {
  const OffloadTraffic off = offload_traffic_on_stage(model_, plan, s);
  const double gpus_per_node = d(std::min(cluster_.gpus_per_node, plan.world_size()));
  const double pcie = cluster_.pcie_bytes_per_s;
  const double nvme = cluster_.nvme_bytes_per_s_per_node / gpus_per_node;
  const double host_step_s =
      off.host_memory_bytes / (cluster_.host_memory_bytes_per_s_per_node / gpus_per_node);
  const double state_io_s =
      nvme > 0 ? (off.nvme_read_bytes - off.nvme_param_read_bytes + off.nvme_write_bytes) / nvme
               : 0.0;
  if (plan.offload == Offload::kOptimizer)
    return (off.device_to_host_bytes + off.host_to_device_bytes) / pcie + host_step_s + state_io_s;
  const double M = d(plan.num_micro_batches());
  const double stream_s =
      std::max(off.param_stream_bytes / pcie, nvme > 0 ? off.nvme_param_read_bytes / nvme : 0.0);
  const double grads_s = off.device_to_host_bytes / pcie;
  return std::max(0.0, stream_s - M * (st.fwd + st.bwd)) + std::max(0.0, grads_s - M * st.bwd) +
         host_step_s + state_io_s;
}

Estimator::StageTail Estimator::stage_tail(const Plan& plan, std::int64_t s, const StageTimes& st,
                                           const MicroBatchTimes& mb, const DeviceRates& r) const {
  StageTail tail;
  dp_times(plan, s, st, mb, r, tail);
  const double tied = tied_embedding_s(plan, s);
  tail.dp_comm_s += tied;
  tail.dp_exposed_s += tied;
  if (plan.offload != Offload::kNone) {
    tail.offload_s = offload_s(plan, s, st);
  } else {
    tail.optimizer_s = task_time_s(optimizer_task(model_, plan, s), r);
  }
  return tail;
}

// ---------------------------------------------------------------------------------------------
// The estimate

// Throughput and FLOPs rates from the step time.
void Estimator::fill_rates(const Plan& plan, Estimate& e) {
  const StepFlops flops = step_flops_cached(plan);
  const double gpus = d(plan.world_size());
  e.tokens_per_s = d(plan.global_batch_size) * d(model_.seq_len) / e.step_time_s;
  e.model_tflops_per_gpu = flops.model / e.step_time_s / gpus / 1e12;
  e.hardware_tflops_per_gpu = flops.hardware / e.step_time_s / gpus / 1e12;
  const double peak = cluster_.gpu.peak_flops_per_s(plan.precision);
  e.mfu = peak > 0 ? e.model_tflops_per_gpu * 1e12 / peak : 0.0;
}

void Estimator::fill_memory(const Plan& plan, Estimate& e) const {
  e.peak_memory_bytes = peak_memory(plan, &e.peak_stage, &e.peak_memory);
  if (hardware_) e.peak_memory.runtime_bytes = hardware_->baseline_memory_bytes;
  const double gpus_per_node = d(std::min(cluster_.gpus_per_node, plan.world_size()));
  e.host_memory_per_node_bytes = (e.peak_memory.host_optimizer_bytes +
                                  e.peak_memory.host_activation_bytes +
                                  e.peak_memory.host_param_bytes) *
                                 gpus_per_node;
  e.nvme_per_node_bytes = e.peak_memory.nvme_bytes * gpus_per_node;
  if (plan.offload != Offload::kNone) {
    const OffloadTraffic off = offload_traffic_on_stage(model_, plan, e.peak_stage);
    e.pcie_bytes_per_step = off.device_to_host_bytes + off.host_to_device_bytes;
    e.nvme_bytes_per_step = off.nvme_read_bytes + off.nvme_write_bytes;
  }
}

Estimate Estimator::estimate(const Plan& plan) {
  Estimate e;
  const MicroBatchTimes& mb = micro_batch_times(plan);
  const DeviceRates& r = rates(plan.precision);
  const CostedStages stages = costed_stages(plan, mb);
  pipeline(plan, stages, e);
  // The stage whose data-parallel, optimizer and offload work takes longest ends the step.
  double worst_tail = 0;
  for (std::size_t i = 0; i < stages.stages.size(); ++i) {
    const StageTail tail = stage_tail(plan, stages.stages[i], stages.times[i], mb, r);
    const double t = tail.total_s();
    if (t >= worst_tail) {
      worst_tail = t;
      e.dp_comm_s = tail.dp_comm_s;
      e.dp_exposed_s = tail.dp_exposed_s;
      e.optimizer_s = tail.optimizer_s;
      e.offload_s = tail.offload_s;
    }
  }
  e.step_time_s = e.pipeline_s + worst_tail;
  fill_rates(plan, e);
  fill_memory(plan, e);
  return e;
}

}  // namespace trainplan
