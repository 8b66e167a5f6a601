// How well predictions hold on published runs: error statistics per family and overall, and the
// leave-one-family-out cross-validation that is the accuracy headline.
//
// A family is one source document x framework x GPU generation (PublishedRun::family). Runs of
// one family share whatever made them fast or slow (the framework's overheads, the cluster, the
// authors' FLOP convention), so a constant chosen by looking at a family's runs would flatter
// its prediction. Cross-validation therefore chooses the model's measured-efficiency constants
// (the GEMMs' share of each part's achievable matmul rate, and memory_efficiency; see
// core/cluster_spec.h) on every family but one, then predicts that one; the
// held-out predictions of every family together give the headline.
//
// Used by `simulate --published FILE --cross-validate`; tested by
// tests/validation/accuracy_test.cc and, as a ratchet on the corpus, validation_test.cc.
// No file I/O.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/cluster_spec.h"

namespace trainplan {

// Statistics of signed relative errors ((predicted - measured) / measured, or for throughput
// positive = predicted faster).
struct ErrorStats {
  std::size_t count = 0;
  double median_abs = 0;  // median of |error|
  double p90_abs = 0;     // 90th percentile of |error| (nearest rank)
  double mean_signed = 0; // mean of the signed errors: the bias
};
ErrorStats error_stats(const std::vector<double>& signed_errors);

// One run's errors at one setting of the constants; absent where the source measured nothing
// of that kind or the run could not be simulated.
struct RunErrors {
  std::optional<double> throughput;  // PublishedMetric::throughput_error() of the headline
  std::optional<double> memory;      // memory_gb's error
};

struct FamilyStats {
  std::string family;  // PublishedFamily::key()
  ErrorStats throughput, memory;
};

// The constants cross-validation chooses: a point of a small grid.
struct EfficiencyPoint {
  // The step's GEMMs as a share of the part's maximum achievable matmul rate
  // (in_step_gemm_efficiency, core/cluster_spec.h): one share for every GPU generation, so each
  // part's measured MAMF fraction sets how its GEMMs differ from another part's.
  double gemm_share = kPresetGemmShare;
  double memory_efficiency = GpuSpec{}.memory_efficiency;
};
// The grid searched: GEMM share 0.65..1.00 by 0.05 (GEMM efficiency from 0.50 of peak on a
// B200 to 0.87 on an A100), memory at kPresetMemoryEfficiency. The presets time memory-bound
// kernels at published rates (core/cost/memory_kernel_rates.h), so memory is no longer chosen;
// until the fifty-first pass (validation/corpus/NOTES.md) the grid also searched one memory
// efficiency for every kernel, 0.30..0.75, which the corpus could not separate from the share.
std::vector<EfficiencyPoint> default_efficiency_grid();

struct CrossValidation {
  struct Fold {
    std::string family;
    // Chosen on every other family: the best grid point, then on each axis the vertex of the
    // objective's parabola through it and its two grid neighbours (between grid points).
    EfficiencyPoint chosen;
    std::size_t runs = 0;          // the held-out family's runs
  };
  std::vector<Fold> folds;
  // Held-out errors: each run predicted with its own family left out of the choice.
  std::vector<FamilyStats> by_family;
  std::vector<RunErrors> held_out;  // run i's held-out errors, in the order of `families`
  ErrorStats throughput, memory;
  // For comparison only (not the headline): the point chosen over all runs at once, as a fold
  // chooses, and the errors at the presets' own constants.
  EfficiencyPoint fit_all;
  ErrorStats throughput_fit_all, throughput_presets, memory_presets;
  // The objective over all runs at every grid point, in the grid's order: how flat it is near
  // the chosen point says how fragile the folds' choice is (two points a hair apart flip folds).
  struct Objective {
    EfficiencyPoint point;
    // Each family weighs one. The folds choose by the mean; the median and p90 are reported.
    double weighted_mean_abs = 0, weighted_median_abs = 0, weighted_p90_abs = 0;
  };
  std::vector<Objective> surface;
};

// `families[i]` is run i's family; `evaluate(i, point)` predicts run i with the constants at
// `point` (nullopt errors where it cannot). The objective on the training runs weighs each
// family one (a run of a family of n runs weighs 1/n): the weighted mean |throughput error|;
// exact ties are broken by the distance from the presets (validation/corpus/NOTES.md,
// thirty-fifth pass: the weighted median and p90 used before moved every fold with a new row).
// From the best grid point the choice moves, on each axis where the grid has a point either side
// with the other constant equal, to the vertex of the parabola through the three (within half a
// step; forty-ninth pass: on the grid alone a flat objective flipped whole folds between two
// points); a fold's held-out runs, and the fit over all runs, are evaluated there.
// `evaluate` is called once per run and grid point (plus once at `presets`), in any order, and
// may be called from several threads at once when `threads` > 1.
CrossValidation cross_validate(const std::vector<std::string>& families,
                               const std::vector<EfficiencyPoint>& grid,
                               const EfficiencyPoint& presets,
                               const std::function<RunErrors(std::size_t, const EfficiencyPoint&)>&
                                   evaluate,
                               unsigned threads = 1);

// Per family (in order of first appearance) and overall.
std::vector<FamilyStats> stats_by_family(const std::vector<std::string>& families,
                                         const std::vector<RunErrors>& errors);

}  // namespace trainplan
