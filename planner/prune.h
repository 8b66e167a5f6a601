// The planner's pruning rules. A rule judges what one axis of the search has fixed so far (the
// context-parallel degree; a tp x cp x pp layout; a pipeline schedule; a whole candidate; its
// estimated memory) and, when it rejects, gives a reason code and a message that names the field
// and its value. The search counts rejections by code (Rejections); reject_category() is the
// text the report prints for a code. Tested by tests/planner/prune_test.cc.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/model_spec.h"
#include "core/plan.h"
#include "planner/estimate.h"

namespace trainplan {

// Why a configuration was rejected. Order is the rules' order within each axis.
enum class RejectReason : std::uint8_t {
  // The context-parallel degree (cp > 1).
  kCpAboveMax,
  kCpForShortSequences,
  kCpNeedsFusedAttention,
  kCpDoesNotDivideSeqLen,
  // A tp x cp x pp layout.
  kTpLargerThanNode,
  kBatchNotDivisibleByDp,
  kTpDoesNotDivideHeads,
  kTpDoesNotDivideKvHeads,
  kTpDoesNotDivideFfn,
  kLayersAcrossStages,
  // The interleaved schedule for a micro-batch count.
  kInterleavedMicroBatches,
  // DualPipe for pp stages and a micro-batch count.
  kDualPipeOddPp,
  kDualPipeTwoStages,
  kDualPipeMicroBatches,
  // A candidate.
  kSequenceParallelVsSeqLen,
  kMemory,
  kFullRecomputeNotNeeded,
  kHostMemory,
  kNvmeCapacity,
  // A candidate whose simulated peak exceeds the usable memory (plan_training's refinement).
  kMemorySimulated,
};
inline constexpr std::size_t kRejectReasonCount =
    static_cast<std::size_t>(RejectReason::kMemorySimulated) + 1;

// The category the report prints for a reason ("tp vs heads", "memory", ...).
std::string_view reject_category(RejectReason reason);

// Rejected configurations counted by reason, with the first message of each as its example.
class Rejections {
 public:
  // Counts `configurations` under `reason`; `message()` is called only for a reason's first
  // rejection (searches reject millions, and a message is a string to build).
  template <typename MakeMessage>
  void add(RejectReason reason, std::int64_t configurations, MakeMessage&& message) {
    const auto i = static_cast<std::size_t>(reason);
    count_[i] += configurations;
    if (!seen_[i]) {
      seen_[i] = true;
      example_[i] = message();
    }
  }
  bool has(RejectReason reason) const { return seen_[static_cast<std::size_t>(reason)]; }
  std::int64_t count(RejectReason reason) const { return count_[static_cast<std::size_t>(reason)]; }
  const std::string& example(RejectReason reason) const {
    return example_[static_cast<std::size_t>(reason)];
  }
  std::vector<RejectReason> reasons() const;  // those with a rejection, in enum order
  std::int64_t total() const;

 private:
  std::array<std::int64_t, kRejectReasonCount> count_{};
  std::array<bool, kRejectReasonCount> seen_{};
  std::array<std::string, kRejectReasonCount> example_;
};

// A named rule over the facts of one axis.
template <typename Facts>
struct PruneRule {
  RejectReason reason;
  bool (*rejects)(const Facts&);
  std::string (*message)(const Facts&);
};

// The first rule of `rules` that rejects `facts`, or nullptr.
template <typename Facts>
const PruneRule<Facts>* first_rejecting(std::span<const PruneRule<Facts>> rules,
                                        const Facts& facts) {
  for (const PruneRule<Facts>& rule : rules)
    if (rule.rejects(facts)) return &rule;
  return nullptr;
}

// A context-parallel degree cp > 1, judged before the pipeline axis.
struct CpFacts {
  const ModelSpec* model = nullptr;
  std::int64_t cp = 1;
  std::int64_t max_cp = 0;          // 0: no bound
  std::int64_t min_cp_seq_len = 0;  // tokens below which CP is not searched
  AttentionImpl attention = AttentionImpl::kFused;
};
std::span<const PruneRule<CpFacts>> cp_rules();

// A tp x cp x pp layout with dp = gpus / (tp * cp * pp), before its inner axes.
struct LayoutFacts {
  const ModelSpec* model = nullptr;
  std::int64_t gpus_per_node = 1;
  bool allow_cross_node_tp = false;
  std::int64_t tp = 1, cp = 1, pp = 1, dp = 1;
  std::int64_t global_batch_size = 1;  // sequences per step
};
std::span<const PruneRule<LayoutFacts>> layout_rules();

// The interleaved schedule for pp stages and a count of micro-batches per replica.
struct InterleavedFacts {
  std::int64_t pp = 1;
  std::int64_t micro_batches = 1;
};
std::span<const PruneRule<InterleavedFacts>> interleaved_rules();

// DualPipe for pp stages and a count of micro-batches per replica (deepseek-ai/DualPipe's
// DualPipe.step asserts both; validate_plan gives the same rules).
struct DualPipeFacts {
  std::int64_t pp = 1;
  std::int64_t micro_batches = 1;
};
std::span<const PruneRule<DualPipeFacts>> dualpipe_rules();

// A fully specified candidate, before its memory is estimated.
struct CandidateFacts {
  const ModelSpec* model = nullptr;
  const Plan* plan = nullptr;
};
std::span<const PruneRule<CandidateFacts>> candidate_rules();

// A candidate's device memory: its peak stage against the usable bytes.
struct MemoryFacts {
  double peak_bytes = 0;
  std::int64_t peak_stage = 0;
  double usable_bytes = 0;
  double capacity_bytes = 0;
  double headroom = 0;  // fraction of capacity kept free
};
std::span<const PruneRule<MemoryFacts>> memory_rules();

// A candidate that fits: full recompute is rejected when recompute none fits too (faster).
struct RecomputeFacts {
  const Estimator* estimator = nullptr;
  const Plan* plan = nullptr;
  double usable_bytes = 0;
};
std::span<const PruneRule<RecomputeFacts>> recompute_rules();

// A candidate with optimizer states offloaded: the host memory one node needs.
struct HostMemoryFacts {
  bool offload = false;
  double need_bytes = 0;      // per node
  double usable_bytes = 0;    // per node, after headroom
  double capacity_bytes = 0;  // per node
  double nvme_need_bytes = 0;      // states on NVMe per node (offload_device nvme)
  double nvme_capacity_bytes = 0;  // per node (ClusterSpec::nvme_bytes_per_node)
  bool params = false;             // parameters and gradients offloaded too (optimizer+params)
};
std::span<const PruneRule<HostMemoryFacts>> host_memory_rules();

}  // namespace trainplan
