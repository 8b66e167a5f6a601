// The expected latest arrival; see straggler.h.
#include "core/cost/straggler.h"

#include <algorithm>
#include <cmath>
#include <tuple>
#include <unordered_map>

namespace trainplan {

namespace {

double normal_cdf(double z) { return 0.5 * std::erfc(-z / std::sqrt(2.0)); }

// Composite Simpson's rule over [a, b] with `intervals` (even) pieces.
template <class F>
double simpson(F f, double a, double b, int intervals) {
  const double h = (b - a) / intervals;
  double sum = f(a) + f(b);
  for (int i = 1; i < intervals; ++i) sum += (i % 2 == 1 ? 4.0 : 2.0) * f(a + i * h);
  return sum * h / 3.0;
}

// Beyond this many standard deviations below its mean a member's CDF is < 1e-17, and the
// maximum's CDF, a product including it, too.
constexpr double kTailSd = 8.5;
// Upper end for `copies` members of one kind: copies x Phi(-z) < 1e-17 there.
double upper_tail_sd(double copies) {
  return kTailSd + std::sqrt(2.0 * std::log(std::max(copies, 1.0)));
}

}  // namespace

double expected_max_standard_normal(double n) {
  if (n <= 1.0) return 0.0;
  thread_local std::unordered_map<double, double> memo;
  if (auto it = memo.find(n); it != memo.end()) return it->second;
  const double lo = -kTailSd, hi = upper_tail_sd(n);
  const double e =
      lo + simpson([n](double x) { return 1.0 - std::pow(normal_cdf(x), n); }, lo, hi, 4096);
  memo.emplace(n, e);
  return e;
}

double expected_latest_arrival(std::span<ArrivalSpread> members) {
  if (members.empty()) return 0.0;
  // Identical members merge into one kind with their copies summed, in place.
  std::sort(members.begin(), members.end(), [](const ArrivalSpread& a, const ArrivalSpread& b) {
    return std::tie(a.mean, a.sd) < std::tie(b.mean, b.sd);
  });
  std::size_t n = 0;
  for (std::size_t i = 1; i < members.size(); ++i) {
    if (members[i].mean == members[n].mean && members[i].sd == members[n].sd)
      members[n].copies += members[i].copies;
    else
      members[++n] = members[i];
  }
  const std::span<const ArrivalSpread> kinds = members.first(n + 1);
  if (kinds.size() == 1)
    return kinds[0].mean + kinds[0].sd * expected_max_standard_normal(kinds[0].copies);
  double latest_mean = kinds.front().mean;
  double lo = kinds.front().mean, hi = kinds.front().mean;
  for (const ArrivalSpread& k : kinds) {
    latest_mean = std::max(latest_mean, k.mean);
    lo = std::max(lo, k.mean - kTailSd * k.sd);
    hi = std::max(hi, k.mean + upper_tail_sd(k.copies) * k.sd);
  }
  if (hi <= lo) return latest_mean;  // no spread: the latest arrives last
  // Below lo the maximum's CDF is ~0 (some member has not arrived; members with sd 0 arrive at
  // their mean <= lo), above hi ~1: E[max] = lo + integral (1 - F).
  const double tail = simpson(
      [kinds](double x) {
        double cdf = 1.0;
        for (const ArrivalSpread& k : kinds) {
          if (k.sd <= 0.0) continue;  // arrived by lo
          cdf *= std::pow(normal_cdf((x - k.mean) / k.sd), k.copies);
        }
        return 1.0 - cdf;
      },
      lo, hi, 1024);
  return std::max(latest_mean, lo + tail);
}

}  // namespace trainplan
