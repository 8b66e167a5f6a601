// ModelSpec loading and validation. Tested by tests/models/model_spec_test.cc.
#include "models/model_spec.h"

#include <algorithm>
#include <string>

namespace trainplan {

std::string_view to_string(Activation a) { return a == Activation::kGelu ? "gelu" : "swiglu"; }
std::string_view to_string(NormKind n) {
  return n == NormKind::kLayerNorm ? "layernorm" : "rmsnorm";
}
std::string_view to_string(PositionKind p) {
  return p == PositionKind::kLearned ? "learned" : "rope";
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

// Hugging Face config.json: the Llama/Mistral/Mixtral/Qwen family uses hidden_size and
// num_hidden_layers; GPT-2 uses n_embd and n_layer. Keys we do not model are ignored.
Result<ModelSpec> read_hf(const Json& j, std::string_view source) {
  ModelSpec m;
  JsonReader r(j, "Hugging Face config '" + std::string(source) + "'");
  std::string model_type;
  r.get_string("model_type", model_type, false);
  m.name = model_type.empty() ? std::string(source) : model_type + " (" + std::string(source) + ")";
  const bool gpt2_style = j.contains("n_layer");
  std::string act;
  if (gpt2_style) {
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
    double pdrop = 0.1;
    r.get_double("resid_pdrop", pdrop, 0.0, 1.0, false);
    m.dropout = pdrop > 0.0;
  } else {
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
    m.position = j.contains("rope_theta") || j.contains("rope_scaling") ? PositionKind::kRope
                                                                         : PositionKind::kLearned;
    bool attention_bias = false;
    r.get_bool("attention_bias", attention_bias, false);
    m.bias = attention_bias;
    double attn_dropout = 0.0;
    r.get_double("attention_dropout", attn_dropout, 0.0, 1.0, false);
    m.dropout = attn_dropout > 0.0;
    r.get_int("num_local_experts", m.num_experts, 1, L::kMaxExperts, false);
    r.get_int("num_experts_per_tok", m.experts_per_token, 1, L::kMaxExperts, false);
  }
  TRAINPLAN_RETURN_IF_ERROR(r.finish(/*allow_unknown=*/true));
  if (m.ffn_hidden_size == 0) m.ffn_hidden_size = 4 * m.hidden_size;  // GPT-2 default n_inner
  // silu/swish in these families is the gated SwiGLU MLP (Shazeer 2020); gelu variants are the
  // plain two-matrix MLP except in Gemma, whose MLP is gated (GeGLU, same cost as SwiGLU).
  const bool gated_family = model_type.rfind("gemma", 0) == 0;
  if (act == "silu" || act == "swish" || gated_family) {
    m.activation = Activation::kSwiglu;
  } else if (act.empty() || act.rfind("gelu", 0) == 0 || act == "relu") {
    m.activation = Activation::kGelu;
  } else {
    return Status::Error("Hugging Face config '" + std::string(source) +
                         "': field 'hidden_act': unsupported activation \"" + act + "\"");
  }
  // Cross-field checks in the config's own key names (validate_model speaks ours).
  const std::string hw = "Hugging Face config '" + std::string(source) + "': field '";
  const char* heads_key = gpt2_style ? "n_head" : "num_attention_heads";
  const char* hidden_key = gpt2_style ? "n_embd" : "hidden_size";
  if (m.head_dim == 0) {
    if (m.hidden_size % m.num_attention_heads != 0)
      return Status::Error(hw + heads_key + "': value " + std::to_string(m.num_attention_heads) +
                           " does not divide " + hidden_key + "=" + std::to_string(m.hidden_size));
    m.head_dim = m.hidden_size / m.num_attention_heads;
  }
  if (m.num_kv_heads > m.num_attention_heads || m.num_attention_heads % m.num_kv_heads != 0)
    return Status::Error(hw + "num_key_value_heads': value " + std::to_string(m.num_kv_heads) +
                         " must divide num_attention_heads=" +
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
  if (json.is_object() && (json.contains("num_hidden_layers") || json.contains("n_layer")))
    return read_hf(json, source);
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
  return j;
}

}  // namespace trainplan
