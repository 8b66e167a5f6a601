// The candidate generator; see search.h. Tested by tests/planner/search_test.cc.
#include "planner/search.h"

#include <algorithm>
#include <utility>
#include <vector>

namespace trainplan {

namespace {

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

// The schedule axis for one layout: (schedule, virtual stages) pairs.
struct ScheduleChoice {
  Schedule schedule;
  std::int64_t virtual_stages;
};

// The expert axis: where the expert layers' ranks sit (Plan::expert_layout), the experts'
// tensor-parallel degree (Plan::expert_tp, 0: tp) and the expert-parallel degree.
struct ExpertChoice {
  ExpertLayout layout;
  std::int64_t expert_tp;
  std::int64_t ep;
};

// The ZeRO axis: a stage and the ranks it shards over (0: all dp*cp ranks).
struct ZeroChoice {
  int stage;
  std::int64_t shard_size;
};

class Generator {
 public:
  Generator(const SearchSpace& space, CandidateSink& sink)
      : s_(space), m_(*space.model), c_(*space.cluster), opt_(*space.options), sink_(sink) {
    recomputes_ =
        opt_.attention == AttentionImpl::kUnfused
            ? std::vector<Recompute>{Recompute::kNone, Recompute::kSelective, Recompute::kFull}
            // With a fused attention kernel selective recompute stores and does what none does.
            : std::vector<Recompute>{Recompute::kNone, Recompute::kFull};
    zero_stages_ = !s_.offload                                  ? std::vector<int>{0, 1, 2, 3}
                   : s_.tier.offload == Offload::kOptimizerParams ? std::vector<int>{3}
                                                                  : std::vector<int>{1, 2, 3};
  }

  void run() {
    for (std::int64_t tp : divisors(s_.gpus, s_.gpus)) {
      // How many configurations one rejected layout stands for (for counting by reason).
      const std::int64_t per_layout =
          static_cast<std::int64_t>(zero_stages_.size() * recomputes_.size()) * (tp > 1 ? 2 : 1);
      // Context parallelism: powers of two that divide the GPUs left by tp, pruned before the
      // pipeline axis (a rejected cp stands for every pp and its configurations).
      for (std::int64_t cp = 1; (s_.gpus / tp) % cp == 0; cp *= 2) {
        if (cp > 1 && pruned_cp(tp, cp, per_layout)) continue;
        const std::int64_t rest = s_.gpus / (tp * cp);
        for (std::int64_t pp : divisors(rest, rest))
          if (!sink_.begin_layout() || !layout(tp, cp, pp, per_layout)) return;
      }
    }
  }

 private:
  // Reports a rejection when `rule` is one; true when it was.
  template <typename Facts>
  bool prune(const PruneRule<Facts>* rule, const Facts& facts, std::int64_t configurations) {
    if (rule == nullptr) return false;
    sink_.pruned(rule->reason, configurations, [&] { return rule->message(facts); });
    return true;
  }

  bool pruned_cp(std::int64_t tp, std::int64_t cp, std::int64_t per_layout) {
    const CpFacts facts{&m_, cp, opt_.max_cp, opt_.min_cp_seq_len, opt_.attention};
    const PruneRule<CpFacts>* rule = first_rejecting(cp_rules(), facts);
    if (rule == nullptr) return false;
    const std::int64_t layouts =
        per_layout * static_cast<std::int64_t>(divisors(s_.gpus / (tp * cp), s_.gpus).size());
    return prune(rule, facts, layouts);
  }

  // One tp x cp x pp layout: its rules, then every ep, micro-batch, schedule, ZeRO stage,
  // recompute and sequence-parallel choice. False when the sink stops the enumeration.
  bool layout(std::int64_t tp, std::int64_t cp, std::int64_t pp, std::int64_t per_layout) {
    const std::int64_t dp = s_.gpus / (tp * cp * pp);
    const LayoutFacts facts{&m_, c_.gpus_per_node, opt_.allow_cross_node_tp, tp, cp, pp, dp,
                            s_.global_batch_size};
    if (prune(first_rejecting(layout_rules(), facts), facts, per_layout)) return true;
    const Plan base = base_plan(tp, cp, pp, dp);
    for (const ExpertChoice& ec : expert_choices(tp, cp, dp)) {
      for (std::int64_t mbs : divisors(s_.global_batch_size / dp, opt_.max_micro_batch_size)) {
        const std::int64_t micro_batches = s_.global_batch_size / dp / mbs;
        const std::vector<ScheduleChoice> schedules = schedule_choices(tp, pp, micro_batches,
                                                                       per_layout);
        const std::vector<ZeroChoice> zeros = zero_choices(tp, cp, dp, ec);
        for (const ScheduleChoice& sc : schedules)
          for (const ZeroChoice& zc : zeros)
            if (!expand(base, ec, mbs, sc, zc)) return false;
      }
    }
    return true;
  }

