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

namespace detail {
double median_call_seconds(std::vector<double>& times, void (*call)(void*), void* what) {
  using Clock = std::chrono::steady_clock;
  call(what);
  for (double& t : times) {
    const auto t0 = Clock::now();
    call(what);
    t = std::chrono::duration<double>(Clock::now() - t0).count();
  }
  const auto mid = times.begin() + static_cast<std::ptrdiff_t>(times.size() / 2);
  std::nth_element(times.begin(), mid, times.end());
  return *mid;
}
}  // namespace detail

double ReferenceGemm::median_seconds() {
  return detail::median_call_seconds(
      times_, [](void* g) { static_cast<GemmOperands*>(g)->run(); }, &gemm_);
}

double ReferenceGemm::flops_per_s() { return gemm_.flops() / median_seconds(); }

}  // namespace trainplan::executor

namespace trainplan::executor {

ReferenceTriad::ReferenceTriad(int calls, std::int64_t elements)
    : calls_(calls), times_(static_cast<std::size_t>(calls)) {
  TRAINPLAN_CHECK(calls >= 1 && calls <= ReferenceGemm::kMaxCalls)
      << "ReferenceTriad: calls " << calls;
  TRAINPLAN_CHECK(elements >= 1) << "ReferenceTriad: elements " << elements;
  // Written here, so that every page is resident before the first timed call.
  a_ = Eigen::ArrayXf::Zero(elements);
  b_ = Eigen::ArrayXf::Constant(elements, 2.0f);
  c_ = Eigen::ArrayXf::Constant(elements, 1.0f);
}

void ReferenceTriad::run() { a_ = b_ + kScalar * c_; }

double ReferenceTriad::bytes() const { return 3.0 * sizeof(float) * static_cast<double>(a_.size()); }

double ReferenceTriad::median_seconds() {
  return detail::median_call_seconds(
      times_, [](void* t) { static_cast<ReferenceTriad*>(t)->run(); }, this);
}

double ReferenceTriad::bytes_per_s() { return bytes() / median_seconds(); }

}  // namespace trainplan::executor
