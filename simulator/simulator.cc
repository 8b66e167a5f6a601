// simulate_step: checks the inputs, builds the step's program (program.cc), plays it (engine.cc)
// and turns the timeline into a StepReport (timeline.cc). See simulator.h.
#include "simulator/simulator.h"

#include <algorithm>
#include <map>

#include "models/rank_layout.h"
#include "models/units.h"
#include "simulator/engine.h"
#include "simulator/program.h"
#include "simulator/timeline.h"
#include "simulator/topology.h"

namespace trainplan {

namespace {

Status check_inputs(const ModelSpec& model, const ClusterSpec& cluster, const Plan& plan,
                    const DeviceRates& rates, const SimOptions& options) {
  TRAINPLAN_RETURN_IF_ERROR(validate_plan(plan));
  TRAINPLAN_RETURN_IF_ERROR(check_plan_fits_model(plan, model));
  TRAINPLAN_RETURN_IF_ERROR(check_plan_world_size(plan, cluster.total_gpus()));
  if (!options.uniform_compute && (rates.peak_flops_per_s <= 0 || rates.hbm_bytes_per_s <= 0))
    return Status::Error("device '" + cluster.gpu.name +
                         "' has no peak FLOP/s or memory bandwidth for precision " +
                         std::string(to_string(plan.precision)));
  if (!options.free_communication) {
    const bool multi_node = cluster.num_nodes > 1;
    if (cluster.intra_node_bytes_per_s <= 0 || (multi_node && cluster.inter_node_bytes_per_s <= 0))
      return Status::Error("cluster '" + cluster.name + "' has no link bandwidth");
    if (plan.offload == Offload::kOptimizer && cluster.pcie_bytes_per_s <= 0)
      return Status::Error("offload needs the cluster's PCIe bandwidth (pcie_GBps)");
  }
  // The topology graph holds six links per GPU; beyond this it would need gigabytes.
  constexpr std::int64_t kMaxSimulatedGpus = std::int64_t{1} << 18;
  if (cluster.total_gpus() > kMaxSimulatedGpus)
    return Status::Error("the simulator handles clusters of up to " +
                         std::to_string(kMaxSimulatedGpus) + " GPUs; this one has " +
                         std::to_string(cluster.total_gpus()));
  // The program indexes ops with 32-bit integers; refuse what would not fit.
  const double per_stage_layers =
      static_cast<double>(model.num_layers) / static_cast<double>(plan.pp);
  const double ranks = options.all_ranks ? static_cast<double>(plan.world_size())
                                         : static_cast<double>(plan.pp);
  const double ops = ranks * static_cast<double>(plan.num_micro_batches()) *
                     (per_stage_layers + 2.0) * 120.0;
  if (ops > 1.5e9)
    return Status::Error("the simulated program would need about " +
                         std::to_string(static_cast<long long>(ops)) +
                         " operations; use fewer micro-batches or symmetric simulation");
  return Status::Ok();
}

}  // namespace

Result<SimResult> simulate_step(const ModelSpec& model, const ClusterSpec& cluster_in,
                                const Plan& plan, const SimOptions& options) {
  ClusterSpec cluster = cluster_in;
  if (options.hardware) apply_profile_links(*options.hardware, cluster);
  const DeviceRates rates =
      options.hardware ? options.hardware->rates : device_rates(cluster.gpu, plan.precision);
  TRAINPLAN_RETURN_IF_ERROR(check_inputs(model, cluster, plan, rates, options));
  auto layout = RankLayout::make(plan, options.rank_order);
  if (!layout.ok()) return layout.status();

  const sim::Topology topology(cluster);
  sim::Program program(topology.num_links());
  sim::build_program(model, cluster, plan, options, rates, *layout, topology, program);
  SimResult result;
  result.events = program.engine.run();
  result.ops = program.engine.num_ops();
  result.simulated_ranks = static_cast<std::int64_t>(program.slots.size());

  TimeNs end = 0;
  for (const sim::Op& op : program.engine.ops()) end = std::max(end, op.end);
  const TimeNs pipe_end = sim::pipeline_end(program);
  const std::vector<sim::SlotTimeline> timelines = sim::slot_timelines(program, end);

  StepReport& r = result.report;
  r.kind = "predicted";
  r.source = "simulate";
  r.model = model_to_json(model);
  r.plan = plan_to_json(plan);
  r.cluster = cluster_to_json(cluster);
  const double step_s = static_cast<double>(end) / kNsPerS;
  const double gpus = static_cast<double>(plan.world_size());
  r.step_time_s = step_s;
  result.pipeline_span_s = static_cast<double>(pipe_end) / kNsPerS;
  if (step_s > 0) {
    const StepFlops flops = step_flops(model, plan);
    r.tokens_per_s =
        static_cast<double>(plan.global_batch_size * model.seq_len) / step_s;
    r.model_tflops_per_gpu = flops.model / step_s / gpus / kTFLOP;
    r.hardware_tflops_per_gpu = flops.hardware / step_s / gpus / kTFLOP;
    const double peak = cluster.gpu.peak_flops_per_s(plan.precision);
    if (peak > 0) r.mfu = flops.model / (step_s * gpus * peak);
  }
  // Bubble: the compute stream's idle time during the pipeline phase that is not spent
  // waiting for its own blocking collectives, averaged over stages (each stage once, so that
  // symmetric and full simulation average the same numbers in the same order).
  if (pipe_end > 0) {
    // In integer nanoseconds, divided once, so that closed forms compare exactly.
    std::vector<bool> seen(static_cast<std::size_t>(plan.pp), false);
    TimeNs idle = 0;
    for (const sim::SlotTimeline& t : timelines) {
      const auto stage = static_cast<std::size_t>(t.step.stage);
      if (seen[stage]) continue;
      seen[stage] = true;
      idle += std::max<TimeNs>(0, pipe_end - t.pipeline_busy_ns - t.blocking_exposed_ns);
    }
    r.bubble_fraction = static_cast<double>(idle) /
                        (static_cast<double>(pipe_end) * static_cast<double>(plan.pp));
  }
  for (const char* g : {"tp", "pp", "dp", "ep"}) r.bytes_per_group[g] = 0;
  for (const sim::SlotTimeline& t : timelines) {
    r.ranks.push_back(t.step);
    if (options.hardware) {
      // What the process holds before the model (measured by calibrate) counts in its peak.
      r.ranks.back().memory.runtime_bytes = options.hardware->baseline_memory_bytes;
      r.ranks.back().peak_memory_bytes += options.hardware->baseline_memory_bytes;
    }
    result.peak_in_flight.push_back(t.peak_in_flight);
    for (const auto& [name, g] : t.step.comm)
      r.bytes_per_group[name] += g.bytes_sent * static_cast<double>(program.replicas_per_slot);
  }
  if (options.collect_trace) result.trace_json = sim::chrome_trace(program, timelines);
  return result;
}

}  // namespace trainplan
