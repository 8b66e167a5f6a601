// Shared helpers for tests: load a repo model file by name.
#pragma once

#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "models/model_spec.h"

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

}  // namespace trainplan::testing
