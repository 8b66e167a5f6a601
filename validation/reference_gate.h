// The in-run reference gate (issue 28): whether the host ran at the calibration's speed while a
// plan ran. `calibrate` times the reference kernel (executor/cpu/reference_gemm.h: one fixed
// forward GEMM of the executor's) at three points of its run and writes their rates under its
// profile's measurements.reference_gemm; `execute` times the same kernel, in the same process,
// after every step (outside the step's timed region) and writes each step's rate under its
// report's cluster.reference_gemm. The gate compares, per rank, the median over the measured
// steps with the calibration's median rate: the attempt is steady when every rank's is within
// the tolerance and the calibration's own samples spread by no more than it. This VM's speed
// states are some 40% apart (bench/predicted_vs_measured.sh), so a change between `calibrate`
// and the run shows here; it is a gate only, predictions are never rescaled by it.
// Used by `compare --hardware` (tools/compare.cc) and the CPU matrix
// (bench/predicted_vs_measured.sh). Tested by tests/validation/reference_gate_test.cc.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/json_util.h"
#include "core/status.h"
#include "core/step_report.h"

namespace trainplan::validation {

// compare's default --reference-tolerance-pct. Where it comes from (measured,
// bench/results/cpu-gate-2026-12-02/NOTES.md): the reference shape's rate over the 15 one-rank
// calibrations of the quiet-host matrix cpu-2026-12-02 had its quartiles at -0.9% and +1.7% of
// their median, 12 of 15 within 5%; inside one run, while the host held its speed, the steps'
// rates stayed within about 3% of each other. 5% refuses the tails (the speed changes) and keeps
// the middle; the states themselves are some 40% apart.
inline constexpr double kDefaultReferenceTolerancePct = 5.0;

struct CalibratedReference {
  std::int64_t m = 0, n = 0, k = 0;
  double flops_per_s = 0;  // the median of the calibration's samples
  double spread_pct = 0;   // (max - min) / median of its samples
};

struct InRunReference {
  std::int64_t m = 0, n = 0, k = 0;
  std::int64_t warmup_steps = 0;  // steps before the measured ones
  std::vector<std::vector<double>> rank_step_flops_per_s;  // [rank][step], every step
};

// From a profile JSON (calibrate --out): its measurements.reference_gemm. nullopt when the
// profile has none (a profile from before 2026-12-02, or calibrate --backend cuda); an error,
// naming the source and the field, when it is malformed.
Result<std::optional<CalibratedReference>> calibrated_reference_from_profile(
    const Json& profile, std::string_view source);
// From a measured report (execute): its cluster.reference_gemm. nullopt when absent (execute
// --reference-calls 0, another backend, or a report from before 2026-12-02).
Result<std::optional<InRunReference>> in_run_reference_from_report(const StepReport& measured,
                                                                   std::string_view source);

struct ReferenceGate {
  double tolerance_pct = 0;
  double calibrated_flops_per_s = 0;
  double calibration_spread_pct = 0;
  std::vector<double> rank_median_flops_per_s;  // over the measured steps
  double deviation_pct = 0;  // the rank median farthest from the calibration's, signed
  double min_step_deviation_pct = 0, max_step_deviation_pct = 0;  // every measured step
  bool steady = false;
  std::string reason;  // why not steady; empty when steady
};

// The gate. Errors: a tolerance outside (0, 100), different kernel shapes, no measured step, a
// rate that is not positive and finite.
Result<ReferenceGate> gate_reference(const CalibratedReference& calibrated,
                                     const InRunReference& in_run, double tolerance_pct);
Json reference_gate_to_json(const ReferenceGate& gate);
// One line: "reference kernel: steady (...)" or "reference kernel: UNSTEADY: reason".
std::string format_reference_gate(const ReferenceGate& gate);

}  // namespace trainplan::validation
