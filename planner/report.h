// The planner's report: a table a person can act on, and the same content as JSON
// (schema "trainplan.plan_report/1"). Formatting only; printing happens in tools/plan.cc.
#pragma once

#include <optional>
#include <string>
#include <utility>

#include "core/json_util.h"
#include <vector>

#include "planner/planner.h"
#include "planner/reference.h"

namespace trainplan {

struct ReportContext {
  const ModelSpec* model = nullptr;
  const ClusterSpec* cluster = nullptr;
  const PlannerOptions* options = nullptr;
  std::optional<double> run_tokens;  // --tokens: whole-run estimate
  // Layouts shown beside the pick in the same table (the usual layout, --baseline), costed by
  // planner/reference.h.
  std::vector<ReferenceLayout> references;
  // When nothing fits: what fills memory in the least-memory configuration.
  std::optional<MemoryCause> memory_cause;
  // How the batch was chosen ("default: ..."), said beside it.
  std::string batch_source;
};

// Warnings about the pick a user should read (a sequence split over GPUs only because the batch
// is small), one sentence each.
std::vector<std::string> plan_warnings(const PlanResult& result);

// The default batch's rule, said beside it in the report (`plan` without --global-batch or
// --tokens-per-step; planner.h default_global_batch).
std::string default_batch_source(const ModelSpec& model);
// What the report shows beside the pick without a --baseline: the usual layout when something
// fits, else what fills memory in the least-memory configuration.
void add_usual_references(ReportContext& ctx, const PlanResult& result, const RefineFn& refine);

std::string format_plan_report(const PlanResult& result, const ReportContext& ctx);
Json plan_report_to_json(const PlanResult& result, const ReportContext& ctx);
// Why the winner beats the runner-up, in one or two sentences.
std::string explain_choice(const Candidate& winner, const Candidate& runner_up);
// The MFU a run predicted at `predicted_mfu` is expected to measure, as the error band's 10th
// and 90th percentiles of measured / predicted step time give it: predicted / (1 + high) to
// predicted / (1 + low).
std::pair<double, double> measured_mfu_band(double predicted_mfu, const ErrorBand& band);
// One sentence on how many published runs measured `plan`'s pipeline (core/measured_layouts.h),
// and, when none did, that its figures are an extrapolation; empty without pipeline
// parallelism or without layouts.
std::string measured_pipeline_note(const Plan& plan, const MeasuredLayouts& measured);
// The plan that `--emit-plan` writes: the recommendation (offload plan when nothing fits).
const Candidate* recommended(const PlanResult& result);

}  // namespace trainplan
