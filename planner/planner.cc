// Enumeration, pruning and ranking; see planner.h. Tested by tests/planner/planner_test.cc.
#include "planner/planner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <string_view>

namespace trainplan {

namespace {

double d(std::int64_t v) { return static_cast<double>(v); }

std::vector<std::int64_t> divisors(std::int64_t n, std::int64_t max_value) {
  std::vector<std::int64_t> out;
  for (std::int64_t i = 1; i * i <= n; ++i) {
    if (n % i != 0) continue;
    if (i <= max_value) out.push_back(i);
    if (i != n / i && n / i <= max_value) out.push_back(n / i);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Why cp (> 1) is not searched: a rejection category, or nullptr. cp_rejection_message says it
// in full (built only for a category's first example: searches repeat these per tp).
const char* cp_rejection(const ModelSpec& m, const PlannerOptions& opt, std::int64_t cp) {
  if (opt.max_cp > 0 && cp > opt.max_cp) return "cp above --max-cp";
  if (m.seq_len < opt.min_cp_seq_len) return "cp for short sequences";
  if (opt.attention != AttentionImpl::kFused) return "cp needs fused attention";
  if (m.seq_len % (2 * cp) != 0) return "cp vs seq_len";
  return nullptr;
}
std::string cp_rejection_message(const ModelSpec& m, const PlannerOptions& opt, std::int64_t cp,
                                 std::string_view category) {
  const std::string cps = "cp=" + std::to_string(cp);
  const std::string seq = std::to_string(m.seq_len);
  if (category == "cp above --max-cp") return cps + " exceeds --max-cp " + std::to_string(opt.max_cp);
  if (category == "cp for short sequences")
    return cps + ": seq_len=" + seq + " is below " + std::to_string(opt.min_cp_seq_len) +
           " tokens, where context parallelism is searched";
  if (category == "cp needs fused attention")
    return cps + " needs attention=fused (Megatron-Core's context parallelism runs on fused "
                 "attention kernels)";
  return cps + ": seq_len=" + seq + " is not divisible by 2*cp = " + std::to_string(2 * cp) +
         " (load-balanced causal chunks)";
}

// The schedule axis for one layout: (schedule, virtual stages) pairs.
struct ScheduleChoice {
  Schedule schedule;
  std::int64_t virtual_stages;
};

// A full-recompute plan `p` that fits in `usable` bytes: sets recompute_num_layers to the fewest
// layers per chunk that still fit (0, every layer, when only all of them do). Peak memory falls
// as more layers are recomputed, so bisection finds it. False when the plan fits without
// recompute, which the search has as its own candidate, faster.
bool fewest_recomputed_layers(const Estimator& est, const ModelSpec& m, Plan& p, double usable) {
  Plan none = p;
  none.recompute = Recompute::kNone;
  if (est.peak_memory_bytes(none) <= usable) return false;
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
  return true;
}

}  // namespace

void Rejections::add(const std::string& category, std::int64_t n, const std::string& message) {
  count[category] += n;
  if (example.count(category) == 0) example[category] = message;
}

std::int64_t Rejections::total() const {
  std::int64_t t = 0;
  for (const auto& [k, v] : count) t += v;
  return t;
}

std::int64_t default_global_batch(const ModelSpec& model) {
  const double target = std::pow(2.0, 21) / d(model.seq_len);
  if (target <= 1.0) return 1;
  return std::int64_t{1} << static_cast<int>(std::lround(std::log2(target)));
}

PlanSearch search_plans(Estimator& est, const PlannerOptions& opt, std::int64_t gpus,
                        bool offload) {
  const ModelSpec& m = est.model();
  const ClusterSpec& c = est.cluster();
  PlanSearch out;
  out.gpus = gpus;
  out.global_batch_size = opt.global_batch_size > 0 ? opt.global_batch_size
                                                    : default_global_batch(m);
  const std::int64_t gbs = out.global_batch_size;
  const double usable = c.gpu.hbm_bytes * (1.0 - opt.memory_headroom);
  const double host_usable = c.host_memory_bytes_per_node * (1.0 - opt.memory_headroom);
  const auto start = std::chrono::steady_clock::now();
  auto last_progress = start;

  const std::vector<Recompute> recomputes =
      opt.attention == AttentionImpl::kUnfused
          ? std::vector<Recompute>{Recompute::kNone, Recompute::kSelective, Recompute::kFull}
          // With a fused attention kernel selective recompute stores and does what none does.
          : std::vector<Recompute>{Recompute::kNone, Recompute::kFull};
  const std::vector<int> zero_stages =
      offload ? std::vector<int>{1, 2, 3} : std::vector<int>{0, 1, 2, 3};

  // Keep the best by step time (a small sorted vector): top_k for the report, or more when the
  // simulator refines, so that the best of every ZeRO stage is among them (plan_training then
  // cuts the list to top_k).
  const std::int64_t kept = std::max(opt.top_k, 8 * opt.simulate_top);
  auto keep = [&](Candidate cand) {
    auto& v = out.ranked;
    if (static_cast<std::int64_t>(v.size()) >= kept &&
        cand.estimate.step_time_s >= v.back().estimate.step_time_s)
      return;
    auto pos = std::upper_bound(v.begin(), v.end(), cand, [](const Candidate& a, const Candidate& b) {
      return a.estimate.step_time_s < b.estimate.step_time_s;
    });
    v.insert(pos, std::move(cand));
    if (static_cast<std::int64_t>(v.size()) > kept) v.pop_back();
  };

  // One (tp, cp, pp) layout: its structural checks, then every ep, micro-batch, schedule, ZeRO
  // stage, recompute and sequence-parallel choice. Returns false when the search must stop.
  auto search_layout = [&](std::int64_t tp, std::int64_t cp, std::int64_t pp,
                           std::int64_t per_layout) -> bool {
    const std::int64_t dp = gpus / (tp * cp * pp);
    Plan base;
    base.tp = tp;
    base.cp = cp;
    base.pp = pp;
    base.dp = dp;
    base.global_batch_size = gbs;
    base.precision = opt.precision;
    base.optimizer = opt.optimizer;
    base.attention = opt.attention;
    base.grad_precision = opt.grad_precision;
    base.fp8 = opt.fp8;
    base.offload = offload ? Offload::kOptimizer : Offload::kNone;
    if (tp > c.gpus_per_node && !opt.allow_cross_node_tp) {
      out.rejections.add("tp larger than a node", per_layout,
                         "tp=" + std::to_string(tp) + " exceeds gpus_per_node=" +
                             std::to_string(c.gpus_per_node) +
                             " (TP all-reduces every layer; allow with --allow-cross-node-tp)");
      out.evaluated += per_layout;
      return true;
    }
    if (gbs % dp != 0) {
      out.rejections.add("batch not divisible", per_layout,
                         "global_batch_size=" + std::to_string(gbs) +
                             " is not divisible by dp=" + std::to_string(dp));
      out.evaluated += per_layout;
      return true;
    }
    // Layers that do not divide over the stages: the end stages, which hold the embedding and
    // the head, take one fewer (as Llama 3 and DeepSeek-V3 split theirs).
    if (pp > 1 && m.num_layers % pp != 0 && m.num_layers >= pp)
      base.layers_per_stage = balanced_chunk_layers(m.num_layers, pp);
    // The structural checks of the model against this layout (heads, kv heads, FFN, layers).
    if (Status st = check_plan_fits_model(base, m); !st.ok()) {
      std::string category = st.message().rfind("num_layers", 0) == 0 ? "layers across stages"
                             : st.message().find("num_kv_heads") != std::string::npos
                                 ? "tp vs kv heads"
                             : st.message().find("num_attention_heads") != std::string::npos
                                 ? "tp vs heads"
                                 : "tp vs ffn width";
      out.rejections.add(category, per_layout, st.message());
      out.evaluated += per_layout;
      return true;
    }
    const std::vector<std::int64_t> eps =
        m.is_moe() ? [&] {
          std::vector<std::int64_t> v;
          for (std::int64_t e : divisors(dp, dp))
            if (m.num_experts % e == 0) v.push_back(e);
          return v;
        }()
                   : std::vector<std::int64_t>{1};
    for (std::int64_t ep : eps) {
      for (std::int64_t mbs : divisors(gbs / dp, opt.max_micro_batch_size)) {
        const std::int64_t M = gbs / dp / mbs;
        std::vector<ScheduleChoice> schedules;
        if (pp == 1) {
          schedules.push_back({Schedule::k1F1B, 1});
        } else if (M == 1) {
          schedules.push_back({Schedule::kNaive, 1});
        } else {
          schedules.push_back({Schedule::kGpipe, 1});
          schedules.push_back({Schedule::k1F1B, 1});
          for (std::int64_t v = 2; v <= opt.max_virtual_stages; ++v) {
            if (m.num_layers < pp * v) continue;  // a model chunk needs a layer
            if (M % pp != 0) {
              out.rejections.add("interleaved needs micro-batches in groups of pp",
                                 per_layout / (tp > 1 ? 2 : 1),
                                 "interleaved: " + std::to_string(M) +
                                     " micro-batches is not a multiple of pp=" + std::to_string(pp));
              out.evaluated += per_layout / (tp > 1 ? 2 : 1);
              continue;
            }
            schedules.push_back({Schedule::kInterleaved, v});
          }
        }
        // ZeRO stages, each over all dp*cp ranks and, with hybrid sharding, over the runs of
        // them that one node holds (their indices run with stride tp under the default
        // placement) and 2 and 4 nodes hold.
        std::vector<std::pair<int, std::int64_t>> zero_choices;  // (stage, zero_shard_size)
        for (int zero : zero_stages) {
          zero_choices.emplace_back(zero, 0);
          if (zero == 0 || !opt.hybrid_shard || ep > 1 || c.gpus_per_node % tp != 0) continue;
          for (std::int64_t s = c.gpus_per_node / tp, k = 0; k < 3; s *= 2, ++k)
            if (s >= 2 && s < dp * cp && (dp * cp) % s == 0) zero_choices.emplace_back(zero, s);
        }
        for (const ScheduleChoice& sc : schedules) {
          for (const auto& [zero, shard] : zero_choices) {
            // ZeRO shards over data-parallel replicas (and CP ranks): with one replica every
            // stage is the same plan, so only the lowest is enumerated.
            if (dp * cp == 1 && zero != zero_stages.front()) continue;
            for (Recompute rc : recomputes) {
              for (int sp = 0; sp <= (tp > 1 ? 1 : 0); ++sp) {
                Plan p = base;
                p.ep = ep;
                p.micro_batch_size = mbs;
                p.schedule = sc.schedule;
                p.virtual_stages = sc.virtual_stages;
                // Uneven layer counts: the end chunks take the shortfall (as for base above).
                p.layers_per_stage.clear();
                if (m.num_layers % p.num_chunks() != 0)
                  p.layers_per_stage = balanced_chunk_layers(m.num_layers, p.num_chunks());
                p.zero_stage = zero;
                p.zero_shard_size = shard;
                p.recompute = rc;
                p.sequence_parallel = sp == 1;
                p.ep_overlap = opt.ep_overlap && ep > 1 && rc != Recompute::kFull && zero != 3 &&
                               (pp == 1 ? sc.schedule == Schedule::k1F1B
                                        : sc.schedule == Schedule::kInterleaved);
                p.tp_comm_overlap = opt.tp_comm_overlap && sp == 1;
                ++out.evaluated;
                if (sp == 1 && (m.seq_len / cp) % tp != 0) {
                  out.rejections.add("sequence parallel vs seq_len", 1,
                                     "sequence_parallel: tp=" + std::to_string(tp) +
                                         " does not divide seq_len" +
                                         (cp > 1 ? "/cp = " : "=") +
                                         std::to_string(m.seq_len / cp));
                  continue;
                }
                std::int64_t stage = 0;
                const double mem = est.peak_memory_bytes(p, &stage);
                if (mem > usable) {
                  if (out.rejections.example.count("memory") == 0) {
                    char buf[200];
                    std::snprintf(buf, sizeof buf,
                                  "stage %lld needs %.1f GB, usable %.1f GB of %.1f GB "
                                  "(%.0f%% headroom)",
                                  static_cast<long long>(stage), mem / 1e9,
                                  usable / 1e9, c.gpu.hbm_bytes / 1e9,
                                  opt.memory_headroom * 100);
                    out.rejections.add("memory", 1, buf);
                  } else {
                    ++out.rejections.count["memory"];
                  }
                  continue;
                }
                // Full recompute that fits: recompute only as many layers of each chunk as
                // memory needs (the fewest, found by bisection: fewer recomputed layers keep
                // more), as a Megatron-LM user sets --recompute-num-layers.
                if (rc == Recompute::kFull && !fewest_recomputed_layers(est, m, p, usable)) {
                  out.rejections.add("full recompute not needed", 1,
                                     describe(p) +
                                         ": fits in memory with recompute none, which is faster");
                  continue;
                }
                Candidate cand;
                cand.plan = p;
                cand.estimate = est.estimate(p);
                if (offload && cand.estimate.host_memory_per_node_bytes > host_usable) {
                  out.rejections.add("host memory", 1,
                                     "offloaded optimizer states need " +
                                         std::to_string(static_cast<long long>(
                                             cand.estimate.host_memory_per_node_bytes / 1e9)) +
                                         " GB per node, host has " +
                                         std::to_string(static_cast<long long>(
                                             c.host_memory_bytes_per_node / 1e9)) +
                                         " GB");
                  continue;
                }
                ++out.feasible;
                keep(std::move(cand));
                if (opt.stop_at_first_feasible) return false;
                if (out.evaluated >= opt.max_evaluations) {
                  out.truncated = true;
                  return false;
                }
                if (opt.progress && (out.evaluated & 0xFFF) == 0) {
                  const auto now = std::chrono::steady_clock::now();
                  if (now - last_progress > std::chrono::seconds(1)) {
                    last_progress = now;
                    opt.progress(out.evaluated, 0);
                  }
                }
              }
            }
          }
        }
      }
    }
    return true;
  };

  for (std::int64_t tp : divisors(gpus, gpus)) {
    // How many configurations one rejected layout stands for (for counting by reason).
    const std::int64_t per_layout =
        static_cast<std::int64_t>(zero_stages.size() * recomputes.size()) * (tp > 1 ? 2 : 1);
    // Context parallelism: powers of two that divide the GPUs left by tp, pruned before the
    // pipeline axis (a rejected cp stands for every pp and its configurations).
    for (std::int64_t cp = 1; (gpus / tp) % cp == 0; cp *= 2) {
      if (cp > 1) {
        if (const char* why = cp_rejection(m, opt, cp)) {
          const std::int64_t layouts =
              per_layout * static_cast<std::int64_t>(divisors(gpus / (tp * cp), gpus).size());
          if (out.rejections.example.count(why) == 0)
            out.rejections.add(why, layouts, cp_rejection_message(m, opt, cp, why));
          else
            out.rejections.count[why] += layouts;
          out.evaluated += layouts;
          continue;
        }
      }
      for (std::int64_t pp : divisors(gpus / (tp * cp), gpus / (tp * cp))) {
        // Layouts rejected whole count too: the bound holds to within one layout even when
        // nothing fits (CP multiplies the layouts).
        if (out.evaluated >= opt.max_evaluations) {
          out.truncated = true;
          return out;
        }
        if (!search_layout(tp, cp, pp, per_layout)) return out;
      }
    }
  }
  return out;
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
    TRAINPLAN_RETURN_IF_ERROR(validate_plan(probe));
    auto rates = plan_rates(probe, cluster.gpu, options.hardware);
    if (!rates.ok()) return rates.status();
  }
  Estimator est(model, cluster, options.hardware);
  PlanResult result;
  result.search = search_plans(est, options, cluster.total_gpus(), /*offload=*/false);

  auto finish = [&](PlanSearch& search) -> Status {
    // Refine the best candidates with the simulator and re-rank them by its step time.
    if (refine && options.simulate_top > 0) {
      const auto top = static_cast<std::size_t>(options.simulate_top);
      const double usable = cluster.gpu.hbm_bytes * (1.0 - options.memory_headroom);
      // Simulates candidate i. One whose simulated peak exceeds the usable memory (the
      // estimate's closed form can miss a moment of the timeline, and a plan searched to the
      // memory's edge, such as a partial recompute, has no slack) is dropped as a memory
      // rejection: the next candidate takes index i.
      auto refine_at = [&](std::size_t i) -> Status {
        auto sim = refine(search.ranked[i].plan);
        if (!sim.ok()) return sim.status();
        if (sim->peak_memory_bytes > usable) {
          char buf[120];
          std::snprintf(buf, sizeof buf, ": the simulated peak %.1f GB exceeds the usable %.1f GB",
                        sim->peak_memory_bytes / 1e9, usable / 1e9);
          std::string why = describe(search.ranked[i].plan);
          why += buf;
          search.rejections.add("memory (simulated)", 1, why);
          --search.feasible;
          search.ranked.erase(search.ranked.begin() + static_cast<std::ptrdiff_t>(i));
          return Status::Ok();
        }
        search.ranked[i].estimate = *sim;
        search.ranked[i].simulated = true;
        return Status::Ok();
      };
      // Refinements so far; dropped candidates count too, so that the budget below bounds
      // them all.
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
          ++n;
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
      // cannot hide (ZeRO-3 gathers, a dp x cp group across nodes); a candidate it put below
      // the refined ones may now head the ranking on its estimate alone. Refine whichever
      // candidate heads it until a simulated one does, so the recommendation is a figure the
      // simulator confirmed (at most 4 x simulate_top refinements in all).
      const std::size_t budget = std::max(n, 4 * top);
      for (std::size_t refined = n; refined < budget && !search.ranked.empty() &&
                                    !search.ranked.front().simulated;
           ++refined) {
        TRAINPLAN_RETURN_IF_ERROR(refine_at(0));
        rank();
      }
    }
    if (static_cast<std::int64_t>(search.ranked.size()) > options.top_k)
      search.ranked.resize(static_cast<std::size_t>(options.top_k));
    for (Candidate& cand : search.ranked)
      cand.comm = comm_volume_on_stage(model, cand.plan, cand.estimate.peak_stage);
    return Status::Ok();
  };
  TRAINPLAN_RETURN_IF_ERROR(finish(result.search));
  if (result.fits()) return result;

  // Nothing fits: how much the model states alone need, the smallest GPU count that fits, and
  // the best plan with optimizer states on the host (ZeRO-Offload, Ren et al. 2021).
  const StateBytesPerParam sb = state_bytes_per_param(options.precision, options.optimizer, options.grad_precision);
  result.min_state_bytes_per_gpu =
      sb.total() * count_parameters(model).total() / d(cluster.total_gpus());
  PlannerOptions quick = options;
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
  PlanSearch off = search_plans(est, options, cluster.total_gpus(), /*offload=*/true);
  TRAINPLAN_RETURN_IF_ERROR(finish(off));
  result.offload_search = std::move(off);
  return result;
}

}  // namespace trainplan
