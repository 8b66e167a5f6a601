// Per-task times of the executor's step; see executor_probe.h.
#include "calibration/executor_probe.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <tuple>

#include "executor/data.h"
#include "executor/cpu/cpu_stage.h"
#include "core/cost/cost_model.h"
#include "core/cost/step_tasks.h"
#include "core/cost/straggler.h"

namespace trainplan::calibration {

namespace {

// Every task one rank of `stage` can run in a step (core/cost/step_tasks.h): each layer kind's
// forward, backward and recompute (an MoE model with dense_layers runs both kinds: "fc1" is a
// dense layer's, "router" and "expert_fc1" an expert layer's), the embedding and head, the DP/ZeRO
// collectives of its parameter blocks at every point, and the optimizer step.
std::vector<Task> all_step_tasks(const ModelSpec& m, const Plan& p, std::int64_t stage) {
  const StepTasks st = step_tasks(m, p, stage);
  std::vector<Task> all;
  // Runs of steps (Task::repeat) written out: the executor calls and times each step.
  auto add = [&all](const std::vector<Task>& t) {
    for (Task& one : expand_repeats(t)) all.push_back(std::move(one));
  };
  for (const LayerTasks& layer : st.micro_batch.layer) {
    add(layer.forward);
    add(layer.backward);
    add(layer.recompute);
  }
  for (const auto* list : {&st.micro_batch.embedding_forward, &st.micro_batch.embedding_backward,
                           &st.micro_batch.head_forward, &st.micro_batch.head_backward})
    add(*list);
  for (std::size_t b = 0; b < st.blocks.size(); ++b)
    for (std::size_t point = 0; point < kDpPointCount; ++point)
      add(st.dp(b, static_cast<DpPoint>(point)));
  all.push_back(st.optimizer);
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

// A span's sample: the tasks its name joins with '+' (each a compute task of `tasks`), its
// occurrences and its time per occurrence.
Result<TaskSample> span_sample(const std::map<std::string, Task, std::less<>>& tasks,
                               const std::string& probe, const std::string& name,
                               std::int64_t calls, double time_s) {
  TaskSample s;
  s.name = name;
  s.probe = probe;
  std::size_t from = 0;
  while (from <= name.size()) {
    const std::size_t plus = std::min(name.find('+', from), name.size());
    const std::string part = name.substr(from, plus - from);
    const auto it = tasks.find(part);
    if (it == tasks.end())
      return Status::Error("executor trace (" + probe + "): span '" + name + "' names '" + part +
                               "', which is not a compute task of the cost model",
                           ExitCode::kInternal);
    s.tasks.push_back(it->second);
    from = plus + 1;
  }
  s.calls = calls;
  s.time_s = time_s;
  return s;
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

double traced_compute_s(const std::vector<std::vector<executor::TraceEvent>>& steps) {
  double total = 0;
  for (const std::vector<executor::TraceEvent>& step : steps)
    for (const executor::TraceEvent& e : step)
      if (e.track == executor::TraceTrack::kCompute && !e.group.has_value() &&
          e.task.rfind("recv", 0) != 0)
        total += static_cast<double>(e.end_ns - e.begin_ns) * 1e-9;
  return total;
}

std::vector<double> rank_compute_time_factors(const std::vector<double>& per_rank_s) {
  if (per_rank_s.size() < 2) return {};
  double sum = 0;
  for (double t : per_rank_s) {
    if (!(t > 0) || !std::isfinite(t)) return {};
    sum += t;
  }
  const double mean = sum / static_cast<double>(per_rank_s.size());
  std::vector<double> out;
  for (double t : per_rank_s) out.push_back(t / mean);
  return out;
}

std::vector<std::vector<double>> at_mean_speed(std::vector<std::vector<double>> intervals,
                                               double factor) {
  if (factor > 0)
    for (std::vector<double>& step : intervals)
      for (double& t : step) t /= factor;
  return intervals;
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
  const auto tasks = compute_tasks_by_name(all_step_tasks(model, plan, stage));
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
    std::int64_t calls = 0;
    for (const std::vector<double>& step : t) calls += static_cast<std::int64_t>(step.size());
    auto s = span_sample(tasks, probe, name, calls, per_occurrence_time_s(t));
    if (!s.ok()) return s.status();
    out.push_back(std::move(*s));
  }
  return out;
}

Result<TaskSample> task_sample_of_span(const ModelSpec& model, const Plan& plan,
                                       std::int64_t stage, const std::string& probe,
                                       const std::string& name, std::int64_t calls,
                                       double time_s) {
  return span_sample(compute_tasks_by_name(all_step_tasks(model, plan, stage)), probe, name,
                     calls, time_s);
}

Plan cuda_probe_plan(std::int64_t world, std::int64_t micro_batch) {
  Plan p;
  p.dp = world;
  p.micro_batch_size = micro_batch;
  p.global_batch_size = micro_batch * world;
  p.precision = Precision::kBf16;
  p.grad_precision = GradPrecision::kFp32;
  p.schedule = Schedule::k1F1B;
  return p;
}

std::string cuda_probe_name(const ModelSpec& model, const Plan& plan) {
  return model.name + ", micro-batch " + std::to_string(plan.micro_batch_size) + ", " +
         std::to_string(plan.dp) + " rank(s)";
}

namespace {

// The cost-model collective a traced call carries out, or nothing. Three ways to match:
// - an expert all-to-all (ep group) sends as many rows as the router sent to each expert (a
//   combine returns what this rank's experts received), not the cost model's balanced T*k: it is
//   matched by name, at the task's size, its routing imbalance left in its time;
// - any other call, by name, group and bytes sent;
// - a call that does several of the step's tasks of one name at once (the trainer's one
//   tp_sp_norm_grad_all_reduce for all of a stage's norms, where the cost model lists one per
//   block: the same bytes), when its bytes are theirs summed: one task of the summed size.
std::optional<Task> cost_model_collective(const std::vector<Task>& comm,
                                          const executor::TraceEvent& e) {
  const bool routed = *e.group == CommGroup::kEp;
  std::optional<Task> fused;
  std::int64_t fused_sent = 0;
  for (const Task& t : comm) {
    if (t.name != e.task || t.group != *e.group) continue;
    if (routed || t.bytes_sent() == e.bytes_sent) return t;
    if (!fused) {
      fused = t;
      fused->message_bytes = 0;
    }
    fused->message_bytes += t.message_bytes;
    fused_sent += t.bytes_sent();
  }
  if (fused && fused_sent == e.bytes_sent) return fused;
  return std::nullopt;
}

}  // namespace

Result<std::vector<CollectiveSample>> collective_samples_from_events(
    const std::vector<std::vector<executor::TraceEvent>>& steps, const ModelSpec& model,
    const Plan& plan, std::int64_t stage, const std::string& probe) {
  std::vector<Task> comm = all_step_tasks(model, plan, stage);
  std::erase_if(comm, [](const Task& t) { return t.kind != TaskKind::kComm; });
  std::map<std::pair<std::string, std::int64_t>, std::vector<std::vector<double>>> times;
  std::map<std::pair<std::string, std::int64_t>, Task> task_of;
  for (std::size_t k = 0; k < steps.size(); ++k) {
    for (const executor::TraceEvent& e : steps[k]) {
      // Pipeline sends and receives are no collective's sample (a send returns before
      // delivery, a receive's time is its wait).
      if (!e.group.has_value() || *e.group == CommGroup::kPp) continue;
      const bool routed = *e.group == CommGroup::kEp;  // one sample whatever the size
      const auto key = std::make_pair(e.task, routed ? std::int64_t{-1} : e.bytes_sent);
      if (!task_of.count(key)) {
        std::optional<Task> task = cost_model_collective(comm, e);
        if (!task)
          return Status::Error("executor trace (" + probe + "): collective '" + e.task + "' of " +
                                   std::to_string(e.bytes_sent) +
                                   " bytes sent is not a collective of the cost model",
                               ExitCode::kInternal);
        task_of.emplace(key, *task);
      }
      auto& per_step = times[key];
      per_step.resize(steps.size());
      per_step[k].push_back(static_cast<double>(e.end_ns - e.begin_ns) * 1e-9);
    }
  }
  std::vector<CollectiveSample> out;
  for (auto& [key, t] : times) {
    const Task& task = task_of.at(key);
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
  const std::string probe = model.name + ", tp " + std::to_string(plan.tp) +
                            (plan.ep > 1 ? ", ep " + std::to_string(plan.ep) : "") +
                            ", micro-batch " + std::to_string(plan.micro_batch_size) +
                            (plan.attention == AttentionImpl::kFused ? ", fused attention" : "");
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
  std::vector<std::vector<double>> intervals = compute_between_waits_s(steps_events);
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
    // Each rank's traced compute, gathered (each rank fills its own entry, then a sum): its
    // speed relative to the others. Its compute between waits is then taken at the mean
    // rank's speed, so that the skew below is the random part alone.
    out.rank_compute_s.assign(static_cast<std::size_t>(ranks), 0.0);
    out.rank_compute_s[static_cast<std::size_t>(comm.world_rank())] = traced_compute_s(steps_events);
    reduce(comm, out.rank_compute_s, executor::ReduceOp::kSum);
    const std::vector<double> factors = rank_compute_time_factors(out.rank_compute_s);
    if (!factors.empty())
      intervals = at_mean_speed(std::move(intervals),
                                factors[static_cast<std::size_t>(comm.world_rank())]);
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
