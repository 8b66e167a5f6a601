// Strict JSON parsing (core/json_util.h): a key repeated within one object is an error naming
// the source, the key, its byte offset and its path, for every loader that reads text; repeats
// in different objects, inside string values or under escaped spellings are told apart.
#include <string>

#include <gtest/gtest.h>

#include "core/json_util.h"
#include "core/model_spec.h"

namespace trainplan {
namespace {

std::string error_of(std::string_view text) {
  auto j = parse_json_text(text, "f.json");
  return j.ok() ? std::string("(accepted)") : j.status().message();
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(JsonUtil, RepeatedTopLevelKeyNamesKeyOffsetAndPath) {
  const std::string text = R"({"num_layers": 2, "hidden_size": 64, "num_layers": 200})";
  const std::string msg = error_of(text);
  EXPECT_TRUE(contains(msg, "f.json")) << msg;
  EXPECT_TRUE(contains(msg, "duplicate key \"num_layers\"")) << msg;
  EXPECT_TRUE(contains(msg, "at byte " + std::to_string(text.rfind("\"num_layers\"")))) << msg;
  EXPECT_TRUE(contains(msg, "(path /num_layers)")) << msg;
}

TEST(JsonUtil, RepeatedNestedKeyPathGoesThroughObjectsAndArrays) {
  const std::string msg =
      error_of(R"({"a": {"b": [1, {"c": 1}, {"d": 1, "d": 2}]}})");
  EXPECT_TRUE(contains(msg, "(path /a/b/2/d)")) << msg;
  // An escaped spelling is the same key once decoded.
  EXPECT_TRUE(contains(error_of(R"({"ab": 1, "\u0061b": 2})"), "duplicate key \"ab\""));
}

TEST(JsonUtil, SameKeyInDifferentObjectsOrInStringsIsFine) {
  EXPECT_EQ(error_of(R"({"a": {"x": 1}, "b": {"x": 2}, "c": [{"x": 1}, {"x": 2}]})"),
            "(accepted)");
  // A string value that looks like a key, with escaped quotes.
  EXPECT_EQ(error_of(R"({"a": "\"a\": 1", "b": ["a", "a"], "c": "a"})"), "(accepted)");
  // Sibling objects after a closed one start with fresh key sets.
  EXPECT_EQ(error_of(R"([{"k": 1}, {"k": 2}])"), "(accepted)");
}

// Model, HF config, cluster and plan texts: every strict loader reads through parse_json_text.
TEST(JsonUtil, RepeatedKeysInEachInputKind) {
  for (const char* text :
       {R"({"name": "m", "num_layers": 2, "num_layers": 3, "hidden_size": 64,
            "num_attention_heads": 4, "ffn_hidden_size": 256, "vocab_size": 100,
            "seq_len": 64})",
        R"({"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64,
            "hidden_size": 128})",
        R"({"gpu": "H100-80GB", "num_gpus": 8, "num_gpus": 16})",
        R"({"tp": 1, "pp": 1, "dp": 1, "tp": 2})"}) {
    const std::string msg = error_of(text);
    EXPECT_TRUE(contains(msg, "duplicate key")) << text << " -> " << msg;
  }
  // And a well-formed model still loads.
  auto j = parse_json_text(R"({"name": "m", "num_layers": 2, "hidden_size": 64,
      "num_attention_heads": 4, "ffn_hidden_size": 256, "vocab_size": 100, "seq_len": 64})",
                           "m.json");
  ASSERT_TRUE(j.ok());
  EXPECT_TRUE(model_from_json(*j, "m.json").ok());
}

TEST(JsonUtil, SyntaxErrorStillNamesByte) {
  const std::string msg = error_of(R"({"a": 1,})");
  EXPECT_TRUE(contains(msg, "f.json: malformed JSON at byte")) << msg;
}

}  // namespace
}  // namespace trainplan
