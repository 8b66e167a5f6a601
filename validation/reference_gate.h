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
//
// Two reference kernels (executor/cpu/reference_gemm.h): the GEMM (compute speed, FLOP/s;
// measurements.reference_gemm / cluster.reference_gemm) and the STREAM triad (memory bandwidth,
// bytes/s; measurements.reference_triad / cluster.reference_triad, since 2026-12-03). Each is
// gated alone (gate_reference); combine_reference_gates makes the attempt steady only when both
// are, its reason naming the kernel that moved. A profile or report without the triad (from
// before 2026-12-03) is gated on the GEMM alone, and the output says so.
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

enum class ReferenceKernel { kGemm, kTriad };
// "GEMM" or "triad" (in messages); the JSON field ("reference_gemm", "reference_triad"); the
// rate's key and unit ("flops_per_s", FLOP/s; "bytes_per_s", bytes/s).
const char* reference_kernel_name(ReferenceKernel kernel);
const char* reference_kernel_field(ReferenceKernel kernel);
const char* reference_rate_key(ReferenceKernel kernel);

// The rates below are the kernel's: FLOP/s for the GEMM, bytes/s for the triad (the field
// names predate the triad). The triad's shape is its element count, in m (n = k = 1).
struct CalibratedReference {
  std::int64_t m = 0, n = 0, k = 0;
  double flops_per_s = 0;  // the median of the calibration's samples
  double spread_pct = 0;   // (max - min) / median of its samples
  ReferenceKernel kernel = ReferenceKernel::kGemm;
};

struct InRunReference {
  std::int64_t m = 0, n = 0, k = 0;
  std::int64_t warmup_steps = 0;  // steps before the measured ones
  std::vector<std::vector<double>> rank_step_flops_per_s;  // [rank][step], every step
  ReferenceKernel kernel = ReferenceKernel::kGemm;
};

// From a profile JSON (calibrate --out): its measurements.reference_gemm. nullopt when the
// profile has none (a profile from before 2026-12-02, or calibrate --backend cuda); an error,
// naming the source and the field, when it is malformed.
// With kernel kTriad, its measurements.reference_triad (nullopt before 2026-12-03).
Result<std::optional<CalibratedReference>> calibrated_reference_from_profile(
    const Json& profile, std::string_view source, ReferenceKernel kernel = ReferenceKernel::kGemm);
// From a measured report (execute): its cluster.reference_gemm. nullopt when absent (execute
// --reference-calls 0, another backend, or a report from before 2026-12-02).
// With kernel kTriad, its cluster.reference_triad (nullopt before 2026-12-03).
Result<std::optional<InRunReference>> in_run_reference_from_report(
    const StepReport& measured, std::string_view source,
    ReferenceKernel kernel = ReferenceKernel::kGemm);

struct ReferenceGate {
  double tolerance_pct = 0;
  double calibrated_flops_per_s = 0;
  double calibration_spread_pct = 0;
  std::vector<double> rank_median_flops_per_s;  // over the measured steps
  double deviation_pct = 0;  // the rank median farthest from the calibration's, signed
  double min_step_deviation_pct = 0, max_step_deviation_pct = 0;  // every measured step
  bool steady = false;
  std::string reason;  // why not steady; empty when steady
  ReferenceKernel kernel = ReferenceKernel::kGemm;
};

// The gate, for one kernel. Errors: a tolerance outside (0, 100), different kernels or kernel
// shapes, no measured step, a rate that is not positive and finite.
Result<ReferenceGate> gate_reference(const CalibratedReference& calibrated,
                                     const InRunReference& in_run, double tolerance_pct);
Json reference_gate_to_json(const ReferenceGate& gate);
// One line: "reference kernel: steady (...)" or "reference kernel: UNSTEADY: reason".
std::string format_reference_gate(const ReferenceGate& gate);

// Both kernels' gates: steady only when the GEMM's is and the triad's, where there is one, is
// too. reason: each unsteady kernel's (each names its kernel: "... (GEMM, tolerance 5.0%) ..."),
// joined by "; ".
struct ReferenceGates {
  ReferenceGate gemm;
  std::optional<ReferenceGate> triad;  // nullopt: not gated on it (triad_note says why)
  std::string triad_note;
  bool steady = false;
  std::string reason;
};
ReferenceGates combine_reference_gates(const ReferenceGate& gemm,
                                       const std::optional<ReferenceGate>& triad,
                                       std::string triad_note = "");
// The GEMM's JSON (as before the triad, so that readers of "steady" and "deviation_pct" keep
// working) with "steady" and "reason" the combined ones, "gemm_steady", and "triad" (the
// triad's gate, or null with "triad_note").
Json reference_gates_to_json(const ReferenceGates& gates);
// One line, as format_reference_gate's, starting "reference kernel: steady" only when both are:
// "reference kernel: steady (GEMM ...; triad ...)" or "reference kernel: UNSTEADY: reason (...)".
std::string format_reference_gates(const ReferenceGates& gates);

}  // namespace trainplan::validation
