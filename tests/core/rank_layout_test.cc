// Tests of the rank placement (core/rank_layout.h): the default order tp, cp, dp, pp
// (Megatron-Core's tp-cp-ep-dp-pp), orders written before context parallelism, the groups along
// each axis, the dense-gradient group over dp x cp, and the expert groups carved out of dp or
// folded over each stage's ranks.
#include "core/rank_layout.h"

#include <gtest/gtest.h>

#include <set>
#include <utility>
#include <vector>

namespace trainplan {
namespace {

Plan plan_of(std::int64_t tp, std::int64_t cp, std::int64_t dp, std::int64_t pp,
             std::int64_t ep = 1) {
  Plan p;
  p.tp = tp;
  p.cp = cp;
  p.dp = dp;
  p.pp = pp;
  p.ep = ep;
  return p;
}

using Ranks = std::vector<std::int64_t>;

TEST(RankLayout, DefaultOrderIsTpCpDpPp) {
  auto l = RankLayout::make(plan_of(2, 2, 2, 2));
  ASSERT_TRUE(l.ok()) << l.status().message();
  EXPECT_EQ(l->order_string(), "tp,cp,dp,pp");
  EXPECT_EQ(l->world_size(), 16);
  // Rank 11 = tp 1 + 2 * (cp 1 + 2 * (dp 0 + 2 * pp 1)).
  const RankCoord c = l->coord(11);
  EXPECT_EQ(c.tp, 1);
  EXPECT_EQ(c.cp, 1);
  EXPECT_EQ(c.dp, 0);
  EXPECT_EQ(c.pp, 1);
  EXPECT_EQ(l->group(Axis::kTp, 0), (Ranks{0, 1}));
  EXPECT_EQ(l->group(Axis::kCp, 0), (Ranks{0, 2}));   // stride tp: one node when tp*cp <= 8
  EXPECT_EQ(l->group(Axis::kDp, 0), (Ranks{0, 4}));
  EXPECT_EQ(l->group(Axis::kPp, 0), (Ranks{0, 8}));
  // Dense gradients: the dp replicas and their cp ranks, cp innermost.
  EXPECT_EQ(l->size(Axis::kDpCp), 4);
  EXPECT_EQ(l->group(Axis::kDpCp, 0), (Ranks{0, 2, 4, 6}));
  EXPECT_EQ(l->group(Axis::kDpCp, 11), (Ranks{9, 11, 13, 15}));
  EXPECT_EQ(l->index_in_group(Axis::kDpCp, 13), 2);  // dp 1 * cp size 2 + cp 0
  EXPECT_EQ(l->index_in_group(Axis::kCp, 11), 1);
  EXPECT_EQ(l->group_color(Axis::kCp, 11), 9);
}

TEST(RankLayout, EveryRankRoundTripsAndGroupsPartitionTheWorld) {
  for (const char* order : {"tp,cp,dp,pp", "cp,tp,dp,pp", "tp,dp,cp,pp", "pp,dp,cp,tp"}) {
    auto l = RankLayout::make(plan_of(2, 4, 2, 3), order);
    ASSERT_TRUE(l.ok()) << order;
    EXPECT_EQ(l->order_string(), order);
    for (Axis a : {Axis::kTp, Axis::kCp, Axis::kDp, Axis::kPp, Axis::kDpCp}) {
      std::set<std::int64_t> colors;
      for (std::int64_t r = 0; r < l->world_size(); ++r) {
        EXPECT_EQ(l->rank(l->coord(r)), r) << order;
        const Ranks g = l->group(a, r);
        EXPECT_EQ(static_cast<std::int64_t>(g.size()), l->size(a)) << order << " " << to_string(a);
        EXPECT_EQ(g[static_cast<std::size_t>(l->index_in_group(a, r))], r)
            << order << " " << to_string(a);
        for (std::int64_t m : g) EXPECT_EQ(l->group_color(a, m), l->group_color(a, r));
        colors.insert(l->group_color(a, r));
      }
      EXPECT_EQ(static_cast<std::int64_t>(colors.size()), l->world_size() / l->size(a))
          << order << " " << to_string(a);
    }
  }
}

// Hybrid sharding (Plan::zero_shard_size): ZeRO's groups are runs of the dense-gradient group
// by index, and the replica groups take the same place in every run.
TEST(RankLayout, ZeroShardAndReplicaGroupsSplitTheDenseGradientGroup) {
  Plan p = plan_of(2, 2, 4, 1);  // dense-gradient group of 8: ranks 0, 2, ..., 14 for tp 0
  p.zero_stage = 3;
  p.zero_shard_size = 4;
  auto l = RankLayout::make(p);
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->group(Axis::kDpCp, 0), (Ranks{0, 2, 4, 6, 8, 10, 12, 14}));
  EXPECT_EQ(l->size(Axis::kZeroShard), 4);
  EXPECT_EQ(l->size(Axis::kZeroReplica), 2);
  EXPECT_EQ(l->group(Axis::kZeroShard, 0), (Ranks{0, 2, 4, 6}));  // one node of 8
  EXPECT_EQ(l->group(Axis::kZeroShard, 11), (Ranks{9, 11, 13, 15}));
  EXPECT_EQ(l->group(Axis::kZeroReplica, 0), (Ranks{0, 8}));
  EXPECT_EQ(l->group(Axis::kZeroReplica, 11), (Ranks{3, 11}));
  EXPECT_EQ(l->index_in_group(Axis::kZeroShard, 11), 1);
  EXPECT_EQ(l->index_in_group(Axis::kZeroReplica, 11), 1);
  for (Axis a : {Axis::kZeroShard, Axis::kZeroReplica}) {
    std::set<std::int64_t> colors;
    for (std::int64_t r = 0; r < l->world_size(); ++r) {
      const Ranks g = l->group(a, r);
      EXPECT_EQ(g[static_cast<std::size_t>(l->index_in_group(a, r))], r) << to_string(a);
      for (std::int64_t m : g) EXPECT_EQ(l->group_color(a, m), l->group_color(a, r));
      colors.insert(l->group_color(a, r));
    }
    EXPECT_EQ(static_cast<std::int64_t>(colors.size()), l->world_size() / l->size(a));
  }
  // Without hybrid sharding the shard group is the whole dense-gradient group.
  p.zero_shard_size = 0;
  auto whole = RankLayout::make(p);
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(whole->group(Axis::kZeroShard, 11), whole->group(Axis::kDpCp, 11));
  EXPECT_EQ(whole->group(Axis::kZeroReplica, 11), (Ranks{11}));
}

TEST(RankLayout, OrdersWithoutCpPlaceItAfterTp) {
  const std::pair<const char*, const char*> orders[] = {
      {"tp,dp,pp", "tp,cp,dp,pp"}, {"dp,tp,pp", "dp,tp,cp,pp"}, {"tp,pp,dp", "tp,cp,pp,dp"}};
  for (const auto& [three, four] : orders) {
    for (std::int64_t cp : {1, 2}) {
      auto a = RankLayout::make(plan_of(2, cp, 4, 2), three);
      auto b = RankLayout::make(plan_of(2, cp, 4, 2), four);
      ASSERT_TRUE(a.ok() && b.ok()) << three;
      EXPECT_EQ(a->order_string(), four);
      for (std::int64_t r = 0; r < a->world_size(); ++r) {
        EXPECT_EQ(a->coord(r).tp, b->coord(r).tp);
        EXPECT_EQ(a->coord(r).cp, b->coord(r).cp);
        EXPECT_EQ(a->coord(r).dp, b->coord(r).dp);
        EXPECT_EQ(a->coord(r).pp, b->coord(r).pp);
        // Without CP the dense-gradient group is the data-parallel group.
        if (cp == 1) {
          EXPECT_EQ(a->group(Axis::kDp, r), a->group(Axis::kDpCp, r));
        }
      }
    }
  }
  // With cp = 1 the default places ranks as the three-axis layout did: tp + t*(dp + d*pp).
  auto l = RankLayout::make(plan_of(2, 1, 4, 2));
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->rank({1, 3, 1}), 1 + 2 * (3 + 4 * 1));
}

