// Mixture-of-experts stacks that are not uniform (dense layers, shared experts) and multi-head
// latent attention: the Hugging Face configs of DeepSeek-V2/V3, Qwen-MoE, OLMoE, Llama 4 and
// Mixtral read as their modeling files build them (tests/data/hf/SOURCES.md), their parameter
// counts against the published totals, the loader's errors, and the cost model's consistency
// (GEMM FLOPs are twice tokens times weights, stage sums match the blocks).
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/cost/collectives.h"
#include "core/cost/cost_model.h"
#include "core/json_util.h"
#include "core/model_spec.h"
#include "tests/core/plan_file_test_util.h"
#include "tests/core/test_util.h"
#include "core/plan.h"

namespace trainplan {
namespace {

double d(std::int64_t v) { return static_cast<double>(v); }

Result<ModelSpec> load_json(const Json& j) { return model_from_json(j, "m.json"); }

using testing::load_hf;
using testing::read_hf_json;

// A small DeepSeek-like model: MLA with a query latent, 8 experts top-2 with a shared expert,
// layer 0 dense with a wider MLP.
ModelSpec small_deepseek() {
  ModelSpec m;
  m.name = "small deepseek";
  m.num_layers = 5;
  m.hidden_size = 256;
  m.num_attention_heads = 4;
  m.num_kv_heads = 4;
  m.head_dim = 48;
  m.qk_rope_head_dim = 16;
  m.v_head_dim = 32;
  m.q_lora_rank = 64;
  m.kv_lora_rank = 32;
  m.ffn_hidden_size = 64;
  m.num_experts = 8;
  m.experts_per_token = 2;
  m.shared_expert_ffn_size = 64;
  m.dense_layers = {0};
  m.dense_ffn_hidden_size = 512;
  m.vocab_size = 1000;
  m.seq_len = 128;
  m.max_position_embeddings = 128;
  m.activation = Activation::kSwiglu;
  m.norm = NormKind::kRmsNorm;
  m.position = PositionKind::kRope;
  m.bias = false;
  m.dropout = false;
  m.tie_word_embeddings = false;
  EXPECT_TRUE(validate_model(m, "small").ok()) << validate_model(m, "small").message();
  return m;
}

Plan plan_of(std::int64_t tp, std::int64_t pp, std::int64_t dp) {
  Plan p;
  p.tp = tp;
  p.pp = pp;
  p.dp = dp;
  p.micro_batch_size = 1;
  p.global_batch_size = 4 * dp;
  return p;
}

// --- Hugging Face configs ------------------------------------------------------------------

TEST(HfMoe, TotalsMatchThePublishedCounts) {
  // Published totals (model cards and papers, tests/data/hf/SOURCES.md), in billions. The
  // published "active" figures differ in whether they count the embedding, so those are checked
  // loosely; totals to 1%.
  struct Case {
    const char* file;
    double total_b, active_b;
  };
  for (const Case& c : {Case{"deepseek-v3-config.json", 671, 37},
                        Case{"deepseek-v2-lite-config.json", 15.7, 2.4},
                        Case{"qwen2-moe-57b-a14b-config.json", 57, 14},
                        Case{"qwen3-30b-a3b-config.json", 30.5, 3.3},
                        Case{"olmoe-1b-7b-config.json", 6.9, 1.3},
                        Case{"mixtral-8x22b-config.json", 141, 39}}) {
    auto m = load_hf(c.file);
    ASSERT_TRUE(m.ok()) << m.status().message();
    const ParameterCounts n = count_parameters(*m);
    EXPECT_LT(std::fabs(n.total() / 1e9 - c.total_b) / c.total_b, 0.01)
        << c.file << ": " << n.total() / 1e9 << "B";
    EXPECT_LT(std::fabs(n.active() / 1e9 - c.active_b) / c.active_b, 0.12)
        << c.file << ": " << n.active() / 1e9 << "B active";
  }
}

TEST(HfMoe, DeepSeekV3LayoutAndLatentAttention) {
  auto m = load_hf("deepseek-v3-config.json");
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->num_experts, 256);
  EXPECT_EQ(m->experts_per_token, 8);
  EXPECT_EQ(m->ffn_hidden_size, 2048);         // moe_intermediate_size
  EXPECT_EQ(m->dense_ffn_hidden_size, 18432);  // intermediate_size, first_k_dense_replace = 3
  EXPECT_EQ(m->shared_expert_ffn_size, 2048);  // one shared expert
  EXPECT_EQ(m->dense_layers, (std::vector<std::int64_t>{0, 1, 2}));
  EXPECT_TRUE(m->is_mla());
  EXPECT_EQ(m->head_dim, 192);  // 128 + 64
  EXPECT_EQ(m->v_dim(), 128);
  EXPECT_EQ(m->q_lora_rank, 1536);
  EXPECT_EQ(m->kv_lora_rank, 512);
  EXPECT_EQ(m->qk_rope_head_dim, 64);
  EXPECT_EQ(m->activation, Activation::kSwiglu);
  EXPECT_EQ(m->router_groups, 8);      // n_group: node-limited routing
  EXPECT_EQ(m->router_group_topk, 4);  // topk_group
  // V2-Lite projects queries directly (q_lora_rank null).
  auto lite = load_hf("deepseek-v2-lite-config.json");
  ASSERT_TRUE(lite.ok()) << lite.status().message();
  EXPECT_EQ(lite->q_lora_rank, 0);
  EXPECT_EQ(lite->dense_layers, (std::vector<std::int64_t>{0}));
  EXPECT_EQ(lite->shared_expert_ffn_size, 2 * 1408);
}

TEST(HfMoe, QwenAndLlama4Layouts) {
  auto qwen = load_hf("qwen2-moe-57b-a14b-config.json");
  ASSERT_TRUE(qwen.ok()) << qwen.status().message();
  EXPECT_EQ(qwen->num_experts, 64);
  EXPECT_EQ(qwen->ffn_hidden_size, 2560);
  EXPECT_EQ(qwen->shared_expert_ffn_size, 20480);
  EXPECT_TRUE(qwen->dense_layers.empty());
  auto scout = load_hf("llama4-scout-config.json");
  ASSERT_TRUE(scout.ok()) << scout.status().message();
  EXPECT_NE(scout->name.find("text_config"), std::string::npos);
  EXPECT_EQ(scout->num_experts, 16);
  EXPECT_EQ(scout->experts_per_token, 1);
  EXPECT_EQ(scout->shared_expert_ffn_size, 8192);
  EXPECT_TRUE(scout->dense_layers.empty());

  // decoder_sparse_step 2 and mlp_only_layers: layers 1, 3 are MoE unless listed (Qwen2-MoE's
  // rule); interleave_moe_layer_step 2: layers 1, 3, ... are MoE, dense layers take
  // intermediate_size_mlp (Llama 4's).
  auto j = read_hf_json("qwen2-moe-57b-a14b-config.json");
  ASSERT_TRUE(j.ok());
  (*j)["num_hidden_layers"] = 6;
  (*j)["decoder_sparse_step"] = 2;
  (*j)["mlp_only_layers"] = Json::array({3});
  auto sparse = load_json(*j);
  ASSERT_TRUE(sparse.ok()) << sparse.status().message();
  EXPECT_EQ(sparse->dense_layers, (std::vector<std::int64_t>{0, 2, 3, 4}));
  EXPECT_EQ(sparse->dense_ffn_hidden_size, 18944);
  auto l4 = read_hf_json("llama4-scout-config.json");
  ASSERT_TRUE(l4.ok());
  Json text = (*l4)["text_config"];
  text["num_hidden_layers"] = 4;
  text["interleave_moe_layer_step"] = 2;
  text.erase("moe_layers");
  auto maverick_like = load_json(text);
  ASSERT_TRUE(maverick_like.ok()) << maverick_like.status().message();
  EXPECT_EQ(maverick_like->dense_layers, (std::vector<std::int64_t>{0, 2}));
  EXPECT_EQ(maverick_like->dense_ffn_hidden_size, 16384);
}

TEST(HfLoader, RefusesEncodersAndLayoutsItDoesNotRead) {
  for (const char* file : {"bert-base-uncased-config.json", "t5-small-config.json"}) {
    auto m = load_hf(file);
    ASSERT_FALSE(m.ok()) << file;
    EXPECT_NE(m.status().message().find(file), std::string::npos) << m.status().message();
    EXPECT_NE(m.status().message().find("decoder-only"), std::string::npos);
  }
  auto dbrx = load_json(Json{{"model_type", "dbrx"}, {"d_model", 6144}, {"n_layers", 40}});
  ASSERT_FALSE(dbrx.ok());
  EXPECT_NE(dbrx.status().message().find("\"dbrx\""), std::string::npos)
      << dbrx.status().message();
  EXPECT_NE(dbrx.status().message().find("is not a model type"), std::string::npos);
}

TEST(HfLoader, MoeAndMlaKeyErrorsNameTheKey) {
  struct Case {
    const char* file;
    const char* key;
    Json value;
  };
  for (const Case& c : {Case{"deepseek-v3-config.json", "first_k_dense_replace", -1},
                        Case{"deepseek-v3-config.json", "n_routed_experts", "256"},
                        Case{"deepseek-v3-config.json", "kv_lora_rank", 0},
                        Case{"deepseek-v3-config.json", "qk_nope_head_dim", nullptr},
                        Case{"qwen2-moe-57b-a14b-config.json", "mlp_only_layers", 3},
                        Case{"qwen2-moe-57b-a14b-config.json", "mlp_only_layers",
                             Json::array({1, "x"})},
                        Case{"qwen2-moe-57b-a14b-config.json", "decoder_sparse_step", 0}}) {
    auto j = read_hf_json(c.file);
    ASSERT_TRUE(j.ok());
    (*j)[c.key] = c.value;
    auto m = load_json(*j);
    ASSERT_FALSE(m.ok()) << c.key << " = " << c.value.dump();
    EXPECT_NE(m.status().message().find(std::string("'") + c.key + "'"), std::string::npos)
        << m.status().message();
  }
}

// --- our format: the new fields' checks and round trip -------------------------------------

TEST(ModelSpecMoe, RoundTripsAndChecksTheNewFields) {
  const ModelSpec m = small_deepseek();
  auto back = load_json(model_to_json(m));
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(model_to_json(*back), model_to_json(m));

  struct Case {
    const char* field;
    Json value;
    const char* expect;
  };
  for (const Case& c : {
           Case{"dense_layers", Json::array({0, 0}), "ascending"},
           Case{"dense_layers", Json::array({2, 1}), "ascending"},
           Case{"dense_layers", Json::array({5}), "[0, num_layers=5)"},
           Case{"dense_layers", Json::array({0, 1, 2, 3, 4}), "every layer is dense"},
           Case{"dense_layers", Json::array({"0"}), "entry 0"},
           Case{"shared_expert_ffn_size", -1, "-1"},
           Case{"q_lora_rank", 1.5, "1.5"},
           Case{"qk_rope_head_dim", 48, "head_dim=48"},
           Case{"num_kv_heads", 2, "must equal num_attention_heads=4"},
           Case{"router_groups", 3, "must divide num_experts=8"},
           Case{"router_group_topk", 5, "[1, router_groups=4]"},
           Case{"router_group_topk", -1, "-1"},
       }) {
    Json j = model_to_json(m);
    j["router_groups"] = 4;
    j["router_group_topk"] = 2;
    j[c.field] = c.value;
    auto r = load_json(j);
    ASSERT_FALSE(r.ok()) << c.field << " = " << c.value.dump();
    EXPECT_NE(r.status().message().find(std::string("'") + c.field + "'"), std::string::npos)
        << r.status().message();
    EXPECT_NE(r.status().message().find(c.expect), std::string::npos) << r.status().message();
  }
  // Eight groups of one expert: top-2 from one chosen group leaves too few, from two it fits.
  Json grouped = model_to_json(m);
  grouped["router_groups"] = 8;
  grouped["router_group_topk"] = 1;
  auto g = load_json(grouped);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("fewer than experts_per_token=2"), std::string::npos)
      << g.status().message();
  grouped["router_group_topk"] = 2;
  g = load_json(grouped);
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(model_to_json(*g)["router_groups"], 8);
  // MoE-only and MLA-only fields on a dense model with standard attention.
  Json dense = model_to_json(m);
  dense["num_experts"] = 1;
  dense["experts_per_token"] = 1;
  auto r = load_json(dense);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("mixture-of-experts"), std::string::npos);
  Json no_mla = model_to_json(m);
  no_mla.erase("kv_lora_rank");
  r = load_json(no_mla);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("kv_lora_rank > 0"), std::string::npos);
}

