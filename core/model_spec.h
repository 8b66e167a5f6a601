// The model: a decoder-only transformer described by its shape. Loaded from our JSON
// (models/zoo/*.json) or from a Hugging Face config.json as is. Every field has its unit or
// meaning in a comment; ModelSpec round-trips through model_to_json / model_from_json.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/json_util.h"
#include "core/status.h"

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
  // The gated activation's inputs clamped at this limit before it (GPT-OSS: 7, HF config
  // swiglu_limit, Megatron-Core activation_func_clamp_value); 0 = no clamp. Only with swiglu.
  double glu_clamp = 0;
  std::int64_t num_experts = 1;          // MoE experts per layer; 1 = dense
  std::int64_t experts_per_token = 1;    // top-k routing
  // Node-limited (group-limited) routing (DeepSeek-V3, arXiv:2412.19437 sec. 3.2.2; HF config
  // n_group/topk_group, Megatron-Core moe_router_num_groups/moe_router_group_topk): the experts
  // form router_groups equal groups and each token picks its top-k among router_group_topk of
  // them. 0 = no limit.
  std::int64_t router_groups = 0;
  std::int64_t router_group_topk = 0;
  // The load-balancing loss's coefficient (Switch Transformer's alpha, Fedus et al. 2022 sec.
  // 2.2; HF config router_aux_loss_coef, Megatron-Core moe_aux_loss_coeff). Only the executor
  // trains with it; absent: the executor's default (executor/cpu/moe.h).
  std::optional<double> router_aux_loss_coef;
  // Expert capacity (Megatron-Core moe_expert_capacity_factor; GShard's and Switch Transformer's
  // capacity factor): each expert takes at most ceil(T*k / E * factor) of a micro-batch's T*k
  // token-expert assignments on a rank and drops the rest, those of the lowest router
  // probability (executor/cpu/moe.h). Absent: dropless (Megatron-Core's default). Only the
  // executor trains with it; the cost model prices balanced routing, where nothing is dropped
  // for a factor >= 1.
  std::optional<double> moe_capacity_factor;
  // Mixture-of-experts stacks that are not uniform (DeepSeek-V2/V3, Qwen-MoE, Llama 4):
  std::int64_t shared_expert_ffn_size = 0;  // MoE layers: inner width of the shared experts
                                            // every token passes through, all together; 0 = none
  std::vector<std::int64_t> dense_layers;   // MoE models: layers (0-based, ascending) whose MLP
                                            // is dense, e.g. DeepSeek-V3's first three
  std::int64_t dense_ffn_hidden_size = 0;   // inner width of those dense MLPs; 0 = ffn_hidden_size
  // Multi-head latent attention (DeepSeek-V2, arXiv:2405.04434 sec. 2.1), on when kv_lora_rank
  // > 0: keys and values are up-projected from one compressed latent per token, queries from
  // another (or directly from the input when q_lora_rank = 0). head_dim is the query/key head
  // width, of which qk_rope_head_dim is the rotary part carried by one key shared by all heads.
  std::int64_t q_lora_rank = 0;       // query latent width; 0 = a full query projection
  std::int64_t kv_lora_rank = 0;      // key/value latent width; 0 = no MLA
  std::int64_t qk_rope_head_dim = 0;  // MLA: decoupled rotary width of a query/key head
  std::int64_t v_head_dim = 0;        // width of a value head; 0 = head_dim

  bool is_moe() const { return num_experts > 1; }
  bool is_mla() const { return kv_lora_rank > 0; }
  // Whether transformer layer `layer` (0-based) routes its MLP through experts.
  bool layer_is_moe(std::int64_t layer) const;
  std::int64_t v_dim() const { return v_head_dim > 0 ? v_head_dim : head_dim; }
  std::int64_t q_width() const { return num_attention_heads * head_dim; }   // width of Q
  std::int64_t kv_width() const { return num_kv_heads * head_dim; }         // width of K
  std::int64_t v_width() const { return num_kv_heads * v_dim(); }           // width of V
  std::int64_t o_width() const { return num_attention_heads * v_dim(); }    // attention output
};

// The two kinds of transformer layer a model may stack: an MoE model's dense layers
// (dense_layers) and its expert layers. A dense model has only kDense layers.
enum class LayerKind { kDense, kMoe };
inline constexpr std::size_t kLayerKindCount = 2;
// The model as one of its layers of `kind` sees it: a uniform stack of such layers (for kDense,
// no experts and the dense MLP width; for kMoe, dense_layers empty). The cost model's per-layer
// functions take this view; everything else about the model is unchanged.
ModelSpec layer_model(const ModelSpec& model, LayerKind kind);
// fn(view) with that view, without copying the model where its layers are all alike (the
// planner evaluates about a million candidates a second and a copy is a fifth of that).
template <typename Fn>
auto with_layer_model(const ModelSpec& model, LayerKind kind, Fn&& fn) {
  if (!model.is_moe() && model.dense_layers.empty()) return fn(model);
  return fn(layer_model(model, kind));
}
LayerKind layer_kind(const ModelSpec& model, std::int64_t layer);
// Layers of each kind among layers [first, first + count).
struct LayerKindCounts {
  std::int64_t dense = 0, moe = 0;
  std::int64_t of(LayerKind k) const { return k == LayerKind::kDense ? dense : moe; }
};
LayerKindCounts layer_kind_counts(const ModelSpec& model, std::int64_t first, std::int64_t count);

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

// How a Hugging Face config is read (core/hf_config.h has the allow-list of model types).
struct HfReadOptions {
  // A model_type outside the allow-list is refused unless this is set; then it is read with
  // the Llama layout and every assumption is listed in `assumptions`.
  bool allow_unknown_model_type = false;
  std::vector<std::string>* assumptions = nullptr;  // receives each default the reader applied
};

// Reads our format, or a Hugging Face config.json (recognised by model_type, num_hidden_layers,
// n_layer or text_config). `source` names the input in messages (usually the file path).
Result<ModelSpec> model_from_json(const Json& json, std::string_view source);
// The same with a choice about Hugging Face configs (the tools' --allow-unknown-model-type).
Result<ModelSpec> model_from_json_with(const Json& json, std::string_view source,
                                       const HfReadOptions& hf);
Json model_to_json(const ModelSpec& model);
// Cross-field checks (heads divide hidden, kv heads divide heads, positions cover seq_len...).
Status validate_model(const ModelSpec& model, std::string_view source);
// Returns a copy with the training sequence length replaced (command-line --seq-len).
Result<ModelSpec> with_seq_len(const ModelSpec& model, std::int64_t seq_len);

std::string_view to_string(Activation a);
std::string_view to_string(NormKind n);
std::string_view to_string(PositionKind p);

}  // namespace trainplan
