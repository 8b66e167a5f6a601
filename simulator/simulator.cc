// simulate_step: checks the inputs, builds the step's program (program.cc), plays it (engine.cc)
// and turns the timeline into a StepReport (timeline.cc). See simulator.h.
#include "simulator/simulator.h"

#include <algorithm>
#include <cstdio>
#include <map>

#include "core/rank_layout.h"
#include "core/units.h"
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
    if (plan.offload != Offload::kNone && cluster.pcie_bytes_per_s <= 0)
      return Status::Error("offload needs the cluster's PCIe bandwidth (pcie_GBps)");
    if (plan.offload_device == OffloadDevice::kNvme && cluster.nvme_bytes_per_s_per_node <= 0)
      return Status::Error("offload_device nvme needs the cluster's NVMe bandwidth "
                           "(nvme_GBps_per_node), cluster '" + cluster.name + "' has none");
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

namespace {

// x(M) on the line through (M1, x1) and (M2, x2).
double extrapolate(double x1, double x2, double m1, double m2, double m) {
  return x1 + (x2 - x1) * (m - m1) / (m2 - m1);
}

Result<SimResult> simulate_extrapolated(const ModelSpec& model, const ClusterSpec& cluster,
                                        const Plan& plan, const SimOptions& options) {
  const std::int64_t M = plan.num_micro_batches();
  const std::int64_t m1 = std::max<std::int64_t>(2 * plan.pp, 2), m2 = m1 + plan.pp;
  SimOptions exact = options;
  exact.extrapolate_above_micro_batches = 0;
  auto short_plan = [&](std::int64_t m) {
    Plan p = plan;
    p.global_batch_size = m * p.micro_batch_size * p.dp;
    return p;
  };
  auto a = simulate_step(model, cluster, short_plan(m1), exact);
  if (!a.ok()) return a;
  auto b = simulate_step(model, cluster, short_plan(m2), exact);
  if (!b.ok()) return b;
  const double x1 = static_cast<double>(m1), x2 = static_cast<double>(m2),
               xm = static_cast<double>(M);
  auto lin = [&](double v1, double v2) { return extrapolate(v1, v2, x1, x2, xm); };
  // Peaks grow with M only where every forward runs before the backwards (gpipe); the other
  // schedules bound what is in flight (zb-v's greedy caps it at 2pp chunks, which it may reach
  // only at the longer run): their peak is the larger of the two runs', not a line through them.
  const bool peaks_grow = plan.schedule == Schedule::kGpipe || plan.schedule == Schedule::kNaive;
  auto peak_of = [&](double v1, double v2) { return peaks_grow ? lin(v1, v2) : std::max(v1, v2); };
  SimResult r = std::move(*b);
  const SimResult& s1 = *a;
  StepReport& rep = r.report;
  const StepReport& r1 = s1.report;
  rep.plan = plan_to_json(plan);
  const double idle1 = r1.bubble_fraction * s1.pipeline_span_s,
               idle2 = rep.bubble_fraction * r.pipeline_span_s;
  rep.step_time_s = lin(r1.step_time_s, rep.step_time_s);
  r.pipeline_span_s = lin(s1.pipeline_span_s, r.pipeline_span_s);
  rep.bubble_fraction = r.pipeline_span_s > 0 ? lin(idle1, idle2) / r.pipeline_span_s : 0.0;
  for (auto& [g, bytes] : rep.bytes_per_group) bytes = lin(r1.bytes_per_group.at(g), bytes);
  for (std::size_t i = 0; i < rep.ranks.size(); ++i) {
    RankStep& k = rep.ranks[i];
    const RankStep& k1 = r1.ranks[i];
    k.compute_s = lin(k1.compute_s, k.compute_s);
    k.optimizer_s = lin(k1.optimizer_s, k.optimizer_s);
    k.idle_s = lin(k1.idle_s, k.idle_s);
    k.peak_memory_bytes = peak_of(k1.peak_memory_bytes, k.peak_memory_bytes);
    k.memory.activations_bytes = peak_of(k1.memory.activations_bytes, k.memory.activations_bytes);
    k.memory.buffers_bytes = peak_of(k1.memory.buffers_bytes, k.memory.buffers_bytes);
    for (auto& [g, c] : k.comm) {
      const GroupComm& c1 = k1.comm.at(g);
      c.bytes_sent = lin(c1.bytes_sent, c.bytes_sent);
      c.time_s = lin(c1.time_s, c.time_s);
      c.exposed_s = lin(c1.exposed_s, c.exposed_s);
    }
    r.peak_in_flight[i] = std::llround(peak_of(static_cast<double>(s1.peak_in_flight[i]),
                                               static_cast<double>(r.peak_in_flight[i])));
  }
  const StepFlops flops = step_flops(model, plan);
  const double gpus = static_cast<double>(plan.world_size());
  rep.tokens_per_s = static_cast<double>(plan.global_batch_size * model.seq_len) / rep.step_time_s;
  rep.model_tflops_per_gpu = flops.model / rep.step_time_s / gpus / kTFLOP;
  rep.hardware_tflops_per_gpu = flops.hardware / rep.step_time_s / gpus / kTFLOP;
  const double peak = cluster.gpu.peak_flops_per_s(plan.precision);
  if (peak > 0) rep.mfu = flops.model / (rep.step_time_s * gpus * peak);
  r.events += s1.events;
  r.extrapolated = true;
  return r;
}

}  // namespace

