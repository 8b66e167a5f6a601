// The reference kernel: one fixed GEMM of the executor's own forward product (linear_forward,
// kernels.h), timed the same way by `calibrate` (into its profile, measurements.reference_gemm)
// and by `execute` between training steps (into its report, cluster.reference_gemm), so that
// `compare` can tell whether the host ran at the calibration's speed while the plan ran
// (validation/reference_gate.h). This VM's speed jumps between states some 40% apart
// (bench/predicted_vs_measured.sh's header); a rate taken in the same process as the steps
// sees a change that reference runs around the whole attempt miss (cpu-2026-12-02/NOTES.md).
//
// GemmOperands also holds the operands of calibrate's forward GEMM sweep
// (calibration/kernels.cc), so that the sweep and the reference run the same code.
// Everything is allocated by the constructors: timing allocates nothing (issue 28's
// allocation-free step; tests/executor/step_allocations_test.cc checks it).
// Tested by tests/executor/cpu/reference_gemm_test.cc.
#pragma once

#include <cstdint>
#include <vector>

#include "executor/cpu/kernels.h"

namespace trainplan::executor {

// Y (m x n) = X (m x k) W (k x n), row-major, W as a linear layer's weight (in, out), no bias:
// the executor's forward product. Random operands (Eigen's Random, fixed seed per process).
class GemmOperands {
 public:
  GemmOperands(std::int64_t m, std::int64_t n, std::int64_t k);
  void run();  // one product into the output
  std::int64_t m() const { return m_; }
  std::int64_t n() const { return n_; }
  std::int64_t k() const { return k_; }
  double flops() const;  // 2 m n k
  float checksum() const { return out_(0, 0); }
  const Mat& x() const { return x_; }
  const Mat& w() const { return w_; }
  const Mat& out() const { return out_; }

 private:
  std::int64_t m_, n_, k_;
  Mat x_, w_, out_;
};

// The reference: GemmOperands of kReferenceSize cubed (one of calibrate's sweep shapes, quick
// and full: about 1 ms on one core of the 2-core VM this project's CPU matrix runs on), timed
// as one warm-up call (the step before has evicted the operands from the caches) and then
// `calls` timed calls, of which the median is kept.
class ReferenceGemm {
 public:
  static constexpr std::int64_t kReferenceSize = 256;
  static constexpr int kDefaultCalls = 5;
  static constexpr int kMaxCalls = 1000;
  // calls in [1, kMaxCalls] (checked: a caller validates user input before).
  explicit ReferenceGemm(int calls = kDefaultCalls, std::int64_t size = kReferenceSize);
  // The median seconds of one call; allocates nothing.
  double median_seconds();
  // flops() / median_seconds().
  double flops_per_s();
  const GemmOperands& operands() const { return gemm_; }
  int calls() const { return calls_; }

 private:
  GemmOperands gemm_;
  int calls_;
  std::vector<double> times_;  // sized by the constructor
};

}  // namespace trainplan::executor
