// The executor's own account of the memory it holds on one rank, buffer by buffer: each item is
// a buffer (or the same buffer summed over layers and micro-batches) with what it lives for,
// in the classes the cost model's memory breakdown (core/cost/memory.h's MemoryBreakdown) is
// made of, so that the two can be put side by side (bench/scripts/memory_items.py). Issue 28:
// the CPU stage's measured peak exceeded `simulate`'s, explained by category only; this
// itemises it.
//
// The account counts the bytes of the buffers the executor owns (Eigen matrices, the blocks'
// float vectors), not the C library's or MPI's: what VmHWM adds to them is the process's fixed
// memory (the binary, MPI) and the allocator's own.
//
// Tested by tests/executor/memory_account_test.cc.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/json_util.h"

namespace trainplan::executor {

// What a buffer lives for.
enum class MemoryUse {
  kWeights,                // parameters (a ZeRO-3 block's gathered copy included)
  kGradients,              // accumulated gradients (ZeRO-2/3: full block until reduced)
  kOptimizer,              // AdamW's moments
  kKeptForBackward,        // a micro-batch's activations, from its forward to its backward
  kKeptForWeightPass,      // zero-bubble: cached activations a W pass reads (Qi et al. 2023)
  kWeightPassCopies,       // zero-bubble: copies a B pass takes for its W pass (dY, gathers)
  kScratch,                // temporaries: the scratch arena (workspace.h), index vectors
  kCommBuffers,            // pipeline messages, their receive buffers
  kPooled,                 // released buffers kept for reuse (workspace.h): resident, idle
  // Off the device (Plan::offload, executor/offload.h): not in in_use_bytes or total_bytes.
  kOffloadHost,            // offloaded states and their staging buffers in host memory
  kOffloadNvme,            // offloaded states in the rank's NVMe-tier file (its size)
};
inline constexpr int kNumMemoryUses = 11;

// "weights", "gradients", ... (the JSON's names).
const char* memory_use_name(MemoryUse use);

struct MemoryItem {
  std::string name;
  MemoryUse use = MemoryUse::kScratch;
  double bytes = 0;
  std::int64_t buffers = 0;  // how many buffers the item sums
};

class MemoryAccount {
 public:
  // Adds a buffer of `bytes` to the item `name` of class `use` (made on first use); a
  // zero-byte buffer (empty, released) is not counted.
  void add(std::string_view name, MemoryUse use, double bytes);
  const std::vector<MemoryItem>& items() const { return items_; }
  double bytes_of(MemoryUse use) const;
  // Everything on the device but the pooled buffers: what the step is using.
  double in_use_bytes() const;
  double total_bytes() const;  // in use and pooled: what the executor holds on the device
  double off_device_bytes() const;  // offloaded: host memory and the NVMe-tier file

 private:
  double all_bytes() const;  // every item, on the device or not
  std::vector<MemoryItem> items_;
};

// {"in_use_bytes", "pooled_bytes", "off_device_bytes": {"host", "nvme"}, "by_use": {use:
// bytes}, "items": [{name, use, bytes, buffers}]}, items largest first.
Json memory_account_to_json(const MemoryAccount& account);

}  // namespace trainplan::executor
