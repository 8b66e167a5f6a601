// The Chrome trace format (chrome://tracing, https://ui.perfetto.dev) as both traces of a step
// write it: the simulator's prediction (simulator/timeline.cc) and the executor's measurement
// (executor/trace.cc). One writer, so that the two name processes, threads and events alike and
// open side by side: a process per rank named "rank R (stage S)", a thread per track, complete
// events named "<pass> mb<micro-batch> L<layer> <task>" with args micro_batch, layer and
// bytes_sent. Pure string building, no I/O. Tested by tests/executor/trace_test.cc and
// tests/simulator/ (their traces).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/units.h"

namespace trainplan {

// "F mb0 L3 qkv": the pass (left out if ' '), "mb<micro-batch>" and " L<layer>" (left out if
// negative), then the task.
std::string chrome_trace_event_name(char pass, std::int32_t micro_batch, std::int32_t layer,
                                    std::string_view task);

// A trace body: JSON objects separated by ",\n", to wrap with chrome_trace_document (rank 0 of
// the executor gathers one body per rank and wraps them together).
class ChromeTraceWriter {
 public:
  using Sink = std::function<void(std::string_view)>;
  ChromeTraceWriter() = default;
  // Streaming: the whole document (chrome_trace_document's bytes for this one body) goes to
  // `sink` in chunks of about 1 MiB as it is written, so that a trace of thousands of ranks
  // never sits in memory at once; finish() writes the closing.
  explicit ChromeTraceWriter(Sink sink);
  void finish();
  // The process of `rank` ("rank R (stage S)") and its threads, tid k named thread_names[k].
  void rank(std::int64_t rank, std::int64_t stage,
            const std::vector<std::string_view>& thread_names);
  // A complete ("X") event, begin and duration in ns (written in microseconds).
  void complete(std::string_view name, std::int64_t pid, std::int32_t tid, TimeNs begin_ns,
                TimeNs duration_ns, std::int32_t micro_batch, std::int32_t layer,
                std::int64_t bytes_sent);
  // A flow arrow (flow events "s" and "f", Chrome's Trace Event Format) from (pid_from,
  // tid_from) at from_ns to the slice that begins next on (pid_to, tid_to) after to_ns: a
  // pipeline send to the compute it feeds. `id` pairs the two ends and must be unique.
  void flow(std::string_view name, std::int64_t id, std::int64_t pid_from, std::int32_t tid_from,
            TimeNs from_ns, std::int64_t pid_to, std::int32_t tid_to, TimeNs to_ns);
  // Any other event, already a JSON object (the simulator's memory counters).
  void object(std::string_view json);
  // Another writer's body (take()), appended as if its events had been written here; an empty
  // one adds nothing. Lets events be formatted in parallel and joined in order.
  void body(std::string_view events);
  std::string take() {
    any_ = false;
    return std::move(out_);
  }

 private:
  void separate();
  void flush_if_large();
  std::string out_;
  bool any_ = false;  // an object was written (since the last take)
  Sink sink_;
};

// {"displayTimeUnit":"ns","traceEvents":[...]} over the bodies, empty ones skipped.
std::string chrome_trace_document(const std::vector<std::string>& bodies);

}  // namespace trainplan
