// Profile assembly; see profile.h.
#include "calibration/profile.h"

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <memory>
#include <sstream>

#include "core/units.h"

namespace trainplan::calibration {

namespace {

// The value after "key:" on the line that starts with key, or "" if none.
std::string field_after(std::string_view text, std::string_view key) {
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    if (line.substr(0, key.size()) == key) {
      const std::size_t colon = line.find(':');
      if (colon != std::string_view::npos) {
        std::string_view v = line.substr(colon + 1);
        while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
        while (!v.empty() && (v.back() == ' ' || v.back() == '\r')) v.remove_suffix(1);
        return std::string(v);
      }
    }
    pos = end + 1;
  }
  return "";
}

// "123456 kB" -> bytes.
double kb_field(std::string_view text, std::string_view key) {
  const std::string v = field_after(text, key);
  if (v.empty()) return 0;
  return std::strtod(v.c_str(), nullptr) * kKiB;
}

Json stats_json(const FitStats& s) {
  return {{"points", s.points},
          {"rms_rel_pct", 100 * s.rms_rel},
          {"median_rel_pct", 100 * s.median_rel},
          {"max_rel_pct", 100 * s.max_rel}};
}

}  // namespace

ProcessMemory parse_proc_status(std::string_view text) {
  return {kb_field(text, "VmRSS"), kb_field(text, "VmHWM")};
}

std::string parse_cpu_model(std::string_view text) { return field_after(text, "model name"); }

double parse_mem_total_bytes(std::string_view text) { return kb_field(text, "MemTotal"); }

double best_stream_bytes_per_s(const std::vector<StreamSample>& stream) {
  double best = 0;
  for (const StreamSample& s : stream) best = std::max(best, s.bytes_per_s());
  return best;
}

std::string iso8601_utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

void add_rank_compute(Measurements& m, const std::vector<double>& per_rank_s) {
  if (per_rank_s.empty()) return;
  if (m.rank_compute_s.empty()) m.rank_compute_s.assign(per_rank_s.size(), 0.0);
  if (m.rank_compute_s.size() != per_rank_s.size()) return;
  for (std::size_t r = 0; r < per_rank_s.size(); ++r) m.rank_compute_s[r] += per_rank_s[r];
}

