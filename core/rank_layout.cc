// Rank placement; see rank_layout.h. Tested by tests/core/rank_layout_test.cc.
#include "core/rank_layout.h"

#include <set>

namespace trainplan {

std::string_view to_string(Axis a) {
  switch (a) {
    case Axis::kTp: return "tp";
    case Axis::kDp: return "dp";
    case Axis::kPp: return "pp";
    case Axis::kEp: return "ep";
    case Axis::kCp: return "cp";
    case Axis::kDpCp: return "dp_cp";
    case Axis::kZeroShard: return "zero_shard";
    case Axis::kZeroReplica: return "zero_replica";
    case Axis::kExpertTp: return "expert_tp";
    case Axis::kExpertDp: return "expert_dp";
  }
  return "?";
}

std::size_t RankLayout::slot(Axis a) {
  switch (a) {
    case Axis::kTp: return 0;
    case Axis::kDp: return 1;
    case Axis::kPp: return 2;
    case Axis::kCp: return 3;
    case Axis::kEp:
    case Axis::kDpCp:
    case Axis::kZeroShard:
    case Axis::kZeroReplica:
    case Axis::kExpertTp:
    case Axis::kExpertDp: break;
  }
  TRAINPLAN_CHECK(false) << "axis " << to_string(a) << " is not a placement axis";
  return 0;
}

Result<RankLayout> RankLayout::make(const Plan& plan, std::string_view order) {
  RankLayout l;
  l.size_ = {plan.tp, plan.dp, plan.pp, plan.cp};
  l.ep_ = plan.ep;
  l.folded_ = plan.expert_layout == ExpertLayout::kFolded;
  l.expert_tp_ = plan.expert_tp_size();
  l.zero_shard_ = plan.zero_shard_ranks();
  std::vector<Axis> axes;
  bool good = true;
  std::string token;
  auto flush = [&] {
    if (token.empty()) return;
    if (token == "tp") axes.push_back(Axis::kTp);
    else if (token == "cp") axes.push_back(Axis::kCp);
    else if (token == "dp") axes.push_back(Axis::kDp);
    else if (token == "pp") axes.push_back(Axis::kPp);
    else good = false;
    token.clear();
  };
  for (char c : order) {
    if (c == ',' || c == '-') flush();
    else token += c;
  }
  flush();
  std::set<Axis> seen(axes.begin(), axes.end());
  good = good && seen.size() == axes.size() && seen.count(Axis::kTp) && seen.count(Axis::kDp) &&
         seen.count(Axis::kPp) && (axes.size() == 3 || axes.size() == 4);
  if (!good)
    return Status::Error("rank order \"" + std::string(order) +
                         "\": expected the axes tp, cp, dp, pp once each, innermost first "
                         "(e.g. \"tp,cp,dp,pp\"; cp may be left out: it then follows tp)");
  if (axes.size() == 3) {
    std::size_t i = 0;
    while (axes[i] != Axis::kTp) ++i;
    axes.insert(axes.begin() + static_cast<std::ptrdiff_t>(i) + 1, Axis::kCp);
  }
  for (std::size_t i = 0; i < 4; ++i) l.order_[i] = axes[i];
  return l;
}

std::int64_t RankLayout::size(Axis a) const {
  if (a == Axis::kEp) return ep_;
  if (a == Axis::kExpertTp) return expert_tp_;
  if (a == Axis::kExpertDp)
    return folded_ ? size_[slot(Axis::kTp)] * size_[slot(Axis::kCp)] * size_[slot(Axis::kDp)] /
                         (expert_tp_ * ep_)
                   : size_[slot(Axis::kDp)] / ep_ * size_[slot(Axis::kCp)];
  if (a == Axis::kDpCp) return size_[slot(Axis::kDp)] * size_[slot(Axis::kCp)];
  if (a == Axis::kZeroShard) return zero_shard_;
  if (a == Axis::kZeroReplica) return size(Axis::kDpCp) / zero_shard_;
  return size_[slot(a)];
}

RankCoord RankLayout::coord(std::int64_t rank) const {
  std::array<std::int64_t, 4> c{};
  for (Axis a : order_) {
    const std::size_t i = slot(a);
    c[i] = rank % size_[i];
    rank /= size_[i];
  }
  return {c[0], c[1], c[2], c[3]};
}

std::int64_t RankLayout::rank(const RankCoord& rc) const {
  const std::array<std::int64_t, 4> c{rc.tp, rc.dp, rc.pp, rc.cp};
  std::int64_t r = 0;
  for (int k = 3; k >= 0; --k) {
    const std::size_t i = slot(order_[static_cast<std::size_t>(k)]);
    r = r * size_[i] + c[i];
  }
  return r;
}

// The ranks that share a pp coordinate, in rank order: with the axes inside pp (in the order)
// spanning `inner` and those outside it `outer`, rank = in + inner * (pp + pp_size * out), so the
// index among them is in + inner * out.
std::int64_t RankLayout::stage_index(std::int64_t r) const {
  std::int64_t inner = 1;
  for (Axis a : order_) {
    if (a == Axis::kPp) break;
    inner *= size_[slot(a)];
  }
  const std::int64_t pp_size = size_[slot(Axis::kPp)];
  return r % inner + inner * (r / inner / pp_size);
}

std::int64_t RankLayout::stage_rank(std::int64_t pp, std::int64_t index) const {
  std::int64_t inner = 1;
  for (Axis a : order_) {
    if (a == Axis::kPp) break;
    inner *= size_[slot(a)];
  }
  const std::int64_t pp_size = size_[slot(Axis::kPp)];
  return index % inner + inner * (pp + pp_size * (index / inner));
}

std::array<std::int64_t, 3> RankLayout::expert_coord(std::int64_t r) const {
  const std::int64_t i = stage_index(r);
  return {i % expert_tp_, i / expert_tp_ % ep_, i / (expert_tp_ * ep_)};
}

std::int64_t RankLayout::index_in_group(Axis axis, std::int64_t r) const {
  const RankCoord c = coord(r);
  if (folded_ && (axis == Axis::kEp || axis == Axis::kExpertTp || axis == Axis::kExpertDp)) {
    const std::array<std::int64_t, 3> e = expert_coord(r);
    return axis == Axis::kExpertTp ? e[0] : axis == Axis::kEp ? e[1] : e[2];
  }
  switch (axis) {
    case Axis::kTp: return c.tp;
    case Axis::kDp: return c.dp;
    case Axis::kPp: return c.pp;
    case Axis::kCp: return c.cp;
    case Axis::kExpertTp: return c.tp;
    case Axis::kExpertDp: return (c.dp / ep_) * size_[slot(Axis::kCp)] + c.cp;
    case Axis::kEp: return c.dp % ep_;
    case Axis::kDpCp: return c.dp * size_[slot(Axis::kCp)] + c.cp;
    case Axis::kZeroShard: return index_in_group(Axis::kDpCp, r) % zero_shard_;
    case Axis::kZeroReplica: return index_in_group(Axis::kDpCp, r) / zero_shard_;
  }
  return 0;
}

std::vector<std::int64_t> RankLayout::group(Axis axis, std::int64_t r) const {
  const RankCoord c = coord(r);
  std::vector<std::int64_t> out;
  const std::int64_t n = size(axis);
  const std::int64_t cps = size_[slot(Axis::kCp)];
  const std::int64_t at = index_in_group(Axis::kDpCp, r);
  if (folded_ && (axis == Axis::kEp || axis == Axis::kExpertTp || axis == Axis::kExpertDp)) {
    const std::array<std::int64_t, 3> e = expert_coord(r);
    for (std::int64_t i = 0; i < n; ++i) {
      std::array<std::int64_t, 3> m = e;
      m[axis == Axis::kExpertTp ? 0 : axis == Axis::kEp ? 1 : 2] = i;
      out.push_back(stage_rank(c.pp, m[0] + expert_tp_ * (m[1] + ep_ * m[2])));
    }
    return out;
  }
  for (std::int64_t i = 0; i < n; ++i) {
    RankCoord m = c;
    // The member's index in the kDpCp group, for the axes inside it.
    auto dp_cp_member = [&](std::int64_t index) {
      m.dp = index / cps;
      m.cp = index % cps;
    };
    switch (axis) {
      case Axis::kTp: m.tp = i; break;
      case Axis::kDp: m.dp = i; break;
      case Axis::kPp: m.pp = i; break;
      case Axis::kCp: m.cp = i; break;
      case Axis::kEp: m.dp = (c.dp / ep_) * ep_ + i; break;
      case Axis::kExpertTp: m.tp = i; break;
      case Axis::kExpertDp:
        m.dp = i / cps * ep_ + c.dp % ep_;
        m.cp = i % cps;
        break;
      case Axis::kDpCp: dp_cp_member(i); break;
      case Axis::kZeroShard: dp_cp_member(at / zero_shard_ * zero_shard_ + i); break;
      case Axis::kZeroReplica: dp_cp_member(i * zero_shard_ + at % zero_shard_); break;
    }
    out.push_back(rank(m));
  }
  return out;
}

std::int64_t RankLayout::group_color(Axis axis, std::int64_t r) const {
  // The smallest rank in the group identifies it.
  std::int64_t best = r;
  for (std::int64_t m : group(axis, r)) best = m < best ? m : best;
  return best;
}

std::string RankLayout::order_string() const {
  std::string s;
  for (Axis a : order_) {
    if (!s.empty()) s += ',';
    s += to_string(a);
  }
  return s;
}

std::int64_t nodes_spanned(const std::vector<std::int64_t>& ranks, std::int64_t gpus_per_node) {
  std::set<std::int64_t> nodes;
  for (std::int64_t r : ranks) nodes.insert(r / gpus_per_node);
  return static_cast<std::int64_t>(nodes.size());
}

}  // namespace trainplan
