// Chrome trace JSON; see chrome_trace.h.
#include "core/chrome_trace.h"

#include <cstdio>
#include <utility>

namespace trainplan {

namespace {
// Names are identifiers; escaping quotes and backslashes and dropping control characters keeps
// the JSON valid whatever they hold.
void append_escaped(std::string& out, std::string_view s) {
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) out += c;
  }
}
}  // namespace

std::string chrome_trace_event_name(char pass, std::int32_t micro_batch, std::int32_t layer,
                                    std::string_view task) {
  std::string name;
  if (pass != ' ') name += pass;
  if (micro_batch >= 0) {
    if (!name.empty()) name += ' ';
    name += "mb" + std::to_string(micro_batch);
  }
  if (layer >= 0) name += " L" + std::to_string(layer);
  if (!name.empty()) name += ' ';
  name += task;
  return name;
}

namespace {
constexpr const char* kDocumentOpening = "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n";
constexpr const char* kDocumentClosing = "\n]}\n";
constexpr std::size_t kChunkBytes = std::size_t{1} << 20;
}  // namespace

ChromeTraceWriter::ChromeTraceWriter(Sink sink) : sink_(std::move(sink)) {
  sink_(kDocumentOpening);
}

void ChromeTraceWriter::finish() {
  if (!sink_) return;
  sink_(out_);
  out_.clear();
  sink_(kDocumentClosing);
}

void ChromeTraceWriter::flush_if_large() {
  if (!sink_ || out_.size() < kChunkBytes) return;
  sink_(out_);
  out_.clear();
}

void ChromeTraceWriter::separate() {
  flush_if_large();
  if (any_) out_ += ",\n";
  any_ = true;
}

void ChromeTraceWriter::rank(std::int64_t rank, std::int64_t stage,
                             const std::vector<std::string_view>& thread_names) {
  const auto pid = static_cast<long long>(rank);
  separate();
  out_ += "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" + std::to_string(pid) +
          ",\"args\":{\"name\":\"rank " + std::to_string(pid) + " (stage " +
          std::to_string(stage) + ")\"}}";
  for (std::size_t k = 0; k < thread_names.size(); ++k) {
    separate();
    out_ += "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":" + std::to_string(pid) +
            ",\"tid\":" + std::to_string(k) + ",\"args\":{\"name\":\"";
    append_escaped(out_, thread_names[k]);
    out_ += "\"}}";
  }
}

void ChromeTraceWriter::complete(std::string_view name, std::int64_t pid, std::int32_t tid,
                                 TimeNs begin_ns, TimeNs duration_ns, std::int32_t micro_batch,
                                 std::int32_t layer, std::int64_t bytes_sent) {
  separate();
  out_ += "{\"name\":\"";
  append_escaped(out_, name);
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "\",\"ph\":\"X\",\"pid\":%lld,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,"
                "\"args\":{\"micro_batch\":%d,\"layer\":%d,\"bytes_sent\":%lld}}",
                static_cast<long long>(pid), tid, static_cast<double>(begin_ns) / 1e3,
                static_cast<double>(duration_ns) / 1e3, micro_batch, layer,
                static_cast<long long>(bytes_sent));
  out_ += buf;
}

void ChromeTraceWriter::flow(std::string_view name, std::int64_t id, std::int64_t pid_from,
                             std::int32_t tid_from, TimeNs from_ns, std::int64_t pid_to,
                             std::int32_t tid_to, TimeNs to_ns) {
  for (int end = 0; end < 2; ++end) {
    separate();
    out_ += "{\"name\":\"";
    append_escaped(out_, name);
    char buf[200];
    std::snprintf(buf, sizeof buf,
                  "\",\"cat\":\"flow\",\"ph\":\"%s\",\"id\":%lld,\"pid\":%lld,\"tid\":%d,\"ts\":%.3f}",
                  end == 0 ? "s" : "f", static_cast<long long>(id),
                  static_cast<long long>(end == 0 ? pid_from : pid_to), end == 0 ? tid_from : tid_to,
                  static_cast<double>(end == 0 ? from_ns : to_ns) / 1e3);
    out_ += buf;
  }
}

void ChromeTraceWriter::object(std::string_view json) {
  separate();
  out_ += json;
}

void ChromeTraceWriter::body(std::string_view events) {
  if (events.empty()) return;
  separate();
  out_ += events;
}

std::string chrome_trace_document(const std::vector<std::string>& bodies) {
  std::string out = kDocumentOpening;
  bool first = true;
  for (const std::string& body : bodies) {
    if (body.empty()) continue;
    if (!first) out += ",\n";
    first = false;
    out += body;
  }
  return out + kDocumentClosing;
}

}  // namespace trainplan
