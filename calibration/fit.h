// Least-squares fits of the simulator's parameters to measurements (Eigen).
//
// Compute (core/cost/compute_model.h): on a CPU with one thread per rank there is one parallel unit
// (sm_count = 1), so wave quantization is neutral. A sample is a piece of the executor's code and
// the cost-model tasks it carries out (kernels.h TaskSample); its modelled time is the sum of
// its tasks' times, each
//   GEMM:   flops / (P * pad(m, n) * k / (k + k_half)) + overhead
//         = (flops / pad) * (1/P) + (flops / (pad * k)) * (k_half/P) + overhead,
//   memory: bytes * (1/B_kind) + transcendentals * c + overhead   (one bandwidth per
//           MemoryKernel kind; c, seconds per exp/tanh, shared by all kinds),
// which is linear in (1/P, k_half/P, overhead, 1/B_kind..., c) for fixed tiles: one weighted
// linear least squares over all samples (rows weighted by 1/t_measured, so relative error is
// minimised), repeated over a grid of tile sizes (pad = m*n / (tiles_m*tile_m * tiles_n*tile_n)),
// keeping the tiles with the smallest residual, then once more without outliers. A coefficient
// that comes out negative is held at zero (a physical rate cannot be negative).
//
// Links (core/cost/collectives.h): t = ring_steps(c, n) * latency + bytes_sent_per_rank(c, S, n)
// / bandwidth, linear in (latency, 1/bandwidth).
//
// Tested by tests/calibration/fit_test.cc (synthetic data: parameters recovered to 1e-9).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include <Eigen/Dense>

#include "calibration/collective_bench.h"
#include "calibration/kernels.h"
#include "core/cost/compute_model.h"
#include "core/status.h"

namespace trainplan::calibration {

// Relative residuals (model - measured) / measured of a fit, over its rows.
struct FitStats {
  std::int64_t points = 0;
  double rms_rel = 0;  // root mean square of the relative residuals
  double max_rel = 0;  // largest absolute relative residual
  double median_rel = 0;
};
FitStats fit_stats(const std::vector<double>& predicted, const std::vector<double>& measured);

// Weighted linear least squares: argmin_x || W (A x - y) ||, by column-pivoted Householder QR.
// Columns in `fixed_zero` are held at 0 (used to keep physical parameters non-negative).
Eigen::VectorXd weighted_least_squares(const Eigen::MatrixXd& a, const Eigen::VectorXd& y,
                                       const Eigen::VectorXd& weights,
                                       const std::vector<bool>& fixed_zero = {});

struct ComputeFitOptions {
  // Tile sizes tried for tile_m and tile_n (1 = no padding effect).
  std::vector<double> tiles = {1, 2, 4, 8, 12, 16, 24, 32, 48, 64};
  // Parallel units for wave quantization: one per thread, one thread per rank.
  std::int64_t parallel_units = 1;
  bool fit_overhead = true;
  // The fitted rates' split_k (compute_model.h): set for GPUs, whose BLAS splits K.
  bool split_k = false;
};
// A GPU's fit (calibrate --backend cuda): wave quantization over its `sm_count` SMs, cuBLAS's
// tile sizes, split-K.
ComputeFitOptions gpu_fit_options(std::int64_t sm_count);

struct ComputeFit {
  DeviceRates rates;          // fitted; peak and bandwidth as measured (see fit_compute)
  double fitted_flops_per_s = 0;   // P: asymptotic GEMM rate of the fit (= peak * gemm_eff)
  // B per memory-kernel kind (= hbm * that kind's efficiency); 0 for kinds not measured.
  std::array<double, kMemoryKernelCount> fitted_bytes_per_s{};
  std::array<bool, kMemoryKernelCount> measured_kind{};
  // Residuals of task_time_s sums against the measurements: samples of GEMMs only, of
  // memory-bound kernels only, of both (one call doing several tasks), and all.
  FitStats gemm, memory, mixed, all;
  std::int64_t outliers = 0;  // samples left out of the final fit
};

// Fits DeviceRates to the samples. peak_flops_per_s becomes the best measured one-GEMM rate of
// any direction (or P if the fit's asymptote is higher), gemm_efficiency = P / peak;
// hbm_bytes_per_s is `stream_bytes_per_s` (or the fastest kind's B if higher), each measured
// kind's efficiency is B_kind / hbm and memory_efficiency (kinds not measured, GEMMs' memory
// term) is the elementwise kind's, or without it the measured kinds' total bytes over total
// time, / hbm.
// Samples with a backward-direction GEMM (gemm_direction: dX = dY W^T, dW = X^T dY) or a
// fused-attention task (kAttention) stay out of that fit, which is then the forward product's.
// Each backward direction's efficiency is gemm_efficiency times the median over its samples of
// the tasks' forward-rate time over their measured share (0, i.e. the forward's, without
// samples). attention_efficiency and attention_backward_efficiency are the same median over
// forward and backward attention samples apart, at the GEMM rate, weighted by each sample's
// measured compute time (fit.cc says why; 1 and 0 without samples: the CPU executor's default
// attention is unfused).
// Errors: too few samples, a sample without tasks or time, no positive rate.
Result<ComputeFit> fit_compute(const std::vector<TaskSample>& samples, double stream_bytes_per_s,
                               const ComputeFitOptions& options = {});

// The profile's measured task table (core/cost/compute_model.h MeasuredTaskTime) from the
// executor probes' samples (not the GEMM sweep's, whose tasks no plan has): each sample's time
// split over its tasks in proportion to their times under `fitted` (a span that joins several
// tasks, such as the unfused attention's "attn_scores+softmax+attn_values", is timed as one),
// then per distinct task the median over the samples that ran it (the optimizer of probes that
// differ only in micro-batch, for one). Tasks of repeated runs (Task::repeat > 1) stay out.
std::vector<MeasuredTaskTime> measured_task_times(const std::vector<TaskSample>& samples,
                                                  const DeviceRates& fitted);

// The modelled time of a sample under `rates`: the sum of task_time_s over its tasks.
double sample_time_s(const TaskSample& sample, const DeviceRates& rates);

struct LinkFit {
  double latency_s = 0;     // per ring step
  double bytes_per_s = 0;   // per-rank link bandwidth (ring busbw at large sizes)
  // The MPI library's rendezvous protocol (rendezvous_time_s, core/cost/collectives.h); 0: the
  // samples show none.
  std::int64_t eager_limit_bytes = 0;
  double rendezvous_latency_s = 0;
  FitStats stats;
};
// Fits samples of one group size or several (all share the link), weighted by 1/time (relative
// residuals): the alpha-beta line, then the same with a rendezvous step over an eager limit,
// the limit tried at every per-step message size the samples hold (the largest size still
// eager, since the samples say only that the library's limit lies below the next one). The
// three-parameter fit is kept where it has at least two samples on each side, a positive
// rendezvous latency, and the nested-model F test rejects the line at 1% (Bonferroni-corrected
// for the limits tried): a jump the line cannot follow, not noise. `eager_limit_bytes` > 0 tries
// that limit only (found on other samples: calibrate takes it from the benchmark loop, whose
// sizes double from 8 bytes, and the rates from the executor's noisier in-step collectives);
// 0 fits the line only. Errors: too few samples.
Result<LinkFit> fit_links(const std::vector<CollectiveSample>& samples,
                          std::int64_t eager_limit_bytes = -1);

}  // namespace trainplan::calibration
