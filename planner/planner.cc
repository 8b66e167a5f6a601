// The search (the generator's candidates through the pruning rules, estimated and ranked),
// its refinement by the simulator, and the nothing-fits path; see planner.h. Tested by tests/planner/planner_test.cc.
#include "planner/planner.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "planner/search.h"
#include "simulator/parallel.h"

namespace trainplan {

namespace {

double d(std::int64_t v) { return static_cast<double>(v); }

// A full-recompute plan `p` that fits in `usable` bytes, and does not without recompute
// (recompute_rules() rejects it otherwise): sets recompute_num_layers to the fewest layers per
// chunk that still fit (0, every layer, when only all of them do). Peak memory falls as more
// layers are recomputed, so bisection finds it.
void fewest_recomputed_layers(const Estimator& est, const ModelSpec& m, Plan& p, double usable) {
  const std::vector<std::int64_t> chunks = chunk_layers(p, m);
  const std::int64_t largest = *std::max_element(chunks.begin(), chunks.end());
  std::int64_t lo = 1, hi = largest;  // hi fits (every layer)
  while (lo < hi) {
    const std::int64_t mid = lo + (hi - lo) / 2;
    p.recompute_num_layers = mid;
    if (est.peak_memory_bytes(p) <= usable) hi = mid;
    else lo = mid + 1;
  }
  p.recompute_num_layers = hi < largest ? hi : 0;
}

// The search's sink: counts what the generator enumerates, applies the candidate rules (the
// ones that need the estimate among them) and keeps the best by estimated step time.
class Evaluation final : public CandidateSink {
 public:
  Evaluation(Estimator& est, const PlannerOptions& opt, bool offload, PlanSearch& out)
      : est_(est), m_(est.model()), c_(est.cluster()), opt_(opt), offload_(offload), out_(out),
        usable_(c_.gpu.hbm_bytes * (1.0 - opt.memory_headroom)),
        host_usable_(c_.host_memory_bytes_per_node * (1.0 - opt.memory_headroom)),
        // top_k for the report, or more when the simulator refines, so that the best of every
        // ZeRO stage is among them (plan_training then cuts the list to top_k).
        kept_(std::max(opt.top_k, 8 * opt.simulate_top)),
        last_progress_(std::chrono::steady_clock::now()) {}

  // Layouts rejected whole count too: the bound holds to within one layout even when nothing
  // fits (CP multiplies the layouts).
  bool begin_layout() override {
    if (out_.evaluated < opt_.max_evaluations) return true;
    out_.truncated = true;
    return false;
  }

  void pruned(RejectReason reason, std::int64_t configurations,
              const std::function<std::string()>& message) override {
    out_.rejections.add(reason, configurations, message);
    out_.evaluated += configurations;
  }

  bool candidate(Plan& p) override {
    ++out_.evaluated;
    std::optional<Candidate> cand = evaluate(p);
    if (!cand) return true;
    ++out_.feasible;
    out_.feasible_estimates.emplace_back(cand->estimate.step_time_s,
                                         cand->estimate.peak_memory_bytes);
    keep(std::move(*cand));
    if (opt_.stop_at_first_feasible) return false;
    if (out_.evaluated >= opt_.max_evaluations) {
      out_.truncated = true;
      return false;
    }
    report_progress();
    return true;
  }

 private:
  // Counts a rejection when `rule` is one; true when it was.
  template <typename Facts>
  bool reject(const PruneRule<Facts>* rule, const Facts& facts) {
    if (rule == nullptr) return false;
    out_.rejections.add(rule->reason, 1, [&] { return rule->message(facts); });
    return true;
  }

