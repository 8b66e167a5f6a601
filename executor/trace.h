// A Chrome trace (chrome://tracing, https://ui.perfetto.dev) of one measured training step,
// laid out as the simulator's predicted trace (`simulate --trace`, simulator/timeline.cc) so
// that the two open side by side: one process per rank named "rank R (stage S)", one thread per
// track numbered and named as the simulator's streams (simulator/program.h StreamKind), and
// complete events named "<pass> mb<micro-batch> L<layer> <task>" after the cost model's tasks
// (core/cost/tasks.cc, core/cost/data_parallel.cc), with args micro_batch, layer and bytes_sent.
//
// Recording: Trainer::step(batch, &recorder) installs the recorder in the stage model and the
// Comm for that step only. The stage model opens a TraceSpan around the code of each cost-model
// task; Comm's public calls record every collective over a group of more than one rank with the
// bytes this rank sent. Without a recorder each hook is one null-pointer test.
//
// Serialisation is a pure function (the library does no file I/O) through the writer the
// simulator's trace uses too (core/chrome_trace.h): each rank renders its events with
// chrome_trace_rank_events, rank 0 gathers the text and joins it with chrome_trace_json,
// and tools/execute.cc writes the file (`execute ... --trace FILE`).
// Tested by tests/executor/trace_test.cc and, under mpirun, parallel_check.cc and
// trace_tool_test.cc.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/cost/cost_model.h"

namespace trainplan::executor {

// The tracks of a rank; tid = the enumerator, as simulator/program.h numbers its streams.
enum class TraceTrack : std::int32_t {
  kCompute = 0, kTp, kPpSendNext, kPpSendPrev, kDp, kEp, kHost
};
inline constexpr std::int32_t kNumTraceTracks = 7;
// "compute", "tp", "pp send next", "pp send prev", "dp", "ep", "host" (the simulator's names).
std::string_view to_string(TraceTrack t);
// The track a collective of group `g` named `task` runs on, as the simulator places it (its
// stream_of): tp and ep on their own, dp, expert-dp and the embedding group on "dp"; pipeline
// sends by direction, "send_backward" on "pp send prev" and every other send on "pp send next".
// A receive blocks the compute stream and is drawn there, as the simulator's recv_* ops.
TraceTrack comm_track(CommGroup g, Collective c, std::string_view task);

// What the spans and collectives recorded now belong to (the simulator's OpMeta fields).
struct TraceContext {
  char pass = ' ';               // 'F', 'B', 'R' (recompute), 'O' (optimizer), ' '
  std::int32_t micro_batch = -1;
  std::int32_t layer = -1;       // global layer index, -1 outside transformer layers
};

struct TraceEvent {
  std::string task;              // cost-model task name; several joined by '+' (see below)
  TraceContext context;
  TraceTrack track = TraceTrack::kCompute;
  std::int64_t begin_ns = 0;     // since the start of the step on this rank's steady clock
  std::int64_t end_ns = 0;
  std::int64_t bytes_sent = 0;   // collectives: this rank's payload (core/cost/collectives.h)
  std::optional<CommGroup> group;  // collectives: the group whose counter holds bytes_sent
};

using TraceClock = std::chrono::steady_clock;

// What every step trace holds, whichever backend records it (this file's TraceRecorder on the
// host, executor/cuda/device_trace.h's DeviceTrace on a GPU): the context that the Trainer, the
// stage model and the communicator set for what they record next.
class StepTrace {
 public:
  virtual ~StepTrace() = default;
  const TraceContext& context() const { return context_; }
  void set_context(const TraceContext& c) { context_ = c; }

 protected:
  TraceContext context_;
};

class TraceRecorder final : public StepTrace {
 public:
  using Clock = TraceClock;

  // Forgets the events and context recorded so far; `origin` becomes time 0 (the step's start on
  // this rank; Trainer::step starts a traced step on all ranks together, so their 0s agree).
  void start_step(Clock::time_point origin);
  // One complete event in the current context (a collective: the context it ran in).
  void record(std::string_view task, TraceTrack track, Clock::time_point begin,
              Clock::time_point end, std::int64_t bytes_sent = 0,
              std::optional<CommGroup> group = std::nullopt) {
    record(context_, task, track, begin, end, bytes_sent, group);
  }
  // ... in the given context (a span: the context it began in).
  void record(const TraceContext& context, std::string_view task, TraceTrack track,
              Clock::time_point begin, Clock::time_point end, std::int64_t bytes_sent = 0,
              std::optional<CommGroup> group = std::nullopt);
  const std::vector<TraceEvent>& events() const { return events_; }

