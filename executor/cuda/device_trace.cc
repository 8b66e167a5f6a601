// Per-task device time from CUDA events; see device_trace.h.
#include "executor/cuda/device_trace.h"

#include <cmath>

#include "executor/cuda/device.h"

namespace trainplan::executor::cuda {

DeviceTrace::~DeviceTrace() {
  for (cudaEvent_t e : pool_) cudaEventDestroy(e);
}

cudaEvent_t DeviceTrace::event() {
  if (used_ == pool_.size()) {
    cudaEvent_t e = nullptr;
    TP_CUDA(cudaEventCreate(&e));  // with timing (the default flags)
    pool_.push_back(e);
  }
  return pool_[used_++];
}

void DeviceTrace::start_step(cudaStream_t stream) {
  spans_.clear();
  used_ = 0;
  context_ = {};
  origin_ = event();
  TP_CUDA(cudaEventRecord(origin_, stream));
}

std::size_t DeviceTrace::open(std::string_view task, TraceTrack track, cudaStream_t stream,
                              std::int64_t bytes_sent, std::optional<CommGroup> group) {
  TRAINPLAN_CHECK(origin_ != nullptr) << "DeviceTrace::open before start_step";
  Span s;
  s.event.task = std::string(task);
  s.event.context = context_;
  s.event.track = track;
  s.event.bytes_sent = bytes_sent;
  s.event.group = group;
  s.begin = event();
  TP_CUDA(cudaEventRecord(s.begin, stream));
  spans_.push_back(std::move(s));
  return spans_.size() - 1;
}

void DeviceTrace::close(std::size_t span, cudaStream_t stream) {
  TRAINPLAN_CHECK(span < spans_.size() && spans_[span].end == nullptr)
      << "DeviceTrace::close of span " << span << " that is not open";
  spans_[span].end = event();
  TP_CUDA(cudaEventRecord(spans_[span].end, stream));
}

std::vector<TraceEvent> DeviceTrace::events() {
  std::vector<TraceEvent> out;
  out.reserve(spans_.size());
  auto ns_since_origin = [&](cudaEvent_t e) {
    TP_CUDA(cudaEventSynchronize(e));
    float ms = 0;
    TP_CUDA(cudaEventElapsedTime(&ms, origin_, e));
    return static_cast<std::int64_t>(std::llround(static_cast<double>(ms) * 1e6));
  };
  for (const Span& s : spans_) {
    if (s.end == nullptr) continue;  // never closed: not a span
    TraceEvent e = s.event;
    e.begin_ns = ns_since_origin(s.begin);
    e.end_ns = ns_since_origin(s.end);
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace trainplan::executor::cuda
