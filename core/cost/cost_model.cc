// The cost model; see cost_model.h for the sources. Tested by tests/core/cost_model_test.cc.
#include "core/cost/cost_model.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <optional>

namespace trainplan {

std::string_view to_string(Pass p) {
  switch (p) {
    case Pass::kForward: return "forward";
    case Pass::kBackward: return "backward";
    case Pass::kRecompute: return "recompute";
  }
  return "?";
}

std::string_view to_string(MemoryKernel k) {
  switch (k) {
    case MemoryKernel::kElementwise: return "elementwise";
    case MemoryKernel::kNorm: return "norm";
    case MemoryKernel::kActivation: return "activation";
    case MemoryKernel::kSoftmax: return "softmax";
    case MemoryKernel::kEmbedding: return "embedding";
    case MemoryKernel::kOptimizer: return "optimizer";
    case MemoryKernel::kCount: break;
  }
  return "?";
}

std::string_view to_string(CommGroup g) {
  switch (g) {
    case CommGroup::kTp: return "tp";
    case CommGroup::kPp: return "pp";
    case CommGroup::kDp: return "dp";
    case CommGroup::kEp: return "ep";
    case CommGroup::kExpertDp: return "expert_dp";
    case CommGroup::kEmbedding: return "embedding";
    case CommGroup::kCp: return "cp";
    case CommGroup::kDpReplica: return "dp_replica";
  }
  return "?";
}

std::string_view report_group(CommGroup g) {
  switch (g) {
    case CommGroup::kTp: return "tp";
    case CommGroup::kCp: return "cp";
    case CommGroup::kPp:
    case CommGroup::kEmbedding: return "pp";
    case CommGroup::kDp:
    case CommGroup::kDpReplica:
    case CommGroup::kExpertDp: return "dp";
    case CommGroup::kEp: return "ep";
  }
  return "?";
}

namespace {

double d(std::int64_t v) { return static_cast<double>(v); }

// ---- parameter pieces, on one of t tensor-parallel ranks (t = 1: the whole model) ----
// Column-parallel weights and biases are split by t; the row-parallel output bias and the norms
// are replicated (Megatron-LM's ColumnParallelLinear / RowParallelLinear).
double norm_params(const ModelSpec& m, std::int64_t width) {
  return m.norm == NormKind::kLayerNorm ? 2.0 * d(width) : d(width);
}
double norm_params(const ModelSpec& m) { return norm_params(m, m.hidden_size); }
double mlp_matrices(const ModelSpec& m) { return m.activation == Activation::kSwiglu ? 3.0 : 2.0; }
// One MLP of inner width `width` (an expert, a dense layer's MLP, the shared experts).
double mlp_params_per_rank(const ModelSpec& m, std::int64_t width, std::int64_t t) {
  const double h = d(m.hidden_size), f = d(width);
  double p = mlp_matrices(m) * h * f / d(t);
  if (m.bias) p += (mlp_matrices(m) - 1.0) * f / d(t) + h;
  return p;
}
double router_params(const ModelSpec& m) {
  return m.is_moe() ? d(m.hidden_size) * d(m.num_experts) : 0.0;
}
// Multi-head latent attention's down-projections and latent norms: Megatron-Core builds them
// "duplicated" (every TP rank holds them whole; multi_latent_attention.py with Transformer
// Engine), so they are not divided by t. Zero without MLA.
double mla_replicated_params(const ModelSpec& m) {
  if (!m.is_mla()) return 0.0;
  const double h = d(m.hidden_size);
  double p = h * d(m.kv_lora_rank + m.qk_rope_head_dim) + norm_params(m, m.kv_lora_rank);
  if (m.q_lora_rank > 0) p += h * d(m.q_lora_rank) + norm_params(m, m.q_lora_rank);
  return p;
}
// Q, K, V and the output projection. With MLA, queries come up from their latent (or straight
// from the input) and keys' non-rotary part and values from theirs (DeepSeek-V2 eqs. 9-13).
double attention_params_per_rank(const ModelSpec& m, std::int64_t t) {
  const double h = d(m.hidden_size), q = d(m.q_width()), o = d(m.o_width());
  double in_width = q + d(m.kv_width()) + d(m.v_width());  // column-parallel outputs
  double split = h * in_width;
  if (m.is_mla()) {
    const double heads = d(m.num_attention_heads);
    in_width = q + heads * d(m.head_dim - m.qk_rope_head_dim + m.v_dim());
    split = (m.q_lora_rank > 0 ? d(m.q_lora_rank) : h) * q +
            d(m.kv_lora_rank) * heads * d(m.head_dim - m.qk_rope_head_dim + m.v_dim());
  }
  double p = (split + o * h) / d(t) + mla_replicated_params(m);
  if (m.bias) p += in_width / d(t) + h;
  return p;
}

// Parameters of each block kind on one rank, rounded to whole parameters. `m` is a layer's
// view (layer_model): an MoE layer's dense part is its router and shared experts.
std::int64_t layer_dense_params(const ModelSpec& m, std::int64_t t) {
  double mlp = mlp_params_per_rank(m, m.ffn_hidden_size, t);
  if (m.is_moe()) {
    mlp = router_params(m);
    if (m.shared_expert_ffn_size > 0) mlp += mlp_params_per_rank(m, m.shared_expert_ffn_size, t);
  }
  return std::llround(attention_params_per_rank(m, t) + 2.0 * norm_params(m) + mlp);
}
std::int64_t layer_expert_params(const ModelSpec& m, const Plan& p) {
  return m.is_moe() ? std::llround(d(m.num_experts / p.ep) *
                                   mlp_params_per_rank(m, m.ffn_hidden_size, p.tp))
                    : 0;
}
// Parameters TP replicates and sequence parallelism gives each TP rank only its tokens' share
// of the gradient for: the block's norms and MLA's down-projections (Megatron-LM marks both
// `sequence_parallel` and sums their gradients over TP once per step).
std::int64_t layer_tp_replicated_params(const ModelSpec& m) {
  return std::llround(2.0 * norm_params(m) + mla_replicated_params(m));
}
double vocab_rows_per_rank(const ModelSpec& m, std::int64_t t);
std::int64_t embedding_block_params(const ModelSpec& m, std::int64_t t) {
  double params = vocab_rows_per_rank(m, t) * d(m.hidden_size);
  if (m.position == PositionKind::kLearned)
    params += d(m.max_position_embeddings) * d(m.hidden_size);
  return std::llround(params);
}
// Final norm, plus the head matrix when untied, or the tied copy pp > 1 keeps on this stage.
std::int64_t head_block_params(const ModelSpec& m, const Plan& p) {
  double params = norm_params(m);
  if (!m.tie_word_embeddings || p.pp > 1) params += vocab_rows_per_rank(m, p.tp) * d(m.hidden_size);
  return std::llround(params);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Parameters

std::int64_t padded_vocab(const ModelSpec& model, std::int64_t tp) {
  const std::int64_t multiple = 128 * tp;
  return (model.vocab_size + multiple - 1) / multiple * multiple;
}

namespace {
double vocab_rows_per_rank(const ModelSpec& m, std::int64_t t) {
  return d(padded_vocab(m, t)) / d(t);
}
}  // namespace

double ParameterCounts::total() const {
  return embedding + position + attention + mlp + norms + final_norm + lm_head;
}

double ParameterCounts::active() const {
  return embedding + position + attention + active_mlp + norms + final_norm + lm_head;
}

// Megatron-LM's count (Narayanan et al. 2021, sec. 5.1): P = 12*l*h^2*(1 + 13/(12h) +
// (V+s)/(12*l*h)) for the GPT shape; this generalises it to GQA, MLA, SwiGLU, MoE (shared
// experts and dense layers included) and RMSNorm.
ParameterCounts count_parameters(const ModelSpec& m) {
  ParameterCounts c;
  c.embedding = d(m.vocab_size) * d(m.hidden_size);
  c.position = m.position == PositionKind::kLearned
                   ? d(m.max_position_embeddings) * d(m.hidden_size)
                   : 0.0;
  const LayerKindCounts kinds = layer_kind_counts(m, 0, m.num_layers);
  for (LayerKind kind : {LayerKind::kDense, LayerKind::kMoe}) {
    const double n = d(kinds.of(kind));
    if (n == 0) continue;
    const ModelSpec lm = layer_model(m, kind);
    const double shared =
        lm.shared_expert_ffn_size > 0 ? mlp_params_per_rank(lm, lm.shared_expert_ffn_size, 1) : 0;
    const double one = mlp_params_per_rank(lm, lm.ffn_hidden_size, 1);
    // attention_params_per_rank(t = 1) counts MLA's latent norms; the block's two norms apart.
    c.attention += n * attention_params_per_rank(lm, 1);
    c.mlp += n * (d(lm.num_experts) * one + router_params(lm) + shared);
    c.active_mlp += n * (d(lm.experts_per_token) * one + router_params(lm) + shared);
    c.norms += n * 2.0 * norm_params(lm);
  }
  c.final_norm = norm_params(m);
  c.lm_head = m.tie_word_embeddings ? 0.0 : d(m.vocab_size) * d(m.hidden_size);
  return c;
}

namespace {
// The embedding or head block; both hold the tied copy that pp > 1 keeps on two stages.
ParamBlock edge_block(const ModelSpec& m, const Plan& p, BlockKind kind) {
  ParamBlock b;
  b.kind = kind;
  b.tied_copy = m.tie_word_embeddings && p.pp > 1;
  b.tied_params =
      b.tied_copy ? std::llround(vocab_rows_per_rank(m, p.tp) * d(m.hidden_size)) : 0;
  if (kind == BlockKind::kEmbedding) {
    b.dense_params = embedding_block_params(m, p.tp);
  } else {
    b.dense_params = head_block_params(m, p);
    b.tp_replicated_params = std::llround(norm_params(m));
  }
  return b;
}
ParamBlock embedding_block(const ModelSpec& m, const Plan& p) {
  return edge_block(m, p, BlockKind::kEmbedding);
}
ParamBlock head_block(const ModelSpec& m, const Plan& p) {
  return edge_block(m, p, BlockKind::kHead);
}
// A layer's block; `lm` is the layer's view (layer_model).
ParamBlock layer_block(const ModelSpec& lm, const Plan& p) {
  ParamBlock b;
  b.kind = BlockKind::kLayer;
  b.dense_params = layer_dense_params(lm, p.tp);
  b.expert_params = layer_expert_params(lm, p);
  b.tp_replicated_params = layer_tp_replicated_params(lm);
  return b;
}
}  // namespace

std::vector<ParamBlock> param_blocks_on_stage(const ModelSpec& m, const Plan& p,
                                              std::int64_t stage) {
  std::vector<ParamBlock> blocks;
  if (stage == 0) blocks.push_back(embedding_block(m, p));
  std::array<std::optional<ParamBlock>, kLayerKindCount> by_kind;
  const std::vector<std::int64_t> layers = chunk_layers(p, m);
  std::vector<std::int64_t> first_layer(layers.size(), 0);
  for (std::size_t c = 1; c < layers.size(); ++c) first_layer[c] = first_layer[c - 1] + layers[c - 1];
  for (std::int64_t v = 0; v < p.virtual_stages; ++v) {
    const auto c = static_cast<std::size_t>(v * p.pp + stage);
    for (std::int64_t i = 0; i < layers[c]; ++i) {
      const std::int64_t layer = first_layer[c] + i;
      const LayerKind kind = layer_kind(m, layer);
      auto& proto = by_kind[static_cast<std::size_t>(kind)];
      if (!proto) proto = layer_block(layer_model(m, kind), p);
      ParamBlock b = *proto;
      b.layer = layer;
      b.recomputed = recomputes_layer(p, i);
      blocks.push_back(b);
    }
  }
  if (stage == p.pp - 1) blocks.push_back(head_block(m, p));
  return blocks;
}

namespace {
// Calls fn once for each distinct block on the stage (embedding, one layer of each kind, head),
// without allocating: what a maximum over param_blocks_on_stage needs.
template <typename Fn>
void for_each_block_shape_on_stage(const ModelSpec& m, const Plan& p, std::int64_t stage, Fn fn) {
  if (stage == 0) fn(embedding_block(m, p));
  const LayerKindCounts kinds = layer_kinds_on_stage(p, m, stage);
  for (LayerKind kind : {LayerKind::kDense, LayerKind::kMoe})
    if (kinds.of(kind) > 0)
      fn(with_layer_model(m, kind, [&](const ModelSpec& lm) { return layer_block(lm, p); }));
  if (stage == p.pp - 1) fn(head_block(m, p));
}
}  // namespace

std::int64_t layers_on_stage(const Plan& p, const ModelSpec& m, std::int64_t stage) {
  const LayerKindCounts kinds = layer_kinds_on_stage(p, m, stage);
  return kinds.dense + kinds.moe;
}

namespace {
// Calls fn(first layer, layers) for each model chunk on the stage, as chunk_layers() splits them
// (evenly, the first L mod chunks holding one more), without allocating: the planner calls
// this per candidate.
template <typename Fn>
void for_each_chunk_on_stage(const Plan& p, const ModelSpec& m, std::int64_t stage, Fn fn) {
  const std::int64_t chunks = p.num_chunks(), base = m.num_layers / chunks,
                     extra = m.num_layers % chunks;
  for (std::int64_t v = 0; v < p.virtual_stages; ++v) {
    const std::int64_t c = v * p.pp + stage;
    if (p.layers_per_stage.empty()) {
      fn(c * base + std::min(c, extra), base + (c < extra ? 1 : 0));
      continue;
    }
    std::int64_t first = 0;
    for (std::int64_t i = 0; i < c; ++i) first += p.layers_per_stage[static_cast<std::size_t>(i)];
    fn(first, p.layers_per_stage[static_cast<std::size_t>(c)]);
  }
}

// Layers of each kind on the stage, of each chunk's first `take(chunk layers)` layers.
template <typename Take>
LayerKindCounts kinds_on_stage(const Plan& p, const ModelSpec& m, std::int64_t stage, Take take) {
  LayerKindCounts n;
  for_each_chunk_on_stage(p, m, stage, [&](std::int64_t first, std::int64_t count) {
    const LayerKindCounts c = layer_kind_counts(m, first, take(count));
    n.dense += c.dense;
    n.moe += c.moe;
  });
  return n;
}
}  // namespace

LayerKindCounts layer_kinds_on_stage(const Plan& p, const ModelSpec& m, std::int64_t stage) {
  return kinds_on_stage(p, m, stage, [](std::int64_t count) { return count; });
}

LayerKindCounts recomputed_layer_kinds_on_stage(const Plan& p, const ModelSpec& m,
                                                std::int64_t stage) {
  return kinds_on_stage(p, m, stage,
                        [&](std::int64_t count) { return recomputed_layers_in_chunk(p, count); });
}

// Closed form of the sum over param_blocks_on_stage (no allocation: the planner calls this
// for every candidate). tests/core/cost_model_test.cc checks that the two agree.
StageParameters parameters_on_stage(const ModelSpec& m, const Plan& p, std::int64_t stage) {
  StageParameters s;
  const LayerKindCounts kinds = layer_kinds_on_stage(p, m, stage);
  for (LayerKind kind : {LayerKind::kDense, LayerKind::kMoe}) {
    if (kinds.of(kind) == 0) continue;
    with_layer_model(m, kind, [&](const ModelSpec& lm) {
      s.dense += d(kinds.of(kind)) * d(layer_dense_params(lm, p.tp));
      s.expert += d(kinds.of(kind)) * d(layer_expert_params(lm, p));
    });
  }
  if (stage == 0) s.dense += d(embedding_block_params(m, p.tp));
  if (stage == p.pp - 1) s.dense += d(head_block_params(m, p));
  return s;
}

// ---------------------------------------------------------------------------------------------
// Tasks

namespace {

struct Shape {
  double e;           // bytes per element of activations and weights
  // s: the tokens of one sequence on this rank, seq_len/cp; s_full: the whole sequence, whose
  // keys and values a context-parallel rank's queries attend to.
  std::int64_t s, s_full, cp, b, t, h, q, kv, hd, f, heads_per_rank;
  std::int64_t vd, vw, ow;     // value head width, V's width, the attention output's width
  std::int64_t shared_f;       // MoE layers: the shared experts' inner width (0: none)
  // Multi-head latent attention: latent widths and the rotary key width (0 without MLA).
  std::int64_t ql, kvl, rope;
  // Width of the attention block's input as its TP collectives carry it: h, or with MLA the
  // latents (and the input itself where queries are projected from it directly).
  std::int64_t entry;
  std::int64_t tokens;         // T = s*b, this rank's tokens of the micro-batch
  std::int64_t norm_tokens;    // T/t with sequence parallel, else T
  bool sp, dropout, fused, swiglu, moe, mla;
};

Shape shape_of(const ModelSpec& m, const Plan& p) {
  Shape x{};
  x.e = bytes_per_element(p.precision);
  x.cp = p.cp;
  x.s_full = m.seq_len;
  x.s = m.seq_len / p.cp;
  x.b = p.micro_batch_size;
  x.t = p.tp;
  x.h = m.hidden_size;
  x.q = m.q_width();
  x.kv = m.kv_width();
  x.hd = m.head_dim;
  x.f = m.ffn_hidden_size;
  x.vd = m.v_dim();
  x.vw = m.v_width();
  x.ow = m.o_width();
  x.shared_f = m.is_moe() ? m.shared_expert_ffn_size : 0;
  x.mla = m.is_mla();
  x.ql = m.q_lora_rank;
  x.kvl = m.kv_lora_rank;
  x.rope = m.qk_rope_head_dim;
  x.entry = x.mla ? (x.ql > 0 ? x.ql : x.h) + x.kvl + x.rope : x.h;
  x.heads_per_rank = m.num_attention_heads / p.tp;
  x.tokens = x.s * x.b;
  x.sp = p.sequence_parallel && p.tp > 1;
  x.norm_tokens = x.sp ? x.tokens / x.t : x.tokens;
  x.dropout = m.dropout;
  x.fused = p.attention == AttentionImpl::kFused;
  x.swiglu = m.activation == Activation::kSwiglu;
  x.moe = m.is_moe();
  return x;
}

Task gemm(std::string_view name, std::int64_t m, std::int64_t n, std::int64_t k,
          std::int64_t batch, double e) {
  Task t;
  t.name = name;
  t.kind = TaskKind::kGemm;
  t.m = m;
  t.n = n;
  t.k = k;
  t.batch = batch;
  t.flops = 2.0 * d(batch) * d(m) * d(n) * d(k);
  t.executed_flops = t.flops;
  t.bytes = e * d(batch) * (d(m) * d(k) + d(k) * d(n) + d(m) * d(n));
  return t;
}

Task memory(std::string_view name, double bytes, MemoryKernel kernel) {
  Task t;
  t.name = name;
  t.kind = TaskKind::kMemory;
  t.bytes = bytes;
  t.memory_kernel = kernel;
  return t;
}

Task comm(std::string_view name, Collective c, CommGroup g, std::int64_t group_size,
          double message_bytes) {
  Task t;
  t.name = name;
  t.kind = TaskKind::kComm;
  t.collective = c;
  t.group = g;
  t.group_size = group_size;
  t.message_bytes = std::llround(message_bytes);
  return t;
}

// Drops collectives over a group of one rank: they move nothing and cost nothing.
std::vector<Task> without_trivial_comm(std::vector<Task> tasks) {
  tasks.erase(std::remove_if(tasks.begin(), tasks.end(),
                             [](const Task& t) {
                               return t.kind == TaskKind::kComm && t.group_size <= 1;
                             }),
              tasks.end());
  return tasks;
}

// Megatron's g operator after a row-parallel linear: all-reduce, or reduce-scatter to the
// sequence-parallel region (Korthikanti et al. 2022, sec. 4.2.2).
Task tp_exit(std::string_view ar_name, std::string_view rs_name, const Shape& x) {
  const double bytes = d(x.tokens) * d(x.h) * x.e;
  return x.sp ? comm(rs_name, Collective::kReduceScatter, CommGroup::kTp, x.t, bytes)
              : comm(ar_name, Collective::kAllReduce, CommGroup::kTp, x.t, bytes);
}
// The all-gather that enters a column-parallel linear from the sequence-parallel region.
Task tp_gather(std::string_view name, const Shape& x) {
  return comm(name, Collective::kAllGather, CommGroup::kTp, x.t, d(x.tokens) * d(x.h) * x.e);
}

// The activation's backward reads its input and the incoming gradient and writes the
// gradient: twice the forward's traffic, and the same tanh / exp again (recomputed).
Task activation_backward(const Task& fwd) {
  const std::string_view name = fwd.name == "swiglu"       ? "swiglu_bwd"
                                : fwd.name == "shared_act" ? "shared_act_bwd"
                                                           : "gelu_bwd";
  Task t = memory(name, 2.0 * fwd.bytes, MemoryKernel::kActivation);
  t.transcendentals = fwd.transcendentals;
  return t;
}

// Context parallelism: the keys and values of the whole sequence on this TP rank,
// b*s*(k + v)/t elements in the activations' precision: the all-gather's message (collectives.h: S
// is the gathered size) and the reduce-scatter's of their gradients (S is the unscattered
// size). All-gather based CP as Llama 3 (arXiv:2407.21783 sec. 3.3.2) and Transformer Engine's
// AttnFuncWithCPAndKVAllGather run it.
double cp_kv_bytes(const Shape& x) {
  return d(x.b) * d(x.s_full) * d(x.kv + x.vw) / d(x.t) * x.e;
}
Task cp_gather_kv(std::string_view name, const Shape& x) {
  return comm(name, Collective::kAllGather, CommGroup::kCp, x.cp, cp_kv_bytes(x));
}

// The attention core of this rank's s queries against the keys of the whole sequence (s_full;
// s = s_full without context parallelism). With the load-balanced chunks each CP rank does
// 1/cp of the causal work, so its FLOPs are the full-sequence core's / cp.
void add_attention_core(std::vector<Task>& out, const Shape& x) {
  const std::int64_t batch = x.b * x.heads_per_rank;
  if (x.fused) {
    // FlashAttention-style kernel: 2*b*a*s^2*(hd + vd) model FLOPs (QK^T and PV; 4*b*a*s^2*hd
    // when vd = hd); a causal kernel executes about half of them. Reads Q, K, V and writes O.
    // With a value head narrower than the query/key head (MLA), PV has vd where QK^T has hd.
    Task t = gemm("attention", x.s, x.s_full, x.hd, batch, x.e);
    t.kind = TaskKind::kAttention;
    t.flops = 2.0 * d(batch) * d(x.s) * d(x.s_full) * d(x.hd + x.vd);
    t.executed_flops = t.flops / 2.0;
    t.bytes = x.e * (d(x.tokens) * d(x.q + x.ow) + d(x.b) * d(x.s_full) * d(x.kv + x.vw)) / d(x.t);
    out.push_back(t);
    return;
  }
  out.push_back(gemm("attn_scores", x.s, x.s_full, x.hd, batch, x.e));
  // Scale, causal mask and softmax (one fused kernel), then dropout: read scores, write
  // probabilities; dropout writes a 1-byte mask and the dropped probabilities.
  const double elems = d(batch) * d(x.s) * d(x.s_full);
  Task softmax = memory("softmax", elems * (2.0 * x.e + (x.dropout ? 1.0 + 2.0 * x.e : 0.0)),
                        MemoryKernel::kSoftmax);
  // Causal: an exp for each unmasked score, s(s+1)/2 per row block (Megatron's
  // scaled_upper_triang_masked_softmax skips the masked ones).
  softmax.transcendentals = d(batch) * d(x.s) * d(x.s_full + 1) / 2.0;
  out.push_back(softmax);
  out.push_back(gemm("attn_values", x.s, x.vd, x.s_full, batch, x.e));
}

// One tanh (GELU's approximation) or exp (SiLU's sigmoid) per activation element, over `times`
// token copies of an MLP of inner width f_rank on this rank.
Task activation_task(std::string_view name, const Shape& x, std::int64_t f_rank, double times) {
  Task t = memory(name, d(x.tokens) * d(f_rank) * x.e * (x.swiglu ? 3.0 : 2.0) * times,
                  MemoryKernel::kActivation);
  t.transcendentals = d(x.tokens) * d(f_rank) * times;
  return t;
}
std::string_view activation_name(const Shape& x) { return x.swiglu ? "swiglu" : "gelu"; }

// A tensor-parallel MLP of inner width f on all this rank's tokens: the dense layer's, or an
// MoE layer's shared experts (Megatron-Core's SharedExpertMLP is a dense MLP split over TP).
void add_dense_mlp(std::vector<Task>& out, const Shape& x, std::int64_t f, bool shared) {
  const std::int64_t f_rank = f / x.t;
  out.push_back(gemm(shared ? "shared_fc1" : "fc1", x.tokens, (x.swiglu ? 2 : 1) * f_rank, x.h, 1,
                     x.e));
  out.push_back(activation_task(shared ? "shared_act" : activation_name(x), x, f_rank, 1.0));
  out.push_back(gemm(shared ? "shared_fc2" : "fc2", x.tokens, x.h, f_rank, 1, x.e));
}

void add_mlp_forward(std::vector<Task>& out, const Shape& x, const ModelSpec& m,
                     const Plan& p) {
  if (!x.moe) {
    add_dense_mlp(out, x, x.f, /*shared=*/false);
    return;
  }
  // Mixture of experts: route, send each token to its top-k experts (all-to-all over ep),
  // run the local experts, and send the results back (Lepikhin et al. 2020, GShard).
  const std::int64_t f_rank = x.f / x.t;
  const std::int64_t k = m.experts_per_token;
  const std::int64_t local_experts = m.num_experts / p.ep;
  const double routed = d(x.tokens) * d(k);  // token-expert pairs of this rank's micro-batch
  out.push_back(gemm("router", x.tokens, m.num_experts, x.h, 1, x.e));
  out.push_back(comm("ep_dispatch", Collective::kAllToAll, CommGroup::kEp, p.ep,
                     routed * d(x.h) * x.e));
  // Balanced routing: each local expert sees routed / local_experts tokens (after all-to-all,
  // this rank holds the routed tokens of the whole ep group for its experts).
  const std::int64_t per_expert =
      std::max<std::int64_t>(1, std::llround(routed / d(local_experts)));
  const std::int64_t fc1_n = (x.swiglu ? 2 : 1) * f_rank;
  Task fc1 = gemm("expert_fc1", per_expert, fc1_n, x.h, local_experts, x.e);
  fc1.flops = fc1.executed_flops = 2.0 * routed * d(fc1_n) * d(x.h);
  out.push_back(fc1);
  out.push_back(activation_task(activation_name(x), x, f_rank, d(k)));
  Task fc2 = gemm("expert_fc2", per_expert, x.h, f_rank, local_experts, x.e);
  fc2.flops = fc2.executed_flops = 2.0 * routed * d(x.h) * d(f_rank);
  out.push_back(fc2);
  out.push_back(comm("ep_combine", Collective::kAllToAll, CommGroup::kEp, p.ep,
                     routed * d(x.h) * x.e));
  // Shared experts (DeepSeekMoE, Qwen-MoE, Llama 4): after the routed experts, as Megatron-Core
  // runs them unless moe_shared_expert_overlap is set.
  if (x.shared_f > 0) add_dense_mlp(out, x, x.shared_f, /*shared=*/true);
}

// The attention block's input projections. Standard attention: one column-parallel QKV GEMM
// on the (gathered) input. Multi-head latent attention (DeepSeek-V2 sec. 2.1; Megatron-Core's
// MLASelfAttention): the down-projections to the latents and their norms are duplicated on
// every TP rank and run on this rank's tokens (T/t with sequence parallel, so their FLOPs are
// not repeated); the latents (and, without a query latent, the input) are then gathered and
// up-projected by column-parallel GEMMs.
void add_attention_input(std::vector<Task>& out, const Shape& x) {
  if (!x.mla) {
    if (x.sp) out.push_back(tp_gather("tp_all_gather_attn", x));
    out.push_back(gemm("qkv", x.tokens, (x.q + x.kv + x.vw) / x.t, x.h, 1, x.e));
    return;
  }
  const std::int64_t local = x.norm_tokens;
  if (x.ql > 0) {
    out.push_back(gemm("q_down", local, x.ql, x.h, 1, x.e));
    out.push_back(memory("q_norm", 2.0 * d(local) * d(x.ql) * x.e, MemoryKernel::kNorm));
  }
  out.push_back(gemm("kv_down", local, x.kvl + x.rope, x.h, 1, x.e));
  out.push_back(memory("kv_norm", 2.0 * d(local) * d(x.kvl) * x.e, MemoryKernel::kNorm));
  if (x.sp)
    out.push_back(comm("tp_all_gather_attn", Collective::kAllGather, CommGroup::kTp, x.t,
                       d(x.tokens) * d(x.entry) * x.e));
  out.push_back(x.ql > 0 ? gemm("q_up", x.tokens, x.q / x.t, x.ql, 1, x.e)
                         : gemm("q_proj", x.tokens, x.q / x.t, x.h, 1, x.e));
  // Keys' non-rotary part and values, per head; the rotary key is shared by all heads.
  out.push_back(gemm("kv_up", x.tokens, x.heads_per_rank * (x.hd - x.rope + x.vd), x.kvl, 1,
                     x.e));
}

// Norm: read x, write y. Bias + dropout + residual add: read two, write one, a 1-byte mask.
double norm_bytes(const Shape& x) { return 2.0 * d(x.norm_tokens) * d(x.h) * x.e; }
double residual_bytes(const Shape& x) {
  return d(x.norm_tokens) * d(x.h) * (3.0 * x.e + (x.dropout ? 1.0 : 0.0));
}

// Backward of a GEMM: data gradient dX = dY W^T and weight gradient dW = X^T dY, each with
// the forward's FLOPs (Narayanan et al. 2021: backward = 2x forward).
void add_gemm_backward(std::vector<Task>& out, const Task& fwd, std::string_view dgrad,
                       std::string_view wgrad, double e) {
  Task dg = gemm(dgrad, fwd.m, fwd.k, fwd.n, fwd.batch, e);
  Task wg = gemm(wgrad, fwd.k, fwd.n, fwd.m, fwd.batch, e);
  dg.flops = wg.flops = fwd.flops;
  dg.executed_flops = wg.executed_flops = fwd.executed_flops;
  out.push_back(dg);
  out.push_back(wg);
}

const Task& find_task(const std::vector<Task>& tasks, std::string_view name) {
  for (const Task& t : tasks)
    if (t.name == name) return t;
  TRAINPLAN_CHECK(false) << "no task named " << name;
  return tasks.front();
}

}  // namespace

// FP8 training (Plan::fp8): the linear layers' GEMMs (QKV, output projection, the MLP's and
// the experts', forward and backward) take one-byte operands at the FP8 rate; the attention
// core, the router and the LM head keep the compute precision (Transformer Engine's and
// torchao float8's defaults). Each FP8 operand is made by a memory-bound cast that reads the
// 16-bit tensor twice (its amax, then the scaled cast) and writes it once and once transposed
// for the other GEMM that uses it (Transformer Engine's cast_transpose): (2e + 2) bytes per
// element. Forward GEMMs cast their input and weight; a backward pass casts the incoming
// gradient once, before its data-gradient GEMM (the weight-gradient GEMM reuses it).
namespace {

bool is_linear_gemm(std::string_view name) {
  for (std::string_view prefix : {"qkv", "q_down", "q_up", "q_proj", "kv_down", "kv_up",
                                  "out_proj", "fc1", "fc2", "expert_fc1", "expert_fc2",
                                  "shared_fc1", "shared_fc2"})
    if (name.substr(0, prefix.size()) == prefix) return true;
  return false;
}

void apply_fp8(std::vector<Task>& tasks, double e) {
  std::vector<Task> out;
  out.reserve(tasks.size() * 2);
  const double cast_bytes_per_element = 2.0 * e + 2.0;
  auto ends_with = [](std::string_view s, std::string_view suffix) {
    return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
  };
  for (Task t : tasks) {
    if (t.kind == TaskKind::kGemm && is_linear_gemm(t.name)) {
      const double b = d(t.batch), mk = b * d(t.m) * d(t.k), kn = b * d(t.k) * d(t.n);
      if (ends_with(t.name, "_dgrad")) {
        out.push_back(memory("fp8_cast_grad", cast_bytes_per_element * mk,
                             MemoryKernel::kElementwise));
      } else if (!ends_with(t.name, "_wgrad")) {
        out.push_back(memory("fp8_cast", cast_bytes_per_element * (mk + kn),
                             MemoryKernel::kElementwise));
      }
      t.fp8 = true;
      t.bytes = mk + kn + e * b * d(t.m) * d(t.n);  // one-byte operands, 16-bit output
    }
    out.push_back(t);
  }
  tasks = std::move(out);
}

}  // namespace

std::vector<Task> layer_forward_tasks(const ModelSpec& m, const Plan& p) {
  const Shape x = shape_of(m, p);
  std::vector<Task> out;
  out.push_back(memory("norm1", norm_bytes(x), MemoryKernel::kNorm));
  add_attention_input(out, x);
  out.push_back(cp_gather_kv("cp_all_gather_kv", x));
  add_attention_core(out, x);
  out.push_back(gemm("out_proj", x.tokens, x.h, x.ow / x.t, 1, x.e));
  out.push_back(tp_exit("tp_all_reduce_attn", "tp_reduce_scatter_attn", x));
  out.push_back(memory("residual1", residual_bytes(x), MemoryKernel::kElementwise));
  out.push_back(memory("norm2", norm_bytes(x), MemoryKernel::kNorm));
  if (x.sp) out.push_back(tp_gather("tp_all_gather_mlp", x));
  add_mlp_forward(out, x, m, p);
  out.push_back(tp_exit("tp_all_reduce_mlp", "tp_reduce_scatter_mlp", x));
  out.push_back(memory("residual2", residual_bytes(x), MemoryKernel::kElementwise));
  if (p.fp8) apply_fp8(out, x.e);
  return without_trivial_comm(out);
}

std::vector<Task> layer_backward_tasks(const ModelSpec& m, const Plan& p) {
  const Shape x = shape_of(m, p);
  const std::vector<Task> fwd = layer_forward_tasks(m, p);
  std::vector<Task> out;
  const double th = d(x.tokens) * d(x.h) * x.e;
  // Backward of Megatron's f (identity forward) is an all-reduce; with sequence parallel the
  // backward of the all-gather is a reduce-scatter and of the reduce-scatter an all-gather.
  auto f_backward = [&](std::string_view ar, std::string_view rs) {
    out.push_back(x.sp ? comm(rs, Collective::kReduceScatter, CommGroup::kTp, x.t, th)
                       : comm(ar, Collective::kAllReduce, CommGroup::kTp, x.t, th));
  };
  auto g_backward = [&](std::string_view name) {
    if (x.sp) out.push_back(comm(name, Collective::kAllGather, CommGroup::kTp, x.t, th));
  };
  // The weight gradient of a column-parallel linear needs its full input; with sequence
  // parallel only the local shard was stored, so it is gathered again (Megatron-LM does this).
  auto regather = [&](std::string_view name) {
    if (x.sp) out.push_back(comm(name, Collective::kAllGather, CommGroup::kTp, x.t, th));
  };

  out.push_back(memory("residual2_bwd", residual_bytes(x), MemoryKernel::kElementwise));
  g_backward("tp_all_gather_mlp_grad");
  if (x.moe) {
    if (x.shared_f > 0) {
      add_gemm_backward(out, find_task(fwd, "shared_fc2"), "shared_fc2_dgrad", "shared_fc2_wgrad",
                        x.e);
      out.push_back(activation_backward(find_task(fwd, "shared_act")));
      add_gemm_backward(out, find_task(fwd, "shared_fc1"), "shared_fc1_dgrad", "shared_fc1_wgrad",
                        x.e);
    }
    out.push_back(comm("ep_combine_bwd", Collective::kAllToAll, CommGroup::kEp, p.ep,
                       d(x.tokens) * d(m.experts_per_token) * d(x.h) * x.e));
    add_gemm_backward(out, find_task(fwd, "expert_fc2"), "expert_fc2_dgrad", "expert_fc2_wgrad",
                      x.e);
    out.push_back(activation_backward(find_task(fwd, activation_name(x))));
    add_gemm_backward(out, find_task(fwd, "expert_fc1"), "expert_fc1_dgrad", "expert_fc1_wgrad",
                      x.e);
    out.push_back(comm("ep_dispatch_bwd", Collective::kAllToAll, CommGroup::kEp, p.ep,
                       d(x.tokens) * d(m.experts_per_token) * d(x.h) * x.e));
    add_gemm_backward(out, find_task(fwd, "router"), "router_dgrad", "router_wgrad", x.e);
    regather("tp_all_gather_mlp_input");
  } else {
    add_gemm_backward(out, find_task(fwd, "fc2"), "fc2_dgrad", "fc2_wgrad", x.e);
    out.push_back(activation_backward(find_task(fwd, activation_name(x))));
    const Task& fc1 = find_task(fwd, "fc1");
    Task dg = gemm("fc1_dgrad", fc1.m, fc1.k, fc1.n, 1, x.e);
    dg.flops = dg.executed_flops = fc1.flops;
    out.push_back(dg);
    regather("tp_all_gather_mlp_input");
    Task wg = gemm("fc1_wgrad", fc1.k, fc1.n, fc1.m, 1, x.e);
    wg.flops = wg.executed_flops = fc1.flops;
    out.push_back(wg);
  }
  f_backward("tp_all_reduce_mlp_grad", "tp_reduce_scatter_mlp_grad");
  out.push_back(memory("norm2_bwd", 2.0 * norm_bytes(x), MemoryKernel::kNorm));
  out.push_back(memory("residual1_bwd", residual_bytes(x), MemoryKernel::kElementwise));
  g_backward("tp_all_gather_attn_grad");
  add_gemm_backward(out, find_task(fwd, "out_proj"), "out_proj_dgrad", "out_proj_wgrad", x.e);
  if (x.fused) {
    // Context parallelism: the forward kept only this rank's K and V, so the backward gathers
    // them again, and the gradients of the whole sequence's K and V are reduce-scattered back
    // to their owners (Transformer Engine's AttnFuncWithCPAndKVAllGather.backward).
    out.push_back(cp_gather_kv("cp_all_gather_kv_bwd", x));
    // FlashAttention's backward recomputes the scores: 5 matmuls against the forward's 2,
    // i.e. 2.5x the forward's executed FLOPs (Dao 2023, sec. 3.1).
    Task a = find_task(fwd, "attention");
    a.name = "attention_bwd";
    a.flops = 2.0 * a.flops;
    a.executed_flops = 2.5 * a.executed_flops;
    a.bytes = 2.0 * a.bytes;
    out.push_back(a);
    out.push_back(comm("cp_reduce_scatter_dkv", Collective::kReduceScatter, CommGroup::kCp, x.cp,
                       cp_kv_bytes(x)));
  } else {
    add_gemm_backward(out, find_task(fwd, "attn_values"), "attn_values_dgrad_p",
                      "attn_values_dgrad_v", x.e);
    Task sm = find_task(fwd, "softmax");
    out.push_back(memory("softmax_bwd", sm.bytes * 1.5, MemoryKernel::kSoftmax));
    add_gemm_backward(out, find_task(fwd, "attn_scores"), "attn_scores_dgrad_q",
                      "attn_scores_dgrad_k", x.e);
  }
  // The column-parallel input projections: data gradients, then (with sequence parallel) the
  // input gathered again for their weight gradients, then the input gradient's TP reduction.
  struct Backward { std::string_view fwd, dgrad, wgrad; };
  std::vector<Backward> column_parallel;
  if (!x.mla) {
    column_parallel.push_back({"qkv", "qkv_dgrad", "qkv_wgrad"});
  } else {
    column_parallel.push_back({"kv_up", "kv_up_dgrad", "kv_up_wgrad"});
    column_parallel.push_back(x.ql > 0 ? Backward{"q_up", "q_up_dgrad", "q_up_wgrad"}
                                       : Backward{"q_proj", "q_proj_dgrad", "q_proj_wgrad"});
  }
  auto grad_gemm = [&](const Task& f, std::string_view name, bool weight) {
    Task g = weight ? gemm(name, f.k, f.n, f.m, f.batch, x.e)
                    : gemm(name, f.m, f.k, f.n, f.batch, x.e);
    g.flops = g.executed_flops = f.flops;
    out.push_back(g);
  };
  for (const Backward& b : column_parallel) grad_gemm(find_task(fwd, b.fwd), b.dgrad, false);
  const double entry = d(x.tokens) * d(x.entry) * x.e;  // T*h without MLA
  if (x.sp)
    out.push_back(comm("tp_all_gather_attn_input", Collective::kAllGather, CommGroup::kTp, x.t,
                       entry));
  for (const Backward& b : column_parallel) grad_gemm(find_task(fwd, b.fwd), b.wgrad, true);
  out.push_back(x.sp ? comm("tp_reduce_scatter_attn_grad", Collective::kReduceScatter,
                            CommGroup::kTp, x.t, entry)
                     : comm("tp_all_reduce_attn_grad", Collective::kAllReduce, CommGroup::kTp,
                            x.t, entry));
  if (x.mla) {
    // The duplicated down-projections and latent norms, on this rank's tokens.
    const std::int64_t local = x.norm_tokens;
    out.push_back(memory("kv_norm_bwd", 4.0 * d(local) * d(x.kvl) * x.e, MemoryKernel::kNorm));
    add_gemm_backward(out, find_task(fwd, "kv_down"), "kv_down_dgrad", "kv_down_wgrad", x.e);
    if (x.ql > 0) {
      out.push_back(memory("q_norm_bwd", 4.0 * d(local) * d(x.ql) * x.e, MemoryKernel::kNorm));
      add_gemm_backward(out, find_task(fwd, "q_down"), "q_down_dgrad", "q_down_wgrad", x.e);
    }
  }
  out.push_back(memory("norm1_bwd", 2.0 * norm_bytes(x), MemoryKernel::kNorm));
  if (p.fp8) apply_fp8(out, x.e);
  return without_trivial_comm(out);
}

std::vector<Task> layer_recompute_tasks(const ModelSpec& m, const Plan& p) {
  switch (p.recompute) {
    case Recompute::kNone: return {};
    case Recompute::kFull: {
      // ZeRO-R's partitioned checkpoint: the input is gathered from the TP ranks first.
      std::vector<Task> out;
      if (p.partition_activations) {
        out.push_back(tp_gather("tp_all_gather_checkpoint", shape_of(m, p)));
      }
      for (Task& t : layer_forward_tasks(m, p)) out.push_back(std::move(t));
      return without_trivial_comm(out);
    }
    case Recompute::kSelective: {
      // Only the attention core (Korthikanti et al. 2022, sec. 5); a fused kernel already
      // recomputes it inside its backward, so there is nothing extra to do.
      if (p.attention == AttentionImpl::kFused) return {};
      std::vector<Task> out;
      add_attention_core(out, shape_of(m, p));
      return out;
    }
  }
  return {};
}

std::vector<Task> embedding_forward_tasks(const ModelSpec& m, const Plan& p) {
  const Shape x = shape_of(m, p);
  std::vector<Task> out;
  // Gather rows of this rank's vocabulary slice (and add positions): write T*h.
  out.push_back(memory("embedding", 2.0 * d(x.tokens) * d(x.h) * x.e, MemoryKernel::kEmbedding));
  // Vocabulary-parallel embedding: ranks without a token's row contribute zeros; the sum is an
  // all-reduce, or a reduce-scatter into the sequence-parallel region.
  out.push_back(tp_exit("tp_all_reduce_embedding", "tp_reduce_scatter_embedding", x));
  return without_trivial_comm(out);
}

std::vector<Task> embedding_backward_tasks(const ModelSpec& m, const Plan& p) {
  const Shape x = shape_of(m, p);
  std::vector<Task> out;
  if (x.sp)
    out.push_back(tp_gather("tp_all_gather_embedding_grad", x));
  out.push_back(memory("embedding_bwd", 2.0 * d(x.tokens) * d(x.h) * x.e,
                       MemoryKernel::kEmbedding));
  return without_trivial_comm(out);
}

std::vector<Task> head_forward_tasks(const ModelSpec& m, const Plan& p) {
  const Shape x = shape_of(m, p);
  const std::int64_t v_rank = padded_vocab(m, p.tp) / p.tp;
  std::vector<Task> out;
  out.push_back(memory("final_norm", norm_bytes(x), MemoryKernel::kNorm));
  if (x.sp) out.push_back(tp_gather("tp_all_gather_head", x));
  Task head = gemm("lm_head", x.tokens, v_rank, x.h, 1, x.e);
  head.flops = 2.0 * d(x.tokens) * d(m.vocab_size) / d(p.tp) * d(x.h);  // unpadded, as eq. 3
  out.push_back(head);
  // Cross-entropy over vocabulary-parallel logits in fp32: read logits, write softmax.
  // A softmax over the vocabulary slice (exp per logit) and the loss: the softmax kind.
  Task ce = memory("cross_entropy", d(x.tokens) * d(v_rank) * (x.e + 2.0 * 4.0),
                   MemoryKernel::kSoftmax);
  ce.transcendentals = d(x.tokens) * d(v_rank);  // an exp per logit
  out.push_back(ce);
  // Megatron's vocab-parallel cross-entropy all-reduces the max, the sum of exponentials and
  // the target logit: three fp32 values per token.
  for (std::string_view name : {"tp_all_reduce_logit_max", "tp_all_reduce_sum_exp",
                                "tp_all_reduce_target_logit"})
    out.push_back(comm(name, Collective::kAllReduce, CommGroup::kTp, p.tp, d(x.tokens) * 4.0));
  return without_trivial_comm(out);
}

std::vector<Task> head_backward_tasks(const ModelSpec& m, const Plan& p) {
  const Shape x = shape_of(m, p);
  const std::int64_t v_rank = padded_vocab(m, p.tp) / p.tp;
  std::vector<Task> out;
  // Probabilities minus the one-hot target, scaled: elementwise.
  out.push_back(memory("cross_entropy_bwd", d(x.tokens) * d(v_rank) * (4.0 + x.e),
                       MemoryKernel::kElementwise));
  Task head = gemm("lm_head", x.tokens, v_rank, x.h, 1, x.e);
  head.flops = 2.0 * d(x.tokens) * d(m.vocab_size) / d(p.tp) * d(x.h);
  add_gemm_backward(out, head, "lm_head_dgrad", "lm_head_wgrad", x.e);
  out.push_back(tp_exit("tp_all_reduce_head_grad", "tp_reduce_scatter_head_grad", x));
  out.push_back(memory("final_norm_bwd", 2.0 * norm_bytes(x), MemoryKernel::kNorm));
  return without_trivial_comm(out);
}

std::int64_t tokens_per_micro_batch(const ModelSpec& m, const Plan& p) {
  return shape_of(m, p).tokens;
}

std::vector<std::int32_t> tp_overlap_partners(const std::vector<Task>& tasks, const Plan& p) {
  if (!p.tp_comm_overlap) return {};
  std::vector<std::int32_t> partner(tasks.size(), -1);
  std::vector<bool> taken(tasks.size(), false);
  auto tp_comm = [&](std::size_t i, Collective c) {
    return tasks[i].kind == TaskKind::kComm && tasks[i].group == CommGroup::kTp &&
           tasks[i].collective == c;
  };
  auto claim = [&](std::size_t comm, std::size_t gemm) {
    if (tasks[gemm].kind != TaskKind::kGemm || taken[gemm]) return false;
    partner[comm] = static_cast<std::int32_t>(gemm);
    taken[gemm] = true;
    return true;
  };
  // Reduce-scatters first: each drains the GEMM just before it.
  for (std::size_t i = 1; i < tasks.size(); ++i)
    if (tp_comm(i, Collective::kReduceScatter)) claim(i, i - 1);
  // All-gathers feed the first GEMM after them; one whose GEMM a reduce-scatter has (the
  // backward's re-gather for a weight gradient) runs beside the GEMM before it instead.
  for (std::size_t i = 0; i < tasks.size(); ++i) {
    if (!tp_comm(i, Collective::kAllGather)) continue;
    bool fed = false;
    for (std::size_t j = i + 1; j < tasks.size(); ++j) {
      if (tasks[j].kind == TaskKind::kGemm) {
        fed = claim(i, j);
        break;
      }
      if (tasks[j].kind != TaskKind::kMemory) break;
    }
    if (!fed && i > 0) claim(i, i - 1);
  }
  return partner;
}

double tp_overlapped_pair_s(double comm_s, double gemm_s, std::int64_t tp) {
  const double chunk = gemm_s / d(std::max<std::int64_t>(1, tp));
  return std::max(comm_s, gemm_s - chunk) + chunk;
}

std::int64_t pipeline_message_bytes(const ModelSpec& m, const Plan& p) {
  const Shape x = shape_of(m, p);
  return std::llround(d(x.norm_tokens) * d(x.h) * x.e);
}

// ---------------------------------------------------------------------------------------------
// Data parallel

namespace {
// A flat buffer of `params` elements padded to a multiple of the group size, so that every rank
// owns an equal shard (Megatron-LM's distributed optimizer pads the same way).
std::int64_t padded(std::int64_t params, std::int64_t n) { return (params + n - 1) / n * n; }
}  // namespace

std::int64_t expert_dp_cp(const Plan& p) { return p.dp / p.ep * p.cp; }

std::int64_t dp_point_count(const Plan& p, const ParamBlock& b, DpPoint point) {
  switch (point) {
    case DpPoint::kBeforeForward:
    case DpPoint::kBeforeBackward:
    case DpPoint::kAfterBackward: return p.num_micro_batches();
    case DpPoint::kBeforeRecompute: return b.recomputed ? p.num_micro_batches() : 0;
    case DpPoint::kAfterLastBackward:
    case DpPoint::kAfterOptimizer: return 1;
  }
  return 0;
}

double zero_grad_buffer_bytes(const Plan& p, const ParamBlock& b) {
  if (p.zero_stage < 2) return 0;
  const double e = grad_bytes_per_element(p);
  const std::int64_t dense = p.zero_shard_ranks(), expert = expert_dp_cp(p);
  double bytes = 0;
  if (dense > 1) bytes += d(padded(b.dense_params, dense)) * e;
  if (expert > 1) bytes += d(padded(b.expert_params, expert)) * e;
  return bytes;
}

std::vector<Task> dp_block_tasks(const Plan& p, const ParamBlock& b, DpPoint point) {
  std::vector<Task> out;
  // Weights travel in their precision, gradients in theirs (grad_precision).
  const double e = bytes_per_element(p.precision), g = grad_bytes_per_element(p);
  // Each part (dense over dp*cp, experts over dp/ep*cp) gets the same treatment: context-parallel
  // ranks hold the same weights and see different tokens, so they sum gradients like replicas
  // (Megatron-Core's data-parallel group with context parallel). With hybrid sharding the dense
  // part's group is one shard group (Plan::zero_shard_size).
  const std::int64_t dense = p.zero_shard_ranks(), expert = expert_dp_cp(p);
  auto add = [&](std::string_view dense_name, std::string_view expert_name, Collective c) {
    const double el = c == Collective::kAllGather ? e : g;
    if (b.dense_params > 0)
      out.push_back(comm(dense_name, c, CommGroup::kDp, dense, d(padded(b.dense_params, dense)) * el));
    if (b.expert_params > 0)
      out.push_back(comm(expert_name, c, CommGroup::kExpertDp, expert,
                         d(padded(b.expert_params, expert)) * el));
  };
  switch (point) {
    case DpPoint::kBeforeForward:
    case DpPoint::kBeforeBackward:
      if (p.zero_stage == 3) add("zero3_param_all_gather", "zero3_expert_param_all_gather",
                                 Collective::kAllGather);
      break;
    case DpPoint::kBeforeRecompute:
      // Only transformer layers are recomputed; the embedding and head are not gathered again.
      if (p.zero_stage == 3 && b.kind == BlockKind::kLayer)
        add("zero3_param_all_gather", "zero3_expert_param_all_gather", Collective::kAllGather);
      break;
    case DpPoint::kAfterBackward:
      if (p.zero_stage >= 2) add("zero_grad_reduce_scatter", "zero_expert_grad_reduce_scatter",
                                 Collective::kReduceScatter);
      break;
    case DpPoint::kAfterLastBackward:
      // These sums must see every micro-batch's gradient before the data-parallel reduction.
      // Tied embeddings on two stages: sum the two copies' gradients (Megatron-LM's embedding
      // group), with the embedding rows this rank holds.
      if (b.tied_copy)
        out.push_back(comm("embedding_grad_all_reduce", Collective::kAllReduce,
                           CommGroup::kEmbedding, 2, d(b.tied_params) * g));
      if (p.sequence_parallel && p.tp > 1 && b.tp_replicated_params > 0)
        out.push_back(comm("tp_sp_norm_grad_all_reduce", Collective::kAllReduce, CommGroup::kTp,
                           p.tp, d(b.tp_replicated_params) * g));
      if (p.zero_stage == 0) add("dp_grad_all_reduce", "expert_dp_grad_all_reduce",
                                 Collective::kAllReduce);
      if (p.zero_stage == 1) add("zero_grad_reduce_scatter", "zero_expert_grad_reduce_scatter",
                                 Collective::kReduceScatter);
      // Hybrid sharding: the shard groups sum the step's reduced shards across each other once,
      // after the last micro-batch (FSDP2's HSDP with the all-reduce skipped on the others,
      // set_requires_all_reduce; MiCS's hierarchical reduction, Zhang et al. 2022 sec. 3.3).
      if (p.zero_stage >= 1 && p.zero_replicas() > 1 && b.dense_params > 0)
        out.push_back(comm("hsdp_grad_all_reduce", Collective::kAllReduce, CommGroup::kDpReplica,
                           p.zero_replicas(), d(padded(b.dense_params, dense) / dense) * g));
      break;
    case DpPoint::kAfterOptimizer:
      if (p.zero_stage == 1 || p.zero_stage == 2)
        add("zero_param_all_gather", "zero_expert_param_all_gather", Collective::kAllGather);
      break;
  }
  return without_trivial_comm(out);
}

// ---------------------------------------------------------------------------------------------
// FLOPs

namespace {
double sum_flops(const std::vector<Task>& tasks) {
  double f = 0;
  for (const Task& t : tasks) f += t.flops;
  return f;
}
}  // namespace

StepFlops step_flops(const ModelSpec& m, const Plan& p) {
  // FLOPs of one sequence on the whole model: the per-rank tasks of a tp = 1, mbs = 1 plan.
  Plan one = p;
  one.tp = 1;
  one.cp = 1;
  one.ep = 1;
  one.micro_batch_size = 1;
  one.sequence_parallel = false;
  const LayerKindCounts kinds = layer_kind_counts(m, 0, m.num_layers);
  // Full recompute of some layers per chunk: those layers, over all stages.
  LayerKindCounts recomputed = kinds;
  if (p.recompute == Recompute::kFull && p.recompute_num_layers > 0) {
    recomputed = {};
    for (std::int64_t s = 0; s < p.pp; ++s) {
      const LayerKindCounts on = recomputed_layer_kinds_on_stage(p, m, s);
      recomputed.dense += on.dense;
      recomputed.moe += on.moe;
    }
  }
  double layers_fwd = 0, layers_recompute = 0;
  for (LayerKind kind : {LayerKind::kDense, LayerKind::kMoe}) {
    if (kinds.of(kind) == 0) continue;
    const ModelSpec lm = layer_model(m, kind);
    layers_fwd += d(kinds.of(kind)) * sum_flops(layer_forward_tasks(lm, one));
    layers_recompute += d(recomputed.of(kind)) * sum_flops(layer_recompute_tasks(lm, one));
  }
  const double head_fwd = sum_flops(head_forward_tasks(m, one));
  const double batch = d(p.global_batch_size);
  StepFlops f;
  f.model = batch * 3.0 * (layers_fwd + head_fwd);
  f.hardware = f.model + batch * layers_recompute;
  return f;
}

double megatron_eq3_flops(const ModelSpec& m, std::int64_t batch) {
  const double B = d(batch), s = d(m.seq_len), l = d(m.num_layers), h = d(m.hidden_size),
               V = d(m.vocab_size);
  return 96.0 * B * s * l * h * h * (1.0 + s / (6.0 * h) + V / (16.0 * l * h));
}

// ---------------------------------------------------------------------------------------------
// Memory

double grad_bytes_per_element(Precision precision, GradPrecision grads) {
  return grads == GradPrecision::kFp32 ? 4.0 : bytes_per_element(precision);
}
double grad_bytes_per_element(const Plan& p) {
  return grad_bytes_per_element(p.precision, p.grad_precision);
}

StateBytesPerParam state_bytes_per_param(const Plan& p) {
  return state_bytes_per_param(p.precision, p.optimizer, p.grad_precision);
}

StateBytesPerParam state_bytes_per_param(Precision precision, Optimizer optimizer,
                                         GradPrecision grads) {
  StateBytesPerParam s;
  const bool mixed = precision != Precision::kFp32;
  s.weights = bytes_per_element(precision);
  s.gradients = grad_bytes_per_element(precision, grads);
  // Mixed precision keeps an fp32 master copy (4 bytes) besides the optimizer's own states
  // (Micikevicius et al. 2018; Rajbhandari et al. 2019 sec. 3.1: K = 12 for Adam).
  const double master = mixed ? 4.0 : 0.0;
  switch (optimizer) {
    case Optimizer::kAdamW: s.optimizer = master + 8.0; break;       // m and v in fp32
    case Optimizer::kSgdMomentum: s.optimizer = master + 4.0; break; // momentum in fp32
    case Optimizer::kSgd: s.optimizer = master; break;
  }
  return s;
}

double checkpoint_input_bytes(const ModelSpec& m, const Plan& p) {
  const Shape x = shape_of(m, p);
  const double input = d(x.norm_tokens) * d(x.h) * x.e;
  return p.partition_activations ? input / d(p.tp) : input;
}

namespace {
// Stored activation bytes of one layer under recompute `rc` (the plan's, or none for a layer
// that full recompute leaves out).
double activation_bytes(const ModelSpec& m, const Plan& p, Recompute rc) {
  const Shape x = shape_of(m, p);
  const double T = d(x.tokens), h = d(x.h), t = d(x.t), e = x.e;
  const double mask = x.dropout ? 1.0 : 0.0;
  // Korthikanti et al. 2022, sec. 4.1, per layer: 34*s*b*h + 5*a*s^2*b bytes for GPT with
  // fp16 and dropout. Terms, in elements of e bytes unless noted:
  //  kept whole without SP, split over t with SP: the two norm inputs, the QKV and MLP inputs
  //  (4*T*h), and the two 1-byte dropout masks (2*T*h bytes);
  //  split over t: Q and K (T*(q+kv)), V (T*kv), the out-projection input (T*q), the MLP
  //  activation input (T*f, doubled for SwiGLU's gate) and the fc2 input (T*f);
  //  attention core, split over t: softmax output (2 bytes), dropout mask (1), dropout output (2)
  //  per score; a fused kernel stores only the fp32 log-sum-exp per row.
  //  MLA: the latents, before and after their norms, and the rotary key, on this rank's tokens;
  //  Q, K, V and the attention output at their own widths (K = V = a*head widths);
  //  MoE: the routed MLP inputs and activations for each of the k experts a token visits, and
  //  the shared experts' like a dense MLP's.
  double replicated = 4.0 * T * h * e + 2.0 * T * h * mask;
  if (x.mla) replicated += T * d(2 * (x.ql + x.kvl) + x.rope) * e;
  if (x.sp) replicated /= t;
  const double f_factor = (x.swiglu ? 2.0 : 1.0) + 1.0;
  double expert_tokens = x.moe ? d(m.experts_per_token) : 1.0;
  double split = T * d(x.q + x.kv + x.vw + x.ow) * e +
                 f_factor * T * (expert_tokens * d(x.f) + d(x.shared_f)) * e;
  split /= t;
  // MoE: the dispatched tokens (the experts' first GEMM's input, k copies of each token) and
  // the experts' outputs, which the probability-weighted combine keeps for the gradient of the
  // routing probabilities (Megatron-Core's unpermute with probs; MindSpeed's
  // UnpermuteWithoutActivation exists to drop them). Each TP rank holds them whole.
  const double routed = x.moe ? 2.0 * d(m.experts_per_token) * T * h * e : 0.0;
  double core = 0.0;
  const double scores = d(x.b) * d(x.heads_per_rank) * d(x.s) * d(x.s_full);
  const bool core_stored = !x.fused && rc == Recompute::kNone;
  if (core_stored) core = scores * (e + (x.dropout ? 1.0 + e : 0.0));
  if (x.fused) core = d(x.b) * d(x.heads_per_rank) * d(x.s) * 4.0;
  return replicated + split + routed + core;
}
}  // namespace

double layer_activation_bytes(const ModelSpec& m, const Plan& p) {
  return activation_bytes(m, p, p.recompute);
}

double layer_kept_activation_bytes(const ModelSpec& m, const Plan& p) {
  return activation_bytes(m, p, p.recompute == Recompute::kFull ? Recompute::kNone : p.recompute);
}

double layer_backward_workspace_bytes(const ModelSpec& m, const Plan& p) {
  const Shape x = shape_of(m, p);
  const double T = d(x.tokens), t = d(x.t), e = x.e;
  const double output_grad = T * d(x.h);
  const double expert_tokens = x.moe ? d(m.experts_per_token) : 1.0;
  const double mlp =
      (expert_tokens * d(x.f) + d(x.shared_f)) * T / t * (1.0 + (x.swiglu ? 2.0 : 1.0));
  const double scores = x.fused ? 0.0 : d(x.b) * d(x.heads_per_rank) * d(x.s) * d(x.s_full);
  // Context parallelism: the whole sequence's K and V, gathered again, and their gradients
  // before the reduce-scatter, alive around the attention kernel's backward. The forward's
  // gathered K and V alone are half of this, so the backward bounds both.
  const double cp_buffers = x.cp > 1 ? 2.0 * cp_kv_bytes(x) / e : 0.0;
  const double attention = T * d(x.q) / t + scores + cp_buffers;
  return e * (output_grad + std::max(mlp, attention));
}

double in_flight_micro_batches(const Plan& p, std::int64_t stage) {
  const double M = d(p.num_micro_batches());
  switch (p.schedule) {
    case Schedule::kNaive: return 1.0;
    case Schedule::kGpipe: return M;
    case Schedule::k1F1B: return std::min(d(p.pp - stage), M);
    case Schedule::kInterleaved: {
      // Megatron-LM: warm-up micro-batches = (pp - stage - 1) * 2 + (v - 1) * pp, plus the one
      // in steady state, counted in model chunks of 1/v of the stage's layers.
      const double v = d(p.virtual_stages);
      const double chunks = std::min(d((p.pp - stage - 1) * 2 + (p.virtual_stages - 1) * p.pp + 1),
                                     M * v);
      return chunks / v;
    }
  }
  return 1.0;
}

double largest_block_params(const ModelSpec& m, const Plan& p, std::int64_t stage) {
  double largest = 0;
  for_each_block_shape_on_stage(m, p, stage, [&](const ParamBlock& b) {
    largest = std::max(largest, d(b.dense_params + b.expert_params));
  });
  return largest;
}

MemoryBreakdown memory_on_stage(const ModelSpec& m, const Plan& p, std::int64_t stage) {
  MemoryBreakdown mem;
  const Shape x = shape_of(m, p);
  const StateBytesPerParam sb = state_bytes_per_param(p);
  const StageParameters sp = parameters_on_stage(m, p, stage);
  const double dense = sp.dense, expert = sp.expert;
  const double dp = d(p.zero_shard_ranks()), edp = d(expert_dp_cp(p));
  // ZeRO (Rajbhandari et al. 2019, fig. 1): stage 1 shards optimizer states over dp, stage 2
  // also gradients, stage 3 also weights; dp here counts the context-parallel ranks too, which
  // hold the same weights (Megatron-Core shards its distributed optimizer over dp*cp), or with
  // hybrid sharding only a shard group's ranks.
  auto shard = [&](double v_dense, double v_expert, bool sharded) {
    return sharded ? v_dense / dp + v_expert / edp : v_dense + v_expert;
  };
  mem.weights_bytes = sb.weights * shard(dense, expert, p.zero_stage >= 3);
  mem.gradients_bytes = sb.gradients * shard(dense, expert, p.zero_stage >= 2);
  const double opt = sb.optimizer * shard(dense, expert, p.zero_stage >= 1);
  if (p.offload == Offload::kOptimizer) {
    mem.host_optimizer_bytes = opt;
  } else {
    mem.optimizer_bytes = opt;
  }
  // Activations: stored bytes per layer and micro-batch, times the layers of this stage, times
  // the micro-batches in flight at the peak.
  const LayerKindCounts kinds = layer_kinds_on_stage(p, m, stage);
  const LayerKindCounts recomputed = recomputed_layer_kinds_on_stage(p, m, stage);
  const double in_flight = in_flight_micro_batches(p, stage);
  // Per micro-batch: a recomputed layer keeps only its input, and while it is back-propagated
  // its activations are rebuilt (the largest recomputed layer's worth on top); every other
  // layer keeps all it stores without full recompute.
  const double input = checkpoint_input_bytes(m, p);
  std::array<double, kLayerKindCount> rebuilt_bytes{}, kept_bytes{};
  double stored = 0, checkpoints = 0, workspace = 0;
  for (LayerKind kind : {LayerKind::kDense, LayerKind::kMoe}) {
    if (kinds.of(kind) == 0) continue;
    const auto k = static_cast<std::size_t>(kind);
    with_layer_model(m, kind, [&](const ModelSpec& lm) {
      rebuilt_bytes[k] = layer_activation_bytes(lm, p);
      kept_bytes[k] = layer_kept_activation_bytes(lm, p);
      workspace = std::max(workspace, layer_backward_workspace_bytes(lm, p));
    });
    const std::int64_t r = recomputed.of(kind);
    stored += d(kinds.of(kind) - r) * kept_bytes[k];
    checkpoints += d(r) * input;
  }
  // A chunk's backward runs its layers last to first, so the layers full recompute leaves out
  // (the last ones of the chunk) have freed this micro-batch's activations by the time the
  // first recomputed layer is rebuilt: the rebuild adds what it exceeds them by.
  double rebuilt = 0;
  if (p.recompute == Recompute::kFull) {
    for_each_chunk_on_stage(p, m, stage, [&](std::int64_t first, std::int64_t count) {
      const std::int64_t r = recomputed_layers_in_chunk(p, count);
      if (r == 0) return;
      const LayerKindCounts rec = layer_kind_counts(m, first, r);
      const LayerKindCounts kept = layer_kind_counts(m, first + r, count - r);
      double largest = 0, freed = 0;
      for (LayerKind kind : {LayerKind::kDense, LayerKind::kMoe}) {
        const auto k = static_cast<std::size_t>(kind);
        if (rec.of(kind) > 0) largest = std::max(largest, rebuilt_bytes[k]);
        freed += d(kept.of(kind)) * kept_bytes[k];
      }
      rebuilt = std::max(rebuilt, largest - freed);
    });
  }
  if (p.offload_checkpoints) {
    // In host memory; on the device, the checkpoint of the layer being back-propagated and the
    // one being fetched for the layer below it.
    mem.host_activation_bytes = checkpoints * in_flight;
    checkpoints = 0;
    if (recomputed.dense + recomputed.moe > 0) rebuilt += 2.0 * input;
  }
  mem.activations_bytes = (stored + checkpoints) * in_flight + rebuilt;
  if (stage == p.pp - 1) {
    // fp32 logits for the cross-entropy: 4*s*b*V/t (Korthikanti et al. 2022, sec. 4.3).
    mem.activations_bytes += 4.0 * d(x.tokens) * d(padded_vocab(m, p.tp)) / d(p.tp);
  }
  if (stage == 0) {
    // Embedding output (and its dropout mask), per micro-batch in flight.
    mem.activations_bytes +=
        d(x.norm_tokens) * d(x.h) * (x.e + (x.dropout ? 1.0 : 0.0)) * in_flight;
  }
  if (p.zero_stage == 3) {
    // Gathered full parameters of the block in use and the one prefetched.
    mem.buffers_bytes = 2.0 * largest_block_params(m, p, stage) * sb.weights;
  }
  // ZeRO-2/3: the full gradient of the block being back-propagated, until its reduce-scatter.
  double largest_grad = 0;
  if (p.zero_stage >= 2) {
    for_each_block_shape_on_stage(m, p, stage, [&](const ParamBlock& b) {
      largest_grad = std::max(largest_grad, zero_grad_buffer_bytes(p, b));
    });
  }
  mem.buffers_bytes += largest_grad;
  mem.buffers_bytes += workspace;
  return mem;
}

// ---------------------------------------------------------------------------------------------
// Communication volume

void add_task_bytes(const std::vector<Task>& tasks, double times, CommVolume& v) {
  for (const Task& t : tasks) {
    if (t.kind != TaskKind::kComm) continue;
    const double b = d(t.bytes_sent()) * times;
    switch (t.group) {
      case CommGroup::kTp: v.tp_bytes += b; break;
      case CommGroup::kCp: v.cp_bytes += b; break;
      case CommGroup::kPp:
      case CommGroup::kEmbedding: v.pp_bytes += b; break;
      case CommGroup::kDp:
      case CommGroup::kDpReplica:
      case CommGroup::kExpertDp: v.dp_bytes += b; break;
      case CommGroup::kEp: v.ep_bytes += b; break;
    }
  }
}

CommVolume comm_volume_on_stage(const ModelSpec& m, const Plan& p, std::int64_t stage) {
  CommVolume v;
  const double M = d(p.num_micro_batches());
  const LayerKindCounts kinds = layer_kinds_on_stage(p, m, stage);
  const LayerKindCounts recomputed = recomputed_layer_kinds_on_stage(p, m, stage);
  for (LayerKind kind : {LayerKind::kDense, LayerKind::kMoe}) {
    if (kinds.of(kind) == 0) continue;
    const ModelSpec lm = layer_model(m, kind);
    const double L = d(kinds.of(kind));
    add_task_bytes(layer_forward_tasks(lm, p), M * L, v);
    // Full recompute: the layers it names; selective: every layer (no collectives today).
    const double R = p.recompute == Recompute::kFull ? d(recomputed.of(kind)) : L;
    add_task_bytes(layer_recompute_tasks(lm, p), M * R, v);
    add_task_bytes(layer_backward_tasks(lm, p), M * L, v);
  }
  if (stage == 0) {
    add_task_bytes(embedding_forward_tasks(m, p), M, v);
    add_task_bytes(embedding_backward_tasks(m, p), M, v);
  }
  if (stage == p.pp - 1) {
    add_task_bytes(head_forward_tasks(m, p), M, v);
    add_task_bytes(head_backward_tasks(m, p), M, v);
  }
  // Pipeline: each model chunk sends its output forward unless it is the last chunk, and its
  // input gradient backward unless it is the first, once per micro-batch.
  const double msg = d(pipeline_message_bytes(m, p));
  for (std::int64_t c = 0; c < p.virtual_stages; ++c) {
    const std::int64_t chunk = c * p.pp + stage;
    if (chunk < p.num_chunks() - 1) v.pp_bytes += msg * M;
    if (chunk > 0) v.pp_bytes += msg * M;
  }
  for (const ParamBlock& b : param_blocks_on_stage(m, p, stage)) {
    for (DpPoint point : {DpPoint::kBeforeForward, DpPoint::kBeforeRecompute,
                          DpPoint::kBeforeBackward, DpPoint::kAfterBackward,
                          DpPoint::kAfterLastBackward, DpPoint::kAfterOptimizer}) {
      add_task_bytes(dp_block_tasks(p, b, point), d(dp_point_count(p, b, point)), v);
    }
  }
  const OffloadTraffic off = offload_traffic_on_stage(m, p, stage);
  v.host_bytes = off.device_to_host_bytes + off.host_to_device_bytes;
  // Offloaded checkpoints: each recomputed layer's input to the host and back, per micro-batch.
  if (p.offload_checkpoints)
    v.host_bytes += 2.0 * checkpoint_input_bytes(m, p) * M * d(recomputed.dense + recomputed.moe);
  return v;
}

// ---------------------------------------------------------------------------------------------
// Optimizer

double optimizer_step_bytes_per_param(const Plan& p) {
  const StateBytesPerParam s = state_bytes_per_param(p);
  // Read the gradient, read and write every optimizer state, write the weight.
  return s.gradients + 2.0 * s.optimizer + s.weights;
}

double optimizer_params_on_rank(const ModelSpec& m, const Plan& p, std::int64_t stage) {
  const StageParameters sp = parameters_on_stage(m, p, stage);
  if (p.zero_stage >= 1) return sp.dense / d(p.zero_shard_ranks()) + sp.expert / d(expert_dp_cp(p));
  return sp.total();
}

Task optimizer_task(const ModelSpec& m, const Plan& p, std::int64_t stage) {
  return memory("optimizer",
                optimizer_params_on_rank(m, p, stage) *
                    optimizer_step_bytes_per_param(p),
                MemoryKernel::kOptimizer);
}

OffloadTraffic offload_traffic_on_stage(const ModelSpec& m, const Plan& p, std::int64_t stage) {
  OffloadTraffic t;
  if (p.offload != Offload::kOptimizer) return t;
  const double params = optimizer_params_on_rank(m, p, stage);
  // ZeRO-Offload (Ren et al. 2021, sec. 4.1): the reduced gradient shard goes to the host, the
  // CPU runs the optimizer over it, and the updated low-precision weights come back.
  t.device_to_host_bytes = params * grad_bytes_per_element(p);
  t.host_to_device_bytes = params * bytes_per_element(p.precision);
  t.host_memory_bytes = params * optimizer_step_bytes_per_param(p);
  return t;
}

}  // namespace trainplan
