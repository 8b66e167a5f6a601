// The in-run reference gate; see reference_gate.h. Tested by tests/validation/reference_gate_test.cc.
#include "validation/reference_gate.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

namespace trainplan::validation {

namespace {

constexpr double kMaxRate = 1e30;  // a sanity bound: any real rate is far below

std::string pct(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%+.1f%%", v);
  return buf;
}

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

bool read_shape(JsonReader& r, std::int64_t& m, std::int64_t& n, std::int64_t& k) {
  constexpr std::int64_t kMaxDim = std::int64_t{1} << 20;
  r.get_int("m", m, 1, kMaxDim, true);
  r.get_int("n", n, 1, kMaxDim, true);
  r.get_int("k", k, 1, kMaxDim, true);
  return !r.failed();
}

std::string shape(std::int64_t m, std::int64_t n, std::int64_t k) {
  return std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k);
}

}  // namespace

Result<std::optional<CalibratedReference>> calibrated_reference_from_profile(
    const Json& profile, std::string_view source) {
  if (!profile.is_object() || !profile.contains("measurements") ||
      !profile["measurements"].is_object() ||
      !profile["measurements"].contains("reference_gemm") ||
      profile["measurements"]["reference_gemm"].is_null())
    return std::optional<CalibratedReference>();
  const Json& j = profile["measurements"]["reference_gemm"];
  JsonReader r(j, "profile '" + std::string(source) + "' measurements.reference_gemm");
  CalibratedReference c;
  read_shape(r, c.m, c.n, c.k);
  r.get_double("flops_per_s", c.flops_per_s, std::numeric_limits<double>::min(), kMaxRate, true);
  r.get_double("spread_pct", c.spread_pct, 0, 1e6, true);
  for (const char* k : {"kernel", "calls", "flops", "samples_flops_per_s"}) r.accept(k);
  TRAINPLAN_RETURN_IF_ERROR(r.finish());
  return std::optional<CalibratedReference>(c);
}

Result<std::optional<InRunReference>> in_run_reference_from_report(const StepReport& measured,
                                                                   std::string_view source) {
  const Json& cluster = measured.cluster;
  if (!cluster.is_object() || !cluster.contains("reference_gemm") ||
      cluster["reference_gemm"].is_null())
    return std::optional<InRunReference>();
  const Json& j = cluster["reference_gemm"];
  const std::string where =
      "measured report '" + std::string(source) + "' cluster.reference_gemm";
  JsonReader r(j, where);
  InRunReference in;
  read_shape(r, in.m, in.n, in.k);
  r.get_int("warmup_steps", in.warmup_steps, 0, std::int64_t{1} << 24, true);
  for (const char* k : {"kernel", "calls", "flops", "note"}) r.accept(k);
  r.accept("per_rank");
  TRAINPLAN_RETURN_IF_ERROR(r.finish());
  if (!j.contains("per_rank") || !j["per_rank"].is_array() || j["per_rank"].empty())
    return Status::Error(where + ": field 'per_rank': expected a non-empty array of "
                                 "{\"rank\", \"flops_per_s\": [per step]}");
  for (std::size_t i = 0; i < j["per_rank"].size(); ++i) {
    const Json& e = j["per_rank"][i];
    const std::string at = where + ".per_rank[" + std::to_string(i) + "]";
    if (!e.is_object() || !e.contains("flops_per_s") || !e["flops_per_s"].is_array())
      return Status::Error(at + ": field 'flops_per_s': expected an array of rates per step");
    std::vector<double> rates;
    for (std::size_t s = 0; s < e["flops_per_s"].size(); ++s) {
      const Json& v = e["flops_per_s"][s];
      if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() <= 0)
        return Status::Error(at + ".flops_per_s[" + std::to_string(s) + "]: " +
                             json_value_for_message(v) + " is not a positive rate");
      rates.push_back(v.get<double>());
    }
    in.rank_step_flops_per_s.push_back(std::move(rates));
  }
  return std::optional<InRunReference>(in);
}

