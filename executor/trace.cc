// The step trace's recorder and its Chrome JSON; see trace.h.
#include "executor/trace.h"

#include <cstdio>

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
    case CommGroup::kTp: return TraceTrack::kTp;
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
  std::string name;
  if (e.context.pass != ' ') name += e.context.pass;
  if (e.context.micro_batch >= 0) {
    if (!name.empty()) name += ' ';
    name += "mb" + std::to_string(e.context.micro_batch);
  }
  if (e.context.layer >= 0) name += " L" + std::to_string(e.context.layer);
  if (!name.empty()) name += ' ';
  return name + e.task;
}

namespace {
// Task names are identifiers; escaping quotes and dropping control characters keeps the JSON
// valid whatever they hold.
std::string json_escaped(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) out += c;
  }
  return out;
}
}  // namespace

std::string chrome_trace_rank_events(std::int64_t rank, std::int64_t stage,
                                     const std::vector<TraceEvent>& events) {
  std::string out;
  char buf[512];
  auto add = [&](const char* text) {
    if (!out.empty()) out += ",\n";
    out += text;
  };
  const long long pid = rank;
  std::snprintf(buf, sizeof buf,
                "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%lld,\"args\":{\"name\":"
                "\"rank %lld (stage %lld)\"}}",
                pid, pid, static_cast<long long>(stage));
  add(buf);
  for (std::int32_t k = 0; k < kNumTraceTracks; ++k) {
    std::snprintf(buf, sizeof buf,
                  "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%lld,\"tid\":%d,\"args\":{"
                  "\"name\":\"%s\"}}",
                  pid, k, std::string(to_string(static_cast<TraceTrack>(k))).c_str());
    add(buf);
  }
  for (const TraceEvent& e : events) {
    const int n = std::snprintf(
        buf, sizeof buf,
        "{\"name\":\"%s\",\"ph\":\"X\",\"pid\":%lld,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,"
        "\"args\":{\"micro_batch\":%d,\"layer\":%d,\"bytes_sent\":%lld}}",
        json_escaped(trace_event_name(e)).c_str(), pid, static_cast<int>(e.track),
        static_cast<double>(e.begin_ns) / 1e3, static_cast<double>(e.end_ns - e.begin_ns) / 1e3,
        e.context.micro_batch, e.context.layer, static_cast<long long>(e.bytes_sent));
    TRAINPLAN_CHECK(n > 0 && n < static_cast<int>(sizeof buf))
        << "trace event too long: " << e.task;
    add(buf);
  }
  return out;
}

std::string chrome_trace_json(const std::vector<std::string>& rank_events) {
  std::string out = "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n";
  bool first = true;
  for (const std::string& part : rank_events) {
    if (part.empty()) continue;
    if (!first) out += ",\n";
    first = false;
    out += part;
  }
  return out + "\n]}\n";
}

}  // namespace trainplan::executor
