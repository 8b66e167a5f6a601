// One published run's layer, embedding and head tasks as the cost model prices them: for the
// corpus entry whose id is ID, each task of a layer's forward, recompute and backward and of the
// embedding and head passes with its time (task_time_s at the entry's device rates), bytes,
// FLOPs and kernel launches, one JSON object per task on stdout, then one per pass with the
// totals by kind. The diagnosis of bench/results/published-2026-11-25-compile/ (what
// torch.compile removes from torchtitan's eager rows) reads it.
//
// Run: build/bench/simulator/published_tasks validation/corpus/published_runs.json ID
// Tested by bench/simulator/CMakeLists.txt (CTest published_tasks_*: a run's tasks print; an
// unknown id and an unreadable file are refused with a message and exit status 2).
#include <iostream>
#include <string>
#include <vector>

#include "core/cost/compute_model.h"
#include "core/cost/cost_model.h"
#include "core/json_util.h"
#include "bench/simulator/read_runs.h"
#include "validation/published_run.h"

namespace {

using trainplan::Json;
using trainplan::Task;
using trainplan::TaskKind;

void print_pass(const char* pass, const std::vector<Task>& tasks,
                const trainplan::DeviceRates& rates) {
  double total = 0, gemm = 0, memory = 0, attention = 0, bytes = 0;
  std::int64_t launches = 0;
  for (const Task& t : tasks) {
    if (t.kind == TaskKind::kComm) continue;
    const double s = trainplan::task_time_s(t, rates);
    total += s;
    (t.kind == TaskKind::kGemm ? gemm : t.kind == TaskKind::kMemory ? memory : attention) += s;
    // A run's task (Task::repeat): its time, bytes, FLOPs and launches are every step's.
    bytes += t.bytes * t.repeat;
    launches += t.launches * t.repeat;
    Json line{{"pass", pass},        {"task", std::string(t.name)},
              {"time_s", s},         {"bytes", t.bytes * t.repeat},
              {"flops", t.executed_flops * t.repeat}, {"launches", t.launches * t.repeat},
              {"fp8", t.fp8}};
    if (t.repeat != 1) line["repeat"] = t.repeat;
    std::cout << line.dump() << "\n";
  }
  std::cout << Json{{"pass", pass},      {"total_s", total},   {"gemm_s", gemm},
                    {"memory_s", memory}, {"attention_s", attention}, {"bytes", bytes},
                    {"launches", launches}}
                   .dump()
            << "\n";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: published_tasks RUNS.json ID\n";
    return 2;
  }
  const std::optional<trainplan::Json> json =
      trainplan::bench::read_runs_file(argv[1], "published_tasks");
  if (!json) return 2;
  const std::string id = argv[2];
  bool found = false;
  const int failed = trainplan::bench::for_each_run(
      *json, "published_tasks", id, [&](const trainplan::PublishedRun& run) {
        if (run.id != id) return trainplan::Status::Ok();
        found = true;
        auto rates = trainplan::plan_rates(run.plan, run.cluster.gpu, run.options.hardware);
        if (!rates.ok()) return rates.status();
        const auto& m = run.model;
        const auto& p = run.plan;
        print_pass("layer_forward", trainplan::layer_forward_tasks(m, p), *rates);
        print_pass("layer_recompute", trainplan::layer_recompute_tasks(m, p), *rates);
        print_pass("layer_backward", trainplan::layer_backward_tasks(m, p), *rates);
        print_pass("embedding_forward", trainplan::embedding_forward_tasks(m, p), *rates);
        print_pass("embedding_backward", trainplan::embedding_backward_tasks(m, p), *rates);
        print_pass("head_forward", trainplan::head_forward_tasks(m, p), *rates);
        print_pass("head_backward", trainplan::head_backward_tasks(m, p), *rates);
        return trainplan::Status::Ok();
      });
  if (failed != 0) return 1;
  if (found) return 0;
  std::cerr << "published_tasks: no run with id '" << id << "' in " << argv[1] << "\n";
  return 2;
}