Result<Calibration> calibrate_from(const Measurements& m, const MachineIdentity& id,
                                   const ComputeFitOptions& options) {
  Calibration c;
  auto fit = fit_compute(m.tasks, best_stream_bytes_per_s(m.stream), options);
  if (!fit.ok()) return fit.status();
  c.compute = *fit;
  HardwareProfile& p = c.profile;
  const std::string ranks = std::to_string(id.ranks) + (id.ranks == 1 ? " rank)" : " ranks)");
  p.device = id.kind + ": " + (id.cpu_model.empty() ? std::string("unknown") : id.cpu_model) +
             " (" +
             (id.kind == "cpu" ? std::to_string(id.threads_per_rank) + " thread/rank, " : "") +
             ranks;
  p.date = id.date;
  p.rates = c.compute.rates;
  // The probes' own task times where a plan has the same task (compute_model.h MeasuredTaskTime);
  // c.compute.rates, whose residuals calibrate prints, stays the fit alone.
  auto table = measured_task_times(m.tasks, c.compute.rates);
  if (!table.empty())
    p.rates.measured_tasks =
        std::make_shared<const std::vector<MeasuredTaskTime>>(std::move(table));
  p.baseline_memory_bytes = m.baseline.hwm_bytes;
  // The profile's bound (core/cost/compute_model.cc) is 1: a larger spread means the ranks
  // shared their cores with other processes while measured (seen at 111% at load 14 on 2
  // cores), and the normal straggler model would give negative times. Held at 1 and reported.
  c.measured_rank_compute_spread = rank_compute_spread(m.skew);
  p.rank_compute_spread = std::min(1.0, c.measured_rank_compute_spread);
  // Each rank's compute speed over the probes: its traced compute over the mean rank's. The
  // per-task rates above stay the mean over ranks.
  p.rank_compute_time_factor = rank_compute_time_factors(m.rank_compute_s);
  if (!m.file_io.empty()) {
    std::vector<double> rates;
    for (const FileIoSample& x : m.file_io) rates.push_back(x.bytes_per_s());
    std::sort(rates.begin(), rates.end());
    const std::size_t mid = rates.size() / 2;
    c.file_io_bytes_per_s =
        rates.size() % 2 == 1 ? rates[mid] : 0.5 * (rates[mid - 1] + rates[mid]);
    c.file_io_free_bytes = m.file_io_free_bytes;
  }
  // Links from the executor's own collectives in its steps when there are any (what plans'
  // collectives cost there), else from the benchmark loop.
  const std::vector<CollectiveSample>& link_samples =
      m.step_collectives.empty() ? m.collectives : m.step_collectives;
  c.links_from_steps = !m.step_collectives.empty();
  if (!link_samples.empty()) {
    // The eager limit from the benchmark loop where there is one (every size from 8 bytes, so
    // the jump lies between two neighbours), the rates from the samples the links come from.
    std::int64_t eager_limit = -1;
    if (c.links_from_steps && !m.collectives.empty()) {
      auto loop = fit_links(m.collectives);
      if (loop.ok()) eager_limit = loop->eager_limit_bytes;
    }
    auto links = fit_links(link_samples, eager_limit);
    if (!links.ok()) return links.status();
    c.links = *links;
    c.has_link_fit = true;
    p.has_links = true;
    p.intra_node_bytes_per_s = p.inter_node_bytes_per_s = c.links.bytes_per_s;
    p.intra_node_latency_s = p.inter_node_latency_s = c.links.latency_s;
    p.eager_limit_bytes = c.links.eager_limit_bytes;
    p.rendezvous_latency_s = c.links.rendezvous_latency_s;
  }
  return c;
}

namespace {
// The rates of one reference kernel's samples (work / seconds), under "samples_" + key; their
// median under key; their spread ((max - min) / median, percent) under "spread_pct".
void add_reference_rates(Json& j, const std::vector<double>& seconds, double work,
                         const std::string& key) {
  std::vector<double> rates;
  for (double s : seconds) rates.push_back(s > 0 ? work / s : 0.0);
  std::vector<double> sorted = rates;
  std::sort(sorted.begin(), sorted.end());
  const double mid = sorted.size() % 2 == 1
      ? sorted[sorted.size() / 2]
      : (sorted[sorted.size() / 2 - 1] + sorted[sorted.size() / 2]) / 2;
  j["samples_" + key] = rates;
  j[key] = mid;
  j["spread_pct"] = mid > 0 ? 100.0 * (sorted.back() - sorted.front()) / mid : 0.0;
}
}  // namespace

Json reference_gemm_json(const ReferenceSamples& r) {
  if (r.seconds.empty()) return nullptr;
  Json j{{"kernel", "linear_forward (executor/cpu/reference_gemm.h)"},
         {"m", r.m},
         {"n", r.n},
         {"k", r.k},
         {"calls", r.calls},
         {"flops", r.flops()}};
  add_reference_rates(j, r.seconds, r.flops(), "flops_per_s");
  return j;
}

Json reference_triad_json(const TriadReferenceSamples& r) {
  if (r.seconds.empty()) return nullptr;
  Json j{{"kernel", "STREAM triad a = b + s c, float32 (executor/cpu/reference_gemm.h)"},
         {"elements", r.elements},
         {"calls", r.calls},
         {"bytes", r.bytes()}};
  add_reference_rates(j, r.seconds, r.bytes(), "bytes_per_s");
  return j;
}

