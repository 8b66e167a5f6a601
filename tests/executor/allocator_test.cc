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
  std::vector<void*> blocks;
  for (int i = 0; i < kBlocks; ++i) {
    blocks.push_back(std::malloc(kBlockBytes));
    ASSERT_NE(blocks.back(), nullptr);
    static_cast<volatile char*>(blocks.back())[0] = 1;
  }
  const char* grown = static_cast<const char*>(sbrk(0));
  // From the heap (brk), not one mmap per block: every block lies below the heap's end (a
  // mapping of its own would be far above it). The heap may have grown by less than the blocks'
  // sum: free space the process's earlier allocations left in it is reused first.
  for (void* b : blocks)
    EXPECT_LE(static_cast<const char*>(b) + kBlockBytes, grown) << "a block outside the heap";
  for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) std::free(*it);
  // Nothing given back to the kernel.
  EXPECT_EQ(static_cast<const char*>(sbrk(0)), grown);
}

}  // namespace
}  // namespace trainplan::executor