  // The candidate with its estimate, or nothing when a rule rejects it.
  std::optional<Candidate> evaluate(Plan& p) {
    const CandidateFacts shape{&m_, &p};
    if (reject(first_rejecting(candidate_rules(), shape), shape)) return std::nullopt;
    MemoryFacts memory{0, 0, usable_, c_.gpu.hbm_bytes, opt_.memory_headroom};
    memory.peak_bytes = est_.peak_memory_bytes(p, &memory.peak_stage);
    if (reject(first_rejecting(memory_rules(), memory), memory)) return std::nullopt;
    const RecomputeFacts recompute{&est_, &p, usable_};
    if (reject(first_rejecting(recompute_rules(), recompute), recompute)) return std::nullopt;
    // Full recompute that fits: recompute only as many layers of each chunk as memory needs
    // (the fewest: fewer recomputed layers keep more), as a Megatron-LM user sets
    // --recompute-num-layers.
    if (p.recompute == Recompute::kFull) fewest_recomputed_layers(est_, m_, p, usable_);
    Candidate cand;
    cand.estimate = est_.estimate(p);
    cand.plan = std::move(p);
    const HostMemoryFacts host{offload_, cand.estimate.host_memory_per_node_bytes, host_usable_,
                               c_.host_memory_bytes_per_node,
                               cand.estimate.nvme_per_node_bytes, c_.nvme_bytes_per_node,
                               cand.plan.offload == Offload::kOptimizerParams};
    if (reject(first_rejecting(host_memory_rules(), host), host)) return std::nullopt;
    return cand;
  }

  // Keeps the best kept_ by step time in a small sorted vector.
  void keep(Candidate cand) {
    auto& v = out_.ranked;
    if (static_cast<std::int64_t>(v.size()) >= kept_ &&
        cand.estimate.step_time_s >= v.back().estimate.step_time_s)
      return;
    auto pos = std::upper_bound(v.begin(), v.end(), cand, [](const Candidate& a, const Candidate& b) {
      return a.estimate.step_time_s < b.estimate.step_time_s;
    });
    v.insert(pos, std::move(cand));
    if (static_cast<std::int64_t>(v.size()) > kept_) v.pop_back();
  }

  // About once a second during long searches.
  void report_progress() {
    if (!opt_.progress || (out_.evaluated & 0xFFF) != 0) return;
    const auto now = std::chrono::steady_clock::now();
    if (now - last_progress_ <= std::chrono::seconds(1)) return;
    last_progress_ = now;
    opt_.progress(out_.evaluated, 0);
  }

