// Plan report formatting; see report.h. Tested by tests/planner/report_test.cc.
#include "planner/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <string_view>
#include <tuple>
#include <vector>

#include "core/build_info.h"
#include "core/cost/cost_model.h"
#include "core/units.h"

namespace trainplan {

namespace {

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string schedule_label(const Plan& p) {
  if (p.pp == 1) return "-";
  std::string s(to_string(p.schedule));
  if (p.schedule == Schedule::kInterleaved) s += "x" + std::to_string(p.virtual_stages);
  return s;
}

std::string pad(const std::string& s, std::size_t w, bool right = true) {
  if (s.size() >= w) return s;
  return right ? std::string(w - s.size(), ' ') + s : s + std::string(w - s.size(), ' ');
}

// A table row: its label in the "#" column (the rank, or a reference layout's name).
struct Row {
  std::string label;
  const Candidate* cand;
};

std::vector<Row> ranked_rows(const PlanSearch& search) {
  std::vector<Row> rows;
  int i = 0;
  for (const Candidate& cand : search.ranked) rows.push_back({std::to_string(++i), &cand});
  return rows;
}

void table(std::ostringstream& os, const std::vector<Row>& rows, const ClusterSpec& c) {
  std::size_t label_width = 3;
  for (const Row& r : rows) label_width = std::max(label_width, r.label.size() + 1);
  std::vector<std::pair<std::string, std::size_t>> cols = {
      {"#", label_width},        {"tp", 3},       {"pp", 3},        {"dp", 4},       {"ep", 3},
      {"zero", 5},     {"mbs", 4},      {"schedule", 13}, {"recomp", 9},   {"sp", 3},
      {"step s", 9},   {"tokens/s", 10}, {"TFLOP/s", 8},   {"MFU", 6},      {"mem GB", 14},
      {"bubble", 7},   {"TP GB", 8},     {"PP GB", 7},     {"DP GB", 7}};
  // Context parallelism's columns (its degree after tp, its bytes last) only when a candidate
  // shown uses it, so that tables without it read as before.
  bool with_cp = false;
  for (const Row& r : rows) with_cp |= r.cand->plan.cp > 1;
  if (with_cp) {
    cols.insert(cols.begin() + 2, {"cp", 3});
    cols.push_back({"CP GB", 7});
  }
  // Folded expert layouts (Plan::expert_layout): the experts' tensor-parallel degree after ep,
  // only when a candidate shown folds ("-": carved).
  bool with_folded = false;
  for (const Row& r : rows) with_folded |= r.cand->plan.expert_layout == ExpertLayout::kFolded;
  const std::size_t ep_col = with_cp ? 6 : 5;
  if (with_folded) cols.insert(cols.begin() + static_cast<std::ptrdiff_t>(ep_col), {"etp", 4});
  for (const auto& [name, w] : cols) os << pad(name, w) << " ";
  os << "\n";
  for (const Row& row : rows) {
    const Candidate& cand = *row.cand;
    const Plan& p = cand.plan;
    const Estimate& e = cand.estimate;
    std::vector<std::string> v = {
        row.label + (cand.simulated ? "" : "*"),
        std::to_string(p.tp),
        std::to_string(p.pp),
        std::to_string(p.dp),
        std::to_string(p.ep),
        zero_label(p),
        std::to_string(p.micro_batch_size),
        schedule_label(p),
        recompute_label(p),
        p.sequence_parallel ? "y" : "n",
        fmt("%.3f", e.step_time_s),
        fmt("%.0f", e.tokens_per_s),
        fmt("%.1f", e.model_tflops_per_gpu),
        fmt("%.1f%%", e.mfu * 100),
        fmt("%.1f", e.peak_memory_bytes / kGB) + "/" + fmt("%.0f", c.gpu.hbm_bytes / kGB),
        fmt("%.1f%%", e.bubble_fraction * 100),
        fmt("%.2f", cand.comm.tp_bytes / kGB),
        fmt("%.2f", cand.comm.pp_bytes / kGB),
        fmt("%.2f", cand.comm.dp_bytes / kGB)};
    if (with_cp) {
      v.insert(v.begin() + 2, std::to_string(p.cp));
      v.push_back(fmt("%.2f", cand.comm.cp_bytes / kGB));
    }
    if (with_folded)
      v.insert(v.begin() + static_cast<std::ptrdiff_t>(ep_col),
               p.expert_layout == ExpertLayout::kFolded ? std::to_string(p.expert_tp_size())
                                                        : "-");
    for (std::size_t k = 0; k < v.size(); ++k) os << pad(v[k], cols[k].second) << " ";
    os << "\n";
  }
  bool any_analytic = false;
  for (const Row& r : rows) any_analytic |= !r.cand->simulated;
  if (any_analytic) os << "  * analytical estimate (not refined by the event simulator)\n";
  bool any_partial = false;
  for (const Row& r : rows) any_partial |= r.cand->plan.recompute_num_layers > 0;
  if (any_partial)
    os << "  full:N recomputes the first N layers of each model chunk, the fewest that fit\n"
          "  (Megatron-LM's --recompute-method block --recompute-num-layers N).\n";
  bool any_hybrid = false;
  for (const Row& r : rows) any_hybrid |= r.cand->plan.zero_shard_size > 0;
  if (any_hybrid)
    os << "  zero Z/N: ZeRO stage Z sharded over groups of N data-parallel ranks, the groups\n"
          "  replicas of each other (hybrid sharding: FSDP's HYBRID_SHARD, MiCS).\n";
  os << "  TFLOP/s and MFU count model FLOPs (no recompute); memory is the peak stage's; GB are\n"
        "  bytes one rank of that stage sends per step in each group.\n";
}

void rejections(std::ostringstream& os, const PlanSearch& s) {
  os << "Searched " << s.evaluated << " configurations: " << s.feasible << " feasible, "
     << s.rejections.total() << " rejected";
  if (s.truncated) os << " (search stopped at the evaluation bound)";
  os << ".\n";
  // Most configurations first; equal counts by category, last first.
  std::vector<std::tuple<std::int64_t, std::string_view, RejectReason>> by_count;
  for (RejectReason r : s.rejections.reasons())
    by_count.emplace_back(s.rejections.count(r), reject_category(r), r);
  std::sort(by_count.rbegin(), by_count.rend());
  for (const auto& [n, category, r] : by_count)
    os << "  " << pad(std::to_string(n), 9) << "  " << pad(std::string(category), 46, false)
       << " e.g. " << s.rejections.example(r) << "\n";
}

void run_estimate(std::ostringstream& os, const Candidate& c, const ReportContext& ctx) {
  if (!ctx.run_tokens) return;
  const double tokens_per_step =
      static_cast<double>(c.plan.global_batch_size) * static_cast<double>(ctx.model->seq_len);
  const double steps = std::ceil(*ctx.run_tokens / tokens_per_step);
  const double seconds = steps * c.estimate.step_time_s;
  const double gpus = static_cast<double>(c.plan.world_size());
  os << "Whole run: " << fmt("%.3g", *ctx.run_tokens) << " tokens = " << fmt("%.0f", steps)
     << " steps of " << fmt("%.0f", tokens_per_step) << " tokens: " << fmt("%.1f", seconds / 86400)
     << " days on " << c.plan.world_size() << " GPUs, " << fmt("%.3g", seconds * gpus / 3600)
     << " GPU-hours (at the estimated throughput, no restarts or evaluation).\n";
}

// How the pick compares with a reference layout, in one sentence; with a tie tolerance (the
// expected error band, planner.h TieBreak), whether the two are within it, as break_ties judges
// the ranked candidates.
std::string compare_reference(const Candidate& pick, const ReferenceLayout& ref,
                              double tolerance) {
  const std::string name = ref.label == "usual" ? "The usual layout" : "Your baseline";
  if (!ref.candidate) return name + " does not fit: " + ref.why_not + ".";
  const Candidate& r = *ref.candidate;
  std::ostringstream os;
  os << name << " (" << describe(r.plan) << "): " << fmt("%.3f", r.estimate.step_time_s)
     << " s per step, " << fmt("%.1f", r.estimate.peak_memory_bytes / kGB) << " GB peak";
  if (describe(r.plan) == describe(pick.plan)) {
    os << "; it is the recommendation.";
    return os.str();
  }
  const double a = pick.estimate.step_time_s, b = r.estimate.step_time_s;
  if (a <= b)
    os << "; the recommendation is " << fmt("%.1f", (b - a) / b * 100) << "% faster";
  else
    os << "; it is " << fmt("%.1f", (a - b) / a * 100) << "% faster than the recommendation";
  if (tolerance > 0)
    os << (std::max(a, b) <= std::min(a, b) * (1 + tolerance) ? ", within" : ", beyond")
       << " the expected error (" << fmt("%.0f", tolerance * 100) << "%)";
  const double dm = (pick.estimate.peak_memory_bytes - r.estimate.peak_memory_bytes) / kGB;
  if (std::fabs(dm) >= 0.05)
    os << "; the recommendation needs " << fmt("%.1f", std::fabs(dm)) << " GB "
       << (dm > 0 ? "more" : "less") << " per GPU";
  os << ".";
  return os.str();
}

// "Nothing fits" names what fills memory in the least-memory configuration, or, when the
// simulator dropped every configuration that fit by the estimate, in the one it simulated lowest.
void memory_cause(std::ostringstream& os, const ReportContext& ctx) {
  if (!ctx.memory_cause) return;
  const MemoryCause& m = *ctx.memory_cause;
  const MemoryBreakdown& b = m.breakdown;
  if (m.simulated)
    os << "The cause is " << m.what << ", as simulated: the " << m.dropped
       << " configurations that fit by the estimate all exceed the usable memory in the event "
          "simulator; the lowest simulated peak ("
       << m.plan << ") is " << fmt("%.1f", m.peak_bytes / kGB) << " GB per GPU: model states ";
  else
    os << "The cause is " << m.what << ": the configuration that needs the least memory ("
       << m.plan << ") still needs " << fmt("%.1f", m.peak_bytes / kGB)
       << " GB per GPU: model states ";
  os << fmt("%.1f", (b.weights_bytes + b.gradients_bytes + b.optimizer_bytes) / kGB)
     << " GB (weights " << fmt("%.1f", b.weights_bytes / kGB) << ", gradients "
     << fmt("%.1f", b.gradients_bytes / kGB) << ", optimizer " << fmt("%.1f", b.optimizer_bytes / kGB)
     << "), activations " << fmt("%.1f", b.activations_bytes / kGB) << " GB, buffers "
     << fmt("%.1f", b.buffers_bytes / kGB) << " GB.\n";
}

// ZeRO-Infinity's tiers (Rajbhandari et al. 2021): each tier's best plan with what its
// offload costs per step, then the recommendation (the fastest tier).
void infinity_tiers(std::ostringstream& os, const PlanResult& r, const ReportContext& ctx);

}  // namespace

// The ZeRO-Infinity tier search whose best plan is fastest, if any found one.
static const PlanSearch* best_infinity_search(const PlanResult& r) {
  const PlanSearch* best = nullptr;
  for (const PlanSearch& s : r.infinity_searches)
    if (!s.ranked.empty() &&
        (!best || s.ranked.front().estimate.step_time_s < best->ranked.front().estimate.step_time_s))
      best = &s;
  return best;
}

std::vector<std::string> plan_warnings(const PlanResult& r) {
  std::vector<std::string> out;
  const Candidate* w = recommended(r);
  if (w == nullptr) return out;
  const Plan& p = w->plan;
  // Context parallelism forced by the batch: fewer sequences than the dp x cp ranks that share
  // them, so data parallelism alone could not use those GPUs.
  if (p.cp > 1 && p.global_batch_size < p.dp * p.cp) {
    out.push_back("context parallelism " + std::to_string(p.cp) + " splits each sequence over " +
                  std::to_string(p.cp) + " GPUs because the batch (" +
                  std::to_string(p.global_batch_size) + " sequences) is smaller than the " +
                  std::to_string(p.dp * p.cp) +
                  " ranks that share it; a batch of at least that many sequences (--global-batch "
                  "or --tokens-per-step) lets data parallelism take them");
  }
  return out;
}

const Candidate* recommended(const PlanResult& r) {
  if (!r.search.ranked.empty()) return &r.search.ranked.front();
  if (r.offload_search && !r.offload_search->ranked.empty())
    return &r.offload_search->ranked.front();
  if (const PlanSearch* s = best_infinity_search(r)) return &s->ranked.front();
  return nullptr;
}

std::string explain_choice(const Candidate& w, const Candidate& r) {
  const Estimate& a = w.estimate;
  const Estimate& b = r.estimate;
  struct Part {
    const char* what;
    double winner, runner;
  };
  const double bubble_a = a.pipeline_s * a.bubble_fraction, bubble_b = b.pipeline_s * b.bubble_fraction;
  std::vector<Part> parts = {
      {"pipeline bubble", bubble_a, bubble_b},
      {"compute (recompute included)", a.compute_s, b.compute_s},
      {"tensor-parallel communication", a.tp_comm_s, b.tp_comm_s},
      {"exposed data-parallel communication", a.dp_exposed_s, b.dp_exposed_s},
      {"pipeline transfers", a.pp_comm_s, b.pp_comm_s},
      {"expert all-to-all", a.ep_comm_s, b.ep_comm_s},
      {"optimizer step", a.optimizer_s, b.optimizer_s},
      {"offload", a.offload_s, b.offload_s},
      {"context-parallel communication", a.cp_comm_s, b.cp_comm_s}};
  std::sort(parts.begin(), parts.end(), [](const Part& x, const Part& y) {
    return (y.runner - y.winner) < (x.runner - x.winner);
  });
  std::ostringstream os;
  const double gain = (b.step_time_s - a.step_time_s) / b.step_time_s * 100;
  if (gain <= -0.05) {
    // A tie broken by memory or simplicity (PlanSearch::ties) can pick the slower of the two.
    os << "The runner-up (" << describe(r.plan) << ") is predicted " << fmt("%.1f", -gain)
       << "% faster, inside the tie below";
  } else if (gain < 0.05) {
    os << "It ties with the runner-up (" << describe(r.plan) << ") within 0.05% in step time";
  } else {
    os << "It beats the runner-up (" << describe(r.plan) << ") by " << fmt("%.1f", gain)
       << "% in step time";
  }
  int said = 0;
  for (const Part& p : parts) {
    if (p.runner - p.winner <= 1e-6 * std::max(a.step_time_s, 1e-9)) break;
    os << (said == 0 ? ": " : "; ") << p.what << " " << fmt("%.3f", p.winner) << " s against "
       << fmt("%.3f", p.runner) << " s";
    if (++said == 2) break;
  }
  if (said == 0 && gain > -0.05) os << " with the same cost breakdown";
  const double mem_a = a.peak_memory_bytes / kGB, mem_b = b.peak_memory_bytes / kGB;
  if (std::fabs(mem_a - mem_b) > 0.05)
    os << "; it needs " << fmt("%.1f", mem_a) << " GB per GPU against " << fmt("%.1f", mem_b);
  os << ".";
  return os.str();
}

std::pair<double, double> measured_mfu_band(double predicted_mfu, const ErrorBand& band) {
  // MFU scales as 1 / step time: measured = predicted / (1 + error).
  return {predicted_mfu / (1 + band.relative_high), predicted_mfu / (1 + band.relative_low)};
}

std::string measured_pipeline_note(const Plan& plan, const MeasuredLayouts& measured) {
  if (!measured.known() || plan.pp == 1) return "";
  const std::size_t n = measured_runs(plan, measured);
  std::int64_t deepest = 0;
  std::size_t same_schedule = 0;
  for (const MeasuredLayout& m : measured.runs)
    if (m.schedule == plan.schedule) {
      deepest = std::max(deepest, m.pp);
      ++same_schedule;
    }
  const std::string what = std::string(to_string(plan.schedule)) + " at pp " +
                           std::to_string(plan.pp);
  if (n > 0)
    return "Its pipeline (" + what + " or deeper) was measured by " + std::to_string(n) +
           " of the " + measured.basis + ".";
  std::string out = "Its pipeline (" + what + ") was measured by none of the " + measured.basis;
  if (same_schedule == 0)
    out += ", which hold no " + std::string(to_string(plan.schedule)) + " run";
  else
    out += " (" + std::to_string(same_schedule) + " " + std::string(to_string(plan.schedule)) +
           " runs, the deepest at pp " + std::to_string(deepest) + ")";
  out += ": the band above does not cover it, and its figures are an extrapolation.";
  return out;
}

namespace {
// What the pick's fullest rank would show in a framework's log and in nvidia-smi: the reserve
// the allocator keeps over the allocated peak and the device memory in use with the CUDA context
// and NCCL's buffers (core/cost: reserved_bytes, device_runtime_bytes, with their sources). The
// fit above is the allocated peak against capacity less the headroom.
void device_memory(std::ostream& os, const Candidate& w, const ClusterSpec& c,
                   DeviceAllocator allocator) {
  const double reserved = reserved_bytes(w.estimate.peak_memory_bytes, allocator);
  const double in_use = reserved + device_runtime_bytes(w.plan, CudaModuleLoading::kLazy).total();
  os << "  On the device: ";
  if (allocator_reserve_modelled(allocator))
    os << "about " << fmt("%.1f", reserved / kGB) << " GB reserved if "
       << allocator_description(allocator) << " keeps its average "
       << fmt("%.0f", 100 * allocator_fragmentation(allocator))
       << "% over the allocations (GMLake), ";
  else
    os << "no reserve estimated for " << allocator_description(allocator)
       << " (no published fragmentation figure), ";
  os << fmt("%.1f", in_use / kGB) << " GB in use with the CUDA context and NCCL's buffers";
  if (in_use > c.gpu.hbm_bytes)
    os << ", above the " << fmt("%.0f", c.gpu.hbm_bytes / kGB)
       << " GB the GPU has: the allocator frees its cache and retries before it runs out, at "
          "some cost in speed"
       << (allocator == DeviceAllocator::kPyTorchCaching
               ? " (PyTorch's expandable_segments:True is meant to reduce that fragmentation)"
               : "");
  os << ".\n";
}

// The expected error of the figures above, and how the pick was made among candidates the
// model cannot tell apart (PlanSearch::ties).
void ties_and_band(std::ostream& os, const PlanSearch& s, const ReportContext& ctx) {
  if (!ctx.options) return;
  const ErrorBand& band = ctx.options->error_band;
  os << "  " << describe(band) << ".\n";
  if (band.known() && !s.ranked.empty()) {
    const auto [low, high] = measured_mfu_band(s.ranked.front().estimate.mfu, band);
    os << "  Runs like this measure " << fmt("%.0f", 100 * low) << "% to "
       << fmt("%.0f", 100 * high) << "% MFU: the predicted "
       << fmt("%.1f", 100 * s.ranked.front().estimate.mfu)
       << "% under the band above (it is a prediction; the band is how far measured runs fell "
          "from theirs).\n";
  }
  if (!s.ranked.empty()) {
    const std::string note = measured_pipeline_note(s.ranked.front().plan, ctx.options->measured);
    if (!note.empty()) os << "  " << note << "\n";
  }
  if (s.ties.tied <= 1) return;
  os << "  " << s.ties.tied << " candidates predict step times within "
     << fmt("%.0f", 100 * s.ties.tolerance)
     << "% of the fastest, the typical error above: they are tied. The pick is ";
  if (s.ties.measured == 1)
    os << "the only one whose pipeline published runs measured";
  else if (s.ties.measured > 1)
    os << "among the " << s.ties.measured
       << " whose pipeline published runs measured, the one with the most memory headroom, then "
          "the simplest layout";
  else
    os << "the one with the most memory headroom, then the simplest layout";
  if (!s.ties.fastest.empty()) os << " (the fastest prediction was " << s.ties.fastest << ")";
  os << ".\n";
}
}  // namespace

std::string default_batch_source(const ModelSpec& model) {
  const double params = count_parameters(model).total();
  char buf[400];
  std::snprintf(buf, sizeof buf,
                "default: the larger of GPT-3's batch for %.3gB parameters, %.3g tokens (Brown "
                "et al. 2020, Table 2.1), and one sequence per 8 GPUs, or per TP group where the "
                "heads allow less TP (Llama 3 405B); --global-batch or --tokens-per-step to "
                "change",
                params / 1e9, size_rule_tokens_per_step(params));
  return buf;
}

void add_usual_references(ReportContext& ctx, const PlanResult& result, const RefineFn& refine) {
  const std::int64_t gbs = result.search.global_batch_size;
  if (!result.fits()) {
    ctx.memory_cause = simulated_memory_cause(result.search);
    if (!ctx.memory_cause)
      ctx.memory_cause = least_memory_cause(*ctx.model, *ctx.cluster, *ctx.options, gbs);
    return;
  }
  ctx.references.push_back(usual_layout(*ctx.model, *ctx.cluster, *ctx.options, gbs, refine));
}

std::string format_plan_report(const PlanResult& r, const ReportContext& ctx) {
  const ModelSpec& m = *ctx.model;
  const ClusterSpec& c = *ctx.cluster;
  std::ostringstream os;
  const ParameterCounts counts = count_parameters(m);
  const double params = counts.total();
  os << "Model:   " << m.name << ": " << fmt("%.2f", params / 1e9) << "B parameters";
  if (m.is_moe()) os << " (" << fmt("%.2f", counts.active() / 1e9) << "B active)";
  os << ", "
     << m.num_layers << " layers, hidden " << m.hidden_size << ", " << m.num_attention_heads
     << " heads";
  if (m.num_kv_heads != m.num_attention_heads) os << " (" << m.num_kv_heads << " KV)";
  if (m.is_mla()) os << " (latent attention)";
  if (m.is_moe()) {
    os << ", " << m.num_experts << " experts top-" << m.experts_per_token;
    if (m.shared_expert_ffn_size > 0) os << " + shared";
    if (!m.dense_layers.empty()) os << ", " << m.dense_layers.size() << " dense layers";
  }
  os << ", sequence " << m.seq_len << "\n";
  os << "Cluster: " << c.num_nodes << " node" << (c.num_nodes > 1 ? "s" : "") << " x "
     << c.gpus_per_node << " " << c.gpu.name << " (" << fmt("%.0f", c.gpu.hbm_bytes / kGB)
     << " GB, " << fmt("%.0f", c.gpu.peak_flops_per_s(ctx.options->precision) / kTFLOP)
     << " TFLOP/s " << to_string(ctx.options->precision) << "), "
     << fmt("%.0f", c.intra_node_bytes_per_s / kGB) << " GB/s in a node, "
     << fmt("%.0f", c.inter_node_bytes_per_s / kGB) << " GB/s per GPU across nodes\n";
  const PlanSearch& s = r.search;
  os << "Batch:   " << s.global_batch_size << " sequences ("
     << fmt("%.0f", static_cast<double>(s.global_batch_size) * static_cast<double>(m.seq_len))
     << " tokens) per step, " << to_string(ctx.options->precision) << ", "
     << to_string(ctx.options->optimizer) << ", " << to_string(ctx.options->attention)
     << " attention, "
     << (ctx.options->grad_precision == GradPrecision::kFp32 ? "fp32 gradients, " : "") << fmt("%.0f", ctx.options->memory_headroom * 100)
     << "% memory headroom\n";
  if (!ctx.batch_source.empty()) os << "         (" << ctx.batch_source << ")\n";
  os << "\n";

  if (r.fits()) {
    os << "Top " << s.ranked.size() << " of " << s.feasible << " feasible configurations:\n";
    std::vector<Row> rows = ranked_rows(s);
    for (const ReferenceLayout& ref : ctx.references)
      if (ref.candidate) rows.push_back({ref.label, &*ref.candidate});
    table(os, rows, c);
    os << "\n";
    const Candidate& w = s.ranked.front();
    os << "Recommendation: " << describe(w.plan) << "\n  " << fmt("%.3f", w.estimate.step_time_s)
       << " s per step, " << fmt("%.0f", w.estimate.tokens_per_s) << " tokens/s, "
       << fmt("%.1f", w.estimate.model_tflops_per_gpu) << " TFLOP/s per GPU ("
       << fmt("%.1f", w.estimate.mfu * 100) << "% MFU), "
       << fmt("%.1f", w.estimate.peak_memory_bytes / kGB) << " GB peak on stage "
       << w.estimate.peak_stage << ".\n";
    device_memory(os, w, c,
                  ctx.options ? ctx.options->allocator : DeviceAllocator::kPyTorchCaching);
    if (!w.simulated && ctx.options && ctx.options->simulate_top > 0)
      os << "  (An analytical estimate: the event simulator's refinements ran out before it "
            "confirmed this candidate; check it with `simulate`.)\n";
    if (s.ranked.size() > 1) os << "  " << explain_choice(w, s.ranked[1]) << "\n";
    ties_and_band(os, s, ctx);
    for (const ReferenceLayout& ref : ctx.references)
      os << "  " << compare_reference(w, ref, s.ties.tolerance) << "\n";
    for (const std::string& warning : plan_warnings(r)) os << "Warning: " << warning << ".\n";
    run_estimate(os, w, ctx);
    os << "\n";
    rejections(os, s);
    return os.str();
  }

  // Say "nothing fits in memory" only when memory is what rejected configurations; otherwise
  // every one failed a structural check, listed below.
  if (!s.rejections.has(RejectReason::kMemory) &&
      !s.rejections.has(RejectReason::kMemorySimulated))
    os << "No configuration is feasible on " << c.total_gpus()
       << " GPUs, and none was rejected for memory: each failed a check listed below.\n";
  else
    os << "Nothing fits in GPU memory. ";
  os << "Model states alone (weights, gradients and "
     << to_string(ctx.options->optimizer) << " states, "
     << fmt("%.0f", state_bytes_per_param(ctx.options->precision, ctx.options->optimizer,
                                       ctx.options->grad_precision)
                     .total())
     << " bytes per parameter) need " << fmt("%.1f", r.min_state_bytes_per_gpu / kGB)
     << " GB per GPU even fully sharded over " << c.total_gpus() << " GPUs; each GPU has "
     << fmt("%.1f", c.gpu.hbm_bytes * (1 - ctx.options->memory_headroom) / kGB)
     << " GB usable (" << fmt("%.0f", c.gpu.hbm_bytes / kGB) << " GB less "
     << fmt("%.0f", ctx.options->memory_headroom * 100) << "% headroom).\n";
  memory_cause(os, ctx);
  if (r.min_gpus_without_offload)
    os << "Smallest GPU count that fits without offload: " << *r.min_gpus_without_offload << " ("
       << *r.min_gpus_without_offload / c.gpus_per_node << " nodes of " << c.gpus_per_node << ").\n";
  else
    os << "No GPU count up to the search bound fits without offload.\n";
  os << "\n";
  rejections(os, s);
  if (r.offload_search && !r.offload_search->ranked.empty()) {
    const PlanSearch& o = *r.offload_search;
    os << "\nWith optimizer states offloaded to host memory (ZeRO-Offload, Ren et al. 2021):\n";
    table(os, ranked_rows(o), c);
    const Candidate& w = o.ranked.front();
    os << "\nRecommendation: " << describe(w.plan) << "\n  "
       << fmt("%.3f", w.estimate.step_time_s) << " s per step, "
       << fmt("%.0f", w.estimate.tokens_per_s) << " tokens/s, "
       << fmt("%.1f", w.estimate.mfu * 100) << "% MFU, "
       << fmt("%.1f", w.estimate.peak_memory_bytes / kGB) << " GB peak per GPU, "
       << fmt("%.0f", w.estimate.host_memory_per_node_bytes / kGB)
       << " GB of optimizer states per node in host memory.\n"
       << "  The offload costs " << fmt("%.3f", w.estimate.offload_s) << " s per step ("
       << fmt("%.0f", w.estimate.offload_s / w.estimate.step_time_s * 100)
       << "% of the step): gradients and weights over PCIe and the optimizer step on the host.\n";
    if (o.ranked.size() > 1) os << "  " << explain_choice(w, o.ranked[1]) << "\n";
    ties_and_band(os, o, ctx);
    run_estimate(os, w, ctx);
  } else {
    os << "\nNo plan fits even with optimizer states offloaded to host memory.\n";
    if (r.offload_search) rejections(os, *r.offload_search);
    infinity_tiers(os, r, ctx);
  }
  return os.str();
}

namespace {
Json estimate_json(const Candidate& c) {
  const Estimate& e = c.estimate;
  Json j;
  j["plan"] = plan_to_json(c.plan);
  j["simulated"] = c.simulated;
  j["step_time_s"] = e.step_time_s;
  j["tokens_per_s"] = e.tokens_per_s;
  j["model_tflops_per_gpu"] = e.model_tflops_per_gpu;
  j["hardware_tflops_per_gpu"] = e.hardware_tflops_per_gpu;
  j["mfu"] = e.mfu;
  j["bubble_fraction"] = e.bubble_fraction;
  j["peak_memory_bytes"] = e.peak_memory_bytes;
  j["peak_stage"] = e.peak_stage;
  j["memory"] = {{"weights_bytes", e.peak_memory.weights_bytes},
                 {"gradients_bytes", e.peak_memory.gradients_bytes},
                 {"optimizer_bytes", e.peak_memory.optimizer_bytes},
                 {"activations_bytes", e.peak_memory.activations_bytes},
                 {"buffers_bytes", e.peak_memory.buffers_bytes},
                 {"host_optimizer_bytes", e.peak_memory.host_optimizer_bytes}};
  j["time_s"] = {{"pipeline", e.pipeline_s},       {"compute", e.compute_s},
                 {"tp_comm", e.tp_comm_s},         {"ep_comm", e.ep_comm_s},
                 {"pp_comm", e.pp_comm_s},         {"dp_comm", e.dp_comm_s},
                 {"dp_exposed", e.dp_exposed_s},   {"optimizer", e.optimizer_s},
                 {"offload", e.offload_s}};
  j["bytes_per_rank"] = {{"tp", c.comm.tp_bytes}, {"pp", c.comm.pp_bytes},
                         {"dp", c.comm.dp_bytes}, {"ep", c.comm.ep_bytes},
                         {"host", c.comm.host_bytes}};
  // Context parallelism's figures only for plans that use it (other reports keep their JSON).
  if (c.plan.cp > 1) {
    j["time_s"]["cp_comm"] = e.cp_comm_s;
    j["bytes_per_rank"]["cp"] = c.comm.cp_bytes;
  }
  return j;
}

Json search_json(const PlanSearch& s) {
  Json j;
  j["gpus"] = s.gpus;
  j["global_batch_size"] = s.global_batch_size;
  j["evaluated"] = s.evaluated;
  j["feasible"] = s.feasible;
  j["truncated"] = s.truncated;
  Json cands = Json::array();
  for (const Candidate& c : s.ranked) cands.push_back(estimate_json(c));
  j["candidates"] = cands;
  Json rej = Json::object();
  for (RejectReason r : s.rejections.reasons())
    rej[std::string(reject_category(r))] = {{"count", s.rejections.count(r)},
                                            {"example", s.rejections.example(r)}};
  j["rejections"] = rej;
  if (s.ties.tolerance > 0) {
    j["ties"] = {{"tolerance", s.ties.tolerance},
                 {"tied", s.ties.tied},
                 {"measured", s.ties.measured},
                 {"by_measured", s.ties.by_measured},
                 {"rule", "a pipeline published runs measured (where any tied candidate has "
                          "one), then the most memory headroom (within 5% of capacity of the "
                          "most), then the simplest layout, then the fastest"}};
    if (!s.ties.fastest.empty()) j["ties"]["fastest"] = s.ties.fastest;
  }
  return j;
}
}  // namespace

Json plan_report_to_json(const PlanResult& r, const ReportContext& ctx) {
  Json j;
  j["schema"] = "trainplan.plan_report/1";
  j["build"] = build_info_json();
  j["model"] = model_to_json(*ctx.model);
  j["cluster"] = cluster_to_json(*ctx.cluster);
  j["options"] = {{"precision", std::string(to_string(ctx.options->precision))},
                  {"optimizer", std::string(to_string(ctx.options->optimizer))},
                  {"attention", std::string(to_string(ctx.options->attention))},
                  {"grad_precision", std::string(to_string(ctx.options->grad_precision))},
                  {"memory_headroom", ctx.options->memory_headroom},
                  {"allow_cross_node_tp", ctx.options->allow_cross_node_tp}};
  if (ctx.options->max_cp > 0) j["options"]["max_cp"] = ctx.options->max_cp;
  if (ctx.options->error_band.known() || !ctx.options->error_band.basis.empty())
    j["error_band"] = error_band_to_json(ctx.options->error_band);
  j["fits"] = r.fits();
  j["search"] = search_json(r.search);
  if (!r.fits()) {
    j["min_state_bytes_per_gpu"] = r.min_state_bytes_per_gpu;
    j["min_gpus_without_offload"] =
        r.min_gpus_without_offload ? Json(*r.min_gpus_without_offload) : Json(nullptr);
    if (r.offload_search) j["offload_search"] = search_json(*r.offload_search);
    if (!r.infinity_searches.empty()) {
      Json tiers = Json::array();
      for (const PlanSearch& s : r.infinity_searches) tiers.push_back(search_json(s));
      j["infinity_searches"] = std::move(tiers);
    }
  }
  if (const Candidate* w = recommended(r)) {
    Json rec = estimate_json(*w);
    const PlanSearch* infinity = best_infinity_search(r);
    const PlanSearch& s = r.fits()                                        ? r.search
                          : r.offload_search && !r.offload_search->ranked.empty() ? *r.offload_search
                                                                                 : *infinity;
    if (s.ranked.size() > 1) rec["why"] = explain_choice(*w, s.ranked[1]);
    if (ctx.options->error_band.known()) {
      const auto [low, high] = measured_mfu_band(w->estimate.mfu, ctx.options->error_band);
      rec["measured_mfu_band"] = {low, high};
    }
    if (ctx.options->measured.known()) {
      rec["measured_runs"] = measured_runs(w->plan, ctx.options->measured);
      const std::string note = measured_pipeline_note(w->plan, ctx.options->measured);
      if (!note.empty()) rec["measured_note"] = note;
    }
    if (ctx.run_tokens) {
      const double tokens_per_step = static_cast<double>(w->plan.global_batch_size) *
                                     static_cast<double>(ctx.model->seq_len);
      const double steps = std::ceil(*ctx.run_tokens / tokens_per_step);
      const double seconds = steps * w->estimate.step_time_s;
      rec["run"] = {{"tokens", *ctx.run_tokens},
                    {"steps", steps},
                    {"days", seconds / 86400},
                    {"gpu_hours", seconds * static_cast<double>(w->plan.world_size()) / 3600}};
    }
    j["recommendation"] = rec;
    Json refs = Json::array();
    for (const ReferenceLayout& ref : ctx.references) {
      Json one = {{"label", ref.label},
                  {"comparison", compare_reference(*w, ref, r.search.ties.tolerance)}};
      if (ref.candidate) one["candidate"] = estimate_json(*ref.candidate);
      else one["why_not"] = ref.why_not;
      refs.push_back(one);
    }
    if (!ctx.references.empty()) j["references"] = refs;
  } else {
    j["recommendation"] = nullptr;
  }
  const std::vector<std::string> warnings = plan_warnings(r);
  if (!warnings.empty()) j["warnings"] = warnings;
  if (!ctx.batch_source.empty()) j["batch_source"] = ctx.batch_source;
  if (ctx.memory_cause) {
    j["memory_cause"] = {{"what", ctx.memory_cause->what},
                         {"least_memory_plan", ctx.memory_cause->plan},
                         {"peak_memory_bytes", ctx.memory_cause->peak_bytes}};
    // Only when the simulator dropped them all, so that other outputs keep their bytes.
    if (ctx.memory_cause->simulated)
      j["memory_cause"]["dropped_by_simulation"] = ctx.memory_cause->dropped;
  }
  return j;
}

}  // namespace trainplan