// An optional MoE-only number of the model: absent by default and not written then; `good`
// loads and is written back; each of `bads` is refused naming the field; on a dense model
// `dense_value` is refused with "<field>: value <dense_text> needs a mixture-of-experts model".
void expect_optional_moe_number(const char* field, double good, const std::vector<Json>& bads,
                                double dense_value, const std::string& dense_text,
                                const std::optional<double> ModelSpec::*member) {
  const ModelSpec m = small_deepseek();
  EXPECT_FALSE((m.*member).has_value()) << field;
  EXPECT_FALSE(model_to_json(m).contains(field));
  Json j = model_to_json(m);
  j[field] = good;
  auto r = load_json(j);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ((*r).*member, good);
  EXPECT_EQ(model_to_json(*r)[field], good);
  for (const Json& bad : bads) {
    j[field] = bad;
    r = load_json(j);
    ASSERT_FALSE(r.ok()) << field << " " << bad.dump();
    EXPECT_NE(r.status().message().find(std::string("'") + field + "'"), std::string::npos)
        << r.status().message();
  }
  j[field] = dense_value;
  j["num_experts"] = 1;
  j["experts_per_token"] = 1;
  for (const char* moe_only : {"router_groups", "router_group_topk", "shared_expert_ffn_size",
                               "dense_layers", "dense_ffn_hidden_size"})
    j.erase(moe_only);
  r = load_json(j);
  ASSERT_FALSE(r.ok()) << field;
  EXPECT_NE(r.status().message().find(std::string("field '") + field + "': value " + dense_text +
                                      " needs a mixture-of-experts model"),
            std::string::npos)
      << r.status().message();
}

