// parallel_for_index over oneTBB; see parallel.h.
#include "simulator/parallel.h"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <mutex>

namespace trainplan {

void parallel_for_index(std::size_t n, unsigned threads,
                        const std::function<void(std::size_t)>& body,
                        const std::function<void(std::size_t)>& on_done) {
  if (n == 0) return;
  std::mutex mutex;
  std::size_t finished = 0;
  auto run_one = [&](std::size_t i) {
    body(i);
    if (!on_done) return;
    const std::lock_guard<std::mutex> lock(mutex);
    on_done(++finished);
  };
  // One thread: in order, on the caller's thread (the serial reference the tests compare with).
  if (threads == 1) {
    for (std::size_t i = 0; i < n; ++i) run_one(i);
    return;
  }
  // More threads than cores only oversubscribes them (and oneTBB warns): at most the cores.
  const int cores = tbb::this_task_arena::max_concurrency();
  tbb::task_arena arena(threads == 0 ? cores : std::min(cores, static_cast<int>(threads)));
  arena.execute([&] {
    // Grain 1: items (simulations) take milliseconds to seconds each, unevenly.
    tbb::parallel_for(tbb::blocked_range<std::size_t>(0, n, 1),
                      [&](const tbb::blocked_range<std::size_t>& r) {
                        for (std::size_t i = r.begin(); i != r.end(); ++i) run_one(i);
                      });
  });
}

}  // namespace trainplan
