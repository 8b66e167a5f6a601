// Scaled-down runs of a plan; see scale_down.h.
#include "executor/scale_down.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace trainplan::executor {
namespace {

// The target sizes: a layer a CPU core trains in milliseconds, a sequence long enough for every
// context-parallel chunk to hold several tokens, and byte-level tokens so that `--data` works.
constexpr std::int64_t kSeqTokens = 64;        // at least; rounded up to what the layout divides
constexpr std::int64_t kHeadsPerTpRank = 2;
constexpr std::int64_t kHiddenAtLeast = 64;
constexpr std::int64_t kVocab = 256;            // bytes (executor/data.h)
constexpr std::int64_t kLayersPerChunk = 2;     // enough for partial recompute to leave one out
constexpr std::int64_t kMicroBatchAtMost = 2;
constexpr std::int64_t kMicroBatchesPerStage = 2;  // M = 2 * pp: the pipeline fills and drains

class Changes {
 public:
  explicit Changes(std::vector<std::string>& out) : out_(out) {}
  template <class T>
  void set(const char* field, T& value, T next, const char* why = nullptr) {
    if (value == next) return;
    std::string line = std::string(field) + " " + show(value) + " -> " + show(next);
    if (why != nullptr) line += std::string(" (") + why + ")";
    out_.push_back(std::move(line));
    value = next;
  }