// The expert capacity factor: optional (dropless without it), written only when given, > 0,
// MoE only; a bad value is refused naming the field and the value.
TEST(ModelSpecMoe, CapacityFactor) {
  expect_optional_moe_number("moe_capacity_factor", 1.25, {Json(-1.0), Json(0.0), Json("1")},
                             1.0, "1.000000", &ModelSpec::moe_capacity_factor);
  Json j = model_to_json(small_deepseek());
  j["moe_capacity_factor"] = 0.0;
  auto r = load_json(j);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("field 'moe_capacity_factor': value 0.000000 must be > 0"),
            std::string::npos)
      << r.status().message();
}

// The load-balancing coefficient: optional, written only when given, in [0, 1], MoE only; HF
// configs give it as router_aux_loss_coef (Mixtral 0.02, Qwen3-MoE 0.001).
TEST(ModelSpecMoe, RouterAuxLossCoefficient) {
  expect_optional_moe_number("router_aux_loss_coef", 0.02, {Json(-0.1), Json(2.0), Json("0.01")},
                             0.01, "0.010000", &ModelSpec::router_aux_loss_coef);
  auto mixtral = load_hf("mixtral-8x22b-config.json");
  ASSERT_TRUE(mixtral.ok()) << mixtral.status().message();
  EXPECT_EQ(mixtral->router_aux_loss_coef, 0.001);
  auto qwen = load_hf("qwen3-30b-a3b-config.json");
  ASSERT_TRUE(qwen.ok()) << qwen.status().message();
  EXPECT_EQ(qwen->router_aux_loss_coef, 0.001);
}

// --- cost model -----------------------------------------------------------------------------

// Every linear layer's forward GEMM does 2 FLOPs per weight per token, so on one rank (tp = 1)
// a layer's GEMM FLOPs are 2*T*(its weights a token passes through): attention (MLA's latent
// norms aside), router, the top-k experts and the shared experts; or the dense MLP.
TEST(CostModelMoe, GemmFlopsAreTwiceTokensTimesTheWeightsATokenUses) {
  const ModelSpec m = small_deepseek();
  const Plan p = plan_of(1, 1, 1);
  const double T = d(m.seq_len);
  for (LayerKind kind : {LayerKind::kDense, LayerKind::kMoe}) {
    const ModelSpec lm = layer_model(m, kind);
    const ParameterCounts c = count_parameters(lm);
    const double latent_norms = d(m.q_lora_rank + m.kv_lora_rank);  // RMSNorm weights
    const double weights =
        (c.attention - d(lm.num_layers) * latent_norms + c.active_mlp) / d(lm.num_layers);
    double gemm = 0;
    for (const Task& t : layer_forward_tasks(lm, p))
      if (t.kind == TaskKind::kGemm) gemm += t.flops;
    EXPECT_NEAR(gemm, 2.0 * T * weights, 1e-9 * gemm) << (kind == LayerKind::kMoe ? "moe" : "dense");
  }
}

// The token permutations around the all-to-alls (Megatron-Core's alltoall dispatcher): a copy
// per chosen expert before the dispatch and the weighted sum back after the combine, each
// reading and writing T*h*(1 + k) elements; the regrouping by local expert only when a rank
// holds several experts; the backward mirrors them. Node-limited routing marks the all-to-alls.
TEST(CostModelMoe, TokenPermutationsAroundTheAllToAlls) {
  ModelSpec m = layer_model(small_deepseek(), LayerKind::kMoe);
  const double T = d(m.seq_len), h = d(m.hidden_size), k = d(m.experts_per_token), e = 2.0;
  auto bytes_of = [](const std::vector<Task>& tasks, std::string_view name) {
    for (const Task& t : tasks)
      if (t.name == name) return t.bytes;
    return -1.0;
  };
  for (std::int64_t ep : {1, 8}) {
    Plan p = plan_of(1, 1, 8);
    p.ep = ep;
    const std::vector<Task> fwd = layer_forward_tasks(m, p), bwd = layer_backward_tasks(m, p);
    for (const char* name : {"moe_permute", "moe_unpermute"})
      EXPECT_DOUBLE_EQ(bytes_of(fwd, name), T * h * e * (1.0 + k)) << name;
    for (const char* name : {"moe_permute_bwd", "moe_unpermute_bwd"})
      EXPECT_DOUBLE_EQ(bytes_of(bwd, name), T * h * e * (1.0 + k)) << name;
    const double regroup = ep == 1 ? 2.0 * T * k * h * e : -1.0;  // 8 local experts, or one
    EXPECT_DOUBLE_EQ(bytes_of(fwd, "moe_regroup"), regroup);
    EXPECT_DOUBLE_EQ(bytes_of(bwd, "moe_unregroup_bwd"), regroup);
  }
  Plan p = plan_of(1, 1, 8);
  p.ep = 8;
  m.router_groups = 4;
  m.router_group_topk = 2;
  for (const Task& t : layer_forward_tasks(m, p))
    if (t.kind == TaskKind::kComm && t.group == CommGroup::kEp) {
      EXPECT_EQ(t.spread.groups, 4) << t.name;
      EXPECT_EQ(t.spread.group_topk, 2) << t.name;
      EXPECT_EQ(t.spread.copies, 2) << t.name;
    }
}