  Plan base_plan(std::int64_t tp, std::int64_t cp, std::int64_t pp, std::int64_t dp) const {
    Plan base = plan_with_options(opt_, tp, cp, pp, dp, s_.global_batch_size);
    base.offload = s_.offload ? s_.tier.offload : Offload::kNone;
    base.offload_device = s_.offload ? s_.tier.device : OffloadDevice::kCpu;
    return base;
  }

  // Expert layouts (dense models: none). Carved: ep over the divisors of dp that divide the
  // experts. Folded (Megatron-Core's MoE parallel folding), with the experts whole (expert_tp 1,
  // as the Megatron MoE Model Zoo's and Megatron-Bridge's recipes set it) or split over tp
  // (Megatron-Core's default): ep over the divisors of the stage's ranks left by expert_tp,
  // leaving out the folded layouts that place and move exactly as a carved one (tp = cp = 1).
  std::vector<ExpertChoice> expert_choices(std::int64_t tp, std::int64_t cp,
                                           std::int64_t dp) const {
    if (!m_.is_moe()) return {{ExpertLayout::kCarved, 0, 1}};
    std::vector<ExpertChoice> out;
    for (std::int64_t e : divisors(dp, dp))
      if (m_.num_experts % e == 0) out.push_back({ExpertLayout::kCarved, 0, e});
    if (!opt_.fold_experts || (tp == 1 && cp == 1)) return out;
    for (std::int64_t etp : tp > 1 ? std::vector<std::int64_t>{1, tp} : std::vector<std::int64_t>{1}) {
      if (m_.ffn_hidden_size % etp != 0) continue;
      const std::int64_t ranks = tp * cp * dp / etp;
      for (std::int64_t e : divisors(ranks, ranks))
        if (e > 1 && m_.num_experts % e == 0) out.push_back({ExpertLayout::kFolded, etp, e});
    }
    return out;
  }

  // One pipeline stage: 1F1B; one micro-batch: naive; else GPipe, 1F1B, zb-h1, zb-v (two
  // chunks per device: needs 2pp layers), dualpipe (even pp > 2, an even count of micro-batches
  // >= 2pp: dualpipe_rules) and interleaved with 2..max_virtual_stages chunks per
  // device (each chunk needs a layer).
  std::vector<ScheduleChoice> schedule_choices(std::int64_t tp, std::int64_t pp,
                                               std::int64_t micro_batches,
                                               std::int64_t per_layout) {
    if (pp == 1) return {{Schedule::k1F1B, 1}};
    if (micro_batches == 1) return {{Schedule::kNaive, 1}};
    std::vector<ScheduleChoice> out = {{Schedule::kGpipe, 1}, {Schedule::k1F1B, 1}};
    if (opt_.zero_bubble) {
      out.push_back({Schedule::kZbH1, 1});
      if (m_.num_layers >= 2 * pp) out.push_back({Schedule::kZbV, 2});
      const DualPipeFacts facts{pp, micro_batches};
      if (!prune(first_rejecting(dualpipe_rules(), facts), facts, per_layout / (tp > 1 ? 2 : 1)))
        out.push_back({Schedule::kDualPipe, 2});
    }
    for (std::int64_t v = 2; v <= opt_.max_virtual_stages; ++v) {
      if (m_.num_layers < pp * v) continue;
      const InterleavedFacts facts{pp, micro_batches};
      if (prune(first_rejecting(interleaved_rules(), facts), facts,
                per_layout / (tp > 1 ? 2 : 1)))
        continue;
      out.push_back({Schedule::kInterleaved, v});
    }
    return out;
  }

