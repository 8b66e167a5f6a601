// Error statistics and leave-one-family-out cross-validation (validation/accuracy.h).
#include "validation/accuracy.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <map>
#include <optional>
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

// errors[job] = evaluate(run, point) for each (run, point) job, over `threads` threads; a run
// appears in at most one job (as evaluate_grid keeps a run's evaluations on one thread).
std::vector<RunErrors> evaluate_jobs(
    const std::vector<std::pair<std::size_t, EfficiencyPoint>>& jobs,
    const std::function<RunErrors(std::size_t, const EfficiencyPoint&)>& evaluate,
    unsigned threads) {
  std::vector<RunErrors> out(jobs.size());
  std::atomic<std::size_t> next{0};
  auto work = [&] {
    for (std::size_t j = next++; j < jobs.size(); j = next++)
      out[j] = evaluate(jobs[j].first, jobs[j].second);
  };
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < std::max(threads, 1u); ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  return out;
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

std::size_t best_of(const std::vector<Score>& all) {
  std::size_t best = 0;
  for (std::size_t g = 1; g < all.size(); ++g)
    if (all[g] < all[best]) best = g;
  return best;
}

// The vertex of the parabola through (x0, f0), (x1, f1), (x2, f2), x0 < x1 < x2, where f1 is the
// least of the three: within [(x0 + x1) / 2, (x1 + x2) / 2]. x1 where the three are collinear.
double parabola_vertex(double x0, double f0, double x1, double f1, double x2, double f2) {
  const double a = (x1 - x0) * (f1 - f2), b = (x1 - x2) * (f1 - f0);
  const double denominator = a - b;
  if (!(denominator != 0)) return x1;
  const double x = x1 - 0.5 * ((x1 - x0) * a - (x1 - x2) * b) / denominator;
  return std::clamp(x, 0.5 * (x0 + x1), 0.5 * (x1 + x2));
}

// The choice between grid points (validation/corpus/NOTES.md, forty-ninth pass): the best grid
// point, then on each axis the vertex of the parabola through it and its nearest grid neighbours
// either side with the other constant equal, where both exist. On the grid alone a fold jumped a
// whole step (gemm share 0.8 <-> 0.85) when nine rows of three new families tipped a mean that
// was flat between the two points, and the headline median moved 1.3 points; replayed on seven
// corpora a few rows apart (bench/scripts/cv_fold_stability.py,
// bench/results/foldinterp-2026-12-07/) a run's held-out error moved 0.28 points on average under
// the vertex against 1.23 on the grid.
EfficiencyPoint interpolated_choice(const std::vector<Score>& all,
                                    const std::vector<EfficiencyPoint>& grid, std::size_t best) {
  constexpr double kSame = 1e-9;
  auto along = [&](auto coordinate, auto other) {
    const double x1 = coordinate(grid[best]);
    std::optional<std::size_t> below, above;
    for (std::size_t g = 0; g < grid.size(); ++g) {
      if (std::fabs(other(grid[g]) - other(grid[best])) > kSame) continue;
      const double x = coordinate(grid[g]);
      if (x < x1 - kSame && (!below || x > coordinate(grid[*below]))) below = g;
      if (x > x1 + kSame && (!above || x < coordinate(grid[*above]))) above = g;
    }
    if (!below || !above) return x1;
    return parabola_vertex(coordinate(grid[*below]), all[*below].mean_abs, x1, all[best].mean_abs,
                           coordinate(grid[*above]), all[*above].mean_abs);
  };
  auto share = [](const EfficiencyPoint& p) { return p.gemm_share; };
  auto memory = [](const EfficiencyPoint& p) { return p.memory_efficiency; };
  return {along(share, memory), along(memory, share)};
}

bool same_point(const EfficiencyPoint& a, const EfficiencyPoint& b) {
  return a.gemm_share == b.gemm_share && a.memory_efficiency == b.memory_efficiency;
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
  for (int g = 0; g <= 7; ++g) grid.push_back({0.65 + 0.05 * g, kPresetMemoryEfficiency});
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
  // Each fold: its point, then the held-out runs predicted there (the grid's errors where the
  // point is a grid point; evaluated otherwise, one job per run).
  std::vector<std::pair<std::size_t, EfficiencyPoint>> off_grid;
  for (const FamilyStats& f : stats_by_family(families, at_presets)) {
    const std::vector<Score> training = scores(
        on_grid, families, grid, presets, [&](std::size_t i) { return families[i] != f.family; });
    const std::size_t g = best_of(training);
    CrossValidation::Fold fold{f.family, interpolated_choice(training, grid, g), 0};
    for (std::size_t i = 0; i < families.size(); ++i)
      if (families[i] == f.family) {
        if (same_point(fold.chosen, grid[g]))
          held_out[i] = on_grid[i][g];
        else
          off_grid.emplace_back(i, fold.chosen);
        ++fold.runs;
      }
    cv.folds.push_back(fold);
  }
  const std::vector<RunErrors> evaluated = evaluate_jobs(off_grid, evaluate, threads);
  for (std::size_t j = 0; j < off_grid.size(); ++j) held_out[off_grid[j].first] = evaluated[j];
  cv.by_family = stats_by_family(families, held_out);
  cv.held_out = held_out;
  cv.throughput = error_stats(throughput_of(held_out));
  cv.memory = error_stats(memory_of(held_out));
  const auto every = [](std::size_t) { return true; };
  const std::vector<Score> surface = scores(on_grid, families, grid, presets, every);
  const std::size_t all = best_of(surface);
  for (std::size_t g = 0; g < grid.size(); ++g)
    cv.surface.push_back({grid[g], surface[g].mean_abs, surface[g].median_abs, surface[g].p90_abs});
  cv.fit_all = interpolated_choice(surface, grid, all);
  std::vector<RunErrors> at_all;
  if (same_point(cv.fit_all, grid[all])) {
    for (const auto& row : on_grid) at_all.push_back(row[all]);
  } else {
    std::vector<std::pair<std::size_t, EfficiencyPoint>> jobs;
    for (std::size_t i = 0; i < families.size(); ++i) jobs.emplace_back(i, cv.fit_all);
    at_all = evaluate_jobs(jobs, evaluate, threads);
  }
  cv.throughput_fit_all = error_stats(throughput_of(at_all));
  cv.throughput_presets = error_stats(throughput_of(at_presets));
  cv.memory_presets = error_stats(memory_of(at_presets));
  return cv;
}

}  // namespace trainplan
