// ModelSpec loading and validation. Tested by tests/core/model_spec_test.cc.
#include "core/model_spec.h"

#include <algorithm>
#include <initializer_list>
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
  r.get_int("num_experts", m.num_experts, 1, L::kMaxExperts, false);
  r.get_int("experts_per_token", m.experts_per_token, 1, L::kMaxExperts, false);
  r.get_int("shared_expert_ffn_size", m.shared_expert_ffn_size, 0, L::kMaxFfn, false);
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

// Hugging Face MoE keys of the families that name them differently (each family's modeling
// file in transformers decides which layers route through experts):
//  - Mixtral: num_local_experts, every layer;
//  - Qwen2-MoE / Qwen3-MoE / OLMoE: num_experts, moe_intermediate_size per expert (OLMoE:
//    intermediate_size), shared_expert_intermediate_size; layer i is MoE unless it is in
//    mlp_only_layers or (i + 1) % decoder_sparse_step != 0 (modeling_qwen2_moe.py);
//  - DeepSeek-V2/V3: n_routed_experts, n_shared_experts of moe_intermediate_size each; layer i is
//    MoE when i >= first_k_dense_replace and i % moe_layer_freq == 0 (modeling_deepseek_v3.py);
//  - Llama 4: num_local_experts, one shared expert of intermediate_size, dense layers of
//    intermediate_size_mlp; MoE layers are moe_layers, or every interleave_moe_layer_step-th
//    counting from the step's last layer (configuration_llama4.py).
// Dense layers of an MoE model take intermediate_size (Llama 4: intermediate_size_mlp).
Status read_hf_moe(JsonReader& r, ModelSpec& m) {
  // Qwen's num_experts = 0 means a dense model (its modeling file tests num_experts > 0).
  std::int64_t experts = 0;
  for (auto [key, min] : {std::pair<const char*, std::int64_t>{"num_local_experts", 1},
                          {"num_experts", 0},
                          {"n_routed_experts", 1}}) {
    std::int64_t v = 0;
    if (r.get_int(key, v, min, L::kMaxExperts, false) && v > experts) experts = v;
  }
  r.get_int("num_experts_per_tok", m.experts_per_token, 1, L::kMaxExperts, false);
  const std::int64_t dense_width = m.ffn_hidden_size;  // intermediate_size
  std::int64_t moe_width = 0, shared_count = 0, shared_width = 0, first_dense = 0, freq = 1,
               sparse_step = 1, interleave = 1, dense_mlp = 0;
  std::vector<std::int64_t> mlp_only, moe_layers;
  r.get_int("moe_intermediate_size", moe_width, 1, L::kMaxFfn, false);
  r.get_int("n_shared_experts", shared_count, 0, L::kMaxExperts, false);
  r.get_int("shared_expert_intermediate_size", shared_width, 0, L::kMaxFfn, false);
  r.get_int("first_k_dense_replace", first_dense, 0, L::kMaxLayers, false);
  r.get_int("moe_layer_freq", freq, 1, L::kMaxLayers, false);
  r.get_int("decoder_sparse_step", sparse_step, 1, L::kMaxLayers, false);
  r.get_int_list("mlp_only_layers", mlp_only, 0, L::kMaxLayers, false);
  r.get_int("interleave_moe_layer_step", interleave, 1, L::kMaxLayers, false);
  const bool explicit_moe_layers = r.get_int_list("moe_layers", moe_layers, 0, L::kMaxLayers,
                                                  false);
  const bool llama4 = r.get_int("intermediate_size_mlp", dense_mlp, 1, L::kMaxFfn, false);
  if (r.failed() || experts <= 1) return r.finish(/*allow_unknown=*/true);
  m.num_experts = experts;
  if (moe_width > 0) m.ffn_hidden_size = moe_width;
  m.dense_ffn_hidden_size = llama4 ? dense_mlp : dense_width;
  if (m.dense_ffn_hidden_size == m.ffn_hidden_size) m.dense_ffn_hidden_size = 0;
  m.shared_expert_ffn_size = shared_width + shared_count * m.ffn_hidden_size;
  if (llama4) m.shared_expert_ffn_size = m.ffn_hidden_size;
  auto contains = [](const std::vector<std::int64_t>& v, std::int64_t x) {
    return std::find(v.begin(), v.end(), x) != v.end();
  };
  for (std::int64_t i = 0; i < m.num_layers; ++i) {
    bool moe = i >= first_dense && i % freq == 0 && !contains(mlp_only, i) &&
               (i + 1) % sparse_step == 0;
    if (llama4) moe = explicit_moe_layers ? contains(moe_layers, i) : (i + 1) % interleave == 0;
    if (!moe) m.dense_layers.push_back(i);
  }
  return Status::Ok();
}

