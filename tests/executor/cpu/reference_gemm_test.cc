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
