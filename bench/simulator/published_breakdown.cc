// Where a published run's predicted step goes: for each run of the corpus whose family or id
// contains a filter, the measured step time (0 when the source published another figure), the
// predicted one and, per pipeline stage, the compute stream's busy time, its idle time (bubble
// and exposed communication) and each group's communication (time in flight, exposed). One JSON
// object per run on stdout. The diagnosis of bench/results/published-2026-11-25-netscale/
// (collectives at scale) reads it.
//
// Run: build/bench/simulator/published_breakdown validation/corpus/published_runs.json [FILTER
//        [SLOWDOWN [LATENCY_X]]]
// SLOWDOWN divides every run's inter-node bandwidth and LATENCY_X multiplies its inter-node step
// latency: what-if knobs for the diagnosis (how slow would the network have to be for the
// prediction to meet the measurement?), not a model.
// Tested by bench/simulator/CMakeLists.txt (CTest published_breakdown_*: a family's runs print,
// an unreadable file and a bad knob are refused with a message and exit status 2; an entry that
// does not read or simulate is named on stderr and makes the exit status 1).
#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>

#include "core/json_util.h"
#include "simulator/simulator.h"
#include "bench/simulator/read_runs.h"
#include "validation/published_run.h"

namespace {

using trainplan::Json;

Json stage_json(const trainplan::RankStep& r) {
  Json comm = Json::object();
  for (const auto& [group, c] : r.comm)
    comm[group] = Json{{"bytes_sent", c.bytes_sent}, {"time_s", c.time_s},
                       {"exposed_s", c.exposed_s}};
  return Json{{"stage", r.stage},         {"compute_s", r.compute_s},
              {"optimizer_s", r.optimizer_s}, {"idle_s", r.idle_s},
              {"comm", comm}};
}

Json run_json(const trainplan::PublishedRun& run, const trainplan::SimResult& sim) {
  Json stages = Json::array();
  for (const auto& r : sim.report.ranks) stages.push_back(stage_json(r));
  const auto& c = run.cluster;
  return Json{{"id", run.id},
              {"family", run.family.key()},
              {"gpus", c.total_gpus()},
              {"nodes", c.num_nodes},
              {"plan", trainplan::plan_to_json(run.plan)},
              {"inter_node_GBps", c.inter_node_bytes_per_s / 1e9},
              {"inter_node_latency_us", c.inter_node_latency_s * 1e6},
              {"measured_step_s", run.measured.iteration_time_s.value_or(0.0)},
              {"predicted_step_s", sim.report.step_time_s},
              {"bubble_fraction", sim.report.bubble_fraction},
              {"stages", stages}};
}

// A knob's value: a finite number above 0, or nothing.
std::optional<double> positive(const char* text) {
  char* end = nullptr;
  const double v = std::strtod(text, &end);
  if (end == text || *end != '\0' || !(v > 0) || v > 1e6) return std::nullopt;
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: published_breakdown RUNS.json [FAMILY-OR-ID-FILTER]\n";
    return 2;
  }
  const std::optional<trainplan::Json> json =
      trainplan::bench::read_runs_file(argv[1], "published_breakdown");
  if (!json) return 2;
  const std::string filter = argc > 2 ? argv[2] : "";
  const std::optional<double> slowdown = argc > 3 ? positive(argv[3]) : 1.0;
  const std::optional<double> latency_x = argc > 4 ? positive(argv[4]) : 1.0;
  if (!slowdown || !latency_x) {
    std::cerr << "published_breakdown: SLOWDOWN and LATENCY_X take a number in (0, 1e6], got '"
              << argv[slowdown ? 4 : 3] << "'\n";
    return 2;
  }
  const int failed = trainplan::bench::for_each_run(
      *json, "published_breakdown", filter, [&](trainplan::PublishedRun& run) {
        run.cluster.inter_node_bytes_per_s /= *slowdown;
        run.cluster.inter_node_latency_s *= *latency_x;
        auto sim = trainplan::simulate_step(run.model, run.cluster, run.plan, run.options);
        if (!sim.ok()) return sim.status();
        std::cout << run_json(run, *sim).dump() << "\n";
        return trainplan::Status::Ok();
      });
  return failed == 0 ? 0 : 1;
}
