// simulate: play one training step of a plan on a cluster, event by event, and print the step
// time, throughput, bubble, communication and memory per rank.
//
//   simulate --model M --plan P (--gpus N [--gpu NAME] [--gpus-per-node G] | --cluster F)
//            [--hardware H] [--seq-len S] [--json] [--out FILE] [--trace FILE] [--all-ranks]
//            [--rank-order tp,cp,dp,pp] [--dp-algorithm ring|gather-broadcast]
//   simulate --published FILE [--family TEXT] [--cross-validate [--write-residuals OUT]] [--json]
//
// --json prints the StepReport (schema trainplan.step_report/1, kind "predicted"); --out writes
// it to FILE; --trace writes a Chrome trace (open in https://ui.perfetto.dev).
// --published FILE: published, measured runs (the schema of
// ../shared/reference/published_runs_dev.json) simulated one by one, each measured figure set
// against its prediction, with what each entry did not say and how it was decided
// (validation/published_run.h), then per family and overall the median and p90 |error| and
// the signed mean; --json prints schema trainplan.published_comparison/2. --cross-validate
// gives the accuracy headline: each family predicted with the efficiency constants chosen on
// the others (validation/accuracy.h; schema trainplan.cross_validation/1). --family TEXT keeps
// the runs whose family contains TEXT; --write-residuals OUT writes the held-out errors per
// family (validation/error_band.h; the corpus's are validation/corpus/error_residuals.json,
// compiled in). The summary of a plan ends with the expected error band of its GPU generation.
// Exit codes: 0 ok; 2 usage; 3 invalid input; 4 the plan does not fit the model or cluster;
// 6 a file could not be read or written. Tested by tests/simulator/simulate_tool_test.cc.
#include <algorithm>
#include <cmath>
#include <thread>
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/cost/cost_model.h"
#include "core/html_report.h"
#include "core/units.h"
#include "validation/accuracy.h"
#include "validation/error_band.h"
#include "validation/published_run.h"
#include "simulator/simulator.h"
#include "tools/cli.h"