// GPT-OSS's clamped activation and expert biases as Megatron-Core's TEGroupedMLP runs them
// (tasks.cc, glu_clamp_task / expert_bias_task): per routed row, the eager clamp moves 8 f e bytes
// forward in 3 launches and 11 f e + 8 f backward in 7; the fc2 bias loop 6 h e forward in
// 2 E + 1 launches and 8 h e backward in 4 E + 1. Nothing without the clamp or the bias.
TEST(CostModelMoe, ClampedActivationAndExpertBiasesAreEagerPasses) {
  ModelSpec m = layer_model(small_deepseek(), LayerKind::kMoe);
  const double T = d(m.seq_len), h = d(m.hidden_size), f = d(m.ffn_hidden_size), e = 2.0;
  const double rows = T * d(m.experts_per_token);
  auto find = [](const std::vector<Task>& tasks, std::string_view name) -> const Task* {
    for (const Task& t : tasks)
      if (t.name == name) return &t;
    return nullptr;
  };
  Plan p = plan_of(1, 1, 8);
  p.ep = 2;  // 4 local experts
  for (const char* name : {"moe_act_clamp", "moe_expert_bias"})
    EXPECT_EQ(find(layer_forward_tasks(m, p), name), nullptr) << name;
  m.glu_clamp = 7.0;
  m.bias = true;
  const std::vector<Task> fwd = layer_forward_tasks(m, p), bwd = layer_backward_tasks(m, p);
  const Task* clamp = find(fwd, "moe_act_clamp");
  ASSERT_NE(clamp, nullptr);
  EXPECT_DOUBLE_EQ(clamp->bytes, rows * 8.0 * f * e);
  EXPECT_EQ(clamp->launches, 3);
  const Task* clamp_bwd = find(bwd, "moe_act_clamp_bwd");
  ASSERT_NE(clamp_bwd, nullptr);
  EXPECT_DOUBLE_EQ(clamp_bwd->bytes, rows * (11.0 * f * e + 8.0 * f));
  EXPECT_EQ(clamp_bwd->launches, 7);
  const Task* bias = find(fwd, "moe_expert_bias");
  ASSERT_NE(bias, nullptr);
  EXPECT_DOUBLE_EQ(bias->bytes, rows * 6.0 * h * e);
  EXPECT_EQ(bias->launches, 2 * 4 + 1);
  const Task* bias_bwd = find(bwd, "moe_expert_bias_bwd");
  ASSERT_NE(bias_bwd, nullptr);
  EXPECT_DOUBLE_EQ(bias_bwd->bytes, rows * 8.0 * h * e);
  EXPECT_EQ(bias_bwd->launches, 4 * 4 + 1);
  // The clamp sits between fc1 and the activation, the bias after fc2.
  auto index = [&](std::string_view name) {
    for (std::size_t i = 0; i < fwd.size(); ++i)
      if (fwd[i].name == name) return static_cast<std::int64_t>(i);
    return std::int64_t{-1};
  };
  EXPECT_EQ(index("moe_act_clamp"), index("expert_fc1") + 1);
  EXPECT_EQ(index("moe_expert_bias"), index("expert_fc2") + 1);
}

// glu_clamp round-trips, is written only when set, and is refused without a gated activation or
// below zero, naming the field and the value.
TEST(ModelSpecMoe, GluClamp) {
  ModelSpec m = small_deepseek();
  EXPECT_FALSE(model_to_json(m).contains("glu_clamp"));
  m.glu_clamp = 7.0;
  auto back = load_json(model_to_json(m));
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_DOUBLE_EQ(back->glu_clamp, 7.0);
  Json j = model_to_json(m);
  j["activation"] = "gelu";
  auto gelu = load_json(j);
  ASSERT_FALSE(gelu.ok());
  EXPECT_NE(gelu.status().message().find("'glu_clamp': value 7 needs a gated activation"),
            std::string::npos)
      << gelu.status().message();
  j = model_to_json(m);
  j["glu_clamp"] = -1;
  auto negative = load_json(j);
  ASSERT_FALSE(negative.ok());
  EXPECT_NE(negative.status().message().find("glu_clamp"), std::string::npos);
  EXPECT_NE(negative.status().message().find("-1"), std::string::npos);
}

TEST(CostModelMoe, StageSumsMatchTheBlocksWithDenseLayersAndAnUnevenSplit) {
  const ModelSpec m = small_deepseek();
  const ParameterCounts c = count_parameters(m);
  for (std::int64_t tp : {1, 2}) {
    for (std::int64_t pp : {1, 2, 3}) {
      Plan p = plan_of(tp, pp, 2);
      p.ep = 2;
      if (m.num_layers % pp != 0) p.layers_per_stage = balanced_chunk_layers(m.num_layers, pp);
      ASSERT_TRUE(check_plan_fits_model(p, m).ok()) << check_plan_fits_model(p, m).message();
      double dense = 0, expert = 0, dense_layers = 0;
      for (std::int64_t s = 0; s < pp; ++s) {
        double stage_dense = 0, stage_expert = 0;
        for (const ParamBlock& b : param_blocks_on_stage(m, p, s)) {
          stage_dense += d(b.dense_params);
          stage_expert += d(b.expert_params);
        }
        const StageParameters sp = parameters_on_stage(m, p, s);
        EXPECT_EQ(sp.dense, stage_dense) << "tp=" << tp << " pp=" << pp << " stage " << s;
        EXPECT_EQ(sp.expert, stage_expert);
        dense += stage_dense;
        expert += stage_expert;
        dense_layers += d(layer_kinds_on_stage(p, m, s).dense);
      }
      EXPECT_EQ(dense_layers, 1.0);  // layer 0, on stage 0
      EXPECT_EQ(layer_kinds_on_stage(p, m, 0).dense, 1);
      if (tp == 1 && pp == 1) {
        // Unsharded, the stage holds the model (vocabulary padded to 128), experts split by ep.
        const double pad = d(padded_vocab(m, 1) - m.vocab_size) * d(m.hidden_size) * 2.0;
        EXPECT_DOUBLE_EQ(dense + expert * d(p.ep), c.total() + pad);
      }
    }
  }
}

