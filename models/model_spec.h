// The model: a decoder-only transformer described by its shape. Loaded from our JSON
// (models/zoo/*.json) or from a Hugging Face config.json as is. Every field has its unit or
// meaning in a comment; ModelSpec round-trips through model_to_json / model_from_json.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "models/json_util.h"
#include "models/status.h"

namespace trainplan {

enum class Activation { kGelu, kSwiglu };       // MLP: 2 matrices with GELU, or 3 with a gate
enum class NormKind { kLayerNorm, kRmsNorm };   // LayerNorm has a bias, RMSNorm does not
enum class PositionKind { kLearned, kRope };    // learned table (GPT) or rotary (Llama)

struct ModelSpec {
  std::string name;                      // human-readable
  std::int64_t num_layers = 0;           // l, transformer blocks
  std::int64_t hidden_size = 0;          // h
  std::int64_t num_attention_heads = 0;  // a
  std::int64_t num_kv_heads = 0;         // key/value heads (= a for MHA, < a for GQA)
  std::int64_t head_dim = 0;             // per head; h / a unless given
  std::int64_t ffn_hidden_size = 0;      // f, MLP inner width (per expert for MoE)
  std::int64_t vocab_size = 0;           // V
  std::int64_t seq_len = 0;              // s, training sequence length in tokens
  std::int64_t max_position_embeddings = 0;  // longest sequence the positions support
  bool tie_word_embeddings = true;       // LM head shares the embedding matrix
  Activation activation = Activation::kGelu;
  NormKind norm = NormKind::kLayerNorm;
  PositionKind position = PositionKind::kLearned;
  bool bias = true;                      // linear layers have biases
  bool dropout = true;                   // training applies dropout (its masks are stored)
  std::int64_t num_experts = 1;          // MoE experts per layer; 1 = dense
  std::int64_t experts_per_token = 1;    // top-k routing

  bool is_moe() const { return num_experts > 1; }
  std::int64_t q_width() const { return num_attention_heads * head_dim; }   // width of Q
  std::int64_t kv_width() const { return num_kv_heads * head_dim; }         // width of K (= V)
};

// Limits that keep every derived quantity far from overflow (see README "Limits").
struct ModelLimits {
  static constexpr std::int64_t kMaxLayers = 65536;
  static constexpr std::int64_t kMaxHidden = 1 << 20;
  static constexpr std::int64_t kMaxHeads = 65536;
  static constexpr std::int64_t kMaxFfn = 1 << 23;
  static constexpr std::int64_t kMaxVocab = 1 << 24;
  static constexpr std::int64_t kMaxSeq = 1 << 24;
  static constexpr std::int64_t kMaxExperts = 4096;
};

// Reads our format, or a Hugging Face config.json (recognised by num_hidden_layers / n_layer).
// `source` names the input in messages (usually the file path).
Result<ModelSpec> model_from_json(const Json& json, std::string_view source);
Json model_to_json(const ModelSpec& model);
// Cross-field checks (heads divide hidden, kv heads divide heads, positions cover seq_len...).
Status validate_model(const ModelSpec& model, std::string_view source);
// Returns a copy with the training sequence length replaced (command-line --seq-len).
Result<ModelSpec> with_seq_len(const ModelSpec& model, std::int64_t seq_len);

std::string_view to_string(Activation a);
std::string_view to_string(NormKind n);
std::string_view to_string(PositionKind p);

}  // namespace trainplan
