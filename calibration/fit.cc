// Least-squares fits; see fit.h.
#include "calibration/fit.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include <boost/math/distributions/fisher_f.hpp>

namespace trainplan::calibration {

namespace {
double d(std::int64_t v) { return static_cast<double>(v); }

double pad_efficiency(double tile_m, double tile_n, std::int64_t m, std::int64_t n) {
  const double tm = std::ceil(d(m) / tile_m), tn = std::ceil(d(n) / tile_n);
  return (d(m) * d(n)) / (tm * tile_m * tn * tile_n);
}

}  // namespace

FitStats fit_stats(const std::vector<double>& predicted, const std::vector<double>& measured) {
  FitStats s;
  s.points = static_cast<std::int64_t>(measured.size());
  if (measured.empty()) return s;
  std::vector<double> rel;
  double sq = 0;
  for (std::size_t i = 0; i < measured.size(); ++i) {
    const double r = (predicted[i] - measured[i]) / measured[i];
    rel.push_back(std::abs(r));
    sq += r * r;
    s.max_rel = std::max(s.max_rel, std::abs(r));
  }
  s.rms_rel = std::sqrt(sq / d(s.points));
  std::sort(rel.begin(), rel.end());
  s.median_rel = rel.size() % 2 ? rel[rel.size() / 2]
                                : 0.5 * (rel[rel.size() / 2 - 1] + rel[rel.size() / 2]);
  return s;
}

Eigen::VectorXd weighted_least_squares(const Eigen::MatrixXd& a, const Eigen::VectorXd& y,
                                       const Eigen::VectorXd& w,
                                       const std::vector<bool>& fixed_zero) {
  std::vector<Eigen::Index> free;
  for (Eigen::Index j = 0; j < a.cols(); ++j)
    if (fixed_zero.empty() || !fixed_zero[static_cast<std::size_t>(j)]) free.push_back(j);
  Eigen::MatrixXd aw(a.rows(), static_cast<Eigen::Index>(free.size()));
  for (std::size_t j = 0; j < free.size(); ++j)
    aw.col(static_cast<Eigen::Index>(j)) = a.col(free[j]).cwiseProduct(w);
  // Scale columns to unit norm: FLOPs (1e9) and the constant column (1) differ by orders of
  // magnitude, and QR's rank decision is relative to the largest column.
  Eigen::VectorXd scale(aw.cols());
  for (Eigen::Index j = 0; j < aw.cols(); ++j) {
    scale(j) = aw.col(j).norm();
    if (scale(j) > 0) aw.col(j) /= scale(j);
  }
  const Eigen::VectorXd sol = aw.colPivHouseholderQr().solve(y.cwiseProduct(w));
  Eigen::VectorXd x = Eigen::VectorXd::Zero(a.cols());
  for (std::size_t j = 0; j < free.size(); ++j) {
    const auto jj = static_cast<Eigen::Index>(j);
    x(free[j]) = scale(jj) > 0 ? sol(jj) / scale(jj) : 0.0;
  }
  return x;
}

namespace {

constexpr Eigen::Index kGemmRate = 0, kGemmKHalf = 1, kOverhead = 2, kFirstKind = 3;
constexpr Eigen::Index kTranscendental = kFirstKind + static_cast<Eigen::Index>(kMemoryKernelCount);
constexpr Eigen::Index kColumns = kTranscendental + 1;

// One weighted fit over the grid of tiles: x = (1/P, k_half/P, overhead, 1/B per kind,
// seconds per transcendental).
struct LinearFit {
  Eigen::VectorXd x;
  double tile_m = 1, tile_n = 1;
};

// The sample's row of the linear model for given tiles.
Eigen::RowVectorXd design_row(const TaskSample& s, double tile_m, double tile_n) {
  Eigen::RowVectorXd row = Eigen::RowVectorXd::Zero(kColumns);
  for (const Task& t : s.tasks) {
    row(kOverhead) += 1.0;
    if (t.kind == TaskKind::kMemory) {
      row(kFirstKind + static_cast<Eigen::Index>(t.memory_kernel)) += t.bytes;
      row(kTranscendental) += t.transcendentals;
    } else if (t.kind == TaskKind::kGemm || t.kind == TaskKind::kAttention) {
      const double pad = pad_efficiency(tile_m, tile_n, t.m, t.n);
      row(kGemmRate) += t.executed_flops / pad;
      row(kGemmKHalf) += t.executed_flops / (pad * d(std::max<std::int64_t>(1, t.k)));
    }
  }
  return row;
}

std::optional<LinearFit> fit_linear(const std::vector<TaskSample>& samples,
                                    const std::vector<bool>& keep, const ComputeFitOptions& o) {
  std::vector<std::size_t> use;
  for (std::size_t i = 0; i < samples.size(); ++i)
    if (keep[i]) use.push_back(i);
  const auto rows = static_cast<Eigen::Index>(use.size());
  Eigen::VectorXd y(rows), w(rows);
  for (Eigen::Index r = 0; r < rows; ++r) {
    y(r) = samples[use[static_cast<std::size_t>(r)]].time_s;
    w(r) = 1.0 / y(r);
  }
  double best_rss = std::numeric_limits<double>::infinity();
  std::optional<LinearFit> best;
  for (double tm : o.tiles) {
    for (double tn : o.tiles) {
      Eigen::MatrixXd a(rows, kColumns);
      for (Eigen::Index r = 0; r < rows; ++r)
        a.row(r) = design_row(samples[use[static_cast<std::size_t>(r)]], tm, tn);
      // Columns no sample uses (kinds not measured) are held at zero.
      std::vector<bool> fixed(static_cast<std::size_t>(kColumns), false);
      for (Eigen::Index j = 0; j < kColumns; ++j)
        fixed[static_cast<std::size_t>(j)] = a.col(j).cwiseAbs().maxCoeff() == 0.0;
      if (!o.fit_overhead) fixed[kOverhead] = true;
      Eigen::VectorXd x = weighted_least_squares(a, y, w, fixed);
      // Physical constraints: no negative coefficient; refit holding one that came out
      // negative at zero, until none does.
      for (Eigen::Index pass = 0; pass < kColumns; ++pass) {
        bool changed = false;
        for (Eigen::Index j = kGemmKHalf; j < kColumns; ++j) {
          if (x(j) < 0 && !fixed[static_cast<std::size_t>(j)]) {
            fixed[static_cast<std::size_t>(j)] = true;
            changed = true;
          }
        }
        if (!changed) break;
        x = weighted_least_squares(a, y, w, fixed);
      }
      if (!(x(kGemmRate) > 0)) continue;
      const double rss = (a * x - y).cwiseProduct(w).squaredNorm();
      // Strictly better only: ties keep the smaller (earlier) tiles.
      if (rss < best_rss * (1.0 - 1e-12)) {
        best_rss = rss;
        best = LinearFit{x, tm, tn};
      }
    }
  }
  return best;
}

double linear_model_time(const LinearFit& f, const TaskSample& s) {
  return design_row(s, f.tile_m, f.tile_n).dot(f.x);
}

bool has_kind(const TaskSample& s, TaskKind kind) {
  return std::any_of(s.tasks.begin(), s.tasks.end(),
                     [&](const Task& t) { return t.kind == kind; });
}

// A GEMM of a backward direction (dX = dY W^T, dW = X^T dY): fitted after the forward ones.
bool is_backward_gemm(const Task& t) {
  return t.kind == TaskKind::kGemm && gemm_direction(t) != GemmDirection::kForward;
}

// Rows of the joint linear fit: no fused attention and no backward-direction GEMM. Those are
// fitted after it, as ratios to its forward GEMM rate (direction_ratio).
bool in_linear_fit(const TaskSample& s) {
  return !has_kind(s, TaskKind::kAttention) &&
         std::none_of(s.tasks.begin(), s.tasks.end(), is_backward_gemm);
}

// The median over samples of how much faster the tasks that `of` selects run than `r`
// predicts for them: each sample's time less its other tasks' modelled time (and the selected
// tasks' overheads) is the selected tasks' measured share; the ratio is their modelled
// compute time over that share. Samples with another task that `exclude` selects stay out
// (their share could not be split). 0 when no sample has the tasks.
// weighted: each sample's ratio counts by the compute time it has to explain (`left`), a
// weighted median; else the plain median.
template <class Of, class Exclude>
double direction_ratio(const std::vector<TaskSample>& samples, const DeviceRates& r, Of&& of,
                       Exclude&& exclude, bool weighted = false) {
  std::vector<std::pair<double, double>> ratios;  // (ratio, weight)
  for (const TaskSample& s : samples) {
    double others = 0, selected = 0, overheads = 0;
    bool any = false, mixed = false;
    for (const Task& t : s.tasks) {
      const double tt = task_time_s(t, r);
      if (of(t)) {
        any = true;
        selected += tt - r.kernel_overhead_s;
        overheads += r.kernel_overhead_s;
      } else {
        mixed = mixed || exclude(t);
        others += tt;
      }
    }
    const double left = s.time_s - others - overheads;
    if (any && !mixed && left > 0 && selected > 0)
      ratios.emplace_back(selected / left, weighted ? left : 1.0);
  }
  if (ratios.empty()) return 0;
  if (!weighted) {
    std::nth_element(ratios.begin(),
                     ratios.begin() + static_cast<std::ptrdiff_t>(ratios.size() / 2), ratios.end());
    return ratios[ratios.size() / 2].first;
  }
  std::sort(ratios.begin(), ratios.end());
  double total = 0;
  for (const auto& [ratio, w] : ratios) total += w;
  double below = 0;
  for (const auto& [ratio, w] : ratios) {
    below += w;
    if (below >= total / 2) return ratio;
  }
  return ratios.back().first;
}

// The backward GEMMs' own efficiencies (dX = dY W^T and dW = X^T dY, whose transposed
// operands Eigen packs differently from the forward's, and for which cuBLASLt picks other
// kernels): the forward's efficiency times the median ratio of that direction's samples,
// weighted by each sample's compute time for the reason fit_attention_directions gives. On the
// H200 lease of 2026-12-04 (third) the plain median fell among the tiny model's launch-bound
// probes and gave a weight-gradient efficiency of 0.17 where GPT-2's twenty probes ran at
// 0.4-0.9: every GPT-2 weight gradient predicted 2.4-5.5x too slow, the matrix's median error
// 41%; the weighted median, applied to that lease's measurements, gives 0.81 (notes:
// bench/results/gpu-2026-12-04c/notes.md). 0 (the forward's applies) without samples.
void fit_gemm_directions(const std::vector<TaskSample>& samples, DeviceRates& r) {
  for (GemmDirection d : {GemmDirection::kInputGradient, GemmDirection::kWeightGradient}) {
    const double ratio = direction_ratio(
        samples, r,
        [&](const Task& t) { return t.kind == TaskKind::kGemm && gemm_direction(t) == d; },
        [](const Task& t) { return is_backward_gemm(t) || t.kind == TaskKind::kAttention; },
        /*weighted=*/true);
    const double e = ratio > 0 ? std::clamp(r.gemm_efficiency * ratio, 1e-6, 1.0) : 0.0;
    (d == GemmDirection::kInputGradient ? r.gemm_input_gradient_efficiency
                                        : r.gemm_weight_gradient_efficiency) = e;
  }
}

// Fused attention (Dao et al. 2022), forward and backward apart: the efficiency of each is
// the median ratio of its samples at attention efficiency 1 (the GEMM rate), weighted by each
// sample's compute time. Weighted because the probes span two regimes: on the H200 lease of
// 2026-12-04 the tiny model's attention (seq 64, head_dim 16) took 6.1 us of which the fitted
// launch overhead is 4.7 us, while GPT-2's took 55-594 us; a ratio made from 1.5 us left over
// after the overhead is mostly the overhead fit's error, and with as many tiny probes as GPT-2
// ones the plain median took it (efficiency 2.68 where GPT-2's four probes agree on
// 0.44-0.47: GPT-2 attention predicted 5.5x too fast; bench/results/gpu-2026-12-04b/notes.md).
// The forward's is 1 without samples; the backward's is 0 without samples (the forward's then
// applies).
void fit_attention_directions(const std::vector<TaskSample>& samples, DeviceRates& r) {
  r.attention_efficiency = 1.0;
  r.attention_backward_efficiency = 0.0;
  double eff[2] = {0, 0};
  for (bool backward : {false, true})
    eff[backward] = direction_ratio(
        samples, r,
        [&](const Task& t) { return t.kind == TaskKind::kAttention && t.backward == backward; },
        [](const Task& t) { return t.kind == TaskKind::kAttention; }, /*weighted=*/true);
  if (eff[0] > 0) r.attention_efficiency = std::clamp(eff[0], 1e-3, 10.0);
  if (eff[1] > 0) r.attention_backward_efficiency = std::clamp(eff[1], 1e-3, 10.0);
}

}  // namespace

ComputeFitOptions gpu_fit_options(std::int64_t sm_count) {
  ComputeFitOptions o;
  o.parallel_units = sm_count;  // wave quantization over the SMs
  o.tiles = {16, 32, 64, 128, 256};
  o.split_k = true;  // cuBLAS splits K where the output tiles leave SMs idle
  return o;
}

double sample_time_s(const TaskSample& s, const DeviceRates& r) {
  double t = 0;
  for (const Task& task : s.tasks) t += task_time_s(task, r);
  return t;
}

std::vector<MeasuredTaskTime> measured_task_times(const std::vector<TaskSample>& samples,
                                                  const DeviceRates& fitted) {
  DeviceRates rates = fitted;
  rates.measured_tasks.reset();  // the split follows the fit alone
  std::vector<MeasuredTaskTime> table;
  std::vector<std::vector<double>> times;  // per table entry, every sample's
  for (const TaskSample& s : samples) {
    if (s.probe == "sweep" || !(s.time_s > 0) || s.tasks.empty()) continue;
    double total = 0;
    for (const Task& t : s.tasks) total += task_copy_time_s(t, rates);
    const double count = static_cast<double>(s.tasks.size());
    for (const Task& t : s.tasks) {
      if (t.repeat != 1 || t.kind == TaskKind::kComm) continue;
      const double share = total > 0 ? task_copy_time_s(t, rates) / total : 1.0 / count;
      const double time_s = s.time_s * share;
      const auto at = std::find_if(table.begin(), table.end(),
                                   [&](const MeasuredTaskTime& m) { return same_task(m, t); });
      if (at == table.end()) {
        table.push_back(measured_task(t, time_s));
        times.push_back({time_s});
      } else {
        times[static_cast<std::size_t>(at - table.begin())].push_back(time_s);
      }
    }
  }
  for (std::size_t i = 0; i < table.size(); ++i) {
    std::vector<double>& v = times[i];
    std::sort(v.begin(), v.end());
    const std::size_t mid = v.size() / 2;
    table[i].time_s = v.size() % 2 == 1 ? v[mid] : 0.5 * (v[mid - 1] + v[mid]);
    table[i].samples = static_cast<std::int64_t>(v.size());
  }
  return table;
}

Result<ComputeFit> fit_compute(const std::vector<TaskSample>& samples, double stream_bytes_per_s,
                               const ComputeFitOptions& o) {
  std::int64_t gemm_only = 0;
  for (const TaskSample& s : samples) {
    if (!(s.time_s > 0))
      return Status::Error("compute fit: sample '" + s.name + "' (" + s.probe +
                           ") has a non-positive time");
    if (s.tasks.empty())
      return Status::Error("compute fit: sample '" + s.name + "' (" + s.probe + ") has no tasks");
    if (!has_kind(s, TaskKind::kMemory) && in_linear_fit(s)) ++gemm_only;
  }
  if (gemm_only < 3)
    return Status::Error("compute fit: need at least 3 forward GEMM samples (Y = X W), got " +
                         std::to_string(gemm_only));

  // Relative least squares; then once more without the outliers (a measurement that a
  // neighbouring process disturbed): rows off by more than 3x the median residual and 25%.
  // Samples with a fused-attention task or a backward-direction GEMM are left out: their rates
  // are ratios to the forward GEMM rate, fitted after it (below).
  std::vector<bool> fit_row(samples.size());
  std::size_t fit_rows = 0;
  for (std::size_t i = 0; i < samples.size(); ++i)
    fit_rows += (fit_row[i] = in_linear_fit(samples[i])) ? 1 : 0;
  std::vector<bool> keep = fit_row;
  auto lf = fit_linear(samples, keep, o);
  if (!lf) return Status::Error("compute fit: no tile size gave a positive GEMM rate");
  ComputeFit f;
  {
    std::vector<double> rel(samples.size(), 0.0), sorted;
    for (std::size_t i = 0; i < samples.size(); ++i)
      if (fit_row[i]) {
        rel[i] = std::abs(linear_model_time(*lf, samples[i]) - samples[i].time_s) /
                 samples[i].time_s;
        sorted.push_back(rel[i]);
      }
    std::sort(sorted.begin(), sorted.end());
    const double cut = std::max(0.25, 3.0 * sorted[sorted.size() / 2]);
    std::size_t kept = 0;
    for (std::size_t i = 0; i < samples.size(); ++i)
      kept += (keep[i] = fit_row[i] && rel[i] <= cut) ? 1 : 0;
    if (kept >= 3 && kept < fit_rows)
      if (auto again = fit_linear(samples, keep, o)) {
        lf = again;
        f.outliers = static_cast<std::int64_t>(fit_rows - kept);
      }
  }
  const Eigen::VectorXd& x = lf->x;

  f.fitted_flops_per_s = 1.0 / x(kGemmRate);
  double best_measured = 0;
  for (const TaskSample& s : samples)
    if (s.tasks.size() == 1 && s.tasks[0].kind == TaskKind::kGemm)
      best_measured = std::max(best_measured, s.flops() / s.time_s);
  DeviceRates& r = f.rates;
  r.peak_flops_per_s = std::max(best_measured, f.fitted_flops_per_s);
  r.gemm_efficiency = f.fitted_flops_per_s / r.peak_flops_per_s;
  r.k_half = x(kGemmKHalf) / x(kGemmRate);
  r.tile_m = lf->tile_m;
  r.tile_n = lf->tile_n;
  r.sm_count = o.parallel_units;
  r.split_k = o.split_k;
  r.kernel_overhead_s = x(kOverhead);
  r.transcendental_s = x(kTranscendental);

  // Memory kinds: B = 1/x; a kind whose coefficient was held at zero costs only its overhead
  // and runs at the machine's bandwidth (efficiency 1).
  for (const TaskSample& s : samples)
    for (const Task& t : s.tasks)
      if (t.kind == TaskKind::kMemory)
        f.measured_kind[static_cast<std::size_t>(t.memory_kernel)] = true;
  double fastest = 0;
  for (std::size_t k = 0; k < kMemoryKernelCount; ++k) {
    const double inv = x(kFirstKind + static_cast<Eigen::Index>(k));
    if (f.measured_kind[k] && inv > 0) {
      f.fitted_bytes_per_s[k] = 1.0 / inv;
      fastest = std::max(fastest, f.fitted_bytes_per_s[k]);
    }
  }
  r.hbm_bytes_per_s = std::max(stream_bytes_per_s, fastest);
  if (!(r.hbm_bytes_per_s > 0))
    return Status::Error("compute fit: no memory bandwidth (no STREAM samples and no "
                         "memory-bound kernel with a positive time)");
  double mem_bytes = 0, mem_time = 0;
  for (std::size_t k = 0; k < kMemoryKernelCount; ++k) {
    if (!f.measured_kind[k]) continue;
    if (f.fitted_bytes_per_s[k] <= 0) f.fitted_bytes_per_s[k] = r.hbm_bytes_per_s;
    r.memory_kernel_efficiency[k] = f.fitted_bytes_per_s[k] / r.hbm_bytes_per_s;
  }
  for (const TaskSample& s : samples)
    for (const Task& t : s.tasks)
      if (t.kind == TaskKind::kMemory) {
        mem_bytes += t.bytes;
        mem_time += t.bytes / f.fitted_bytes_per_s[static_cast<std::size_t>(t.memory_kernel)];
      }
  // The default (the GEMMs' memory term, kinds a plan has that were not measured) is the
  // streaming kind's when it was measured (DeviceRates: "streaming-kernel fraction"), else the
  // measured kinds' mix.
  const auto elementwise = static_cast<std::size_t>(MemoryKernel::kElementwise);
  if (f.measured_kind[elementwise])
    r.memory_efficiency = r.memory_kernel_efficiency[elementwise];
  else
    r.memory_efficiency =
        mem_time > 0 ? std::clamp(mem_bytes / mem_time / r.hbm_bytes_per_s, 1e-6, 1.0) : 1.0;

  fit_gemm_directions(samples, r);
  fit_attention_directions(samples, r);

  // Residuals of the simulator's own formula (sums of task_time_s, roofline max included).
  std::vector<double> pred[4], meas[4];
  for (const TaskSample& s : samples) {
    const bool mem = has_kind(s, TaskKind::kMemory);
    const bool gemm = has_kind(s, TaskKind::kGemm) || has_kind(s, TaskKind::kAttention);
    const int cls = mem && gemm ? 2 : (mem ? 1 : 0);
    const double p = sample_time_s(s, r);
    for (int c : {cls, 3}) {
      pred[c].push_back(p);
      meas[c].push_back(s.time_s);
    }
  }
  f.gemm = fit_stats(pred[0], meas[0]);
  f.memory = fit_stats(pred[1], meas[1]);
  f.mixed = fit_stats(pred[2], meas[2]);
  f.all = fit_stats(pred[3], meas[3]);
  return f;
}

Result<LinkFit> fit_links(const std::vector<CollectiveSample>& samples,
                          std::int64_t eager_limit_bytes) {
  std::vector<const CollectiveSample*> use;
  for (const CollectiveSample& s : samples)
    if (s.group_size >= 2 && s.time_s > 0) use.push_back(&s);
  if (use.size() < 2)
    return Status::Error("link fit: need at least 2 collective samples over 2 or more ranks, got " +
                         std::to_string(use.size()));
  const auto rows = static_cast<Eigen::Index>(use.size());
  // Columns: ring steps (latency), ring steps over the eager limit (rendezvous), bytes sent.
  Eigen::MatrixXd a(rows, 3);
  Eigen::VectorXd y(rows), w(rows);
  for (Eigen::Index i = 0; i < rows; ++i) {
    const CollectiveSample& s = *use[static_cast<std::size_t>(i)];
    a(i, 0) = d(ring_steps(s.collective, s.group_size));
    a(i, 1) = 0;
    a(i, 2) = d(bytes_sent_per_rank(s.collective, s.bytes, s.group_size));
    y(i) = s.time_s;
    w(i) = 1.0 / s.time_s;
  }
  // Non-negative latencies: a negative one is held at zero and the rest refitted.
  auto solve = [&](bool rendezvous) {
    std::vector<bool> fixed{false, !rendezvous, false};
    Eigen::VectorXd x = weighted_least_squares(a, y, w, fixed);
    for (int k : {0, 1})
      if (!fixed[static_cast<std::size_t>(k)] && x(k) < 0) {
        fixed[static_cast<std::size_t>(k)] = true;
        x = weighted_least_squares(a, y, w, fixed);
      }
    return x;
  };
  auto weighted_sse = [&](const Eigen::VectorXd& x) {
    return (w.asDiagonal() * (a * x - y)).squaredNorm();
  };
  Eigen::VectorXd x = solve(false);
  if (!(x(2) > 0))
    return Status::Error("link fit: the fitted bandwidth is not positive (measurements noisy?)");
  LinkFit f;
  f.latency_s = x(0);
  f.bytes_per_s = 1.0 / x(2);
  const double line_sse = weighted_sse(x);
  std::vector<std::int64_t> sizes;
  for (const CollectiveSample* s : use)
    sizes.push_back(per_step_message_bytes(s->collective, s->bytes, s->group_size));
  std::vector<std::int64_t> limits = sizes;
  std::sort(limits.begin(), limits.end());
  limits.erase(std::unique(limits.begin(), limits.end()), limits.end());
  if (eager_limit_bytes >= 0) limits.assign(eager_limit_bytes > 0 ? 1 : 0, eager_limit_bytes);
  // The jump is kept where the nested-model F test rejects the line at 1%, Bonferroni-corrected
  // for the limits tried (the limit is chosen from the data): F = (SSE_line - SSE) /
  // (SSE / (rows - 3)) above the F(1, rows - 3) quantile at 1 - 0.01 / limits. A line within 0.1%
  // rms (relative) has no jump to find.
  if (line_sse <= static_cast<double>(rows) * 1e-6 || rows < 5) limits.clear();
  const double f_critical =
      limits.empty() ? 0.0
                     : boost::math::quantile(boost::math::complement(
                           boost::math::fisher_f_distribution<double>(1.0, d(rows) - 3.0),
                           0.01 / d(static_cast<std::int64_t>(limits.size()))));
  double best_sse = line_sse;
  for (std::int64_t limit : limits) {
    Eigen::Index over = 0;
    for (Eigen::Index i = 0; i < rows; ++i) {
      const bool rendezvous = sizes[static_cast<std::size_t>(i)] > limit;
      a(i, 1) = rendezvous ? a(i, 0) : 0.0;
      over += rendezvous ? 1 : 0;
    }
    if (over < 2 || rows - over < 2 || limit <= 0) continue;
    const Eigen::VectorXd xr = solve(true);
    const double sse = weighted_sse(xr);
    const bool significant = (line_sse - sse) * (d(rows) - 3.0) > f_critical * sse;
    if (xr(1) > 0 && xr(2) > 0 && significant && sse < best_sse) {
      best_sse = sse;
      f.latency_s = xr(0);
      f.rendezvous_latency_s = xr(1);
      f.bytes_per_s = 1.0 / xr(2);
      f.eager_limit_bytes = limit;
    }
  }
  std::vector<double> pred, meas;
  for (const CollectiveSample* s : use) {
    pred.push_back(ring_collective_time_s(s->collective, s->bytes, s->group_size, f.bytes_per_s,
                                          f.latency_s) +
                   rendezvous_time_s(s->collective, s->bytes, s->group_size,
                                     f.eager_limit_bytes, f.rendezvous_latency_s));
    meas.push_back(s->time_s);
  }
  f.stats = fit_stats(pred, meas);
  return f;
}

}  // namespace trainplan::calibration