namespace trainplan {
namespace {
void infinity_tiers(std::ostringstream& os, const PlanResult& r, const ReportContext& ctx) {
  const ClusterSpec& c = *ctx.cluster;
  for (const PlanSearch& s : r.infinity_searches) {
    if (s.ranked.empty()) continue;
    const Candidate& w = s.ranked.front();
    const Estimate& e = w.estimate;
    const bool nvme = w.plan.offload_device == OffloadDevice::kNvme;
    os << "\nWith parameters, gradients and optimizer states offloaded ("
       << (nvme ? "ZeRO-Infinity, NVMe tier" : "ZeRO-3 offload, host memory")
       << ", Rajbhandari et al. 2021):\n";
    table(os, ranked_rows(s), c);
    os << "  Best: " << describe(w.plan) << ": " << fmt("%.3f", e.step_time_s) << " s per step, "
       << fmt("%.1f", e.peak_memory_bytes / kGB) << " GB peak per GPU, "
       << fmt("%.0f", e.host_memory_per_node_bytes / kGB) << " GB per node in host memory";
    if (nvme) os << ", " << fmt("%.0f", e.nvme_per_node_bytes / kGB) << " GB per node on NVMe";
    os << ".\n  The offload costs " << fmt("%.3f", e.offload_s) << " s per step ("
       << fmt("%.0f", e.offload_s / e.step_time_s * 100) << "% of the step): "
       << fmt("%.1f", e.pcie_bytes_per_step / kGB) << " GB over PCIe per GPU";
    if (nvme) os << ", " << fmt("%.1f", e.nvme_bytes_per_step / kGB) << " GB to and from NVMe";
    os << " per step.\n";
  }
  const PlanSearch* best = best_infinity_search(r);
  if (!best) {
    os << "\nNo plan fits with parameters and gradients offloaded either (host memory or "
          "NVMe).\n";
    for (const PlanSearch& s : r.infinity_searches) rejections(os, s);
    return;
  }
  os << "\nRecommendation: " << describe(best->ranked.front().plan) << "\n";
  run_estimate(os, best->ranked.front(), ctx);
}
}  // namespace
}  // namespace trainplan
