// Tests of the pruning rules (planner/prune.h): each rule rejects what it should, with its reason
// code and a message that names the field and value; each passes what it should; the layout
// rules agree with check_plan_fits_model; the printed categories are the report's.
#include "planner/prune.h"

#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "tests/core/test_util.h"

namespace trainplan {
namespace {

using testing::load_repo_model;

template <typename Facts>
void expect_rejects(std::span<const PruneRule<Facts>> rules, const Facts& facts,
                    RejectReason reason, const std::string& message) {
  const PruneRule<Facts>* rule = first_rejecting(rules, facts);
  ASSERT_NE(rule, nullptr) << reject_category(reason);
  EXPECT_EQ(rule->reason, reason) << reject_category(rule->reason);
  EXPECT_EQ(rule->message(facts), message);
}

template <typename Facts>
void expect_passes(std::span<const PruneRule<Facts>> rules, const Facts& facts) {
  const PruneRule<Facts>* rule = first_rejecting(rules, facts);
  EXPECT_EQ(rule, nullptr) << (rule ? rule->message(facts) : "");
}

TEST(Prune, ContextParallelRules) {
  ModelSpec m = load_repo_model("llama3-8b.json");
  m.seq_len = 8200;  // 2*cp = 16 does not divide it; 8 does
  const CpFacts ok{&m, 4, 0, 8192, AttentionImpl::kFused};
  expect_passes(cp_rules(), ok);
  CpFacts f = ok;
  f.max_cp = 2;
  expect_rejects(cp_rules(), f, RejectReason::kCpAboveMax, "cp=4 exceeds --max-cp 2");
  f = ok;
  f.min_cp_seq_len = 16384;
  expect_rejects(cp_rules(), f, RejectReason::kCpForShortSequences,
                 "cp=4: seq_len=8200 is below 16384 tokens, where context parallelism is "
                 "searched");
  f = ok;
  f.attention = AttentionImpl::kUnfused;
  expect_rejects(cp_rules(), f, RejectReason::kCpNeedsFusedAttention,
                 "cp=4 needs attention=fused (Megatron-Core's context parallelism runs on fused "
                 "attention kernels)");
  f = ok;
  f.cp = 8;
  expect_rejects(cp_rules(), f, RejectReason::kCpDoesNotDivideSeqLen,
                 "cp=8: seq_len=8200 is not divisible by 2*cp = 16 (load-balanced causal chunks)");
}

TEST(Prune, LayoutRules) {
  ModelSpec m = load_repo_model("llama3-8b.json");  // 32 heads, 8 kv heads, 32 layers
  const LayoutFacts ok{&m, 8, false, 8, 1, 4, 2, 64};
  expect_passes(layout_rules(), ok);
  LayoutFacts f = ok;
  f.tp = 16;
  expect_rejects(layout_rules(), f, RejectReason::kTpLargerThanNode,
                 "tp=16 exceeds gpus_per_node=8 (TP all-reduces every layer; allow with "
                 "--allow-cross-node-tp)");
  f.allow_cross_node_tp = true;
  expect_rejects(layout_rules(), f, RejectReason::kTpDoesNotDivideKvHeads,
                 "tp=16 does not divide num_kv_heads=8");
  f = ok;
  f.global_batch_size = 63;
  expect_rejects(layout_rules(), f, RejectReason::kBatchNotDivisibleByDp,
                 "global_batch_size=63 is not divisible by dp=2");
  f = ok;
  f.tp = 3;
  expect_rejects(layout_rules(), f, RejectReason::kTpDoesNotDivideHeads,
                 "tp=3 does not divide num_attention_heads=" +
                     std::to_string(m.num_attention_heads));
  ModelSpec narrow = m;
  narrow.ffn_hidden_size = 14340;  // not a multiple of 8
  f = ok;
  f.model = &narrow;
  expect_rejects(layout_rules(), f, RejectReason::kTpDoesNotDivideFfn,
                 "tp=8 does not divide ffn_hidden_size=14340");
  f = ok;
  f.pp = 64;
  expect_rejects(layout_rules(), f, RejectReason::kLayersAcrossStages,
                 "num_layers=32 cannot be split evenly over pp*virtual_stages = 64 model chunks");
  // Uneven but at least one layer per stage: balanced, not rejected.
  f.pp = 24;
  expect_passes(layout_rules(), f);
}

// The heads, FFN and layer rules say what check_plan_fits_model says of the layout's base plan
// (the search used it, and sorted its messages into categories by their text).
TEST(Prune, LayoutRulesAgreeWithCheckPlanFitsModel) {
  for (const char* name : {"tiny.json", "llama3-8b.json", "mixtral-8x7b.json", "gpt3.json"}) {
    const ModelSpec m = load_repo_model(name);
    for (std::int64_t tp : {1, 2, 3, 4, 6, 8, 16, 32, 64})
      for (std::int64_t pp = 1; pp <= 2 * m.num_layers + 1; ++pp) {
        SCOPED_TRACE(std::string(name) + " tp=" + std::to_string(tp) + " pp=" +
                     std::to_string(pp));
        const LayoutFacts f{&m, 1024, true, tp, 1, pp, 1, 1};
        Plan base;
        base.tp = tp;
        base.pp = pp;
        if (pp > 1 && m.num_layers % pp != 0 && m.num_layers >= pp)
          base.layers_per_stage = balanced_chunk_layers(m.num_layers, pp);
        const Status st = check_plan_fits_model(base, m);
        const PruneRule<LayoutFacts>* rule = first_rejecting(layout_rules(), f);
        ASSERT_EQ(rule == nullptr, st.ok()) << st.message();
        if (rule) {
          EXPECT_EQ(rule->message(f), st.message());
        }
      }
  }
}

TEST(Prune, ScheduleAndCandidateRules) {
  expect_passes(interleaved_rules(), InterleavedFacts{4, 8});
  expect_rejects(interleaved_rules(), InterleavedFacts{4, 6},
                 RejectReason::kInterleavedMicroBatches,
                 "interleaved: 6 micro-batches is not a multiple of pp=4");
  expect_passes(dualpipe_rules(), DualPipeFacts{4, 8});
  expect_rejects(dualpipe_rules(), DualPipeFacts{3, 12}, RejectReason::kDualPipeOddPp,
                 "dualpipe: pp=3 is odd (stage s holds a copy of stage pp-1-s)");
  expect_rejects(dualpipe_rules(), DualPipeFacts{2, 8}, RejectReason::kDualPipeTwoStages,
                 "dualpipe: pp=2 holds the whole model on both stages, as pp=1 with twice the "
                 "data parallelism does without the pipeline");
  expect_rejects(dualpipe_rules(), DualPipeFacts{4, 6}, RejectReason::kDualPipeMicroBatches,
                 "dualpipe: 6 micro-batches, it needs an even number and at least 2*pp = 8");
  expect_rejects(dualpipe_rules(), DualPipeFacts{4, 9}, RejectReason::kDualPipeMicroBatches,
                 "dualpipe: 9 micro-batches, it needs an even number and at least 2*pp = 8");
  ModelSpec m = load_repo_model("tiny.json");  // 64 tokens
  Plan p;
  p.tp = 8;
  p.sequence_parallel = true;
  expect_passes(candidate_rules(), CandidateFacts{&m, &p});
  p.cp = 2;
  p.tp = 64;
  expect_rejects(candidate_rules(), CandidateFacts{&m, &p},
                 RejectReason::kSequenceParallelVsSeqLen,
                 "sequence_parallel: tp=64 does not divide seq_len/cp = 32");
  p.cp = 1;
  p.tp = 3;
  expect_rejects(candidate_rules(), CandidateFacts{&m, &p},
                 RejectReason::kSequenceParallelVsSeqLen,
                 "sequence_parallel: tp=3 does not divide seq_len=64");
  p.sequence_parallel = false;
  expect_passes(candidate_rules(), CandidateFacts{&m, &p});
}

TEST(Prune, MemoryRules) {
  expect_passes(memory_rules(), MemoryFacts{70e9, 0, 72e9, 80e9, 0.1});
  expect_rejects(memory_rules(), MemoryFacts{91.3e9, 2, 72e9, 80e9, 0.1}, RejectReason::kMemory,
                 "stage 2 needs 91.3 GB, usable 72.0 GB of 80.0 GB (10% headroom)");
  expect_passes(host_memory_rules(), HostMemoryFacts{false, 3e12, 1e12, 2e12});
  expect_passes(host_memory_rules(), HostMemoryFacts{true, 0.5e12, 1e12, 2e12});
  expect_rejects(host_memory_rules(), HostMemoryFacts{true, 3e12, 1e12, 2e12},
                 RejectReason::kHostMemory,
                 "offloaded optimizer states need 3000 GB per node, host has 2000 GB");
  expect_passes(host_memory_rules(), HostMemoryFacts{true, 0.5e12, 1e12, 2e12, 20e12, 30e12});
  expect_rejects(host_memory_rules(), HostMemoryFacts{true, 3e12, 1e12, 2e12, 0, 30e12, true},
                 RejectReason::kHostMemory,
                 "offloaded parameters, gradients and optimizer states need 3000 GB per node, "
                 "host has 2000 GB");
  expect_rejects(host_memory_rules(), HostMemoryFacts{true, 0.5e12, 1e12, 2e12, 40e12, 30e12},
                 RejectReason::kNvmeCapacity,
                 "states on NVMe need 40000 GB per node, the node has 30000 GB of NVMe "
                 "(nvme_TB_per_node)");
}

TEST(Prune, FullRecomputeIsRejectedWhenRecomputeNoneFits) {
  const ModelSpec m = load_repo_model("tiny.json");
  auto c = make_cluster("H100-80GB", 8, 8);
  ASSERT_TRUE(c.ok());
  const Estimator est(m, *c, std::nullopt);
  Plan p;
  p.dp = 8;
  p.global_batch_size = 8;
  p.recompute = Recompute::kFull;
  const double none_bytes = [&] {
    Plan none = p;
    none.recompute = Recompute::kNone;
    return est.peak_memory_bytes(none);
  }();
  expect_rejects(recompute_rules(), RecomputeFacts{&est, &p, none_bytes},
                 RejectReason::kFullRecomputeNotNeeded,
                 describe(p) + ": fits in memory with recompute none, which is faster");
  expect_passes(recompute_rules(), RecomputeFacts{&est, &p, none_bytes * 0.99});
  p.recompute = Recompute::kNone;  // the rule judges full recompute only
  expect_passes(recompute_rules(), RecomputeFacts{&est, &p, none_bytes});
}

TEST(Prune, CategoriesAreTheReportsText) {
  const std::pair<RejectReason, const char*> expected[] = {
      {RejectReason::kCpAboveMax, "cp above --max-cp"},
      {RejectReason::kCpForShortSequences, "cp for short sequences"},
      {RejectReason::kCpNeedsFusedAttention, "cp needs fused attention"},
      {RejectReason::kCpDoesNotDivideSeqLen, "cp vs seq_len"},
      {RejectReason::kTpLargerThanNode, "tp larger than a node"},
      {RejectReason::kBatchNotDivisibleByDp, "batch not divisible"},
      {RejectReason::kTpDoesNotDivideHeads, "tp vs heads"},
      {RejectReason::kTpDoesNotDivideKvHeads, "tp vs kv heads"},
      {RejectReason::kTpDoesNotDivideFfn, "tp vs ffn width"},
      {RejectReason::kLayersAcrossStages, "layers across stages"},
      {RejectReason::kInterleavedMicroBatches, "interleaved needs micro-batches in groups of pp"},
      {RejectReason::kDualPipeOddPp, "dualpipe needs an even pp"},
      {RejectReason::kDualPipeTwoStages, "dualpipe on 2 stages"},
      {RejectReason::kDualPipeMicroBatches,
       "dualpipe needs an even count of micro-batches >= 2pp"},
      {RejectReason::kSequenceParallelVsSeqLen, "sequence parallel vs seq_len"},
      {RejectReason::kMemory, "memory"},
      {RejectReason::kFullRecomputeNotNeeded, "full recompute not needed"},
      {RejectReason::kHostMemory, "host memory"},
      {RejectReason::kNvmeCapacity, "nvme capacity"},
      {RejectReason::kMemorySimulated, "memory (simulated)"},
  };
  ASSERT_EQ(std::size(expected), kRejectReasonCount);
  for (const auto& [reason, text] : expected) EXPECT_EQ(reject_category(reason), text);
}

TEST(Prune, RejectionsCountByReasonAndKeepTheFirstMessage) {
  Rejections r;
  int built = 0;
  auto message = [&](const char* s) {
    return [&built, s] {
      ++built;
      return std::string(s);
    };
  };
  r.add(RejectReason::kMemory, 1, message("first"));
  r.add(RejectReason::kMemory, 3, message("second"));
  r.add(RejectReason::kTpLargerThanNode, 12, message("tp"));
  EXPECT_EQ(built, 2);  // a message is built once per reason
  EXPECT_EQ(r.count(RejectReason::kMemory), 4);
  EXPECT_EQ(r.example(RejectReason::kMemory), "first");
  EXPECT_FALSE(r.has(RejectReason::kHostMemory));
  EXPECT_EQ(r.total(), 16);
  EXPECT_EQ(r.reasons(),
            (std::vector<RejectReason>{RejectReason::kTpLargerThanNode, RejectReason::kMemory}));
}

}  // namespace
}  // namespace trainplan
