// The Hugging Face config.json reader by model_type; see hf_config.h.
// Tested by tests/core/hf_config_test.cc, tests/core/hf_families_test.cc and
// tests/core/moe_mla_test.cc.
#include "core/hf_config.h"

#include <algorithm>
#include <initializer_list>
#include <string>
#include <utility>

namespace trainplan {

namespace {

using L = ModelLimits;

// How a family lays out its keys: most follow Llama's (num_hidden_layers, hidden_size,
// intermediate_size); GPT-2 and GPT-J say n_layer / n_embd; Falcon, OPT and BLOOM have their own.
enum class HfLayout { kLlama, kGpt2, kFalcon, kOpt, kBloom };
// The MLP a family builds whatever its activation: gated (three matrices: SwiGLU, GeGLU) or
// plain (two). kByActivation: silu means gated, a GELU or ReLU plain (the older readers' rule,
// and the assumption for an unknown type).
enum class HfMlp { kGated, kPlain, kByActivation };

// One allow-listed model_type and the defaults its transformers configuration class gives keys
// a config.json leaves out. Sources: transformers/src/transformers/models/<type>/
// configuration_<type>.py (read at commit 008e574391258935f3ecc3035c882e73bbcac419, mistral at
// 001f85b3, gemma3_text at 008f5c8c) and the modeling files for what is hard-wired (MLP kind,
// norm kind, biases); the remote-code types from their configuration_<type>.py.
struct HfFamily {
  const char* model_type;
  HfLayout layout;
  bool tie_word_embeddings;             // PretrainedConfig default unless the class overrides it
  const char* hidden_act;               // activation when the key is absent
  std::int64_t max_position_embeddings; // when absent; 0 = the key is required
  std::int64_t head_dim;                // when absent; 0 = hidden_size / num_attention_heads
  std::int64_t num_kv_heads;            // when absent; 0 = num_attention_heads
  HfMlp mlp;
  NormKind norm;
  const char* bias_key;                 // the key switching linear biases; nullptr = fixed
  bool bias;                            // its default (or the fixed value)
  PositionKind position;
};

constexpr NormKind kRms = NormKind::kRmsNorm;
constexpr NormKind kLn = NormKind::kLayerNorm;
constexpr PositionKind kRope = PositionKind::kRope;
constexpr PositionKind kTable = PositionKind::kLearned;

// Biases not modelled: Qwen2 and Qwen2-MoE hard-wire a bias on q/k/v only, StableLM's
// use_qkv_bias and GPT-J's MLP biases likewise cover part of the linears; trainplan's `bias`
// is all linears or none, and the part left out is under 0.01% of the count. Cohere's
// LayerNorm has no bias (counted as a LayerNorm: h parameters more per norm). Families with one
// norm per layer (phi, cohere, gptj) or four (gemma2, gemma3_text) and q/k norms (qwen3,
// olmo2, gemma3_text) are counted with two per layer: under 0.01% of the total.
// clang-format off: one family per row reads as a table.
constexpr HfFamily kFamilies[] = {
    // type           layout            tie    act                  maxpos  hd   kv  mlp              norm bias_key          bias   pos
    {"llama",         HfLayout::kLlama, false, "silu",              2048,   0,   0,  HfMlp::kGated,   kRms, "attention_bias", false, kRope},
    {"mistral",       HfLayout::kLlama, false, "silu",              131072, 0,   8,  HfMlp::kGated,   kRms, nullptr,          false, kRope},
    {"mixtral",       HfLayout::kLlama, false, "silu",              131072, 0,   8,  HfMlp::kGated,   kRms, nullptr,          false, kRope},
    {"qwen2",         HfLayout::kLlama, false, "silu",              32768,  0,   32, HfMlp::kGated,   kRms, nullptr,          false, kRope},
    {"qwen2_moe",     HfLayout::kLlama, false, "silu",              32768,  0,   16, HfMlp::kGated,   kRms, nullptr,          false, kRope},
    {"qwen3",         HfLayout::kLlama, false, "silu",              32768,  128, 32, HfMlp::kGated,   kRms, "attention_bias", false, kRope},
    {"qwen3_moe",     HfLayout::kLlama, false, "silu",              32768,  128, 4,  HfMlp::kGated,   kRms, "attention_bias", false, kRope},
    {"gemma",         HfLayout::kLlama, true,  "gelu_pytorch_tanh", 8192,   256, 16, HfMlp::kGated,   kRms, "attention_bias", false, kRope},
    {"gemma2",        HfLayout::kLlama, true,  "gelu_pytorch_tanh", 8192,   256, 4,  HfMlp::kGated,   kRms, "attention_bias", false, kRope},
    {"gemma3_text",   HfLayout::kLlama, true,  "gelu_pytorch_tanh", 131072, 256, 4,  HfMlp::kGated,   kRms, "attention_bias", false, kRope},
    {"phi",           HfLayout::kLlama, false, "gelu_new",          2048,   0,   0,  HfMlp::kPlain,   kLn,  nullptr,          true,  kRope},
    {"phi3",          HfLayout::kLlama, false, "silu",              4096,   0,   0,  HfMlp::kGated,   kRms, "attention_bias", false, kRope},
    {"olmo2",         HfLayout::kLlama, false, "silu",              2048,   0,   0,  HfMlp::kGated,   kRms, "attention_bias", false, kRope},
    {"olmoe",         HfLayout::kLlama, false, "silu",              4096,   0,   0,  HfMlp::kGated,   kRms, "attention_bias", false, kRope},
    {"granite",       HfLayout::kLlama, false, "silu",              2048,   0,   0,  HfMlp::kGated,   kRms, "attention_bias", false, kRope},
    {"starcoder2",    HfLayout::kLlama, true,  "gelu_pytorch_tanh", 4096,   0,   2,  HfMlp::kPlain,   kLn,  "use_bias",       true,  kRope},
    {"cohere",        HfLayout::kLlama, true,  "silu",              8192,   0,   0,  HfMlp::kGated,   kLn,  "attention_bias", false, kRope},
    {"gpt_neox",      HfLayout::kLlama, false, "gelu",              2048,   0,   0,  HfMlp::kPlain,   kLn,  "attention_bias", true,  kRope},
    {"stablelm",      HfLayout::kLlama, false, "silu",              4096,   0,   32, HfMlp::kGated,   kLn,  nullptr,          false, kRope},
    {"internlm2",     HfLayout::kLlama, false, "silu",              2048,   0,   0,  HfMlp::kGated,   kRms, "bias",           true,  kRope},
    {"deepseek_v2",   HfLayout::kLlama, false, "silu",              2048,   0,   0,  HfMlp::kGated,   kRms, "attention_bias", false, kRope},
    {"deepseek_v3",   HfLayout::kLlama, false, "silu",              4096,   0,   0,  HfMlp::kGated,   kRms, "attention_bias", false, kRope},
    {"llama4_text",   HfLayout::kLlama, false, "silu",              131072, 128, 8,  HfMlp::kGated,   kRms, "attention_bias", false, kRope},
    {"gpt2",          HfLayout::kGpt2,  true,  "gelu_new",          1024,   0,   0,  HfMlp::kPlain,   kLn,  nullptr,          true,  kTable},
    {"gptj",          HfLayout::kGpt2,  false, "gelu_new",          2048,   0,   0,  HfMlp::kPlain,   kLn,  nullptr,          true,  kRope},
    {"falcon",        HfLayout::kFalcon, true, "gelu",              2048,   0,   0,  HfMlp::kByActivation, kLn, "bias",     false, kRope},
    {"RefinedWeb",    HfLayout::kFalcon, true, "gelu",              2048,   0,   0,  HfMlp::kByActivation, kLn, "bias",     false, kRope},
    {"RefinedWebModel", HfLayout::kFalcon, true, "gelu",            2048,   0,   0,  HfMlp::kByActivation, kLn, "bias",     false, kRope},
    {"opt",           HfLayout::kOpt,   true,  "relu",              0,      0,   0,  HfMlp::kByActivation, kLn, "enable_bias", true, kTable},
    {"bloom",         HfLayout::kBloom, true,  "gelu",              2048,   0,   0,  HfMlp::kByActivation, kLn, nullptr,   true,  kRope},
};
// clang-format on

// An unknown type read on request: the Llama layout, every choice below noted as an assumption.
constexpr HfFamily kUnknownFamily = {"", HfLayout::kLlama, false, "silu", 0, 0, 0,
                                     HfMlp::kByActivation, kRms, "attention_bias", false, kRope};

// Types that are refused, and why. State-space and hybrid models have layers that are not
// attention blocks (Mamba, RWKV time mixing, linear attention, recurrent blocks); planning
// them as all-attention transformers gives wrong FLOPs, memory and communication.
struct HfRefusal {
  const char* model_type;
  const char* why;
};
constexpr const char* kSsm =
    "is a state-space / recurrent model (its layers are Mamba or RWKV blocks, not attention); "
    "trainplan models decoder-only attention transformers";
constexpr const char* kHybrid =
    "is a hybrid model: it interleaves state-space, linear-attention or recurrent layers with "
    "attention layers, and planning it as an all-attention transformer would be wrong";
constexpr const char* kEncoder =
    "is an encoder or encoder-decoder model (bidirectional attention, or a decoder with "
    "cross-attention); trainplan models decoder-only transformers";
constexpr HfRefusal kRefusals[] = {
    {"mamba", kSsm},          {"mamba2", kSsm},          {"falcon_mamba", kSsm},
    {"rwkv", kSsm},           {"rwkv5", kSsm},           {"rwkv6", kSsm},
    {"rwkv7", kSsm},          {"xlstm", kSsm},           {"jamba", kHybrid},
    {"granitemoehybrid", kHybrid}, {"nemotron_h", kHybrid}, {"falcon_h1", kHybrid},
    {"zamba", kHybrid},       {"zamba2", kHybrid},       {"bamba", kHybrid},
    {"lfm2", kHybrid},        {"qwen3_next", kHybrid},   {"kimi_linear", kHybrid},
    {"recurrent_gemma", kHybrid}, {"minimax", kHybrid},  {"plamo2", kHybrid},
    {"bert", kEncoder},       {"roberta", kEncoder},     {"xlm-roberta", kEncoder},
    {"distilbert", kEncoder}, {"albert", kEncoder},      {"electra", kEncoder},
    {"deberta", kEncoder},    {"deberta-v2", kEncoder},  {"modernbert", kEncoder},
    {"t5", kEncoder},         {"mt5", kEncoder},         {"umt5", kEncoder},
    {"bart", kEncoder},       {"mbart", kEncoder},       {"pegasus", kEncoder},
    {"whisper", kEncoder},
};

// Keys only state-space and hybrid configs carry: a config with one is refused whatever its
// model_type says (a fine-tune saved under a decoder's type, or an unknown type read on request).
constexpr const char* kStateSpaceKeys[] = {"layers_block_type", "hybrid_override_pattern",
                                           "attn_layer_period", "attn_layer_offset",
                                           "mamba_d_state", "ssm_state_size", "mamba_d_conv"};

const HfFamily* find_family(std::string_view model_type) {
  for (const HfFamily& f : kFamilies)
    if (model_type == f.model_type) return &f;
  return nullptr;
}

// Collects the defaults applied to keys the config left out, for HfReadOptions::assumptions.
class Assumptions {
 public:
  Assumptions(const Json& j, std::string family, std::vector<std::string>* out)
      : j_(j), family_(std::move(family)), out_(out) {}
  // Records "KEY absent: VALUE" when the config has no value for key.
  void absent(const char* key, const std::string& value) {
    if (out_ != nullptr && (!j_.contains(key) || j_[key].is_null()))
      out_->push_back(std::string(key) + " absent: " + value + " (" + family_ + ")");
  }
  void note(const std::string& what) {
    if (out_ != nullptr) out_->push_back(what);
  }