TEST(CostModelMoe, MlaDownProjectionsAreDuplicatedOverTpAndSequenceParallelSplitsTheirTokens) {
  const ModelSpec m = layer_model(small_deepseek(), LayerKind::kMoe);
  auto flops_of = [](const std::vector<Task>& tasks, std::string_view name) {
    for (const Task& t : tasks)
      if (t.name == name) return t.flops;
    return -1.0;
  };
  const auto one = layer_forward_tasks(m, plan_of(1, 1, 1));
  Plan tp2 = plan_of(2, 1, 1);
  const auto two = layer_forward_tasks(m, tp2);
  tp2.sequence_parallel = true;
  const auto two_sp = layer_forward_tasks(m, tp2);
  for (std::string_view down : {"q_down", "kv_down"}) {
    EXPECT_EQ(flops_of(two, down), flops_of(one, down)) << down;       // duplicated
    EXPECT_EQ(flops_of(two_sp, down), flops_of(one, down) / 2) << down;  // own tokens only
  }
  for (std::string_view up : {"q_up", "kv_up", "out_proj"})
    EXPECT_EQ(flops_of(two, up), flops_of(one, up) / 2) << up;
  // With SP the attention's TP all-gather carries the latents and the rotary key, not h.
  int gathers = 0;
  for (const Task& t : two_sp) {
    if (t.name != "tp_all_gather_attn") continue;
    ++gathers;
    EXPECT_EQ(t.message_bytes,
              m.seq_len * (m.q_lora_rank + m.kv_lora_rank + m.qk_rope_head_dim) * 2);
  }
  EXPECT_EQ(gathers, 1);
}

TEST(CostModelMoe, ActivationsAndFlopsFollowEachLayersKind) {
  const ModelSpec m = small_deepseek();
  Plan p = plan_of(1, 1, 1);
  // Step FLOPs are the sum over layers of each kind's.
  Plan one = p;
  one.global_batch_size = 1;
  double layers = 0;
  for (LayerKind kind : {LayerKind::kDense, LayerKind::kMoe}) {
    double f = 0;
    for (const Task& t : layer_forward_tasks(layer_model(m, kind), one)) f += t.flops;
    layers += f * (kind == LayerKind::kDense ? 1.0 : 4.0);
  }
  double head = 0;
  for (const Task& t : head_forward_tasks(m, one)) head += t.flops;
  EXPECT_NEAR(step_flops(m, one).model, 3.0 * (layers + head), 1e-9 * layers);
  // Activations: one dense and four MoE layers' worth on the one stage.
  const double expected = layer_activation_bytes(layer_model(m, LayerKind::kDense), p) +
                          4.0 * layer_activation_bytes(layer_model(m, LayerKind::kMoe), p);
  const MemoryBreakdown mem = memory_on_stage(m, p, 0);
  const double head_and_embedding =
      4.0 * d(m.seq_len) * d(padded_vocab(m, 1)) + d(m.seq_len) * d(m.hidden_size) * 2.0;
  EXPECT_NEAR(mem.activations_bytes, expected + head_and_embedding, 1e-9 * expected);
}

// --- Plan::ep_overlap ------------------------------------------------------------------------

TEST(PlanEpOverlap, ConstraintsAreMegatronCoresAndNamed) {
  Plan p = plan_of(1, 1, 8);
  p.ep = 4;
  p.ep_overlap = true;
  EXPECT_TRUE(validate_plan(p).ok()) << validate_plan(p).message();
  auto fails_with = [](const Plan& q, const std::string& part) {
    const Status st = validate_plan(q);
    return !st.ok() && st.message().find(part) != std::string::npos &&
           st.message().find("ep_overlap") != std::string::npos;
  };
  Plan no_ep = p;
  no_ep.ep = 1;
  EXPECT_TRUE(fails_with(no_ep, "ep >= 2"));
  Plan gpipe = p;
  gpipe.schedule = Schedule::kGpipe;
  EXPECT_TRUE(fails_with(gpipe, "schedule gpipe"));
  Plan pp2 = plan_of(1, 2, 8);
  pp2.ep = 4;
  pp2.ep_overlap = true;
  EXPECT_TRUE(fails_with(pp2, "needs schedule interleaved"));
  pp2.schedule = Schedule::kInterleaved;
  pp2.virtual_stages = 2;
  pp2.global_batch_size = 16;
  EXPECT_TRUE(validate_plan(pp2).ok()) << validate_plan(pp2).message();
  Plan full = p;
  full.recompute = Recompute::kFull;
  EXPECT_TRUE(fails_with(full, "recompute full"));
  Plan z3 = p;
  z3.zero_stage = 3;
  EXPECT_TRUE(fails_with(z3, "zero_stage 3"));
  // Written only when set, and read back.
  Plan off = p;
  off.ep_overlap = false;
  EXPECT_FALSE(plan_to_json(off).contains("ep_overlap"));
  auto back = plan_from_json(plan_to_json(p), "p.json");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_TRUE(back->ep_overlap);
  EXPECT_NE(describe(p).find("ep-overlap"), std::string::npos);
}

// --- Plan::expert_layout folded, Plan::expert_tp -------------------------------------------