TEST(RankLayout, ExpertGroupsStayInsideDataParallelism) {
  auto l = RankLayout::make(plan_of(1, 2, 4, 1, /*ep=*/2));
  ASSERT_TRUE(l.ok());
  // ep = 2 consecutive dp replicas, at the same cp index.
  EXPECT_EQ(l->group(Axis::kEp, 0), (Ranks{0, 2}));
  EXPECT_EQ(l->group(Axis::kEp, 1), (Ranks{1, 3}));
  EXPECT_EQ(l->group(Axis::kEp, 4), (Ranks{4, 6}));
}

// The carved layout's expert groups (Plan::expert_layout carved): the experts split over tp,
// their gradients summed over the dp/ep replicas at one place in their ep groups times the cp
// ranks, indexed (dp/ep)*cp + cp.
TEST(RankLayout, CarvedExpertTpAndDpGroups) {
  auto l = RankLayout::make(plan_of(2, 2, 4, 1, /*ep=*/2));  // 16 ranks
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->group(Axis::kExpertTp, 5), l->group(Axis::kTp, 5));
  EXPECT_EQ(l->size(Axis::kExpertDp), 4);  // dp/ep 2 x cp 2
  // Rank 0: tp 0, cp 0, dp 0; the replicas holding its experts are dp 0 and 2, with both cp.
  EXPECT_EQ(l->group(Axis::kExpertDp, 0), (Ranks{0, 2, 8, 10}));
  EXPECT_EQ(l->index_in_group(Axis::kExpertDp, 10), 3);  // dp 2 / ep 2 * cp 2 + cp 1
  EXPECT_EQ(l->group(Axis::kExpertDp, 5), (Ranks{5, 7, 13, 15}));  // tp 1, cp 0, dp 1
}

