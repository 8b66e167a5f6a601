// Per-task device time of the CUDA executor, as executor/trace.h's TraceEvents: the GPU side of
// the same trace, so that `execute --backend cuda --report ... --trace` lays a measured GPU step
// out as `simulate --trace` does and the calibration (calibration/cuda) times the executor's
// own kernels per cost-model task, as calibration/executor_probe.h does on CPU.
//
// A span is a pair of CUDA events recorded on the stream that runs its work: the first before
// its first kernel, the second after its last. Its time is the device's (cudaEventElapsedTime
// from the step's origin event), so it includes the gaps in which the stream waited for the
// host to launch the next kernel: a launch-bound step pays those gaps too. Reading the times
// synchronizes the events, so events() is called after the step's work is done.
// Without a DeviceTrace every hook is one null-pointer test.
// Runs on a GPU only: bench/gpu/run_all.sh and the CUDA tests exercise it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "executor/trace.h"

namespace trainplan::executor::cuda {

class DeviceTrace final : public StepTrace {
 public:
  DeviceTrace() = default;
  ~DeviceTrace() override;
  DeviceTrace(const DeviceTrace&) = delete;
  DeviceTrace& operator=(const DeviceTrace&) = delete;

  // Forgets the spans of the last step and records time 0 on `stream` (the compute stream,
  // before any work of the step is enqueued). The context is reset.
  void start_step(cudaStream_t stream);

  // A span of the work enqueued on `stream` from now until close(span, stream), in the current
  // context; collectives give the bytes this rank sends and their group. Returns the span.
  std::size_t open(std::string_view task, TraceTrack track, cudaStream_t stream,
                   std::int64_t bytes_sent = 0, std::optional<CommGroup> group = std::nullopt);
  void close(std::size_t span, cudaStream_t stream);

  // The closed spans, in nanoseconds from time 0 (synchronizes their events).
  std::vector<TraceEvent> events();

 private:
  cudaEvent_t event();  // from the pool, grown as needed

  struct Span {
    TraceEvent event;   // without times
    cudaEvent_t begin = nullptr, end = nullptr;
  };
  std::vector<cudaEvent_t> pool_;
  std::size_t used_ = 0;
  cudaEvent_t origin_ = nullptr;
  std::vector<Span> spans_;
};

// executor/trace.h's TraceSpan on a stream: consecutive spans of compute, begin(task) closing
// the open one; end() before a collective; the destructor closes what is open.
class DeviceTraceSpan {
 public:
  DeviceTraceSpan(DeviceTrace* t, cudaStream_t stream) : t_(t), stream_(stream) {}
  ~DeviceTraceSpan() {
    try {
      end();
    } catch (...) {  // unwinding from a CUDA error already: the span is lost, not the error
    }
  }
  DeviceTraceSpan(const DeviceTraceSpan&) = delete;
  DeviceTraceSpan& operator=(const DeviceTraceSpan&) = delete;
  void begin(std::string_view task) {
    if (t_ == nullptr) return;
    end();
    span_ = t_->open(task, TraceTrack::kCompute, stream_);
    open_ = true;
  }
  void end() {
    if (t_ == nullptr || !open_) return;
    t_->close(span_, stream_);
    open_ = false;
  }

 private:
  DeviceTrace* t_;
  cudaStream_t stream_;
  std::size_t span_ = 0;
  bool open_ = false;
};

}  // namespace trainplan::executor::cuda
