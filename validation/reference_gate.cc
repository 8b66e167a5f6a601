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

// The GEMM's m, n, k; the triad's elements (into m, n = k = 1).
bool read_shape(JsonReader& r, ReferenceKernel kernel, std::int64_t& m, std::int64_t& n,
                std::int64_t& k) {
  if (kernel == ReferenceKernel::kTriad) {
    r.get_int("elements", m, 1, std::int64_t{1} << 40, true);
    n = k = 1;
    return !r.failed();
  }
  constexpr std::int64_t kMaxDim = std::int64_t{1} << 20;
  r.get_int("m", m, 1, kMaxDim, true);
  r.get_int("n", n, 1, kMaxDim, true);
  r.get_int("k", k, 1, kMaxDim, true);
  return !r.failed();
}

std::string shape(ReferenceKernel kernel, std::int64_t m, std::int64_t n, std::int64_t k) {
  if (kernel == ReferenceKernel::kTriad) return std::to_string(m) + " elements";
  return std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k);
}

// The fields beside the shape and the rates that a reader accepts without using: the kernel's
// name, calls per sample, the work per call ("flops" or "bytes").
const char* work_key(ReferenceKernel kernel) {
  return kernel == ReferenceKernel::kTriad ? "bytes" : "flops";
}

const char* rate_unit(ReferenceKernel kernel) {
  return kernel == ReferenceKernel::kTriad ? "GB/s" : "GFLOP/s";
}

}  // namespace

const char* reference_kernel_name(ReferenceKernel kernel) {
  return kernel == ReferenceKernel::kTriad ? "triad" : "GEMM";
}

const char* reference_kernel_field(ReferenceKernel kernel) {
  return kernel == ReferenceKernel::kTriad ? "reference_triad" : "reference_gemm";
}

const char* reference_rate_key(ReferenceKernel kernel) {
  return kernel == ReferenceKernel::kTriad ? "bytes_per_s" : "flops_per_s";
}

Result<std::optional<CalibratedReference>> calibrated_reference_from_profile(
    const Json& profile, std::string_view source, ReferenceKernel kernel) {
  const char* field = reference_kernel_field(kernel);
  if (!profile.is_object() || !profile.contains("measurements") ||
      !profile["measurements"].is_object() || !profile["measurements"].contains(field) ||
      profile["measurements"][field].is_null())
    return std::optional<CalibratedReference>();
  const Json& j = profile["measurements"][field];
  JsonReader r(j, "profile '" + std::string(source) + "' measurements." + field);
  CalibratedReference c;
  c.kernel = kernel;
  const std::string rate = reference_rate_key(kernel);
  read_shape(r, kernel, c.m, c.n, c.k);
  r.get_double(rate.c_str(), c.flops_per_s, std::numeric_limits<double>::min(), kMaxRate, true);
  r.get_double("spread_pct", c.spread_pct, 0, 1e6, true);
  const std::string samples = "samples_" + rate;
  for (const char* k : {"kernel", "calls", work_key(kernel), samples.c_str()}) r.accept(k);
  TRAINPLAN_RETURN_IF_ERROR(r.finish());
  return std::optional<CalibratedReference>(c);
}