Json measurements_to_json(const Measurements& m, const Calibration& c) {
  Json j;
  j["reference_gemm"] = reference_gemm_json(m.reference);
  j["reference_triad"] = reference_triad_json(m.triad_reference);
  Json tasks = Json::array();
  for (const TaskSample& s : m.tasks) {
    Json names = Json::array();
    for (const Task& t : s.tasks) names.push_back(std::string(t.name));
    tasks.push_back({{"name", s.name},
                     {"probe", s.probe},
                     {"tasks", names},
                     {"flops", s.flops()},
                     {"bytes", s.bytes()},
                     {"calls", s.calls},
                     {"time_us", s.time_s / kUs},
                     {"fit_us", sample_time_s(s, c.compute.rates) / kUs}});
  }
  j["tasks"] = tasks;
  Json st = Json::array();
  for (const StreamSample& s : m.stream)
    st.push_back({{"kernel", s.kernel},
                  {"array_MB", s.array_bytes / kMB},
                  {"time_us", s.time_s / kUs},
                  {"GBps", s.bytes_per_s() / kGB}});
  j["stream"] = st;
  if (!m.file_io.empty()) {
    Json io = Json::array();
    for (const FileIoSample& x : m.file_io)
      io.push_back({{"bytes", x.bytes},
                    {"write_s", x.write_s},
                    {"read_s", x.read_s},
                    {"GBps", x.bytes_per_s() / kGB}});
    j["file_io"] = {{"samples", io}, {"free_bytes", m.file_io_free_bytes}};
  }
  auto collectives = [](const std::vector<CollectiveSample>& samples) {
    Json co = Json::array();
    for (const CollectiveSample& s : samples)
      co.push_back({{"collective", std::string(to_string(s.collective))},
                    {"ranks", s.group_size},
                    {"size_bytes", s.bytes},
                    {"count", s.count},
                    {"type", s.type},
                    {"time_us", s.time_s / kUs},
                    {"algbw_GBps", s.algbw_bytes_per_s() / kGB},
                    {"busbw_GBps", s.busbw_bytes_per_s() / kGB}});
    return co;
  };
  j["collectives"] = collectives(m.collectives);
  j["step_collectives"] = collectives(m.step_collectives);
  Json skew = Json::array();
  for (const SkewSample& s : m.skew)
    skew.push_back({{"probe", s.probe},
                    {"ranks", s.ranks},
                    {"compute_between_waits_mean_us", s.mean_s / kUs},
                    {"slowest_excess_us", s.excess_s / kUs}});
  j["rank_skew"] = skew;
  Json per_rank = Json::array();
  for (double t : m.rank_compute_s) per_rank.push_back(t / kUs);
  j["rank_compute_us"] = per_rank;
  j["baseline_memory"] = {{"VmRSS_MB", m.baseline.rss_bytes / kMB},
                          {"VmHWM_MB", m.baseline.hwm_bytes / kMB}};
  Json by_kind = Json::object();
  for (std::size_t k = 0; k < kMemoryKernelCount; ++k)
    if (c.compute.measured_kind[k])
      by_kind[std::string(to_string(static_cast<MemoryKernel>(k)))] =
          c.compute.fitted_bytes_per_s[k] / kGB;
  Json fit = {{"gemm", stats_json(c.compute.gemm)},
              {"memory_kernels", stats_json(c.compute.memory)},
              {"mixed", stats_json(c.compute.mixed)},
              {"all", stats_json(c.compute.all)},
              {"outliers", c.compute.outliers},
              {"fitted_gemm_GFLOPs", c.compute.fitted_flops_per_s / 1e9},
              {"fitted_memory_kernel_GBps", by_kind},
              {"best_stream_GBps", best_stream_bytes_per_s(m.stream) / kGB}};
  if (c.has_link_fit) fit["links"] = stats_json(c.links.stats);
  j["fit_residuals"] = fit;
  return j;
}

