// Shared helpers of the simulator tests: small models, plans and clusters.
#pragma once

#include <string>

#include <gtest/gtest.h>

#include "core/cluster_spec.h"
#include "core/model_spec.h"
#include "core/plan.h"
#include "simulator/simulator.h"
#include "tests/core/test_util.h"

namespace trainplan::testing {

inline ModelSpec moe_model() {
  ModelSpec m = gpt_model(8, 1024, 16, 1024, 32000);
  m.num_experts = 8;
  m.experts_per_token = 2;
  m.activation = Activation::kSwiglu;
  m.norm = NormKind::kRmsNorm;
  m.position = PositionKind::kRope;
  m.bias = false;
  m.dropout = false;
  m.tie_word_embeddings = false;
  return m;
}

// DeepSeek's shape in small: multi-head latent attention with a query latent, two dense first
// layers with a wider MLP, then experts top-2 with a shared expert.
inline ModelSpec deepseek_like_model() {
  ModelSpec m = moe_model();
  m.head_dim = 96;
  m.qk_rope_head_dim = 32;
  m.v_head_dim = 64;
  m.q_lora_rank = 256;
  m.kv_lora_rank = 128;
  m.ffn_hidden_size = 512;
  m.shared_expert_ffn_size = 512;
  m.dense_layers = {0, 1};
  m.dense_ffn_hidden_size = 2816;
  EXPECT_TRUE(validate_model(m, "deepseek-like").ok());
  return m;
}

inline Plan make_plan(std::int64_t tp, std::int64_t pp, std::int64_t dp, std::int64_t mbs,
                      std::int64_t gbs, Schedule schedule = Schedule::k1F1B,
                      std::int64_t v = 1) {
  Plan p;
  p.tp = tp;
  p.pp = pp;
  p.dp = dp;
  p.micro_batch_size = mbs;
  p.global_batch_size = gbs;
  p.schedule = schedule;
  p.virtual_stages = v;
  return p;
}

inline ClusterSpec cluster_for(const Plan& p, const std::string& gpu = "H100-80GB",
                               std::int64_t per_node = 8) {
  auto c = make_cluster(gpu, p.world_size(), per_node);
  EXPECT_TRUE(c.ok()) << c.status().message();
  return *c;
}

inline SimResult simulate_ok(const ModelSpec& m, const ClusterSpec& c, const Plan& p,
                             const SimOptions& o = {}) {
  auto r = simulate_step(m, c, p, o);
  EXPECT_TRUE(r.ok()) << r.status().message();
  if (!r.ok()) return {};
  return *r;
}

}  // namespace trainplan::testing
