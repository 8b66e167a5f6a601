// Independent work items run on every core with oneTBB (libtbb-dev): the planner's refinement of
// candidates by the simulator, and the per-rank passes over a played program. Each item writes
// only its own result slot, so the results do not depend on the thread count or the order the
// items finish in (tests/simulator/parallel_test.cc checks 1 thread against many).
#pragma once

#include <cstddef>
#include <functional>

namespace trainplan {

// Calls body(i) for every i in [0, n) on up to `threads` threads (0: every core), and
// on_done(finished) after each item, serialized (for progress; may be empty). Returns when all
// are done. An exception from body is rethrown here.
void parallel_for_index(std::size_t n, unsigned threads,
                        const std::function<void(std::size_t)>& body,
                        const std::function<void(std::size_t)>& on_done = {});

}  // namespace trainplan
