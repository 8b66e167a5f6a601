// The planner's candidate generator: every dp x tp x cp x pp x ep x micro-batch x schedule (x
// virtual stages) x ZeRO stage (x hybrid shard size) x recompute x sequence-parallel
// configuration for a GPU count, in a fixed order, with the axis rules of planner/prune.h
// pruning whole subtrees where an outer axis already decides. It evaluates nothing: the search
// (planner.cc) is the sink that estimates and ranks. Tested by tests/planner/search_test.cc.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "core/cluster_spec.h"
#include "core/model_spec.h"
#include "core/plan.h"
#include "planner/planner.h"
#include "planner/prune.h"

namespace trainplan {

// What one search enumerates.
struct SearchSpace {
  const ModelSpec* model = nullptr;
  const ClusterSpec* cluster = nullptr;
  const PlannerOptions* options = nullptr;
  std::int64_t gpus = 0;
  std::int64_t global_batch_size = 0;  // sequences per step (already defaulted)
  bool offload = false;                // optimizer states on the host (ZeRO stages 1-3 only)
  // With offload: also the parameters and gradients (ZeRO-3 only), and where the states live.
  OffloadTier tier{Offload::kOptimizer, OffloadDevice::kCpu};
};

// Receives what the generator enumerates, in order.
class CandidateSink {
 public:
  virtual ~CandidateSink() = default;
  // Before each tp x cp x pp layout; false stops the enumeration (the evaluation bound).
  virtual bool begin_layout() = 0;
  // `configurations` configurations a rule rejected together at an outer axis; `message` says
  // why (call it only when the text is needed).
  virtual void pruned(RejectReason reason, std::int64_t configurations,
                      const std::function<std::string()>& message) = 0;
  // One fully specified candidate, which the sink may take; false stops the enumeration.
  virtual bool candidate(Plan& plan) = 0;
};

void generate_candidates(const SearchSpace& space, CandidateSink& sink);

}  // namespace trainplan
