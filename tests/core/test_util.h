// Shared helpers for tests: a GPT-shaped model of a given size, a repo model file by name, or a
// Hugging Face config fixture of tests/data/hf (see its SOURCES.md).
#pragma once

#include <fstream>
#include <sstream>
#include <string>
#include <string_view>

#include <gtest/gtest.h>

#include "core/cost/cost_model.h"
#include "core/json_util.h"
#include "core/model_spec.h"

namespace trainplan::testing {

// A GPT-shaped model of the given size (LayerNorm, GELU, learned positions, biases): the
// planner's, simulator's and executor's tests build their small models from it.
inline ModelSpec gpt_model(std::int64_t layers, std::int64_t hidden, std::int64_t heads,
                           std::int64_t seq = 2048, std::int64_t vocab = 51200) {
  ModelSpec m;
  m.name = "test gpt";
  m.num_layers = layers;
  m.hidden_size = hidden;
  m.num_attention_heads = heads;
  m.num_kv_heads = heads;
  m.head_dim = hidden / heads;
  m.ffn_hidden_size = 4 * hidden;
  m.vocab_size = vocab;
  m.seq_len = seq;
  m.max_position_embeddings = seq;
  return m;
}

// A GEMM task of m x n output and reduction k, with its 2mnk FLOPs (the cost model's tasks
// carry more; the compute model needs these).
inline Task gemm_task(std::string_view name, std::int64_t m, std::int64_t n, std::int64_t k) {
  Task t;
  t.kind = TaskKind::kGemm;
  t.name = name;
  t.m = m;
  t.n = n;
  t.k = k;
  t.flops = t.executed_flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) *
                               static_cast<double>(k);
  return t;
}

inline ModelSpec load_repo_model(const std::string& name) {
  const std::string path = std::string(TRAINPLAN_SOURCE_DIR) + "/models/" + name;
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  auto json = parse_json_text(ss.str(), path);
  EXPECT_TRUE(json.ok()) << path;
  auto model = model_from_json(*json, path);
  EXPECT_TRUE(model.ok()) << model.status().message();
  return *model;
}

// A Hugging Face config fixture as JSON, and as a model.
inline Result<Json> read_hf_json(const std::string& name) {
  const std::string path = std::string(TRAINPLAN_SOURCE_DIR) + "/tests/data/hf/" + name;
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_json_text(ss.str(), path);
}
inline Result<ModelSpec> load_hf(const std::string& name) {
  auto j = read_hf_json(name);
  if (!j.ok()) return j.status();
  return model_from_json(*j, name);
}

}  // namespace trainplan::testing