// Multi-head latent attention as DeepSeek-V2/V3's config.json gives it: the query/key head is
// qk_nope_head_dim + qk_rope_head_dim wide, the value head v_head_dim; q_lora_rank is null
// where queries are projected directly (DeepSeek-V2-Lite).
Status read_hf_mla(JsonReader& r, ModelSpec& m) {
  std::int64_t nope = 0;
  if (!r.get_int("kv_lora_rank", m.kv_lora_rank, 1, L::kMaxHidden, false)) return Status::Ok();
  r.get_int("q_lora_rank", m.q_lora_rank, 1, L::kMaxHidden, false);
  r.get_int("qk_nope_head_dim", nope, 1, L::kMaxHidden, true);
  r.get_int("qk_rope_head_dim", m.qk_rope_head_dim, 1, L::kMaxHidden, true);
  r.get_int("v_head_dim", m.v_head_dim, 1, L::kMaxHidden, true);
  if (r.failed()) return r.finish(/*allow_unknown=*/true);
  m.head_dim = nope + m.qk_rope_head_dim;
  return Status::Ok();
}

// The config keys a family names its fields by, so that cross-field messages quote the key the
// config has (GPT-2 and BLOOM say n_head where Llama says num_attention_heads).
struct HfKeys {
  const char* hidden = "hidden_size";
  const char* heads = "num_attention_heads";
  const char* kv_heads = "num_key_value_heads";
  const char* activation = "hidden_act";
};

// Reads the first of `keys` the config holds: families renamed fields between releases, and
// transformers' attribute_map accepts either name (BLOOM's n_embed, Falcon's n_layer). Returns
// the key read, or the first one when none is there (a missing required field is reported by it).
const char* get_int_alias(JsonReader& r, const Json& j, std::initializer_list<const char*> keys,
                          std::int64_t& out, std::int64_t max, bool required) {
  for (const char* key : keys)
    if (j.contains(key) && !j[key].is_null()) {
      r.get_int(key, out, 1, max, true);
      return key;
    }
  r.get_int(*keys.begin(), out, 1, max, required);
  return *keys.begin();
}

// Whether training applies dropout: any of the family's rates (key, default when absent) above
// zero. Every key is read, so a bad value is reported even after a positive one.
bool any_dropout(JsonReader& r, std::initializer_list<std::pair<const char*, double>> rates) {
  bool any = false;
  for (auto [key, rate] : rates) {
    r.get_double(key, rate, 0.0, 1.0, false);
    any = any || rate > 0.0;
  }
  return any;
}

// GPT-2 (modeling_gpt2.py): n_layer, n_embd, n_head; n_inner null means 4*n_embd; a learned
// table of n_positions; biases and LayerNorm throughout.
Status read_hf_gpt2(JsonReader& r, ModelSpec& m, std::string& act, HfKeys& keys) {
  keys = {"n_embd", "n_head", "n_head", "activation_function"};
  r.get_int("n_layer", m.num_layers, 1, L::kMaxLayers, true);
  r.get_int("n_embd", m.hidden_size, 1, L::kMaxHidden, true);
  r.get_int("n_head", m.num_attention_heads, 1, L::kMaxHeads, true);
  m.num_kv_heads = m.num_attention_heads;
  m.ffn_hidden_size = 0;
  r.get_int("n_inner", m.ffn_hidden_size, 1, L::kMaxFfn, false);
  r.get_int("n_positions", m.max_position_embeddings, 1, L::kMaxSeq, true);
  r.get_int("vocab_size", m.vocab_size, 1, L::kMaxVocab, true);
  r.get_string("activation_function", act, false);
  m.tie_word_embeddings = true;
  r.get_bool("tie_word_embeddings", m.tie_word_embeddings, false);
  m.position = PositionKind::kLearned;
  m.norm = NormKind::kLayerNorm;
  m.bias = true;
  m.dropout = any_dropout(r, {{"resid_pdrop", 0.1}});
  return Status::Ok();
}

