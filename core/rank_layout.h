// Rank placement: which (tp, cp, dp, pp) coordinate each global rank holds, and the process
// groups that follow. Megatron-Core's default order is tp-cp-ep-dp-pp, innermost first: TP on
// consecutive ranks (so a TP group sits in one node), then CP (a CP group of cp <= 8/tp ranks
// shares the node too), then DP, with PP outermost. The order is configurable. Shared by the
// simulator and by the executor (which splits MPI/NCCL communicators with group_color).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/plan.h"
#include "core/status.h"

namespace trainplan {

// kEp: the ranks that exchange tokens for one set of experts. Carved (Plan::expert_layout): the
// ep consecutive DP replicas at the same tp and cp coordinates. Folded: Megatron-Core's expert
// decomposition of each pipeline stage's ranks (below). kExpertTp: the ranks one expert's weights
// are split over (carved: the tp group). kExpertDp: the ranks holding the same experts, which sum
// their gradients (carved: the dp/ep replicas at the same place in their ep groups, times the cp
// ranks, indexed (dp/ep)*cp + cp).
// Folded (MoE parallel folding; Megatron-Core's parallel_state.initialize_model_parallel since
// core_v0.10.0): a rank's index among the ranks of its pipeline stage, in rank order, is
// divided as expert_tp x ep x expert-dp, innermost first (the expert RankGenerator's
// tp-ep-dp order); with the default order tp,cp,dp,pp that index is rank mod tp*cp*dp.
// kDpCp: the ranks that hold the same dense weights, dp replicas x cp context-parallel ranks
// (Megatron-Core's data-parallel group with context parallel): dense gradients are summed and
// ZeRO-sharded over it. kZeroShard: the run of Plan::zero_shard_ranks() consecutive members of
// the kDpCp group (by index) that ZeRO shards over; the whole kDpCp group without hybrid
// sharding. kZeroReplica: the members of the kDpCp group at the same place in every such run,
// which hold the same shard.
enum class Axis { kTp = 0, kDp = 1, kPp = 2, kEp = 3, kCp = 4, kDpCp = 5, kZeroShard = 6,
                  kZeroReplica = 7, kExpertTp = 8, kExpertDp = 9 };
std::string_view to_string(Axis a);

struct RankCoord {
  std::int64_t tp = 0, dp = 0, pp = 0, cp = 0;
};

class RankLayout {
 public:
  // order: the axes innermost first, e.g. "tp,cp,dp,pp" (the default). An order that names only
  // tp, dp and pp (the orders written before context parallelism) places cp right after tp.
  static Result<RankLayout> make(const Plan& plan, std::string_view order = "tp,cp,dp,pp");

  std::int64_t world_size() const { return size_[0] * size_[1] * size_[2] * size_[3]; }
  std::int64_t size(Axis a) const;
  RankCoord coord(std::int64_t rank) const;
  std::int64_t rank(const RankCoord& c) const;
  // Index of `rank` inside its group along `axis` (0..size-1).
  std::int64_t index_in_group(Axis axis, std::int64_t rank) const;
  // The global ranks of `rank`'s group along `axis`, ordered by their index in the group
  // (kDpCp: cp innermost, then dp, i.e. index dp*cp_size + cp).
  std::vector<std::int64_t> group(Axis axis, std::int64_t rank) const;
  // A number that is the same for exactly the members of one group (MPI_Comm_split's color).
  std::int64_t group_color(Axis axis, std::int64_t rank) const;
  std::string order_string() const;

 private:
  // Sizes and coordinates are indexed by the four placement axes: tp 0, dp 1, pp 2, cp 3.
  static std::size_t slot(Axis a);
  // Folded: the rank's index among its stage's ranks (in rank order) and the rank at index i of
  // stage `pp`; the expert coordinates (expert tp, ep, expert dp) of that index.
  std::int64_t stage_index(std::int64_t rank) const;
  std::int64_t stage_rank(std::int64_t pp, std::int64_t index) const;
  std::array<std::int64_t, 3> expert_coord(std::int64_t rank) const;
  std::array<std::int64_t, 4> size_{1, 1, 1, 1};
  std::array<Axis, 4> order_{Axis::kTp, Axis::kCp, Axis::kDp, Axis::kPp};  // innermost first
  std::int64_t ep_ = 1;
  bool folded_ = false;          // Plan::expert_layout folded
  std::int64_t expert_tp_ = 1;   // Plan::expert_tp_size()
  std::int64_t zero_shard_ = 1;  // Plan::zero_shard_ranks()
};

// Number of distinct nodes the given ranks occupy, ranks filling nodes of `gpus_per_node` in order.
std::int64_t nodes_spanned(const std::vector<std::int64_t>& ranks, std::int64_t gpus_per_node);

}  // namespace trainplan
