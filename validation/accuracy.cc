// Error statistics and leave-one-family-out cross-validation (validation/accuracy.h).
#include "validation/accuracy.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <map>
#include <thread>
#include <utility>

#include "core/step_report.h"

namespace trainplan {
namespace {

// The 90th percentile by nearest rank: the smallest value with at least 90% of values at or
// below it.
double p90(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto rank = static_cast<std::size_t>(std::ceil(0.9 * static_cast<double>(v.size())));
  return v[std::max<std::size_t>(rank, 1) - 1];
}

// The objective on a set of runs: lower is better. The family-weighted mean |throughput error|,
// exact ties to the distance from the presets. It replaced (thirty-fifth pass,
// validation/corpus/NOTES.md) the larger of the weighted median and p90 in units of issue 23's
// targets: a nearest-rank p90 over some seventy family weights sits on gaps between families, so
// a new family of one row moved every fold to another grid point, three times in two days. The
// mean moves a little with each run and weighs the tail in proportion; replayed on four corpora
// a few rows apart it chose the same point in every fold of each (bench/scripts/cv_criteria.py).
// The weighted median and p90 are still computed: the surface reports them.
struct Score {
  double mean_abs = 0, median_abs = 0, p90_abs = 0, distance = 0;
  bool operator<(const Score& o) const {
    if (mean_abs != o.mean_abs) return mean_abs < o.mean_abs;
    return distance < o.distance;
  }
};

double distance(const EfficiencyPoint& a, const EfficiencyPoint& b) {
  return std::hypot(a.gemm_share - b.gemm_share,
                    a.memory_efficiency - b.memory_efficiency);
}

// errors[run][point], filled over `threads` threads (each run's points in one thread).
std::vector<std::vector<RunErrors>> evaluate_grid(
    std::size_t runs, const std::vector<EfficiencyPoint>& grid,
    const std::function<RunErrors(std::size_t, const EfficiencyPoint&)>& evaluate,
    unsigned threads) {
  std::vector<std::vector<RunErrors>> out(runs, std::vector<RunErrors>(grid.size()));
  std::atomic<std::size_t> next{0};
  auto work = [&] {
    for (std::size_t i = next++; i < runs; i = next++)
      for (std::size_t g = 0; g < grid.size(); ++g) out[i][g] = evaluate(i, grid[g]);
  };
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < std::max(threads, 1u); ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  return out;
}

std::vector<double> throughput_of(const std::vector<RunErrors>& errors) {
  std::vector<double> v;
  for (const RunErrors& e : errors)
    if (e.throughput) v.push_back(*e.throughput);
  return v;
}
std::vector<double> memory_of(const std::vector<RunErrors>& errors) {
  std::vector<double> v;
  for (const RunErrors& e : errors)
    if (e.memory) v.push_back(*e.memory);
  return v;
}

// The smallest |value| at which the cumulative weight reaches `fraction` of the total (nearest
// rank, weighted): with equal weights, the nearest-rank quantile.
double weighted_quantile_abs(std::vector<std::pair<double, double>> value_weight,
                             double fraction) {
  if (value_weight.empty()) return 0;
  for (auto& [v, w] : value_weight) v = std::fabs(v);
  std::sort(value_weight.begin(), value_weight.end());
  double total = 0;
  for (const auto& vw : value_weight) total += vw.second;
  double cumulative = 0;
  for (const auto& [v, w] : value_weight) {
    cumulative += w;
    if (cumulative >= fraction * total * (1 - 1e-12)) return v;
  }
  return value_weight.back().first;
}

// The mean |value| weighted.
double weighted_mean_abs(const std::vector<std::pair<double, double>>& value_weight) {
  double sum = 0, total = 0;
  for (const auto& [v, w] : value_weight) {
    sum += std::fabs(v) * w;
    total += w;
  }
  return total > 0 ? sum / total : 0;
}

// The best grid point over the runs that `take` accepts. Each family weighs one: a run of a
// family of n accepted runs weighs 1/n, and the objective is Score's weighted mean |throughput
// error|, then the distance from the presets. Pooled over runs, the families with many runs
// would choose the constant for the others, and the pooled median of 300-odd runs sat on a
// near-tie between two grid points (bench/results/foldcrit-2026-12-03).
std::vector<Score> scores(const std::vector<std::vector<RunErrors>>& errors,
                          const std::vector<std::string>& families,
                          const std::vector<EfficiencyPoint>& grid, const EfficiencyPoint& presets,
                          const std::function<bool(std::size_t)>& take) {
  std::map<std::string, std::size_t> runs_of;
  for (std::size_t i = 0; i < errors.size(); ++i)
    if (take(i) && errors[i].front().throughput) ++runs_of[families[i]];
  std::vector<Score> out;
  for (std::size_t g = 0; g < grid.size(); ++g) {
    std::vector<std::pair<double, double>> column;
    for (std::size_t i = 0; i < errors.size(); ++i)
      if (take(i) && errors[i][g].throughput)
        column.emplace_back(*errors[i][g].throughput,
                            1.0 / static_cast<double>(std::max<std::size_t>(
                                      runs_of[families[i]], 1)));
    out.push_back({weighted_mean_abs(column), weighted_quantile_abs(column, 0.5),
                   weighted_quantile_abs(column, 0.9), distance(grid[g], presets)});
  }
  return out;
}

std::size_t best_point(const std::vector<std::vector<RunErrors>>& errors,
                       const std::vector<std::string>& families,
                       const std::vector<EfficiencyPoint>& grid, const EfficiencyPoint& presets,
                       const std::function<bool(std::size_t)>& take) {
  const std::vector<Score> all = scores(errors, families, grid, presets, take);
  std::size_t best = 0;
  Score best_score{};
  for (std::size_t g = 0; g < all.size(); ++g) {
    const Score& score = all[g];
    if (g == 0 || score < best_score) {
      best = g;
      best_score = score;
    }
  }
  return best;
}

}  // namespace

ErrorStats error_stats(const std::vector<double>& signed_errors) {
  ErrorStats s;
  s.count = signed_errors.size();
  if (signed_errors.empty()) return s;
  std::vector<double> abs_errors;
  double sum = 0;
  for (double e : signed_errors) {
    abs_errors.push_back(std::fabs(e));
    sum += e;
  }
  s.median_abs = median(abs_errors);
  s.p90_abs = p90(abs_errors);
  s.mean_signed = sum / static_cast<double>(signed_errors.size());
  return s;
}

std::vector<EfficiencyPoint> default_efficiency_grid() {
  std::vector<EfficiencyPoint> grid;
  for (int g = 0; g <= 7; ++g)
    for (int m = 0; m <= 2; ++m) grid.push_back({0.65 + 0.05 * g, 0.45 + 0.15 * m});
  return grid;
}

std::vector<FamilyStats> stats_by_family(const std::vector<std::string>& families,
                                         const std::vector<RunErrors>& errors) {
  std::vector<std::string> order;
  std::map<std::string, std::vector<RunErrors>> by;
  for (std::size_t i = 0; i < families.size() && i < errors.size(); ++i) {
    if (!by.count(families[i])) order.push_back(families[i]);
    by[families[i]].push_back(errors[i]);
  }
  std::vector<FamilyStats> out;
  for (const std::string& f : order)
    out.push_back({f, error_stats(throughput_of(by[f])), error_stats(memory_of(by[f]))});
  return out;
}

CrossValidation cross_validate(
    const std::vector<std::string>& families, const std::vector<EfficiencyPoint>& grid,
    const EfficiencyPoint& presets,
    const std::function<RunErrors(std::size_t, const EfficiencyPoint&)>& evaluate,
    unsigned threads) {
  CrossValidation cv;
  if (grid.empty()) return cv;
  std::vector<EfficiencyPoint> points = grid;
  points.push_back(presets);  // the last column: the presets' own constants
  const auto errors = evaluate_grid(families.size(), points, evaluate, threads);
  std::vector<RunErrors> held_out(families.size()), at_presets;
  for (const auto& row : errors) at_presets.push_back(row.back());
  auto on_grid = errors;
  for (auto& row : on_grid) row.pop_back();
  for (const FamilyStats& f : stats_by_family(families, at_presets)) {
    const std::size_t g = best_point(on_grid, families, grid, presets,
                                     [&](std::size_t i) { return families[i] != f.family; });
    CrossValidation::Fold fold{f.family, grid[g], 0};
    for (std::size_t i = 0; i < families.size(); ++i)
      if (families[i] == f.family) {
        held_out[i] = on_grid[i][g];
        ++fold.runs;
      }
    cv.folds.push_back(fold);
  }
  cv.by_family = stats_by_family(families, held_out);
  cv.held_out = held_out;
  cv.throughput = error_stats(throughput_of(held_out));
  cv.memory = error_stats(memory_of(held_out));
  const auto every = [](std::size_t) { return true; };
  const std::size_t all = best_point(on_grid, families, grid, presets, every);
  const std::vector<Score> surface = scores(on_grid, families, grid, presets, every);
  for (std::size_t g = 0; g < grid.size(); ++g)
    cv.surface.push_back({grid[g], surface[g].mean_abs, surface[g].median_abs, surface[g].p90_abs});
  cv.fit_all = grid[all];
  std::vector<RunErrors> at_all;
  for (const auto& row : on_grid) at_all.push_back(row[all]);
  cv.throughput_fit_all = error_stats(throughput_of(at_all));
  cv.throughput_presets = error_stats(throughput_of(at_presets));
  cv.memory_presets = error_stats(memory_of(at_presets));
  return cv;
}

}  // namespace trainplan
