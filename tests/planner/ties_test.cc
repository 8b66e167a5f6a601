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

MeasuredLayouts measured_1f1b_to_pp(std::int64_t deepest) {
  MeasuredLayouts m;
  m.runs = {{"a", "A100", Schedule::k1F1B, deepest}, {"b", "A100", Schedule::k1F1B, 1}};
  m.basis = "2 published runs on A100";
  return m;
}

TEST(Ties, AMeasuredPipelineGoesFirstWithinTheTie) {
  PlanSearch s;
  // The fastest, with the most headroom, runs DualPipe, which no run measured; 1f1b at pp 4
  // was measured (at pp 8), so it is the pick though it has less headroom.
  Candidate dual = candidate(2, 4, 1, 1.00, 20);
  dual.plan.schedule = Schedule::kDualPipe;
  s.ranked = {dual, candidate(4, 4, 1, 1.04, 60), candidate(8, 8, 1, 1.20, 10)};
  const MeasuredLayouts m = measured_1f1b_to_pp(8);
  EXPECT_EQ(measured_runs(s.ranked[0].plan, m), 0u);
  EXPECT_EQ(measured_runs(s.ranked[1].plan, m), 1u);
  break_ties(s, 0.05, kCapacity, true, m);
  EXPECT_EQ(s.ties.tied, 2u);
  EXPECT_EQ(s.ties.measured, 1u);
  EXPECT_TRUE(s.ties.by_measured);
  EXPECT_EQ(s.ranked[0].plan.tp, 4);
  EXPECT_EQ(s.ranked[1].plan.schedule, Schedule::kDualPipe);
  EXPECT_EQ(s.ranked[2].plan.tp, 8);  // outside the tie: measured or not, it stays last
  // Without layouts, or when none of the tied is measured, the earlier rules decide.
  break_ties(s, 0.05, kCapacity, true);
  EXPECT_EQ(s.ranked[0].plan.schedule, Schedule::kDualPipe);
  EXPECT_EQ(s.ties.measured, 0u);
  EXPECT_FALSE(s.ties.by_measured);
  break_ties(s, 0.05, kCapacity, true, measured_1f1b_to_pp(2));  // pp 4 deeper than measured
  EXPECT_EQ(s.ties.measured, 0u);
  EXPECT_EQ(s.ranked[0].plan.schedule, Schedule::kDualPipe);
}

TEST(Ties, MeasuredRunsCountTheScheduleAtThatDepthOrDeeper) {
  const MeasuredLayouts m = measured_1f1b_to_pp(8);
  Plan p;
  p.pp = 1;
  EXPECT_EQ(measured_runs(p, m), 1u);  // pp 1: every run without a pipeline
  p.pp = 8;
  p.schedule = Schedule::k1F1B;
  EXPECT_EQ(measured_runs(p, m), 1u);
  p.pp = 16;
  EXPECT_EQ(measured_runs(p, m), 0u);
  p.pp = 4;
  p.schedule = Schedule::kInterleaved;
  EXPECT_EQ(measured_runs(p, m), 0u);
  EXPECT_EQ(measured_runs(p, MeasuredLayouts{}), 0u);
}

TEST(Ties, TheReportSaysWhenThePicksPipelineWasNotMeasured) {
  const MeasuredLayouts m = measured_1f1b_to_pp(8);
  Plan p;
  p.pp = 32;
  p.schedule = Schedule::kDualPipe;
  EXPECT_EQ(measured_pipeline_note(p, m),
            "Its pipeline (dualpipe at pp 32) was measured by none of the 2 published runs on "
            "A100, which hold no dualpipe run: the band above does not cover it, and its figures "
            "are an extrapolation.");
  p.schedule = Schedule::k1F1B;
  EXPECT_EQ(measured_pipeline_note(p, m),
            "Its pipeline (1f1b at pp 32) was measured by none of the 2 published runs on A100 "
            "(2 1f1b runs, the deepest at pp 8): the band above does not cover it, and its "
            "figures are an extrapolation.");
  p.pp = 4;
  EXPECT_EQ(measured_pipeline_note(p, m),
            "Its pipeline (1f1b at pp 4 or deeper) was measured by 1 of the 2 published runs on "
            "A100.");
  p.pp = 1;
  EXPECT_EQ(measured_pipeline_note(p, m), "");
  EXPECT_EQ(measured_pipeline_note(p, MeasuredLayouts{}), "");
}

TEST(Ties, MeasuredMfuIsThePredictionUnderTheBand) {
  ErrorBand band;
  band.runs = 10;
  band.relative_low = -0.2;   // measured 20% faster than predicted
  band.relative_high = 0.25;  // measured 25% slower
  const auto [low, high] = measured_mfu_band(0.5, band);
  EXPECT_DOUBLE_EQ(low, 0.4);
  EXPECT_DOUBLE_EQ(high, 0.625);
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