// A uniform MoE model (no MLA, no dense layers) for the folded layout's task lists.
ModelSpec small_qwen_moe() {
  ModelSpec m = small_deepseek();
  m.q_lora_rank = m.kv_lora_rank = m.qk_rope_head_dim = 0;
  m.head_dim = 64;
  m.v_head_dim = 0;
  m.dense_layers = {};
  m.dense_ffn_hidden_size = 0;
  m.shared_expert_ffn_size = 0;
  EXPECT_TRUE(validate_model(m, "small qwen").ok()) << validate_model(m, "small qwen").message();
  return m;
}

Plan folded(std::int64_t tp, std::int64_t dp, std::int64_t ep, std::int64_t expert_tp) {
  Plan p = plan_of(tp, 1, dp);
  p.sequence_parallel = tp > 1;
  p.ep = ep;
  p.expert_layout = ExpertLayout::kFolded;
  p.expert_tp = expert_tp;
  return p;
}

const Task* find(const std::vector<Task>& tasks, std::string_view name) {
  for (const Task& t : tasks)
    if (t.name == name) return &t;
  return nullptr;
}

TEST(PlanExpertLayout, ChecksNameTheFieldAndRoundTrip) {
  auto fails_with = [](const Plan& q, const std::string& part) {
    const Status st = validate_plan(q);
    return !st.ok() && st.message().find(part) != std::string::npos;
  };
  // EP 32 with TP 2 and DP 16 (the Model Zoo's and Megatron-Bridge's Qwen3-235B H100 rows):
  // refused carved, placed folded.
  Plan zoo = folded(2, 16, 32, 1);
  EXPECT_TRUE(validate_plan(zoo).ok()) << validate_plan(zoo).message();
  EXPECT_EQ(zoo.expert_dp(), 1);
  Plan carved = zoo;
  carved.expert_layout = ExpertLayout::kCarved;
  carved.expert_tp = 0;
  EXPECT_TRUE(fails_with(carved, "ep=32 does not divide dp=16"));
  Plan etp_carved = carved;
  etp_carved.ep = 8;
  etp_carved.expert_tp = 1;
  EXPECT_TRUE(fails_with(etp_carved, "expert_tp=1 needs expert_layout folded"));
  EXPECT_TRUE(fails_with(folded(2, 16, 32, 3), "expert_tp*ep = 3*32 does not divide"));
  Plan no_sp = folded(2, 16, 32, 1);
  no_sp.sequence_parallel = false;
  EXPECT_TRUE(fails_with(no_sp, "expert_layout folded with tp=2 needs sequence_parallel"));
  Plan negative = folded(2, 16, 32, 1);
  negative.expert_tp = -1;
  EXPECT_TRUE(fails_with(negative, "expert_tp=-1"));
  Plan hybrid = folded(2, 16, 8, 1);
  hybrid.zero_stage = 1;
  hybrid.zero_shard_size = 8;
  EXPECT_TRUE(fails_with(hybrid, "zero_shard_size=8"));
  // expert_tp 0 is tp; expert_dp counts the stage's ranks over expert_tp x ep.
  EXPECT_EQ(folded(4, 8, 8, 0).expert_tp_size(), 4);
  EXPECT_EQ(folded(4, 8, 8, 0).expert_dp(), 1);
  EXPECT_EQ(folded(4, 8, 8, 1).expert_dp(), 4);
  EXPECT_EQ(plan_of(4, 1, 8).expert_dp(), 8);  // carved, ep 1: dp/ep x cp
  // Against the model: the experts' width must split over expert_tp; folded needs experts.
  const ModelSpec m = small_qwen_moe();  // ffn_hidden_size 64
  EXPECT_TRUE(check_plan_fits_model(folded(2, 4, 8, 2), m).ok());
  Plan wide = folded(1, 128, 1, 128);
  wide.global_batch_size = 512;
  ASSERT_TRUE(validate_plan(wide).ok()) << validate_plan(wide).message();
  const Status split = check_plan_fits_model(wide, m);
  EXPECT_NE(split.message().find("expert_tp=128 does not divide ffn_hidden_size=64"),
            std::string::npos) << split.message();
  ModelSpec dense = m;
  dense.num_experts = 1;
  dense.experts_per_token = 1;
  Plan on_dense = folded(2, 4, 1, 1);
  EXPECT_NE(check_plan_fits_model(on_dense, dense).message().find("needs a mixture-of-experts"),
            std::string::npos);
  // JSON: written only when set, read back, and a bad value names the field.
  EXPECT_FALSE(plan_to_json(plan_of(1, 1, 8)).contains("expert_layout"));
  EXPECT_FALSE(plan_to_json(plan_of(1, 1, 8)).contains("expert_tp"));
  auto back = plan_from_json(plan_to_json(zoo), "p.json");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->expert_layout, ExpertLayout::kFolded);
  EXPECT_EQ(back->expert_tp, 1);
  EXPECT_NE(describe(zoo).find("ep=32 folded etp=1"), std::string::npos) << describe(zoo);
  Json bad = plan_to_json(zoo);
  bad["expert_layout"] = "nested";
  auto refused = plan_from_json(bad, "p.json");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("expert_layout"), std::string::npos);
  EXPECT_NE(refused.status().message().find("nested"), std::string::npos);
  Json zero = plan_to_json(zoo);
  zero["expert_tp"] = 0;
  auto refused_tp = plan_from_json(zero, "p.json");
  ASSERT_FALSE(refused_tp.ok());
  EXPECT_NE(refused_tp.status().message().find("expert_tp"), std::string::npos);
}

// With tp = cp = 1 and expert_tp 1 the folded layout routes, moves and computes as the carved
// one: the same tasks, bytes and FLOPs.
TEST(CostModelFolded, WithoutTpOrCpItIsTheCarvedLayer) {
  const ModelSpec m = small_qwen_moe();
  Plan carved = plan_of(1, 1, 8);
  carved.ep = 4;
  const Plan fold = folded(1, 8, 4, 1);
  for (bool backward : {false, true}) {
    const std::vector<Task> a =
        backward ? layer_backward_tasks(m, carved) : layer_forward_tasks(m, carved);
    const std::vector<Task> b =
        backward ? layer_backward_tasks(m, fold) : layer_forward_tasks(m, fold);
    ASSERT_EQ(a.size(), b.size());
    for (std::size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].name, b[i].name);
      EXPECT_EQ(a[i].bytes, b[i].bytes) << a[i].name;
      EXPECT_EQ(a[i].flops, b[i].flops) << a[i].name;
      EXPECT_EQ(a[i].message_bytes, b[i].message_bytes) << a[i].name;
    }
  }
  EXPECT_EQ(memory_on_stage(m, carved, 0).device_total(), memory_on_stage(m, fold, 0).device_total());
}