// The Llama/Mistral/Qwen/DeepSeek layout: num_hidden_layers, hidden_size, intermediate_size,
// num_key_value_heads, rope_theta. GPT-NeoX (Pythia) shares the keys with other defaults
// (configuration_gpt_neox.py, modeling_gpt_neox.py): every layer applies rotary embeddings to
// rotary_pct of each head (keys rotary_pct / rotary_emb_base, or rope_theta in newer configs),
// so there is no position table; its linears have biases (attention_bias, default true);
// use_parallel_residual runs attention and MLP side by side, the same work, so cost-neutral.
Status read_hf_llama(JsonReader& r, const Json& j, const std::string& model_type, ModelSpec& m,
                     std::string& act) {
  const bool neox = model_type == "gpt_neox";
  r.get_int("num_hidden_layers", m.num_layers, 1, L::kMaxLayers, true);
  r.get_int("hidden_size", m.hidden_size, 1, L::kMaxHidden, true);
  r.get_int("num_attention_heads", m.num_attention_heads, 1, L::kMaxHeads, true);
  m.num_kv_heads = m.num_attention_heads;
  r.get_int("num_key_value_heads", m.num_kv_heads, 1, L::kMaxHeads, false);
  r.get_int("head_dim", m.head_dim, 1, L::kMaxHidden, false);
  r.get_int("intermediate_size", m.ffn_hidden_size, 1, L::kMaxFfn, true);
  r.get_int("vocab_size", m.vocab_size, 1, L::kMaxVocab, true);
  r.get_int("max_position_embeddings", m.max_position_embeddings, 1, L::kMaxSeq, true);
  m.tie_word_embeddings = false;
  r.get_bool("tie_word_embeddings", m.tie_word_embeddings, false);
  r.get_string("hidden_act", act, false);
  m.norm = j.contains("rms_norm_eps") ? NormKind::kRmsNorm : NormKind::kLayerNorm;
  const bool rotary = neox || j.contains("rope_theta") || j.contains("rope_scaling") ||
                      j.contains("rotary_pct") || j.contains("rotary_emb_base");
  m.position = rotary ? PositionKind::kRope : PositionKind::kLearned;
  m.bias = neox;
  r.get_bool("attention_bias", m.bias, false);
  m.dropout = neox ? any_dropout(r, {{"attention_dropout", 0.0}, {"hidden_dropout", 0.0}})
                   : any_dropout(r, {{"attention_dropout", 0.0}});
  if (neox) {
    bool parallel_residual = true;
    r.get_bool("use_parallel_residual", parallel_residual, false);
  }
  TRAINPLAN_RETURN_IF_ERROR(read_hf_moe(r, m));
  return read_hf_mla(r, m);
}

