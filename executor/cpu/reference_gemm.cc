// The reference kernel; see reference_gemm.h. Tested by tests/executor/cpu/reference_gemm_test.cc.
#include "executor/cpu/reference_gemm.h"

#include <algorithm>
#include <chrono>

#include "core/status.h"

namespace trainplan::executor {

GemmOperands::GemmOperands(std::int64_t m, std::int64_t n, std::int64_t k)
    : m_(m), n_(n), k_(k), x_(Mat::Random(m, k)), w_(Mat::Random(k, n)), out_(Mat::Zero(m, n)) {}

void GemmOperands::run() { linear_forward(x_, ConstMatMap(w_.data(), k_, n_), nullptr, out_); }

double GemmOperands::flops() const {
  return 2.0 * static_cast<double>(m_) * static_cast<double>(n_) * static_cast<double>(k_);
}

ReferenceGemm::ReferenceGemm(int calls, std::int64_t size)
    : gemm_(size, size, size), calls_(calls), times_(static_cast<std::size_t>(calls)) {
  TRAINPLAN_CHECK(calls >= 1 && calls <= kMaxCalls) << "ReferenceGemm: calls " << calls;
}

double ReferenceGemm::median_seconds() {
  using Clock = std::chrono::steady_clock;
  gemm_.run();
  for (double& t : times_) {
    const auto t0 = Clock::now();
    gemm_.run();
    t = std::chrono::duration<double>(Clock::now() - t0).count();
  }
  const auto mid = times_.begin() + static_cast<std::ptrdiff_t>(times_.size() / 2);
  std::nth_element(times_.begin(), mid, times_.end());
  return *mid;
}

double ReferenceGemm::flops_per_s() { return gemm_.flops() / median_seconds(); }

}  // namespace trainplan::executor