// Megatron-Core's MoE parallel folding (Plan::expert_layout folded): each stage's tp*cp*dp
// ranks, in rank order, divided as expert_tp x ep x expert-dp, innermost first. The Megatron
// MoE Model Zoo's Qwen3-235B row at TP 4, EP 8, ETP 1 (EDP 4): an EP group is one node's 8 GPUs,
// where the carved layout spreads it over 4 nodes.
TEST(RankLayout, FoldedExpertGroupsDivideEachStage) {
  Plan p = plan_of(4, 1, 8, 2, /*ep=*/8);  // 64 ranks, 32 per stage
  p.sequence_parallel = true;
  auto carved = RankLayout::make(p);
  ASSERT_TRUE(carved.ok());
  EXPECT_EQ(nodes_spanned(carved->group(Axis::kEp, 0), 8), 4);
  p.expert_layout = ExpertLayout::kFolded;
  p.expert_tp = 1;
  auto l = RankLayout::make(p);
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->size(Axis::kEp), 8);
  EXPECT_EQ(l->size(Axis::kExpertTp), 1);
  EXPECT_EQ(l->size(Axis::kExpertDp), 4);
  EXPECT_EQ(l->group(Axis::kEp, 0), (Ranks{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(l->group(Axis::kEp, 45), (Ranks{40, 41, 42, 43, 44, 45, 46, 47}));  // stage 1
  EXPECT_EQ(nodes_spanned(l->group(Axis::kEp, 0), 8), 1);
  EXPECT_EQ(l->group(Axis::kExpertDp, 3), (Ranks{3, 11, 19, 27}));
  EXPECT_EQ(l->group(Axis::kExpertDp, 45), (Ranks{37, 45, 53, 61}));
  EXPECT_EQ(l->index_in_group(Axis::kEp, 45), 5);
  EXPECT_EQ(l->index_in_group(Axis::kExpertDp, 45), 1);
  EXPECT_EQ(l->group(Axis::kExpertTp, 45), (Ranks{45}));
  // The attention's groups do not move.
  EXPECT_EQ(l->group(Axis::kTp, 45), carved->group(Axis::kTp, 45));
  EXPECT_EQ(l->group(Axis::kDpCp, 45), carved->group(Axis::kDpCp, 45));

  // expert_tp 2, ep 4 over tp 2 x cp 2 x dp 2 (8 ranks a stage): the EP group spans the cp
  // ranks, which the carved layout (ep dividing dp) cannot.
  Plan q = plan_of(2, 2, 2, 1, /*ep=*/4);
  q.sequence_parallel = true;
  q.expert_layout = ExpertLayout::kFolded;
  q.expert_tp = 2;
  auto f = RankLayout::make(q);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->group(Axis::kExpertTp, 5), (Ranks{4, 5}));
  EXPECT_EQ(f->group(Axis::kEp, 5), (Ranks{1, 3, 5, 7}));
  EXPECT_EQ(f->size(Axis::kExpertDp), 1);
  EXPECT_EQ(f->group(Axis::kExpertDp, 5), (Ranks{5}));
}

// Every folded group partitions the world, under every rank order (the stage's ranks are found
// by the pp coordinate, wherever pp sits in the order).
TEST(RankLayout, FoldedGroupsPartitionTheWorldInEveryOrder) {
  Plan p = plan_of(2, 2, 3, 2, /*ep=*/3);  // 24 ranks, 12 a stage = etp 2 x ep 3 x edp 2
  p.sequence_parallel = true;
  p.expert_layout = ExpertLayout::kFolded;
  p.expert_tp = 2;
  for (const char* order : {"tp,cp,dp,pp", "pp,tp,cp,dp", "tp,pp,dp,cp", "dp,cp,tp,pp"}) {
    auto l = RankLayout::make(p, order);
    ASSERT_TRUE(l.ok()) << order;
    for (Axis a : {Axis::kEp, Axis::kExpertTp, Axis::kExpertDp}) {
      std::set<std::int64_t> colors;
      for (std::int64_t r = 0; r < l->world_size(); ++r) {
        const Ranks g = l->group(a, r);
        EXPECT_EQ(static_cast<std::int64_t>(g.size()), l->size(a)) << order << " " << to_string(a);
        EXPECT_EQ(g[static_cast<std::size_t>(l->index_in_group(a, r))], r)
            << order << " " << to_string(a);
        for (std::int64_t m : g) {
          EXPECT_EQ(l->group_color(a, m), l->group_color(a, r)) << order;
          EXPECT_EQ(l->coord(m).pp, l->coord(r).pp) << order;  // inside the stage
        }
        colors.insert(l->group_color(a, r));
      }
      EXPECT_EQ(static_cast<std::int64_t>(colors.size()), l->world_size() / l->size(a))
          << order << " " << to_string(a);
    }
  }
}

TEST(RankLayout, BadOrdersAreErrors) {
  for (const char* order : {"tp,pp", "tp,cp,cp,pp", "tp,xp,dp,pp", "tp,cp,dp,pp,ep", ""}) {
    auto l = RankLayout::make(plan_of(1, 2, 1, 1), order);
    ASSERT_FALSE(l.ok()) << order;
    EXPECT_NE(l.status().message().find("rank order"), std::string::npos);
    EXPECT_NE(l.status().message().find("tp, cp, dp, pp"), std::string::npos);
  }
}

}  // namespace
}  // namespace trainplan
