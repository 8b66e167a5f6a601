// Times the executor's own code per cost-model task: runs a few training steps of a plan with
// the executor (executor/trainer.h) under its trace recorder (executor/trace.h), whose spans
// are named after the cost model's tasks, and keeps per span name its time per occurrence (the
// median over steps of the mean over the step's layers and micro-batches) with the tasks it
// stands for. What the fit (fit.h) then sees is what a step of that executor costs on this
// machine, in cache state and with its allocations and copies, not a stand-in kernel.
// Collectives and receives are not compute and are left out.
// Tested by tests/calibration/profile_test.cc.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "calibration/collective_bench.h"
#include "calibration/kernels.h"
#include "executor/comm.h"
#include "executor/trace.h"
#include "models/model_spec.h"
#include "models/plan.h"
#include "models/status.h"

namespace trainplan::calibration {

// The samples of recorded steps (each step's events): per compute-track span name, the median
// over steps of the mean over the step's occurrences (spans of one name summed per context and
// step) with the tasks it names: a cost-model task of (model, plan, stage), or several joined
// by '+'. An event on the
// compute track that is neither a task of that plan nor a receive is an error naming it (the
// executor and the cost model would have drifted apart).
Result<std::vector<TaskSample>> task_samples_from_events(
    const std::vector<std::vector<executor::TraceEvent>>& steps, const ModelSpec& model,
    const Plan& plan, std::int64_t stage, const std::string& probe);

// The collectives of recorded steps over groups of 2+ ranks, per (task, message size): the
// time of one call on this rank (median over steps of the step's mean) as a CollectiveSample,
// message size and collective from the cost-model task of that name whose bytes sent match the
// event's. What a plan's collectives cost inside a step (cold buffers, ranks arriving apart),
// which a benchmark loop over one buffer does not show. An event that matches no task is an
// error naming it.
Result<std::vector<CollectiveSample>> collective_samples_from_events(
    const std::vector<std::vector<executor::TraceEvent>>& steps, const ModelSpec& model,
    const Plan& plan, std::int64_t stage, const std::string& probe);

struct ProbeSamples {
  std::vector<TaskSample> tasks;
  std::vector<CollectiveSample> collectives;
};
// Runs `warmup` then `steps` steps of the plan on `comm` (which has the plan's world size) with
// random tokens, recording each measured step, and returns the samples of this rank.
Result<ProbeSamples> time_executor_tasks(const ModelSpec& model, const Plan& plan,
                                         executor::Comm& comm, int warmup, int steps);

}  // namespace trainplan::calibration
