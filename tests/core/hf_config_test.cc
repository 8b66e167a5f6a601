// The Hugging Face reader by model_type (core/hf_config.h) on real published config.json texts
// of tests/data/hf (where each came from: tests/data/hf/SOURCES.md): each family's parameter
// count against the published total (model card or paper, cited per row below), the defaults
// a family gives keys its files leave out, transformers 5's keys, and the refusals: state-space
// and hybrid models by name and by their keys, encoders, unknown types (refused, or read on
// request with every assumption listed).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/cost/cost_model.h"
#include "core/hf_config.h"
#include "core/json_util.h"
#include "core/model_spec.h"
#include "tests/core/test_util.h"

namespace trainplan {
namespace {

using testing::load_hf;
using testing::read_hf_json;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// One published config and the total its publisher gives (SOURCES.md has the file's origin).
struct Published {
  const char* file;
  double total;        // parameters
  const char* source;  // where the figure is published
};

// The bar: the count within 0.5% of the published total. Per-family differences the
// cost model does not count (a norm more or fewer per layer, q/k norms, q/k/v-only biases)
// are each under 0.01%; the rest of the margin is the publisher's rounding (e.g. "7.61B").
constexpr double kTolerance = 0.005;
const Published kPublished[] = {
    {"llama-2-7b-config.json", 6'738'415'616, "Llama 2 7B safetensors total (hub)"},
    {"llama3.2-1b-config.json", 1.23e9, "Llama 3.2 model card, 1.23B"},
    {"llama3.2-3b-config.json", 3.21e9, "Llama 3.2 model card, 3.21B"},
    {"mistral-7b-v0.3-config.json", 7.25e9, "Mistral-7B-v0.3 hub, 7.25B"},
    {"qwen2.5-3b-config.json", 3.09e9, "Qwen2.5-3B model card, 3.09B"},
    {"qwen2.5-7b-config.json", 7.61e9, "Qwen2.5-7B model card, 7.61B"},
    {"qwen2-72b-config.json", 72.7e9, "Qwen2.5-72B model card (same shapes), 72.7B"},
    {"qwen3-8b-config.json", 8.2e9, "Qwen3-8B model card, 8.2B"},
    {"qwen3-32b-config.json", 32.8e9, "Qwen3-32B model card, 32.8B"},
    {"gemma-2b-config.json", 2'506'434'560, "Gemma report arXiv:2403.08295 Table 2"},
    {"gemma-2-2b-config.json", 2'614'341'888, "Gemma 2 report arXiv:2408.00118 Table 1"},
    {"gemma-2-9b-config.json", 9'241'705'984, "Gemma 2 report arXiv:2408.00118 Table 1"},
    {"gemma-2-27b-config.json", 27'227'128'320, "Gemma 2 report arXiv:2408.00118 Table 1"},
    {"gemma-3-1b-it-config.json", 1.0e9, "Gemma 3 report arXiv:2503.19786 Table 1, 302M+698M"},
    {"phi-2-config.json", 2'779'683'840, "phi-2 model card (2.7B), safetensors total"},
    {"phi-3-mini-4k-instruct-config.json", 3'821'079'552, "Phi-3 report arXiv:2404.14219 (3.8B)"},
    {"phi-3-mini-128k-instruct-config.json", 3'821'079'552, "Phi-3 report (3.8B)"},
    {"phi-4-mini-config.json", 3'836'021'760, "Phi-4-mini model card (3.8B)"},
    {"olmo-2-1124-7b-instruct-config.json", 7.3e9, "OLMo 2 arXiv:2501.00656, 7.3B"},
    {"granite-3.3-8b-instruct-config.json", 8.17e9, "granite-3.3-8b hub, 8.17B"},
    {"starcoder2-7b-config.json", 7.17e9, "starcoder2-7b hub, 7.17B"},
    {"aya-23-8b-config.json", 8.03e9, "aya-23-8B hub, 8.03B"},
    {"stablelm-3b-config.json", 2'795'443'200, "stablelm-3b-4e1t model card"},
    {"stablelm-2-zephyr-1.6b-config.json", 1'644'417'024, "stablelm-2-1_6b model card"},
    {"internlm2.5-7b-config.json", 7.74e9, "internlm2_5-7b-chat hub, 7.74B"},
    {"gpt-j-6b-config.json", 6'053'381'344, "gpt-j-6b model card table"},
};

TEST(HfConfig, PublishedTotalsWithinHalfAPercent) {
  std::vector<std::string> families;
  for (const Published& p : kPublished) {
    auto m = load_hf(p.file);
    ASSERT_TRUE(m.ok()) << p.file << ": " << m.status().message();
    const double total = count_parameters(*m).total();
    EXPECT_LT(std::fabs(total / p.total - 1.0), kTolerance)
        << p.file << ": counted " << total << ", published " << p.total << " (" << p.source << ")";
    auto j = read_hf_json(p.file);
    ASSERT_TRUE(j.ok());
    const std::string type = (*j)["model_type"].get<std::string>();
    if (std::find(families.begin(), families.end(), type) == families.end())
      families.push_back(type);
  }
  // With falcon, opt, bloom, gpt_neox (hf_families_test) and the MoE families (moe_mla_test).
  EXPECT_GE(families.size(), 15u);
}

// Keys the files leave out take the model type's transformers default.
TEST(HfConfig, FamilyDefaultsForAbsentKeys) {
  // Gemma 2 ties its embeddings (Gemma2Config default); the file has no tie_word_embeddings.
  // Untied it would count 28.4B instead of the published 27.2B.
  auto gemma = load_hf("gemma-2-27b-config.json");
  ASSERT_TRUE(gemma.ok()) << gemma.status().message();
  EXPECT_TRUE(gemma->tie_word_embeddings);
  EXPECT_EQ(gemma->head_dim, 128);                      // given: not hidden/heads = 144
  EXPECT_EQ(gemma->activation, Activation::kSwiglu);    // GeGLU: gated, three matrices
  // StarCoder2 ties by default too, and its MLP is plain with biases (use_bias).
  auto starcoder = load_hf("starcoder2-7b-config.json");
  ASSERT_TRUE(starcoder.ok());
  EXPECT_TRUE(starcoder->tie_word_embeddings);
  EXPECT_EQ(starcoder->activation, Activation::kGelu);
  EXPECT_TRUE(starcoder->bias);
  EXPECT_EQ(starcoder->norm, NormKind::kLayerNorm);
  // Mistral without hidden_act is SiLU (gated), not a GELU MLP; without num_key_value_heads 8.
  auto mistral = read_hf_json("mistral-7b-v0.3-config.json");
  ASSERT_TRUE(mistral.ok());
  mistral->erase("hidden_act");
  mistral->erase("num_key_value_heads");
  auto m = model_from_json(*mistral, "mistral.json");
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->activation, Activation::kSwiglu);
  EXPECT_EQ(m->num_kv_heads, 8);
  // OLMo-2 without max_position_embeddings takes Olmo2Config's 2048 rather than being refused.
  auto olmo = read_hf_json("olmo-2-1124-7b-instruct-config.json");
  ASSERT_TRUE(olmo.ok());
  olmo->erase("max_position_embeddings");
  m = model_from_json(*olmo, "olmo2.json");
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->max_position_embeddings, 2048);
  // Qwen3 without head_dim: 128 (Qwen3Config), not hidden/heads.
  auto qwen3 = read_hf_json("qwen3-8b-config.json");
  ASSERT_TRUE(qwen3.ok());
  qwen3->erase("head_dim");
  m = model_from_json(*qwen3, "qwen3.json");
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->head_dim, 128);
  // Phi-2: a plain GELU MLP with biases and LayerNorm, rotary (no table).
  auto phi = load_hf("phi-2-config.json");
  ASSERT_TRUE(phi.ok());
  EXPECT_EQ(phi->activation, Activation::kGelu);
  EXPECT_TRUE(phi->bias);
  EXPECT_EQ(phi->position, PositionKind::kRope);
}

// The defaults applied are listed when asked for.
TEST(HfConfig, AssumptionsAreListed) {
  std::vector<std::string> notes;
  HfReadOptions options;
  options.assumptions = &notes;
  auto j = read_hf_json("gemma-2-27b-config.json");
  ASSERT_TRUE(j.ok());
  ASSERT_TRUE(model_from_json_with(*j, "gemma", options).ok());
  bool tie_noted = false;
  for (const std::string& n : notes)
    tie_noted = tie_noted || (contains(n, "tie_word_embeddings absent") && contains(n, "true") &&
                              contains(n, "gemma2"));
  EXPECT_TRUE(tie_noted) << ::testing::PrintToString(notes);
}

// A config as transformers 5 saves it: rope_parameters instead of rope_theta/rope_scaling,
// dtype instead of torch_dtype, layer_types. The same model: no learned position table.
TEST(HfConfig, TransformersFiveKeys) {
  auto v4 = read_hf_json("qwen3-8b-config.json");
  ASSERT_TRUE(v4.ok());
  Json v5 = *v4;
  v5["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", v5["rope_theta"]}};
  v5.erase("rope_theta");
  v5.erase("rope_scaling");
  v5["dtype"] = v5["torch_dtype"];
  v5.erase("torch_dtype");
  v5["layer_types"] = Json(std::vector<std::string>(36, "full_attention"));
  auto a = model_from_json(*v4, "v4.json");
  auto b = model_from_json(v5, "v5.json");
  ASSERT_TRUE(a.ok() && b.ok()) << b.status().message();
  EXPECT_EQ(b->position, PositionKind::kRope);
  EXPECT_EQ(count_parameters(*b).total(), count_parameters(*a).total());
  // Gemma 3's per-layer-type dict is accepted too.
  Json g = v5;
  g["rope_parameters"] = {{"full_attention", {{"rope_theta", 1e6}}},
                          {"sliding_attention", {{"rope_theta", 1e4}}}};
  EXPECT_TRUE(model_from_json(g, "v5.json").ok());
  // Malformed transformers-5 keys are errors naming the key and value.
  Json bad = v5;
  bad["rope_parameters"] = 10000;
  auto r = model_from_json(bad, "v5.json");
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(contains(r.status().message(), "'rope_parameters'")) << r.status().message();
  bad = v5;
  bad["layer_types"] = Json(std::vector<std::string>(35, "full_attention"));
  r = model_from_json(bad, "v5.json");
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(contains(r.status().message(), "num_hidden_layers=36")) << r.status().message();
  // A Mamba layer in layer_types marks a hybrid: refused with the layer's index.
  bad = v5;
  bad["layer_types"][5] = "mamba";
  r = model_from_json(bad, "v5.json");
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(contains(r.status().message(), "entry 5") &&
              contains(r.status().message(), "\"mamba\""))
      << r.status().message();
}

// Real published state-space and hybrid configs are refused by model_type, saying why.
TEST(HfConfig, StateSpaceAndHybridConfigsRefused) {
  using FileType = std::pair<const char*, const char*>;
  for (auto [file, type] : {FileType{"jamba-1.5-mini-config.json", "jamba"},
                            FileType{"falcon-h1-0.5b-config.json", "falcon_h1"},
                            FileType{"nemotron-h-nano-hybrid-config.json", "nemotron_h"},
                            FileType{"rwkv5-3b-config.json", "rwkv5"}}) {
    auto m = load_hf(file);
    ASSERT_FALSE(m.ok()) << file;
    const std::string msg = m.status().message();
    EXPECT_TRUE(contains(msg, file) && contains(msg, "'model_type'") &&
                contains(msg, std::string("\"") + type + "\""))
        << msg;
    EXPECT_TRUE(contains(msg, "hybrid") || contains(msg, "state-space")) << msg;
  }
  // Every type on the refusal list, given a decoder's keys, is still refused by name.
  auto llama = read_hf_json("llama-2-7b-config.json");
  ASSERT_TRUE(llama.ok());
  for (const char* type : {"mamba", "mamba2", "granitemoehybrid", "zamba", "zamba2", "rwkv",
                           "bamba", "qwen3_next", "recurrent_gemma", "bert", "t5"}) {
    Json j = *llama;
    j["model_type"] = type;
    auto m = model_from_json(j, "x.json");
    ASSERT_FALSE(m.ok()) << type;
    EXPECT_FALSE(hf_refusal_reason(type).empty()) << type;
    EXPECT_TRUE(contains(m.status().message(), std::string(hf_refusal_reason(type))))
        << m.status().message();
  }
  // A decoder type carrying a state-space key is refused naming the key.
  Json j = *llama;
  j["hybrid_override_pattern"] = "M-M-M*";
  auto m = model_from_json(j, "x.json");
  ASSERT_FALSE(m.ok());
  EXPECT_TRUE(contains(m.status().message(), "'hybrid_override_pattern'")) << m.status().message();
  // The outer type of a multimodal config is checked before its text_config is read.
  Json wrapped = {{"model_type", "jamba"}, {"text_config", *llama}};
  m = model_from_json(wrapped, "w.json");
  ASSERT_FALSE(m.ok());
  EXPECT_TRUE(contains(m.status().message(), "\"jamba\"")) << m.status().message();
}

// An unknown type is refused; on request it is read with the Llama layout and every
// assumption listed.
TEST(HfConfig, UnknownTypeRefusedOrReadWithAssumptions) {
  auto llama = read_hf_json("llama-2-7b-config.json");
  ASSERT_TRUE(llama.ok());
  Json j = *llama;
  j["model_type"] = "my_new_decoder";
  auto m = model_from_json(j, "new.json");
  ASSERT_FALSE(m.ok());
  for (const char* part : {"new.json", "'model_type'", "\"my_new_decoder\"",
                           "--allow-unknown-model-type"})
    EXPECT_TRUE(contains(m.status().message(), part)) << m.status().message();
  j.erase("model_type");
  m = model_from_json(j, "new.json");
  ASSERT_FALSE(m.ok());
  EXPECT_TRUE(contains(m.status().message(), "'model_type': missing")) << m.status().message();

  std::vector<std::string> notes;
  HfReadOptions options;
  options.allow_unknown_model_type = true;
  options.assumptions = &notes;
  j["model_type"] = "my_new_decoder";
  m = model_from_json_with(j, "new.json", options);
  ASSERT_TRUE(m.ok()) << m.status().message();
  auto same = load_hf("llama-2-7b-config.json");
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(count_parameters(*m).total(), count_parameters(*same).total());
  std::string all;
  for (const std::string& n : notes) all += n + "\n";
  for (const char* part : {"not on the allow-list", "RMSNorm", "rotary", "gated", "biases"})
    EXPECT_TRUE(contains(all, part)) << all;
  // Without a rope key it is taken to have a learned table, and says so.
  notes.clear();
  j.erase("rope_theta");
  j.erase("rope_scaling");
  m = model_from_json_with(j, "new.json", options);
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->position, PositionKind::kLearned);
  all.clear();
  for (const std::string& n : notes) all += n + "\n";
  EXPECT_TRUE(contains(all, "learned table")) << all;
}

TEST(HfConfig, SupportedTypesListed) {
  const std::vector<std::string> types = hf_supported_model_types();
  for (const char* t : {"llama", "gemma2", "qwen3", "phi3", "olmo2", "starcoder2", "cohere"})
    EXPECT_NE(std::find(types.begin(), types.end(), t), types.end()) << t;
  for (const std::string& t : types) EXPECT_TRUE(hf_refusal_reason(t).empty()) << t;
}

}  // namespace
}  // namespace trainplan
