// The figures of one training step, predicted (simulate, plan) or measured (execute): one
// schema for both, so `compare` can put them side by side. Schema "trainplan.step_report/1".
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/cost/cost_model.h"
#include "core/json_util.h"
#include "core/units.h"

namespace trainplan {

// Communication of one rank in one group during the step.
struct GroupComm {
  double bytes_sent = 0;  // payload bytes this rank sent (collectives.h convention)
  double time_s = 0;      // time its collectives were in flight
  double exposed_s = 0;   // part of time_s during which the rank's compute stream was idle
};

struct RankStep {
  std::int64_t rank = 0;
  std::int64_t stage = 0;            // pipeline stage
  double peak_memory_bytes = 0;      // device (or process) memory high-water mark
  MemoryBreakdown memory;            // at the peak (predicted; measured leaves parts at 0)
  double compute_s = 0;              // busy time of the compute stream
  double optimizer_s = 0;            // of which the optimizer step
  double idle_s = 0;                 // compute stream idle (bubble + exposed communication)
  std::map<std::string, GroupComm> comm;  // by group name: tp, pp, dp, ep
};

struct StepReport {
  std::string kind;                  // "predicted" or "measured"
  std::string source;                // what produced it ("simulate", "plan", "execute cpu", ...)
  Json model;                        // model_to_json of the model
  Json plan;                         // plan_to_json of the plan
  Json cluster;                      // cluster_to_json, or the executor's device description
  double step_time_s = 0;
  double tokens_per_s = 0;
  double model_tflops_per_gpu = 0;   // model FLOPs (no recompute) / step time / GPUs
  double hardware_tflops_per_gpu = 0;  // including recomputed forward
  double mfu = 0;                    // model_tflops_per_gpu / peak
  double bubble_fraction = 0;        // pipeline idle fraction (stage 0 or measured timeline)
  std::map<std::string, double> bytes_per_group;  // sum over all ranks, per step
  std::vector<RankStep> ranks;
  std::vector<double> loss;          // measured: loss per step
  std::vector<double> aux_loss;      // measured, MoE models: load-balancing loss per step
  std::vector<double> step_times_s;  // measured: time of every step (incl. warm-up)
  std::int64_t warmup_steps = 0;     // measured: steps excluded from step_time_s
};

Json step_report_to_json(const StepReport& report);

// The median of v (the mean of the middle two for an even count); 0 when empty.
double median(std::vector<double> v);
// A measured report's model, plan and step figures, as both executors write them: the model's
// and plan's JSON, every step's time and loss,
// step_time_s the median over the steps after `warmup`, and the rates derived from it over
// `gpus` ranks (mfu only with a peak above 0).
void set_measured_steps(StepReport& report, const ModelSpec& model, const Plan& plan,
                        std::vector<double> step_times_s, std::vector<double> losses,
                        std::int64_t warmup, std::int64_t gpus, double peak_flops_per_s);
// Adds one rank's communication in group g under the prediction's group name (report_group:
// the embedding group is pipeline traffic) and to bytes_per_group; a group with no bytes and
// no time is left out.
void add_group_comm(StepReport& report, RankStep& rank, CommGroup g, const GroupComm& comm);
// Time of [a, b) covered by `busy`, sorted by start and disjoint (a rank's compute stream): a
// collective's exposed_s is its duration less this.
TimeNs covered_ns(const std::vector<std::pair<TimeNs, TimeNs>>& busy, TimeNs a, TimeNs b);
Result<StepReport> step_report_from_json(const Json& json, std::string_view source);

}  // namespace trainplan