 private:
  Clock::time_point origin_{};
  std::vector<TraceEvent> events_;
};

// Changes some fields of the recorder's context for a scope, restoring them when it ends.
// A null recorder makes it a no-op. Any recorder with context() and set_context() (this
// TraceRecorder, the CUDA executor's DeviceTrace) works: `TraceScope s(recorder, {...})`.
struct TraceContextChange {
  std::optional<char> pass = std::nullopt;
  std::optional<std::int32_t> micro_batch = std::nullopt, layer = std::nullopt;
};
template <typename Recorder = TraceRecorder>
class TraceScope {
 public:
  TraceScope(Recorder* r, const TraceContextChange& change) : r_(r) {
    if (r_ == nullptr) return;
    saved_ = r_->context();
    TraceContext c = saved_;
    if (change.pass) c.pass = *change.pass;
    if (change.micro_batch) c.micro_batch = *change.micro_batch;
    if (change.layer) c.layer = *change.layer;
    r_->set_context(c);
  }
  ~TraceScope() {
    if (r_ != nullptr) r_->set_context(saved_);
  }
  TraceScope(const TraceScope&) = delete;
  TraceScope& operator=(const TraceScope&) = delete;

 private:
  Recorder* r_;
  TraceContext saved_;
};
TraceScope(std::nullptr_t, const TraceContextChange&) -> TraceScope<TraceRecorder>;

// Consecutive spans of code on one track: begin(task) ends the open span (if any) and opens the
// next in the recorder's current context; end() closes it (before a collective, so that the
// compute track holds compute only); the destructor closes what is still open. `task` must
// outlive the span (a literal or a member).
// When the executor runs one cost-model task as several calls (Q, K, V as three GEMMs for
// "qkv"), one span covers them; when one call covers several tasks (the attention kernel), the
// span is named by those tasks joined with '+' ("attn_scores+softmax+attn_values").
class TraceSpan {
 public:
  explicit TraceSpan(TraceRecorder* r, TraceTrack track = TraceTrack::kCompute)
      : r_(r), track_(track) {}
  ~TraceSpan() { end(); }
  TraceSpan(const TraceSpan&) = delete;
  TraceSpan& operator=(const TraceSpan&) = delete;

  void begin(std::string_view task) {
    if (r_ == nullptr) return;
    end();
    task_ = task;
    context_ = r_->context();
    begin_ = TraceRecorder::Clock::now();
    open_ = true;
  }
  void end() {
    if (r_ == nullptr || !open_) return;
    r_->record(context_, task_, track_, begin_, TraceRecorder::Clock::now());
    open_ = false;
  }

 private:
  TraceRecorder* r_;
  TraceTrack track_;
  std::string_view task_;
  TraceContext context_;
  TraceRecorder::Clock::time_point begin_{};
  bool open_ = false;
};

// The name of a span that covers several tasks: the names of the tasks strictly between
// `after` and `before` in `tasks`, joined by '+' (the attention kernels: "attention", or
// "attn_scores+softmax+attn_values"). A broken invariant if there are none.
std::string tasks_between(const std::vector<Task>& tasks, std::string_view after,
                          std::string_view before);

// The event name, built as simulator/timeline.cc builds it from OpMeta: "F mb0 L3 qkv",
// "mb2 send_forward", "O optimizer", " L3 dp_grad_all_reduce".
std::string trace_event_name(const TraceEvent& e);
// One rank's part of a Chrome trace: its process name ("rank R (stage S)"), its tracks' thread
// names and its events ("ph":"X", ts and dur in microseconds), as JSON objects separated by
// ",\n", so that rank 0 can gather every rank's text and join it with chrome_trace_json.
std::string chrome_trace_rank_events(std::int64_t rank, std::int64_t stage,
                                     const std::vector<TraceEvent>& events);
// The whole trace: {"displayTimeUnit":"ns","traceEvents":[...]} over the ranks' parts.
std::string chrome_trace_json(const std::vector<std::string>& rank_events);

}  // namespace trainplan::executor
