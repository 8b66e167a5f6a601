// The expected latest arrival at a collective (core/cost/straggler.h).
#include "core/cost/straggler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <random>
#include <vector>

namespace trainplan {
namespace {

TEST(Straggler, ExpectedMaximaOfStandardNormalsMatchTheirClosedFormsAndTables) {
  EXPECT_EQ(expected_max_standard_normal(1), 0.0);
  // n = 2: 1/sqrt(pi); n = 3: 3/(2 sqrt(pi)) (David & Nagaraja, sec. 3.1).
  EXPECT_NEAR(expected_max_standard_normal(2), 1.0 / std::sqrt(std::numbers::pi), 1e-9);
  EXPECT_NEAR(expected_max_standard_normal(3), 1.5 / std::sqrt(std::numbers::pi), 1e-9);
  // Tabulated expected maxima (Harter 1961): n = 4, 8, 100.
  EXPECT_NEAR(expected_max_standard_normal(4), 1.02938, 1e-5);
  EXPECT_NEAR(expected_max_standard_normal(8), 1.42360, 1e-5);
  EXPECT_NEAR(expected_max_standard_normal(100), 2.50759, 1e-5);
}

TEST(Straggler, IdenticalMembersWaitTheirSpreadTimesTheExpectedMaximum) {
  std::vector<ArrivalSpread> two = {{10.0, 2.0, 1}, {10.0, 2.0, 1}};
  EXPECT_NEAR(expected_latest_arrival(two), 10.0 + 2.0 / std::sqrt(std::numbers::pi), 1e-9);
  // One simulated member standing for four.
  std::vector<ArrivalSpread> four = {{10.0, 2.0, 4}};
  EXPECT_NEAR(expected_latest_arrival(four), 10.0 + 2.0 * 1.02938, 1e-4);
}

TEST(Straggler, WithoutSpreadTheLatestMeanArrivesLast) {
  std::vector<ArrivalSpread> m = {{3.0, 0, 1}, {7.0, 0, 2}, {5.0, 0, 1}};
  EXPECT_EQ(expected_latest_arrival(m), 7.0);
  EXPECT_EQ(expected_latest_arrival({}), 0.0);
  std::vector<ArrivalSpread> one = {{4.0, 1.0, 1}};
  EXPECT_EQ(expected_latest_arrival(one), 4.0);
}

TEST(Straggler, AFarLaterMemberHidesTheOthersSpread) {
  // A receiver that waits long for its sender: the wait ends when the sender arrives.
  std::vector<ArrivalSpread> m = {{0.0, 1.0, 1}, {100.0, 1.0, 1}};
  EXPECT_NEAR(expected_latest_arrival(m), 100.0, 1e-9);
  // A member with no spread arriving well after the others.
  std::vector<ArrivalSpread> k = {{0.0, 1.0, 8}, {20.0, 0.0, 1}};
  EXPECT_NEAR(expected_latest_arrival(k), 20.0, 1e-9);
}

TEST(Straggler, MixedMembersAgreeWithSampling) {
  std::vector<ArrivalSpread> m = {{0.0, 1.0, 1}, {0.5, 2.0, 3}, {1.0, 0.0, 1}};
  std::mt19937_64 gen(7);
  std::normal_distribution<double> z;
  double sum = 0;
  const int n = 400000;
  for (int i = 0; i < n; ++i) {
    double latest = 1.0;
    latest = std::max(latest, z(gen));
    for (int c = 0; c < 3; ++c) latest = std::max(latest, 0.5 + 2.0 * z(gen));
    sum += latest;
  }
  // Sampling error: sd(max) < 2.5, so 5 sd of the mean of 4e5 draws is < 0.02.
  EXPECT_NEAR(expected_latest_arrival(m), sum / n, 0.02);
}

}  // namespace
}  // namespace trainplan
