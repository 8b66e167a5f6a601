// The pipeline layouts that published runs measured: for each run of the corpus, its GPU
// generation and the schedule and depth of its pipeline, as the published-run reader maps it
// onto a plan. Filled by validation/coverage.h from the corpus compiled into the validation
// library; `plan` passes those of the cluster's GPU generation to the planner
// (PlannerOptions::measured), which among tied candidates prefers those whose schedule the
// corpus measured at that depth or deeper, and says when the pick's was not (planner.h
// TieBreak). The cross-validated error band (core/error_band.h) describes how the model errs on
// layouts like these; on a schedule no run measured, its error is not known.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/plan.h"

namespace trainplan {

struct MeasuredLayout {
  std::string id;              // the run's id in the corpus
  std::string gpu_generation;  // "A100", "H100", ...
  Schedule schedule = Schedule::k1F1B;
  std::int64_t pp = 1;
};

struct MeasuredLayouts {
  std::vector<MeasuredLayout> runs;
  std::string basis;  // which runs, e.g. "94 published runs on A100"
  bool known() const { return !runs.empty(); }
};

// Runs that measured `plan`'s pipeline: without pipeline parallelism (pp 1) every run with
// pp 1; otherwise runs with the same schedule at pp >= plan.pp (a shallower pipeline has a
// larger bubble share but fewer stages to keep in step: the corpus's deepest measurement bounds
// what it validates).
inline std::size_t measured_runs(const Plan& plan, const MeasuredLayouts& measured) {
  std::size_t n = 0;
  for (const MeasuredLayout& m : measured.runs) {
    if (plan.pp == 1 ? m.pp == 1 : m.schedule == plan.schedule && m.pp >= plan.pp) ++n;
  }
  return n;
}

}  // namespace trainplan
