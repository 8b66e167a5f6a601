// Every published run's throughput and memory errors at every point of the cross-validation's
// grid (validation/accuracy.h default_efficiency_grid, the constants set as
// cross_validate_published sets them): what the folds choose between. One JSON object per run
// and point on stdout; bench/scripts/cv_landscape.py reads them and prints each fold's best
// points and their margins.
//
// Run: build/bench/simulator/published_grid validation/corpus/published_runs.json [FILTER]
// Tested by bench/simulator/CMakeLists.txt (CTest published_grid_*).
#include <iostream>
#include <optional>
#include <string>

#include "bench/simulator/read_runs.h"
#include "simulator/simulator.h"
#include "validation/accuracy.h"
#include "validation/published_run.h"

int main(int argc, char** argv) {
  using namespace trainplan;
  if (argc < 2) {
    std::cerr << "usage: published_grid RUNS.json [FAMILY-OR-ID-FILTER]\n";
    return 2;
  }
  const std::optional<Json> json = bench::read_runs_file(argv[1], "published_grid");
  if (!json) return 2;
  const std::string filter = argc > 2 ? argv[2] : "";
  const int failed = bench::for_each_run(*json, "published_grid", filter, [](const PublishedRun& parsed) {
    for (const EfficiencyPoint& point : default_efficiency_grid()) {
      PublishedRun run = parsed;
      run.cluster.gpu.gemm_efficiency = in_step_gemm_efficiency(run.cluster.gpu, point.gemm_share);
      run.cluster.gpu.memory_efficiency = point.memory_efficiency;
      auto sim = simulate_step(run.model, run.cluster, run.plan, run.options);
      if (!sim.ok())
        return Status::Error("at GEMM share " + std::to_string(point.gemm_share) +
                             ", memory efficiency " + std::to_string(point.memory_efficiency) +
                             ": " + sim.status().message());
      const RunErrors e = run_errors(compare_published_run(run, sim->report));
      Json out{{"id", run.id},
               {"family", run.family.key()},
               {"gemm_share", point.gemm_share},
               {"memory_efficiency", point.memory_efficiency}};
      if (e.throughput) out["throughput"] = *e.throughput;
      if (e.memory) out["memory"] = *e.memory;
      std::cout << out.dump() << "\n";
    }
    return Status::Ok();
  });
  return failed == 0 ? 0 : 1;
}
