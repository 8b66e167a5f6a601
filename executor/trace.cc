// The step trace's recorder and its Chrome JSON; see trace.h.
#include "executor/trace.h"

#include "core/chrome_trace.h"

namespace trainplan::executor {

std::string_view to_string(TraceTrack t) {
  switch (t) {
    case TraceTrack::kCompute: return "compute";
    case TraceTrack::kTp: return "tp";
    case TraceTrack::kPpSendNext: return "pp send next";
    case TraceTrack::kPpSendPrev: return "pp send prev";
    case TraceTrack::kDp: return "dp";
    case TraceTrack::kEp: return "ep";
    case TraceTrack::kHost: return "host";
  }
  return "?";
}

TraceTrack comm_track(CommGroup g, Collective c, std::string_view task) {
  if (c == Collective::kSendRecv) {
    if (task.starts_with("recv")) return TraceTrack::kCompute;
    return task == "send_backward" ? TraceTrack::kPpSendPrev : TraceTrack::kPpSendNext;
  }
  switch (g) {
    case CommGroup::kTp:
    case CommGroup::kExpertTp: return TraceTrack::kTp;
    case CommGroup::kEp: return TraceTrack::kEp;
    default: return TraceTrack::kDp;
  }
}

void TraceRecorder::start_step(Clock::time_point origin) {
  origin_ = origin;
  context_ = {};
  events_.clear();
}

void TraceRecorder::record(const TraceContext& context, std::string_view task, TraceTrack track,
                           Clock::time_point begin, Clock::time_point end,
                           std::int64_t bytes_sent, std::optional<CommGroup> group) {
  auto ns = [&](Clock::time_point t) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(t - origin_).count();
  };
  events_.push_back({std::string(task), context, track, ns(begin), ns(end), bytes_sent, group});
}

std::string trace_event_name(const TraceEvent& e) {
  return chrome_trace_event_name(e.context.pass, e.context.micro_batch, e.context.layer, e.task);
}

std::string chrome_trace_rank_events(std::int64_t rank, std::int64_t stage,
                                     const std::vector<TraceEvent>& events) {
  std::vector<std::string_view> tracks;
  for (std::int32_t k = 0; k < kNumTraceTracks; ++k)
    tracks.push_back(to_string(static_cast<TraceTrack>(k)));
  ChromeTraceWriter w;
  w.rank(rank, stage, tracks);
  for (const TraceEvent& e : events)
    w.complete(trace_event_name(e), rank, static_cast<std::int32_t>(e.track), e.begin_ns,
               e.end_ns - e.begin_ns, e.context.micro_batch, e.context.layer, e.bytes_sent);
  return w.take();
}

std::string chrome_trace_json(const std::vector<std::string>& rank_events) {
  return chrome_trace_document(rank_events);
}

std::string tasks_between(const std::vector<Task>& tasks, std::string_view after,
                          std::string_view before) {
  std::string out;
  bool inside = false;
  for (const Task& t : tasks) {
    if (t.name == before) break;
    if (inside) {
      if (!out.empty()) out += '+';
      out += t.name;
    }
    if (t.name == after) inside = true;
  }
  TRAINPLAN_CHECK(!out.empty()) << "no cost-model task between " << after << " and " << before;
  return out;
}

}  // namespace trainplan::executor