// Falcon (configuration_falcon.py, modeling_falcon.py; older configs say n_layer, n_head,
// n_head_kv, n_embed). The fused query_key_value projection is (2*num_kv_heads + heads)*head_dim
// wide with new_decoder_architecture, h + 2*head_dim with multi_query (one key/value head), and
// 3h otherwise. The MLP is ffn_hidden_size wide (None: 4*hidden_size) with `activation` (gelu).
// alibi false means rotary; ALiBi adds a bias to the attention scores and has no table either,
// so both are PositionKind::kRope here (no position parameters, the same GEMMs).
// parallel_attn runs attention and MLP side by side: the same work, so cost-neutral. Falcon-7B
// (parallel_attn, old architecture) has one LayerNorm per layer where this model counts two, so
// its count is 2*h*num_layers higher than the checkpoint's.
Status read_hf_falcon(JsonReader& r, const Json& j, ModelSpec& m, std::string& act,
                      HfKeys& keys) {
  keys.activation = "activation";
  get_int_alias(r, j, {"num_hidden_layers", "n_layer"}, m.num_layers, L::kMaxLayers, true);
  keys.hidden = get_int_alias(r, j, {"hidden_size", "n_embed"}, m.hidden_size, L::kMaxHidden, true);
  keys.heads = get_int_alias(r, j, {"num_attention_heads", "n_head"}, m.num_attention_heads,
                             L::kMaxHeads, true);
  bool new_architecture = false, multi_query = true, alibi = false, parallel_attn = true;
  r.get_bool("new_decoder_architecture", new_architecture, false);
  r.get_bool("multi_query", multi_query, false);
  std::int64_t kv_heads = m.num_attention_heads;  // FalconConfig: num_kv_heads None = heads
  keys.kv_heads = get_int_alias(r, j, {"num_kv_heads", "n_head_kv"}, kv_heads, L::kMaxHeads, false);
  m.num_kv_heads = new_architecture ? kv_heads : multi_query ? 1 : m.num_attention_heads;
  m.ffn_hidden_size = 4 * m.hidden_size;
  r.get_int("ffn_hidden_size", m.ffn_hidden_size, 1, L::kMaxFfn, false);
  r.get_int("vocab_size", m.vocab_size, 1, L::kMaxVocab, true);
  m.max_position_embeddings = 2048;  // FalconConfig's default; falcon-7b's config omits it
  r.get_int("max_position_embeddings", m.max_position_embeddings, 1, L::kMaxSeq, false);
  r.get_bool("alibi", alibi, false);
  r.get_bool("parallel_attn", parallel_attn, false);
  m.position = PositionKind::kRope;
  m.norm = NormKind::kLayerNorm;
  m.bias = false;
  r.get_bool("bias", m.bias, false);
  act = "gelu";
  r.get_string("activation", act, false);
  m.tie_word_embeddings = true;
  r.get_bool("tie_word_embeddings", m.tie_word_embeddings, false);
  m.dropout = any_dropout(r, {{"hidden_dropout", 0.0}, {"attention_dropout", 0.0}});
  return Status::Ok();
}

// OPT (configuration_opt.py, modeling_opt.py): an MLP of ffn_dim with activation_function
// (relu), biases unless enable_bias is false, a learned position table of
// max_position_embeddings. OPTLearnedPositionalEmbedding holds 2 rows more (position ids are
// offset by 2); they are not counted, as max_position_embeddings is the longest sequence the
// table serves (2*hidden_size parameters short). do_layer_norm_before false (opt-350m) is
// post-LN, the same norms; such a model also has no final LayerNorm (2*hidden_size fewer).
// Tokens are embedded word_embed_proj_dim wide and projected to hidden_size where the two
// differ (opt-350m); that projection is not modelled, so such configs are refused.
Status read_hf_opt(JsonReader& r, ModelSpec& m, std::string& act, HfKeys& keys) {
  keys.activation = "activation_function";
  r.get_int("num_hidden_layers", m.num_layers, 1, L::kMaxLayers, true);
  r.get_int("hidden_size", m.hidden_size, 1, L::kMaxHidden, true);
  r.get_int("num_attention_heads", m.num_attention_heads, 1, L::kMaxHeads, true);
  m.num_kv_heads = m.num_attention_heads;
  r.get_int("ffn_dim", m.ffn_hidden_size, 1, L::kMaxFfn, true);
  r.get_int("vocab_size", m.vocab_size, 1, L::kMaxVocab, true);
  r.get_int("max_position_embeddings", m.max_position_embeddings, 1, L::kMaxSeq, true);
  std::int64_t embed_width = m.hidden_size;
  if (r.get_int("word_embed_proj_dim", embed_width, 1, L::kMaxHidden, false) && !r.failed() &&
      embed_width != m.hidden_size)
    r.fail_field("word_embed_proj_dim",
                 "value " + std::to_string(embed_width) + " differs from hidden_size=" +
                     std::to_string(m.hidden_size) +
                     ": OPT's projection between the two widths is not modelled");
  bool layer_norm_before = true;
  r.get_bool("do_layer_norm_before", layer_norm_before, false);
  m.position = PositionKind::kLearned;
  m.norm = NormKind::kLayerNorm;
  m.bias = true;
  r.get_bool("enable_bias", m.bias, false);
  act = "relu";
  r.get_string("activation_function", act, false);
  m.tie_word_embeddings = true;
  r.get_bool("tie_word_embeddings", m.tie_word_embeddings, false);
  m.dropout = any_dropout(
      r, {{"dropout", 0.1}, {"attention_dropout", 0.0}, {"activation_dropout", 0.0}});
  return Status::Ok();
}

