// Leave-one-family-out cross-validation (validation/accuracy.h) on synthetic errors: the fold
// objective weighs each training family one, so a family with many runs does not choose the
// constants for the others, and is the weighted mean |error|, ties to the presets; held-out
// errors are the chosen point's; the statistics.
#include "validation/accuracy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace trainplan {
namespace {

const EfficiencyPoint kA{0.8, 0.6};
const EfficiencyPoint kB{0.85, 0.6};

// Run i's throughput error at a point: `at_a[i]` at kA, `at_b[i]` at kB.
struct Synthetic {
  std::vector<std::string> families;
  std::vector<double> at_a, at_b;
  RunErrors operator()(std::size_t i, const EfficiencyPoint& p) const {
    RunErrors e;
    e.throughput = p.gemm_share == kB.gemm_share ? at_b[i] : at_a[i];
    return e;
  }
};

std::map<std::string, double> chosen_share(const CrossValidation& cv) {
  std::map<std::string, double> out;
  for (const auto& fold : cv.folds) out[fold.family] = fold.chosen.gemm_share;
  return out;
}

TEST(CrossValidate, EachTrainingFamilyWeighsOneNotEachRun) {
  // "big" has five runs that kA predicts within 1% and kB within 30%; three one-run families
  // are 20% off at kA and 2% at kB. Pooled over runs the five would pick kA for everyone (mean
  // 0.081 against 0.195); weighted by family, kB (0.09 against 0.1525).
  Synthetic s{{"big", "big", "big", "big", "big", "s1", "s2", "s3"},
              {0.01, -0.01, 0.01, -0.01, 0.01, 0.2, -0.2, 0.2},
              {0.3, -0.3, 0.3, -0.3, 0.3, 0.02, -0.02, 0.02}};
  const CrossValidation cv = cross_validate(s.families, {kA, kB}, kA, s);
  const auto share = chosen_share(cv);
  ASSERT_EQ(share.size(), 4u);
  EXPECT_DOUBLE_EQ(share.at("big"), kB.gemm_share);
  EXPECT_DOUBLE_EQ(share.at("s1"), kB.gemm_share);
  EXPECT_DOUBLE_EQ(cv.fit_all.gemm_share, kB.gemm_share);
  // Held out, each run takes its fold's point.
  ASSERT_EQ(cv.held_out.size(), 8u);
  EXPECT_DOUBLE_EQ(*cv.held_out[0].throughput, 0.3);
  EXPECT_DOUBLE_EQ(*cv.held_out[5].throughput, 0.02);
  EXPECT_EQ(cv.throughput.count, 8u);
  EXPECT_DOUBLE_EQ(cv.throughput_presets.median_abs, 0.01);
  // The objective over all runs at each grid point (total weight 4: big's five runs 1/5 each),
  // and the weighted median and p90 reported beside it: at kA 0.01 carries weight 1 and 0.2
  // weight 3; at kB 0.02 carries 3 and 0.3 carries 1.
  ASSERT_EQ(cv.surface.size(), 2u);
  EXPECT_DOUBLE_EQ(cv.surface[0].point.gemm_share, kA.gemm_share);
  EXPECT_NEAR(cv.surface[0].weighted_mean_abs, 0.1525, 1e-12);
  EXPECT_NEAR(cv.surface[1].weighted_mean_abs, 0.09, 1e-12);
  EXPECT_DOUBLE_EQ(cv.surface[0].weighted_median_abs, 0.2);
  EXPECT_DOUBLE_EQ(cv.surface[0].weighted_p90_abs, 0.2);
  EXPECT_DOUBLE_EQ(cv.surface[1].weighted_median_abs, 0.02);
  EXPECT_DOUBLE_EQ(cv.surface[1].weighted_p90_abs, 0.3);
}

TEST(CrossValidate, TheWorstFamilyWeighsInProportionThenTheDistanceFromThePresets) {
  // Four one-run families with the same |error| at both points except the third: the mean
  // picks the point where the worst family is better.
  Synthetic s{{"f1", "f2", "f3", "f4"}, {0.05, 0.05, 0.3, 0.05}, {0.05, 0.05, 0.1, 0.05}};
  const CrossValidation cv = cross_validate(s.families, {kA, kB}, kA, s);
  EXPECT_DOUBLE_EQ(chosen_share(cv).at("f1"), kB.gemm_share);
  // Held out f3 itself, the training families tie: the presets' point wins.
  EXPECT_DOUBLE_EQ(chosen_share(cv).at("f3"), kA.gemm_share);
}

TEST(CrossValidate, TheMeanNotTheMedianOrTheP90Decides) {
  // Four one-run families. kA has the lower median (0.05 against 0.06) but one family 40% off:
  // mean 0.1375 against kB's 0.0825, so kB.
  Synthetic s{{"f1", "f2", "f3", "f4"}, {0.05, 0.05, 0.05, 0.4}, {0.06, 0.06, 0.06, 0.15}};
  const CrossValidation cv = cross_validate(s.families, {kA, kB}, kA, s);
  EXPECT_DOUBLE_EQ(cv.fit_all.gemm_share, kB.gemm_share);
  EXPECT_DOUBLE_EQ(chosen_share(cv).at("f1"), kB.gemm_share);
  // Held out f4 the training families are 5% at kA and 6% at kB: kA.
  EXPECT_DOUBLE_EQ(chosen_share(cv).at("f4"), kA.gemm_share);
  // A better median does not outweigh a worse tail of the same weight, nor the reverse: kA
  // (median 0.12, p90 0.15, mean 0.132) against kB (median 0.10, p90 0.19, mean 0.136): kA.
  Synthetic m{{"g1", "g2", "g3", "g4", "g5"},
              {0.12, 0.12, 0.12, 0.15, 0.15},
              {0.10, 0.10, 0.10, 0.19, 0.19}};
  EXPECT_DOUBLE_EQ(cross_validate(m.families, {kA, kB}, kA, m).fit_all.gemm_share,
                   kA.gemm_share);
}

TEST(CrossValidate, ANewSmallFamilyMovesTheObjectiveByItsWeightOnly) {
  // Nine one-run families: kA keeps eight at 5% and one at 21%; kB keeps eight at 6% and one
  // at 14%. A tenth family, 26% off at kA and 30% at kB, adds 0.026 / 0.030 to a mean of ten;
  // the choice (kA: 0.0678 then 0.087; kB: 0.0689 then 0.092) stays, and the reported weighted
  // p90 (the ninth of ten) does not move.
  Synthetic nine{{"a", "b", "c", "d", "e", "f", "g", "h", "i"},
                 {0.05, 0.05, 0.05, 0.05, 0.05, 0.05, 0.05, 0.05, 0.21},
                 {0.06, 0.06, 0.06, 0.06, 0.06, 0.06, 0.06, 0.06, 0.14}};
  Synthetic ten = nine;
  ten.families.push_back("j");
  ten.at_a.push_back(0.26);
  ten.at_b.push_back(0.30);
  const CrossValidation before = cross_validate(nine.families, {kA, kB}, kA, nine);
  const CrossValidation after = cross_validate(ten.families, {kA, kB}, kA, ten);
  EXPECT_DOUBLE_EQ(before.fit_all.gemm_share, kA.gemm_share);
  EXPECT_DOUBLE_EQ(after.fit_all.gemm_share, kA.gemm_share);
  EXPECT_DOUBLE_EQ(before.surface[0].weighted_p90_abs, 0.21);
  EXPECT_DOUBLE_EQ(after.surface[0].weighted_p90_abs, 0.21);
  EXPECT_DOUBLE_EQ(after.surface[1].weighted_p90_abs, 0.14);
}

TEST(CrossValidate, AFoldChoosesTheVertexBetweenGridPointsAndIsPredictedThere) {
  // One-run families whose |error| is a parabola in the GEMM share, 1% + 10 (share - t)^2: over
  // the training families the objective is a parabola with its vertex at their mean t, which
  // the three grid points 0.8 / 0.85 / 0.9 recover exactly (forty-ninth pass). The memory axis
  // has one value, so it stays.
  const std::vector<double> t{0.82, 0.84, 0.83, 0.87};
  struct Parabolic {
    std::vector<std::string> families;
    std::vector<double> t;
    mutable std::vector<double> asked;  // the shares evaluated for the held-out family f4
    RunErrors operator()(std::size_t i, const EfficiencyPoint& p) const {
      if (i == 3) asked.push_back(p.gemm_share);
      RunErrors e;
      e.throughput = 0.01 + 10 * (p.gemm_share - t[i]) * (p.gemm_share - t[i]);
      return e;
    }
  };
  Parabolic s{{"f1", "f2", "f3", "f4"}, t, {}};
  const EfficiencyPoint kC{0.9, 0.6};
  const CrossValidation cv = cross_validate(s.families, {kA, kB, kC}, kA, std::cref(s));
  const auto share = chosen_share(cv);
  EXPECT_NEAR(share.at("f4"), (0.82 + 0.84 + 0.83) / 3, 1e-12);
  EXPECT_NEAR(share.at("f1"), (0.84 + 0.83 + 0.87) / 3, 1e-12);
  for (const auto& fold : cv.folds) EXPECT_DOUBLE_EQ(fold.chosen.memory_efficiency, 0.6);
  // f4 is predicted at its fold's vertex, which was evaluated, not read off the grid.
  EXPECT_NEAR(*cv.held_out[3].throughput, 0.01 + 10 * 0.04 * 0.04, 1e-12);
  EXPECT_NE(std::find_if(s.asked.begin(), s.asked.end(),
                         [](double g) { return std::fabs(g - 0.83) < 1e-12; }),
            s.asked.end());
  EXPECT_NEAR(cv.fit_all.gemm_share, (0.82 + 0.84 + 0.83 + 0.87) / 4, 1e-12);
  // Training families that agree on a grid point keep the fold on it; the fourth moves only the
  // fit over all runs.
  Parabolic far{{"f1", "f2", "f3", "f4"}, {0.85, 0.85, 0.85, 0.95}, {}};
  const CrossValidation pulled = cross_validate(far.families, {kA, kB, kC}, kA, std::cref(far));
  EXPECT_NEAR(pulled.fit_all.gemm_share, 0.875, 1e-12);
  EXPECT_NEAR(chosen_share(pulled).at("f4"), 0.85, 1e-12);
}

TEST(CrossValidate, RunsWithoutAThroughputErrorDoNotWeigh) {
  // "big"'s runs without a throughput error (the source measured none) do not dilute its
  // measured one: it still weighs one, against two families that prefer kB.
  struct WithGaps : Synthetic {
    RunErrors operator()(std::size_t i, const EfficiencyPoint& p) const {
      if (i >= 1 && i <= 3) return {};
      return Synthetic::operator()(i, p);
    }
  };
  WithGaps s;
  s.families = {"big", "big", "big", "big", "t1", "t2"};
  s.at_a = {0.01, 0, 0, 0, 0.2, 0.2};
  s.at_b = {0.3, 0, 0, 0, 0.02, 0.02};
  const CrossValidation cv = cross_validate(s.families, {kA, kB}, kA, s);
  // Held out t2: big and t1 weigh one each; the weighted mean is 0.105 at kA and 0.16 at kB.
  // Had big's three empty runs counted, its measured run would weigh 1/4 and kB would win
  // (0.076 against 0.162).
  EXPECT_DOUBLE_EQ(chosen_share(cv).at("t2"), kA.gemm_share);
  EXPECT_EQ(cv.throughput.count, 3u);
}

TEST(ErrorStats, MedianP90AndBias) {
  const ErrorStats s = error_stats({0.1, -0.2, 0.3, -0.4, 0.05});
  EXPECT_EQ(s.count, 5u);
  EXPECT_DOUBLE_EQ(s.median_abs, 0.2);
  EXPECT_DOUBLE_EQ(s.p90_abs, 0.4);
  EXPECT_NEAR(s.mean_signed, -0.03, 1e-12);
  EXPECT_EQ(error_stats({}).count, 0u);
}

}  // namespace
}  // namespace trainplan
