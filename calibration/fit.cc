// Least-squares fits; see fit.h.
#include "calibration/fit.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

namespace trainplan::calibration {

namespace {
double d(std::int64_t v) { return static_cast<double>(v); }

double pad_efficiency(double tile_m, double tile_n, std::int64_t m, std::int64_t n) {
  const double tm = std::ceil(d(m) / tile_m), tn = std::ceil(d(n) / tile_n);
  return (d(m) * d(n)) / (tm * tile_m * tn * tile_n);
}

Task gemm_task(const GemmShape& s, double flops) {
  Task t;
  t.kind = TaskKind::kGemm;
  t.m = s.m;
  t.n = s.n;
  t.k = s.k;
  t.batch = s.batch;
  t.flops = t.executed_flops = flops;
  t.bytes = 0;  // compute-bound on a CPU: the fit leaves the memory term out for GEMMs
  return t;
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

// One weighted GEMM fit over the grid of tiles: columns 1/P, k_half/P, overhead. Rows with
// keep[i] false are left out.
struct GemmFit {
  Eigen::VectorXd x;  // (1/P, k_half/P, overhead)
  double tile_m = 1, tile_n = 1;
};

std::optional<GemmFit> fit_gemms(const std::vector<GemmSample>& gemms,
                                 const std::vector<bool>& keep, const ComputeFitOptions& o) {
  std::vector<std::size_t> use;
  for (std::size_t i = 0; i < gemms.size(); ++i)
    if (keep[i]) use.push_back(i);
  const auto rows = static_cast<Eigen::Index>(use.size());
  Eigen::VectorXd y(rows), w(rows);
  for (Eigen::Index r = 0; r < rows; ++r) {
    y(r) = gemms[use[static_cast<std::size_t>(r)]].time_s;
    w(r) = 1.0 / y(r);
  }
  double best_rss = std::numeric_limits<double>::infinity();
  std::optional<GemmFit> best;
  for (double tm : o.tiles) {
    for (double tn : o.tiles) {
      Eigen::MatrixXd a(rows, 3);
      for (Eigen::Index r = 0; r < rows; ++r) {
        const GemmSample& g = gemms[use[static_cast<std::size_t>(r)]];
        const double pad = pad_efficiency(tm, tn, g.shape.m, g.shape.n);
        a(r, 0) = g.flops / pad;
        a(r, 1) = g.flops / (pad * d(g.shape.k));
        a(r, 2) = 1.0;
      }
      std::vector<bool> fixed = {false, false, !o.fit_overhead};
      Eigen::VectorXd x = weighted_least_squares(a, y, w, fixed);
      // Physical constraints: k_half >= 0 and overhead >= 0; refit without a column that
      // came out negative.
      for (int pass = 0; pass < 2; ++pass) {
        bool changed = false;
        for (int j : {1, 2}) {
          if (x(j) < 0 && !fixed[static_cast<std::size_t>(j)]) {
            fixed[static_cast<std::size_t>(j)] = true;
            changed = true;
          }
        }
        if (!changed) break;
        x = weighted_least_squares(a, y, w, fixed);
      }
      if (!(x(0) > 0)) continue;
      const double rss = (a * x - y).cwiseProduct(w).squaredNorm();
      // Strictly better only: ties keep the smaller (earlier) tiles.
      if (rss < best_rss * (1.0 - 1e-12)) {
        best_rss = rss;
        best = GemmFit{x, tm, tn};
      }
    }
  }
  return best;
}

double gemm_model_time(const GemmFit& f, const GemmSample& g) {
  const double pad = pad_efficiency(f.tile_m, f.tile_n, g.shape.m, g.shape.n);
  return g.flops / pad * f.x(0) + g.flops / (pad * d(g.shape.k)) * f.x(1) + f.x(2);
}

}  // namespace

Result<ComputeFit> fit_compute(const std::vector<GemmSample>& gemms,
                               const std::vector<MemorySample>& memory,
                               const std::vector<AttentionSample>& attention,
                               double stream_bytes_per_s, const ComputeFitOptions& o) {
  if (gemms.size() < 3)
    return Status::Error("compute fit: need at least 3 GEMM samples, got " +
                         std::to_string(gemms.size()));
  if (memory.empty()) return Status::Error("compute fit: need memory-kernel samples, got none");
  for (const GemmSample& g : gemms)
    if (!(g.time_s > 0)) return Status::Error("compute fit: a GEMM sample has a non-positive time");

  // GEMMs, relative least squares; then once more without the outliers (a measurement that a
  // neighbouring process disturbed): rows off by more than 3x the median residual and 25%.
  std::vector<bool> keep(gemms.size(), true);
  auto gf = fit_gemms(gemms, keep, o);
  if (!gf) return Status::Error("compute fit: no tile size gave a positive GEMM rate");
  {
    std::vector<double> rel;
    for (const GemmSample& g : gemms)
      rel.push_back(std::abs(gemm_model_time(*gf, g) - g.time_s) / g.time_s);
    std::vector<double> sorted = rel;
    std::sort(sorted.begin(), sorted.end());
    const double cut = std::max(0.25, 3.0 * sorted[sorted.size() / 2]);
    std::size_t kept = 0;
    for (std::size_t i = 0; i < gemms.size(); ++i) kept += (keep[i] = rel[i] <= cut) ? 1 : 0;
    if (kept >= 3 && kept < gemms.size())
      if (auto again = fit_gemms(gemms, keep, o)) gf = again;
  }
  const double overhead = gf->x(2);

  // Memory-bound kernels: t - overhead = bytes / B, weighted least squares with variance
  // proportional to bytes, whose solution 1/B = sum(t - overhead) / sum(bytes) makes the
  // kernels' total time match: the cost model has one bandwidth for kernels whose measured
  // rates differ by an order of magnitude (an add against a softmax), and a step sums them.
  double sum_t = 0, sum_bytes = 0;
  for (const MemorySample& m : memory) {
    sum_t += m.time_s - overhead;
    sum_bytes += m.bytes;
  }
  if (!(sum_t > 0) || !(sum_bytes > 0))
    return Status::Error("compute fit: memory-kernel times are not above the kernel overhead");
  Eigen::VectorXd best(4);
  best << gf->x(0), gf->x(1), sum_t / sum_bytes, overhead;
  const double best_tm = gf->tile_m, best_tn = gf->tile_n;

  ComputeFit f;
  f.fitted_flops_per_s = 1.0 / best(0);
  f.fitted_bytes_per_s = 1.0 / best(2);
  double best_measured = 0;
  for (const GemmSample& g : gemms) best_measured = std::max(best_measured, g.flops_per_s());
  DeviceRates& r = f.rates;
  r.peak_flops_per_s = std::max(best_measured, f.fitted_flops_per_s);
  r.gemm_efficiency = f.fitted_flops_per_s / r.peak_flops_per_s;
  r.hbm_bytes_per_s = std::max(stream_bytes_per_s, f.fitted_bytes_per_s);
  r.memory_efficiency = f.fitted_bytes_per_s / r.hbm_bytes_per_s;
  r.k_half = best(1) / best(0);
  r.tile_m = best_tm;
  r.tile_n = best_tn;
  r.sm_count = o.parallel_units;
  r.kernel_overhead_s = best(3);
  r.attention_efficiency = 1.0;

  // Attention: t - overhead = executed_flops / (P * shape_eff * att_eff) = g * u with
  // u = 1/att_eff; weighted least squares (variance proportional to g): u = sum(t - o) / sum(g).
  if (!attention.empty()) {
    double num = 0, den = 0;
    for (const AttentionSample& s : attention) {
      const double g = s.executed_flops /
                       (f.fitted_flops_per_s * gemm_shape_efficiency(r, s.seq, s.seq, s.head_dim,
                                                                     s.batch));
      // Variance proportional to the modelled time, as for the memory kernels.
      num += s.time_s - r.kernel_overhead_s;
      den += g;
    }
    if (num > 0) r.attention_efficiency = std::clamp(den / num, 1e-6, 10.0);
  }

  // Residuals of the simulator's own formula (task_time_s, roofline max included).
  std::vector<double> pred, meas;
  for (const GemmSample& g : gemms) {
    pred.push_back(task_time_s(gemm_task(g.shape, g.flops), r));
    meas.push_back(g.time_s);
  }
  f.gemm = fit_stats(pred, meas);
  pred.clear();
  meas.clear();
  for (const MemorySample& m : memory) {
    Task t;
    t.kind = TaskKind::kMemory;
    t.bytes = m.bytes;
    pred.push_back(task_time_s(t, r));
    meas.push_back(m.time_s);
  }
  f.memory = fit_stats(pred, meas);
  pred.clear();
  meas.clear();
  for (const AttentionSample& s : attention) {
    Task t;
    t.kind = TaskKind::kAttention;
    t.m = t.n = s.seq;
    t.k = s.head_dim;
    t.batch = s.batch;
    t.executed_flops = s.executed_flops;
    pred.push_back(task_time_s(t, r));
    meas.push_back(s.time_s);
  }
  f.attention = fit_stats(pred, meas);
  return f;
}

Result<LinkFit> fit_links(const std::vector<CollectiveSample>& samples) {
  std::vector<const CollectiveSample*> use;
  for (const CollectiveSample& s : samples)
    if (s.group_size >= 2 && s.time_s > 0) use.push_back(&s);
  if (use.size() < 2)
    return Status::Error("link fit: need at least 2 collective samples over 2 or more ranks, got " +
                         std::to_string(use.size()));
  const auto rows = static_cast<Eigen::Index>(use.size());
  Eigen::MatrixXd a(rows, 2);
  Eigen::VectorXd y(rows), w(rows);
  for (Eigen::Index i = 0; i < rows; ++i) {
    const CollectiveSample& s = *use[static_cast<std::size_t>(i)];
    a(i, 0) = d(ring_steps(s.collective, s.group_size));
    a(i, 1) = d(bytes_sent_per_rank(s.collective, s.bytes, s.group_size));
    y(i) = s.time_s;
    w(i) = 1.0 / s.time_s;
  }
  std::vector<bool> fixed(2, false);
  Eigen::VectorXd x = weighted_least_squares(a, y, w, fixed);
  if (x(0) < 0) {
    fixed[0] = true;
    x = weighted_least_squares(a, y, w, fixed);
  }
  if (!(x(1) > 0))
    return Status::Error("link fit: the fitted bandwidth is not positive (measurements noisy?)");
  LinkFit f;
  f.latency_s = x(0);
  f.bytes_per_s = 1.0 / x(1);
  std::vector<double> pred, meas;
  for (const CollectiveSample* s : use) {
    pred.push_back(ring_collective_time_s(s->collective, s->bytes, s->group_size, f.bytes_per_s,
                                          f.latency_s));
    meas.push_back(s->time_s);
  }
  f.stats = fit_stats(pred, meas);
  return f;
}

}  // namespace trainplan::calibration