Json profile_json(const Calibration& c, const Measurements& m) {
  Json j = hardware_profile_to_json(c.profile);
  j["notes"] =
      "Fitted by calibrate (calibration/fit.h). peak_TFLOPs: best measured GEMM (or the fit's "
      "asymptote); memory_GBps: best STREAM kernel; efficiencies, tiles, k_half and "
      "kernel_overhead_us: least squares over measurements.tasks (the executor's own code per "
      "cost-model task, and a GEMM sweep); measured_tasks: the executor probes' own time per "
      "task and shape (a joined span split by the fit's shares; the median over probes), which "
      "a plan's task of the same name and shape takes instead of the fit's (remove the key to "
      "predict from the fit alone); links: "
      "alpha-beta fit over measurements.step_collectives (the executor's collectives inside "
      "its traced steps, each the shortest over ranks) when there are any, else "
      "measurements.collectives (benchmark loop); rank_compute_spread: the median over "
      "measurements.rank_skew of slowest_excess / compute_between_waits_mean, over the expected "
      "maximum of that many standard normals (core/cost/straggler.h), each rank's compute "
      "between waits first divided by its time factor in that probe; rank_compute_time_factor: "
      "per rank, its traced compute in the executor probes (measurements.rank_compute_us, the "
      "sum of its compute-track task spans over the probes' recorded steps) over the mean over "
      "ranks (> 1: slower); the task rates are the mean over ranks.";
  j["measurements"] = measurements_to_json(m, c);
  return j;
}

Json cpu_cluster_json(const Calibration& c, std::int64_t ranks_per_node,
                      double memory_bytes_per_rank, const std::string& gpu_name) {
  const DeviceRates& r = c.profile.rates;
  const bool gpus = !gpu_name.empty();
  Json gpu = {{"name", gpus ? gpu_name : std::string("cpu-rank")},
              {"bf16_TFLOPs", r.peak_flops_per_s / kTFLOP},
              {"fp16_TFLOPs", r.peak_flops_per_s / kTFLOP},
              {"fp32_TFLOPs", r.peak_flops_per_s / kTFLOP},
              {"hbm_GB", memory_bytes_per_rank / kGB},
              {"hbm_GBps", r.hbm_bytes_per_s / kGB},
              {"sm_count", r.sm_count},
              {"gemm_efficiency", std::max(0.01, r.gemm_efficiency)},
              {"memory_efficiency", std::max(0.01, r.memory_efficiency)},
              {"source", "calibrate on " + c.profile.device + ", " + c.profile.date}};
  Json j = {{"name", "this machine: " + std::to_string(ranks_per_node) +
                         (gpus ? " x " + gpu_name : std::string(" CPU ranks"))},
            {"notes", gpus ? "written by calibrate --backend cuda --cluster-out; one rank per GPU"
                           : "written by calibrate --cluster-out; one 'GPU' = one MPI rank, one "
                             "thread"},
            {"gpu", gpu},
            {"num_nodes", 1},
            {"gpus_per_node", ranks_per_node}};
  if (!gpus) {
    // A CPU rank's "host" is its own DRAM: the executor's offload tiers (executor/offload.h) copy
    // gradient shards and parameters with memcpy, priced at the fitted elementwise (copy) rate,
    // and run the same AdamW on the host copy, at the fitted optimizer-kernel rate per rank.
    const double ranks = static_cast<double>(ranks_per_node);
    j["pcie_GBps"] = r.hbm_bytes_per_s * memory_efficiency_of(r, MemoryKernel::kElementwise) / kGB;
    j["host_memory_GBps_per_node"] =
        ranks * r.hbm_bytes_per_s * memory_efficiency_of(r, MemoryKernel::kOptimizer) / kGB;
    j["host_memory_GB_per_node"] = ranks * memory_bytes_per_rank / kGB;
    if (c.file_io_bytes_per_s > 0) {
      j["nvme_GBps_per_node"] = ranks * c.file_io_bytes_per_s / kGB;
      j["nvme_TB_per_node"] = c.file_io_free_bytes / kTB;
    }
  }
  if (c.profile.has_links) {
    j["intra_node_GBps"] = c.profile.intra_node_bytes_per_s / kGB;
    j["intra_node_latency_us"] = c.profile.intra_node_latency_s / kUs;
    j["inter_node_GBps"] = c.profile.inter_node_bytes_per_s / kGB;
    j["inter_node_latency_us"] = c.profile.inter_node_latency_s / kUs;
  }
  return j;
}

