// Ties (planner/planner.h, break_ties): candidates whose predicted step times are within the
// tolerance of the fastest are chosen among by memory headroom, then the simplest layout; and
// plan_training applies the error band's typical error, or an explicit tolerance.
#include <algorithm>

#include <gtest/gtest.h>

#include "planner/planner.h"
#include "planner/report.h"
#include "tests/core/test_util.h"

namespace trainplan {
namespace {

constexpr double kCapacity = 80e9;

Candidate candidate(std::int64_t tp, std::int64_t pp, int zero, double step_s, double peak_gb,
                    bool simulated = true) {
  Candidate c;
  c.plan.tp = tp;
  c.plan.pp = pp;
  c.plan.dp = 64 / (tp * pp);
  c.plan.zero_stage = zero;
  c.estimate.step_time_s = step_s;
  c.estimate.peak_memory_bytes = peak_gb * 1e9;
  c.simulated = simulated;
  return c;
}

TEST(Ties, MostHeadroomWinsWithinTheTolerance) {
  PlanSearch s;
  s.ranked = {candidate(4, 2, 1, 1.00, 70), candidate(8, 1, 1, 1.03, 50),
              candidate(2, 4, 1, 1.20, 20)};
  break_ties(s, 0.05, kCapacity, true);
  EXPECT_EQ(s.ties.tied, 2u);
  EXPECT_DOUBLE_EQ(s.ties.tolerance, 0.05);
  EXPECT_EQ(s.ranked[0].plan.tp, 8);    // 30 GB more headroom, 3% slower: tied, chosen
  EXPECT_EQ(s.ranked[1].plan.tp, 4);
  EXPECT_EQ(s.ranked[2].plan.tp, 2);    // 20% slower: not in the tie, whatever its memory
  EXPECT_EQ(s.ties.fastest, describe(s.ranked[1].plan));
}

TEST(Ties, EqualHeadroomGoesToTheSimplerLayout) {
  PlanSearch s;
  // Within 5% of capacity of each other: equal headroom. tp=8 alone uses one dimension.
  s.ranked = {candidate(4, 2, 1, 1.00, 40.0), candidate(8, 1, 1, 1.01, 43.5)};
  break_ties(s, 0.05, kCapacity, true);
  EXPECT_EQ(s.ranked[0].plan.tp, 8);
  // Same dimensions: the lower ZeRO stage.
  s.ranked = {candidate(8, 1, 3, 1.00, 40.0), candidate(8, 1, 1, 1.01, 40.2)};
  break_ties(s, 0.05, kCapacity, true);
  EXPECT_EQ(s.ranked[0].plan.zero_stage, 1);
}

TEST(Ties, NoToleranceOrNoRivalLeavesTheRankingAlone) {
  PlanSearch s;
  s.ranked = {candidate(4, 2, 1, 1.00, 70), candidate(8, 1, 1, 1.03, 50)};
  break_ties(s, 0.0, kCapacity, true);
  EXPECT_EQ(s.ranked[0].plan.tp, 4);
  EXPECT_EQ(s.ties.tied, 0u);
  break_ties(s, 0.01, kCapacity, true);
  EXPECT_EQ(s.ranked[0].plan.tp, 4);
  EXPECT_EQ(s.ties.tied, 1u);
  EXPECT_TRUE(s.ties.fastest.empty());
}

TEST(Ties, OnlySimulatedCandidatesTakePartInARefinedSearch) {
  PlanSearch s;
  s.ranked = {candidate(4, 2, 1, 1.00, 70, /*simulated=*/false), candidate(8, 1, 1, 1.01, 60),
              candidate(2, 4, 1, 1.02, 20, /*simulated=*/false)};
  break_ties(s, 0.05, kCapacity, true);
  EXPECT_EQ(s.ties.tied, 1u);
  EXPECT_EQ(s.ranked[0].plan.tp, 8);
  break_ties(s, 0.05, kCapacity, false);
  EXPECT_EQ(s.ties.tied, 3u);
  EXPECT_EQ(s.ranked[0].plan.tp, 2);
}

TEST(Ties, PlanTrainingUsesTheBandsTypicalErrorOrTheOverride) {
  const ModelSpec m = testing::load_repo_model("llama3-8b.json");
  auto c = make_cluster("H100-80GB", 64, 8);
  ASSERT_TRUE(c.ok());
  PlannerOptions opt;
  opt.simulate_top = 0;
  opt.error_band.runs = 10;
  opt.error_band.typical_abs = 0.10;
  auto r = plan_training(m, *c, opt);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_DOUBLE_EQ(r->search.ties.tolerance, 0.10);
  EXPECT_GE(r->search.ties.tied, 2u);
  double fastest = r->search.ranked.front().estimate.step_time_s;
  for (const Candidate& cand : r->search.ranked) fastest = std::min(fastest, cand.estimate.step_time_s);
  for (std::size_t i = 0; i < r->search.ties.tied; ++i)
    EXPECT_LE(r->search.ranked[i].estimate.step_time_s, 1.10 * fastest + 1e-12);
  opt.tie_tolerance = 0;
  r = plan_training(m, *c, opt);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->search.ties.tied, 0u);
  for (std::size_t i = 1; i < r->search.ranked.size(); ++i)
    EXPECT_LE(r->search.ranked[i - 1].estimate.step_time_s, r->search.ranked[i].estimate.step_time_s);
}

}  // namespace
}  // namespace trainplan
