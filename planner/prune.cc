// The pruning rules; see prune.h. Tested by tests/planner/prune_test.cc.
#include "planner/prune.h"

#include <cstdio>

namespace trainplan {

namespace {

std::string str(std::int64_t v) { return std::to_string(v); }

constexpr std::array<std::string_view, kRejectReasonCount> kCategories = {
    "cp above --max-cp",
    "cp for short sequences",
    "cp needs fused attention",
    "cp vs seq_len",
    "tp larger than a node",
    "batch not divisible",
    "tp vs heads",
    "tp vs kv heads",
    "tp vs ffn width",
    "layers across stages",
    "interleaved needs micro-batches in groups of pp",
    "dualpipe needs an even pp",
    "dualpipe on 2 stages",
    "dualpipe needs an even count of micro-batches >= 2pp",
    "sequence parallel vs seq_len",
    "memory",
    "full recompute not needed",
    "host memory",
    "nvme capacity",
    "memory (simulated)",
};

// --- cp ---------------------------------------------------------------------------------------

constexpr std::array<PruneRule<CpFacts>, 4> kCpRules = {{
    {RejectReason::kCpAboveMax,
     [](const CpFacts& f) { return f.max_cp > 0 && f.cp > f.max_cp; },
     [](const CpFacts& f) { return "cp=" + str(f.cp) + " exceeds --max-cp " + str(f.max_cp); }},
    // Below min_cp_seq_len a sequence's activations are small and dp, tp or pp split the work
    // with less communication than CP's per-layer K,V all-gathers (see PlannerOptions::max_cp).
    {RejectReason::kCpForShortSequences,
     [](const CpFacts& f) { return f.model->seq_len < f.min_cp_seq_len; },
     [](const CpFacts& f) {
       return "cp=" + str(f.cp) + ": seq_len=" + str(f.model->seq_len) + " is below " +
              str(f.min_cp_seq_len) + " tokens, where context parallelism is searched";
     }},
    // Megatron-Core runs CP inside Transformer Engine's fused attention (TEDotProductAttention).
    {RejectReason::kCpNeedsFusedAttention,
     [](const CpFacts& f) { return f.attention != AttentionImpl::kFused; },
     [](const CpFacts& f) {
       return "cp=" + str(f.cp) +
              " needs attention=fused (Megatron-Core's context parallelism runs on fused "
              "attention kernels)";
     }},
    // Load balancing splits each sequence into 2*cp equal chunks (Megatron-Core docs, "context
    // parallel"; Transformer Engine's get_batch_on_this_cp_rank).
    {RejectReason::kCpDoesNotDivideSeqLen,
     [](const CpFacts& f) { return f.model->seq_len % (2 * f.cp) != 0; },
     [](const CpFacts& f) {
       return "cp=" + str(f.cp) + ": seq_len=" + str(f.model->seq_len) +
              " is not divisible by 2*cp = " + str(2 * f.cp) + " (load-balanced causal chunks)";
     }},
}};

// --- layout -----------------------------------------------------------------------------------
// The heads, FFN and layer rules say what check_plan_fits_model (core/plan.cc) says of the
// layout's base plan, in its order; tests/planner/prune_test.cc holds them to it.

constexpr std::array<PruneRule<LayoutFacts>, 6> kLayoutRules = {{
    {RejectReason::kTpLargerThanNode,
     [](const LayoutFacts& f) { return f.tp > f.gpus_per_node && !f.allow_cross_node_tp; },
     [](const LayoutFacts& f) {
       return "tp=" + str(f.tp) + " exceeds gpus_per_node=" + str(f.gpus_per_node) +
              " (TP all-reduces every layer; allow with --allow-cross-node-tp)";
     }},
    {RejectReason::kBatchNotDivisibleByDp,
     [](const LayoutFacts& f) { return f.global_batch_size % f.dp != 0; },
     [](const LayoutFacts& f) {
       return "global_batch_size=" + str(f.global_batch_size) + " is not divisible by dp=" +
              str(f.dp);
     }},
    {RejectReason::kTpDoesNotDivideHeads,
     [](const LayoutFacts& f) { return f.model->num_attention_heads % f.tp != 0; },
     [](const LayoutFacts& f) {
       return "tp=" + str(f.tp) + " does not divide num_attention_heads=" +
              str(f.model->num_attention_heads);
     }},
    {RejectReason::kTpDoesNotDivideKvHeads,
     [](const LayoutFacts& f) { return f.model->num_kv_heads % f.tp != 0; },
     [](const LayoutFacts& f) {
       return "tp=" + str(f.tp) + " does not divide num_kv_heads=" + str(f.model->num_kv_heads);
     }},
    {RejectReason::kTpDoesNotDivideFfn,
     [](const LayoutFacts& f) { return f.model->ffn_hidden_size % f.tp != 0; },
     [](const LayoutFacts& f) {
       return "tp=" + str(f.tp) + " does not divide ffn_hidden_size=" +
              str(f.model->ffn_hidden_size);
     }},
    // Layers that do not divide over the stages are balanced (the end stages take one fewer)
    // as long as every stage gets one.
    {RejectReason::kLayersAcrossStages,
     [](const LayoutFacts& f) {
       return f.model->num_layers % f.pp != 0 && f.model->num_layers < f.pp;
     },
     [](const LayoutFacts& f) {
       return "num_layers=" + str(f.model->num_layers) +
              " cannot be split evenly over pp*virtual_stages = " + str(f.pp) + " model chunks";
     }},
}};

// --- schedule ---------------------------------------------------------------------------------

// Megatron-LM's interleaved schedule runs micro-batches in groups of pp.
constexpr std::array<PruneRule<InterleavedFacts>, 1> kInterleavedRules = {{
    {RejectReason::kInterleavedMicroBatches,
     [](const InterleavedFacts& f) { return f.micro_batches % f.pp != 0; },
     [](const InterleavedFacts& f) {
       return "interleaved: " + str(f.micro_batches) + " micro-batches is not a multiple of pp=" +
              str(f.pp);
     }},
}};

// DualPipe pairs stage s with its mirror pp-1-s and feeds half the micro-batches at each end.
// With two stages each holds both chunks, the whole model: the layout with pp 1 and twice the
// data parallelism holds the same and sends nothing between stages, so the search skips it
// (a plan file may still name it).
constexpr std::array<PruneRule<DualPipeFacts>, 3> kDualPipeRules = {{
    {RejectReason::kDualPipeOddPp, [](const DualPipeFacts& f) { return f.pp % 2 != 0; },
     [](const DualPipeFacts& f) {
       return "dualpipe: pp=" + str(f.pp) + " is odd (stage s holds a copy of stage pp-1-s)";
     }},
    {RejectReason::kDualPipeTwoStages, [](const DualPipeFacts& f) { return f.pp == 2; },
     [](const DualPipeFacts&) {
       return std::string("dualpipe: pp=2 holds the whole model on both stages, as pp=1 with "
                          "twice the data parallelism does without the pipeline");
     }},
    {RejectReason::kDualPipeMicroBatches,
     [](const DualPipeFacts& f) { return f.micro_batches % 2 != 0 || f.micro_batches < 2 * f.pp; },
     [](const DualPipeFacts& f) {
       return "dualpipe: " + str(f.micro_batches) +
              " micro-batches, it needs an even number and at least 2*pp = " + str(2 * f.pp);
     }},
}};

// --- candidate --------------------------------------------------------------------------------

// Sequence parallelism shards each CP rank's tokens over the TP ranks (Korthikanti et al. 2022).
constexpr std::array<PruneRule<CandidateFacts>, 1> kCandidateRules = {{
    {RejectReason::kSequenceParallelVsSeqLen,
     [](const CandidateFacts& f) {
       return f.plan->sequence_parallel && (f.model->seq_len / f.plan->cp) % f.plan->tp != 0;
     },
     [](const CandidateFacts& f) {
       return "sequence_parallel: tp=" + str(f.plan->tp) + " does not divide seq_len" +
              (f.plan->cp > 1 ? "/cp = " : "=") + str(f.model->seq_len / f.plan->cp);
     }},
}};

constexpr std::array<PruneRule<MemoryFacts>, 1> kMemoryRules = {{
    {RejectReason::kMemory, [](const MemoryFacts& f) { return f.peak_bytes > f.usable_bytes; },
     [](const MemoryFacts& f) {
       char buf[200];
       std::snprintf(buf, sizeof buf,
                     "stage %lld needs %.1f GB, usable %.1f GB of %.1f GB (%.0f%% headroom)",
                     static_cast<long long>(f.peak_stage), f.peak_bytes / 1e9,
                     f.usable_bytes / 1e9, f.capacity_bytes / 1e9, f.headroom * 100);
       return std::string(buf);
     }},
}};

constexpr std::array<PruneRule<RecomputeFacts>, 1> kRecomputeRules = {{
    {RejectReason::kFullRecomputeNotNeeded,
     [](const RecomputeFacts& f) {
       if (f.plan->recompute != Recompute::kFull) return false;
       Plan none = *f.plan;
       none.recompute = Recompute::kNone;
       return f.estimator->peak_memory_bytes(none) <= f.usable_bytes;
     },
     [](const RecomputeFacts& f) {
       return describe(*f.plan) + ": fits in memory with recompute none, which is faster";
     }},
}};

// ZeRO-Offload keeps optimizer states in host memory (Ren et al. 2021); ZeRO-Infinity also
// parameters and gradients, or puts states on the node's NVMe drives (Rajbhandari et al. 2021).
constexpr std::array<PruneRule<HostMemoryFacts>, 2> kHostMemoryRules = {{
    {RejectReason::kHostMemory,
     [](const HostMemoryFacts& f) { return f.offload && f.need_bytes > f.usable_bytes; },
     [](const HostMemoryFacts& f) {
       return std::string(f.params ? "offloaded parameters, gradients and optimizer states"
                                   : "offloaded optimizer states") +
              " need " +
              std::to_string(static_cast<long long>(f.need_bytes / 1e9)) +
              " GB per node, host has " +
              std::to_string(static_cast<long long>(f.capacity_bytes / 1e9)) + " GB";
     }},
    {RejectReason::kNvmeCapacity,
     [](const HostMemoryFacts& f) {
       return f.offload && f.nvme_need_bytes > 0 && f.nvme_need_bytes > f.nvme_capacity_bytes;
     },
     [](const HostMemoryFacts& f) {
       return "states on NVMe need " +
              std::to_string(static_cast<long long>(f.nvme_need_bytes / 1e9)) +
              " GB per node, the node has " +
              std::to_string(static_cast<long long>(f.nvme_capacity_bytes / 1e9)) +
              " GB of NVMe (nvme_TB_per_node)";
     }},
}};

}  // namespace

std::string_view reject_category(RejectReason reason) {
  return kCategories[static_cast<std::size_t>(reason)];
}

std::vector<RejectReason> Rejections::reasons() const {
  std::vector<RejectReason> out;
  for (std::size_t i = 0; i < kRejectReasonCount; ++i)
    if (seen_[i]) out.push_back(static_cast<RejectReason>(i));
  return out;
}

std::int64_t Rejections::total() const {
  std::int64_t t = 0;
  for (std::int64_t n : count_) t += n;
  return t;
}

std::span<const PruneRule<CpFacts>> cp_rules() { return kCpRules; }
std::span<const PruneRule<LayoutFacts>> layout_rules() { return kLayoutRules; }
std::span<const PruneRule<InterleavedFacts>> interleaved_rules() { return kInterleavedRules; }
std::span<const PruneRule<DualPipeFacts>> dualpipe_rules() { return kDualPipeRules; }
std::span<const PruneRule<CandidateFacts>> candidate_rules() { return kCandidateRules; }
std::span<const PruneRule<MemoryFacts>> memory_rules() { return kMemoryRules; }
std::span<const PruneRule<RecomputeFacts>> recompute_rules() { return kRecomputeRules; }
std::span<const PruneRule<HostMemoryFacts>> host_memory_rules() { return kHostMemoryRules; }

}  // namespace trainplan