Result<std::optional<InRunReference>> in_run_reference_from_report(
    const StepReport& measured, std::string_view source, ReferenceKernel kernel) {
  const Json& cluster = measured.cluster;
  const char* field = reference_kernel_field(kernel);
  if (!cluster.is_object() || !cluster.contains(field) || cluster[field].is_null())
    return std::optional<InRunReference>();
  const Json& j = cluster[field];
  const std::string where = "measured report '" + std::string(source) + "' cluster." + field;
  const std::string rate = reference_rate_key(kernel);
  JsonReader r(j, where);
  InRunReference in;
  in.kernel = kernel;
  read_shape(r, kernel, in.m, in.n, in.k);
  r.get_int("warmup_steps", in.warmup_steps, 0, std::int64_t{1} << 24, true);
  for (const char* k : {"kernel", "calls", work_key(kernel), "note", "when"}) r.accept(k);
  r.accept("per_rank");
  TRAINPLAN_RETURN_IF_ERROR(r.finish());
  if (!j.contains("per_rank") || !j["per_rank"].is_array() || j["per_rank"].empty())
    return Status::Error(where + ": field 'per_rank': expected a non-empty array of "
                                 "{\"rank\", \"" + rate + "\": [per step]}");
  for (std::size_t i = 0; i < j["per_rank"].size(); ++i) {
    const Json& e = j["per_rank"][i];
    const std::string at = where + ".per_rank[" + std::to_string(i) + "]";
    if (!e.is_object() || !e.contains(rate) || !e[rate].is_array())
      return Status::Error(at + ": field '" + rate + "': expected an array of rates per step");
    std::vector<double> rates;
    for (std::size_t s = 0; s < e[rate].size(); ++s) {
      const Json& v = e[rate][s];
      if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() <= 0)
        return Status::Error(at + "." + rate + "[" + std::to_string(s) + "]: " +
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
  const std::string name = reference_kernel_name(c.kernel);
  if (c.kernel != in.kernel)
    return Status::Error(std::string("the reference kernels differ: the calibration's is the ") +
                         name + ", the run's the " + reference_kernel_name(in.kernel));
  if (c.m != in.m || c.n != in.n || c.k != in.k)
    return Status::Error("the reference kernels differ: the calibration timed " +
                         shape(c.kernel, c.m, c.n, c.k) + ", the run " +
                         shape(c.kernel, in.m, in.n, in.k) +
                         " (calibrate and execute from different builds?)");
  if (!(c.flops_per_s > 0) || !std::isfinite(c.flops_per_s))
    return Status::Error("the calibration's reference " + name + " rate " +
                         std::to_string(c.flops_per_s) + " is not a positive rate");
  if (in.rank_step_flops_per_s.empty())
    return Status::Error("the run's reference " + name + " has no rank");
  ReferenceGate g;
  g.kernel = c.kernel;
  g.tolerance_pct = tolerance_pct;
  g.calibrated_flops_per_s = c.flops_per_s;
  g.calibration_spread_pct = c.spread_pct;
  g.min_step_deviation_pct = std::numeric_limits<double>::infinity();
  g.max_step_deviation_pct = -std::numeric_limits<double>::infinity();
  auto deviation = [&](double rate) { return 100.0 * (rate / c.flops_per_s - 1.0); };
  for (std::size_t r = 0; r < in.rank_step_flops_per_s.size(); ++r) {
    const std::vector<double>& steps = in.rank_step_flops_per_s[r];
    if (static_cast<std::int64_t>(steps.size()) <= in.warmup_steps)
      return Status::Error("rank " + std::to_string(r) + " timed the reference " + name + " in " +
                           std::to_string(steps.size()) + " step(s), none after the " +
                           std::to_string(in.warmup_steps) + " warm-up step(s)");
    std::vector<double> measured(steps.begin() + static_cast<std::ptrdiff_t>(in.warmup_steps),
                                 steps.end());
    for (double rate : measured) {
      if (!(rate > 0) || !std::isfinite(rate))
        return Status::Error("rank " + std::to_string(r) + ": reference " + name + " rate " +
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
               " (over " + pct(tolerance_pct).substr(1) + ", " + name +
               "): the host changed speed during calibrate";
  else if (std::abs(g.deviation_pct) > tolerance_pct)
    g.reason = "the run's reference rate is " + pct(g.deviation_pct) +
               " from the calibration's (" + name + ", tolerance " +
               pct(tolerance_pct).substr(1) +
               "): the host ran at another speed than when calibrated";
  g.steady = g.reason.empty();
  return g;
}

Json reference_gate_to_json(const ReferenceGate& g) {
  const std::string rate = reference_rate_key(g.kernel);
  return Json{{"kernel", reference_kernel_name(g.kernel)},
              {"steady", g.steady},
              {"reason", g.reason},
              {"tolerance_pct", g.tolerance_pct},
              {"calibrated_" + rate, g.calibrated_flops_per_s},
              {"calibration_spread_pct", g.calibration_spread_pct},
              {"rank_median_" + rate, g.rank_median_flops_per_s},
              {"deviation_pct", g.deviation_pct},
              {"min_step_deviation_pct", g.min_step_deviation_pct},
              {"max_step_deviation_pct", g.max_step_deviation_pct}};
}

namespace {
// "run +1.0% from the calibration's 12.34 GFLOP/s, steps -1.0% to +2.0%; calibration spread
// 1.0%" (the GEMM's, without the kernel's name; the triad's with it).
std::string gate_figures(const ReferenceGate& g, bool named) {
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "%s%s %s from the calibration's %.2f %s, %s %s to %s; calibration spread %.1f%%",
                named ? reference_kernel_name(g.kernel) : "", named ? "" : "run",
                pct(g.deviation_pct).c_str(), g.calibrated_flops_per_s / 1e9, rate_unit(g.kernel),
                named ? "samples" : "steps",
                pct(g.min_step_deviation_pct).c_str(), pct(g.max_step_deviation_pct).c_str(),
                g.calibration_spread_pct);
  return buf;
}

std::string tolerance_text(double tolerance_pct) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "tolerance %.1f%%", tolerance_pct);
  return buf;
}
}  // namespace

std::string format_reference_gate(const ReferenceGate& g) {
  const std::string figures = "(" + gate_figures(g, false) + "; " + tolerance_text(g.tolerance_pct) + ")";
  return g.steady ? "reference kernel: steady " + figures
                  : "reference kernel: UNSTEADY: " + g.reason + " " + figures;
}

ReferenceGates combine_reference_gates(const ReferenceGate& gemm,
                                       const std::optional<ReferenceGate>& triad,
                                       std::string triad_note) {
  ReferenceGates r{gemm, triad, std::move(triad_note), false, ""};
  for (const ReferenceGate* g : {&r.gemm, r.triad ? &*r.triad : nullptr}) {
    if (g == nullptr || g->steady) continue;
    if (!r.reason.empty()) r.reason += "; ";
    r.reason += g->reason;  // names its kernel
  }
  r.steady = r.reason.empty();
  return r;
}

Json reference_gates_to_json(const ReferenceGates& gates) {
  Json j = reference_gate_to_json(gates.gemm);
  j["gemm_steady"] = gates.gemm.steady;
  j["steady"] = gates.steady;
  j["reason"] = gates.reason;
  j["triad"] = gates.triad ? reference_gate_to_json(*gates.triad) : Json(nullptr);
  if (!gates.triad) j["triad_note"] = gates.triad_note;
  return j;
}

std::string format_reference_gates(const ReferenceGates& gates) {
  std::string figures = "(GEMM: " + gate_figures(gates.gemm, false) + "; ";
  figures += gates.triad ? gate_figures(*gates.triad, true)
                         : "triad not gated: " + gates.triad_note;
  figures += "; " + tolerance_text(gates.gemm.tolerance_pct) + ")";
  return gates.steady ? "reference kernel: steady " + figures
                      : "reference kernel: UNSTEADY: " + gates.reason + " " + figures;
}

}  // namespace trainplan::validation