  // ZeRO stages, each over all dp*cp ranks and, with hybrid sharding, over the runs of them
  // that one node holds (their indices run with stride tp under the default placement) and 2
  // and 4 nodes hold. ZeRO shards over data-parallel replicas (and CP ranks): with one replica
  // every stage is the same plan, so only the lowest is enumerated.
  std::vector<ZeroChoice> zero_choices(std::int64_t tp, std::int64_t cp, std::int64_t dp,
                                       const ExpertChoice& ec) const {
    std::vector<ZeroChoice> out;
    for (int zero : zero_stages_) {
      if (dp * cp == 1 && zero != zero_stages_.front()) continue;
      out.push_back({zero, 0});
      if (zero == 0 || !opt_.hybrid_shard || ec.ep > 1 || ec.layout == ExpertLayout::kFolded ||
          c_.gpus_per_node % tp != 0)
        continue;
      for (std::int64_t s = c_.gpus_per_node / tp, k = 0; k < 3; s *= 2, ++k)
        if (s >= 2 && s < dp * cp && (dp * cp) % s == 0) out.push_back({zero, s});
    }
    return out;
  }

  // The innermost axes, recompute and sequence parallelism. False when the sink stops.
  bool expand(const Plan& base, const ExpertChoice& ec, std::int64_t mbs,
              const ScheduleChoice& sc, const ZeroChoice& zc) {
    const std::int64_t ep = ec.ep;
    // A folded MoE layer with tp > 1 takes sequence-parallel input (validate_plan).
    const int first_sp = ec.layout == ExpertLayout::kFolded && base.tp > 1 ? 1 : 0;
    for (Recompute rc : recomputes_) {
      for (int sp = first_sp; sp <= (base.tp > 1 ? 1 : 0); ++sp) {
        Plan p = base;
        p.ep = ep;
        p.expert_layout = ec.layout;
        p.expert_tp = ec.layout == ExpertLayout::kFolded ? ec.expert_tp : 0;
        p.micro_batch_size = mbs;
        p.schedule = sc.schedule;
        p.virtual_stages = sc.virtual_stages;
        // Layers that do not divide over the chunks: the end chunks, which hold the embedding
        // and the head, take one fewer (as Llama 3 and DeepSeek-V3 split theirs).
        if (m_.num_layers % p.num_chunks() != 0)
          p.layers_per_stage = balanced_chunk_layers(m_.num_layers, p.num_chunks());
        p.zero_stage = zc.stage;
        p.zero_shard_size = zc.shard_size;
        p.recompute = rc;
        p.sequence_parallel = sp == 1;
        p.ep_overlap = opt_.ep_overlap && ep > 1 && rc != Recompute::kFull && zc.stage != 3 &&
                       (base.pp == 1 ? sc.schedule == Schedule::k1F1B
                                     : sc.schedule == Schedule::kInterleaved);
        p.tp_comm_overlap = opt_.tp_comm_overlap && sp == 1;
        if (!sink_.candidate(p)) return false;
      }
    }
    return true;
  }

  const SearchSpace& s_;
  const ModelSpec& m_;
  const ClusterSpec& c_;
  const PlannerOptions& opt_;
  CandidateSink& sink_;
  std::vector<Recompute> recomputes_;
  std::vector<int> zero_stages_;
};

}  // namespace

void generate_candidates(const SearchSpace& space, CandidateSink& sink) {
  Generator(space, sink).run();
}

Plan plan_with_options(const PlannerOptions& o, std::int64_t tp, std::int64_t cp,
                       std::int64_t pp, std::int64_t dp, std::int64_t global_batch) {
  Plan p;
  p.tp = tp;
  p.cp = cp;
  p.pp = pp;
  p.dp = dp;
  p.global_batch_size = global_batch;
  p.precision = o.precision;
  p.optimizer = o.optimizer;
  p.attention = o.attention;
  p.grad_precision = o.grad_precision;
  p.fp8 = o.fp8;
  p.fp8_scaling = o.fp8_scaling;
  p.fp8_weight_cache = o.fp8_weight_cache;
  if (cp > 1) p.cp_comm = o.cp_comm;
  return p;
}

}  // namespace trainplan
