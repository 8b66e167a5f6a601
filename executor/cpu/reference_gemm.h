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
//
// ReferenceTriad is the second, memory-bound reference kernel (issue 28): a STREAM triad
// a = b + s c over arrays far beyond the caches, timed beside the GEMM (measurements.
// reference_triad, cluster.reference_triad), because the GEMM sees the host's compute speed but
// not its memory bandwidth, and the executor's step has memory-bound parts (elementwise ops,
// layer norm, the optimizer).
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
namespace detail {
// One warm-up call, then one timed call per element of `times` (sized by the caller's
// constructor); the median, in seconds. Allocates nothing.
double median_call_seconds(std::vector<double>& times, void (*call)(void*), void* what);
}  // namespace detail

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

// The memory-bound reference: McCalpin's STREAM triad, a[i] = b[i] + s * c[i]
// (https://www.cs.virginia.edu/stream/ref.html), in float32 as the executor computes, timed as
// ReferenceGemm is (one warm-up call, then the median of `calls`). Bytes are counted as STREAM
// counts them: 3 arrays x 4 bytes (float) per element, one read of b and c and one write of a,
// no write-allocate traffic. kReferenceElements: 16 Mi floats, 64 MiB per array, 192 MiB per
// call. STREAM's rule is each array at least 4x the last-level cache a core can use; this VM's
// getconf reports a 1 MiB L2 and 532676608 bytes of L3 (the socket's total, of which one core
// reaches only its own core complex's share), and 64 MiB per array is as large as fits the
// per-step cost (about 6 calls of 192 MiB after every step) and the memory of 4 ranks on the
// 23 GiB VM. bench/results/cpu-triad-2026-12-03/NOTES.md has the measured rates.
// The arrays are allocated (and touched) by the constructor: timing allocates nothing.
class ReferenceTriad {
 public:
  static constexpr std::int64_t kReferenceElements = std::int64_t{1} << 24;
  static constexpr float kScalar = 3.0f;
  // calls in [1, ReferenceGemm::kMaxCalls], elements >= 1 (checked).
  explicit ReferenceTriad(int calls = ReferenceGemm::kDefaultCalls,
                          std::int64_t elements = kReferenceElements);
  void run();  // a = b + kScalar c, once
  // The median seconds of one call; allocates nothing.
  double median_seconds();
  // bytes() / median_seconds().
  double bytes_per_s();
  std::int64_t elements() const { return static_cast<std::int64_t>(a_.size()); }
  double bytes() const;  // 3 x 4 x elements (STREAM's count)
  // The memory its arrays hold resident (execute subtracts it from its peak).
  double footprint_bytes() const { return bytes(); }
  int calls() const { return calls_; }
  const Eigen::ArrayXf& a() const { return a_; }

 private:
  Eigen::ArrayXf a_, b_, c_;
  int calls_;
  std::vector<double> times_;  // sized by the constructor
};

}  // namespace trainplan::executor