// Folded with tp 4 (sequence parallel): each rank routes its T/4 tokens, sends T/4 x k rows over
// ep and gets them back; with expert_tp 1 no TP collective surrounds the experts, and each rank
// holds its experts whole; with expert_tp 4 the expert's ranks gather the rows the all-to-all
// brought (4 x T/4 x k) and scatter the result. The layer's FLOPs are the carved layer's but the
// router's, which carved runs on all T tokens on every TP rank.
// The expert-TP group's gather of the routed rows before the experts and scatter of their
// outputs after: on CommGroup::kExpertTp, `ranks` wide, `bytes` each.
void expect_expert_tp_gather_and_scatter(const std::vector<Task>& fwd, std::int64_t ranks,
                                         std::int64_t bytes) {
  for (const char* name : {"expert_tp_all_gather", "expert_tp_reduce_scatter"}) {
    const Task* c = find(fwd, name);
    ASSERT_NE(c, nullptr) << name;
    EXPECT_EQ(c->group, CommGroup::kExpertTp) << name;
    EXPECT_EQ(c->group_size, ranks) << name;
    EXPECT_EQ(c->message_bytes, bytes) << name;
  }
}

TEST(CostModelFolded, EachRankRoutesItsSequenceParallelShare) {
  const ModelSpec m = small_qwen_moe();
  const double T = d(m.seq_len), h = d(m.hidden_size), k = d(m.experts_per_token), e = 2.0;
  Plan carved = plan_of(4, 1, 8);
  carved.sequence_parallel = true;
  carved.ep = 8;
  auto flops = [](const std::vector<Task>& tasks) {
    double f = 0;
    for (const Task& t : tasks) f += t.flops;
    return f;
  };
  for (std::int64_t etp : {1, 4}) {
    const Plan p = folded(4, 8, 8, etp);
    const std::vector<Task> fwd = layer_forward_tasks(m, p), bwd = layer_backward_tasks(m, p);
    EXPECT_EQ(find(fwd, "tp_all_gather_mlp"), nullptr);
    EXPECT_EQ(find(fwd, "tp_reduce_scatter_mlp"), nullptr);
    EXPECT_EQ(find(bwd, "tp_all_gather_mlp_grad"), nullptr);
    EXPECT_EQ(find(bwd, "tp_reduce_scatter_mlp_grad"), nullptr);
    const Task* router = find(fwd, "router");
    ASSERT_NE(router, nullptr);
    EXPECT_EQ(router->m, m.seq_len / 4);
    for (const char* name : {"ep_dispatch", "ep_combine"}) {
      const Task* a2a = find(fwd, name);
      ASSERT_NE(a2a, nullptr) << name;
      EXPECT_EQ(a2a->message_bytes, std::llround(T / 4 * k * h * e)) << name;
      EXPECT_EQ(a2a->group, CommGroup::kEp);
    }
    for (const char* name : {"ep_combine_bwd", "ep_dispatch_bwd"}) {
      const Task* a2a = find(bwd, name);
      ASSERT_NE(a2a, nullptr) << name;
      EXPECT_EQ(a2a->message_bytes, std::llround(T / 4 * k * h * e)) << name;
    }
    const Task* fc2 = find(fwd, "expert_fc2");
    ASSERT_NE(fc2, nullptr);
    EXPECT_EQ(fc2->k, m.ffn_hidden_size / etp);
    if (etp == 1) {
      EXPECT_EQ(find(fwd, "expert_tp_all_gather"), nullptr);  // a group of one: dropped
    } else {
      expect_expert_tp_gather_and_scatter(fwd, 4, std::llround(T * k * h * e));
      for (const char* name : {"expert_tp_all_gather_grad", "expert_tp_reduce_scatter_grad"})
        EXPECT_NE(find(bwd, name), nullptr) << name;
    }
    // The same FLOPs as carved with SP, whose TP ranks route their own T/4 rows as well
    // (Plan::moe_routes_own_rows; CostModelCarved below).
    const std::vector<Task> carved_fwd = layer_forward_tasks(m, carved);
    EXPECT_DOUBLE_EQ(router->flops, find(carved_fwd, "router")->flops);
    EXPECT_NEAR(flops(fwd), flops(carved_fwd), 1e-9 * flops(fwd)) << etp;
    EXPECT_NEAR(flops(bwd), flops(layer_backward_tasks(m, carved)), 1e-9 * flops(bwd)) << etp;
    // The experts' weights: whole with expert_tp 1, a quarter with 4; summed over the stage's
    // 32 ranks / (expert_tp x 8).
    EXPECT_NEAR(parameters_on_stage(m, p, 0).expert,
                parameters_on_stage(m, carved, 0).expert * 4.0 / d(etp), 1.0);
    EXPECT_EQ(expert_dp_cp(p), 32 / (etp * 8));
  }
}

// Carved with tp > 1 and sequence parallelism, each TP rank routes its own rows and the TP group
// gathers what the ep all-to-all brought, as Megatron-Core's MoEAlltoAllTokenDispatcher runs it
// (core_v0.9.0 token_dispatcher.py l.515-533): the ep bytes are a quarter of the gathered tokens'
// at tp 4. Without SP (Megatron-Core refuses it; the cost model still costs it) every TP rank
// routes the gathered tokens.
TEST(CostModelCarved, WithSequenceParallelEachTpRankRoutesItsOwnRows) {
  const ModelSpec m = small_qwen_moe();
  const double T = d(m.seq_len), h = d(m.hidden_size), k = d(m.experts_per_token), e = 2.0;
  Plan p = plan_of(4, 1, 8);
  p.ep = 8;
  p.sequence_parallel = true;
  ASSERT_TRUE(p.moe_routes_own_rows());
  std::vector<Task> fwd = layer_forward_tasks(m, p), bwd = layer_backward_tasks(m, p);
  EXPECT_EQ(find(fwd, "tp_all_gather_mlp"), nullptr);
  EXPECT_EQ(find(bwd, "tp_reduce_scatter_mlp_grad"), nullptr);
  EXPECT_EQ(find(fwd, "router")->m, m.seq_len / 4);
  for (const char* name : {"ep_dispatch", "ep_combine"})
    EXPECT_EQ(find(fwd, name)->message_bytes, std::llround(T / 4 * k * h * e)) << name;
  expect_expert_tp_gather_and_scatter(fwd, 4, std::llround(T * k * h * e));
  EXPECT_EQ(find(fwd, "expert_fc2")->k, m.ffn_hidden_size / 4);
  // Without SP: the gathered tokens, routed alike on every TP rank, and no expert-TP gather.
  p.sequence_parallel = false;
  ASSERT_FALSE(p.moe_routes_own_rows());
  fwd = layer_forward_tasks(m, p);
  EXPECT_EQ(find(fwd, "router")->m, m.seq_len);
  EXPECT_EQ(find(fwd, "ep_dispatch")->message_bytes, std::llround(T * k * h * e));
  EXPECT_EQ(find(fwd, "expert_tp_all_gather"), nullptr);
  ASSERT_NE(find(fwd, "tp_all_reduce_mlp"), nullptr);
}

