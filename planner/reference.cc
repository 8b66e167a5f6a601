// Reference layouts and the cause of "nothing fits"; see reference.h.
#include "planner/reference.h"

#include <algorithm>
#include <cstdio>
#include <utility>
#include <vector>

namespace trainplan {

namespace {

double usable_bytes(const ClusterSpec& c, const PlannerOptions& o) {
  return c.gpu.hbm_bytes * (1.0 - o.memory_headroom);
}

std::string gb(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GB", bytes / 1e9);
  return buf;
}

// The plan's structural checks, the planner's own candidate rules among them.
Status check_shape(const ModelSpec& m, const ClusterSpec& c, const Plan& p) {
  TRAINPLAN_RETURN_IF_ERROR(validate_plan(p));
  TRAINPLAN_RETURN_IF_ERROR(check_plan_fits_model(p, m));
  TRAINPLAN_RETURN_IF_ERROR(check_plan_world_size(p, c.total_gpus()));
  const CandidateFacts facts{&m, &p};
  if (const auto* rule = first_rejecting(candidate_rules(), facts))
    return Status::Error(rule->message(facts), ExitCode::kInfeasible);
  return Status::Ok();
}

// Expert parallelism for a MoE model: the largest power of two up to a node that divides both
// the experts and dp (Mixtral and DeepSeek recipes place experts within a node first); 1 dense.
std::int64_t usual_ep(const ModelSpec& m, const ClusterSpec& c, std::int64_t dp) {
  if (!m.is_moe()) return 1;
  std::int64_t ep = 1;
  while (ep * 2 <= c.gpus_per_node && dp % (ep * 2) == 0 && m.num_experts % (ep * 2) == 0) ep *= 2;
  return ep;
}

// (tp, pp) in the order a practitioner tries them: TP 1, 2, 4, 8 inside a node with pp = 1,
// then the largest TP with pp = 2, 4, ... (Narayanan et al. 2021, Takeaways #1 and #2).
std::vector<std::pair<std::int64_t, std::int64_t>> usual_shapes(const ClusterSpec& c) {
  std::vector<std::pair<std::int64_t, std::int64_t>> out;
  const std::int64_t gpus = c.total_gpus(), max_tp = std::min<std::int64_t>(8, c.gpus_per_node);
  std::int64_t tp = 1;
  for (; tp <= max_tp && gpus % tp == 0; tp *= 2) out.emplace_back(tp, 1);
  tp /= 2;
  for (std::int64_t pp = 2; tp * pp <= gpus; pp *= 2)
    if (gpus % (tp * pp) == 0) out.emplace_back(tp, pp);
  return out;
}

}  // namespace

Result<ReferenceLayout> evaluate_layout(const ModelSpec& model, const ClusterSpec& cluster,
                                        const PlannerOptions& options, const Plan& plan,
                                        std::string label, const RefineFn& refine) {
  TRAINPLAN_RETURN_IF_ERROR(check_shape(model, cluster, plan));
  ReferenceLayout out{std::move(label), std::nullopt, ""};
  Estimator est(model, cluster, options.hardware);
  const double usable = usable_bytes(cluster, options);
  Candidate cand;
  cand.plan = plan;
  cand.estimate = est.estimate(plan);
  if (cand.estimate.peak_memory_bytes > usable) {
    out.why_not = describe(plan) + " needs " + gb(cand.estimate.peak_memory_bytes) +
                  " per GPU; " + gb(usable) + " are usable";
    return out;
  }
  if (refine) {
    auto sim = refine(plan);
    if (!sim.ok()) return sim.status();
    cand.estimate = *sim;
    cand.simulated = true;
  }
  cand.comm = comm_volume_on_stage(model, plan, cand.estimate.peak_stage);
  out.candidate = std::move(cand);
  return out;
}

ReferenceLayout usual_layout(const ModelSpec& model, const ClusterSpec& cluster,
                             const PlannerOptions& options, std::int64_t global_batch,
                             const RefineFn& refine) {
  Estimator est(model, cluster, options.hardware);
  const double usable = usable_bytes(cluster, options);
  for (const auto& [tp, pp] : usual_shapes(cluster)) {
    const std::int64_t dp = cluster.total_gpus() / (tp * pp);
    Plan p = plan_with_options(options, tp, 1, pp, dp, global_batch);
    p.ep = usual_ep(model, cluster, dp);
    p.zero_stage = dp > 1 ? 1 : 0;
    p.sequence_parallel = tp > 1;
    // Recompute only when memory needs it: none, then selective, then full.
    for (Recompute r : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
      p.recompute = r;
      if (!check_shape(model, cluster, p).ok() || est.peak_memory_bytes(p) > usable) continue;
      auto ref = evaluate_layout(model, cluster, options, p, "usual", refine);
      if (ref.ok() && ref->candidate) return std::move(*ref);
      break;
    }
  }
  return {"usual", std::nullopt,
          "no layout of TP up to a node, PP across nodes and ZeRO-1 fits in memory"};
}

namespace {
// The largest of model states, activations and buffers in `b`.
std::string largest_part(const MemoryBreakdown& b) {
  const double states = b.weights_bytes + b.gradients_bytes + b.optimizer_bytes;
  return states >= b.activations_bytes && states >= b.buffers_bytes ? "model states"
         : b.activations_bytes >= b.buffers_bytes                   ? "activations"
                                                                    : "buffers";
}
}  // namespace

std::optional<MemoryCause> least_memory_cause(const ModelSpec& model, const ClusterSpec& cluster,
                                              const PlannerOptions& options,
                                              std::int64_t global_batch) {
  Estimator est(model, cluster, options.hardware);
  std::optional<MemoryCause> best;
  const std::int64_t gpus = cluster.total_gpus();
  // Every memory saving at once: ZeRO-3 over all ranks, full recompute, one sequence per
  // micro-batch, over the TP x PP shapes (more TP or PP is not always less memory: the
  // pipeline's in-flight activations grow with pp).
  for (std::int64_t tp = 1; tp <= cluster.gpus_per_node && gpus % tp == 0; tp *= 2) {
    for (std::int64_t pp = 1; tp * pp <= gpus; pp *= 2) {
      if (gpus % (tp * pp) != 0) continue;
      const std::int64_t dp = gpus / (tp * pp);
      Plan p = plan_with_options(options, tp, 1, pp, dp, global_batch);
      p.ep = usual_ep(model, cluster, dp);
      p.zero_stage = dp > 1 ? 3 : 0;
      p.sequence_parallel = tp > 1;
      p.recompute = Recompute::kFull;
      if (!check_shape(model, cluster, p).ok()) continue;
      const Estimate e = est.estimate(p);
      if (best && e.peak_memory_bytes >= best->peak_bytes) continue;
      best = MemoryCause{"", describe(p), e.peak_memory, e.peak_memory_bytes};
    }
  }
  if (!best) return best;
  best->what = largest_part(best->breakdown);
  return best;
}

std::optional<MemoryCause> simulated_memory_cause(const PlanSearch& search) {
  if (!search.least_simulated_drop || !search.ranked.empty()) return std::nullopt;
  const PlanSearch::SimulatedDrop& d = *search.least_simulated_drop;
  MemoryCause cause{largest_part(d.breakdown), d.plan, d.breakdown, d.peak_bytes};
  cause.simulated = true;
  cause.dropped = search.rejections.count(RejectReason::kMemorySimulated);
  return cause;
}

}  // namespace trainplan
