// keep_freed_memory_mapped: where it reports success, freed activations stay in the heap, so the
// next micro-batch reuses mapped pages instead of faulting them in again.
#include "executor/allocator.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <vector>

namespace trainplan::executor {
namespace {

TEST(Allocator, FreedActivationSizedBlocksStayInTheHeap) {
  if (!keep_freed_memory_mapped())
    GTEST_SKIP() << "the C library did not take the policy (not glibc, or a sanitizer's "
                    "allocator, which ignores mallopt)";
  // Blocks of the size of a micro-batch's activations (1 MiB is above glibc's default mmap
  // threshold of 128 KiB), freed newest first so that the heap's top chunk grows past glibc's
  // default trim threshold of 128 KiB.
  constexpr std::size_t kBlockBytes = std::size_t{1} << 20;
  constexpr int kBlocks = 8;
  const char* before = static_cast<const char*>(sbrk(0));
  std::vector<void*> blocks;
  for (int i = 0; i < kBlocks; ++i) {
    blocks.push_back(std::malloc(kBlockBytes));
    ASSERT_NE(blocks.back(), nullptr);
    static_cast<volatile char*>(blocks.back())[0] = 1;
  }
  const char* grown = static_cast<const char*>(sbrk(0));
  // From the heap (brk), not one mmap per block.
  EXPECT_GE(grown - before, static_cast<std::ptrdiff_t>(kBlocks * kBlockBytes));
  for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) std::free(*it);
  // Nothing given back to the kernel.
  EXPECT_EQ(static_cast<const char*>(sbrk(0)), grown);
}

}  // namespace
}  // namespace trainplan::executor
