// ModelSpec loading (our format; Hugging Face configs go to core/hf_config.cc) and validation.
// Tested by tests/core/loaders_test.cc and tests/core/limits_test.cc.
#include "core/model_spec.h"

#include "core/hf_config.h"

#include <algorithm>
#include <initializer_list>
#include <sstream>
#include <string>
#include <utility>

namespace trainplan {

std::string_view to_string(Activation a) { return a == Activation::kGelu ? "gelu" : "swiglu"; }
std::string_view to_string(NormKind n) {
  return n == NormKind::kLayerNorm ? "layernorm" : "rmsnorm";
}
std::string_view to_string(PositionKind p) {
  return p == PositionKind::kLearned ? "learned" : "rope";
}

bool ModelSpec::layer_is_moe(std::int64_t layer) const {
  return is_moe() && !std::binary_search(dense_layers.begin(), dense_layers.end(), layer);
}

LayerKind layer_kind(const ModelSpec& m, std::int64_t layer) {
  return m.layer_is_moe(layer) ? LayerKind::kMoe : LayerKind::kDense;
}

ModelSpec layer_model(const ModelSpec& model, LayerKind kind) {
  ModelSpec m = model;
  m.dense_layers.clear();
  if (kind == LayerKind::kDense && model.is_moe()) {
    m.num_experts = 1;
    m.experts_per_token = 1;
    m.shared_expert_ffn_size = 0;
    if (model.dense_ffn_hidden_size > 0) m.ffn_hidden_size = model.dense_ffn_hidden_size;
  }
  return m;
}

LayerKindCounts layer_kind_counts(const ModelSpec& m, std::int64_t first, std::int64_t count) {
  LayerKindCounts c;
  if (!m.is_moe()) {
    c.dense = count;
    return c;
  }
  const auto lo = std::lower_bound(m.dense_layers.begin(), m.dense_layers.end(), first);
  const auto hi = std::lower_bound(lo, m.dense_layers.end(), first + count);
  c.dense = static_cast<std::int64_t>(hi - lo);
  c.moe = count - c.dense;
  return c;
}

namespace {

using L = ModelLimits;

Result<ModelSpec> read_ours(const Json& j, std::string_view source) {
  ModelSpec m;
  JsonReader r(j, "model '" + std::string(source) + "'");
  r.get_string("name", m.name, true);
  r.accept("source");
  r.accept("notes");
  r.get_int("num_layers", m.num_layers, 1, L::kMaxLayers, true);
  r.get_int("hidden_size", m.hidden_size, 1, L::kMaxHidden, true);
  r.get_int("num_attention_heads", m.num_attention_heads, 1, L::kMaxHeads, true);
  m.num_kv_heads = m.num_attention_heads;
  r.get_int("num_kv_heads", m.num_kv_heads, 1, L::kMaxHeads, false);
  r.get_int("head_dim", m.head_dim, 1, L::kMaxHidden, false);
  r.get_int("ffn_hidden_size", m.ffn_hidden_size, 1, L::kMaxFfn, true);
  r.get_int("vocab_size", m.vocab_size, 1, L::kMaxVocab, true);
  r.get_int("seq_len", m.seq_len, 1, L::kMaxSeq, true);
  m.max_position_embeddings = m.seq_len;
  r.get_int("max_position_embeddings", m.max_position_embeddings, 1, L::kMaxSeq, false);
  r.get_bool("tie_word_embeddings", m.tie_word_embeddings, false);
  int choice = 0;
  if (r.get_choice("activation", choice, {"gelu", "swiglu"}, false))
    m.activation = static_cast<Activation>(choice);
  if (r.get_choice("norm", choice, {"layernorm", "rmsnorm"}, false))
    m.norm = static_cast<NormKind>(choice);
  if (r.get_choice("position_embedding", choice, {"learned", "rope"}, false))
    m.position = static_cast<PositionKind>(choice);
  r.get_bool("bias", m.bias, false);
  r.get_bool("dropout", m.dropout, false);
  r.get_double("glu_clamp", m.glu_clamp, 0.0, 1e6, false);
  r.get_int("num_experts", m.num_experts, 1, L::kMaxExperts, false);
  r.get_int("experts_per_token", m.experts_per_token, 1, L::kMaxExperts, false);
  r.get_int("shared_expert_ffn_size", m.shared_expert_ffn_size, 0, L::kMaxFfn, false);
  r.get_int("router_groups", m.router_groups, 0, L::kMaxExperts, false);
  r.get_int("router_group_topk", m.router_group_topk, 0, L::kMaxExperts, false);
  if (double coef = 0; r.get_double("router_aux_loss_coef", coef, 0.0, 1.0, false))
    m.router_aux_loss_coef = coef;
  if (double factor = 0; r.get_double("moe_capacity_factor", factor, 0.0, 1e6, false))
    m.moe_capacity_factor = factor;
  r.get_int_list("dense_layers", m.dense_layers, 0, L::kMaxLayers - 1, false);
  r.get_int("dense_ffn_hidden_size", m.dense_ffn_hidden_size, 0, L::kMaxFfn, false);
  r.get_int("q_lora_rank", m.q_lora_rank, 0, L::kMaxHidden, false);
  r.get_int("kv_lora_rank", m.kv_lora_rank, 0, L::kMaxHidden, false);
  r.get_int("qk_rope_head_dim", m.qk_rope_head_dim, 0, L::kMaxHidden, false);
  r.get_int("v_head_dim", m.v_head_dim, 0, L::kMaxHidden, false);
  TRAINPLAN_RETURN_IF_ERROR(r.finish());
  if (m.head_dim == 0) {
    if (m.hidden_size % m.num_attention_heads != 0)
      return Status::Error("model '" + std::string(source) + "': field 'num_attention_heads': " +
                           std::to_string(m.num_attention_heads) +
                           " does not divide hidden_size=" + std::to_string(m.hidden_size) +
                           " (give head_dim explicitly)");
    m.head_dim = m.hidden_size / m.num_attention_heads;
  }
  TRAINPLAN_RETURN_IF_ERROR(validate_model(m, source));
  return m;
}

}  // namespace

Result<ModelSpec> model_from_json_with(const Json& json, std::string_view source,
                                       const HfReadOptions& hf) {
  if (is_hf_config(json)) return read_hf_config(json, source, hf);
  return read_ours(json, source);
}

Result<ModelSpec> model_from_json(const Json& json, std::string_view source) {
  return model_from_json_with(json, source, HfReadOptions{});
}

namespace {
// Node-limited routing: equal groups of experts, top-k within the chosen groups.
Status validate_router_groups(const ModelSpec& m, const std::string& where) {
  auto bad = [&](const char* field, std::int64_t value, const std::string& why) {
    return Status::Error(where + "field '" + field + "': value " + std::to_string(value) + " " +
                         why);
  };
  if (m.router_groups == 0 && m.router_group_topk == 0) return Status::Ok();
  if (!m.is_moe())
    return bad("router_groups", m.router_groups, "needs a mixture-of-experts model (num_experts > 1)");
  if (m.router_groups < 1 || m.num_experts % m.router_groups != 0)
    return bad("router_groups", m.router_groups,
               "must divide num_experts=" + std::to_string(m.num_experts));
  if (m.router_group_topk < 1 || m.router_group_topk > m.router_groups)
    return bad("router_group_topk", m.router_group_topk,
               "must be in [1, router_groups=" + std::to_string(m.router_groups) + "]");
  const std::int64_t reachable = m.router_group_topk * (m.num_experts / m.router_groups);
  if (m.experts_per_token > reachable)
    return bad("router_group_topk", m.router_group_topk,
               "leaves " + std::to_string(reachable) + " experts, fewer than experts_per_token=" +
                   std::to_string(m.experts_per_token));
  return Status::Ok();
}
}  // namespace

Status validate_model(const ModelSpec& m, std::string_view source) {
  const std::string where = "model '" + std::string(source) + "': ";
  auto bad = [&](const std::string& field, std::int64_t value, const std::string& why) {
    return Status::Error(where + "field '" + field + "': value " + std::to_string(value) + " " +
                         why);
  };
  if (m.num_layers < 1 || m.num_layers > L::kMaxLayers)
    return bad("num_layers", m.num_layers, "is out of range [1, 65536]");
  if (m.hidden_size < 1 || m.hidden_size > L::kMaxHidden)
    return bad("hidden_size", m.hidden_size, "is out of range");
  if (m.num_attention_heads < 1 || m.num_attention_heads > L::kMaxHeads)
    return bad("num_attention_heads", m.num_attention_heads, "is out of range");
  if (m.num_kv_heads < 1 || m.num_kv_heads > m.num_attention_heads)
    return bad("num_kv_heads", m.num_kv_heads,
               "must be in [1, num_attention_heads=" + std::to_string(m.num_attention_heads) + "]");
  if (m.num_attention_heads % m.num_kv_heads != 0)
    return bad("num_kv_heads", m.num_kv_heads,
               "must divide num_attention_heads=" + std::to_string(m.num_attention_heads));
  if (m.head_dim < 1 || m.head_dim > L::kMaxHidden)
    return bad("head_dim", m.head_dim, "is out of range");
  if (m.ffn_hidden_size < 1 || m.ffn_hidden_size > L::kMaxFfn)
    return bad("ffn_hidden_size", m.ffn_hidden_size, "is out of range");
  if (m.vocab_size < 1 || m.vocab_size > L::kMaxVocab)
    return bad("vocab_size", m.vocab_size, "is out of range");
  if (m.seq_len < 1 || m.seq_len > L::kMaxSeq) return bad("seq_len", m.seq_len, "is out of range");
  if (!(m.glu_clamp >= 0) || (m.glu_clamp > 0 && m.activation != Activation::kSwiglu)) {
    std::ostringstream value;
    value << m.glu_clamp;
    return Status::Error(where + "field 'glu_clamp': value " + value.str() +
                         (m.glu_clamp > 0 ? " needs a gated activation (activation swiglu)"
                                          : " must be 0 (no clamp) or positive"));
  }
  if (m.position == PositionKind::kLearned && m.seq_len > m.max_position_embeddings)
    return bad("seq_len", m.seq_len,
               "exceeds max_position_embeddings=" + std::to_string(m.max_position_embeddings) +
                   " of the learned position table");
  if (m.num_experts < 1 || m.num_experts > L::kMaxExperts)
    return bad("num_experts", m.num_experts, "is out of range [1, 4096]");
  if (m.experts_per_token < 1 || m.experts_per_token > m.num_experts)
    return bad("experts_per_token", m.experts_per_token,
               "must be in [1, num_experts=" + std::to_string(m.num_experts) + "]");
  const std::string moe_only = "needs a mixture-of-experts model (num_experts > 1)";
  if (m.shared_expert_ffn_size < 0 || m.shared_expert_ffn_size > L::kMaxFfn)
    return bad("shared_expert_ffn_size", m.shared_expert_ffn_size, "is out of range");
  if (m.shared_expert_ffn_size > 0 && !m.is_moe())
    return bad("shared_expert_ffn_size", m.shared_expert_ffn_size, moe_only);
  if (Status st = validate_router_groups(m, where); !st.ok()) return st;
  if (m.router_aux_loss_coef && !m.is_moe())
    return Status::Error(where + "field 'router_aux_loss_coef': value " +
                         std::to_string(*m.router_aux_loss_coef) +
                         " needs a mixture-of-experts model (num_experts > 1)");
  if (m.moe_capacity_factor && !m.is_moe())
    return Status::Error(where + "field 'moe_capacity_factor': value " +
                         std::to_string(*m.moe_capacity_factor) +
                         " needs a mixture-of-experts model (num_experts > 1)");
  if (m.moe_capacity_factor && !(*m.moe_capacity_factor > 0.0))
    return Status::Error(where + "field 'moe_capacity_factor': value " +
                         std::to_string(*m.moe_capacity_factor) +
                         " must be > 0 (each expert takes that many times its even share)");
  if (m.dense_ffn_hidden_size < 0 || m.dense_ffn_hidden_size > L::kMaxFfn)
    return bad("dense_ffn_hidden_size", m.dense_ffn_hidden_size, "is out of range");
  if (!m.dense_layers.empty() && !m.is_moe())
    return bad("dense_layers", m.dense_layers.front(), moe_only);
  for (std::size_t i = 0; i < m.dense_layers.size(); ++i) {
    const std::int64_t layer = m.dense_layers[i];
    if (layer < 0 || layer >= m.num_layers)
      return bad("dense_layers", layer,
                 "is not a layer index in [0, num_layers=" + std::to_string(m.num_layers) + ")");
    if (i > 0 && layer <= m.dense_layers[i - 1])
      return bad("dense_layers", layer, "is not in ascending order without repeats");
  }
  if (m.is_moe() && static_cast<std::int64_t>(m.dense_layers.size()) == m.num_layers)
    return bad("dense_layers", static_cast<std::int64_t>(m.dense_layers.size()),
               "layers listed: every layer is dense, so num_experts > 1 is never used");
  for (auto [field, value] : {std::pair<const char*, std::int64_t>{"q_lora_rank", m.q_lora_rank},
                              {"kv_lora_rank", m.kv_lora_rank},
                              {"qk_rope_head_dim", m.qk_rope_head_dim},
                              {"v_head_dim", m.v_head_dim}})
    if (value < 0 || value > L::kMaxHidden) return bad(field, value, "is out of range");
  const std::string mla_only = "needs multi-head latent attention (kv_lora_rank > 0)";
  if (!m.is_mla() && m.q_lora_rank > 0) return bad("q_lora_rank", m.q_lora_rank, mla_only);
  if (!m.is_mla() && m.qk_rope_head_dim > 0)
    return bad("qk_rope_head_dim", m.qk_rope_head_dim, mla_only);
  if (m.is_mla() && m.num_kv_heads != m.num_attention_heads)
    return bad("num_kv_heads", m.num_kv_heads,
               "must equal num_attention_heads=" + std::to_string(m.num_attention_heads) +
                   " with multi-head latent attention (every head has its own key and value)");
  if (m.is_mla() && m.qk_rope_head_dim >= m.head_dim)
    return bad("qk_rope_head_dim", m.qk_rope_head_dim,
               "must be less than head_dim=" + std::to_string(m.head_dim) +
                   " (head_dim is the rotary and the non-rotary part together)");
  return Status::Ok();
}

Result<ModelSpec> with_seq_len(const ModelSpec& model, std::int64_t seq_len) {
  ModelSpec m = model;
  m.seq_len = seq_len;
  if (m.position == PositionKind::kRope) m.max_position_embeddings =
      std::max(m.max_position_embeddings, seq_len);
  TRAINPLAN_RETURN_IF_ERROR(validate_model(m, "--seq-len"));
  return m;
}

Json model_to_json(const ModelSpec& m) {
  Json j;
  j["name"] = m.name;
  j["num_layers"] = m.num_layers;
  j["hidden_size"] = m.hidden_size;
  j["num_attention_heads"] = m.num_attention_heads;
  j["num_kv_heads"] = m.num_kv_heads;
  j["head_dim"] = m.head_dim;
  j["ffn_hidden_size"] = m.ffn_hidden_size;
  j["vocab_size"] = m.vocab_size;
  j["seq_len"] = m.seq_len;
  j["max_position_embeddings"] = m.max_position_embeddings;
  j["tie_word_embeddings"] = m.tie_word_embeddings;
  j["activation"] = std::string(to_string(m.activation));
  j["norm"] = std::string(to_string(m.norm));
  j["position_embedding"] = std::string(to_string(m.position));
  j["bias"] = m.bias;
  j["dropout"] = m.dropout;
  j["num_experts"] = m.num_experts;
  j["experts_per_token"] = m.experts_per_token;
  // Written only when used, so that the JSON of other models stays as it was.
  if (m.shared_expert_ffn_size > 0) j["shared_expert_ffn_size"] = m.shared_expert_ffn_size;
  if (m.glu_clamp > 0) j["glu_clamp"] = m.glu_clamp;
  if (m.router_groups > 0) j["router_groups"] = m.router_groups;
  if (m.router_group_topk > 0) j["router_group_topk"] = m.router_group_topk;
  if (m.router_aux_loss_coef) j["router_aux_loss_coef"] = *m.router_aux_loss_coef;
  if (m.moe_capacity_factor) j["moe_capacity_factor"] = *m.moe_capacity_factor;
  if (!m.dense_layers.empty()) j["dense_layers"] = m.dense_layers;
  if (m.dense_ffn_hidden_size > 0) j["dense_ffn_hidden_size"] = m.dense_ffn_hidden_size;
  if (m.q_lora_rank > 0) j["q_lora_rank"] = m.q_lora_rank;
  if (m.kv_lora_rank > 0) j["kv_lora_rank"] = m.kv_lora_rank;
  if (m.qk_rope_head_dim > 0) j["qk_rope_head_dim"] = m.qk_rope_head_dim;
  if (m.v_head_dim > 0) j["v_head_dim"] = m.v_head_dim;
  return j;
}

}  // namespace trainplan