// BLOOM (configuration_bloom.py, modeling_bloom.py; attribute_map: n_layer, n_head, n_embed):
// the MLP is always 4*hidden_size wide with BLOOM's tanh GELU (BloomMLP; n_inner is unused);
// biases, LayerNorm, tied embeddings. ALiBi adds a bias to the attention scores and has no
// position table, so it is PositionKind::kRope here (no position parameters, the same GEMMs).
// ALiBi bounds no length, so seq_len is the length BLOOM was trained at, 2048 tokens (the
// BLOOM paper's training hyperparameters, arXiv:2211.05100). BloomModel also normalises the
// embeddings (word_embeddings_layernorm); those 2*hidden_size parameters are not counted.
Status read_hf_bloom(JsonReader& r, const Json& j, ModelSpec& m, HfKeys& keys) {
  get_int_alias(r, j, {"n_layer", "num_hidden_layers"}, m.num_layers, L::kMaxLayers, true);
  keys.hidden = get_int_alias(r, j, {"hidden_size", "n_embed"}, m.hidden_size, L::kMaxHidden, true);
  keys.heads = get_int_alias(r, j, {"n_head", "num_attention_heads"}, m.num_attention_heads,
                             L::kMaxHeads, true);
  m.num_kv_heads = m.num_attention_heads;
  m.ffn_hidden_size = 4 * m.hidden_size;
  r.get_int("vocab_size", m.vocab_size, 1, L::kMaxVocab, true);
  m.max_position_embeddings = 2048;
  m.position = PositionKind::kRope;
  m.norm = NormKind::kLayerNorm;
  m.bias = true;
  m.tie_word_embeddings = true;
  r.get_bool("tie_word_embeddings", m.tie_word_embeddings, false);
  m.dropout = any_dropout(r, {{"hidden_dropout", 0.0}, {"attention_dropout", 0.0}});
  return Status::Ok();
}

// Hugging Face config.json, read by family: Falcon, OPT and BLOOM by model_type; otherwise
// GPT-2's keys (n_layer, n_embd) or the Llama family's (num_hidden_layers, hidden_size), which
// GPT-NeoX shares. Keys we do not model are ignored.
Result<ModelSpec> read_hf(const Json& j, std::string_view source) {
  ModelSpec m;
  JsonReader r(j, "Hugging Face config '" + std::string(source) + "'");
  std::string model_type;
  r.get_string("model_type", model_type, false);
  m.name = model_type.empty() ? std::string(source) : model_type + " (" + std::string(source) + ")";
  HfKeys keys;
  std::string act;
  // Falcon's remote-code configs name it RefinedWeb (40B) or RefinedWebModel (7B).
  const bool falcon = model_type == "falcon" || model_type == "RefinedWeb" ||
                      model_type == "RefinedWebModel";
  const Status family = falcon                  ? read_hf_falcon(r, j, m, act, keys)
                        : model_type == "opt"   ? read_hf_opt(r, m, act, keys)
                        : model_type == "bloom" ? read_hf_bloom(r, j, m, keys)
                        : j.contains("n_layer") ? read_hf_gpt2(r, m, act, keys)
                                                : read_hf_llama(r, j, model_type, m, act);
  TRAINPLAN_RETURN_IF_ERROR(family);
  TRAINPLAN_RETURN_IF_ERROR(r.finish(/*allow_unknown=*/true));
  if (m.ffn_hidden_size == 0) m.ffn_hidden_size = 4 * m.hidden_size;  // GPT-2 default n_inner
  // silu/swish in these families is the gated SwiGLU MLP (Shazeer 2020); gelu variants and relu
  // (OPT) are the plain two-matrix MLP, except in Gemma, whose MLP is gated (GeGLU, same cost as
  // SwiGLU).
  const std::string hw = "Hugging Face config '" + std::string(source) + "': field '";
  const bool gated_family = model_type.rfind("gemma", 0) == 0;
  if (act == "silu" || act == "swish" || gated_family) {
    m.activation = Activation::kSwiglu;
  } else if (act.empty() || act.rfind("gelu", 0) == 0 || act == "relu") {
    m.activation = Activation::kGelu;
  } else {
    return Status::Error(hw + keys.activation + "': unsupported activation \"" + act + "\"");
  }
  // Cross-field checks in the config's own key names (validate_model speaks ours).
  if (m.head_dim == 0) {
    if (m.hidden_size % m.num_attention_heads != 0)
      return Status::Error(hw + keys.heads + "': value " + std::to_string(m.num_attention_heads) +
                           " does not divide " + keys.hidden + "=" +
                           std::to_string(m.hidden_size));
    m.head_dim = m.hidden_size / m.num_attention_heads;
  }
  if (m.num_kv_heads > m.num_attention_heads || m.num_attention_heads % m.num_kv_heads != 0)
    return Status::Error(hw + keys.kv_heads + "': value " + std::to_string(m.num_kv_heads) +
                         " must divide " + keys.heads + "=" +
                         std::to_string(m.num_attention_heads));
  if (m.experts_per_token > m.num_experts)
    return Status::Error(hw + "num_experts_per_tok': value " + std::to_string(m.experts_per_token) +
                         " exceeds num_local_experts=" + std::to_string(m.num_experts));
  m.seq_len = m.max_position_embeddings;
  TRAINPLAN_RETURN_IF_ERROR(validate_model(m, source));
  return m;
}

}  // namespace