namespace {

using namespace trainplan;

constexpr const char* kProgram = "simulate";

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// Ranks whose peak exceeds usable memory (capacity less headroom), said on stderr and listed in
// the JSON ("memory_warnings"). The exit status is 4 when a peak exceeds the capacity itself
// (the plan cannot run); over the usable memory but within capacity it only warns.
struct MemoryCheck {
  Json warnings = Json::array();
  bool over_capacity = false;
};

MemoryCheck check_memory(const SimResult& res, const ClusterSpec& cluster, double headroom) {
  MemoryCheck out;
  const double capacity = cluster.gpu.hbm_bytes, usable = capacity * (1.0 - headroom);
  for (const RankStep& k : res.report.ranks) {
    if (k.peak_memory_bytes <= usable) continue;
    const bool over = k.peak_memory_bytes > capacity;
    out.over_capacity |= over;
    const MemoryBreakdown& m = k.memory;
    const double states = m.weights_bytes + m.gradients_bytes + m.optimizer_bytes;
    const std::string largest = states >= m.activations_bytes && states >= m.buffers_bytes
                                    ? "model states"
                                    : (m.activations_bytes >= m.buffers_bytes ? "activations"
                                                                              : "buffers");
    const std::string text =
        "rank " + std::to_string(k.rank) + " (stage " + std::to_string(k.stage) + ") peaks at " +
        fmt("%.1f", k.peak_memory_bytes / kGB) + " GB, over the GPU's " +
        (over ? fmt("%.1f GB capacity", capacity / kGB)
              : fmt("%.1f GB usable", usable / kGB) + fmt(" (%.0f GB less ", capacity / kGB) +
                    fmt("%.0f%% headroom)", headroom * 100)) +
        "; the largest part is " + largest + fmt(" (model states %.1f GB, ", states / kGB) +
        fmt("activations %.1f GB, ", m.activations_bytes / kGB) +
        fmt("buffers %.1f GB)", m.buffers_bytes / kGB);
    out.warnings.push_back({{"rank", k.rank}, {"stage", k.stage},
                            {"peak_memory_bytes", k.peak_memory_bytes},
                            {"usable_bytes", usable}, {"capacity_bytes", capacity},
                            {"over_capacity", over}, {"largest", largest}, {"message", text}});
  }
  return out;
}

// The expected error of the prediction (validation/error_band.h): from the published runs of
// the GPU's generation. A measured hardware profile (a CPU, or a GPU calibrated here) has its
// own check, the predicted-vs-measured benchmark, not the published runs.
std::string expected_band_line(const ClusterSpec& cluster,
                               const std::optional<HardwareProfile>& hardware) {
  if (hardware)
    return "expected error: not from published runs (a measured hardware profile: see "
           "bench/predicted_vs_measured.sh)";
  return describe(expected_error_band(cluster.gpu.name, corpus_residuals()));
}

void print_summary(const Plan& plan, const SimResult& res, const std::string& error_band,
                   DeviceAllocator allocator) {
  const StepReport& r = res.report;
  std::cout << "plan: " << describe(plan) << "\n"
            << "step time          " << fmt("%10.4f s", r.step_time_s) << "\n"
            << "tokens/s           " << fmt("%10.0f", r.tokens_per_s) << "\n"
            << "model TFLOP/s/GPU  " << fmt("%10.1f", r.model_tflops_per_gpu) << "\n"
            << "hw TFLOP/s/GPU     " << fmt("%10.1f", r.hardware_tflops_per_gpu)
            << "   (incl. recomputed forward)\n"
            << "MFU                " << fmt("%10.1f %%", 100.0 * r.mfu) << "\n"
            << "pipeline bubble    " << fmt("%10.1f %%", 100.0 * r.bubble_fraction) << "\n"
            << error_band << "\n";
  std::cout << "bytes per step (all ranks):";
  for (const auto& [g, b] : r.bytes_per_group) std::cout << "  " << g << fmt(" %.3f GB", b / kGB);
  std::cout << "\n\n";
  // The cp column only for plans with context parallelism, so other summaries read as before.
  std::vector<const char*> groups = {"tp", "pp", "dp", "ep"};
  if (plan.cp > 1) groups.insert(groups.begin() + 1, "cp");
  std::printf("%6s %5s %10s %9s %9s %9s", "rank", "stage", "peak GB", "compute s", "optim s",
              "idle s");
  for (std::size_t i = 0; i < groups.size(); ++i)
    std::printf(i == 0 ? "  %-11s" : " %-11s", (std::string(groups[i]) + " s/exp").c_str());
  std::printf("\n");
  for (const RankStep& k : r.ranks) {
    std::printf("%6lld %5lld %10.2f %9.4f %9.4f %9.4f", static_cast<long long>(k.rank),
                static_cast<long long>(k.stage), k.peak_memory_bytes / kGB, k.compute_s,
                k.optimizer_s, k.idle_s);
    for (const char* g : groups) {
      auto it = k.comm.find(g);
      const double t = it == k.comm.end() ? 0 : it->second.time_s;
      const double e = it == k.comm.end() ? 0 : it->second.exposed_s;
      std::printf("  %5.3f/%-5.3f", t, e);
    }
    std::printf("\n");
  }
  if (res.simulated_ranks < plan.world_size())
    std::cout << "\n(one rank per pipeline stage simulated; its TP peers"
              << (plan.cp > 1 ? ", CP peers" : "")
              << " and DP replicas are identical: --all-ranks plays every rank)\n";
  const MemoryBreakdown m0 = r.ranks.empty() ? MemoryBreakdown{} : r.ranks.front().memory;
  std::cout << "memory at peak (rank " << (r.ranks.empty() ? 0 : r.ranks.front().rank)
            << "): weights " << fmt("%.2f", m0.weights_bytes / kGB)
            << " GB, gradients " << fmt("%.2f", m0.gradients_bytes / kGB)
            << " GB, optimizer " << fmt("%.2f", m0.optimizer_bytes / kGB)
            << " GB, activations " << fmt("%.2f", m0.activations_bytes / kGB)
            << " GB, buffers " << fmt("%.2f", m0.buffers_bytes / kGB) << " GB";
  const double host = m0.host_optimizer_bytes + m0.host_activation_bytes + m0.host_param_bytes;
  if (host > 0)
    std::cout << "; in host memory: optimizer " << fmt("%.2f", m0.host_optimizer_bytes / kGB)
              << " GB, checkpoints " << fmt("%.2f", m0.host_activation_bytes / kGB) << " GB";
  if (m0.host_param_bytes > 0)
    std::cout << ", parameters and gradients " << fmt("%.2f", m0.host_param_bytes / kGB) << " GB";
  if (m0.nvme_bytes > 0) std::cout << "; on NVMe " << fmt("%.2f", m0.nvme_bytes / kGB) << " GB";
  std::cout << "\n";
  // What a framework's log and nvidia-smi would show for the fullest rank: the allocated peak,
  // the allocator's reserve over it, and the CUDA context and NCCL's buffers (core/cost:
  // reserved_bytes, device_runtime_bytes, each with its source). An estimate for comparison
  // with a run; the headroom check above keeps to the allocated peak and its margin.
  double peak = 0;
  for (const RankStep& k : r.ranks) peak = std::max(peak, k.peak_memory_bytes);
  const double reserved = reserved_bytes(peak, allocator);
  const DeviceRuntimeBytes runtime = device_runtime_bytes(plan, CudaModuleLoading::kLazy);
  std::cout << "device memory (fullest rank): allocated " << fmt("%.2f", peak / kGB) << " GB; ";
  if (allocator_reserve_modelled(allocator))
    std::cout << "reserved about " << fmt("%.2f", reserved / kGB) << " GB ("
              << allocator_description(allocator) << ", "
              << fmt("%.0f", 100 * allocator_fragmentation(allocator))
              << "% fragmentation, GMLake); ";
  else
    std::cout << "reserve not estimated (" << allocator_description(allocator)
              << ": no published fragmentation figure); ";
  std::cout << "in use about " << fmt("%.2f", (reserved + runtime.total()) / kGB)
            << " GB (CUDA context " << fmt("%.2f", runtime.cuda_context_bytes / kGB)
            << " GB, NCCL buffers " << fmt("%.2f", runtime.nccl_bytes / kGB) << " GB)\n";
}

// One run's rows of the published-runs table: its figures, then what was assumed and unused.
void print_published_run(const std::string& id, const PublishedRun& run,
                         const std::vector<PublishedMetric>& metrics) {
  const std::string plan = describe(run.plan);
  bool first = true;
  for (const PublishedMetric& m : metrics) {
    std::printf("%-28s %-52s %-16s %11.4g %11.4g %+7.1f%%\n", first ? id.c_str() : "",
                first ? plan.c_str() : "", m.name.c_str(), m.measured, m.predicted,
                100.0 * m.error());
    first = false;
  }
  if (metrics.empty())
    std::printf("%-28s %-52s (nothing measured to compare)\n", id.c_str(), plan.c_str());
  for (const std::string& a : run.assumptions) std::printf("%28s   assumed: %s\n", "", a.c_str());
  for (const std::string& f : run.ignored_fields) std::printf("%28s   not used: %s\n", "", f.c_str());
}

Json stats_json(const ErrorStats& s) {
  return {{"runs", s.count}, {"median_abs", s.median_abs}, {"p90_abs", s.p90_abs},
          {"mean_signed", s.mean_signed}};
}

std::string stats_text(const ErrorStats& s) {
  if (s.count == 0) return "-";
  return fmt("%5.1f%%", 100 * s.median_abs) + fmt(" %5.1f%%", 100 * s.p90_abs) +
         fmt(" %+6.1f%%", 100 * s.mean_signed) + " (" + std::to_string(s.count) + ")";
}

// The per-family table: throughput and memory, median |error|, p90 |error|, signed mean.
void print_family_table(const std::vector<FamilyStats>& families, const char* title) {
  std::printf("\n%s\n%-58s %-28s %s\n", title, "family (source / framework / GPU)",
              "throughput med p90 mean (n)", "memory med p90 mean (n)");
  for (const FamilyStats& f : families)
    std::printf("%-58s %-28s %s\n", f.family.c_str(), stats_text(f.throughput).c_str(),
                stats_text(f.memory).c_str());
}

// The entries of the published-runs file, mapped; a failure to map is kept as its status.
struct PublishedEntry {
  std::string id;
  Result<PublishedRun> run = Status::Error("not read");
};

Result<std::vector<PublishedEntry>> read_published(const std::string& path,
                                                   const std::string& family_filter) {
  auto json = cli::read_json_file(path);
  if (!json.ok()) return json.status();
  if (!json->is_array() || json->empty())
    return Status::Error("published runs '" + path + "': expected a non-empty JSON list of runs");
  std::vector<PublishedEntry> entries;
  for (std::size_t i = 0; i < json->size(); ++i) {
    const Json& entry = (*json)[i];
    const auto raw_id = entry.is_object() ? entry.find("id") : entry.end();
    PublishedEntry e;
    e.id = raw_id != entry.end() && raw_id->is_string() ? raw_id->get<std::string>()
                                                        : "entry " + std::to_string(i);
    e.run = published_run_from_json(entry, "published runs '" + path + "' entry " +
                                               std::to_string(i));
    if (!family_filter.empty() &&
        (!e.run.ok() || e.run->family.key().find(family_filter) == std::string::npos))
      continue;
    entries.push_back(std::move(e));
  }
  if (entries.empty())
    return Status::Error("published runs '" + path + "': no run of a family matching --family \"" +
                         family_filter + "\"", ExitCode::kUsage);
  return entries;
}

// --cross-validate: each family predicted with the constants chosen on the others.
int run_cross_validation(const std::vector<PublishedEntry>& entries, bool as_json,
                         const std::string& residuals_path) {
  std::vector<const PublishedRun*> runs;
  for (const PublishedEntry& e : entries)
    if (e.run.ok()) runs.push_back(&*e.run);
  const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  const CrossValidation cv = cross_validate_published(runs, threads);
  if (!residuals_path.empty()) {
    const Json residuals = residuals_to_json(
        residuals_by_family(runs, cv),
        "simulate --published validation/corpus/published_runs.json --cross-validate "
        "--write-residuals validation/corpus/error_residuals.json");
    const Status written = cli::write_file_atomic(residuals_path, residuals.dump(1) + "\n");
    if (!written.ok()) return cli::fail(kProgram, written);
  }
  if (as_json) {
    Json folds = Json::array(), by_family = Json::array();
    for (const auto& f : cv.folds)
      folds.push_back({{"family", f.family}, {"runs", f.runs},
                       {"gemm_share", f.chosen.gemm_share},
                       {"memory_efficiency", f.chosen.memory_efficiency}});
    for (const FamilyStats& f : cv.by_family)
      by_family.push_back({{"family", f.family}, {"throughput", stats_json(f.throughput)},
                           {"memory", stats_json(f.memory)}});
    Json surface = Json::array();
    for (const auto& s : cv.surface)
      surface.push_back({{"gemm_share", s.point.gemm_share},
                         {"memory_efficiency", s.point.memory_efficiency},
                         {"weighted_mean_abs", s.weighted_mean_abs},
                         {"weighted_median_abs", s.weighted_median_abs},
                         {"weighted_p90_abs", s.weighted_p90_abs}});
    std::cout << Json{{"schema", "trainplan.cross_validation/1"},
                      {"folds", folds},
                      {"by_family", by_family},
                      {"throughput", stats_json(cv.throughput)},
                      {"memory", stats_json(cv.memory)},
                      {"fit_all", {{"gemm_share", cv.fit_all.gemm_share},
                                   {"memory_efficiency", cv.fit_all.memory_efficiency},
                                   {"throughput", stats_json(cv.throughput_fit_all)}}},
                      {"objective_surface", surface},
                      {"presets", {{"throughput", stats_json(cv.throughput_presets)},
                                   {"memory", stats_json(cv.memory_presets)}}}}
                     .dump(2)
              << "\n";
    return 0;
  }
  std::printf("leave-one-family-out: the GEMMs' share of each part's achievable matmul rate and "
              "memory_efficiency chosen on the other families\n%-58s %5s %6s %6s\n",
              "held-out family", "runs", "gemm", "memory");
  for (const auto& f : cv.folds)
    std::printf("%-58s %5zu %6.2f %6.2f\n", f.family.c_str(), f.runs, f.chosen.gemm_share,
                f.chosen.memory_efficiency);
  print_family_table(cv.by_family, "held-out errors per family:");
  std::printf("\ncross-validated throughput: %s   memory: %s  (median |error|, p90, signed mean, "
              "runs)\n", stats_text(cv.throughput).c_str(), stats_text(cv.memory).c_str());
  std::printf("for comparison, not the headline: the presets' constants %s; one fit over all "
              "runs (gemm share %.2f, memory %.2f) %s\n", stats_text(cv.throughput_presets).c_str(),
              cv.fit_all.gemm_share, cv.fit_all.memory_efficiency,
              stats_text(cv.throughput_fit_all).c_str());
  return 0;
}

// simulate --published FILE: every entry mapped, simulated and compared; entries that cannot be
// mapped or simulated are listed with the reason and make the exit status non-zero after the
// rest ran. The summary gives, per family and overall, median and p90 |error| and the signed
// mean, of throughput and (where published) memory, at the presets' constants.
int run_published(const cli::Args& args) {
  for (const char* o : {"plan", "model", "cluster", "gpus", "gpu", "gpus-per-node", "hardware",
                        "seq-len", "out", "trace", "all-ranks", "rank-order", "dp-algorithm",
                        "html", "trace-limit-gb", "memory-headroom", "allocator", "threads",
                        "zb-v-send-blind", "grad-reduce-after-backward", "overlap-p2p"})
    if (args.has(o))
      return cli::fail(kProgram, Status::Error(std::string("--published takes no --") + o +
                                                   ": each entry gives its model, plan and cluster",
                                               ExitCode::kUsage));
  const std::string path = args.get("published");
  auto entries = read_published(path, args.get("family"));
  if (!entries.ok()) return cli::fail(kProgram, entries.status());
  const bool as_json = args.has("json");
  const bool expand = args.has("expand-repeats");
  if (expand && args.has("cross-validate"))
    return cli::fail(kProgram, Status::Error("--expand-repeats is not taken with --cross-validate",
                                             ExitCode::kUsage));
  if (args.has("write-residuals") && !args.has("cross-validate"))
    return cli::fail(kProgram, Status::Error("--write-residuals needs --cross-validate",
                                             ExitCode::kUsage));
  if (args.has("cross-validate"))
    return run_cross_validation(*entries, as_json, args.get("write-residuals"));
  Json out_runs = Json::array();
  std::vector<std::string> families;
  std::vector<RunErrors> errors;
  Status first_failure = Status::Ok();
  std::size_t failed = 0;
  if (!as_json)
    std::printf("%-28s %-52s %-16s %11s %11s %8s\n", "run", "plan", "metric", "measured",
                "predicted", "error");
  for (const PublishedEntry& e : *entries) {
    Json out = {{"id", e.id}};
    const Result<PublishedRun>& run = e.run;
    Result<SimResult> sim = [&]() -> Result<SimResult> {
      if (!run.ok()) return run.status();
      SimOptions options = run->options;
      options.expand_repeats = expand;
      return simulate_step(run->model, run->cluster, run->plan, options);
    }();
    if (!sim.ok()) {
      ++failed;
      if (first_failure.ok()) first_failure = sim.status();
      out["error"] = sim.status().message();
      out_runs.push_back(out);
      if (!as_json) std::printf("%-28s not simulated: %s\n", e.id.c_str(), sim.status().message().c_str());
      continue;
    }
    const std::vector<PublishedMetric> metrics = compare_published_run(*run, sim->report);
    families.push_back(run->family.key());
    errors.push_back(run_errors(metrics));
    out["family"] = {{"source", run->family.source}, {"framework", run->family.framework},
                     {"gpu_generation", run->family.gpu_generation}};
    if (errors.back().throughput) out["headline_throughput_error"] = *errors.back().throughput;
    out["plan"] = describe(run->plan);
    out["cluster"] = run->cluster.name;
    out["metrics"] = Json::array();
    for (const PublishedMetric& m : metrics)
      out["metrics"].push_back({{"name", m.name}, {"measured", m.measured},
                                {"predicted", m.predicted}, {"error", m.error()}});
    out["assumptions"] = run->assumptions;
    out["ignored_fields"] = run->ignored_fields;
    out_runs.push_back(out);
    if (!as_json) print_published_run(e.id, *run, metrics);
  }
  const std::vector<FamilyStats> by_family = stats_by_family(families, errors);
  std::vector<double> throughput, memory;
  for (const RunErrors& r : errors) {
    if (r.throughput) throughput.push_back(*r.throughput);
    if (r.memory) memory.push_back(*r.memory);
  }
  const ErrorStats all_throughput = error_stats(throughput), all_memory = error_stats(memory);
  if (as_json) {
    Json fam = Json::array();
    for (const FamilyStats& f : by_family)
      fam.push_back({{"family", f.family}, {"throughput", stats_json(f.throughput)},
                     {"memory", stats_json(f.memory)}});
    const Json summary = {{"runs", entries->size()},
                          {"simulated", entries->size() - failed},
                          {"headline_median_abs_error", all_throughput.median_abs},
                          {"memory_median_abs_error", all_memory.median_abs},
                          {"throughput", stats_json(all_throughput)},
                          {"memory", stats_json(all_memory)},
                          {"by_family", fam}};
    std::cout << Json{{"schema", "trainplan.published_comparison/2"}, {"runs", out_runs},
                      {"summary", summary}}
                     .dump(2)
              << "\n";
  } else {
    print_family_table(by_family, "per family, at the presets' constants (not cross-validated; "
                                  "--cross-validate gives the headline):");
    std::printf("\nthroughput: median |error| %.1f%%, p90 %.1f%%, mean %+.1f%% over %zu runs "
                "(each run's first figure: iteration time, else TFLOP/s, MFU, tokens/s; as "
                "throughput, + = predicted faster)\n",
                100.0 * all_throughput.median_abs, 100.0 * all_throughput.p90_abs,
                100.0 * all_throughput.mean_signed, all_throughput.count);
    if (all_memory.count > 0)
      std::printf("memory:     median |error| %.1f%%, p90 %.1f%%, mean %+.1f%% over %zu runs\n",
                  100.0 * all_memory.median_abs, 100.0 * all_memory.p90_abs,
                  100.0 * all_memory.mean_signed, all_memory.count);
  }
  if (!first_failure.ok()) {
    std::fprintf(stderr, "%s: %zu of %zu runs not simulated; first: %s\n", kProgram, failed,
                 entries->size(), first_failure.message().c_str());
    return static_cast<int>(first_failure.code());
  }
  return 0;
}

int run(int argc, char** argv) {
  std::vector<cli::Args::Option> options = cli::model_cluster_options();
  options.insert(options.end(), {
      {"plan", true, "plan JSON (as written by plan --emit-plan)"},
      {"json", false, "print the StepReport JSON instead of the summary"},
      {"out", true, "also write the StepReport JSON to FILE"},
      {"trace", true, "write a Chrome trace of the step to FILE (streamed; opens offline in "
                      "Perfetto's or Chrome's trace viewer, see docs/simulator.md)"},
      {"trace-limit-gb", true, "refuse a trace estimated above this size (default 2 GB)"},
      {"html", true, "write a self-contained HTML picture of the step (timeline, memory over "
                     "time, breakdown) to FILE; no network needed to open it"},
      {"memory-headroom", true, "fraction of GPU memory kept free; a peak above the rest is "
                                "warned about (default 0.10)"},
      cli::allocator_option(),
      {"threads", true, "threads for the per-rank passes (default 0: every core)"},
      {"all-ranks", false, "simulate every rank, not one per symmetric set"},
      {"rank-order", true, "rank placement, innermost axis first (default tp,cp,dp,pp; cp may be "
                           "left out and then follows tp)"},
      {"dp-algorithm", true, "data-parallel gradient sum: ring (default) or gather-broadcast"},
      {"zb-v-send-blind", false, "zb-v: order the passes without the pipeline send time "
                                 "(default: a send-aware order where it replays shorter)"},
      {"grad-reduce-after-backward", false,
       "data-parallel gradient sums once the whole backward has run, not bucketed beside it "
       "(Megatron-LM 2021's local DDP; what the CPU executor does, executor/trainer.cc "
       "finish_gradients)"},
      {"overlap-p2p", false,
       "pipeline sends run behind compute, the sender not held (Megatron-LM's "
       "--overlap-p2p-communication, NeMo's overlap_p2p_comm); default: the sender waits for its "
       "send (batch_isend_irecv + wait)"},
      {"expand-repeats", false, "play a context-parallel ring's runs of identical steps step by "
                                "step, one op per step (a check: the same step, slower)"},
      {"published", true, "published measured runs (JSON list) to simulate and compare"},
      {"family", true, "with --published: only the runs whose family (source / framework / GPU) "
                       "contains TEXT"},
      {"cross-validate", false, "with --published: leave one family out, choose the "
                                "efficiency constants on the rest, predict it; per family and "
                                "overall"},
      {"write-residuals", true, "with --cross-validate: write the held-out errors per family "
                                "to FILE (schema trainplan.error_residuals/1)"},
  });
  for (const auto& o : cli::progress_options()) options.push_back(o);
  cli::Args args(kProgram, "Simulate one training step of a plan, event by event.", options);
  if (Status st = args.parse(argc, argv); !st.ok()) return cli::fail(kProgram, st);
  if (args.help_requested()) {
    std::cout << args.usage();
    return 0;
  }
  if (args.has("published")) return run_published(args);
  for (const char* o : {"family", "cross-validate", "write-residuals"})
    if (args.has(o))
      return cli::fail(kProgram, Status::Error(std::string("--") + o + " needs --published FILE",
                                               ExitCode::kUsage));
  if (!args.has("plan")) return cli::fail(kProgram, Status::Error("missing --plan FILE", ExitCode::kUsage));
  if (!args.has("model")) return cli::fail(kProgram, Status::Error("missing --model FILE", ExitCode::kUsage));
  auto model = cli::load_model(args);
  if (!model.ok()) return cli::fail(kProgram, model.status());
  auto plan = cli::load_plan(args.get("plan"));
  if (!plan.ok()) return cli::fail(kProgram, plan.status());
  auto cluster = cli::load_cluster(args);
  if (!cluster.ok()) return cli::fail(kProgram, cluster.status());
  auto hardware = cli::load_hardware(args);
  if (!hardware.ok()) return cli::fail(kProgram, hardware.status());

  SimOptions opt;
  opt.hardware = *hardware;
  opt.all_ranks = args.has("all-ranks");
  opt.zb_v_send_aware = !args.has("zb-v-send-blind");
  opt.overlap_grad_reduce = !args.has("grad-reduce-after-backward");
  opt.overlap_p2p = args.has("overlap-p2p");
  opt.expand_repeats = args.has("expand-repeats");
  opt.rank_order = args.get("rank-order", "tp,cp,dp,pp");
  opt.collect_trace = args.has("trace");
  const std::string algo = args.get("dp-algorithm", "ring");
  if (algo == "ring") opt.dp_algorithm = DpAlgorithm::kRing;
  else if (algo == "gather-broadcast") opt.dp_algorithm = DpAlgorithm::kGatherBroadcast;
  else
    return cli::fail(kProgram, Status::Error("--dp-algorithm: \"" + algo +
                                                 "\" is not one of ring, gather-broadcast",
                                             ExitCode::kUsage));
  if (Status st = check_plan_world_size(*plan, cluster->total_gpus()); !st.ok())
    return cli::fail(kProgram, st);
  if (Status st = check_plan_fits_model(*plan, *model); !st.ok()) return cli::fail(kProgram, st);

  auto headroom = args.get_double("memory-headroom", 0.10, 0.0, 0.99);
  auto allocator = cli::load_allocator(args);
  if (!allocator.ok()) return cli::fail(kProgram, allocator.status());
  auto limit_gb = args.get_double("trace-limit-gb", 2.0, 0.001, 1e6);
  auto threads = args.get_int("threads", 0, 0, 4096);
  for (const Status& st : {headroom.status(), limit_gb.status(), threads.status()})
    if (!st.ok()) return cli::fail(kProgram, st);
  opt.trace_limit_bytes = *limit_gb * 1e9;
  opt.threads = static_cast<unsigned>(*threads);
  opt.collect_picture = args.has("html");
  // The trace streams into its file as the simulator writes it.
  std::optional<cli::AtomicFileWriter> trace_file;
  if (args.has("trace")) {
    trace_file.emplace(args.get("trace"));
    if (Status st = trace_file->open(); !st.ok()) return cli::fail(kProgram, st);
    opt.trace_sink = [&](std::string_view chunk) { trace_file->write(chunk); };
  }
  cli::Progress playing(kProgram, "operations played", cli::progress_mode(args));
  opt.progress = [&](std::int64_t done, std::int64_t total) { playing.update(done, total); };
  auto res = simulate_step(*model, *cluster, *plan, opt);
  playing.finish();
  if (!res.ok()) return cli::fail(kProgram, res.status());
  if (trace_file)
    if (Status st = trace_file->commit(); !st.ok()) return cli::fail(kProgram, st);
  const MemoryCheck memory = check_memory(*res, *cluster, *headroom);
  Json report = step_report_to_json(res->report);
  if (!memory.warnings.empty()) report["memory_warnings"] = memory.warnings;
  const std::string json = report.dump(2) + "\n";
  if (args.has("out"))
    if (Status st = cli::write_file_atomic(args.get("out"), json); !st.ok())
      return cli::fail(kProgram, st);
  if (args.has("html")) {
    html::StepPicture pic = *res->picture;
    pic.usable_bytes = cluster->gpu.hbm_bytes * (1.0 - *headroom);
    pic.title = "trainplan simulate: " + model->name + " on " + std::to_string(plan->world_size()) +
                " x " + cluster->gpu.name;
    pic.lines = {"plan: " + describe(*plan),
                 "step " + fmt("%.4f s", res->report.step_time_s) + ", MFU " +
                     fmt("%.1f%%", 100 * res->report.mfu) + ", pipeline bubble " +
                     fmt("%.1f%%", 100 * res->report.bubble_fraction)};
    if (Status st = cli::write_file_atomic(args.get("html"), html::step_page(pic)); !st.ok())
      return cli::fail(kProgram, st);
  }
  if (args.has("json")) std::cout << json;
  else print_summary(*plan, *res, expected_band_line(*cluster, *hardware), *allocator);
  for (const Json& w : memory.warnings)
    cli::print_error_line(std::string(kProgram) + ": warning: " + w["message"].get<std::string>() + "\n");
  if (memory.over_capacity) return static_cast<int>(ExitCode::kInfeasible);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    return cli::fail(kProgram, Status::Error(std::string("internal error: ") + e.what(),
                                             ExitCode::kInternal));
  }
}