std::string format_task_table(const std::vector<TaskSample>& samples,
                              const DeviceRates& fitted) {
  std::ostringstream os;
  char line[400];
  std::snprintf(line, sizeof line, "# %-34s %-30s %10s %9s %9s %7s\n", "task(s)", "probe",
                "time(us)", "GFLOP/s", "fit(us)", "err%");
  os << line;
  for (const TaskSample& s : samples) {
    const double fit = sample_time_s(s, fitted);
    const double gflops = s.flops() > 0 ? s.flops() / s.time_s / 1e9 : 0.0;
    std::string name = s.name;
    if (s.probe == "sweep") {
      const Task& t = s.tasks.front();
      const GemmDirection d = gemm_direction(t);
      name = "gemm " + std::to_string(t.m) + "x" + std::to_string(t.n) + "x" +
             std::to_string(t.k);
      if (d != GemmDirection::kForward) name.append(" ").append(to_string(d));
    }
    std::snprintf(line, sizeof line, "  %-34s %-30s %10.2f %9.2f %9.2f %+7.1f\n", name.c_str(),
                  s.probe.c_str(), s.time_s * 1e6, gflops, fit * 1e6,
                  100 * (fit - s.time_s) / s.time_s);
    os << line;
  }
  return os.str();
}

std::string format_stream_table(const std::vector<StreamSample>& stream) {
  std::ostringstream os;
  char line[200];
  std::snprintf(line, sizeof line, "# %-8s %12s %10s %9s\n", "stream", "array(MB)", "time(us)",
                "GB/s");
  os << line;
  for (const StreamSample& s : stream) {
    std::snprintf(line, sizeof line, "  %-8s %12.1f %10.1f %9.2f\n", s.kernel.c_str(),
                  s.array_bytes / kMB, s.time_s * 1e6, s.bytes_per_s() / 1e9);
    os << line;
  }
  return os.str();
}

