// Rank placement; see rank_layout.h. Tested by tests/models/rank_layout_test.cc.
#include "models/rank_layout.h"

#include <set>

namespace trainplan {

std::string_view to_string(Axis a) {
  switch (a) {
    case Axis::kTp: return "tp";
    case Axis::kDp: return "dp";
    case Axis::kPp: return "pp";
    case Axis::kEp: return "ep";
  }
  return "?";
}

Result<RankLayout> RankLayout::make(const Plan& plan, std::string_view order) {
  RankLayout l;
  l.size_ = {plan.tp, plan.dp, plan.pp};
  l.ep_ = plan.ep;
  std::array<Axis, 3> axes{};
  std::size_t n = 0;
  std::string token;
  auto flush = [&]() -> bool {
    if (token.empty()) return n > 0 || true;
    Axis a;
    if (token == "tp") a = Axis::kTp;
    else if (token == "dp") a = Axis::kDp;
    else if (token == "pp") a = Axis::kPp;
    else return false;
    if (n >= 3) return false;
    axes[n++] = a;
    token.clear();
    return true;
  };
  for (char c : order) {
    if (c == ',' || c == '-') {
      if (!flush()) break;
    } else {
      token += c;
    }
  }
  bool good = flush() && n == 3;
  if (good) {
    std::set<int> seen;
    for (Axis a : axes) seen.insert(static_cast<int>(a));
    good = seen.size() == 3;
  }
  if (!good)
    return Status::Error("rank order \"" + std::string(order) +
                         "\": expected the three axes tp, dp, pp once each, innermost first "
                         "(e.g. \"tp,dp,pp\")");
  l.order_ = axes;
  return l;
}

std::int64_t RankLayout::size(Axis a) const {
  if (a == Axis::kEp) return ep_;
  return size_[static_cast<std::size_t>(a)];
}

RankCoord RankLayout::coord(std::int64_t rank) const {
  std::array<std::int64_t, 3> c{};
  for (Axis a : order_) {
    const auto i = static_cast<std::size_t>(a);
    c[i] = rank % size_[i];
    rank /= size_[i];
  }
  return {c[0], c[1], c[2]};
}

std::int64_t RankLayout::rank(const RankCoord& rc) const {
  const std::array<std::int64_t, 3> c{rc.tp, rc.dp, rc.pp};
  std::int64_t r = 0;
  for (int k = 2; k >= 0; --k) {
    const auto i = static_cast<std::size_t>(order_[static_cast<std::size_t>(k)]);
    r = r * size_[i] + c[i];
  }
  return r;
}

std::int64_t RankLayout::index_in_group(Axis axis, std::int64_t r) const {
  const RankCoord c = coord(r);
  switch (axis) {
    case Axis::kTp: return c.tp;
    case Axis::kDp: return c.dp;
    case Axis::kPp: return c.pp;
    case Axis::kEp: return c.dp % ep_;
  }
  return 0;
}

std::vector<std::int64_t> RankLayout::group(Axis axis, std::int64_t r) const {
  const RankCoord c = coord(r);
  std::vector<std::int64_t> out;
  const std::int64_t n = size(axis);
  for (std::int64_t i = 0; i < n; ++i) {
    RankCoord m = c;
    switch (axis) {
      case Axis::kTp: m.tp = i; break;
      case Axis::kDp: m.dp = i; break;
      case Axis::kPp: m.pp = i; break;
      case Axis::kEp: m.dp = (c.dp / ep_) * ep_ + i; break;
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
  for (Axis a : order_) s += (s.empty() ? "" : ",") + std::string(to_string(a));
  return s;
}

std::int64_t nodes_spanned(const std::vector<std::int64_t>& ranks, std::int64_t gpus_per_node) {
  std::set<std::int64_t> nodes;
  for (std::int64_t r : ranks) nodes.insert(r / gpus_per_node);
  return static_cast<std::int64_t>(nodes.size());
}

}  // namespace trainplan
