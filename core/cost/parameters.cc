// The cost model's parameter questions: how many parameters the model has (count_parameters),
// the padded vocabulary, the parameter blocks of a stage (the unit of data-parallel
// synchronisation), the layers of each kind a stage holds, the parameters on one rank of a
// stage and its largest block. Sources in cost_model.h.
// Tested by tests/core/cost_model_test.cc (parameter counts, blocks, stage parameters).
#include "core/cost/cost_model.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <optional>

#include "core/cost/internal.h"

namespace trainplan {

using namespace cost_internal;

namespace {

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

// Parameter tensors of a block, counted as Megatron-LM lays a layer out (the module layout
// DeepSpeed's ZeRO-3 partitioned tensor by tensor, Plan::zero3_gather): two norms (weight, and
// a bias for LayerNorm); a fused QKV projection and the output projection (MLA: the query's
// down-projection, norm and up-projection when q_lora_rank > 0, the key/value down-projection,
// norm and up-projection); an MLP of two weights (fc1 holds SwiGLU's gate and up); a bias beside
// each projection when the model has them; an MoE layer's router, its local experts' MLPs and
// the shared experts'.
std::int64_t norm_tensors(const ModelSpec& m) { return m.norm == NormKind::kLayerNorm ? 2 : 1; }
std::int64_t mlp_tensors(const ModelSpec& m) { return m.bias ? 4 : 2; }
std::int64_t attention_tensors(const ModelSpec& m) {
  if (m.is_mla()) {
    const std::int64_t q = m.q_lora_rank > 0 ? 2 + norm_tensors(m) : 1;
    return q + 2 + norm_tensors(m) + 1;
  }
  return m.bias ? 4 : 2;
}
std::int64_t layer_dense_tensors(const ModelSpec& m) {
  std::int64_t n = 2 * norm_tensors(m) + attention_tensors(m);
  if (!m.is_moe()) return n + mlp_tensors(m);
  n += 1;  // the router
  if (m.shared_expert_ffn_size > 0) n += mlp_tensors(m);
  return n;
}
std::int64_t layer_expert_tensors(const ModelSpec& m, const Plan& p) {
  return m.is_moe() ? m.num_experts / p.ep * mlp_tensors(m) : 0;
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
                                   mlp_params_per_rank(m, m.ffn_hidden_size, p.expert_tp_size()))
                    : 0;
}
// Parameters TP replicates and sequence parallelism gives each TP rank only its tokens' share
// of the gradient for: the block's norms, MLA's down-projections and an MoE layer's router
// (Megatron-LM marks all three `sequence_parallel`, the router in Megatron-Core's
// TopKRouter.reset_parameters, and sums their gradients over TP once per step).
std::int64_t layer_tp_replicated_params(const ModelSpec& m) {
  return std::llround(2.0 * norm_params(m) + mla_replicated_params(m) + router_params(m));
}
double vocab_rows_per_rank(const ModelSpec& m, std::int64_t t);
std::int64_t embedding_block_params(const ModelSpec& m, std::int64_t t) {
  double params = vocab_rows_per_rank(m, t) * d(m.hidden_size);
  if (m.position == PositionKind::kLearned)
    params += d(m.max_position_embeddings) * d(m.hidden_size);
  return std::llround(params);
}
// Final norm, plus the head matrix when untied, or the tied copy a stage apart from the
// embedding keeps (splits_tied_embedding).
std::int64_t head_block_params(const ModelSpec& m, const Plan& p) {
  double params = norm_params(m);
  if (!m.tie_word_embeddings || splits_tied_embedding(p)) params += vocab_rows_per_rank(m, p.tp) * d(m.hidden_size);
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
// The embedding or head block; both hold the tied copy when they sit on two stages.
ParamBlock edge_block(const ModelSpec& m, const Plan& p, BlockKind kind) {
  ParamBlock b;
  b.kind = kind;
  b.tied_copy = m.tie_word_embeddings && splits_tied_embedding(p);
  b.tied_params =
      b.tied_copy ? std::llround(vocab_rows_per_rank(m, p.tp) * d(m.hidden_size)) : 0;
  if (kind == BlockKind::kEmbedding) {
    b.read_by_head = m.tie_word_embeddings && !splits_tied_embedding(p) && p.num_chunks() > 1;
    b.dense_params = embedding_block_params(m, p.tp);
    b.tensors = m.position == PositionKind::kLearned ? 2 : 1;
  } else {
    b.dense_params = head_block_params(m, p);
    b.tensors = norm_tensors(m) + (m.tie_word_embeddings && !splits_tied_embedding(p) ? 0 : 1);
    b.tp_replicated_params = std::llround(norm_params(m));
  }
  return b;
}
}  // namespace

namespace cost_internal {
ParamBlock embedding_block(const ModelSpec& m, const Plan& p) {
  return edge_block(m, p, BlockKind::kEmbedding);
}
ParamBlock head_block(const ModelSpec& m, const Plan& p) {
  return edge_block(m, p, BlockKind::kHead);
}
ParamBlock layer_block(const ModelSpec& lm, const Plan& p) {
  ParamBlock b;
  b.kind = BlockKind::kLayer;
  b.dense_params = layer_dense_params(lm, p.tp);
  b.expert_params = layer_expert_params(lm, p);
  b.tp_replicated_params = layer_tp_replicated_params(lm);
  b.tensors = layer_dense_tensors(lm);
  b.expert_tensors = layer_expert_tensors(lm, p);
  return b;
}
}  // namespace cost_internal

std::vector<ParamBlock> param_blocks_on_stage(const ModelSpec& m, const Plan& p,
                                              std::int64_t stage) {
  std::vector<ParamBlock> blocks;
  if (stage_holds_embedding(p, stage)) blocks.push_back(embedding_block(m, p));
  std::array<std::optional<ParamBlock>, kLayerKindCount> by_kind;
  const std::vector<std::int64_t> layers = chunk_layers(p, m);
  std::vector<std::int64_t> first_layer(layers.size(), 0);
  for (std::size_t c = 1; c < layers.size(); ++c) first_layer[c] = first_layer[c - 1] + layers[c - 1];
  for (std::int64_t k = 0; k < p.virtual_stages; ++k) {
    // DualPipe: a stage and its mirror list the same two chunks in model order, so the sums of
    // their gradient copies (dp_block_tasks) pair up block by block.
    const bool reversed = p.schedule == Schedule::kDualPipe && stage >= p.pp / 2;
    const std::int64_t v = reversed ? p.virtual_stages - 1 - k : k;
    const auto c = static_cast<std::size_t>(stage_chunk(p, stage, v));
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
  if (stage_holds_head(p, stage)) blocks.push_back(head_block(m, p));
  return blocks;
}

std::int64_t layers_on_stage(const Plan& p, const ModelSpec& m, std::int64_t stage) {
  const LayerKindCounts kinds = layer_kinds_on_stage(p, m, stage);
  return kinds.dense + kinds.moe;
}

namespace {
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
  if (stage_holds_embedding(p, stage)) s.dense += d(embedding_block_params(m, p.tp));
  if (stage_holds_head(p, stage)) s.dense += d(head_block_params(m, p));
  return s;
}

double largest_block_params(const ModelSpec& m, const Plan& p, std::int64_t stage) {
  double largest = 0;
  for_each_block_shape_on_stage(m, p, stage, [&](const ParamBlock& b) {
    largest = std::max(largest, d(b.dense_params + b.expert_params));
  });
  return largest;
}

}  // namespace trainplan
