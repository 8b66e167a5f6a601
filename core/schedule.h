// Pipeline schedules: the order in which one pipeline stage runs the forward and backward passes
// of its micro-batches and model chunks. Tested by tests/simulator/schedule_test.cc.
//
//  - naive: one micro-batch (the whole per-replica batch), forward then backward.
//  - gpipe: all forwards, then all backwards (Huang et al. 2019).
//  - 1f1b: PipeDream-flush (Narayanan et al. 2021, sec. 2.2.1): pp - stage - 1 warm-up
//    forwards, then one forward one backward, then the cool-down backwards.
//  - interleaved: Megatron-LM's forward_backward_pipelining_with_interleaving (sec. 2.2.2):
//    (pp - stage - 1) * 2 + (v - 1) * pp warm-up forwards over v model chunks per stage.
#pragma once

#include <cstdint>
#include <vector>

#include "core/plan.h"

namespace trainplan::sim {

struct PipeStep {
  bool forward = true;
  std::int64_t micro_batch = 0;
  std::int64_t virtual_chunk = 0;  // 0..v-1; the model chunk is virtual_chunk * pp + stage
};

std::vector<PipeStep> schedule_gpipe(std::int64_t micro_batches);
std::vector<PipeStep> schedule_1f1b(std::int64_t pp, std::int64_t stage,
                                    std::int64_t micro_batches);
std::vector<PipeStep> schedule_interleaved(std::int64_t pp, std::int64_t stage,
                                           std::int64_t micro_batches,
                                           std::int64_t virtual_stages);
// The schedule of `stage` for the plan's schedule kind.
std::vector<PipeStep> stage_schedule(const Plan& plan, std::int64_t stage);

}  // namespace trainplan::sim
