// Shared by the CUDA executor's tests: skipping without a GPU, random bf16-representable inputs,
// host/device transfers and the relative L2 error that the tolerances are stated in.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "executor/cuda/device.h"

namespace trainplan::executor::cuda::testing {

// Skips the current test, saying why, when this machine has no usable CUDA device.
#define TRAINPLAN_REQUIRE_GPU()                                                        \
  do {                                                                                 \
    std::string why_;                                                                  \
    if (::trainplan::executor::cuda::device_count(&why_) == 0)                         \
      GTEST_SKIP() << "needs a CUDA GPU (" << why_ << "); run bench/gpu/run_all.sh on one"; \
  } while (0)

// Sets variables for one test and restores the previous values afterwards.
class ScopedEnv {
 public:
  void set(const char* name, const char* value) {
    const char* old = std::getenv(name);
    saved_.emplace_back(name, old != nullptr ? std::optional<std::string>(old) : std::nullopt);
    if (value != nullptr) ::setenv(name, value, 1); else ::unsetenv(name);
  }
  ~ScopedEnv() {
    for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) {
      if (it->second) ::setenv(it->first.c_str(), it->second->c_str(), 1);
      else ::unsetenv(it->first.c_str());
    }
  }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

inline float round_bf16(float x) { return __bfloat162float(__float2bfloat16(x)); }

// n values from normal(0, stddev), rounded to bf16 so that CPU and GPU see identical inputs.
inline std::vector<float> random_bf16(std::size_t n, std::uint64_t seed, float stddev = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> v(n);
  for (float& x : v) x = round_bf16(dist(rng));
  return v;
}

inline DeviceBuffer<bf16> upload_bf16(const std::vector<float>& host) {
  std::vector<bf16> tmp(host.size());
  for (std::size_t i = 0; i < host.size(); ++i) tmp[i] = __float2bfloat16(host[i]);
  DeviceBuffer<bf16> d(static_cast<std::int64_t>(host.size()));
  to_device(tmp.data(), d.data(), d.size());
  return d;
}
inline DeviceBuffer<float> upload_f32(const std::vector<float>& host) {
  DeviceBuffer<float> d(static_cast<std::int64_t>(host.size()));
  to_device(host.data(), d.data(), d.size());
  return d;
}
inline std::vector<float> download(const DeviceBuffer<bf16>& d) {
  std::vector<bf16> tmp = to_host(d.data(), d.size());
  std::vector<float> out(tmp.size());
  for (std::size_t i = 0; i < tmp.size(); ++i) out[i] = __bfloat162float(tmp[i]);
  return out;
}
inline std::vector<float> download(const DeviceBuffer<float>& d) { return to_host(d.data(), d.size()); }

// Poisons a device buffer (bf16 NaN pattern 0xFFFF / float 0xFFFFFFFF) so unwritten outputs show.
template <typename T>
void poison(DeviceBuffer<T>& d) {
  TP_CUDA(cudaMemset(d.data(), 0xFF, static_cast<std::size_t>(d.size()) * sizeof(T)));
}

// ||got - ref|| / ||ref|| in double; infinity when any value is not finite.
inline double rel_l2(const std::vector<float>& got, const float* ref, std::size_t n) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    const double d = static_cast<double>(got[i]) - ref[i];
    num += d * d;
    den += static_cast<double>(ref[i]) * ref[i];
  }
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}
inline double rel_l2(const std::vector<float>& got, const std::vector<float>& ref) {
  EXPECT_EQ(got.size(), ref.size());
  return rel_l2(got, ref.data(), std::min(got.size(), ref.size()));
}

}  // namespace trainplan::executor::cuda::testing
