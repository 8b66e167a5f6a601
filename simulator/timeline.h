// What a played program looks like afterwards, per simulated rank: memory over time and its
// peak, the report figures, and the Chrome trace. Computed by timeline.cc from the engine's
// op start/end times, rank by rank on up to `threads` threads. Tested by
// tests/simulator/simulator_test.cc (figures) and tests/simulator/parallel_test.cc (the same
// bytes on any thread count, the trace's order).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/chrome_trace.h"
#include "core/html_report.h"
#include "core/step_report.h"
#include "simulator/program.h"

namespace trainplan::sim {

struct MemorySample {
  TimeNs time = 0;
  double activations_bytes = 0, buffers_bytes = 0;
};

struct SlotTimeline {
  RankStep step;                     // the report's figures for this rank
  TimeNs pipeline_busy_ns = 0;       // compute in forward/backward/recompute
  // Compute-stream idle time, before the pipeline's end, spent waiting for this rank's own
  // collectives and copies (TP, CP, EP, ZeRO gathers queued behind reductions) rather than for
  // other stages: not pipeline bubble.
  TimeNs comm_waited_ns = 0;
  std::int64_t peak_in_flight = 0;   // (micro-batch, model chunk) pairs with stored activations
  std::vector<MemorySample> memory;  // after each change
};

// Fills one SlotTimeline per simulated slot, the slots on up to `threads` threads (0: every
// core; the result does not depend on it).
std::vector<SlotTimeline> slot_timelines(const Program& program, TimeNs step_end,
                                         unsigned threads = 1);
// The latest end of a forward/backward/recompute compute op on any rank (the slots on up to
// `threads` threads).
TimeNs pipeline_end(const Program& program, unsigned threads = 1);
// Chrome trace JSON (chrome://tracing, Perfetto): a process per rank, a thread per stream,
// complete events per op, memory counters; written with core/chrome_trace.h, as the
// executor's measured trace is. The slots' events are formatted on up to `threads` threads (0:
// every core); the bytes do not depend on it (tests/simulator/parallel_test.cc).
std::string chrome_trace(const Program& program, const std::vector<SlotTimeline>& timelines,
                         unsigned threads = 1);
// The same document, streamed to `sink` as it is written.
void stream_chrome_trace(const Program& program, const std::vector<SlotTimeline>& timelines,
                         const ChromeTraceWriter::Sink& sink, unsigned threads = 1);
// The step as a picture (html_report.h): compute and communication lanes of up to 16 ranks (the
// first of each stage first), the step's time broken down on the slowest rank, and memory over
// time against `capacity_bytes` and `usable_bytes`.
html::StepPicture step_picture(const Program& program, const std::vector<SlotTimeline>& timelines,
                               TimeNs step_end, double capacity_bytes, double usable_bytes);

}  // namespace trainplan::sim