Result<ModelSpec> model_from_json(const Json& json, std::string_view source) {
  if (!json.is_object()) return read_ours(json, source);
  // Encoders and encoder-decoders are a different step (bidirectional attention, a decoder with
  // cross-attention); taking their layer keys for a decoder's would give wrong figures.
  std::string model_type;
  if (json.contains("model_type") && json["model_type"].is_string())
    model_type = json["model_type"].get<std::string>();
  const bool encoder_decoder = json.contains("is_encoder_decoder") &&
                               json["is_encoder_decoder"].is_boolean() &&
                               json["is_encoder_decoder"].get<bool>();
  for (const char* encoder : {"bert", "roberta", "xlm-roberta", "distilbert", "albert", "electra",
                              "deberta", "deberta-v2", "modernbert", "t5", "mt5", "umt5", "bart",
                              "mbart", "pegasus", "whisper"})
    if (model_type == encoder || encoder_decoder)
      return Status::Error("Hugging Face config '" + std::string(source) + "': field '" +
                           (encoder_decoder ? "is_encoder_decoder': value true" :
                                              "model_type': value \"" + model_type + "\"") +
                           " is an encoder or encoder-decoder model; trainplan models "
                           "decoder-only transformers");
  if (json.contains("num_hidden_layers") || json.contains("n_layer")) return read_hf(json, source);
  // Multimodal configs (Llama 4, Gemma 3, Mistral 3) nest the language model in text_config.
  if (json.contains("text_config") && json["text_config"].is_object())
    return read_hf(json["text_config"], std::string(source) + " text_config");
  if (!model_type.empty())
    return Status::Error("Hugging Face config '" + std::string(source) + "': model_type \"" +
                         model_type + "\" has neither num_hidden_layers nor n_layer (nor a "
                         "text_config holding them): its layout is not one trainplan reads");
  return read_ours(json, source);
}

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
  if (!m.dense_layers.empty()) j["dense_layers"] = m.dense_layers;
  if (m.dense_ffn_hidden_size > 0) j["dense_ffn_hidden_size"] = m.dense_ffn_hidden_size;
  if (m.q_lora_rank > 0) j["q_lora_rank"] = m.q_lora_rank;
  if (m.kv_lora_rank > 0) j["kv_lora_rank"] = m.kv_lora_rank;
  if (m.qk_rope_head_dim > 0) j["qk_rope_head_dim"] = m.qk_rope_head_dim;
  if (m.v_head_dim > 0) j["v_head_dim"] = m.v_head_dim;
  return j;
}

}  // namespace trainplan