std::string format_fit_summary(const Calibration& c) {
  const DeviceRates& r = c.profile.rates;
  std::ostringstream os;
  char line[300];
  auto stats = [&](const char* what, const FitStats& s) {
    std::snprintf(line, sizeof line,
                  "  %-16s %4lld points  rms %6.1f%%  median %6.1f%%  max %6.1f%%\n", what,
                  static_cast<long long>(s.points), 100 * s.rms_rel, 100 * s.median_rel,
                  100 * s.max_rel);
    os << line;
  };
  os << "# fitted device rates (" << c.profile.device << ")\n";
  std::snprintf(line, sizeof line,
                "  peak %.2f GFLOP/s, gemm_efficiency %.3f, k_half %.2f, tiles %gx%g, units %lld\n"
                "  memory %.2f GB/s, memory_efficiency %.3f, kernel overhead %.2f us\n",
                r.peak_flops_per_s / 1e9, r.gemm_efficiency, r.k_half, r.tile_m, r.tile_n,
                static_cast<long long>(r.sm_count), r.hbm_bytes_per_s / 1e9, r.memory_efficiency,
                r.kernel_overhead_s * 1e6);
  os << line;
  std::snprintf(line, sizeof line,
                "  gemm efficiency by direction: forward %.3f, input gradient %.3f, weight "
                "gradient %.3f%s\n",
                r.gemm_efficiency, gemm_efficiency_of(r, GemmDirection::kInputGradient),
                gemm_efficiency_of(r, GemmDirection::kWeightGradient),
                r.gemm_input_gradient_efficiency > 0 || r.gemm_weight_gradient_efficiency > 0
                    ? ""
                    : " (not measured apart)");
  os << line;
  std::snprintf(line, sizeof line,
                "  fused attention: forward %.3f, backward %.3f of the GEMM rate%s\n",
                r.attention_efficiency, attention_efficiency_of(r, true),
                r.attention_backward_efficiency > 0 ? "" : " (backward not measured apart)");
  os << line;
  for (std::size_t k = 0; k < kMemoryKernelCount; ++k) {
    if (!c.compute.measured_kind[k]) continue;
    std::snprintf(line, sizeof line, "  %-14s %9.2f GB/s  efficiency %.4f\n",
                  std::string(to_string(static_cast<MemoryKernel>(k))).c_str(),
                  c.compute.fitted_bytes_per_s[k] / 1e9, r.memory_kernel_efficiency[k]);
    os << line;
  }
  std::snprintf(line, sizeof line, "  transcendental %.3f ns per exp/tanh\n",
                r.transcendental_s / kNs);
  os << line;
  std::snprintf(line, sizeof line, "  baseline memory %.1f MB\n",
                c.profile.baseline_memory_bytes / kMB);
  os << line;
  std::snprintf(line, sizeof line,
                "  rank compute spread %.1f%% (sd of a rank's compute between waits; the "
                "simulator waits for the expected straggler)\n",
                100 * c.profile.rank_compute_spread);
  os << line;
  if (c.measured_rank_compute_spread > c.profile.rank_compute_spread) {
    std::snprintf(line, sizeof line,
                  "  warning: the ranks' compute spread measured %.1f%%, held at 100%%: other "
                  "processes shared the cores while calibrating\n",
                  100 * c.measured_rank_compute_spread);
    os << line;
  }
  if (!c.profile.rank_compute_time_factor.empty()) {
    os << "  rank compute time factor";
    for (double f : c.profile.rank_compute_time_factor) {
      std::snprintf(line, sizeof line, " %.3f", f);
      os << line;
    }
    os << " (per rank, its compute over the mean rank's; the simulator plays each rank at it)\n";
  }
  os << "# fit residuals (task_time_s against measured)\n";
  stats("gemm", c.compute.gemm);
  stats("memory kernels", c.compute.memory);
  stats("mixed", c.compute.mixed);
  stats("all", c.compute.all);
  std::snprintf(line, sizeof line, "  outliers left out of the final fit: %lld\n",
                static_cast<long long>(c.compute.outliers));
  os << line;
  if (c.has_link_fit) {
    std::snprintf(line, sizeof line,
                  "# link fit (%s): latency %.2f us per ring step, %.3f GB/s\n",
                  c.links_from_steps ? "the executor's collectives in its steps"
                                     : "the benchmark loop",
                  c.links.latency_s * 1e6, c.links.bytes_per_s / 1e9);
    os << line;
    if (c.links.eager_limit_bytes > 0) {
      std::snprintf(line, sizeof line,
                    "  rendezvous over an eager limit of %lld bytes per ring step: %.2f us more "
                    "per step\n",
                    static_cast<long long>(c.links.eager_limit_bytes),
                    c.links.rendezvous_latency_s * 1e6);
      os << line;
    }
    stats("collectives", c.links.stats);
  }
  return os.str();
}

Result<double> executor_baseline_bytes(const StepReport& probe, std::string_view source) {
  const std::string where = "probe report '" + std::string(source) + "'";
  if (probe.kind != "measured")
    return Status::Error(where + ": field 'kind': expected \"measured\", got \"" + probe.kind + "\"");
  auto model = model_from_json(probe.model, source);
  if (!model.ok()) return model.status();
  auto plan = plan_from_json(probe.plan, source);
  if (!plan.ok()) return plan.status();
  if (probe.ranks.empty()) return Status::Error(where + ": field 'ranks': no ranks");
  double baseline = 0;
  for (const RankStep& r : probe.ranks) {
    if (r.stage < 0 || r.stage >= plan->pp)
      return Status::Error(where + ": field 'ranks': stage " + std::to_string(r.stage) +
                           " is outside the plan's pp=" + std::to_string(plan->pp));
    const double model_bytes = memory_on_stage(*model, *plan, r.stage).device_total();
    baseline = std::max(baseline, r.peak_memory_bytes - model_bytes);
  }
  return std::max(0.0, baseline);
}

}  // namespace trainplan::calibration
