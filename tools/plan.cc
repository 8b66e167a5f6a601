// plan: how should this model be split across these GPUs?
//   plan --model models/gpt3.json --gpus 32 [--json] [--emit-plan FILE] [--tokens N] [--trace FILE]
//        [--max-cp N] [--cp-comm p2p|all-gather|a2a|torch-allgather|torch-alltoall]
//        [--tie-tolerance X]
// Ranks every feasible configuration by an analytical estimate, refines the best with the event
// simulator, and prints a recommendation with the reason it wins. See README.md.
#include <cmath>
#include <cstdio>
#include <iostream>
#include <string>
#include <string_view>
#include <utility>

#include "core/html_report.h"
#include "core/units.h"
#include "planner/planner.h"
#include "planner/reference.h"
#include "planner/refine.h"
#include "planner/report.h"
#include "simulator/simulator.h"
#include "validation/coverage.h"
#include "validation/error_band.h"
#include "tools/cli.h"

using namespace trainplan;

namespace {

// The batch the search runs at, and how it was chosen (said in the report).
struct Batch {
  std::int64_t sequences = 0;  // 0: the planner's default
  std::string source;
};

Result<Batch> batch_from_args(const cli::Args& args, const ModelSpec& model,
                              const ClusterSpec& cluster) {
  if (args.has("global-batch") && args.has("tokens-per-step"))
    return Status::Error("--global-batch and --tokens-per-step cannot be combined: give the batch "
                         "in sequences or in tokens", ExitCode::kUsage);
  if (args.has("global-batch")) {
    auto gbs = args.get_int("global-batch", 0, 1, PlanLimits::kMaxBatch);
    if (!gbs.ok()) return gbs.status();
    return Batch{*gbs, "--global-batch " + std::to_string(*gbs)};
  }
  const auto seq = static_cast<double>(model.seq_len);
  if (args.has("tokens-per-step")) {
    auto tokens = args.get_double("tokens-per-step", 0, 1, static_cast<double>(PlanLimits::kMaxBatch) * seq);
    if (!tokens.ok()) return tokens.status();
    const auto sequences = static_cast<std::int64_t>(std::llround(*tokens / seq));
    if (sequences < 1)
      return Status::Error("--tokens-per-step: " + args.get("tokens-per-step") +
                               " tokens is less than one sequence of " +
                               std::to_string(model.seq_len) + " tokens",
                           ExitCode::kUsage);
    return Batch{sequences, "--tokens-per-step " + args.get("tokens-per-step") + ": " +
                                std::to_string(sequences) + " sequences of " +
                                std::to_string(model.seq_len) + " tokens"};
  }
  return Batch{default_global_batch(model, cluster.total_gpus()), default_batch_source(model)};
}

// The usual layout, and --baseline FILE, beside the pick.
Status add_references(const cli::Args& args, const ModelSpec& model, const ClusterSpec& cluster,
                      const PlannerOptions& opt, const PlanResult& result, const RefineFn& refine,
                      ReportContext& ctx) {
  add_usual_references(ctx, result, refine);
  if (!result.fits() && args.has("baseline"))
    return Status::Error("--baseline: nothing fits in GPU memory, so there is no pick to compare "
                         "it with", ExitCode::kInfeasible);
  if (!result.fits()) return Status::Ok();
  const std::int64_t gbs = result.search.global_batch_size;
  if (!args.has("baseline")) return Status::Ok();
  const std::string path = args.get("baseline");
  auto plan = cli::load_plan(path);
  if (!plan.ok()) return Status::Error("--baseline: " + plan.status().message(), plan.status().code());
  if (plan->global_batch_size != gbs)
    return Status::Error("--baseline '" + path + "': global_batch_size " +
                             std::to_string(plan->global_batch_size) +
                             " differs from the batch searched (" + std::to_string(gbs) +
                             " sequences); pass --global-batch " +
                             std::to_string(plan->global_batch_size) + " or edit the file",
                         ExitCode::kUsage);
  auto ref = evaluate_layout(model, cluster, opt, *plan, "baseline", refine);
  if (!ref.ok())
    return Status::Error("--baseline '" + path + "': " + ref.status().message(), ExitCode::kInfeasible);
  ctx.references.push_back(std::move(*ref));
  return Status::Ok();
}

// The picture's points: every feasible candidate's analytical estimate (small dots), the table's
// candidates over them, the tie (TieBreak: the head of the table within the error band) and
// the pick, the usual layout and the baseline.
void add_candidate_points(const PlanSearch& search, const Candidate* best, const ReportContext& ctx,
                          html::PlanPicture& pic) {
  for (const auto& [step_s, memory_bytes] : search.feasible_estimates)
    pic.points.push_back(html::Point{step_s, memory_bytes, "feasible", ""});
  auto point = [](const Candidate& c, std::string mark) {
    char buf[64];
    std::snprintf(buf, sizeof buf, ": %.4f s, %.1f GB", c.estimate.step_time_s,
                  c.estimate.peak_memory_bytes / kGB);
    return html::Point{c.estimate.step_time_s, c.estimate.peak_memory_bytes, std::move(mark),
                       describe(c.plan) + buf + (c.simulated ? "" : " (analytical)")};
  };
  for (std::size_t i = 0; i < search.ranked.size(); ++i) {
    const Candidate& c = search.ranked[i];
    const bool tied = search.ties.tied > 1 && i < search.ties.tied;
    pic.points.push_back(point(c, &c == best ? "pick" : tied ? "tie" : ""));
  }
  for (const ReferenceLayout& ref : ctx.references)
    if (ref.candidate) pic.points.push_back(point(*ref.candidate, ref.label));
}

// What the candidate plot holds, said under the title.
std::string candidates_line(const PlanSearch& search) {
  std::string line = "Candidates: all " + std::to_string(search.feasible_estimates.size()) +
                     " the search found feasible, as estimated (small dots); the table's " +
                     std::to_string(search.ranked.size()) +
                     " over them, as ranked (simulated where refined).";
  if (search.ties.tied > 1) {
    char buf[160];
    std::snprintf(buf, sizeof buf,
                  " The pick is tied with %zu others within %.1f%% of the fastest step time "
                  "(the expected error), marked 'tie'.",
                  search.ties.tied - 1, 100.0 * search.ties.tolerance);
    line += buf;
  }
  return line;
}

// plan --html FILE: every feasible candidate's estimate as step time against peak memory, the
// table's candidates over them with the pick, the ties, the usual layout and the baseline
// marked, and the recommendation's simulated step.
Status write_html(const std::string& path, const ModelSpec& model, const ClusterSpec& cluster,
                  const PlannerOptions& opt, const PlanResult& result, const ReportContext& ctx,
                  const SimOptions& sim_opt) {
  html::PlanPicture pic;
  pic.title = "trainplan plan: " + model.name + " on " + std::to_string(cluster.total_gpus()) +
              " x " + cluster.gpu.name;
  pic.capacity_bytes = cluster.gpu.hbm_bytes;
  pic.usable_bytes = cluster.gpu.hbm_bytes * (1.0 - opt.memory_headroom);
  const Candidate* best = recommended(result);
  const PlanSearch& search = result.fits() || !result.offload_search ? result.search
                                                                     : *result.offload_search;
  add_candidate_points(search, best, ctx, pic);
  if (best == nullptr) {
    pic.lines.push_back("Nothing fits, even with optimizer states offloaded.");
    return cli::write_file_atomic(path, html::plan_page(pic));
  }
  pic.lines.push_back("Recommendation: " + describe(best->plan));
  for (const ReferenceLayout& ref : ctx.references)
    if (ref.candidate) pic.lines.push_back(ref.label + ": " + describe(ref.candidate->plan));
  pic.lines.push_back(candidates_line(search));
  SimOptions picture_opt = sim_opt;
  picture_opt.collect_picture = true;
  picture_opt.extrapolate_above_micro_batches = 0;
  auto sim = simulate_step(model, cluster, best->plan, picture_opt);
  if (!sim.ok()) return sim.status();
  pic.pick = std::move(*sim->picture);
  pic.pick->usable_bytes = pic.usable_bytes;
  return cli::write_file_atomic(path, html::plan_page(pic));
}

// The expected error of the predictions (validation/error_band.h): from the published runs of
// the GPU's generation. A measured hardware profile has its own check, the predicted-vs-measured
// benchmark, so it gets no band from GPUs (and no ties unless --tie-tolerance).
ErrorBand expected_band(const ClusterSpec& cluster,
                        const std::optional<HardwareProfile>& hardware) {
  if (!hardware) return expected_error_band(cluster.gpu.name, corpus_residuals());
  ErrorBand none;
  none.basis = "not from published runs (a measured hardware profile: see "
               "bench/predicted_vs_measured.sh)";
  return none;
}

int run(int argc, char** argv) {
  auto options = cli::model_cluster_options();
  options.insert(options.end(), {
      {"global-batch", true,
       "sequences per optimizer step (default: grows with the model and the GPU count, see "
       "docs/planner.md)"},
      {"tokens-per-step", true, "tokens per optimizer step, rounded to whole sequences (instead "
                                "of --global-batch)"},
      {"baseline", true, "your own plan JSON, costed and shown beside the recommendation"},
      {"precision", true, "bf16 (default; fp16 on a GPU without bf16, V100), fp16 or fp32"},
      {"optimizer", true, "adamw (default), sgd or sgd-momentum"},
      {"attention", true, "fused (default, FlashAttention-style) or unfused"},
      {"grad-precision", true,
       "compute (default: gradients in the weights' precision) or fp32 (Megatron-LM's bf16 "
       "default: fp32 accumulation and reduction)"},
      {"memory-headroom", true, "fraction of GPU memory kept free (default 0.10)"},
      cli::allocator_option(),
      {"allow-cross-node-tp", false, "consider tensor parallelism across nodes"},
      {"fp8", false, "train the linear layers' GEMMs in FP8 (Hopper or newer)"},
      {"fp8-scaling", true,
       "with --fp8: current (default; amax then cast, TE Float8CurrentScaling, torchao), delayed "
       "(amax history, TE DelayedScaling, Megatron/NeMo before TE 2.2), block (MXFP8) or nvfp4 "
       "(TE NVFP4BlockScaling: the linear GEMMs in FP4 at the FP4 rate, Blackwell)"},
      {"fp8-weight-cache", false,
       "with --fp8: weights cast once per step and reused by its micro-batches (Transformer "
       "Engine under Megatron-Core)"},
      {"tp-comm-overlap", false,
       "overlap sequence parallelism's TP all-gathers and reduce-scatters with the GEMMs beside "
       "them (Megatron-Core's --tp-comm-overlap, PyTorch async TP)"},
      {"no-hybrid-shard", false,
       "shard ZeRO over all data-parallel ranks only (by default the search also tries shard "
       "groups of 1, 2 and 4 nodes, replicated across: FSDP's HYBRID_SHARD)"},
      {"no-zero-bubble", false,
       "search gpipe, 1f1b and interleaved only: leave out the zero-bubble schedules zb-h1 and "
       "zb-v (Qi et al. 2023, 2024) and DeepSeek-V3's dualpipe"},
      {"no-fold-experts", false,
       "MoE: carve the expert-parallel group out of the data-parallel ranks only (by default the "
       "search also folds it over each stage's tp x cp x dp ranks with expert_tp 1 and tp: "
       "Megatron-Core's MoE parallel folding)"},
      {"ep-overlap", false, "MoE: overlap the expert all-to-all of one micro-batch with another's compute (Megatron-Core's overlap_moe_expert_parallel_comm; needs interleaving when pp > 1)"},
      {"max-cp", true,
       "largest context-parallel degree searched (default: no bound; 1: no context "
       "parallelism; it is searched for sequences of 8192 tokens or more)"},
      {"cp-comm", true,
       "how context parallelism exchanges keys and values: p2p (default; Transformer Engine's "
       "ring, Megatron-Core's default), all-gather (Llama 3; TE's all_gather), a2a (Ulysses), "
       "torch-allgather or torch-alltoall (PyTorch's context_parallel, torchtitan)"},
      {"tie-tolerance", true,
       "relative step-time difference within which candidates are tied and chosen by memory "
       "headroom, then the simplest layout (default: the typical cross-validated error of "
       "published runs on this GPU generation; 0: no ties)"},
      {"no-prefer-measured", false,
       "among tied candidates, do not prefer those whose pipeline schedule published runs "
       "measured at that depth on this GPU generation (validation/corpus)"},
      {"top", true, "candidates to show (default 10)"},
      {"simulate-top", true, "candidates refined by the event simulator (default 8, 0: none)"},
      {"threads", true, "threads simulating candidates at once (default 0: every core; the "
                        "result is the same for any count)"},
      {"tokens", true, "training tokens, for a whole-run estimate (days, GPU-hours)"},
      {"json", false, "print the report as JSON (schema trainplan.plan_report/1)"},
      {"emit-plan", true, "write the recommended plan to FILE (for simulate and execute)"},
      {"trace", true, "write the recommended plan's simulated timeline (Chrome trace) to FILE"},
      {"html", true, "write a self-contained HTML report (candidates: step time against peak "
                     "memory; the pick's timeline) to FILE"},
  });
  for (const auto& o : cli::progress_options()) options.push_back(o);
  cli::Args args("plan", "Rank the ways to split a training run across GPUs and recommend one.",
                 options);
  if (Status st = args.parse(argc, argv); !st.ok()) return cli::fail("plan", st);
  if (args.help_requested()) {
    std::cout << args.usage();
    return 0;
  }
  auto model = cli::load_model(args);
  if (!model.ok()) return cli::fail("plan", model.status());
  auto cluster = cli::load_cluster(args);
  if (!cluster.ok()) return cli::fail("plan", cluster.status());
  auto hardware = cli::load_hardware(args);
  if (!hardware.ok()) return cli::fail("plan", hardware.status());

  PlannerOptions opt;
  opt.hardware = *hardware;
  auto batch = batch_from_args(args, *model, *cluster);
  if (!batch.ok()) return cli::fail("plan", batch.status());
  auto headroom = args.get_double("memory-headroom", 0.10, 0.0, 0.99);
  auto allocator = cli::load_allocator(args);
  if (!allocator.ok()) return cli::fail("plan", allocator.status());
  opt.allocator = *allocator;
  auto top = args.get_int("top", 10, 1, 1000);
  auto sim_top = args.get_int("simulate-top", 8, 0, 1000);
  auto tokens = args.get_double("tokens", 0, 1, 1e18);
  auto max_cp = args.get_int("max-cp", 0, 1, PlanLimits::kMaxDegree);
  auto threads = args.get_int("threads", 0, 0, 4096);
  if (!threads.ok()) return cli::fail("plan", threads.status());
  opt.refine_threads = static_cast<unsigned>(*threads);
  auto tie_tolerance = args.get_double("tie-tolerance", -1, 0.0, 1.0);
  for (const Status& st : {headroom.status(), top.status(), sim_top.status(),
                           tokens.status(), max_cp.status(), tie_tolerance.status()})
    if (!st.ok()) return cli::fail("plan", st);
  opt.tie_tolerance = *tie_tolerance;
  opt.error_band = expected_band(*cluster, *hardware);
  // The layouts published runs measured on this GPU generation, as the band is chosen; a
  // measured hardware profile has its own check (see expected_band).
  if (!*hardware) opt.measured = measured_layouts_for(cluster->gpu.name, corpus_layouts());
  opt.prefer_measured = !args.has("no-prefer-measured");
  opt.max_cp = *max_cp;
  opt.global_batch_size = batch->sequences;
  opt.memory_headroom = *headroom;
  opt.top_k = *top;
  opt.simulate_top = *sim_top;
  opt.allow_cross_node_tp = args.has("allow-cross-node-tp");
  opt.fp8 = args.has("fp8");
  opt.ep_overlap = args.has("ep-overlap");
  opt.tp_comm_overlap = args.has("tp-comm-overlap");
  opt.hybrid_shard = !args.has("no-hybrid-shard");
  opt.zero_bubble = !args.has("no-zero-bubble");
  opt.fold_experts = !args.has("no-fold-experts");
  auto choice = [&](const char* name, std::initializer_list<const char*> names, int& out) {
    if (!args.has(name)) return Status::Ok();
    int i = 0;
    std::string allowed;
    for (const char* n : names) {
      if (args.get(name) == n) {
        out = i;
        return Status::Ok();
      }
      allowed += (i++ > 0 ? ", " : "") + std::string(n);
    }
    return Status::Error(std::string("--") + name + ": unknown value '" + args.get(name) +
                             "' (expected one of: " + allowed + ")",
                         ExitCode::kUsage);
  };
  int precision = 0, optimizer = 0, attention = 0, grad_precision = 0, fp8_scaling = 0;
  int cp_comm = static_cast<int>(opt.cp_comm);
  for (const Status& st : {choice("precision", {"bf16", "fp16", "fp32"}, precision),
                           choice("cp-comm", {"all-gather", "p2p", "a2a", "torch-allgather",
                                              "torch-alltoall"}, cp_comm),
                           choice("fp8-scaling", {"current", "delayed", "block", "nvfp4"},
                                  fp8_scaling),
                           choice("optimizer", {"adamw", "sgd", "sgd-momentum"}, optimizer),
                           choice("attention", {"fused", "unfused"}, attention),
                           choice("grad-precision", {"compute", "fp32"}, grad_precision)})
    if (!st.ok()) return cli::fail("plan", st);
  opt.precision = static_cast<Precision>(precision);
  // bf16 is the default where the GPU has it; Volta has fp16 tensor cores only.
  if (!args.has("precision") && !hardware->has_value() &&
      cluster->gpu.peak_flops_per_s(Precision::kBf16) <= 0)
    opt.precision = Precision::kFp16;
  opt.optimizer = static_cast<Optimizer>(optimizer);
  opt.attention = static_cast<AttentionImpl>(attention);
  opt.grad_precision = static_cast<GradPrecision>(grad_precision);
  opt.fp8_scaling = static_cast<Fp8Scaling>(fp8_scaling);
  opt.cp_comm = static_cast<CpComm>(cp_comm);
  opt.fp8_weight_cache = args.has("fp8-weight-cache");
  if (!opt.fp8 && (args.has("fp8-scaling") || opt.fp8_weight_cache))
    return cli::fail("plan", Status::Error(std::string(args.has("fp8-scaling") ? "--fp8-scaling"
                                                                               : "--fp8-weight-cache") +
                                               " describes FP8 casts and needs --fp8",
                                           ExitCode::kUsage));
  const bool json = args.has("json");
  cli::Progress refining("plan", "simulating the best candidates", cli::progress_mode(args));
  opt.refine_progress = [&](std::int64_t done, std::int64_t total) { refining.update(done, total); };
  if (!json && !args.has("quiet")) {
    opt.progress = [](std::int64_t evaluated, std::int64_t) {
      std::fprintf(stderr, "plan: searching... %lld configurations evaluated\n",
                   static_cast<long long>(evaluated));
    };
  }

  SimOptions sim_opt;
  sim_opt.hardware = *hardware;
  // Long pipelines are played as two short steps and extrapolated (exact for a filled,
  // periodic pipeline; see SimOptions): keeps `plan` well under a second.
  sim_opt.extrapolate_above_micro_batches = 32;
  const RefineFn refine = simulator_refine(*model, *cluster, sim_opt);
  auto result = plan_training(*model, *cluster, opt, refine);
  refining.finish();
  if (!result.ok()) return cli::fail("plan", result.status());

  ReportContext ctx{&*model, &*cluster, &opt, {}, {}, {}, batch->source};
  if (Status st = add_references(args, *model, *cluster, opt, *result, refine, ctx); !st.ok())
    return cli::fail("plan", st);
  if (args.has("tokens")) ctx.run_tokens = *tokens;
  if (json) {
    std::cout << plan_report_to_json(*result, ctx).dump(2) << "\n";
  } else {
    std::cout << format_plan_report(*result, ctx);
  }
  const Candidate* best = recommended(*result);
  if (args.has("emit-plan")) {
    if (best == nullptr)
      return cli::fail("plan", Status::Error("no plan to emit: nothing fits, even with offload",
                                             ExitCode::kInfeasible));
    if (Status st = cli::write_file_atomic(args.get("emit-plan"), plan_to_json(best->plan).dump(2) + "\n");
        !st.ok())
      return cli::fail("plan", st);
  }
  if (args.has("trace") && best != nullptr) {
    SimOptions trace_opt = sim_opt;
    trace_opt.collect_trace = true;
    trace_opt.extrapolate_above_micro_batches = 0;
    trace_opt.trace_limit_bytes = 2e9;  // as simulate's default --trace-limit-gb
    cli::AtomicFileWriter trace_file(args.get("trace"));
    if (Status st = trace_file.open(); !st.ok()) return cli::fail("plan", st);
    trace_opt.trace_sink = [&](std::string_view chunk) { trace_file.write(chunk); };
    auto sim = simulate_step(*model, *cluster, best->plan, trace_opt);
    if (!sim.ok()) return cli::fail("plan", sim.status());
    if (Status st = trace_file.commit(); !st.ok()) return cli::fail("plan", st);
  }
  if (args.has("html"))
    if (Status st = write_html(args.get("html"), *model, *cluster, opt, *result, ctx, sim_opt);
        !st.ok())
      return cli::fail("plan", st);
  if (best == nullptr) return static_cast<int>(ExitCode::kInfeasible);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "plan: internal error: " << e.what() << std::endl;
    return static_cast<int>(ExitCode::kInternal);
  }
}