 private:
  const Json& j_;
  std::string family_;
  std::vector<std::string>* out_;
};

std::string yes_no(bool b) { return b ? "true" : "false"; }

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
  // DeepSeek-V2/V3's node-limited routing: n_group groups of experts, topk_group chosen per
  // token (n_group 1 is no limit).
  std::int64_t groups = 0, group_topk = 0;
  r.get_int("n_group", groups, 1, L::kMaxExperts, false);
  r.get_int("topk_group", group_topk, 1, L::kMaxExperts, false);
  if (groups > 1 && group_topk >= 1) {
    m.router_groups = groups;
    m.router_group_topk = group_topk;
  }
  // Mixtral's, Qwen-MoE's and OLMoE's load-balancing coefficient (Switch's loss). DeepSeek-V3's
  // aux_loss_alpha weighs a sequence-wise loss (DeepSeek-V3 sec. 2.1.2), another formula: not
  // read.
  if (double coef = 0; r.get_double("router_aux_loss_coef", coef, 0.0, 1.0, false))
    m.router_aux_loss_coef = coef;
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

// GPT-2 (modeling_gpt2.py) and GPT-J (modeling_gptj.py): n_layer, n_embd, n_head; n_inner null
// means 4*n_embd; LayerNorm and biases. GPT-2 has a learned table of n_positions; GPT-J applies
// rotary embeddings to rotary_dim of each head and has no table.
Status read_hf_gpt2(JsonReader& r, const HfFamily& f, ModelSpec& m, std::string& act,
                    HfKeys& keys, Assumptions& notes) {
  keys = {"n_embd", "n_head", "n_head", "activation_function"};
  r.get_int("n_layer", m.num_layers, 1, L::kMaxLayers, true);
  r.get_int("n_embd", m.hidden_size, 1, L::kMaxHidden, true);
  r.get_int("n_head", m.num_attention_heads, 1, L::kMaxHeads, true);
  m.num_kv_heads = m.num_attention_heads;
  m.ffn_hidden_size = 0;
  r.get_int("n_inner", m.ffn_hidden_size, 1, L::kMaxFfn, false);
  m.max_position_embeddings = f.max_position_embeddings;
  r.get_int("n_positions", m.max_position_embeddings, 1, L::kMaxSeq,
            f.max_position_embeddings == 0);
  notes.absent("n_positions", std::to_string(f.max_position_embeddings));
  r.get_int("vocab_size", m.vocab_size, 1, L::kMaxVocab, true);
  act = f.hidden_act;
  r.get_string("activation_function", act, false);
  m.tie_word_embeddings = f.tie_word_embeddings;
  r.get_bool("tie_word_embeddings", m.tie_word_embeddings, false);
  notes.absent("tie_word_embeddings", yes_no(f.tie_word_embeddings));
  m.position = f.position;
  if (m.position == PositionKind::kRope) {
    std::int64_t rotary_dim = 0;  // GPT-J: the rotated part of a head; no parameters
    r.get_int("rotary_dim", rotary_dim, 1, L::kMaxHidden, false);
  }
  m.norm = NormKind::kLayerNorm;
  m.bias = true;
  m.dropout = any_dropout(r, {{"resid_pdrop", 0.1}});
  return Status::Ok();
}

// transformers 5's keys, checked in any layout: rope_parameters (one dict, or one per layer
// type, replacing rope_theta and rope_scaling) and dtype (replacing torch_dtype) change no
// parameter; layer_types lists each layer's attention kind, and any kind that is not
// attention (mamba, linear_attention, conv) marks a hybrid model, which is refused.
void read_hf_v5_keys(JsonReader& r, const Json& j, const ModelSpec& m) {
  for (const char* key : {"rope_parameters", "rope_scaling"})
    if (j.contains(key) && !j[key].is_null() && !j[key].is_object())
      r.fail_field(key, "value " + json_value_for_message(j[key]) + " is not an object");
  for (const char* key : {"dtype", "torch_dtype"})
    if (j.contains(key) && !j[key].is_null() && !j[key].is_string())
      r.fail_field(key, "value " + json_value_for_message(j[key]) + " is not a string");
  if (!j.contains("layer_types") || j["layer_types"].is_null()) return;
  const Json& types = j["layer_types"];
  if (!types.is_array() || static_cast<std::int64_t>(types.size()) != m.num_layers) {
    r.fail_field("layer_types", "value " + json_value_for_message(types) +
                                    " is not a list of num_hidden_layers=" +
                                    std::to_string(m.num_layers) + " layer kinds");
    return;
  }
  for (std::size_t i = 0; i < types.size(); ++i) {
    const bool attention = types[i].is_string() &&
                           (types[i] == "full_attention" || types[i] == "sliding_attention" ||
                            types[i] == "chunked_attention" || types[i] == "attention");
    if (!attention) {
      r.fail_field("layer_types", "entry " + std::to_string(i) + " is " +
                                      json_value_for_message(types[i]) +
                                      ": a layer that is not attention (a hybrid model); "
                                      "trainplan models decoder-only attention transformers");
      return;
    }
  }
}

// The Llama layout, shared by most families: num_hidden_layers, hidden_size,
// intermediate_size, num_key_value_heads; the family fills in what the config leaves out.
// GPT-NeoX (Pythia) keeps the same keys with rotary_pct / rotary_emb_base and
// use_parallel_residual (attention and MLP side by side: the same work, so cost-neutral).
Status read_hf_llama(JsonReader& r, const Json& j, const HfFamily& f, ModelSpec& m,
                     std::string& act, Assumptions& notes) {
  r.get_int("num_hidden_layers", m.num_layers, 1, L::kMaxLayers, true);
  r.get_int("hidden_size", m.hidden_size, 1, L::kMaxHidden, true);
  r.get_int("num_attention_heads", m.num_attention_heads, 1, L::kMaxHeads, true);
  m.num_kv_heads = f.num_kv_heads > 0 ? f.num_kv_heads : m.num_attention_heads;
  r.get_int("num_key_value_heads", m.num_kv_heads, 1, L::kMaxHeads, false);
  notes.absent("num_key_value_heads", f.num_kv_heads > 0 ? std::to_string(f.num_kv_heads)
                                                         : "num_attention_heads");
  m.head_dim = f.head_dim;
  r.get_int("head_dim", m.head_dim, 1, L::kMaxHidden, false);
  notes.absent("head_dim", f.head_dim > 0 ? std::to_string(f.head_dim)
                                          : "hidden_size / num_attention_heads");
  r.get_int("intermediate_size", m.ffn_hidden_size, 1, L::kMaxFfn, true);
  r.get_int("vocab_size", m.vocab_size, 1, L::kMaxVocab, true);
  m.max_position_embeddings = f.max_position_embeddings;
  r.get_int("max_position_embeddings", m.max_position_embeddings, 1, L::kMaxSeq,
            f.max_position_embeddings == 0);
  notes.absent("max_position_embeddings", std::to_string(f.max_position_embeddings));
  m.tie_word_embeddings = f.tie_word_embeddings;
  r.get_bool("tie_word_embeddings", m.tie_word_embeddings, false);
  notes.absent("tie_word_embeddings", yes_no(f.tie_word_embeddings));
  // Gemma's modeling file reads hidden_activation; its files carry both names.
  act = f.hidden_act;
  r.get_string("hidden_act", act, false);
  r.get_string("hidden_activation", act, false);
  if (!j.contains("hidden_act") && !j.contains("hidden_activation"))
    notes.absent("hidden_act", f.hidden_act);
  m.norm = f.norm;
  m.position = f.position;
  m.bias = f.bias;
  if (f.bias_key != nullptr) {
    r.get_bool(f.bias_key, m.bias, false);
    notes.absent(f.bias_key, yes_no(f.bias));
  }
  const bool neox = std::string_view(f.model_type) == "gpt_neox";
  m.dropout = neox ? any_dropout(r, {{"attention_dropout", 0.0}, {"hidden_dropout", 0.0}})
                   : any_dropout(r, {{"attention_dropout", 0.0}});
  if (neox) {
    bool parallel_residual = true;
    r.get_bool("use_parallel_residual", parallel_residual, false);
  }
  TRAINPLAN_RETURN_IF_ERROR(read_hf_moe(r, m));
  return read_hf_mla(r, m);
}

// What an unknown model_type read on request is taken to be, decided from its keys as the
// older reader did, each choice recorded.
HfFamily unknown_family(const Json& j, Assumptions& notes) {
  HfFamily f = kUnknownFamily;
  f.norm = j.contains("rms_norm_eps") ? NormKind::kRmsNorm : NormKind::kLayerNorm;
  const bool rotary = j.contains("rope_theta") || j.contains("rope_scaling") ||
                      j.contains("rope_parameters") || j.contains("rotary_pct") ||
                      j.contains("rotary_emb_base");
  f.position = rotary ? PositionKind::kRope : PositionKind::kLearned;
  notes.note("model_type is not on the allow-list: read with the Llama layout "
             "(num_hidden_layers, hidden_size, intermediate_size, num_key_value_heads)");
  notes.note(std::string("norm: ") + (f.norm == NormKind::kRmsNorm ? "RMSNorm (rms_norm_eps is set)"
                                                                  : "LayerNorm (no rms_norm_eps)"));
  notes.note(std::string("positions: ") +
             (rotary ? "rotary (a rope key is set), no position table"
                     : "a learned table of max_position_embeddings rows (no rope key)"));
  notes.note("MLP: gated (three matrices) if hidden_act is silu/swish, else plain (two)");
  notes.note("biases: attention_bias, default false; two norms per layer; no q/k norms");
  return f;
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


// The activation's MLP: the family's kind, or for the older readers and unknown types the rule
// silu/swish = gated SwiGLU (Shazeer 2020), GELU variants and ReLU = the plain two-matrix MLP.
Status set_activation(const HfFamily& f, const std::string& act, const std::string& key,
                      const std::string& where, ModelSpec& m) {
  static constexpr const char* kKnown[] = {"silu", "swish", "gelu", "gelu_new", "gelu_fast",
                                           "gelu_pytorch_tanh", "gelu_python", "gelu_accurate",
                                           "gelu_10", "quick_gelu", "relu", "relu2"};
  const bool known = std::any_of(std::begin(kKnown), std::end(kKnown),
                                 [&](const char* k) { return act == k; });
  if (!known)
    return Status::Error(where + key + "': unsupported activation \"" + act + "\"");
  const bool gated = f.mlp == HfMlp::kGated ||
                     (f.mlp == HfMlp::kByActivation && (act == "silu" || act == "swish"));
  m.activation = gated ? Activation::kSwiglu : Activation::kGelu;
  return Status::Ok();
}

// Cross-field checks in the config's own key names (validate_model speaks ours).
Status check_hf_shape(ModelSpec& m, const HfKeys& keys, const std::string& hw) {
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
  return Status::Ok();
}

// The family of `model_type`, a refusal naming it, or (on request) the unknown-type reading.
Result<HfFamily> choose_family(const Json& j, const std::string& model_type,
                               const std::string& where, const HfReadOptions& options,
                               Assumptions& notes) {
  if (const std::string_view why = hf_refusal_reason(model_type); !why.empty())
    return Status::Error(where + "model_type': value \"" + model_type + "\" " + std::string(why));
  for (const char* key : kStateSpaceKeys)
    if (j.contains(key))
      return Status::Error(where + key + "': present, so the model has state-space (Mamba) "
                           "layers: " + kHybrid);
  if (const HfFamily* f = find_family(model_type)) return *f;
  if (!options.allow_unknown_model_type)
    return Status::Error(
        where + "model_type': " +
        (model_type.empty() ? std::string("missing") : "value \"" + model_type + "\"") +
        " is not a model type trainplan knows the defaults of (see docs/inputs.md for the "
        "list); --allow-unknown-model-type reads it with the Llama layout and prints every "
        "assumption");
  return unknown_family(j, notes);
}

// One decoder config (a multimodal config's text_config is passed here on its own).
Result<ModelSpec> read_hf(const Json& j, std::string_view source, const HfReadOptions& options) {
  ModelSpec m;
  JsonReader r(j, "Hugging Face config '" + std::string(source) + "'");
  const std::string hw = "Hugging Face config '" + std::string(source) + "': field '";
  std::string model_type;
  r.get_string("model_type", model_type, false);
  TRAINPLAN_RETURN_IF_ERROR(r.finish(/*allow_unknown=*/true));
  m.name = model_type.empty() ? std::string(source) : model_type + " (" + std::string(source) + ")";
  Assumptions notes(j, find_family(model_type) != nullptr ? model_type + "'s default"
                                                          : "assumed for an unknown model_type",
                    options.assumptions);
  auto family = choose_family(j, model_type, hw, options, notes);
  if (!family.ok()) return family.status();
  const HfFamily& f = *family;
  HfKeys keys;
  std::string act = f.hidden_act;
  const Status read = f.layout == HfLayout::kFalcon ? read_hf_falcon(r, j, m, act, keys)
                      : f.layout == HfLayout::kOpt  ? read_hf_opt(r, m, act, keys)
                      : f.layout == HfLayout::kBloom ? read_hf_bloom(r, j, m, keys)
                      : f.layout == HfLayout::kGpt2 ? read_hf_gpt2(r, f, m, act, keys, notes)
                                                    : read_hf_llama(r, j, f, m, act, notes);
  TRAINPLAN_RETURN_IF_ERROR(read);
  read_hf_v5_keys(r, j, m);
  TRAINPLAN_RETURN_IF_ERROR(r.finish(/*allow_unknown=*/true));
  if (m.ffn_hidden_size == 0) m.ffn_hidden_size = 4 * m.hidden_size;  // GPT-2 default n_inner
  TRAINPLAN_RETURN_IF_ERROR(set_activation(f, act, keys.activation, hw, m));
  TRAINPLAN_RETURN_IF_ERROR(check_hf_shape(m, keys, hw));
  m.seq_len = m.max_position_embeddings;
  TRAINPLAN_RETURN_IF_ERROR(validate_model(m, source));
  return m;
}

}  // namespace

std::string_view hf_refusal_reason(std::string_view model_type) {
  for (const HfRefusal& refusal : kRefusals)
    if (model_type == refusal.model_type) return refusal.why;
  return {};
}

std::vector<std::string> hf_supported_model_types() {
  std::vector<std::string> out;
  for (const HfFamily& f : kFamilies) out.emplace_back(f.model_type);
  return out;
}

bool is_hf_config(const Json& json) {
  if (!json.is_object()) return false;
  for (const char* key : {"model_type", "num_hidden_layers", "n_layer", "text_config"})
    if (json.contains(key)) return true;
  return false;
}

Result<ModelSpec> read_hf_config(const Json& json, std::string_view source,
                                 const HfReadOptions& options) {
  const std::string where = "Hugging Face config '" + std::string(source) + "': field '";
  const bool encoder_decoder = json.contains("is_encoder_decoder") &&
                               json["is_encoder_decoder"].is_boolean() &&
                               json["is_encoder_decoder"].get<bool>();
  if (encoder_decoder)
    return Status::Error(where + "is_encoder_decoder': value true: the model " + kEncoder);
  // Multimodal configs (Llama 4, Gemma 3, Mistral 3) nest the language model in text_config;
  // the outer model_type is checked against the refusals first.
  if (!json.contains("num_hidden_layers") && !json.contains("n_layer") &&
      json.contains("text_config") && json["text_config"].is_object()) {
    if (json.contains("model_type") && json["model_type"].is_string())
      if (const auto why = hf_refusal_reason(json["model_type"].get<std::string>()); !why.empty())
        return Status::Error(where + "model_type': value " + json["model_type"].dump() + " " +
                             std::string(why));
    return read_hf(json["text_config"], std::string(source) + " text_config", options);
  }
  return read_hf(json, source, options);
}

}  // namespace trainplan
