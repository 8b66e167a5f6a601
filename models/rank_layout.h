// Rank placement: which (tp, dp, pp) coordinate each global rank holds, and the process groups
// that follow. Megatron-LM's default puts TP innermost (consecutive ranks, so a TP group sits in
// one node), then DP, with PP outermost. The order is configurable. Shared by the simulator and
// by the executor (which splits MPI/NCCL communicators with group_color).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "models/plan.h"
#include "models/status.h"

namespace trainplan {

enum class Axis { kTp = 0, kDp = 1, kPp = 2, kEp = 3 };
std::string_view to_string(Axis a);

struct RankCoord {
  std::int64_t tp = 0, dp = 0, pp = 0;
};

class RankLayout {
 public:
  // order: three axes innermost first, e.g. "tp,dp,pp" (the default).
  static Result<RankLayout> make(const Plan& plan, std::string_view order = "tp,dp,pp");

  std::int64_t world_size() const { return size_[0] * size_[1] * size_[2]; }
  std::int64_t size(Axis a) const;
  RankCoord coord(std::int64_t rank) const;
  std::int64_t rank(const RankCoord& c) const;
  // Index of `rank` inside its group along `axis` (0..size-1).
  std::int64_t index_in_group(Axis axis, std::int64_t rank) const;
  // The global ranks of `rank`'s group along `axis`, ordered by their index in the group.
  // kEp: the ep consecutive DP replicas that share one set of experts.
  std::vector<std::int64_t> group(Axis axis, std::int64_t rank) const;
  // A number that is the same for exactly the members of one group (MPI_Comm_split's color).
  std::int64_t group_color(Axis axis, std::int64_t rank) const;
  std::string order_string() const;

 private:
  std::array<std::int64_t, 3> size_{1, 1, 1};   // indexed by Axis tp, dp, pp
  std::array<Axis, 3> order_{Axis::kTp, Axis::kDp, Axis::kPp};  // innermost first
  std::int64_t ep_ = 1;
};

// Number of distinct nodes the given ranks occupy, ranks filling nodes of `gpus_per_node` in order.
std::int64_t nodes_spanned(const std::vector<std::int64_t>& ranks, std::int64_t gpus_per_node);

}  // namespace trainplan
