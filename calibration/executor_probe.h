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
#include "core/model_spec.h"
#include "core/plan.h"
#include "core/status.h"

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

// One span's sample again from its recorded figures (a profile's measurements.tasks: name,
// calls, time): the cost-model tasks of (model, plan, stage) that the name joins with '+', as
// task_samples_from_events finds them. A name that is not a compute task is an error naming it.
Result<TaskSample> task_sample_of_span(const ModelSpec& model, const Plan& plan,
                                       std::int64_t stage, const std::string& probe,
                                       const std::string& name, std::int64_t calls,
                                       double time_s);

// The CUDA calibration's probes (calibrate --backend cuda): data parallel over `world` ranks,
// one micro-batch per replica, bf16 with float32 gradients, and the name its samples carry,
// "MODEL, micro-batch B, R rank(s)".
Plan cuda_probe_plan(std::int64_t world, std::int64_t micro_batch);
std::string cuda_probe_name(const ModelSpec& model, const Plan& plan);

// The collectives of recorded steps over groups of 2+ ranks, per (task, message size): the
// time of one call on this rank (median over steps of the step's mean) as a CollectiveSample,
// message size and collective from the cost-model task of that name whose bytes sent match the
// event's. What a plan's collectives cost inside a step (cold buffers, ranks arriving apart),
// which a benchmark loop over one buffer does not show. An event that matches no task is an
// error naming it.
Result<std::vector<CollectiveSample>> collective_samples_from_events(
    const std::vector<std::vector<executor::TraceEvent>>& steps, const ModelSpec& model,
    const Plan& plan, std::int64_t stage, const std::string& probe);

// Rank skew. Per recorded step, this rank's compute (its compute-track spans) between the
// points where it waits for others: each interval ends where a collective or a receive begins
// (sends return at once and are not waits). The compute after the last wait is not an interval.
std::vector<std::vector<double>> compute_between_waits_s(
    const std::vector<std::vector<executor::TraceEvent>>& steps);

// One step of the ranks' compute between waits: the sum over intervals of the ranks' mean, and of
// the slowest rank's excess over that mean (the wait the step paid for stragglers).
struct SkewSample {
  std::string probe;
  std::int64_t ranks = 0;     // ranks that met at each wait
  double mean_s = 0;
  double excess_s = 0;
};
// The intervals of one step across ranks: the mean (sum over ranks / ranks) and the slowest.
SkewSample skew_of_step(const std::vector<double>& sum_over_ranks_s,
                        const std::vector<double>& slowest_s, std::int64_t ranks,
                        const std::string& probe);
// The spread core/cost/straggler.h assumes: the median over steps of excess / mean, over E[max of
// `ranks` standard normals] (so that the simulator's expected straggler gives back the measured
// excess). 0 without samples with 2+ ranks.
double rank_compute_spread(const std::vector<SkewSample>& samples);

// Per-rank compute speed. A rank's traced compute over recorded steps: the sum of its compute-
// track spans that are tasks (receives and collectives left out), in seconds.
double traced_compute_s(const std::vector<std::vector<executor::TraceEvent>>& steps);
// Each rank's compute time over the same tasks (index: rank) divided by the mean over the ranks:
// > 1 for a slower rank (HardwareProfile::rank_compute_time_factor). Empty with fewer than 2
// ranks or with a rank that traced no compute (nothing to compare).
std::vector<double> rank_compute_time_factors(const std::vector<double>& per_rank_s);
// One rank's compute between waits (compute_between_waits_s) at the mean rank's speed: each
// interval divided by the rank's time factor, so that the skew the samples then show is the
// random part alone (the systematic part is in the factors, and is not counted twice).
std::vector<std::vector<double>> at_mean_speed(std::vector<std::vector<double>> intervals,
                                               double factor);

struct ProbeSamples {
  std::vector<TaskSample> tasks;
  std::vector<CollectiveSample> collectives;
  // Per recorded step; empty with one rank. From each rank's compute between waits divided by
  // that rank's time factor in this probe (at_mean_speed).
  std::vector<SkewSample> skew;
  // Per rank (index: its rank in comm): its traced compute over the recorded steps
  // (traced_compute_s); empty with one rank.
  std::vector<double> rank_compute_s;
};
// The samples of `steps`, each rank's recorded steps of the plan on `comm` (any executor: the
// CPU trainer's or the CUDA trainer's trace). Every rank of `comm` calls it and gets the same
// figures, reduced over ranks through comm's control all-reduce:
// - a task's time is the mean over ranks (the simulator adds the wait for the slowest, above);
// - a collective's time per occurrence is the shortest over ranks: the last rank to arrive
//   waited for nobody, the others' time includes their wait for it, which is rank skew;
// - each rank's traced compute in all (rank_compute_s: its speed relative to the others);
// - the skew per step, from every rank's compute between waits at the mean rank's speed.
// The ranks must run the same tasks (every probe plan has one stage); a mismatch is an error.
Result<ProbeSamples> probe_samples_across_ranks(
    std::vector<std::vector<executor::TraceEvent>> steps, const ModelSpec& model,
    const Plan& plan, std::int64_t stage, executor::Comm& comm, const std::string& probe);

// Runs `warmup` then `steps` steps of the plan with the CPU executor on `comm` (which has the
// plan's world size) with random tokens, recording each measured step, and returns their
// samples (probe_samples_across_ranks).
Result<ProbeSamples> time_executor_tasks(const ModelSpec& model, const Plan& plan,
                                         executor::Comm& comm, int warmup, int steps);

}  // namespace trainplan::calibration
