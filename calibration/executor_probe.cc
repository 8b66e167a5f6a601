// Per-task times of the executor's step; see executor_probe.h.
#include "calibration/executor_probe.h"

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <tuple>

#include "executor/data.h"
#include "executor/cpu/cpu_stage.h"
#include "core/cost/cost_model.h"
#include "core/cost/straggler.h"

namespace trainplan::calibration {

namespace {

// Every task one rank of `stage` can run in a step: the layers' forward, backward and
// recompute, the embedding and head, the DP/ZeRO collectives of its parameter blocks at every
// point, and the optimizer step.
std::vector<Task> step_tasks(const ModelSpec& m, const Plan& p, std::int64_t stage) {
  std::vector<Task> all;
  for (auto* list : {&layer_forward_tasks, &layer_backward_tasks, &layer_recompute_tasks,
                     &embedding_forward_tasks, &embedding_backward_tasks, &head_forward_tasks,
                     &head_backward_tasks}) {
    const std::vector<Task> t = (*list)(m, p);
    all.insert(all.end(), t.begin(), t.end());
  }
  for (const ParamBlock& b : param_blocks_on_stage(m, p, stage))
    for (DpPoint point : {DpPoint::kBeforeForward, DpPoint::kBeforeRecompute,
                          DpPoint::kBeforeBackward, DpPoint::kAfterBackward,
                          DpPoint::kAfterLastBackward, DpPoint::kAfterOptimizer}) {
      const std::vector<Task> t = dp_block_tasks(p, b, point);
      all.insert(all.end(), t.begin(), t.end());
    }
  all.push_back(optimizer_task(m, p, stage));
  return all;
}

// The compute tasks by name. Forward and recompute tasks of a name have one shape; a name that
// appears twice (it does not today) keeps its first task.
std::map<std::string, Task, std::less<>> compute_tasks_by_name(const std::vector<Task>& tasks) {
  std::map<std::string, Task, std::less<>> out;
  for (const Task& t : tasks)
    if (t.kind != TaskKind::kComm) out.emplace(std::string(t.name), t);
  return out;
}

double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

// The time of one occurrence as a step sees it: per step, the mean over the occurrences in that
// step; then the median over steps. `execute` reports a step time as the median over steps of
// their sums, and a sum is its occurrences' mean times their count: the per-step mean keeps the
// frequent small delays every step pays (a right-skewed spread: the mean over a step's
// occurrences ran 2-5% above their median in this machine's traces), the median over steps
// drops a rare step-long disturbance as `execute` does.
double per_occurrence_time_s(const std::vector<std::vector<double>>& per_step) {
  std::vector<double> means;
  for (const std::vector<double>& step : per_step) {
    if (step.empty()) continue;
    double sum = 0;
    for (double t : step) sum += t;
    means.push_back(sum / static_cast<double>(step.size()));
  }
  return median(std::move(means));
}

// Where a rank waits for others: a collective over a group or a receive. A send returns at once.
bool is_wait(const executor::TraceEvent& e) {
  return e.group.has_value() && e.task.rfind("send", 0) != 0;
}

std::vector<const executor::TraceEvent*> by_begin(const std::vector<executor::TraceEvent>& step) {
  std::vector<const executor::TraceEvent*> out;
  out.reserve(step.size());
  for (const executor::TraceEvent& e : step) out.push_back(&e);
  std::stable_sort(out.begin(), out.end(), [](const auto* a, const auto* b) {
    return a->begin_ns < b->begin_ns;
  });
  return out;
}

// Element-wise over the ranks of `comm`: the sum (kSum) or the largest (kMax).
void reduce(executor::Comm& comm, std::vector<double>& v, executor::ReduceOp op) {
  if (!v.empty()) comm.control_all_reduce(v.data(), static_cast<std::int64_t>(v.size()), op);
}

// Whether every rank holds the same values (counts or hashes, exactly representable): one
// all-reduce of the largest of each value and of its negation (minus the smallest).
bool same_on_every_rank(executor::Comm& comm, const std::vector<double>& values) {
  std::vector<double> v = values;
  for (double x : values) v.push_back(-x);
  reduce(comm, v, executor::ReduceOp::kMax);
  for (std::size_t k = 0; k < values.size(); ++k)
    if (v[k] != -v[k + values.size()]) return false;
  return true;
}

}  // namespace

std::vector<std::vector<double>> compute_between_waits_s(
    const std::vector<std::vector<executor::TraceEvent>>& steps) {
  std::vector<std::vector<double>> out;
  for (const std::vector<executor::TraceEvent>& step : steps) {
    std::vector<double> intervals;
    double work_s = 0;
    for (const executor::TraceEvent* e : by_begin(step)) {
      if (is_wait(*e)) {
        intervals.push_back(work_s);
        work_s = 0;
      } else if (e->track == executor::TraceTrack::kCompute && !e->group.has_value()) {
        work_s += static_cast<double>(e->end_ns - e->begin_ns) * 1e-9;
      }
    }
    out.push_back(std::move(intervals));
  }
  return out;
}

SkewSample skew_of_step(const std::vector<double>& sum_over_ranks_s,
                        const std::vector<double>& slowest_s, std::int64_t ranks,
                        const std::string& probe) {
  SkewSample s;
  s.probe = probe;
  s.ranks = ranks;
  for (std::size_t k = 0; k < sum_over_ranks_s.size() && k < slowest_s.size(); ++k) {
    const double mean = sum_over_ranks_s[k] / static_cast<double>(ranks);
    s.mean_s += mean;
    s.excess_s += std::max(0.0, slowest_s[k] - mean);
  }
  return s;
}

double rank_compute_spread(const std::vector<SkewSample>& samples) {
  std::vector<double> spreads;
  for (const SkewSample& s : samples)
    if (s.ranks >= 2 && s.mean_s > 0)
      spreads.push_back(s.excess_s / s.mean_s /
                        expected_max_standard_normal(static_cast<double>(s.ranks)));
  return spreads.empty() ? 0.0 : median(std::move(spreads));
}

Result<std::vector<TaskSample>> task_samples_from_events(
    const std::vector<std::vector<executor::TraceEvent>>& steps, const ModelSpec& model,
    const Plan& plan, std::int64_t stage, const std::string& probe) {
  const auto tasks = compute_tasks_by_name(step_tasks(model, plan, stage));
  // One occurrence of a task is every span of its name in one context of one step (the
  // optimizer's span is cut where ZeRO's all-gathers run between its blocks): spans are summed by
  // (name, pass, micro-batch, layer) per step.
  std::map<std::string, std::vector<std::vector<double>>> times;  // per name, per step
  for (std::size_t k = 0; k < steps.size(); ++k) {
    const std::vector<executor::TraceEvent>& step = steps[k];
    std::map<std::tuple<std::string, char, std::int32_t, std::int32_t>, double> occurrence;
    for (const executor::TraceEvent& e : step) {
      if (e.track != executor::TraceTrack::kCompute || e.group.has_value()) continue;
      if (e.task.rfind("recv", 0) == 0) continue;
      occurrence[{e.task, e.context.pass, e.context.micro_batch, e.context.layer}] +=
          static_cast<double>(e.end_ns - e.begin_ns) * 1e-9;
    }
    for (const auto& [key, seconds] : occurrence) {
      auto& per_step = times[std::get<0>(key)];
      per_step.resize(steps.size());
      per_step[k].push_back(seconds);
    }
  }
  std::vector<TaskSample> out;
  for (auto& [name, t] : times) {
    TaskSample s;
    s.name = name;
    s.probe = probe;
    std::size_t from = 0;
    while (from <= name.size()) {
      const std::size_t plus = std::min(name.find('+', from), name.size());
      const std::string part = name.substr(from, plus - from);
      const auto it = tasks.find(part);
      if (it == tasks.end())
        return Status::Error("executor trace (" + probe + "): span '" + name + "' names '" +
                                 part + "', which is not a compute task of the cost model",
                             ExitCode::kInternal);
      s.tasks.push_back(it->second);
      from = plus + 1;
    }
    s.calls = 0;
    for (const std::vector<double>& step : t) s.calls += static_cast<std::int64_t>(step.size());
    s.time_s = per_occurrence_time_s(t);
    out.push_back(std::move(s));
  }
  return out;
}

Result<std::vector<CollectiveSample>> collective_samples_from_events(
    const std::vector<std::vector<executor::TraceEvent>>& steps, const ModelSpec& model,
    const Plan& plan, std::int64_t stage, const std::string& probe) {
  std::vector<Task> comm = step_tasks(model, plan, stage);
  std::erase_if(comm, [](const Task& t) { return t.kind != TaskKind::kComm; });
  std::map<std::pair<std::string, std::int64_t>, std::vector<std::vector<double>>> times;
  std::map<std::pair<std::string, std::int64_t>, const Task*> task_of;
  for (std::size_t k = 0; k < steps.size(); ++k) {
    for (const executor::TraceEvent& e : steps[k]) {
      // Pipeline sends and receives are no collective's sample (a send returns before
      // delivery, a receive's time is its wait).
      if (!e.group.has_value() || *e.group == CommGroup::kPp) continue;
      const auto key = std::make_pair(e.task, e.bytes_sent);
      if (!task_of.count(key)) {
        const auto it = std::find_if(comm.begin(), comm.end(), [&](const Task& t) {
          return t.name == e.task && t.bytes_sent() == e.bytes_sent && t.group == *e.group;
        });
        if (it == comm.end())
          return Status::Error("executor trace (" + probe + "): collective '" + e.task + "' of " +
                                   std::to_string(e.bytes_sent) +
                                   " bytes sent is not a collective of the cost model",
                               ExitCode::kInternal);
        task_of[key] = &*it;
      }
      auto& per_step = times[key];
      per_step.resize(steps.size());
      per_step[k].push_back(static_cast<double>(e.end_ns - e.begin_ns) * 1e-9);
    }
  }
  std::vector<CollectiveSample> out;
  for (auto& [key, t] : times) {
    const Task& task = *task_of.at(key);
    CollectiveSample c;
    c.collective = task.collective;
    c.group_size = task.group_size;
    c.bytes = task.message_bytes;
    c.count = task.message_bytes / 4;
    c.time_s = per_occurrence_time_s(t);
    out.push_back(c);
  }
  return out;
}

Result<ProbeSamples> time_executor_tasks(const ModelSpec& model, const Plan& plan,
                                         executor::Comm& comm, int warmup, int steps) {
  auto trainer = executor::make_cpu_trainer(model, plan, executor::TrainOptions{}, comm);
  if (!trainer.ok()) return trainer.status();
  const std::string probe = model.name + ", tp " + std::to_string(plan.tp) + ", micro-batch " +
                            std::to_string(plan.micro_batch_size);
  std::vector<std::vector<executor::TraceEvent>> steps_events;
  executor::TraceRecorder recorder;
  for (int k = 0; k < warmup + steps; ++k) {
    const std::vector<std::int32_t> batch = executor::random_batch(
        1, k, plan.global_batch_size, model.seq_len, model.vocab_size);
    auto r = (*trainer)->step(batch, k < warmup ? nullptr : &recorder);
    if (!r.ok()) return r.status();
    if (k >= warmup) steps_events.push_back(recorder.events());
  }
  return probe_samples_across_ranks(std::move(steps_events), model, plan, (*trainer)->stage(),
                                    comm, probe);
}

Result<ProbeSamples> probe_samples_across_ranks(
    std::vector<std::vector<executor::TraceEvent>> steps_events, const ModelSpec& model,
    const Plan& plan, std::int64_t stage, executor::Comm& comm, const std::string& probe) {
  const std::int64_t ranks = comm.world_size();
  // Every rank's collectives per occurrence, in order; the same on every rank of a one-stage
  // plan (pipeline sends and receives pair up across ranks instead and are left as they are).
  std::vector<executor::TraceEvent*> occurrences;
  for (std::vector<executor::TraceEvent>& step : steps_events)
    for (executor::TraceEvent& e : step)
      if (e.group.has_value() && *e.group != CommGroup::kPp) occurrences.push_back(&e);
  const std::vector<std::vector<double>> intervals = compute_between_waits_s(steps_events);
  std::vector<double> shape;  // what must agree across ranks before figures are combined
  shape.push_back(static_cast<double>(occurrences.size()));
  for (const std::vector<double>& step : intervals)
    shape.push_back(static_cast<double>(step.size()));
  std::size_t names = 0;
  for (const auto& step : steps_events)
    for (const executor::TraceEvent& e : step)
      names ^= std::hash<std::string>{}(e.task) + 0x9e3779b9 + (names << 6) + (names >> 2);
  shape.push_back(static_cast<double>(names % (std::size_t{1} << 52)));
  if (ranks > 1) {
    if (!same_on_every_rank(comm, shape))
      return Status::Error("executor probe (" + probe + "): the ranks recorded different tasks "
                           "or collectives, so their times cannot be combined",
                           ExitCode::kInternal);
    // A collective's own time: the shortest over ranks (the last to arrive waited for nobody).
    std::vector<double> negated;
    for (const executor::TraceEvent* e : occurrences)
      negated.push_back(-static_cast<double>(e->end_ns - e->begin_ns));
    reduce(comm, negated, executor::ReduceOp::kMax);
    for (std::size_t k = 0; k < occurrences.size(); ++k)
      occurrences[k]->end_ns = occurrences[k]->begin_ns + static_cast<std::int64_t>(-negated[k]);
  }
  ProbeSamples out;
  auto tasks = task_samples_from_events(steps_events, model, plan, stage, probe);
  if (!tasks.ok()) return tasks.status();
  out.tasks = std::move(*tasks);
  auto collectives = collective_samples_from_events(steps_events, model, plan, stage, probe);
  if (!collectives.ok()) return collectives.status();
  out.collectives = std::move(*collectives);
  if (ranks > 1) {
    // The same names on every rank (checked above), in the same (sorted) order.
    std::vector<double> times;
    for (const TaskSample& t : out.tasks) times.push_back(t.time_s);
    reduce(comm, times, executor::ReduceOp::kSum);
    for (std::size_t k = 0; k < out.tasks.size(); ++k)
      out.tasks[k].time_s = times[k] / static_cast<double>(ranks);
    // Every step's intervals in one vector (their counts agree across ranks, checked above):
    // one all-reduce for the sums and one for the slowest, not two per step.
    std::vector<double> sum;
    for (const std::vector<double>& step : intervals)
      sum.insert(sum.end(), step.begin(), step.end());
    std::vector<double> slowest = sum;
    reduce(comm, sum, executor::ReduceOp::kSum);
    reduce(comm, slowest, executor::ReduceOp::kMax);
    auto from = sum.begin(), slow = slowest.begin();
    for (const std::vector<double>& step : intervals) {
      const auto n = static_cast<std::ptrdiff_t>(step.size());
      out.skew.push_back(skew_of_step({from, from + n}, {slow, slow + n}, ranks, probe));
      from += n;
      slow += n;
    }
  }
  return out;
}

}  // namespace trainplan::calibration
