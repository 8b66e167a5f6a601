// Device basics; see device.h.
#include "executor/cuda/device.h"

#include <atomic>
#include <mutex>

namespace trainplan::executor::cuda {

namespace {
std::atomic<std::int64_t> g_live{0}, g_peak{0};

// A caching pool in front of cudaMalloc (cudaFree synchronizes the device, and the stage model
// allocates per micro-batch). Sizes are rounded (512 B; 2 MiB above 1 MiB) and freed blocks
// wait in a free list for the next request of the same rounded size. Buffers are used on one
// compute stream, and communication streams are ordered back into it, so a block returned
// here is free in stream order. live/peak count the rounded bytes handed out.
std::mutex g_pool_mutex;
std::multimap<std::int64_t, void*> g_free;  // rounded size -> block

std::int64_t rounded(std::int64_t bytes) {
  const std::int64_t unit = bytes > (1 << 20) ? (2 << 20) : 512;
  return (bytes + unit - 1) / unit * unit;
}

void release_cached_locked() {
  for (auto& [size, p] : g_free) cudaFree(p);
  g_free.clear();
}
}  // namespace

void release_cached_memory() {
  std::lock_guard<std::mutex> lock(g_pool_mutex);
  release_cached_locked();
}

void throw_cuda_error(const char* call, const char* file, int line, const std::string& what) {
  int dev = -1;
  cudaGetDevice(&dev);
  throw CudaError(std::string(call) + " failed at " + file + ":" + std::to_string(line) +
                  " (device " + std::to_string(dev) + "): " + what);
}

void check_cuda(cudaError_t e, const char* call, const char* file, int line) {
  if (e == cudaSuccess) return;
  throw_cuda_error(call, file, line,
                   std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e));
}

void check_cublas(cublasStatus_t s, const char* call, const char* file, int line) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  throw_cuda_error(call, file, line, "cuBLAS status " + std::to_string(static_cast<int>(s)));
}

int device_count(std::string* reason) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error so later queries start clean
    if (reason != nullptr)
      *reason = std::string("cudaGetDeviceCount failed: ") + cudaGetErrorName(e) + " (" +
                cudaGetErrorString(e) + ")";
    return 0;
  }
  if (n == 0 && reason != nullptr) *reason = "cudaGetDeviceCount reports no CUDA device";
  return n;
}

void* device_alloc_bytes(std::int64_t requested) {
  const std::int64_t bytes = rounded(requested);
  void* p = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_pool_mutex);
    auto it = g_free.find(bytes);
    if (it != g_free.end()) {
      p = it->second;
      g_free.erase(it);
    } else if (cudaMalloc(&p, static_cast<std::size_t>(bytes)) != cudaSuccess) {
      cudaGetLastError();
      release_cached_locked();  // out of memory: give the cache back and try once more
      TP_CUDA(cudaMalloc(&p, static_cast<std::size_t>(bytes)));
    }
  }
  const std::int64_t live = g_live.fetch_add(bytes) + bytes;
  std::int64_t peak = g_peak.load();
  while (live > peak && !g_peak.compare_exchange_weak(peak, live)) {
  }
  return p;
}

void device_free_bytes(void* p, std::int64_t requested) noexcept {
  const std::int64_t bytes = rounded(requested);
  try {
    std::lock_guard<std::mutex> lock(g_pool_mutex);
    g_free.emplace(bytes, p);
  } catch (...) {
    cudaFree(p);  // no room in the free list: give it back to the driver
  }
  g_live.fetch_sub(bytes);
}

DeviceMemoryStats device_memory_stats() {
  DeviceMemoryStats s;
  s.live_bytes = g_live.load();
  s.peak_bytes = g_peak.load();
  std::size_t free_b = 0, total_b = 0;
  TP_CUDA(cudaMemGetInfo(&free_b, &total_b));
  s.device_used_bytes = static_cast<std::int64_t>(total_b - free_b);
  s.device_total_bytes = static_cast<std::int64_t>(total_b);
  return s;
}

void reset_peak_memory() { g_peak.store(g_live.load()); }

PhaseTimer::~PhaseTimer() { clear(); }

void PhaseTimer::begin(const std::string& phase) {
  Span s;
  s.phase = phase;
  TP_CUDA(cudaEventCreate(&s.start));
  TP_CUDA(cudaEventCreate(&s.stop));
  TP_CUDA(cudaEventRecord(s.start, stream_));
  open_[phase] = spans_.size();
  spans_.push_back(s);
}

void PhaseTimer::end(const std::string& phase) {
  auto it = open_.find(phase);
  if (it == open_.end()) throw CudaError("PhaseTimer::end(" + phase + ") without begin");
  TP_CUDA(cudaEventRecord(spans_[it->second].stop, stream_));
  open_.erase(it);
}

std::map<std::string, double> PhaseTimer::elapsed_s() {
  std::map<std::string, double> out;
  for (const Span& s : spans_) {
    TP_CUDA(cudaEventSynchronize(s.stop));
    float ms = 0;
    TP_CUDA(cudaEventElapsedTime(&ms, s.start, s.stop));
    out[s.phase] += ms * 1e-3;
  }
  return out;
}

std::vector<PhaseTimer::SpanTime> PhaseTimer::spans() {
  std::vector<SpanTime> out;
  for (std::size_t i = 0; i < spans_.size(); ++i) {
    bool open = false;
    for (const auto& [phase, index] : open_) open = open || index == i;
    if (open) continue;
    const Span& s = spans_[i];
    TP_CUDA(cudaEventSynchronize(s.stop));
    float start_ms = 0, ms = 0;
    TP_CUDA(cudaEventElapsedTime(&start_ms, spans_[0].start, s.start));
    TP_CUDA(cudaEventElapsedTime(&ms, s.start, s.stop));
    out.push_back({s.phase, start_ms * 1e-3, ms * 1e-3});
  }
  return out;
}

void PhaseTimer::clear() {
  for (Span& s : spans_) {
    cudaEventDestroy(s.start);
    cudaEventDestroy(s.stop);
  }
  spans_.clear();
  open_.clear();
}

}  // namespace trainplan::executor::cuda
