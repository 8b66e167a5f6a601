// BufferPool (executor/cpu/workspace.h): a released buffer is handed back for the next request
// of its element count, whatever the shape, and nothing else is.
#include "executor/cpu/workspace.h"

#include <gtest/gtest.h>

#include "executor/cpu/kernels.h"

namespace trainplan::executor {
namespace {

TEST(BufferPool, ReusesAReleasedBufferOfTheSameElementCount) {
  BufferPool<Mat> pool;
  Mat a;
  pool.take(a, 4, 6);
  ASSERT_EQ(a.rows(), 4);
  ASSERT_EQ(a.cols(), 6);
  const float* storage = a.data();
  pool.give(a);
  EXPECT_EQ(a.size(), 0);
  EXPECT_EQ(pool.released(), 1u);
  Mat b;
  pool.take(b, 3, 8);  // 24 elements again: the same buffer, reshaped
  EXPECT_EQ(b.data(), storage);
  EXPECT_EQ(b.rows(), 3);
  EXPECT_EQ(b.cols(), 8);
  EXPECT_EQ(pool.released(), 0u);
}

TEST(BufferPool, KeepsAMatrixThatAlreadyHasTheSize) {
  BufferPool<Mat> pool;
  Mat a(2, 5);
  const float* storage = a.data();
  pool.take(a, 5, 2);
  EXPECT_EQ(a.data(), storage);
  EXPECT_EQ(pool.released(), 0u);
}

TEST(BufferPool, AnotherSizeReleasesTheOldBufferAndAllocates) {
  BufferPool<Mat> pool;
  Mat a(2, 2);
  pool.take(a, 3, 3);
  EXPECT_EQ(a.size(), 9);
  EXPECT_EQ(pool.released(), 1u);  // the 2x2 buffer, for a later 4-element request
  Mat b;
  pool.take(b, 1, 4);
  EXPECT_EQ(pool.released(), 0u);
}

TEST(BufferPool, GivingAnEmptyMatrixKeepsNothing) {
  BufferPool<Vec> pool;
  Vec v;
  pool.give(v);
  EXPECT_EQ(pool.released(), 0u);
  pool.take(v, 7);
  EXPECT_EQ(v.size(), 7);
}

}  // namespace
}  // namespace trainplan::executor