// Plan::moe_dispatcher deepep: each token crosses to each destination node once (DeepEP's normal
// kernels; DeepSeek-V3 sec. 3.2.2). The rank hands the collective the same bytes; the expected
// share that leaves the node is that of the experts as one router group; inside one node nothing
// changes. Refused at ep 1, round-trips, and an unknown value names the field.
TEST(MoeDispatcher, DeepEpSendsEachTokenOncePerNode) {
  const ModelSpec m = small_qwen_moe();
  Plan alltoall = folded(1, 8, 8, 1);
  Plan deepep = alltoall;
  deepep.moe_dispatcher = MoeDispatcher::kDeepEp;
  ASSERT_TRUE(validate_plan(deepep).ok()) << validate_plan(deepep).message();
  const std::vector<Task> a = layer_forward_tasks(m, alltoall), b = layer_forward_tasks(m, deepep);
  const std::vector<Task> a_bwd = layer_backward_tasks(m, alltoall);
  const std::vector<Task> b_bwd = layer_backward_tasks(m, deepep);
  for (const char* name : {"ep_dispatch", "ep_combine"}) {
    EXPECT_EQ(find(a, name)->spread, RoutedSpread{}) << name;
    EXPECT_EQ(find(b, name)->spread, (RoutedSpread{m.num_experts, 1, 1, m.experts_per_token}))
        << name;
    EXPECT_EQ(find(b, name)->message_bytes, find(a, name)->message_bytes) << name;
  }
  for (const char* name : {"ep_combine_bwd", "ep_dispatch_bwd"})
    EXPECT_EQ(find(b_bwd, name)->spread, find(b, "ep_dispatch")->spread) << name;
  // Over 2 nodes of 4: a token's k copies reach the other node unless all avoid its experts.
  const RoutedSpread spread = find(b, "ep_dispatch")->spread;
  const std::int64_t E = m.num_experts, k = m.experts_per_token;
  double avoid = 1;
  for (std::int64_t i = 0; i < k; ++i) avoid *= d(E - E / 2 - i) / d(E - i);
  const double expected = 2.0 * (1.0 - avoid) * 0.5 / d(k);
  EXPECT_NEAR(all_to_all_inter_node_share(spread, 2, 4), std::min(0.5, expected), 1e-12);
  EXPECT_LT(all_to_all_inter_node_share(spread, 2, 4), all_to_all_inter_node_share({}, 2, 4));
  const std::int64_t bytes = find(b, "ep_dispatch")->message_bytes;
  EXPECT_LT(group_collective_time_s(Collective::kAllToAll, bytes, 2, 4, 370e9, 3e-6, 46e9, 14e-6,
                                    spread),
            group_collective_time_s(Collective::kAllToAll, bytes, 2, 4, 370e9, 3e-6, 46e9, 14e-6));
  EXPECT_EQ(group_collective_time_s(Collective::kAllToAll, bytes, 1, 8, 370e9, 3e-6, 46e9, 14e-6,
                                    spread),
            group_collective_time_s(Collective::kAllToAll, bytes, 1, 8, 370e9, 3e-6, 46e9, 14e-6));
  // The plan file.
  testing::expect_plan_choice_in_file(deepep, alltoall, &Plan::moe_dispatcher, "moe_dispatcher",
                                      "deepep", "nccl");
  Plan dense = plan_of(1, 1, 8);
  dense.moe_dispatcher = MoeDispatcher::kDeepEp;
  const Status st = validate_plan(dense);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("moe_dispatcher deepep needs ep >= 2"), std::string::npos)
      << st.message();
}

// Shared experts under folding are a tp-split MLP entered and left through sequence
// parallelism's gather and scatter (Megatron-Core's SharedExpertMLP, computed first).
TEST(CostModelFolded, SharedExpertsAreATpMlpOnTheGatheredTokens) {
  ModelSpec m = small_qwen_moe();
  m.shared_expert_ffn_size = 128;
  const Plan p = folded(2, 8, 8, 1);
  const std::vector<Task> fwd = layer_forward_tasks(m, p), bwd = layer_backward_tasks(m, p);
  const Task* gather = find(fwd, "tp_all_gather_shared");
  const Task* scatter = find(fwd, "tp_reduce_scatter_shared");
  ASSERT_NE(gather, nullptr);
  ASSERT_NE(scatter, nullptr);
  EXPECT_EQ(gather->message_bytes, std::llround(d(m.seq_len) * d(m.hidden_size) * 2.0));
  EXPECT_LT(gather - fwd.data(), find(fwd, "router") - fwd.data());  // before the routed experts
  const Task* fc1 = find(fwd, "shared_fc1");
  ASSERT_NE(fc1, nullptr);
  EXPECT_EQ(fc1->m, m.seq_len);
  EXPECT_EQ(fc1->n, 2 * 128 / 2);  // SwiGLU's two halves, over tp 2
  for (const char* name : {"tp_all_gather_shared_grad", "tp_all_gather_shared_input",
                           "tp_reduce_scatter_shared_grad"})
    EXPECT_NE(find(bwd, name), nullptr) << name;
}

}  // namespace
}  // namespace trainplan
