// The reference kernel (executor/cpu/reference_gemm.h): it runs the executor's forward product
// on its operands and times it. That timing allocates nothing is checked by
// tests/executor/step_allocations_test.cc (which counts every allocation).
#include "executor/cpu/reference_gemm.h"

#include <gtest/gtest.h>

namespace trainplan::executor {
namespace {

TEST(ReferenceGemm, RunsTheForwardProduct) {
  GemmOperands g(8, 5, 3);
  EXPECT_DOUBLE_EQ(g.flops(), 2.0 * 8 * 5 * 3);
  g.run();
  const Mat want = g.x() * g.w();
  ASSERT_EQ(g.out().rows(), 8);
  ASSERT_EQ(g.out().cols(), 5);
  EXPECT_LT((g.out() - want).cwiseAbs().maxCoeff(), 1e-5f);
  g.run();  // overwrites, does not accumulate
  EXPECT_LT((g.out() - want).cwiseAbs().maxCoeff(), 1e-5f);
}

TEST(ReferenceGemm, TimesTheMedianOfItsCalls) {
  ReferenceGemm r(3);
  EXPECT_EQ(r.calls(), 3);
  EXPECT_EQ(r.operands().m(), ReferenceGemm::kReferenceSize);
  EXPECT_EQ(r.operands().n(), ReferenceGemm::kReferenceSize);
  EXPECT_EQ(r.operands().k(), ReferenceGemm::kReferenceSize);
  const double s = r.median_seconds();
  EXPECT_GT(s, 0);
  EXPECT_LT(s, 10);
  const double rate = r.flops_per_s();
  EXPECT_GT(rate, 1e6);  // any CPU of this century
  ReferenceGemm small(1, 16);
  EXPECT_EQ(small.operands().k(), 16);
  EXPECT_GT(small.flops_per_s(), 0);
}

TEST(ReferenceGemmDeathTest, RefusesACallCountOutOfRange) {
  EXPECT_DEATH(ReferenceGemm(0), "calls 0");
  EXPECT_DEATH(ReferenceGemm(ReferenceGemm::kMaxCalls + 1), "calls");
}

}  // namespace
}  // namespace trainplan::executor

namespace trainplan::executor {
namespace {

// The memory-bound reference: STREAM's triad, bytes counted as STREAM does (3 x 4 per float).
TEST(ReferenceTriad, RunsTheTriadAndCountsStreamBytes) {
  ReferenceTriad t(3, 1000);
  EXPECT_EQ(t.calls(), 3);
  EXPECT_EQ(t.elements(), 1000);
  EXPECT_DOUBLE_EQ(t.bytes(), 3.0 * 4.0 * 1000);
  EXPECT_DOUBLE_EQ(t.footprint_bytes(), t.bytes());
  EXPECT_EQ(t.a()(0), 0.0f);  // not run yet
  t.run();
  // b = 2, c = 1, s = 3: every element 5, and running again overwrites.
  EXPECT_EQ((t.a() == 2.0f + ReferenceTriad::kScalar).count(), 1000);
  t.run();
  EXPECT_EQ((t.a() == 5.0f).count(), 1000);
}

TEST(ReferenceTriad, TimesTheMedianOfItsCalls) {
  ReferenceTriad t(3, std::int64_t{1} << 20);
  const double s = t.median_seconds();
  EXPECT_GT(s, 0);
  EXPECT_LT(s, 10);
  EXPECT_GT(t.bytes_per_s(), 1e6);  // any memory of this century
  EXPECT_EQ(ReferenceTriad::kReferenceElements, std::int64_t{1} << 24);
}

TEST(ReferenceTriadDeathTest, RefusesBadArguments) {
  EXPECT_DEATH(ReferenceTriad(0, 16), "calls 0");
  EXPECT_DEATH(ReferenceTriad(ReferenceGemm::kMaxCalls + 1, 16), "calls");
  EXPECT_DEATH(ReferenceTriad(1, 0), "elements 0");
}

}  // namespace
}  // namespace trainplan::executor