  Estimator& est_;
  const ModelSpec& m_;
  const ClusterSpec& c_;
  const PlannerOptions& opt_;
  const bool offload_;
  PlanSearch& out_;
  const double usable_;
  const double host_usable_;
  const std::int64_t kept_;
  std::chrono::steady_clock::time_point last_progress_;
};

// The refinements the re-ranking in plan_training asks for first (the top `simulate_top`, and
// the best simulate_top / 4 of each ZeRO stage), simulated at once on every core. The
// re-ranking then reads them in its own order, so its result is the serial one whatever the
// thread count; what it asks for beyond them (a dropped candidate's replacement, a new head)
// is simulated when asked.
RefineFn prefetched_refine(const PlanSearch& search, const PlannerOptions& opt,
                           const RefineFn& refine) {
  const auto top = static_cast<std::size_t>(opt.simulate_top);
  const std::size_t per_stage = std::max<std::size_t>(1, top / 4);
  std::vector<const Plan*> plans;
  for (std::size_t i = 0; i < std::min(search.ranked.size(), top); ++i)
    plans.push_back(&search.ranked[i].plan);
  for (int z = 0; z <= 3; ++z) {
    std::size_t taken = 0;
    for (std::size_t i = 0; i < search.ranked.size() && taken < per_stage; ++i) {
      if (search.ranked[i].plan.zero_stage != z) continue;
      if (i >= top) plans.push_back(&search.ranked[i].plan);
      ++taken;
    }
  }
  std::vector<std::optional<Result<Estimate>>> results(plans.size());
  const auto total = static_cast<std::int64_t>(plans.size());
  parallel_for_index(
      plans.size(), opt.refine_threads, [&](std::size_t i) { results[i] = refine(*plans[i]); },
      [&](std::size_t done) {
        if (opt.refine_progress) opt.refine_progress(static_cast<std::int64_t>(done), total);
      });
  auto by_plan = std::make_shared<std::map<std::string, Result<Estimate>>>();
  for (std::size_t i = 0; i < plans.size(); ++i)
    by_plan->emplace(plan_to_json(*plans[i]).dump(), std::move(*results[i]));
  return [by_plan, refine](const Plan& p) -> Result<Estimate> {
    const auto it = by_plan->find(plan_to_json(p).dump());
    return it != by_plan->end() ? it->second : refine(p);
  };
}

}  // namespace

namespace {
PlanSearch run_search(Estimator& est, const PlannerOptions& opt, std::int64_t gpus, bool offload,
                      const OffloadTier& tier) {
  PlanSearch out;
  out.gpus = gpus;
  out.global_batch_size = opt.global_batch_size > 0 ? opt.global_batch_size
                                                    : default_global_batch(est.model(), gpus);
  const SearchSpace space{&est.model(), &est.cluster(), &opt, gpus, out.global_batch_size,
                          offload, tier};
  Evaluation evaluation(est, opt, offload, out);
  generate_candidates(space, evaluation);
  return out;
}
}  // namespace

PlanSearch search_plans(Estimator& est, const PlannerOptions& opt, std::int64_t gpus,
                        bool offload) {
  return run_search(est, opt, gpus, offload, OffloadTier{});
}

PlanSearch search_plans(Estimator& est, const PlannerOptions& opt, std::int64_t gpus,
                        const OffloadTier& tier) {
  return run_search(est, opt, gpus, true, tier);
}

double size_rule_tokens_per_step(double parameters) {
  // GPT-3's sizes and batches in tokens (Brown et al. 2020, Table 2.1).
  static constexpr std::pair<double, double> kGpt3[] = {
      {125e6, 0.5e6}, {350e6, 0.5e6}, {760e6, 0.5e6}, {1.3e9, 1e6},
      {2.7e9, 1e6},   {6.7e9, 2e6},   {13e9, 2e6},    {175e9, 3.2e6}};
  if (parameters <= kGpt3[0].first) return kGpt3[0].second * parameters / kGpt3[0].first;
  for (std::size_t i = 1; i < std::size(kGpt3); ++i) {
    const auto [p1, t1] = kGpt3[i];
    if (parameters > p1) continue;
    const auto [p0, t0] = kGpt3[i - 1];
    const double f = std::log(parameters / p0) / std::log(p1 / p0);
    return std::exp(std::log(t0) + f * (std::log(t1) - std::log(t0)));
  }
  return kGpt3[std::size(kGpt3) - 1].second;
}

std::int64_t default_global_batch(const ModelSpec& model, std::int64_t gpus) {
  const double by_size = size_rule_tokens_per_step(count_parameters(model).total()) /
                         d(model.seq_len);
  const std::int64_t size_seqs =
      by_size <= 1.0 ? 1 : std::int64_t{1} << static_cast<int>(std::lround(std::log2(by_size)));
  // One sequence per data-parallel replica when tensor parallelism fills a node: the largest
  // power of two up to 8 that divides the heads (Llama 3 405B: 16,384 / 8 = 2,048 sequences).
  std::int64_t tp = 1;
  while (tp < 8 && model.num_attention_heads % (2 * tp) == 0) tp *= 2;
  std::int64_t scale_seqs = 1;
  while (scale_seqs * tp < gpus) scale_seqs *= 2;
  return std::max(size_seqs, scale_seqs);
}

namespace {
// Lower is simpler: parallel dimensions in use (a practitioner adds them one at a time), then
// interleaving, ZeRO stage, recompute and offload, each a further thing to set up and debug.
std::array<int, 5> layout_complexity(const Plan& p) {
  const int dims = (p.tp > 1) + (p.pp > 1) + (p.cp > 1) + (p.ep > 1);
  return {dims, p.virtual_stages > 1 ? 1 : 0, static_cast<int>(p.zero_stage),
          p.recompute != Recompute::kNone ? 1 : 0, p.offload != Offload::kNone ? 1 : 0};
}
}  // namespace

// Headroom differences below 5% of the device (4 GB of 80) are not worth a more complex layout:
// the caching allocator's fragmentation alone varies by that much between runs of one plan.
constexpr double kHeadroomGrain = 0.05;

void break_ties(PlanSearch& search, double tolerance, double capacity_bytes,
                bool simulated_only, const MeasuredLayouts& measured) {
  search.ties = {};
  if (search.ranked.empty() || tolerance <= 0) return;
  auto eligible = [&](const Candidate& c) { return c.simulated || !simulated_only; };
  const auto first = std::find_if(search.ranked.begin(), search.ranked.end(), eligible);
  if (first == search.ranked.end()) return;
  const double fastest = first->estimate.step_time_s;
  const std::string fastest_plan = describe(first->plan);
  // The tie: eligible candidates within the tolerance, moved ahead of the rest in order.
  auto in_tie = [&](const Candidate& c) {
    return eligible(c) && c.estimate.step_time_s <= fastest * (1 + tolerance);
  };
  const auto tie_end = std::stable_partition(search.ranked.begin(), search.ranked.end(), in_tie);
  // The pick: among the tied whose pipeline the corpus measured (all the tied when none is, or
  // no corpus is given), those within kHeadroomGrain of capacity of the most headroom; among
  // those the simplest layout, then the fastest. It goes first; the rest keep their order.
  std::size_t measured_tied = 0;
  if (measured.known())
    for (auto it = search.ranked.begin(); it != tie_end; ++it)
      measured_tied += measured_runs(it->plan, measured) > 0 ? 1 : 0;
  auto choose = [&](bool measured_only) {
    auto considered = [&](const Candidate& c) {
      return !measured_only || measured_runs(c.plan, measured) > 0;
    };
    double most_room = 0;
    for (auto it = search.ranked.begin(); it != tie_end; ++it)
      if (considered(*it))
        most_room = std::max(most_room, capacity_bytes - it->estimate.peak_memory_bytes);
    auto pick = search.ranked.end();
    for (auto it = search.ranked.begin(); it != tie_end; ++it) {
      if (!considered(*it) || capacity_bytes - it->estimate.peak_memory_bytes <
                                  most_room - kHeadroomGrain * capacity_bytes)
        continue;
      if (pick == search.ranked.end() ||
          layout_complexity(it->plan) < layout_complexity(pick->plan))
        pick = it;  // equal complexity keeps the earlier, faster one
    }
    return pick;
  };
  const auto unrestricted = choose(false);
  const auto pick = measured_tied > 0 ? choose(true) : unrestricted;
  search.ties.measured = measured_tied;
  search.ties.by_measured = pick != unrestricted;
  std::rotate(search.ranked.begin(), pick, pick + 1);
  search.ties.tolerance = tolerance;
  search.ties.tied = static_cast<std::size_t>(tie_end - search.ranked.begin());
  if (describe(search.ranked.front().plan) != fastest_plan) search.ties.fastest = fastest_plan;
}

Result<PlanResult> plan_training(const ModelSpec& model, const ClusterSpec& cluster,
                                 const PlannerOptions& options, const RefineFn& refine) {
  if (options.memory_headroom < 0 || options.memory_headroom >= 1)
    return Status::Error("--memory-headroom must be in [0, 1)", ExitCode::kUsage);
  if (options.top_k < 1) return Status::Error("--top must be at least 1", ExitCode::kUsage);
  {
    // The device must have a rate for the precision (and FP8, when asked).
    Plan probe;
    probe.precision = options.precision;
    probe.fp8 = options.fp8;
    probe.fp8_scaling = options.fp8_scaling;
    probe.fp8_weight_cache = options.fp8_weight_cache;
    TRAINPLAN_RETURN_IF_ERROR(validate_plan(probe));
    auto rates = plan_rates(probe, cluster.gpu, options.hardware);
    if (!rates.ok()) return rates.status();
  }
  Estimator est(model, cluster, options.hardware);
  PlanResult result;
  // One batch for every search below (the larger GPU counts of the nothing-fits scan too): the
  // user's, or the default for this cluster.
  PlannerOptions resolved = options;
  if (resolved.global_batch_size <= 0)
    resolved.global_batch_size = default_global_batch(model, cluster.total_gpus());
  result.search = search_plans(est, resolved, cluster.total_gpus(), /*offload=*/false);

  // `again` runs the same search with other options (more candidates kept).
  using SearchAgain = std::function<PlanSearch(const PlannerOptions&)>;
  auto finish = [&](PlanSearch& search, const SearchAgain& again) -> Status {
    // Refine the best candidates with the simulator and re-rank them by its step time.
    if (refine && options.simulate_top > 0) {
      const RefineFn cached = prefetched_refine(search, options, refine);
      const auto top = static_cast<std::size_t>(options.simulate_top);
      const double usable = cluster.gpu.hbm_bytes * (1.0 - options.memory_headroom);
      // Simulates candidate i. One whose simulated peak exceeds the usable memory (the
      // estimate's closed form can miss a moment of the timeline, and a plan searched to the
      // memory's edge, such as a partial recompute, has no slack) is dropped as a memory
      // rejection: the next candidate takes index i.
      std::set<std::string> dropped;  // plan_to_json of each, as prefetched_refine keys them
      auto refine_at = [&](std::size_t i) -> Status {
        auto sim = cached(search.ranked[i].plan);
        if (!sim.ok()) return sim.status();
        if (sim->peak_memory_bytes > usable) {
          dropped.insert(plan_to_json(search.ranked[i].plan).dump());
          if (!search.least_simulated_drop ||
              sim->peak_memory_bytes < search.least_simulated_drop->peak_bytes)
            search.least_simulated_drop = PlanSearch::SimulatedDrop{
                describe(search.ranked[i].plan), sim->peak_memory, sim->peak_memory_bytes};
          char buf[120];
          std::snprintf(buf, sizeof buf, ": the simulated peak %.1f GB exceeds the usable %.1f GB",
                        sim->peak_memory_bytes / 1e9, usable / 1e9);
          search.rejections.add(RejectReason::kMemorySimulated, 1, [&] {
            return describe(search.ranked[i].plan) + buf;
          });
          --search.feasible;
          search.ranked.erase(search.ranked.begin() + static_cast<std::ptrdiff_t>(i));
          return Status::Ok();
        }
        search.ranked[i].estimate = *sim;
        search.ranked[i].simulated = true;
        return Status::Ok();
      };
      // The best estimates, at most 4 x simulate_top refinements of them (dropped candidates
      // count too).
      std::size_t n = 0;
      for (std::size_t i = 0; i < std::min(search.ranked.size(), top) && n < 4 * top; ++n) {
        const std::size_t before = search.ranked.size();
        TRAINPLAN_RETURN_IF_ERROR(refine_at(i));
        if (search.ranked.size() == before) ++i;
      }
      // The estimate errs differently by ZeRO stage (stage 3 gathers weights every micro-batch,
      // and how much of that hides is where it and the simulator differ most), so the best
      // candidates of every stage are simulated too, not only the overall best estimates.
      const std::size_t per_stage = std::max<std::size_t>(1, top / 4);
      for (int z = 0; z <= 3; ++z) {
        std::size_t taken = 0;
        for (std::size_t i = 0; i < search.ranked.size() && taken < per_stage;) {
          if (search.ranked[i].plan.zero_stage != z || search.ranked[i].simulated) {
            taken += search.ranked[i].plan.zero_stage == z ? 1 : 0;
            ++i;
            continue;
          }
          const std::size_t before = search.ranked.size();
          TRAINPLAN_RETURN_IF_ERROR(refine_at(i));
          if (search.ranked.size() == before) {
            ++taken;
            ++i;
          }
        }
      }
      // One ranking by the best figure each candidate has (simulated where refined).
      auto rank = [&] {
        std::stable_sort(search.ranked.begin(), search.ranked.end(),
                         [](const Candidate& a, const Candidate& b) {
                           return a.estimate.step_time_s < b.estimate.step_time_s;
                         });
      };
      rank();
      // The analytical estimate can be optimistic where the simulator sees communication it
      // cannot hide (ZeRO-3 gathers, a dp x cp group across nodes), or memory its closed form
      // misses; a candidate it put below the refined ones may now head the ranking on its
      // estimate alone. Refine whichever candidate heads it until a simulated one does, so the
      // recommendation is a figure the simulator confirmed, past the 4 x simulate_top budget
      // if need be: each kept candidate is simulated at most once (8 x simulate_top of them),
      // so this ends, and one over memory is dropped like any other.
      auto confirm = [&]() -> Status {
        while (!search.ranked.empty() && !search.ranked.front().simulated) {
          TRAINPLAN_RETURN_IF_ERROR(refine_at(0));
          rank();
        }
        return Status::Ok();
      };
      TRAINPLAN_RETURN_IF_ERROR(confirm());
      // Every kept candidate was over memory in simulation while the search found more that
      // fit by the estimate (feasible counts them, less those dropped): search again keeping
      // 4x as many, without the dropped ones, and confirm the best of those, up to 16x the
      // candidates first kept. Otherwise "nothing fits" would be said of a search that only
      // ran out of kept candidates.
      const std::int64_t first_kept = std::max(options.top_k, 8 * options.simulate_top);
      for (std::int64_t keep = 4 * first_kept; search.ranked.empty() && !dropped.empty() &&
                                               search.feasible > 0 && keep <= 16 * first_kept;
           keep *= 4) {
        PlannerOptions wider = resolved;
        wider.top_k = keep;
        PlanSearch more = again(wider);
        for (Candidate& cand : more.ranked)
          if (dropped.count(plan_to_json(cand.plan).dump()) == 0)
            search.ranked.push_back(std::move(cand));
        TRAINPLAN_RETURN_IF_ERROR(confirm());
      }
    }
    const double tolerance = options.tie_tolerance >= 0 ? options.tie_tolerance
                             : options.error_band.known() ? options.error_band.typical_abs
                                                          : 0.0;
    break_ties(search, tolerance, cluster.gpu.hbm_bytes, refine && options.simulate_top > 0,
               options.prefer_measured ? options.measured : MeasuredLayouts{});
    if (static_cast<std::int64_t>(search.ranked.size()) > options.top_k)
      search.ranked.resize(static_cast<std::size_t>(options.top_k));
    for (Candidate& cand : search.ranked)
      cand.comm = comm_volume_on_stage(model, cand.plan, cand.estimate.peak_stage);
    return Status::Ok();
  };
  const std::int64_t gpus = cluster.total_gpus();
  TRAINPLAN_RETURN_IF_ERROR(finish(result.search, [&](const PlannerOptions& o) {
    return search_plans(est, o, gpus, /*offload=*/false);
  }));
  if (result.fits()) return result;

  // Nothing fits: how much the model states alone need, the smallest GPU count that fits, and
  // the best plan with optimizer states on the host (ZeRO-Offload, Ren et al. 2021).
  const StateBytesPerParam sb = state_bytes_per_param(options.precision, options.optimizer, options.grad_precision);
  result.min_state_bytes_per_gpu =
      sb.total() * count_parameters(model).total() / d(cluster.total_gpus());
  PlannerOptions quick = resolved;
  quick.top_k = 1;
  quick.stop_at_first_feasible = true;
  const std::int64_t step = cluster.gpus_per_node;
  // No plan can shard model states over more than all GPUs: start where they could fit.
  const double usable = cluster.gpu.hbm_bytes * (1.0 - options.memory_headroom);
  const std::int64_t lower = static_cast<std::int64_t>(
      std::ceil(sb.total() * count_parameters(model).total() / usable / d(step))) * step;
  for (std::int64_t n = std::max((cluster.total_gpus() / step + 1) * step, lower);
       n <= std::min<std::int64_t>(ClusterLimits::kMaxGpus, cluster.total_gpus() * 1024);
       n += step) {
    ClusterSpec bigger = cluster;
    bigger.num_nodes = n / cluster.gpus_per_node;
    Estimator big(model, bigger, options.hardware);
    if (!search_plans(big, quick, n, false).ranked.empty()) {
      result.min_gpus_without_offload = n;
      break;
    }
  }
  PlanSearch off = search_plans(est, resolved, cluster.total_gpus(), /*offload=*/true);
  TRAINPLAN_RETURN_IF_ERROR(finish(off, [&](const PlannerOptions& o) {
    return search_plans(est, o, gpus, /*offload=*/true);
  }));
  const bool offload_fits = !off.ranked.empty();
  result.offload_search = std::move(off);
  if (offload_fits) return result;
  // ZeRO-Infinity's tiers (Rajbhandari et al. 2021): parameters and gradients off the device
  // too, in host memory, then with the states on NVMe where host memory is short.
  for (OffloadDevice device : {OffloadDevice::kCpu, OffloadDevice::kNvme}) {
    const OffloadTier states{Offload::kOptimizerParams, device};
    PlanSearch tier = search_plans(est, options, cluster.total_gpus(), states);
    TRAINPLAN_RETURN_IF_ERROR(finish(tier, [&](const PlannerOptions& o) {
      return search_plans(est, o, gpus, states);
    }));
    result.infinity_searches.push_back(std::move(tier));
  }
  return result;
}

}  // namespace trainplan
