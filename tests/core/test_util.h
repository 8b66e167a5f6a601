// Shared helpers for tests: load a repo model file by name, or a Hugging Face config fixture
// of tests/data/hf (see its SOURCES.md).
#pragma once

#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "core/json_util.h"
#include "core/model_spec.h"

namespace trainplan::testing {

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