Result<ReferenceGate> gate_reference(const CalibratedReference& c, const InRunReference& in,
                                     double tolerance_pct) {
  if (!(tolerance_pct > 0 && tolerance_pct < 100))
    return Status::Error("reference tolerance " + std::to_string(tolerance_pct) +
                         "%: expected a percentage in (0, 100)");
  if (c.m != in.m || c.n != in.n || c.k != in.k)
    return Status::Error("the reference kernels differ: the calibration timed " +
                         shape(c.m, c.n, c.k) + ", the run " + shape(in.m, in.n, in.k) +
                         " (calibrate and execute from different builds?)");
  if (!(c.flops_per_s > 0) || !std::isfinite(c.flops_per_s))
    return Status::Error("the calibration's reference rate " + std::to_string(c.flops_per_s) +
                         " is not a positive rate");
  if (in.rank_step_flops_per_s.empty())
    return Status::Error("the run's reference kernel has no rank");
  ReferenceGate g;
  g.tolerance_pct = tolerance_pct;
  g.calibrated_flops_per_s = c.flops_per_s;
  g.calibration_spread_pct = c.spread_pct;
  g.min_step_deviation_pct = std::numeric_limits<double>::infinity();
  g.max_step_deviation_pct = -std::numeric_limits<double>::infinity();
  auto deviation = [&](double rate) { return 100.0 * (rate / c.flops_per_s - 1.0); };
  for (std::size_t r = 0; r < in.rank_step_flops_per_s.size(); ++r) {
    const std::vector<double>& steps = in.rank_step_flops_per_s[r];
    if (static_cast<std::int64_t>(steps.size()) <= in.warmup_steps)
      return Status::Error("rank " + std::to_string(r) + " timed the reference kernel in " +
                           std::to_string(steps.size()) + " step(s), none after the " +
                           std::to_string(in.warmup_steps) + " warm-up step(s)");
    std::vector<double> measured(steps.begin() + static_cast<std::ptrdiff_t>(in.warmup_steps),
                                 steps.end());
    for (double rate : measured) {
      if (!(rate > 0) || !std::isfinite(rate))
        return Status::Error("rank " + std::to_string(r) + ": reference rate " +
                             std::to_string(rate) + " is not a positive rate");
      g.min_step_deviation_pct = std::min(g.min_step_deviation_pct, deviation(rate));
      g.max_step_deviation_pct = std::max(g.max_step_deviation_pct, deviation(rate));
    }
    const double med = median_of(measured);
    g.rank_median_flops_per_s.push_back(med);
    if (r == 0 || std::abs(deviation(med)) > std::abs(g.deviation_pct)) g.deviation_pct = deviation(med);
  }
  if (c.spread_pct > tolerance_pct)
    g.reason = "the calibration's own reference samples spread " + pct(c.spread_pct).substr(1) +
               " (over " + pct(tolerance_pct).substr(1) +
               "): the host changed speed during calibrate";
  else if (std::abs(g.deviation_pct) > tolerance_pct)
    g.reason = "the run's reference rate is " + pct(g.deviation_pct) +
               " from the calibration's (tolerance " + pct(tolerance_pct).substr(1) +
               "): the host ran at another speed than when calibrated";
  g.steady = g.reason.empty();
  return g;
}

Json reference_gate_to_json(const ReferenceGate& g) {
  return Json{{"steady", g.steady},
              {"reason", g.reason},
              {"tolerance_pct", g.tolerance_pct},
              {"calibrated_flops_per_s", g.calibrated_flops_per_s},
              {"calibration_spread_pct", g.calibration_spread_pct},
              {"rank_median_flops_per_s", g.rank_median_flops_per_s},
              {"deviation_pct", g.deviation_pct},
              {"min_step_deviation_pct", g.min_step_deviation_pct},
              {"max_step_deviation_pct", g.max_step_deviation_pct}};
}

std::string format_reference_gate(const ReferenceGate& g) {
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "(run %s from the calibration's %.2f GFLOP/s, steps %s to %s; calibration "
                "spread %.1f%%; tolerance %.1f%%)",
                pct(g.deviation_pct).c_str(), g.calibrated_flops_per_s / 1e9,
                pct(g.min_step_deviation_pct).c_str(), pct(g.max_step_deviation_pct).c_str(),
                g.calibration_spread_pct, g.tolerance_pct);
  return g.steady ? std::string("reference kernel: steady ") + buf
                  : "reference kernel: UNSTEADY: " + g.reason + " " + buf;
}

}  // namespace trainplan::validation
