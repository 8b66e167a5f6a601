// Refinement by the event simulator; see refine.h.
#include "planner/refine.h"

namespace trainplan {

Estimate estimate_from_simulation(const SimResult& sim, Estimate e) {
  const StepReport& r = sim.report;
  e.step_time_s = r.step_time_s;
  e.tokens_per_s = r.tokens_per_s;
  e.model_tflops_per_gpu = r.model_tflops_per_gpu;
  e.hardware_tflops_per_gpu = r.hardware_tflops_per_gpu;
  e.mfu = r.mfu;
  e.bubble_fraction = r.bubble_fraction;
  double peak = 0;
  for (const RankStep& rank : r.ranks) {
    if (rank.peak_memory_bytes > peak) {
      peak = rank.peak_memory_bytes;
      e.peak_stage = rank.stage;
      e.peak_memory = rank.memory;
    }
  }
  if (peak > 0) e.peak_memory_bytes = peak;
  return e;
}

RefineFn simulator_refine(const ModelSpec& model, const ClusterSpec& cluster, SimOptions options) {
  return [model, cluster, options](const Plan& p) -> Result<Estimate> {
    auto sim = simulate_step(model, cluster, p, options);
    if (!sim.ok()) return sim.status();
    Estimator est(model, cluster, options.hardware);
    return estimate_from_simulation(*sim, est.estimate(p));
  };
}

}  // namespace trainplan
