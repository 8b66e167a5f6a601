// Device basics for the CUDA executor: checked CUDA/cuBLAS calls (the call text and file:line
// in the message), device buffers that count the allocator's high-water mark, CUDA events per
// phase, and the device query the GPU tests use to skip.
//
// Errors are thrown as CudaError (a broken device or invariant inside a step is not
// recoverable); the tool's main() turns it into an exit code. Tested by
// tests/executor/cuda/kernels_test.cc.
#pragma once

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace trainplan::executor::cuda {

class CudaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

[[noreturn]] void throw_cuda_error(const char* call, const char* file, int line,
                                   const std::string& what);
void check_cuda(cudaError_t e, const char* call, const char* file, int line);
void check_cublas(cublasStatus_t s, const char* call, const char* file, int line);

#define TP_CUDA(call) ::trainplan::executor::cuda::check_cuda((call), #call, __FILE__, __LINE__)
#define TP_CUBLAS(call) ::trainplan::executor::cuda::check_cublas((call), #call, __FILE__, __LINE__)
// After a kernel launch: the launch error now (bad configuration), not a later call's.
#define TP_LAUNCH_CHECK(name) \
  ::trainplan::executor::cuda::check_cuda(cudaGetLastError(), "launch of " #name, __FILE__, __LINE__)

using bf16 = __nv_bfloat16;

// Number of CUDA devices, or 0 with the reason when there are none or the runtime cannot tell
// (no driver, no device node). Never throws.
int device_count(std::string* reason);

// Allocator accounting of this process: bytes live now and their high-water mark.
struct DeviceMemoryStats {
  std::int64_t live_bytes = 0, peak_bytes = 0;
  std::int64_t device_used_bytes = 0;   // cudaMemGetInfo: total - free (all processes, context)
  std::int64_t device_total_bytes = 0;
};
DeviceMemoryStats device_memory_stats();
void reset_peak_memory();
// Returns the pool's cached free blocks to the driver (cudaFree).
void release_cached_memory();

// Owning, typed device allocation from a caching pool over cudaMalloc (device.cc), counted in
// device_memory_stats.
template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::int64_t n) { resize(n); }
  ~DeviceBuffer() { release(); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      release();
      p_ = std::exchange(o.p_, nullptr);
      n_ = std::exchange(o.n_, 0);
    }
    return *this;
  }
  // Reallocates only when the size changes; contents are undefined afterwards.
  void resize(std::int64_t n) {
    if (n == n_) return;
    release();
    if (n > 0) p_ = static_cast<T*>(device_alloc(n * static_cast<std::int64_t>(sizeof(T))));
    n_ = n;
  }
  void release() noexcept {
    if (p_ != nullptr) device_free(p_, n_ * static_cast<std::int64_t>(sizeof(T)));
    p_ = nullptr;
    n_ = 0;
  }
  T* data() { return p_; }
  const T* data() const { return p_; }
  std::int64_t size() const { return n_; }
  bool empty() const { return n_ == 0; }

  static void* device_alloc(std::int64_t bytes);
  static void device_free(void* p, std::int64_t bytes) noexcept;

 private:
  T* p_ = nullptr;
  std::int64_t n_ = 0;
};

void* device_alloc_bytes(std::int64_t bytes);
void device_free_bytes(void* p, std::int64_t bytes) noexcept;
template <typename T>
void* DeviceBuffer<T>::device_alloc(std::int64_t bytes) { return device_alloc_bytes(bytes); }
template <typename T>
void DeviceBuffer<T>::device_free(void* p, std::int64_t bytes) noexcept {
  device_free_bytes(p, bytes);
}

// Host <-> device copies (synchronous on the given stream).
template <typename T>
void to_device(const T* host, T* dev, std::int64_t n, cudaStream_t s = nullptr) {
  TP_CUDA(cudaMemcpyAsync(dev, host, static_cast<std::size_t>(n) * sizeof(T),
                          cudaMemcpyHostToDevice, s));
  TP_CUDA(cudaStreamSynchronize(s));
}
template <typename T>
std::vector<T> to_host(const T* dev, std::int64_t n, cudaStream_t s = nullptr) {
  std::vector<T> out(static_cast<std::size_t>(n));
  TP_CUDA(cudaMemcpyAsync(out.data(), dev, static_cast<std::size_t>(n) * sizeof(T),
                          cudaMemcpyDeviceToHost, s));
  TP_CUDA(cudaStreamSynchronize(s));
  return out;
}

// Device time per named phase ("forward", "backward", "optimizer", "comm_tp", ...), measured
// with CUDA events recorded on the phase's stream; read with elapsed_s() after a sync.
class PhaseTimer {
 public:
  explicit PhaseTimer(cudaStream_t stream) : stream_(stream) {}
  ~PhaseTimer();
  PhaseTimer(const PhaseTimer&) = delete;
  PhaseTimer& operator=(const PhaseTimer&) = delete;
  void begin(const std::string& phase);
  void end(const std::string& phase);
  // Sum over every begin/end pair of each phase, seconds (synchronizes the events).
  std::map<std::string, double> elapsed_s();
  // Every closed span in order: phase, start after the first span's start, duration (seconds).
  struct SpanTime {
    std::string phase;
    double start_s = 0, duration_s = 0;
  };
  std::vector<SpanTime> spans();
  void clear();

 private:
  struct Span {
    std::string phase;
    cudaEvent_t start = nullptr, stop = nullptr;
  };
  cudaStream_t stream_;
  std::vector<Span> spans_;
  std::map<std::string, std::size_t> open_;  // phase -> index of its open span
};

}  // namespace trainplan::executor::cuda