double estimate_trace_bytes(std::int64_t ops, std::int64_t memory_changes) {
  // Averages over the zoo's traces: a complete event with its name and args is about 190
  // bytes, a memory counter sample about 150 (bench/results/trace_size).
  return 190.0 * static_cast<double>(ops) + 150.0 * static_cast<double>(memory_changes);
}

bool comm_contention_applies(const SimOptions& options, const GpuSpec& gpu) {
  return options.comm_contention && !options.hardware && !options.uniform_compute &&
         gpu.sm_count > 0;
}

Result<SimResult> simulate_step(const ModelSpec& model, const ClusterSpec& cluster_in,
                                const Plan& plan, const SimOptions& options) {
  if (options.hardware && !options.hardware->rank_compute_time_factor.empty()) {
    // Per-rank speeds are per rank of the calibration's world: another world size is an error
    // (recalibrate on the plan's ranks, or drop the field to play every rank at the mean).
    const auto n = static_cast<std::int64_t>(options.hardware->rank_compute_time_factor.size());
    if (n != plan.world_size())
      return Status::Error(
          "the hardware profile's rank_compute_time_factor has " + std::to_string(n) +
              " entries (one per rank it was calibrated on), the plan has " +
              std::to_string(plan.world_size()) +
              " ranks: calibrate on the plan's ranks, or remove the field to play every rank at "
              "the mean speed",
          ExitCode::kInvalidInput);
    // Ranks at different speeds are not symmetric: every rank is played, so that the slowest
    // rank's compute sets the step through the collectives and pipeline waits.
    if (!options.all_ranks && has_uneven_rank_speeds(*options.hardware)) {
      SimOptions every_rank = options;
      every_rank.all_ranks = true;
      return simulate_step(model, cluster_in, plan, every_rank);
    }
  }
  if (options.extrapolate_above_micro_batches > 0 && validate_plan(plan).ok() &&
      plan.num_micro_batches() > options.extrapolate_above_micro_batches &&
      plan.num_micro_batches() > 3 * plan.pp + 2 && !options.collect_trace) {
    TRAINPLAN_RETURN_IF_ERROR(check_plan_fits_model(plan, model));
    TRAINPLAN_RETURN_IF_ERROR(check_plan_world_size(plan, cluster_in.total_gpus()));
    auto extrapolated = simulate_extrapolated(model, cluster_in, plan, options);
    // The line through two short runs holds where both play the same order per micro-batch.
    // zb-v's order is chosen per run (the send-aware one where it replays shorter), so the two
    // short runs can play different orders and the line can fall below the work itself (a
    // negative bubble: Mixtral 8x7B on 4 H100s, 69 s extrapolated against 88 s exact).
    // Such a line is not used: the plan is simulated in full.
    if (!extrapolated.ok() || extrapolated->report.bubble_fraction >= 0) return extrapolated;
    SimOptions exact = options;
    exact.extrapolate_above_micro_batches = 0;
    return simulate_step(model, cluster_in, plan, exact);
  }
  ClusterSpec cluster = cluster_in;
  if (options.hardware) apply_profile_links(*options.hardware, cluster);
  auto plan_device = plan_rates(plan, cluster.gpu, options.hardware);
  if (!plan_device.ok()) return plan_device.status();
  const DeviceRates rates = *plan_device;
  TRAINPLAN_RETURN_IF_ERROR(check_inputs(model, cluster, plan, rates, options));
  auto layout = RankLayout::make(plan, options.rank_order);
  if (!layout.ok()) return layout.status();

  const sim::Topology topology(cluster);
  sim::Program program(topology.num_links());
  sim::build_program(model, cluster, plan, options, rates, *layout, topology, program);
  if (options.collect_trace && options.trace_limit_bytes > 0) {
    std::int64_t changes = 0;
    for (const sim::SlotInfo& si : program.slots) changes += static_cast<std::int64_t>(si.mem.size());
    const double bytes = estimate_trace_bytes(program.engine.num_ops(), changes);
    if (bytes > options.trace_limit_bytes) {
      char buf[320];
      std::snprintf(buf, sizeof buf,
                    "the Chrome trace would be about %.1f GB (%lld operations on %zu ranks), over "
                    "the limit of %.1f GB: raise it (--trace-limit-gb) or trace one rank per "
                    "stage (without --all-ranks)",
                    bytes / 1e9, static_cast<long long>(program.engine.num_ops()),
                    program.slots.size(), options.trace_limit_bytes / 1e9);
      return Status::Error(buf, ExitCode::kUsage);
    }
  }
  if (comm_contention_applies(options, cluster.gpu))
    program.engine.set_contention([&program, &rates](std::int32_t op, const CommHold& held) {
      const sim::OpShape& s = program.meta(op).shape;
      if (s.empty()) return 1.0;
      return contended_ratio(WorkShape{s.compute_s, s.memory_s, s.overhead_s, s.tiles},
                             rates.sm_count, rates.hbm_bytes_per_s, held);
    });
  SimResult result;
  if (options.progress) program.engine.set_progress(options.progress);
  result.events = program.engine.run();
  result.ops = program.engine.num_ops();
  result.simulated_ranks = static_cast<std::int64_t>(program.slots.size());

  TimeNs end = 0;
  for (const sim::Op& op : program.engine.ops()) end = std::max(end, op.end);
  const TimeNs pipe_end = sim::pipeline_end(program, options.threads);
  const std::vector<sim::SlotTimeline> timelines =
      sim::slot_timelines(program, end, options.threads);

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
  // waiting for its own collectives or copies (SlotTimeline::comm_waited_ns), averaged over
  // stages (each stage once, so that symmetric and full simulation average the same numbers in
  // the same order).
  if (pipe_end > 0) {
    // In integer nanoseconds, divided once, so that closed forms compare exactly.
    std::vector<bool> seen(static_cast<std::size_t>(plan.pp), false);
    TimeNs idle = 0;
    for (const sim::SlotTimeline& t : timelines) {
      const auto stage = static_cast<std::size_t>(t.step.stage);
      if (seen[stage]) continue;
      seen[stage] = true;
      idle += std::max<TimeNs>(0, pipe_end - t.pipeline_busy_ns - t.comm_waited_ns);
    }
    r.bubble_fraction = static_cast<double>(idle) /
                        (static_cast<double>(pipe_end) * static_cast<double>(plan.pp));
  }
  for (const char* g : {"tp", "pp", "dp", "ep"}) r.bytes_per_group[g] = 0;
  if (plan.cp > 1) r.bytes_per_group["cp"] = 0;
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
  if (options.collect_trace && options.trace_sink)
    sim::stream_chrome_trace(program, timelines, options.trace_sink, options.threads);
  else if (options.collect_trace)
    result.trace_json = sim::chrome_trace(program, timelines, options.threads);
  if (options.collect_picture) {
    const double base = options.hardware ? options.hardware->baseline_memory_bytes : 0.0;
    result.picture = sim::step_picture(program, timelines, end, cluster.gpu.hbm_bytes - base,
                                       cluster.gpu.hbm_bytes * 0.9 - base);
  }
  return result;
}

}  // namespace trainplan
