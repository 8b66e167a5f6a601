// Compute measurements; see kernels.h. Tested by tests/calibration/profile_test.cc.
#include "calibration/kernels.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include <Eigen/Dense>

#include "executor/cpu/kernels.h"
#include "executor/cpu/reference_gemm.h"
#include "executor/offload.h"

namespace trainplan::calibration {

namespace {

using Clock = std::chrono::steady_clock;
using ArrayF = Eigen::ArrayXf;

double d(std::int64_t v) { return static_cast<double>(v); }

// Median seconds of one call of `fn`, after one warm-up call; `calls` receives the count.
template <class Fn>
double median_call_time(const TimingOptions& o, std::int64_t& calls, Fn&& fn) {
  fn();
  std::vector<double> times;
  const auto start = Clock::now();
  while (static_cast<int>(times.size()) < o.min_calls ||
         std::chrono::duration<double>(Clock::now() - start).count() < o.min_time_s) {
    const auto t0 = Clock::now();
    fn();
    times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    if (times.size() >= 100000) break;
  }
  calls = static_cast<std::int64_t>(times.size());
  std::nth_element(times.begin(), times.begin() + static_cast<std::ptrdiff_t>(times.size() / 2),
                   times.end());
  return times[times.size() / 2];
}

// Keeps a computed value observable so the compiler cannot drop the kernel.
volatile float g_sink = 0.0f;

}  // namespace

double TaskSample::flops() const {
  double f = 0;
  for (const Task& t : tasks) f += t.executed_flops * static_cast<double>(t.repeat);
  return f;
}

double TaskSample::bytes() const {
  double b = 0;
  for (const Task& t : tasks)
    if (t.kind == TaskKind::kMemory) b += t.bytes * static_cast<double>(t.repeat);
  return b;
}

std::vector<GemmShape> gemm_sweep_shapes(const std::vector<std::int64_t>& sizes) {
  std::vector<GemmShape> out;
  for (std::int64_t m : sizes)
    for (std::int64_t n : sizes)
      for (std::int64_t k : sizes) out.push_back({m, n, k});
  return out;
}

namespace {
// The sweep task's name carries its direction (gemm_direction reads the suffix).
std::string_view sweep_name(GemmDirection d) {
  switch (d) {
    case GemmDirection::kForward: return "sweep";
    case GemmDirection::kInputGradient: return "sweep_dgrad";
    case GemmDirection::kWeightGradient: return "sweep_wgrad";
  }
  return "sweep";
}

// Times the executor's product of `direction` whose output is m x n with reduction k (the
// task's shape), on operands laid out as the executor holds them: a linear layer's weight W
// is (in, out) row-major, so
//  - forward, Y (m x n) = X (m x k) W (k x n);
//  - input gradient, dX (m x n) = dY (m x k) W^T, W (n x k);
//  - weight gradient, dW (m x n) += X^T dY, X (k x m), dY (k x n).
double time_product(const GemmShape& s, GemmDirection direction, const TimingOptions& o,
                    std::int64_t& calls) {
  using executor::ConstMatMap;
  using executor::Mat;
  using executor::MatMap;
  Mat out = Mat::Zero(s.m, s.n);
  double seconds = 0;
  if (direction == GemmDirection::kForward) {
    // The operands and call the in-run reference kernel also runs (reference_gemm.h).
    executor::GemmOperands gemm(s.m, s.n, s.k);
    seconds = median_call_time(o, calls, [&] { gemm.run(); });
    g_sink = g_sink + gemm.checksum();
  } else if (direction == GemmDirection::kInputGradient) {
    const Mat dy = Mat::Random(s.m, s.k), w = Mat::Random(s.n, s.k);
    seconds = median_call_time(o, calls, [&] {
      executor::linear_input_gradient(ConstMatMap(w.data(), s.n, s.k), dy, out);
    });
  } else {
    const Mat x = Mat::Random(s.k, s.m), dy = Mat::Random(s.k, s.n);
    MatMap dw(out.data(), s.m, s.n);
    seconds = median_call_time(o, calls, [&] { executor::linear_weight_gradient(x, dy, dw); });
  }
  g_sink = g_sink + out(0, 0);
  return seconds;
}
}  // namespace

TaskSample time_gemm(const GemmShape& s, const TimingOptions& o, GemmDirection direction) {
  TaskSample r;
  r.name = std::string(sweep_name(direction));
  r.probe = "sweep";
  Task t;
  t.name = sweep_name(direction);
  t.kind = TaskKind::kGemm;
  t.m = s.m;
  t.n = s.n;
  t.k = s.k;
  t.flops = t.executed_flops = 2.0 * d(s.m) * d(s.n) * d(s.k);
  t.bytes = 4.0 * (d(s.m) * d(s.k) + d(s.k) * d(s.n) + d(s.m) * d(s.n));
  r.tasks.push_back(t);
  r.time_s = time_product(s, direction, o, r.calls);
  return r;
}

std::vector<StreamSample> time_stream(double array_bytes, const TimingOptions& o) {
  const auto n = static_cast<Eigen::Index>(std::max(1.0, array_bytes / 4.0));
  ArrayF a = ArrayF::Constant(n, 1.0f), b = ArrayF::Constant(n, 2.0f),
         c = ArrayF::Constant(n, 0.5f);
  const float s = 3.0f;
  const double bytes = 4.0 * static_cast<double>(n);
  std::vector<StreamSample> out;
  auto run = [&](const char* name, double arrays, auto&& fn) {
    StreamSample x;
    x.kernel = name;
    x.array_bytes = bytes;
    x.bytes_moved = arrays * bytes;
    std::int64_t calls = 0;
    x.time_s = median_call_time(o, calls, fn);
    out.push_back(x);
  };
  run("copy", 2, [&] { c = a; });
  run("scale", 2, [&] { b = s * c; });
  run("add", 3, [&] { c = a + b; });
  run("triad", 3, [&] { a = b + s * c; });
  g_sink = g_sink + a(0) + c(n - 1);
  return out;
}

Result<FileIoSample> time_offload_file(const std::string& dir, std::int64_t rank, double bytes,
                                       const TimingOptions& o) {
  const auto n = static_cast<std::int64_t>(std::max(4096.0, bytes));
  auto file = executor::OffloadFile::create(dir, rank, n);
  if (!file.ok()) return file.status();
  std::vector<char> buffer(static_cast<std::size_t>(n), 1);
  Status failed;
  auto io = [&](bool write) {
    if (!failed.ok()) return;
    Status st = write ? (*file)->write(0, buffer.data(), n) : (*file)->read(0, buffer.data(), n);
    if (!st.ok()) failed = st;
  };
  FileIoSample x;
  x.bytes = static_cast<double>(n);
  std::int64_t calls = 0;
  x.write_s = median_call_time(o, calls, [&] { io(true); });
  x.read_s = median_call_time(o, calls, [&] { io(false); });
  if (!failed.ok()) return failed;
  g_sink = g_sink + static_cast<float>(buffer[static_cast<std::size_t>(n - 1)]);
  return x;
}

}  // namespace trainplan::calibration
