// Layouts the report places beside the planner's pick, costed the same way (the analytical
// estimate, then the event simulator when `plan` refines), and the cause of "nothing fits":
//  - usual_layout: what a practitioner tries first (Megatron-LM's recipe: tensor parallelism
//    inside a node up to 8, pipeline parallelism across nodes only once TP fills a node, the
//    distributed optimizer, i.e. ZeRO-1, one sequence per micro-batch, 1F1B, sequence
//    parallelism with TP, recompute only when memory needs it; Narayanan et al. 2021,
//    arXiv:2104.04473 sec. 3.3 "Takeaway #1/#2");
//  - evaluate_layout: any plan (`plan --baseline PLAN.json`, the user's own layout);
//  - least_memory_layout: the configuration of the search that needs the least memory, whose
//    breakdown names what does not fit (model states, activations or buffers).
// Tested by tests/planner/reference_test.cc.
#pragma once

#include <optional>
#include <string>

#include "core/cost/cost_model.h"
#include "planner/planner.h"

namespace trainplan {

// A layout shown beside the pick: its label ("usual", "baseline"), the candidate when it could
// be costed, and otherwise why not (it does not fit in memory, it does not fit the model).
struct ReferenceLayout {
  std::string label;
  std::optional<Candidate> candidate;
  std::string why_not;
};

// The plan costed as the planner costs its candidates: checked against the model and the
// cluster, its peak memory against usable memory, estimated, then refined when `refine` is
// given. An error when the plan does not fit the model or the cluster (the message names the
// field); a candidate-less ReferenceLayout with the reason when it does not fit in memory.
Result<ReferenceLayout> evaluate_layout(const ModelSpec& model, const ClusterSpec& cluster,
                                        const PlannerOptions& options, const Plan& plan,
                                        std::string label, const RefineFn& refine = {});

// The usual layout for `global_batch` sequences per step (see above), or why none fits.
ReferenceLayout usual_layout(const ModelSpec& model, const ClusterSpec& cluster,
                             const PlannerOptions& options, std::int64_t global_batch,
                             const RefineFn& refine = {});

// What memory holds in the least-memory configuration: the largest of model states (weights,
// gradients, optimizer states), activations and buffers.
struct MemoryCause {
  std::string what;           // "model states", "activations" or "buffers"
  std::string plan;           // describe() of the least-memory configuration
  MemoryBreakdown breakdown;  // its peak stage's
  double peak_bytes = 0;
  // Simulated: configurations did fit by the estimate, but the refinement's simulation put
  // every one over the usable memory (`dropped` of them); `plan` is the one with the lowest
  // simulated peak. Otherwise the least-memory configuration by the estimate.
  bool simulated = false;
  std::int64_t dropped = 0;
};
std::optional<MemoryCause> least_memory_cause(const ModelSpec& model, const ClusterSpec& cluster,
                                              const PlannerOptions& options,
                                              std::int64_t global_batch);
// The cause when the refinement dropped every candidate that fit by the estimate (`search`
// has a least_simulated_drop), else nothing.
std::optional<MemoryCause> simulated_memory_cause(const PlanSearch& search);

}  // namespace trainplan