 private:
  static std::string show(std::int64_t v) { return std::to_string(v); }
  static std::string show(bool v) { return v ? "true" : "false"; }
  template <class E>
  static std::string show(E v) {
    return std::string(to_string(v));
  }
  std::vector<std::string>& out_;
};

std::int64_t round_up(std::int64_t v, std::int64_t m) { return (v + m - 1) / m * m; }

// Micro-batches of at most kMicroBatchAtMost sequences, and at most 2 * pp of them per replica
// (a multiple of pp, as the interleaved schedule needs); the global batch follows.
void scale_batch(Plan& p, Changes& c) {
  const std::int64_t m = p.num_micro_batches();
  const std::int64_t mbs = std::min(p.micro_batch_size, kMicroBatchAtMost);
  const std::int64_t micro_batches = std::min(m, kMicroBatchesPerStage * p.pp);
  c.set("micro_batch_size", p.micro_batch_size, mbs);
  c.set("global_batch_size", p.global_batch_size, mbs * p.dp * micro_batches);
}

// kLayersPerChunk layers per model chunk (fewer where a chunk had fewer); an uneven
// layers_per_stage keeps its shape, scaled to its largest chunk; a partial recompute keeps
// leaving layers out.
void scale_layers(ModelSpec& m, Plan& p, Changes& c) {
  const std::vector<std::int64_t> before = chunk_layers(p, m);
  const std::int64_t largest = *std::max_element(before.begin(), before.end());
  const std::int64_t target = std::min(largest, kLayersPerChunk);
  std::vector<std::int64_t> after;
  for (std::int64_t n : before) after.push_back(std::max<std::int64_t>(1, (n * target + largest - 1) / largest));
  if (!p.layers_per_stage.empty()) p.layers_per_stage = after;
  c.set("num_layers", m.num_layers, std::accumulate(after.begin(), after.end(), std::int64_t{0}),
        "layers per model chunk at most 2");
  if (p.recompute_num_layers > 0) {
    std::int64_t n = std::min(target, (p.recompute_num_layers * target + largest - 1) / largest);
    if (p.recompute_num_layers < largest && target > 1) n = std::min(n, target - 1);
    c.set("recompute_num_layers", p.recompute_num_layers, n, "still a part of each chunk");
  }
}

// Heads: 2 per TP rank (head width 64 / heads, at least 16); the FFN keeps its ratio to the
// hidden size; the sequence is the smallest multiple of what context and sequence parallelism
// divide it by that is at least kSeqTokens.
void scale_widths(ModelSpec& m, const Plan& p, Changes& c) {
  const double old_hidden = static_cast<double>(m.hidden_size);
  const std::int64_t heads = std::min(m.num_attention_heads, kHeadsPerTpRank * p.tp);
  const std::int64_t head_dim = std::max<std::int64_t>(16, kHiddenAtLeast / heads);
  // Grouped-query attention keeps its group size where the new head count allows.
  const std::int64_t group = m.num_attention_heads / std::max<std::int64_t>(1, m.num_kv_heads);
  c.set("num_kv_heads", m.num_kv_heads, std::max<std::int64_t>(1, heads / group));
  c.set("num_attention_heads", m.num_attention_heads, heads);
  c.set("head_dim", m.head_dim, head_dim);
  c.set("hidden_size", m.hidden_size, heads * head_dim);
  // An MLP width keeps its ratio to the hidden size, in whole multiples of tp; an expert's (an
  // MoE model's ffn_hidden_size) in whole multiples of expert_tp too, which splits it when
  // folded.
  const double new_hidden = static_cast<double>(m.hidden_size);
  const auto scale_ffn = [&](const char* field, std::int64_t& width, std::int64_t split) {
    if (width == 0) return;
    const double per_rank = static_cast<double>(width) / old_hidden * new_hidden /
                            static_cast<double>(split);
    c.set(field, width, std::max<std::int64_t>(1, std::llround(per_rank)) * split);
  };
  scale_ffn("ffn_hidden_size", m.ffn_hidden_size,
            m.is_moe() ? std::lcm(p.tp, p.expert_tp_size()) : p.tp);
  scale_ffn("shared_expert_ffn_size", m.shared_expert_ffn_size, p.tp);
  scale_ffn("dense_ffn_hidden_size", m.dense_ffn_hidden_size, p.tp);
  c.set("vocab_size", m.vocab_size, kVocab, "byte-level tokens");
  std::int64_t divisor = p.cp > 1 ? 2 * p.cp : 1;
  if (p.sequence_parallel || p.partition_activations) divisor = std::lcm(divisor, p.cp * p.tp);
  const std::int64_t seq = round_up(kSeqTokens, divisor);
  c.set("seq_len", m.seq_len, seq);
  c.set("max_position_embeddings", m.max_position_embeddings, seq);
}

// What the CPU executor runs (executor/params.h's check_executor_supports): a GPT block.
void to_executor_model(ModelSpec& m, Changes& c) {
  const char* gpt = "the CPU executor runs a GPT block";
  c.set("num_kv_heads", m.num_kv_heads, m.num_attention_heads,
        "grouped-query attention -> multi-head: the CPU executor runs multi-head attention");
  c.set("kv_lora_rank", m.kv_lora_rank, std::int64_t{0}, "latent attention -> multi-head");
  c.set("q_lora_rank", m.q_lora_rank, std::int64_t{0}, "latent attention -> multi-head");
  c.set("qk_rope_head_dim", m.qk_rope_head_dim, std::int64_t{0}, "latent attention -> multi-head");
  c.set("v_head_dim", m.v_head_dim, std::int64_t{0}, "value heads as wide as query heads");
  c.set("activation", m.activation, Activation::kGelu, gpt);
  c.set("norm", m.norm, NormKind::kLayerNorm, gpt);
  c.set("position_embedding", m.position, PositionKind::kLearned, gpt);
  c.set("bias", m.bias, true, gpt);
  c.set("dropout", m.dropout, false, "the executor trains without dropout");
  c.set("router_groups", m.router_groups, std::int64_t{0},
        "group-limited routing -> top-k over every expert: the CPU executor routes so");
  c.set("router_group_topk", m.router_group_topk, std::int64_t{0}, "no groups");
}

// Layers that stay dense in an MoE stack: those below the new layer count, at least one MoE
// layer left.
void scale_dense_layers(ModelSpec& m, Changes& c) {
  if (m.dense_layers.empty()) return;
  std::vector<std::int64_t> kept;
  for (std::int64_t l : m.dense_layers)
    if (l < m.num_layers - 1) kept.push_back(l);
  std::int64_t before = static_cast<std::int64_t>(m.dense_layers.size());
  m.dense_layers = kept;
  c.set("dense_layers (count)", before, static_cast<std::int64_t>(kept.size()));
}

// What the CPU executor runs of the plan: float32 everywhere, states in its one memory, each
// collective whole.
void to_executor_plan(Plan& p, Changes& c) {
  c.set("precision", p.precision, Precision::kFp32,
        "the CPU executor computes and communicates float32");
  c.set("fp8", p.fp8, false, "the CPU executor computes in float32");
  c.set("fp8_scaling", p.fp8_scaling, Fp8Scaling::kCurrent, "no FP8 casts");
  c.set("fp8_weight_cache", p.fp8_weight_cache, false, "no FP8 casts");
  c.set("fp8_all_gather", p.fp8_all_gather, false, "no FP8 weights to gather");
  c.set("fp8_attention", p.fp8_attention, false, "no FP8 attention kernel");
  c.set("attention_kernel", p.attention_kernel, AttentionKernel::kGeneric,
        "the CPU executor runs its own attention kernel");
  c.set("cross_entropy", p.cross_entropy, CrossEntropy::kFused,
        "the CPU executor runs its own loss");
  c.set("offload", p.offload, Offload::kNone,
        "a scaled-down model's states fit in memory (the CPU executor runs the offload tiers "
        "of an fp32 plan, the nvme tier with --offload-dir)");
  c.set("offload_device", p.offload_device, OffloadDevice::kCpu, "nothing is offloaded");
  c.set("offload_checkpoints", p.offload_checkpoints, false,
        "on a CPU the host is the device: nothing to offload to");
  c.set("zero3_gather", p.zero3_gather, ZeroGather::kFlat,
        "the executors gather each block's parameters flat");
  c.set("zero1_collectives", p.zero1_collectives, ZeroCollectives::kFlat,
        "the executors reduce and gather each block's shards flat");
  c.set("param_gather", p.param_gather, ParamGather::kAfterStep,
        "the executors gather the updated shards after the step");
  c.set("dp_bucket_elements", p.dp_bucket_elements, std::int64_t{0},
        "the executors run one collective per parameter block");
  c.set("ddp_bucket_copy", p.ddp_bucket_copy, false, "the executors keep one gradient buffer");
  c.set("pipeline_scatter_gather", p.pipeline_scatter_gather, false,
        "the executors send a pipeline message whole from each TP rank");
  c.set("grad_accumulation_pass", p.grad_accumulation_pass,
        p.zero_stage >= 2 ? GradAccumulationPass::kShardAdd : GradAccumulationPass::kNone,
        p.zero_stage >= 2 ? "the executors add each reduced gradient shard into an fp32 shard"
                          : "the executors accumulate gradients in the backward");
  c.set("zero3_recompute_gather", p.zero3_recompute_gather, ZeroRecomputeGather::kAgain,
        "the executors gather a recomputed layer's parameters for its recompute and backward");
  c.set("zero3_backward_prefetch", p.zero3_backward_prefetch, ZeroBackwardPrefetch::kAfterReduce,
        "the executors gather a block's parameters when its backward reaches it");
  c.set("zero3_copies", p.zero3_copies, ZeroCopies::kNone,
        "the executors gather into and reduce from each block's own buffer");
  c.set("elementwise", p.elementwise, Elementwise::kFused,
        "the executors run each norm and activation as one kernel");
  c.set("tp_comm_overlap", p.tp_comm_overlap, false,
        "the executor runs each TP collective whole");
  c.set("tp_comm_overlap_impl", p.tp_comm_overlap_impl, TpOverlapImpl::kTeUserbuffers,
        "the executor runs each TP collective whole");
  c.set("defer_embedding_wgrad", p.defer_embedding_wgrad, false,
        "the executors compute the head's weight gradient in each backward");
  c.set("wgrad_deferral_limit", p.wgrad_deferral_limit, std::int64_t{0},
        "the executors defer no weight gradient");
  c.set("cp_comm", p.cp_comm, CpComm::kAllGather,
        "the CPU executor all-gathers K and V and reduce-scatters their gradients");
  c.set("cp_kv_expanded", p.cp_kv_expanded, false,
        "the CPU executor's attention takes the KV heads as they are");
  c.set("moe_dispatcher", p.moe_dispatcher, MoeDispatcher::kAllToAll,
        "the executors send every routed copy through the all-to-all");
}

}  // namespace

Result<ScaledRun> scale_down(const ModelSpec& model, const Plan& plan) {
  TRAINPLAN_RETURN_IF_ERROR(validate_plan(plan));
  TRAINPLAN_RETURN_IF_ERROR(check_plan_fits_model(plan, model));
  ScaledRun r{model, plan, {}};
  Changes c(r.changes);
  r.model.name = model.name + " (scaled down)";
  scale_batch(r.plan, c);
  scale_layers(r.model, r.plan, c);
  scale_dense_layers(r.model, c);
  scale_widths(r.model, r.plan, c);
  to_executor_model(r.model, c);
  to_executor_plan(r.plan, c);
  // The result must be a run the planner would accept, or the scaling rules are wrong.
  Status s = validate_plan(r.plan);
  if (s.ok()) s = check_plan_fits_model(r.plan, r.model);
  if (!s.ok())
    return Status::Error("--scale-down made a plan that does not fit its model (" + s.message() +
                             "); please report it with the plan",
                         ExitCode::kInternal);
  return r;
}

}  // namespace trainplan::executor
