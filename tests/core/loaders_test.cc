// Every error path of the JSON loaders (model, Hugging Face config, cluster, plan, hardware
// profile, step report), their round trips, and every file in models/ (issue 2, "Bad input";
// issue 7). Messages are checked by substrings (source, field, value), never by whole text.
// Run: ctest --test-dir build -R models_loaders_test
#include <cmath>
#include <filesystem>
#include <initializer_list>
#include <memory>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

#include "core/cluster_spec.h"
#include "core/cost/compute_model.h"
#include "core/json_util.h"
#include "core/model_spec.h"
#include "core/plan.h"
#include "core/step_report.h"
#include "tests/core/plan_file_test_util.h"
#include "tests/core/test_util.h"
#include "tools/cli.h"

namespace trainplan {
namespace {

// --- helpers --------------------------------------------------------------------------------

// Passes when `r` failed with kInvalidInput (or `code`) and its message contains every part.
template <class T>
::testing::AssertionResult FailsWith(const Result<T>& r, const std::vector<std::string>& parts,
                                     ExitCode code = ExitCode::kInvalidInput) {
  if (r.ok()) return ::testing::AssertionFailure() << "expected an error, the input was accepted";
  const std::string msg = r.status().message();
  if (r.status().code() != code)
    return ::testing::AssertionFailure()
           << "exit code " << static_cast<int>(r.status().code()) << ", expected "
           << static_cast<int>(code) << "; message: " << msg;
  for (const std::string& p : parts)
    if (msg.find(p) == std::string::npos)
      return ::testing::AssertionFailure() << "message lacks \"" << p << "\": " << msg;
  return ::testing::AssertionSuccess();
}
::testing::AssertionResult FailsWith(const Status& s, const std::vector<std::string>& parts,
                                     ExitCode code = ExitCode::kInvalidInput) {
  Result<int> r = s.ok() ? Result<int>(0) : Result<int>(s);
  return FailsWith(r, parts, code);
}

// Text -> parse -> loader, as the tools do.
template <class F>
auto load_text(F loader, std::string_view text, std::string_view source)
    -> decltype(loader(Json{}, source)) {
  auto j = parse_json_text(text, source);
  if (!j.ok()) return j.status();
  return loader(*j, source);
}
Result<ModelSpec> model_text(std::string_view text) {
  return load_text(model_from_json, text, "m.json");
}

std::string repo_file(const std::string& rel) {
  return std::string(TRAINPLAN_SOURCE_DIR) + "/" + rel;
}

Json tiny_model() {
  return Json::parse(R"({"name": "t", "num_layers": 4, "hidden_size": 64,
    "num_attention_heads": 4, "ffn_hidden_size": 256, "vocab_size": 256, "seq_len": 64})");
}
Json llama_hf() {
  return Json::parse(R"({"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64,
    "num_attention_heads": 8, "num_key_value_heads": 2, "intermediate_size": 128,
    "vocab_size": 1000, "max_position_embeddings": 512, "hidden_act": "silu",
    "rms_norm_eps": 1e-5, "rope_theta": 10000.0})");
}
Json gpt2_hf() {
  return Json::parse(R"({"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 4,
    "n_positions": 128, "vocab_size": 100, "activation_function": "gelu_new", "n_inner": null})");
}
Json basic_cluster() {
  return Json::parse(R"({"gpu": "H100-80GB", "num_nodes": 8, "gpus_per_node": 4})");
}
Json custom_gpu_cluster() {
  return Json::parse(R"({"num_nodes": 2, "gpus_per_node": 8, "gpu": {"name": "X1",
    "bf16_TFLOPs": 500, "fp32_TFLOPs": 50, "hbm_GB": 96, "hbm_GBps": 4000, "sm_count": 100}})");
}
Json basic_plan() {
  return Json::parse(R"({"tp": 2, "pp": 2, "dp": 2, "micro_batch_size": 1,
    "global_batch_size": 8})");
}
Json basic_profile() {
  return Json::parse(R"({"schema": "trainplan.hardware/1", "device": "cpu", "date": "2026-01-01",
    "peak_TFLOPs": 1.5, "memory_GBps": 20, "gemm_efficiency": 0.7, "memory_efficiency": 0.6,
    "parallel_units": 4, "links": {"intra_node_GBps": 5, "intra_node_latency_us": 3}})");
}
Json basic_report() {
  return Json::parse(R"({"schema": "trainplan.step_report/1", "kind": "measured",
    "source": "execute cpu", "step_time_s": 0.5, "warmup_steps": 1, "loss": [5.5, 5.4],
    "step_times_s": [0.9, 0.5], "bytes_per_group": {"dp": 1000},
    "ranks": [{"rank": 0, "stage": 0, "peak_memory_bytes": 1e6, "compute_s": 0.4,
               "memory": {"weights_bytes": 100}, "comm": {"dp": {"bytes_sent": 10,
               "time_s": 0.01, "exposed_s": 0.001}}}]})");
}

// --- malformed JSON -------------------------------------------------------------------------

TEST(ParseJson, SyntaxErrorNamesSourceAndByteOffset) {
  // The stray '}' after the comma is the 21st byte (offset 21 counts bytes read so far).
  auto r = parse_json_text(R"({"num_layers": 4, x})", "models/bad.json");
  EXPECT_TRUE(FailsWith(r, {"models/bad.json", "malformed JSON", "at byte 19"}));
  EXPECT_TRUE(FailsWith(parse_json_text("", "empty.json"), {"empty.json", "malformed JSON"}));
  EXPECT_TRUE(FailsWith(parse_json_text("{\"a\": 1} trailing", "t.json"),
                        {"t.json", "malformed JSON", "byte"}));
  EXPECT_TRUE(FailsWith(parse_json_text("{\"a\": \"\xff\"}", "u.json"), {"u.json", "byte"}));
}

TEST(ParseJson, NumberBeyondDoubleIsMalformed) {
  // nlohmann reports this one without a byte offset; the message still quotes the number.
  EXPECT_TRUE(FailsWith(parse_json_text(R"({"a": 1e999})", "n.json"), {"n.json", "1e999"}));
}

TEST(ParseJson, DeepNestingIsAnErrorNotAStackOverflow) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  EXPECT_TRUE(FailsWith(parse_json_text(deep, "deep.json"),
                        {"deep.json", "nesting deeper than", "byte 256"}));
  // Brackets inside strings do not count.
  const std::string in_string = "{\"a\": \"" + std::string(1000, '[') + "\"}";
  EXPECT_TRUE(parse_json_text(in_string, "s.json").ok());
  const std::string escaped = "{\"a\": \"\\\"" + std::string(1000, '{') + "\"}";
  EXPECT_TRUE(parse_json_text(escaped, "e.json").ok());
}

TEST(ParseJson, ValueInMessageIsShortAndValidUtf8) {
  std::string long_utf8;
  for (int i = 0; i < 40; ++i) long_utf8 += "\xc3\xa9";  // e-acute, two bytes each
  const std::string msg = json_value_for_message(Json(long_utf8));
  EXPECT_LE(msg.size(), 60u);
  EXPECT_NO_THROW((void)Json(msg).dump());  // throws on a split UTF-8 sequence
}

TEST(ModelLoader, TopLevelMustBeAnObject) {
  EXPECT_TRUE(FailsWith(model_text("[1, 2]"), {"m.json", "expected a JSON object", "[1,2]"}));
  EXPECT_TRUE(FailsWith(model_text("42"), {"m.json", "42"}));
  EXPECT_TRUE(FailsWith(model_text("null"), {"m.json", "null"}));
}

// --- our model format -----------------------------------------------------------------------

struct FieldCase {
  const char* field;
  Json value;
  std::vector<std::string> expect;  // substrings besides the source and the field
};

TEST(ModelLoader, FieldErrorsNameSourceFieldAndValue) {
  const std::vector<FieldCase> cases = {
      {"num_layers", 0, {"0", "out of range"}},
      {"num_layers", -3, {"-3"}},
      {"num_layers", 65537, {"65537", "65536"}},
      {"num_layers", "4", {"\"4\"", "expected an integer"}},
      {"num_layers", true, {"true"}},
      {"num_layers", 4.5, {"4.5", "whole number"}},
      {"num_layers", Json::parse("9223372036854775808"), {"9223372036854775808", "out of range"}},
      {"num_layers", Json::parse("18446744073709551615"), {"18446744073709551615"}},
      {"num_layers", Json::parse("-9223372036854775809"), {"out of range"}},
      {"num_layers", 1e30, {"1e+30", "out of range"}},
      {"hidden_size", -64, {"-64"}},
      {"hidden_size", std::int64_t{1} << 40, {"1099511627776"}},
      {"num_attention_heads", 0, {"0"}},
      {"num_kv_heads", 0, {"0"}},
      {"head_dim", 0, {"0"}},
      {"ffn_hidden_size", Json::array(), {"[]"}},
      {"vocab_size", std::int64_t{1} << 62, {"4611686018427387904"}},
      {"seq_len", Json::object(), {"{}"}},
      {"max_position_embeddings", -1, {"-1"}},
      {"tie_word_embeddings", "yes", {"\"yes\"", "true or false"}},
      {"bias", 1, {"1"}},
      {"dropout", "false", {"\"false\""}},
      {"name", 5, {"5", "expected a string"}},
      {"activation", "relu2", {"relu2", "gelu, swiglu"}},
      {"activation", 3, {"3"}},
      {"norm", "batchnorm", {"batchnorm", "layernorm, rmsnorm"}},
      {"position_embedding", "alibi", {"alibi", "learned, rope"}},
      {"num_experts", 5000, {"5000"}},
      {"experts_per_token", 0, {"0"}},
  };
  for (const FieldCase& c : cases) {
    Json j = tiny_model();
    j[c.field] = c.value;
    auto r = model_from_json(j, "m.json");
    auto f = FailsWith(r, {"m.json", std::string("'") + c.field + "'"});
    EXPECT_TRUE(f) << c.field << " = " << c.value.dump();
    for (const std::string& e : c.expect) {
      ASSERT_FALSE(r.ok());
      EXPECT_NE(r.status().message().find(e), std::string::npos)
          << c.field << " = " << c.value.dump() << ": message lacks \"" << e
          << "\": " << r.status().message();
    }
  }
}

TEST(ModelLoader, MissingFieldsAreNamed) {
  for (const char* field : {"name", "num_layers", "hidden_size", "num_attention_heads",
                            "ffn_hidden_size", "vocab_size", "seq_len"}) {
    Json j = tiny_model();
    j.erase(field);
    EXPECT_TRUE(FailsWith(model_from_json(j, "m.json"), {"m.json", "missing", field})) << field;
    j = tiny_model();
    j[field] = nullptr;  // null reads as absent
    EXPECT_TRUE(FailsWith(model_from_json(j, "m.json"), {"m.json", "missing", field})) << field;
  }
}

TEST(ModelLoader, UnknownKeyIsNamed) {
  Json j = tiny_model();
  j["num_layer"] = 4;  // a typo
  EXPECT_TRUE(FailsWith(model_from_json(j, "m.json"), {"m.json", "unknown field 'num_layer'"}));
  j = tiny_model();
  j["source"] = "accepted: documentation";
  j["notes"] = "accepted";
  EXPECT_TRUE(model_from_json(j, "m.json").ok());
}

TEST(ModelLoader, CrossFieldErrors) {
  Json j = tiny_model();
  j["num_kv_heads"] = 3;  // 4 heads
  EXPECT_TRUE(FailsWith(model_from_json(j, "m.json"),
                        {"m.json", "'num_kv_heads'", "3", "num_attention_heads=4"}));
  j["num_kv_heads"] = 8;  // more kv heads than heads
  EXPECT_TRUE(FailsWith(model_from_json(j, "m.json"), {"m.json", "'num_kv_heads'", "8"}));

  j = tiny_model();
  j["num_attention_heads"] = 3;  // does not divide 64, no head_dim given
  EXPECT_TRUE(FailsWith(model_from_json(j, "m.json"),
                        {"m.json", "'num_attention_heads'", "3", "hidden_size=64"}));
  j["head_dim"] = 16;  // explicit head_dim makes it legal
  EXPECT_TRUE(model_from_json(j, "m.json").ok());

  j = tiny_model();
  j["seq_len"] = 128;
  j["max_position_embeddings"] = 64;  // learned table shorter than the sequence
  EXPECT_TRUE(FailsWith(model_from_json(j, "m.json"),
                        {"m.json", "'seq_len'", "128", "max_position_embeddings=64"}));
  j["position_embedding"] = "rope";  // rotary positions have no table
  EXPECT_TRUE(model_from_json(j, "m.json").ok());

  j = tiny_model();
  j["num_experts"] = 4;
  j["experts_per_token"] = 5;
  EXPECT_TRUE(FailsWith(model_from_json(j, "m.json"),
                        {"m.json", "'experts_per_token'", "5", "num_experts=4"}));
}

TEST(ModelLoader, SeqLenOverride) {
  auto m = model_from_json(tiny_model(), "m.json");
  ASSERT_TRUE(m.ok());
  EXPECT_TRUE(FailsWith(with_seq_len(*m, 65), {"--seq-len", "'seq_len'", "65",
                                               "max_position_embeddings=64"}));
  EXPECT_TRUE(FailsWith(with_seq_len(*m, 0), {"'seq_len'", "0"}));
  EXPECT_TRUE(FailsWith(with_seq_len(*m, ModelLimits::kMaxSeq + 1), {"'seq_len'", "16777217"}));
  EXPECT_TRUE(with_seq_len(*m, 32).ok());
  Json j = tiny_model();
  j["position_embedding"] = "rope";
  auto rope = model_from_json(j, "m.json");
  ASSERT_TRUE(rope.ok());
  auto longer = with_seq_len(*rope, 4096);
  ASSERT_TRUE(longer.ok()) << longer.status().message();
  EXPECT_EQ(longer->seq_len, 4096);
}

// --- Hugging Face configs -------------------------------------------------------------------

TEST(HfLoader, FieldErrorsUseTheConfigKeys) {
  const std::vector<FieldCase> cases = {
      {"num_hidden_layers", 0, {"0"}},
      {"hidden_size", "4096", {"\"4096\""}},
      {"num_attention_heads", -1, {"-1"}},
      {"num_key_value_heads", 3, {"3", "num_attention_heads=8"}},  // does not divide 8
      {"num_key_value_heads", 16, {"16"}},                          // more than heads
      {"intermediate_size", 1.5, {"1.5"}},
      {"vocab_size", std::int64_t{1} << 62, {"4611686018427387904"}},
      {"max_position_embeddings", std::int64_t{1} << 40, {"1099511627776"}},
      {"tie_word_embeddings", "false", {"\"false\""}},
      {"hidden_act", "tanhshrink", {"tanhshrink", "unsupported"}},
      {"hidden_act", 7, {"7"}},
      {"model_type", 7, {"7"}},
      {"attention_dropout", 2.0, {"2"}},
      {"num_local_experts", 0, {"0"}},
      {"num_experts_per_tok", 9, {"9"}},
  };
  for (const FieldCase& c : cases) {
    Json j = llama_hf();
    j[c.field] = c.value;
    if (std::string(c.field) == "num_experts_per_tok") j["num_local_experts"] = 8;
    auto r = model_from_json(j, "hf.json");
    EXPECT_TRUE(FailsWith(r, {"hf.json", std::string("'") + c.field + "'"}))
        << c.field << " = " << c.value.dump();
    for (const std::string& e : c.expect) {
      ASSERT_FALSE(r.ok());
      EXPECT_NE(r.status().message().find(e), std::string::npos)
          << c.field << ": message lacks \"" << e << "\": " << r.status().message();
    }
  }
}

TEST(HfLoader, MissingFieldsAndGpt2Keys) {
  // max_position_embeddings and n_positions have model-type defaults (tests/core/hf_config_test.cc).
  for (const char* field : {"hidden_size", "num_attention_heads", "intermediate_size",
                            "vocab_size"}) {
    Json j = llama_hf();
    j.erase(field);
    EXPECT_TRUE(FailsWith(model_from_json(j, "hf.json"), {"hf.json", "missing", field}));
  }
  for (const char* field : {"n_embd", "n_head", "vocab_size"}) {
    Json j = gpt2_hf();
    j.erase(field);
    EXPECT_TRUE(FailsWith(model_from_json(j, "gpt2.json"), {"gpt2.json", "missing", field}));
  }
  Json j = gpt2_hf();
  j["n_head"] = 5;  // does not divide n_embd=64
  EXPECT_TRUE(FailsWith(model_from_json(j, "gpt2.json"),
                        {"gpt2.json", "'n_head'", "5", "n_embd=64"}));
  j = gpt2_hf();
  j["n_layer"] = "12";
  EXPECT_TRUE(FailsWith(model_from_json(j, "gpt2.json"), {"gpt2.json", "'n_layer'", "\"12\""}));
  j = gpt2_hf();
  j["resid_pdrop"] = -0.1;
  EXPECT_TRUE(FailsWith(model_from_json(j, "gpt2.json"), {"'resid_pdrop'", "-0.1"}));
}

TEST(HfLoader, UnknownKeysAreAcceptedAsIs) {
  Json j = llama_hf();
  j["some_future_key"] = {{"nested", true}};
  j["rope_scaling"] = nullptr;
  EXPECT_TRUE(model_from_json(j, "hf.json").ok());
}

// --- cluster --------------------------------------------------------------------------------

TEST(ClusterLoader, FieldErrors) {
  const std::vector<FieldCase> cases = {
      {"gpu", "V100", {"V100", "unknown GPU", "H100-80GB"}},
      {"gpu", 5, {"5"}},
      {"gpu", Json::array(), {"[]"}},
      {"num_nodes", 0, {"0"}},
      {"num_nodes", -1, {"-1"}},
      {"num_nodes", "8", {"\"8\""}},
      {"gpus_per_node", 2000, {"2000", "1024"}},
      {"gpus_per_node", 0.5, {"0.5"}},
      {"intra_node_GBps", 0, {"0"}},
      {"intra_node_GBps", "fast", {"\"fast\""}},
      {"inter_node_GBps", -1, {"-1"}},
      {"nics_per_node", 0, {"0"}},
      {"nics_per_node", 2.5, {"2.5"}},
      {"nics_per_node", "four", {"\"four\""}},
      {"intra_node_latency_us", -1, {"-1"}},
      {"inter_node_latency_us", 1e300, {"1e+300"}},
      {"pcie_GBps", false, {"false"}},
      {"host_memory_GB_per_node", -2, {"-2"}},
      {"host_memory_GiB_per_node", -2, {"-2"}},
      {"host_memory_GBps_per_node", 0, {"0"}},
      {"nvme_TB_per_node", -1, {"-1"}},
      {"nvme_GBps_per_node", 0, {"0"}},
      {"nvme_GBps_per_node", "fast", {"\"fast\""}},
      {"collective_model", "mpi", {"\"mpi\"", "nccl", "alpha-beta"}},
      {"collective_model", 1, {"1"}},
      {"name", 1, {"1"}},
  };
  for (const FieldCase& c : cases) {
    Json j = basic_cluster();
    j[c.field] = c.value;
    auto r = cluster_from_json(j, "c.json");
    EXPECT_TRUE(FailsWith(r, {"c.json", std::string("'") + c.field + "'"}))
        << c.field << " = " << c.value.dump();
    for (const std::string& e : c.expect) {
      ASSERT_FALSE(r.ok());
      EXPECT_NE(r.status().message().find(e), std::string::npos)
          << c.field << ": message lacks \"" << e << "\": " << r.status().message();
    }
  }
}

// nics_per_node: the NICs a node's GPUs share (NCCL's channels across nodes follow them,
// core/cost/contention.h); absent, one per GPU, and then not written back.
TEST(ClusterLoader, NicsPerNodeRoundTrips) {
  Json j = basic_cluster();
  auto c = cluster_from_json(j, "c.json");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->nics_per_node, 0);
  EXPECT_FALSE(cluster_to_json(*c).contains("nics_per_node"));
  j["nics_per_node"] = 4;
  c = cluster_from_json(j, "c.json");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->nics_per_node, 4);
  const Json back = cluster_to_json(*c);
  EXPECT_EQ(back.at("nics_per_node").get<std::int64_t>(), 4);
  auto again = cluster_from_json(back, "back.json");
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(again->nics_per_node, 4);
}

// collective_model: the GPU presets time collectives by NCCL's algorithm and protocol choice;
// a file may ask for the plain alpha-beta line; written back; a measured link profile turns
// the model off (it measured one protocol).
TEST(ClusterLoader, CollectiveModelDefaultsToNcclAndRoundTrips) {
  Json j = basic_cluster();
  auto c = cluster_from_json(j, "c.json");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->collective_model, CollectiveModel::kNccl);
  EXPECT_EQ(cluster_to_json(*c).at("collective_model").get<std::string>(), "nccl");
  j["collective_model"] = "alpha-beta";
  c = cluster_from_json(j, "c.json");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->collective_model, CollectiveModel::kAlphaBeta);
  auto again = cluster_from_json(cluster_to_json(*c), "back.json");
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(again->collective_model, CollectiveModel::kAlphaBeta);
  // The presets' ring Simple hops are NCCL's (src/graph/tuning.cc): 3.4 us NVLink, 14 us network.
  auto preset = make_cluster("H100-80GB", 16, 8);
  ASSERT_TRUE(preset.ok());
  EXPECT_EQ(preset->collective_model, CollectiveModel::kNccl);
  EXPECT_NEAR(preset->intra_node_latency_s, 3.4e-6, 1e-15);
  EXPECT_NEAR(preset->inter_node_latency_s, 14.0e-6, 1e-15);
  HardwareProfile measured;
  measured.has_links = true;
  measured.intra_node_bytes_per_s = 1e10;
  measured.intra_node_latency_s = 5e-6;
  measured.inter_node_bytes_per_s = 1e9;
  measured.inter_node_latency_s = 20e-6;
  ClusterSpec from_profile = *preset;
  apply_profile_links(measured, from_profile);
  EXPECT_EQ(from_profile.collective_model, CollectiveModel::kAlphaBeta);
}

// Host memory is given and written in GB like every figure the tools print; the GiB key of
// earlier versions is still read, and the two at once are an error naming both.
TEST(ClusterLoader, HostMemoryInGbAndTheEarlierGibKey) {
  Json j = basic_cluster();
  j["host_memory_GB_per_node"] = 2000;
  auto gb = cluster_from_json(j, "c.json");
  ASSERT_TRUE(gb.ok()) << gb.status().message();
  EXPECT_DOUBLE_EQ(gb->host_memory_bytes_per_node, 2000e9);
  const Json out = cluster_to_json(*gb);
  EXPECT_DOUBLE_EQ(out.at("host_memory_GB_per_node").get<double>(), 2000);
  EXPECT_FALSE(out.contains("host_memory_GiB_per_node"));
  auto again = cluster_from_json(out, "out.json");
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_DOUBLE_EQ(again->host_memory_bytes_per_node, 2000e9);
  j.erase("host_memory_GB_per_node");
  j["host_memory_GiB_per_node"] = 1024;
  auto gib = cluster_from_json(j, "c.json");
  ASSERT_TRUE(gib.ok()) << gib.status().message();
  EXPECT_DOUBLE_EQ(gib->host_memory_bytes_per_node, 1024.0 * 1024 * 1024 * 1024);
  j["host_memory_GB_per_node"] = 1000;
  EXPECT_TRUE(FailsWith(cluster_from_json(j, "c.json"),
                        {"c.json", "'host_memory_GiB_per_node'", "host_memory_GB_per_node"}));
}

TEST(ClusterLoader, MissingUnknownAndNotAnObject) {
  for (const char* field : {"gpu", "num_nodes", "gpus_per_node"}) {
    Json j = basic_cluster();
    j.erase(field);
    EXPECT_TRUE(FailsWith(cluster_from_json(j, "c.json"), {"c.json", "missing", field}));
  }
  Json j = basic_cluster();
  j["nodes"] = 2;
  EXPECT_TRUE(FailsWith(cluster_from_json(j, "c.json"), {"c.json", "unknown field 'nodes'"}));
  EXPECT_TRUE(FailsWith(load_text(cluster_from_json, "[]", "c.json"), {"c.json", "object"}));
  EXPECT_TRUE(FailsWith(load_text(cluster_from_json, "\"H100\"", "c.json"), {"c.json"}));
}

TEST(ClusterLoader, CustomGpuErrors) {
  EXPECT_TRUE(cluster_from_json(custom_gpu_cluster(), "c.json").ok());
  for (const char* field : {"name", "bf16_TFLOPs", "fp32_TFLOPs", "hbm_GB", "hbm_GBps",
                            "sm_count"}) {
    Json j = custom_gpu_cluster();
    j["gpu"].erase(field);
    EXPECT_TRUE(FailsWith(cluster_from_json(j, "c.json"), {"c.json", "gpu", "missing", field}));
  }
  Json j = custom_gpu_cluster();
  j["gpu"]["hbm_GB"] = 0;
  EXPECT_TRUE(FailsWith(cluster_from_json(j, "c.json"), {"c.json", "'hbm_GB'", "0"}));
  j = custom_gpu_cluster();
  j["gpu"]["gemm_efficiency"] = 1.5;
  EXPECT_TRUE(FailsWith(cluster_from_json(j, "c.json"), {"'gemm_efficiency'", "1.5"}));
  j = custom_gpu_cluster();
  j["gpu"]["tflops"] = 1;
  EXPECT_TRUE(FailsWith(cluster_from_json(j, "c.json"), {"c.json", "unknown field 'tflops'"}));
  // A preset base supplies the figures; an unknown base is named.
  j = Json::parse(R"({"num_nodes": 1, "gpus_per_node": 8,
                      "gpu": {"name": "H100 derated", "base": "H100-80GB", "hbm_GB": 70}})");
  auto c = cluster_from_json(j, "c.json");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_DOUBLE_EQ(c->gpu.hbm_bytes, 70e9);
  EXPECT_EQ(c->gpu.name, "H100 derated");
  j["gpu"]["base"] = "Z100";
  EXPECT_TRUE(FailsWith(cluster_from_json(j, "c.json"), {"c.json", "'base'", "Z100"}));
  j["gpu"]["base"] = 3;
  EXPECT_TRUE(FailsWith(cluster_from_json(j, "c.json"), {"c.json", "'base'", "3"}));
  // bf16 0 is a GPU without bf16 (Volta): it must give its fp16 rate.
  j = custom_gpu_cluster();
  j["gpu"]["bf16_TFLOPs"] = 0;
  EXPECT_TRUE(FailsWith(cluster_from_json(j, "c.json"), {"c.json", "'fp16_TFLOPs'", "is 0"}));
  j["gpu"]["fp16_TFLOPs"] = 125;
  c = cluster_from_json(j, "c.json");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->gpu.peak_bf16_flops_per_s, 0.0);
  EXPECT_DOUBLE_EQ(c->gpu.peak_fp16_flops_per_s, 125e12);
}

// The GB200, GB300 and B300 presets (fifty-second pass): their figures, the NVL72 rack as one
// 72-GPU node, the spellings MLPerf uses, and a power limit refused where no peaks of the die at
// other powers are published (Blackwell Ultra).
TEST(Presets, GraceBlackwellRacksAndBlackwellUltra) {
  const GpuSpec gb200 = *gpu_preset("GB200");
  EXPECT_EQ(gb200.name, "GB200-186GB");
  EXPECT_DOUBLE_EQ(gb200.peak_bf16_flops_per_s, 2500e12);
  EXPECT_DOUBLE_EQ(gb200.peak_fp4_flops_per_s, 10000e12);
  EXPECT_DOUBLE_EQ(gb200.achievable_matmul_fraction, 1822.0 / 2500);
  EXPECT_EQ(gb200.board_power_w, 1200);
  EXPECT_EQ(gb200.architecture, "blackwell");
  EXPECT_EQ(gb200.memory_rates, MemoryRates::kPublished);
  EXPECT_EQ(*preset_gpus_per_node("GB200-186GB"), 72);
  EXPECT_EQ(*preset_gpus_per_node("GB300"), 72);
  const GpuSpec gb300 = *gpu_preset("GB300-288GB");
  EXPECT_DOUBLE_EQ(gb300.peak_fp4_flops_per_s, 15000e12);
  EXPECT_EQ(gb300.sm_count, 160);
  EXPECT_DOUBLE_EQ(gb300.achievable_matmul_fraction, kUnmeasuredMatmulFraction);
  EXPECT_EQ(gb300.architecture, "blackwell-ultra");
  const GpuSpec b300 = *gpu_preset("B300-SXM-270GB");
  EXPECT_EQ(b300.name, "B300-270GB");
  EXPECT_DOUBLE_EQ(b300.peak_fp4_flops_per_s, 13500e12);
  EXPECT_DOUBLE_EQ(b300.hbm_bytes_per_s, 7700e9);
  EXPECT_DOUBLE_EQ(b300.achievable_matmul_fraction, 1769.0 / 2250);
  EXPECT_EQ(*preset_gpus_per_node("B300"), 8);
  // 512 GPUs as eight racks of 64: the node is the NVLink domain the job used.
  auto c = make_cluster("GB200-186GB", 512, 64);
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->num_nodes, 8);
  EXPECT_DOUBLE_EQ(c->inter_node_bytes_per_s, 46e9);
  EXPECT_DOUBLE_EQ(make_cluster("GB300-288GB", 72, 72)->inter_node_bytes_per_s, 92e9);
  EXPECT_EQ(b300.architecture, "blackwell-ultra");
  EXPECT_TRUE(FailsWith(at_power_limit(b300, 1000), {"1000 W", "B300-270GB", "no peaks"}));
  EXPECT_TRUE(at_power_limit(gb200, 1000).ok());
  // A custom GPU names the die; it round-trips, and a die not known is refused by name.
  Json j = Json::parse(R"({"num_nodes": 1, "gpus_per_node": 8,
                           "gpu": {"name": "B300 like", "base": "H100-80GB",
                                   "architecture": "blackwell-ultra"}})");
  auto custom = cluster_from_json(j, "c.json");
  ASSERT_TRUE(custom.ok()) << custom.status().message();
  EXPECT_EQ(custom->gpu.architecture, "blackwell-ultra");
  auto again = cluster_from_json(cluster_to_json(*custom), "back.json");
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(again->gpu.architecture, "blackwell-ultra");
  j["gpu"]["architecture"] = "rubin";
  EXPECT_TRUE(FailsWith(cluster_from_json(j, "c.json"), {"c.json", "architecture", "rubin"}));
}

// A board power limit: the die's clock-bound peaks at that power, interpolated between the powers
// NVIDIA publishes peaks at (Blackwell: B100 700 W 1,750; B200 1,000 W 2,250; GB200's 1,200 W
// 2,500. Hopper: H100 NVL 400 W 835; SXM5 700 W 989.4); memory and links unchanged.
TEST(PowerLimit, ScalesTheClockBoundPeaksByThePublishedPeaksAtThatPower) {
  const GpuSpec b200 = *gpu_preset("B200-192GB");
  EXPECT_EQ(b200.board_power_w, 1000);
  auto at750 = at_power_limit(b200, 750);
  ASSERT_TRUE(at750.ok()) << at750.status().message();
  const double scale = (1750.0 + 500.0 * 50.0 / 300.0) / 2250.0;
  EXPECT_NEAR(at750->peak_bf16_flops_per_s, 2250e12 * scale, 1e3);
  EXPECT_NEAR(at750->peak_fp8_flops_per_s, 4500e12 * scale, 1e3);
  EXPECT_NEAR(at750->peak_fp32_flops_per_s, 80e12 * scale, 1e3);
  EXPECT_EQ(at750->hbm_bytes_per_s, b200.hbm_bytes_per_s);
  EXPECT_EQ(at750->nvlink_bytes_per_s, b200.nvlink_bytes_per_s);
  EXPECT_EQ(at750->board_power_w, 750);
  EXPECT_NE(at750->source.find("750 W"), std::string::npos);
  // Above the part's own power, on the published segment beyond it.
  EXPECT_NEAR(at_power_limit(b200, 1100)->peak_bf16_flops_per_s, 2375e12, 1e3);
  EXPECT_DOUBLE_EQ(at_power_limit(b200, 1000)->peak_bf16_flops_per_s, 2250e12);
  // The 96 GB H100 is the H100 die at 500 W, one third of the way from NVL's 835 to SXM's 989.4.
  const GpuSpec h96 = *gpu_preset("H100-96GB");
  EXPECT_NEAR(h96.peak_bf16_flops_per_s, (835.0 + 154.4 / 3.0) * 1e12, 1e3);
  EXPECT_NEAR(h96.peak_fp8_flops_per_s, 2.0 * h96.peak_bf16_flops_per_s, 1e3);
  EXPECT_EQ(h96.board_power_w, 500);
  EXPECT_DOUBLE_EQ(h96.hbm_bytes_per_s, 2400e9);
  // Errors name the value and why.
  EXPECT_TRUE(FailsWith(at_power_limit(b200, 600), {"600 W", "700-1200 W", "blackwell"}));
  EXPECT_TRUE(FailsWith(at_power_limit(*gpu_preset("H100-80GB"), 300), {"300 W", "400-700 W"}));
  EXPECT_TRUE(FailsWith(at_power_limit(*gpu_preset("A100-80GB"), 300),
                        {"300 W", "A100-80GB", "no peaks"}));
  GpuSpec unknown = *gpu_preset("H100-80GB");
  unknown.board_power_w = 0;
  EXPECT_TRUE(FailsWith(at_power_limit(unknown, 500), {"500 W", "board power (0 W) is not known"}));
}

// GpuSpec::memory_rates from JSON (fifty-first pass): a custom GPU times memory-bound kernels at
// the published rates unless it gives memory_efficiency; "memory_rates" says so outright; the
// value round-trips; a bad one is refused by name.
TEST(MemoryRates, ACustomGpuTakesThemFromJsonAndRoundTrips) {
  Json j = Json::parse(R"({"num_nodes": 1, "gpus_per_node": 8,
                           "gpu": {"name": "H100 like", "base": "H100-80GB"}})");
  auto c = cluster_from_json(j, "c.json");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->gpu.memory_rates, MemoryRates::kPublished);
  j["gpu"]["memory_efficiency"] = 0.5;
  c = cluster_from_json(j, "c.json");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->gpu.memory_rates, MemoryRates::kUniform);
  EXPECT_DOUBLE_EQ(c->gpu.memory_efficiency, 0.5);
  auto again = cluster_from_json(cluster_to_json(*c), "back.json");
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(again->gpu.memory_rates, MemoryRates::kUniform);
  j["gpu"]["memory_rates"] = "published";
  c = cluster_from_json(j, "c.json");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->gpu.memory_rates, MemoryRates::kPublished);
  again = cluster_from_json(cluster_to_json(*c), "back.json");
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(again->gpu.memory_rates, MemoryRates::kPublished);
  EXPECT_DOUBLE_EQ(again->gpu.memory_efficiency, 0.5);
  j["gpu"]["memory_rates"] = "fast";
  EXPECT_TRUE(FailsWith(cluster_from_json(j, "c.json"), {"c.json", "memory_rates", "fast"}));
}

TEST(PowerLimit, ACustomGpuTakesItFromJsonAndRoundTrips) {
  Json j = Json::parse(R"({"num_nodes": 1, "gpus_per_node": 8,
                           "gpu": {"name": "B200 capped", "base": "B200-192GB",
                                   "power_limit_W": 750}})");
  auto c = cluster_from_json(j, "c.json");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_NEAR(c->gpu.peak_bf16_flops_per_s, 1833.33e12, 1e10);
  const Json out = cluster_to_json(*c);
  EXPECT_EQ(out.at("gpu").at("board_power_W").get<double>(), 750);
  auto again = cluster_from_json(out, "back.json");
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_DOUBLE_EQ(again->gpu.peak_bf16_flops_per_s, c->gpu.peak_bf16_flops_per_s);
  EXPECT_EQ(again->gpu.board_power_w, 750);
  j["gpu"]["power_limit_W"] = 400;
  EXPECT_TRUE(FailsWith(cluster_from_json(j, "c.json"), {"c.json", "'power_limit_W'", "400 W"}));
  j["gpu"]["power_limit_W"] = -5;
  EXPECT_TRUE(FailsWith(cluster_from_json(j, "c.json"), {"c.json", "'power_limit_W'", "-5"}));
}

// GEMM efficiency per generation: each preset's measured maximum achievable matmul fraction
// (core/cluster_spec.h: Bekman's MAMF table; V100 from DeepBench) times the one share the corpus
// fit chose.
TEST(GpuPresets, GemmEfficiencyIsTheShareOfEachPartsAchievableMatmulRate) {
  const std::vector<std::pair<const char*, double>> measured = {
      {"A100-80GB", 271.2 / 312}, {"H100-80GB", 794.5 / 989}, {"H200-141GB", 794.5 / 989},
      {"H800-80GB", 794.5 / 989}, {"B200-192GB", 1745.0 / 2250},
      {"V100-16GB", 112.3 / 125}, {"V100-32GB", 112.3 / 125}};
  for (const auto& [name, fraction] : measured) {
    auto g = gpu_preset(name);
    ASSERT_TRUE(g.ok()) << g.status().message();
    EXPECT_DOUBLE_EQ(g->achievable_matmul_fraction, fraction) << name;
    EXPECT_DOUBLE_EQ(g->gemm_efficiency, kPresetGemmShare * fraction) << name;
    EXPECT_DOUBLE_EQ(g->memory_efficiency, kPresetMemoryEfficiency) << name;
  }
  // A share above what the part can reach is capped at its peak.
  auto v100 = gpu_preset("V100-32GB");
  ASSERT_TRUE(v100.ok());
  EXPECT_DOUBLE_EQ(in_step_gemm_efficiency(*v100, 2.0), 1.0);
}

TEST(ClusterLoader, CustomGpuGemmEfficiencyFollowsItsAchievableMatmulFraction) {
  // Not given: the presets' share of the part's own fraction, else of the assumed one.
  Json j = custom_gpu_cluster();
  auto c = cluster_from_json(j, "c.json");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_DOUBLE_EQ(c->gpu.gemm_efficiency, kPresetGemmShare * kUnmeasuredMatmulFraction);
  j["gpu"]["achievable_matmul_fraction"] = 0.7;
  c = cluster_from_json(j, "c.json");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_DOUBLE_EQ(c->gpu.achievable_matmul_fraction, 0.7);
  EXPECT_DOUBLE_EQ(c->gpu.gemm_efficiency, kPresetGemmShare * 0.7);
  // Given: kept as given.
  j["gpu"]["gemm_efficiency"] = 0.5;
  c = cluster_from_json(j, "c.json");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_DOUBLE_EQ(c->gpu.gemm_efficiency, 0.5);
  // A base's fraction carries over, and an override of it moves the derived efficiency.
  j = Json::parse(R"({"num_nodes": 1, "gpus_per_node": 8,
                      "gpu": {"name": "A100 tuned", "base": "A100-80GB",
                              "achievable_matmul_fraction": 0.9}})");
  c = cluster_from_json(j, "c.json");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_DOUBLE_EQ(c->gpu.gemm_efficiency, kPresetGemmShare * 0.9);
  // Out of range: named with its value.
  for (double bad : {0.0, 1.2}) {
    j = custom_gpu_cluster();
    j["gpu"]["achievable_matmul_fraction"] = bad;
    std::ostringstream value;
    value << bad;
    EXPECT_TRUE(FailsWith(cluster_from_json(j, "c.json"),
                          {"c.json", "'achievable_matmul_fraction'", value.str()}));
  }
}

// Volta: V100 presets by datasheet name, DGX-2's 16 GPUs per node, fp16 only.
TEST(GpuPresets, V100HasFp16OnlyAndDgx2Nodes) {
  auto v = gpu_preset("V100-SXM2-32GB");
  ASSERT_TRUE(v.ok()) << v.status().message();
  EXPECT_EQ(v->name, "V100-32GB");
  EXPECT_EQ(v->peak_bf16_flops_per_s, 0.0);
  EXPECT_DOUBLE_EQ(v->peak_fp16_flops_per_s, 125e12);
  EXPECT_EQ(*preset_gpus_per_node("V100-32GB"), 16);
  EXPECT_EQ(*preset_gpus_per_node("V100-16GB"), 8);
  EXPECT_EQ(*preset_gpus_per_node("H100-80GB"), 8);
  EXPECT_FALSE(preset_gpus_per_node("Z100").ok());
  Plan p;
  p.precision = Precision::kBf16;
  auto bf16 = plan_rates(p, *v, std::nullopt);
  ASSERT_FALSE(bf16.ok());
  EXPECT_EQ(bf16.status().code(), ExitCode::kInfeasible);
  EXPECT_NE(bf16.status().message().find("precision bf16: V100-32GB has no bf16 rate"),
            std::string::npos);
  p.precision = Precision::kFp16;
  EXPECT_TRUE(plan_rates(p, *v, std::nullopt).ok());
}

// Regression: "base": null used to throw nlohmann::type_error from json::value().
TEST(ClusterLoader, NullBaseIsAbsentNotACrash) {
  Json j = custom_gpu_cluster();
  j["gpu"]["base"] = nullptr;
  auto c = cluster_from_json(j, "c.json");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->gpu.name, "X1");
}

TEST(ClusterLoader, NodeCountOverflowIsAnError) {
  Json j = basic_cluster();
  j["num_nodes"] = ClusterLimits::kMaxGpus;
  j["gpus_per_node"] = ClusterLimits::kMaxGpusPerNode;
  EXPECT_TRUE(FailsWith(cluster_from_json(j, "c.json"),
                        {"c.json", "num_nodes x gpus_per_node", "17179869184", "16777216"}));
}

TEST(MakeCluster, Errors) {
  EXPECT_TRUE(FailsWith(make_cluster("V100", 8, 8), {"V100", "unknown GPU"}));
  EXPECT_TRUE(FailsWith(make_cluster("H100-80GB", 0, 8), {"--gpus", "0"}));
  EXPECT_TRUE(FailsWith(make_cluster("H100-80GB", -8, 8), {"--gpus", "-8"}));
  EXPECT_TRUE(FailsWith(make_cluster("H100-80GB", 12, 8), {"--gpus", "12", "--gpus-per-node=8"}));
  EXPECT_TRUE(FailsWith(make_cluster("H100-80GB", 8, 0), {"--gpus-per-node", "0"}));
  EXPECT_TRUE(FailsWith(make_cluster("H100-80GB", 8, 1025), {"--gpus-per-node", "1025"}));
  auto partial = make_cluster("A100-40GB", 4, 8);  // a partial node
  ASSERT_TRUE(partial.ok());
  EXPECT_EQ(partial->total_gpus(), 4);
  // The seed example: 32 GPUs as 8 nodes x 4; datasheet aliases are accepted.
  auto seed = make_cluster("h100 sxm", 32, 4);
  ASSERT_TRUE(seed.ok()) << seed.status().message();
  EXPECT_EQ(seed->num_nodes, 8);
  EXPECT_EQ(seed->gpu.name, "H100-80GB");
}

// --- plan -----------------------------------------------------------------------------------

TEST(PlanLoader, FieldErrors) {
  const std::vector<FieldCase> cases = {
      {"tp", 0, {"0"}},
      {"tp", "2", {"\"2\""}},
      {"pp", -1, {"-1"}},
      {"dp", 2.5, {"2.5"}},
      {"dp", std::int64_t{1} << 40, {"1099511627776"}},
      {"ep", 0, {"0"}},
      {"cp", 0, {"0"}},
      {"cp", -2, {"-2"}},
      {"cp", "2", {"\"2\""}},
      {"cp", 1.5, {"1.5"}},
      {"zero_stage", 4, {"4", "[0, 3]"}},
      {"zero_stage", -1, {"-1"}},
      {"micro_batch_size", 0, {"0"}},
      {"global_batch_size", std::int64_t{1} << 31, {"2147483648"}},
      {"global_batch_size", Json::parse("99999999999999999999"), {"out of range"}},
      {"schedule", "zigzag", {"zigzag", "naive, gpipe, 1f1b, interleaved, zb-h1, zb-v, dualpipe"}},
      {"recompute", "some", {"some", "none, selective, full"}},
      {"precision", "fp8", {"fp8", "bf16, fp16, fp32"}},
      {"optimizer", "adam", {"adam", "adamw, sgd, sgd-momentum"}},
      {"offload", "all", {"all", "none, optimizer"}},
      {"attention", "flash", {"flash", "fused, unfused"}},
      {"grad_precision", "bf16", {"bf16", "compute, fp32"}},
      {"sequence_parallel", "yes", {"\"yes\""}},
      {"virtual_stages", 0, {"0"}},
      {"layers_per_stage", 4, {"4", "expected an array"}},
      {"layers_per_stage", Json::array({1, 0, 1, 1}), {"entry 1", "value 0"}},
      {"layers_per_stage", Json::array({1, "2", 1, 1}), {"\"2\""}},
      {"layers_per_stage", Json::array({1, 70000, 1, 1}), {"70000"}},
      {"recompute_num_layers", -1, {"-1"}},
      {"recompute_num_layers", "2", {"\"2\""}},
      {"recompute_num_layers", 70000, {"70000"}},
      {"zero_shard_size", -1, {"-1"}},
      {"zero_shard_size", "8", {"\"8\""}},
      {"partition_activations", 1, {"expected true or false"}},
      {"offload_checkpoints", "yes", {"expected true or false"}},
  };
  for (const FieldCase& c : cases) {
    Json j = basic_plan();
    j[c.field] = c.value;
    auto r = plan_from_json(j, "p.json");
    EXPECT_TRUE(FailsWith(r, {"p.json", std::string("'") + c.field + "'"}))
        << c.field << " = " << c.value.dump();
    for (const std::string& e : c.expect) {
      ASSERT_FALSE(r.ok());
      EXPECT_NE(r.status().message().find(e), std::string::npos)
          << c.field << ": message lacks \"" << e << "\": " << r.status().message();
    }
  }
}

TEST(PlanLoader, MissingAndUnknown) {
  for (const char* field : {"tp", "pp", "dp", "micro_batch_size", "global_batch_size"}) {
    Json j = basic_plan();
    j.erase(field);
    EXPECT_TRUE(FailsWith(plan_from_json(j, "p.json"), {"p.json", "missing", field}));
  }
  Json j = basic_plan();
  j["mbs"] = 1;
  EXPECT_TRUE(FailsWith(plan_from_json(j, "p.json"), {"p.json", "unknown field 'mbs'"}));
}

TEST(PlanLoader, CrossFieldErrors) {
  auto with = [](std::initializer_list<std::pair<const char*, Json>> kv) {
    Json j = basic_plan();
    for (const auto& [k, v] : kv) j[k] = v;
    return plan_from_json(j, "p.json");
  };
  EXPECT_TRUE(FailsWith(with({{"dp", 4}, {"ep", 3}, {"global_batch_size", 8}}),
                        {"p.json", "ep=3", "dp=4"}));
  EXPECT_TRUE(FailsWith(with({{"global_batch_size", 10}, {"micro_batch_size", 3}}),
                        {"p.json", "global_batch_size=10", "micro_batch_size*dp = 6"}));
  EXPECT_TRUE(FailsWith(with({{"global_batch_size", 7}}), {"global_batch_size=7"}));
  EXPECT_TRUE(FailsWith(with({{"schedule", "interleaved"}, {"pp", 1}, {"virtual_stages", 2}}),
                        {"p.json", "interleaved", "pp >= 2"}));
  EXPECT_TRUE(FailsWith(with({{"schedule", "interleaved"}}), {"p.json", "virtual_stages >= 2"}));
  EXPECT_TRUE(FailsWith(with({{"schedule", "interleaved"}, {"virtual_stages", 2},
                              {"global_batch_size", 6}}),
                        {"p.json", "micro-batches (3)", "pp=2"}));
  EXPECT_TRUE(FailsWith(with({{"virtual_stages", 2}}), {"p.json", "virtual_stages=2"}));
  EXPECT_TRUE(FailsWith(with({{"schedule", "naive"}}), {"p.json", "naive", "= 4"}));
  EXPECT_TRUE(FailsWith(with({{"schedule", "zb-h1"}, {"pp", 1}}),
                        {"p.json", "schedule zb-h1", "pp >= 2", "pp=1"}));
  EXPECT_TRUE(with({{"schedule", "zb-h1"}}).ok());
  EXPECT_TRUE(FailsWith(with({{"schedule", "zb-v"}}),
                        {"p.json", "schedule zb-v", "virtual_stages must be 2", "virtual_stages=1"}));
  EXPECT_TRUE(FailsWith(with({{"schedule", "zb-v"}, {"virtual_stages", 3}}),
                        {"p.json", "schedule zb-v", "virtual_stages=3"}));
  EXPECT_TRUE(FailsWith(with({{"schedule", "zb-v"}, {"virtual_stages", 2}, {"pp", 1}}),
                        {"p.json", "schedule zb-v", "pp >= 2", "pp=1"}));
  EXPECT_TRUE(with({{"schedule", "zb-v"}, {"virtual_stages", 2}}).ok());
  // DualPipe: deepseek-ai/DualPipe's DualPipe.step asserts an even rank count and an even
  // number of micro-batches, at least twice the ranks.
  EXPECT_TRUE(with({{"schedule", "dualpipe"}, {"virtual_stages", 2}}).ok());
  EXPECT_TRUE(FailsWith(with({{"schedule", "dualpipe"}}),
                        {"p.json", "schedule dualpipe", "virtual_stages must be 2",
                         "virtual_stages=1"}));
  EXPECT_TRUE(FailsWith(with({{"schedule", "dualpipe"}, {"virtual_stages", 2}, {"pp", 3}}),
                        {"p.json", "schedule dualpipe", "even pp >= 2", "pp=3"}));
  EXPECT_TRUE(FailsWith(with({{"schedule", "dualpipe"}, {"virtual_stages", 2}, {"pp", 1}}),
                        {"p.json", "schedule dualpipe", "pp=1"}));
  EXPECT_TRUE(FailsWith(with({{"schedule", "dualpipe"}, {"virtual_stages", 2},
                              {"global_batch_size", 6}}),
                        {"p.json", "schedule dualpipe", "= 3)", "2*pp = 4"}));
  EXPECT_TRUE(FailsWith(with({{"schedule", "dualpipe"}, {"virtual_stages", 2}, {"pp", 4}}),
                        {"p.json", "schedule dualpipe", "= 4)", "2*pp = 8"}));
  EXPECT_TRUE(FailsWith(with({{"offload", "optimizer+params"}, {"zero_stage", 1}}),
                        {"p.json", "offload optimizer+params", "zero_stage 3", "zero_stage 1"}));
  EXPECT_TRUE(FailsWith(with({{"offload_device", "nvme"}}),
                        {"p.json", "offload_device nvme", "offload none"}));
  EXPECT_TRUE(FailsWith(with({{"offload_device", "disk"}}), {"p.json", "offload_device", "disk"}));
  EXPECT_TRUE(with({{"offload", "optimizer+params"}, {"zero_stage", 3},
                    {"offload_device", "nvme"}}).ok());
  EXPECT_TRUE(FailsWith(with({{"sequence_parallel", true}, {"tp", 1}}),
                        {"p.json", "sequence_parallel", "tp >= 2"}));
  EXPECT_TRUE(FailsWith(with({{"offload", "optimizer"}, {"optimizer", "sgd"}}),
                        {"p.json", "offload", "sgd"}));
  EXPECT_TRUE(FailsWith(with({{"layers_per_stage", Json::array({1, 2, 3})}}),
                        {"p.json", "layers_per_stage has 3 entries", "= 2"}));
  EXPECT_TRUE(FailsWith(with({{"recompute_num_layers", 2}}),
                        {"p.json", "recompute_num_layers=2", "needs recompute full",
                         "recompute none"}));
  EXPECT_TRUE(FailsWith(with({{"recompute_num_layers", 2}, {"recompute", "selective"}}),
                        {"recompute_num_layers=2", "recompute selective"}));
  EXPECT_TRUE(with({{"recompute_num_layers", 2}, {"recompute", "full"}}).ok());
  // Hybrid sharding: over a divisor of dp*cp, with ZeRO, without experts.
  EXPECT_TRUE(FailsWith(with({{"dp", 4}, {"zero_shard_size", 2}}),
                        {"p.json", "zero_shard_size=2 needs zero_stage >= 1"}));
  EXPECT_TRUE(FailsWith(with({{"dp", 4}, {"zero_stage", 3}, {"zero_shard_size", 3}}),
                        {"p.json", "zero_shard_size=3 does not divide dp*cp = 4"}));
  EXPECT_TRUE(FailsWith(with({{"dp", 4}, {"ep", 2}, {"zero_stage", 1}, {"zero_shard_size", 2}}),
                        {"p.json", "zero_shard_size=2 with ep=2 is not modelled"}));
  EXPECT_TRUE(with({{"dp", 4}, {"zero_stage", 3}, {"zero_shard_size", 2}}).ok());
  EXPECT_TRUE(with({{"dp", 4}, {"ep", 2}, {"zero_stage", 1}, {"zero_shard_size", 4}}).ok());
  EXPECT_TRUE(FailsWith(with({{"partition_activations", true}, {"tp", 2}}),
                        {"p.json", "partition_activations needs recompute full"}));
  EXPECT_TRUE(FailsWith(with({{"partition_activations", true}, {"recompute", "full"}, {"tp", 1}}),
                        {"partition_activations needs tp >= 2"}));
  EXPECT_TRUE(FailsWith(with({{"partition_activations", true}, {"recompute", "full"}, {"tp", 2},
                              {"sequence_parallel", true}}),
                        {"partition_activations with sequence_parallel"}));
  EXPECT_TRUE(
      with({{"partition_activations", true}, {"recompute", "full"}, {"tp", 2}}).ok());
  EXPECT_TRUE(FailsWith(with({{"offload_checkpoints", true}, {"recompute", "selective"}}),
                        {"p.json", "offload_checkpoints needs recompute full",
                         "recompute selective"}));
  EXPECT_TRUE(with({{"offload_checkpoints", true}, {"recompute", "full"}}).ok());
  const std::int64_t big = PlanLimits::kMaxDegree;
  EXPECT_TRUE(FailsWith(with({{"tp", big}, {"pp", big}, {"dp", big}}),
                        {"p.json", "16777216*16777216*16777216", "exceeds"}));
  EXPECT_TRUE(with({{"schedule", "interleaved"}, {"virtual_stages", 2}}).ok());
}

TEST(PlanChecks, AgainstModelAndWorld) {
  auto model = model_from_json(tiny_model(), "m.json");  // 4 layers, 4 heads, ffn 256
  ASSERT_TRUE(model.ok());
  auto plan = [](std::int64_t tp, std::int64_t pp) {
    Plan p;
    p.tp = tp;
    p.pp = pp;
    return p;
  };
  const ExitCode inf = ExitCode::kInfeasible;
  EXPECT_TRUE(FailsWith(check_plan_fits_model(plan(3, 1), *model),
                        {"tp=3", "num_attention_heads=4"}, inf));
  ModelSpec gqa = *model;
  gqa.num_kv_heads = 2;
  EXPECT_TRUE(FailsWith(check_plan_fits_model(plan(4, 1), gqa), {"tp=4", "num_kv_heads=2"}, inf));
  ModelSpec odd_ffn = *model;
  odd_ffn.ffn_hidden_size = 255;
  EXPECT_TRUE(FailsWith(check_plan_fits_model(plan(2, 1), odd_ffn),
                        {"tp=2", "ffn_hidden_size=255"}, inf));
  ModelSpec odd_seq = *model;
  odd_seq.seq_len = 63;
  Plan sp = plan(2, 1);
  sp.sequence_parallel = true;
  EXPECT_TRUE(FailsWith(check_plan_fits_model(sp, odd_seq), {"tp=2", "seq_len=63"}, inf));
  Plan ep = plan(1, 1);
  ep.dp = 2;
  ep.ep = 2;
  EXPECT_TRUE(FailsWith(check_plan_fits_model(ep, *model), {"ep=2", "mixture-of-experts"}, inf));
  ModelSpec moe = *model;
  moe.num_experts = 3;
  EXPECT_TRUE(FailsWith(check_plan_fits_model(ep, moe), {"ep=2", "num_experts=3"}, inf));
  EXPECT_TRUE(FailsWith(check_plan_fits_model(plan(1, 3), *model),
                        {"num_layers=4", "pp*virtual_stages = 3"}, inf));
  Plan lps = plan(1, 2);
  lps.layers_per_stage = {1, 2};
  EXPECT_TRUE(FailsWith(check_plan_fits_model(lps, *model), {"sums to 3", "num_layers=4"}, inf));
  // Full recompute of more layers than a chunk holds (2 per stage here).
  Plan rc = plan(1, 2);
  rc.recompute = Recompute::kFull;
  rc.recompute_num_layers = 3;
  EXPECT_TRUE(FailsWith(check_plan_fits_model(rc, *model),
                        {"recompute_num_layers=3", "largest model chunk (2)"}, inf));
  rc.recompute_num_layers = 2;
  EXPECT_TRUE(check_plan_fits_model(rc, *model).ok());
  Plan pa = plan(2, 1);
  pa.recompute = Recompute::kFull;
  pa.partition_activations = true;
  EXPECT_TRUE(FailsWith(check_plan_fits_model(pa, odd_seq),
                        {"partition_activations: tp=2", "seq_len=63"}, inf));
  EXPECT_TRUE(check_plan_fits_model(pa, *model).ok());
  EXPECT_TRUE(check_plan_fits_model(plan(2, 2), *model).ok());
  EXPECT_TRUE(FailsWith(check_plan_world_size(plan(2, 2), 8), {"2*2*1 = 4", "8 are available"},
                        inf));
}

TEST(PlanLoader, ContextParallelRoundTripsAndDefaultsToOne) {
  // Absent: cp = 1, and the written JSON has no "cp" (plans without CP keep their JSON).
  auto one = plan_from_json(basic_plan(), "p.json");
  ASSERT_TRUE(one.ok()) << one.status().message();
  EXPECT_EQ(one->cp, 1);
  EXPECT_EQ(one->world_size(), 8);
  EXPECT_FALSE(plan_to_json(*one).contains("cp"));
  EXPECT_EQ(describe(*one).find("cp="), std::string::npos) << describe(*one);
  // Given: read, counted in the world size and the dense-gradient group, written back.
  Json j = basic_plan();
  j["cp"] = 4;
  auto four = plan_from_json(j, "p.json");
  ASSERT_TRUE(four.ok()) << four.status().message();
  EXPECT_EQ(four->cp, 4);
  EXPECT_EQ(four->world_size(), 2 * 4 * 2 * 2);
  EXPECT_EQ(four->dp_cp(), 8);
  EXPECT_EQ(four->num_micro_batches(), 8 / (1 * 2));  // M = global / (mbs * dp): cp splits sequences
  EXPECT_EQ(plan_to_json(*four).at("cp"), 4);
  auto back = plan_from_json(plan_to_json(*four), "again");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(plan_to_json(*back), plan_to_json(*four));
  EXPECT_NE(describe(*four).find("tp=2 cp=4 pp=2"), std::string::npos) << describe(*four);
  // The world-size limit counts cp.
  const std::int64_t big = PlanLimits::kMaxDegree;
  j["cp"] = big;
  EXPECT_TRUE(FailsWith(plan_from_json(j, "p.json"),
                        {"p.json", "tp*cp*pp*dp = 2*16777216*2*2", "exceeds"}));
}

TEST(PlanLoader, Fp8RecipeRoundTripsAndNeedsFp8) {
  Json j = basic_plan();
  j["fp8"] = true;
  auto plain = plan_from_json(j, "p.json");
  ASSERT_TRUE(plain.ok()) << plain.status().message();
  EXPECT_EQ(plain->fp8_scaling, Fp8Scaling::kCurrent);
  EXPECT_FALSE(plain->fp8_weight_cache);
  EXPECT_FALSE(plan_to_json(*plain).contains("fp8_scaling"));  // written only when set
  EXPECT_FALSE(plan_to_json(*plain).contains("fp8_weight_cache"));
  j["fp8_scaling"] = "delayed";
  j["fp8_weight_cache"] = true;
  auto te = plan_from_json(j, "p.json");
  ASSERT_TRUE(te.ok()) << te.status().message();
  EXPECT_EQ(te->fp8_scaling, Fp8Scaling::kDelayed);
  EXPECT_TRUE(te->fp8_weight_cache);
  EXPECT_EQ(plan_to_json(*te).at("fp8_scaling"), "delayed");
  EXPECT_NE(describe(*te).find(" fp8-delayed-wcache"), std::string::npos) << describe(*te);
  auto back = plan_from_json(plan_to_json(*te), "again");
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(plan_to_json(*back), plan_to_json(*te));
  j["fp8_scaling"] = "block";
  auto mx = plan_from_json(j, "p.json");
  ASSERT_TRUE(mx.ok());
  EXPECT_EQ(mx->fp8_scaling, Fp8Scaling::kBlock);
  // NVFP4 and FP8 attention: read, written, described, and refused by name without fp8.
  j["fp8_scaling"] = "nvfp4";
  j["fp8_attention"] = true;
  auto nv = plan_from_json(j, "p.json");
  ASSERT_TRUE(nv.ok()) << nv.status().message();
  EXPECT_EQ(nv->fp8_scaling, Fp8Scaling::kNvfp4);
  EXPECT_TRUE(nv->fp8_attention);
  EXPECT_EQ(plan_to_json(*nv).at("fp8_scaling"), "nvfp4");
  EXPECT_EQ(plan_to_json(*nv).at("fp8_attention"), true);
  EXPECT_NE(describe(*nv).find(" fp8-nvfp4-wcache-attention"), std::string::npos)
      << describe(*nv);
  EXPECT_FALSE(plan_to_json(*plain).contains("fp8_attention"));  // written only when set
  j["fp8_attention"] = "yes";
  EXPECT_TRUE(FailsWith(plan_from_json(j, "p.json"), {"p.json", "fp8_attention"}));
  j.erase("fp8_attention");
  j["fp8_scaling"] = "rowwise";
  EXPECT_TRUE(FailsWith(plan_from_json(j, "p.json"), {"p.json", "fp8_scaling", "rowwise"}));
  j["fp8_scaling"] = "delayed";
  j["fp8"] = false;
  EXPECT_TRUE(FailsWith(plan_from_json(j, "p.json"), {"p.json", "fp8_weight_cache", "fp8 false"}));
  j.erase("fp8_weight_cache");
  EXPECT_TRUE(FailsWith(plan_from_json(j, "p.json"), {"p.json", "fp8_scaling", "fp8 false"}));
}

// zero3_recompute_gather: written only when kept, shown in the description, refused by name
// when the value is unknown or the plan does not shard parameters.
TEST(PlanLoader, Zero3RecomputeGatherRoundTripAndErrors) {
  Json j = basic_plan();
  j["zero_stage"] = 3;
  auto again = plan_from_json(j, "p.json");
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(again->zero3_recompute_gather, ZeroRecomputeGather::kAgain);
  EXPECT_FALSE(plan_to_json(*again).contains("zero3_recompute_gather"));
  j["zero3_recompute_gather"] = "kept";
  auto kept = plan_from_json(j, "p.json");
  ASSERT_TRUE(kept.ok()) << kept.status().message();
  EXPECT_EQ(kept->zero3_recompute_gather, ZeroRecomputeGather::kKept);
  EXPECT_EQ(plan_to_json(*kept).at("zero3_recompute_gather"), "kept");
  EXPECT_NE(describe(*kept).find(" zero3-recompute-gather=kept"), std::string::npos);
  auto back = plan_from_json(plan_to_json(*kept), "again");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(plan_to_json(*back), plan_to_json(*kept));
  j["zero3_recompute_gather"] = "twice";
  EXPECT_TRUE(FailsWith(plan_from_json(j, "p.json"), {"p.json", "zero3_recompute_gather", "twice"}));
  j["zero3_recompute_gather"] = "kept";
  j["zero_stage"] = 1;
  EXPECT_TRUE(FailsWith(plan_from_json(j, "p.json"),
                        {"p.json", "zero3_recompute_gather=kept", "zero_stage 1"}));
}

// zero3_backward_prefetch: written only when before-reduce, shown in the description, refused
// by name when the value is unknown or the plan does not shard parameters.
TEST(PlanLoader, Zero3BackwardPrefetchRoundTripAndErrors) {
  Json j = basic_plan();
  j["zero_stage"] = 3;
  auto after = plan_from_json(j, "p.json");
  ASSERT_TRUE(after.ok()) << after.status().message();
  EXPECT_EQ(after->zero3_backward_prefetch, ZeroBackwardPrefetch::kAfterReduce);
  EXPECT_FALSE(plan_to_json(*after).contains("zero3_backward_prefetch"));
  j["zero3_backward_prefetch"] = "before-reduce";
  auto before = plan_from_json(j, "p.json");
  ASSERT_TRUE(before.ok()) << before.status().message();
  EXPECT_EQ(before->zero3_backward_prefetch, ZeroBackwardPrefetch::kBeforeReduce);
  EXPECT_EQ(plan_to_json(*before).at("zero3_backward_prefetch"), "before-reduce");
  EXPECT_NE(describe(*before).find(" zero3-backward-prefetch=before-reduce"), std::string::npos);
  auto back = plan_from_json(plan_to_json(*before), "again");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(plan_to_json(*back), plan_to_json(*before));
  j["zero3_backward_prefetch"] = "early";
  EXPECT_TRUE(FailsWith(plan_from_json(j, "p.json"), {"p.json", "zero3_backward_prefetch", "early"}));
  j["zero3_backward_prefetch"] = "before-reduce";
  j["zero_stage"] = 0;
  EXPECT_TRUE(FailsWith(plan_from_json(j, "p.json"),
                        {"p.json", "zero3_backward_prefetch=before-reduce", "zero_stage 0"}));
}

// interleaved_warmup: written only when torch, shown in the description, refused by name when
// the value is unknown or the schedule is not interleaved.
TEST(PlanLoader, InterleavedWarmupRoundTripAndErrors) {
  Json j = basic_plan();
  j["pp"] = 2;
  j["schedule"] = "interleaved";
  j["virtual_stages"] = 2;
  auto m = plan_from_json(j, "p.json");
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->interleaved_warmup, InterleavedWarmup::kMegatron);
  EXPECT_FALSE(plan_to_json(*m).contains("interleaved_warmup"));
  j["interleaved_warmup"] = "torch";
  auto t = plan_from_json(j, "p.json");
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(t->interleaved_warmup, InterleavedWarmup::kTorch);
  EXPECT_EQ(plan_to_json(*t).at("interleaved_warmup"), "torch");
  EXPECT_NE(describe(*t).find(" interleaved-warmup=torch"), std::string::npos);
  auto back = plan_from_json(plan_to_json(*t), "again");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(plan_to_json(*back), plan_to_json(*t));
  j["interleaved_warmup"] = "pytorch";
  EXPECT_TRUE(FailsWith(plan_from_json(j, "p.json"), {"p.json", "interleaved_warmup", "pytorch"}));
  j["interleaved_warmup"] = "torch";
  j["schedule"] = "1f1b";
  j["virtual_stages"] = 1;
  EXPECT_TRUE(FailsWith(plan_from_json(j, "p.json"),
                        {"p.json", "interleaved_warmup=torch", "schedule 1f1b"}));
}

// zero3_copies: written only when set, shown in the description, refused by name when the value
// is unknown, the plan does not shard parameters, or DeepSpeed's per-tensor gathers are named.
TEST(PlanLoader, Zero3CopiesRoundTripAndErrors) {
  Json j = basic_plan();
  j["zero_stage"] = 3;
  auto none = plan_from_json(j, "p.json");
  ASSERT_TRUE(none.ok()) << none.status().message();
  EXPECT_EQ(none->zero3_copies, ZeroCopies::kNone);
  EXPECT_FALSE(plan_to_json(*none).contains("zero3_copies"));
  for (const auto& [name, value] : {std::pair{"flat-param", ZeroCopies::kFlatParam},
                                    std::pair{"per-param", ZeroCopies::kPerParam}})
    testing::expect_plan_choice_loads(j, &Plan::zero3_copies, "zero3_copies", name, value,
                                      std::string(" zero3-copies=") + name);
  j["zero3_copies"] = "flat";
  EXPECT_TRUE(FailsWith(plan_from_json(j, "p.json"), {"p.json", "zero3_copies", "flat"}));
  j["zero3_copies"] = "per-param";
  j["zero3_gather"] = "per-tensor";
  EXPECT_TRUE(FailsWith(plan_from_json(j, "p.json"),
                        {"p.json", "zero3_copies=per-param", "zero3_gather per-tensor"}));
  j.erase("zero3_gather");
  j["zero_stage"] = 2;
  EXPECT_TRUE(FailsWith(plan_from_json(j, "p.json"),
                        {"p.json", "zero3_copies=per-param", "zero_stage 2"}));
}

// A boolean plan field `field` (Plan::*member): false and not written when absent; when true,
// read, written, shown in the description as `described`, and read back the same; a
// non-boolean refused naming the field. Leaves `j` with the field true.
void expect_bool_field_round_trips(Json& j, const std::string& field, bool Plan::*member,
                                   const std::string& described) {
  SCOPED_TRACE(field);
  auto plain = plan_from_json(j, "p.json");
  ASSERT_TRUE(plain.ok()) << plain.status().message();
  EXPECT_FALSE((*plain).*member);
  EXPECT_FALSE(plan_to_json(*plain).contains(field));
  j[field] = true;
  auto set = plan_from_json(j, "p.json");
  ASSERT_TRUE(set.ok()) << set.status().message();
  EXPECT_TRUE((*set).*member);
  EXPECT_EQ(plan_to_json(*set).at(field), true);
  EXPECT_NE(describe(*set).find(described), std::string::npos) << describe(*set);
  auto back = plan_from_json(plan_to_json(*set), "again");
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(plan_to_json(*back), plan_to_json(*set));
  j[field] = "yes";
  EXPECT_TRUE(FailsWith(plan_from_json(j, "p.json"), {"p.json", field}));
  j[field] = true;
}

// fp8_all_gather: written only when set, shown in the description, refused without fp8 or
// without sharded weights (ZeRO 1, 2 or 3).
TEST(PlanLoader, Fp8AllGatherRoundTripsAndNeedsFp8AndSharding) {
  Json j = basic_plan();
  j["fp8"] = true;
  for (int stage : {1, 2, 3}) {
    j["zero_stage"] = stage;
    expect_bool_field_round_trips(j, "fp8_all_gather", &Plan::fp8_all_gather, " fp8-gather");
    j.erase("fp8_all_gather");
  }
  j["fp8_all_gather"] = true;
  j["zero_stage"] = 0;
  EXPECT_TRUE(FailsWith(plan_from_json(j, "p.json"), {"fp8_all_gather", "zero_stage 0"}));
  j["zero_stage"] = 3;
  j["fp8"] = false;
  EXPECT_TRUE(FailsWith(plan_from_json(j, "p.json"), {"fp8_all_gather", "fp8 false"}));
}

// zero3_gather: written only when per-tensor, shown in the description, refused by name when
// the value is unknown or the plan does not shard parameters.
TEST(PlanLoader, Zero3GatherRoundTripAndErrors) {
  Json j = basic_plan();
  j["zero_stage"] = 3;
  auto flat = plan_from_json(j, "p.json");
  ASSERT_TRUE(flat.ok()) << flat.status().message();
  EXPECT_EQ(flat->zero3_gather, ZeroGather::kFlat);
  EXPECT_FALSE(plan_to_json(*flat).contains("zero3_gather"));
  j["zero3_gather"] = "per-tensor";
  auto per = plan_from_json(j, "p.json");
  ASSERT_TRUE(per.ok()) << per.status().message();
  EXPECT_EQ(per->zero3_gather, ZeroGather::kPerTensor);
  EXPECT_EQ(plan_to_json(*per).at("zero3_gather"), "per-tensor");
  EXPECT_NE(describe(*per).find(" zero3-gather=per-tensor"), std::string::npos) << describe(*per);
  auto back = plan_from_json(plan_to_json(*per), "again");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(plan_to_json(*back), plan_to_json(*per));
  j["zero3_gather"] = "bucketed";
  EXPECT_TRUE(FailsWith(plan_from_json(j, "p.json"), {"p.json", "zero3_gather", "bucketed"}));
  j["zero3_gather"] = "per-tensor";
  j["zero_stage"] = 1;
  EXPECT_TRUE(FailsWith(plan_from_json(j, "p.json"),
                        {"p.json", "zero3_gather=per-tensor", "zero_stage 1"}));
}

// zero1_collectives: written only when per-rank, shown in the description, refused by name when
// the value is unknown or the plan is not ZeRO-1.
TEST(PlanLoader, Zero1CollectivesRoundTripAndErrors) {
  Json j = basic_plan();
  j["zero_stage"] = 1;
  auto flat = plan_from_json(j, "p.json");
  ASSERT_TRUE(flat.ok()) << flat.status().message();
  EXPECT_EQ(flat->zero1_collectives, ZeroCollectives::kFlat);
  EXPECT_FALSE(plan_to_json(*flat).contains("zero1_collectives"));
  j["zero1_collectives"] = "per-rank";
  auto per = plan_from_json(j, "p.json");
  ASSERT_TRUE(per.ok()) << per.status().message();
  EXPECT_EQ(per->zero1_collectives, ZeroCollectives::kPerRank);
  EXPECT_EQ(plan_to_json(*per).at("zero1_collectives"), "per-rank");
  EXPECT_NE(describe(*per).find(" zero1-collectives=per-rank"), std::string::npos)
      << describe(*per);
  auto back = plan_from_json(plan_to_json(*per), "again");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(plan_to_json(*back), plan_to_json(*per));
  j["zero1_collectives"] = "per-tensor";
  EXPECT_TRUE(
      FailsWith(plan_from_json(j, "p.json"), {"p.json", "zero1_collectives", "per-tensor"}));
  j["zero1_collectives"] = "per-rank";
  for (int stage : {0, 2, 3}) {
    j["zero_stage"] = stage;
    EXPECT_TRUE(FailsWith(plan_from_json(j, "p.json"),
                          {"p.json", "zero1_collectives=per-rank",
                           "zero_stage " + std::to_string(stage)}));
  }
}

// zero1_collectives all-reduce (DeepSpeed's BF16_Optimizer) and grad_accumulation_pass
// (cast-add, DeepSpeed's; add, nanotron's): written only when set, shown in the description,
// round-trip; refused by name where the plan is not ZeRO-1 (all-reduce), shards gradients, keeps
// fp32 weights or compute-precision gradients (the pass), or the value is unknown.
TEST(PlanLoader, AllReduceZero1AndGradAccumulationPassRoundTripAndErrors) {
  // The plan reads, holds the pass, and writes it back under its name.
  auto expect_pass = [](const Json& plan, GradAccumulationPass pass) {
    auto p = plan_from_json(plan, "p.json");
    ASSERT_TRUE(p.ok()) << p.status().message();
    EXPECT_EQ(p->grad_accumulation_pass, pass);
    EXPECT_EQ(plan_to_json(*p).at("grad_accumulation_pass"), std::string(to_string(pass)));
  };
  Json j = basic_plan();
  j["zero_stage"] = 1;
  j["precision"] = "bf16";
  j["grad_precision"] = "fp32";
  auto none = plan_from_json(j, "p.json");
  ASSERT_TRUE(none.ok()) << none.status().message();
  EXPECT_EQ(none->grad_accumulation_pass, GradAccumulationPass::kNone);
  EXPECT_FALSE(plan_to_json(*none).contains("grad_accumulation_pass"));
  j["zero1_collectives"] = "all-reduce";
  j["grad_accumulation_pass"] = "cast-add";
  auto ds = plan_from_json(j, "p.json");
  ASSERT_TRUE(ds.ok()) << ds.status().message();
  EXPECT_EQ(ds->zero1_collectives, ZeroCollectives::kAllReduce);
  EXPECT_EQ(ds->grad_accumulation_pass, GradAccumulationPass::kCastAdd);
  EXPECT_EQ(plan_to_json(*ds).at("zero1_collectives"), "all-reduce");
  EXPECT_EQ(plan_to_json(*ds).at("grad_accumulation_pass"), "cast-add");
  EXPECT_NE(describe(*ds).find(" zero1-collectives=all-reduce"), std::string::npos)
      << describe(*ds);
  EXPECT_NE(describe(*ds).find(" grad-accumulation-pass=cast-add"), std::string::npos)
      << describe(*ds);
  auto back = plan_from_json(plan_to_json(*ds), "again");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(plan_to_json(*back), plan_to_json(*ds));
  j["zero_stage"] = 2;
  EXPECT_TRUE(FailsWith(plan_from_json(j, "p.json"),
                        {"p.json", "zero1_collectives=all-reduce", "zero_stage 2"}));
  j.erase("zero1_collectives");
  EXPECT_TRUE(FailsWith(plan_from_json(j, "p.json"),
                        {"p.json", "grad_accumulation_pass=cast-add", "zero_stage 2"}));
  j["zero_stage"] = 0;
  ASSERT_TRUE(plan_from_json(j, "p.json").ok());
  j["grad_precision"] = "compute";
  EXPECT_TRUE(FailsWith(plan_from_json(j, "p.json"),
                        {"p.json", "grad_accumulation_pass=cast-add", "grad_precision compute"}));
  j["grad_precision"] = "fp32";
  j["precision"] = "fp32";
  EXPECT_TRUE(FailsWith(plan_from_json(j, "p.json"),
                        {"p.json", "grad_accumulation_pass=cast-add", "precision fp32"}));
  j["precision"] = "fp16";
  ASSERT_TRUE(plan_from_json(j, "p.json").ok());
  j["grad_accumulation_pass"] = "add";  // nanotron's one add per tensor
  expect_pass(j, GradAccumulationPass::kAdd);
  // autograd (PyTorch's AccumulateGrad into .grad) keeps the gradients in the compute precision.
  j["grad_accumulation_pass"] = "autograd";
  EXPECT_TRUE(FailsWith(plan_from_json(j, "p.json"),
                        {"p.json", "grad_accumulation_pass=autograd", "grad_precision fp32"}));
  j["grad_precision"] = "compute";
  expect_pass(j, GradAccumulationPass::kAutograd);
  j["zero_stage"] = 3;
  EXPECT_TRUE(FailsWith(plan_from_json(j, "p.json"),
                        {"p.json", "grad_accumulation_pass=autograd", "zero_stage 3"}));
  // shard-add (the executors' ZeRO-2/3 gradient shard) needs ZeRO 2 or 3, any precision.
  j["grad_accumulation_pass"] = "shard-add";
  expect_pass(j, GradAccumulationPass::kShardAdd);
  j["zero_stage"] = 1;
  EXPECT_TRUE(FailsWith(plan_from_json(j, "p.json"),
                        {"p.json", "grad_accumulation_pass=shard-add", "zero_stage 1"}));
  j["zero_stage"] = 0;
  j["grad_precision"] = "fp32";
  j["grad_accumulation_pass"] = "yes";
  EXPECT_TRUE(FailsWith(plan_from_json(j, "p.json"), {"p.json", "grad_accumulation_pass", "yes"}));
  j["grad_accumulation_pass"] = true;  // the boolean of earlier versions is refused by name
  EXPECT_TRUE(FailsWith(plan_from_json(j, "p.json"), {"p.json", "grad_accumulation_pass"}));
}

// elementwise: written only when eager, shown in the description, refused by name when the
// value is unknown.
TEST(PlanLoader, ElementwiseRoundTripAndErrors) {
  Json j = basic_plan();
  auto fused = plan_from_json(j, "p.json");
  ASSERT_TRUE(fused.ok()) << fused.status().message();
  EXPECT_EQ(fused->elementwise, Elementwise::kFused);
  EXPECT_FALSE(plan_to_json(*fused).contains("elementwise"));
  j["elementwise"] = "eager";
  auto eager = plan_from_json(j, "p.json");
  ASSERT_TRUE(eager.ok()) << eager.status().message();
  EXPECT_EQ(eager->elementwise, Elementwise::kEager);
  EXPECT_EQ(plan_to_json(*eager).at("elementwise"), "eager");
  EXPECT_NE(describe(*eager).find(" eager"), std::string::npos) << describe(*eager);
  auto back = plan_from_json(plan_to_json(*eager), "again");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(plan_to_json(*back), plan_to_json(*eager));
  j["elementwise"] = "compiled";
  EXPECT_TRUE(FailsWith(plan_from_json(j, "p.json"), {"p.json", "elementwise", "compiled"}));
  j["elementwise"] = "eager-swiglu";
  auto glu = plan_from_json(j, "p.json");
  ASSERT_TRUE(glu.ok()) << glu.status().message();
  EXPECT_EQ(glu->elementwise, Elementwise::kEagerSwiglu);
  EXPECT_EQ(plan_to_json(*glu).at("elementwise"), "eager-swiglu");
  EXPECT_NE(describe(*glu).find(" eager-swiglu"), std::string::npos) << describe(*glu);
}

// ddp_bucket_copy: written only when true, shown in the description, refused where the plan
// shards gradients (DDP runs with ZeRO 0 or 1).
TEST(PlanLoader, DdpBucketCopyRoundTripAndErrors) {
  Json j = basic_plan();
  auto none = plan_from_json(j, "p.json");
  ASSERT_TRUE(none.ok()) << none.status().message();
  EXPECT_FALSE(none->ddp_bucket_copy);
  EXPECT_FALSE(plan_to_json(*none).contains("ddp_bucket_copy"));
  j["ddp_bucket_copy"] = true;
  for (int zero : {0, 1}) {
    j["zero_stage"] = zero;
    auto copy = plan_from_json(j, "p.json");
    ASSERT_TRUE(copy.ok()) << copy.status().message();
    EXPECT_TRUE(copy->ddp_bucket_copy);
    EXPECT_EQ(plan_to_json(*copy).at("ddp_bucket_copy"), true);
    EXPECT_NE(describe(*copy).find(" ddp-bucket-copy"), std::string::npos) << describe(*copy);
  }
  j["zero_stage"] = 2;
  EXPECT_TRUE(FailsWith(plan_from_json(j, "p.json"),
                        {"p.json", "ddp_bucket_copy=true", "zero_stage 2"}));
  j["zero_stage"] = 1;
  j["ddp_bucket_copy"] = "yes";
  EXPECT_TRUE(FailsWith(plan_from_json(j, "p.json"), {"p.json", "ddp_bucket_copy"}));
}

// pipeline_scatter_gather: written only when true, shown in the description, refused without
// tp > 1 and pp > 1 or with sequence parallelism; a non-boolean refused naming the field.
TEST(PlanLoader, PipelineScatterGatherRoundTripAndErrors) {
  Json j = basic_plan();
  j["tp"] = 2;
  j["pp"] = 2;
  j["sequence_parallel"] = false;
  expect_bool_field_round_trips(j, "pipeline_scatter_gather", &Plan::pipeline_scatter_gather,
                                " pp-scatter-gather");
  j["tp"] = 1;
  EXPECT_TRUE(FailsWith(plan_from_json(j, "p.json"), {"p.json", "pipeline_scatter_gather=true", "tp 1"}));
  j["tp"] = 2;
  j["pp"] = 1;
  EXPECT_TRUE(FailsWith(plan_from_json(j, "p.json"), {"p.json", "pipeline_scatter_gather=true", "pp 1"}));
  j["pp"] = 2;
  j["sequence_parallel"] = true;
  EXPECT_TRUE(FailsWith(plan_from_json(j, "p.json"),
                        {"p.json", "pipeline_scatter_gather=true", "sequence_parallel true"}));
}

TEST(PlanLoader, AttentionKernelAndCrossEntropyRoundTrip) {
  auto generic = plan_from_json(basic_plan(), "p.json");
  ASSERT_TRUE(generic.ok()) << generic.status().message();
  EXPECT_EQ(generic->attention_kernel, AttentionKernel::kGeneric);
  EXPECT_FALSE(plan_to_json(*generic).contains("attention_kernel"));  // plans keep their JSON
  Json j = basic_plan();
  for (const auto& [name, kernel] : {std::pair{"flash2", AttentionKernel::kFlash2},
                                     std::pair{"flash1", AttentionKernel::kFlash1}})
    testing::expect_plan_choice_loads(j, &Plan::attention_kernel, "attention_kernel", name, kernel,
                                      std::string(" attention=") + name);
  j["attention_kernel"] = "flash2";
  j["cross_entropy"] = "unfused";
  auto ce = plan_from_json(j, "p.json");
  ASSERT_TRUE(ce.ok()) << ce.status().message();
  EXPECT_EQ(ce->cross_entropy, CrossEntropy::kUnfused);
  EXPECT_EQ(plan_to_json(*ce).at("cross_entropy"), "unfused");
  EXPECT_FALSE(plan_to_json(*generic).contains("cross_entropy"));
  EXPECT_NE(describe(*ce).find(" unfused-ce"), std::string::npos) << describe(*ce);
  j["cross_entropy"] = "cast";
  auto cast = plan_from_json(j, "p.json");
  ASSERT_TRUE(cast.ok()) << cast.status().message();
  EXPECT_EQ(cast->cross_entropy, CrossEntropy::kCast);
  EXPECT_EQ(plan_to_json(*cast).at("cross_entropy"), "cast");
  EXPECT_NE(describe(*cast).find(" cast-ce"), std::string::npos) << describe(*cast);
  j["cross_entropy"] = "chunked";
  EXPECT_TRUE(FailsWith(plan_from_json(j, "p.json"), {"p.json", "cross_entropy", "chunked"}));
  j.erase("cross_entropy");
  j["attention_kernel"] = "xformers";
  EXPECT_TRUE(FailsWith(plan_from_json(j, "p.json"), {"p.json", "attention_kernel", "xformers"}));
  j["attention_kernel"] = "cudnn";
  j["attention"] = "unfused";
  EXPECT_TRUE(FailsWith(plan_from_json(j, "p.json"),
                        {"p.json", "attention_kernel=cudnn", "attention=unfused"}));
}

TEST(PlanChecks, ContextParallelAgainstModelAndWorld) {
  ModelSpec m = *model_from_json(tiny_model(), "m.json");  // seq_len 64
  Plan p;
  p.tp = 2;
  p.cp = 4;
  p.dp = 2;
  p.global_batch_size = 2;
  const ExitCode inf = ExitCode::kInfeasible;
  EXPECT_TRUE(check_plan_fits_model(p, m).ok());
  // Load-balanced causal chunks: 2*cp of them per sequence.
  ModelSpec odd = m;
  odd.seq_len = 60;
  EXPECT_TRUE(FailsWith(check_plan_fits_model(p, odd),
                        {"cp=4", "seq_len=60", "2*cp = 8", "load-balanced"}, inf));
  // Megatron-Core's CP runs on fused attention only: the reason names both.
  Plan unfused = p;
  unfused.attention = AttentionImpl::kUnfused;
  EXPECT_TRUE(FailsWith(check_plan_fits_model(unfused, m),
                        {"cp=4", "attention=fused", "attention=unfused"}, inf));
  unfused.cp = 1;
  EXPECT_TRUE(check_plan_fits_model(unfused, m).ok());
  // Sequence parallelism splits each CP rank's seq_len/cp tokens over tp.
  Plan sp = p;
  sp.tp = 4;
  sp.cp = 32;  // 64 / 32 = 2 tokens per rank, not divisible by tp = 4
  sp.sequence_parallel = true;
  EXPECT_TRUE(FailsWith(check_plan_fits_model(sp, m), {"tp=4", "seq_len/cp = 2"}, inf));
  // The world size names cp when the plan has it, and reads as before when it does not.
  EXPECT_TRUE(FailsWith(check_plan_world_size(p, 8), {"tp*cp*pp*dp = 2*4*1*2 = 16",
                                                       "8 are available"}, inf));
  EXPECT_TRUE(check_plan_world_size(p, 16).ok());
  // A plan that skipped validation is an error, not a division by zero.
  Plan zero = p;
  zero.cp = 0;
  EXPECT_FALSE(check_plan_fits_model(zero, m).ok());
  EXPECT_TRUE(FailsWith(validate_plan(zero), {"cp=0"}));
}

// --- hardware profile -----------------------------------------------------------------------

TEST(HardwareProfileLoader, FieldErrors) {
  const std::vector<FieldCase> cases = {
      {"device", 3, {"3"}},
      {"date", Json::array(), {"[]"}},
      {"peak_TFLOPs", 0, {"0"}},
      {"peak_TFLOPs", "1", {"\"1\""}},
      {"memory_GBps", -5, {"-5"}},
      {"gemm_efficiency", 1.01, {"1.01"}},
      {"memory_efficiency", 0, {"0"}},
      {"attention_efficiency", 11, {"11"}},
      {"attention_backward_efficiency", 0, {"0"}},
      {"gemm_input_gradient_efficiency", 1.5, {"1.5"}},
      {"gemm_weight_gradient_efficiency", -0.2, {"-0.2"}},
      {"parallel_units", 0, {"0"}},
      {"parallel_units", 2.5, {"2.5"}},
      {"tile_m", 0, {"0"}},
      {"tile_n", 5000, {"5000"}},
      {"k_half", -1, {"-1"}},
      {"kernel_overhead_us", -1, {"-1"}},
      {"baseline_memory_MiB", -1, {"-1"}},
      {"baseline_memory_MB", -1, {"-1"}},
      {"links", 5, {"5", "expected an object"}},
      {"split_k", "yes", {"\"yes\""}},
      {"rank_compute_time_factor", 1.2, {"1.2", "one factor per rank"}},
      {"rank_compute_time_factor", Json::array(), {"[]", "one factor per rank"}},
      {"rank_compute_time_factor", Json::array({1.0, 0}), {"entry 1 is 0", "> 0"}},
      {"rank_compute_time_factor", Json::array({-1.1, 1.0}), {"entry 0 is -1.1", "> 0"}},
      {"rank_compute_time_factor", Json::array({1.0, "x"}), {"entry 1 is \"x\""}},
      {"measured_tasks", 5, {"5", "expected an array"}},
  };
  for (const FieldCase& c : cases) {
    Json j = basic_profile();
    j[c.field] = c.value;
    auto r = hardware_profile_from_json(j, "hw.json");
    EXPECT_TRUE(FailsWith(r, {"hw.json", std::string("'") + c.field + "'"}))
        << c.field << " = " << c.value.dump();
    for (const std::string& e : c.expect) {
      ASSERT_FALSE(r.ok());
      EXPECT_NE(r.status().message().find(e), std::string::npos)
          << c.field << ": message lacks \"" << e << "\": " << r.status().message();
    }
  }
}

// A GEMM task of each direction, same shape, so only the efficiency tells their times apart.
Task direction_gemm(std::string_view name) { return testing::gemm_task(name, 512, 512, 512); }

// A profile written before calibrate measured the directions apart (no direction keys) still
// loads, and every GEMM direction and both attention directions take its single figures; a
// profile with them times each direction at its own and writes them back.
TEST(HardwareProfileLoader, DirectionEfficienciesFallBackToTheSingleFigures) {
  auto old = hardware_profile_from_json(basic_profile(), "hw.json");
  ASSERT_TRUE(old.ok()) << old.status().message();
  const Task fwd = direction_gemm("fc2"), dgrad = direction_gemm("fc2_dgrad"),
             wgrad = direction_gemm("fc2_wgrad");
  EXPECT_EQ(gemm_direction(fwd), GemmDirection::kForward);
  EXPECT_EQ(gemm_direction(dgrad), GemmDirection::kInputGradient);
  EXPECT_EQ(gemm_direction(wgrad), GemmDirection::kWeightGradient);
  EXPECT_DOUBLE_EQ(task_time_s(dgrad, old->rates), task_time_s(fwd, old->rates));
  EXPECT_DOUBLE_EQ(task_time_s(wgrad, old->rates), task_time_s(fwd, old->rates));
  EXPECT_DOUBLE_EQ(attention_efficiency_of(old->rates, true), old->rates.attention_efficiency);
  const Json written = hardware_profile_to_json(*old);
  EXPECT_FALSE(written.contains("gemm_input_gradient_efficiency"));
  EXPECT_FALSE(written.contains("attention_backward_efficiency"));

  Json j = basic_profile();  // gemm_efficiency 0.7
  j["gemm_input_gradient_efficiency"] = 0.35;
  j["gemm_weight_gradient_efficiency"] = 0.28;
  j["attention_efficiency"] = 0.5;
  j["attention_backward_efficiency"] = 1.5;
  auto p = hardware_profile_from_json(j, "hw.json");
  ASSERT_TRUE(p.ok()) << p.status().message();
  const double t_fwd = task_time_s(fwd, p->rates) - p->rates.kernel_overhead_s;
  EXPECT_NEAR((task_time_s(dgrad, p->rates) - p->rates.kernel_overhead_s) / t_fwd, 2.0, 1e-12);
  EXPECT_NEAR((task_time_s(wgrad, p->rates) - p->rates.kernel_overhead_s) / t_fwd, 2.5, 1e-12);
  Task attention = direction_gemm("attention");
  attention.kind = TaskKind::kAttention;
  Task attention_bwd = attention;
  attention_bwd.backward = true;
  EXPECT_NEAR((task_time_s(attention, p->rates) - p->rates.kernel_overhead_s) /
                  (task_time_s(attention_bwd, p->rates) - p->rates.kernel_overhead_s),
              3.0, 1e-12);
  auto again = hardware_profile_from_json(hardware_profile_to_json(*p), "again.json");
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_DOUBLE_EQ(again->rates.gemm_input_gradient_efficiency, 0.35);
  EXPECT_DOUBLE_EQ(again->rates.gemm_weight_gradient_efficiency, 0.28);
  EXPECT_DOUBLE_EQ(again->rates.attention_backward_efficiency, 1.5);
}

// The baseline memory is written in MB; a profile of earlier versions gives it in MiB, which is
// still read, converted; both at once is refused naming the MiB key.
TEST(HardwareProfileLoader, SplitKIsOffUnlessTheProfileSaysAndRoundTrips) {
  auto old = hardware_profile_from_json(basic_profile(), "hw.json");
  ASSERT_TRUE(old.ok()) << old.status().message();
  EXPECT_FALSE(old->rates.split_k);  // written before split-K was modelled: fitted without it
  EXPECT_FALSE(hardware_profile_to_json(*old).contains("split_k"));
  Json j = basic_profile();
  j["split_k"] = true;
  auto p = hardware_profile_from_json(j, "hw.json");
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_TRUE(p->rates.split_k);
  auto again = hardware_profile_from_json(hardware_profile_to_json(*p), "again.json");
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_TRUE(again->rates.split_k);
}

// Per-rank compute speed: absent reads as every rank at 1.0 (and is not written back), present
// round-trips by rank.
TEST(HardwareProfileLoader, RankComputeTimeFactorIsOptionalAndRoundTrips) {
  auto old = hardware_profile_from_json(basic_profile(), "hw.json");
  ASSERT_TRUE(old.ok()) << old.status().message();
  EXPECT_TRUE(old->rank_compute_time_factor.empty());
  EXPECT_FALSE(has_uneven_rank_speeds(*old));
  EXPECT_EQ(rank_compute_time_factor(*old, 0), 1.0);
  EXPECT_EQ(rank_compute_time_factor(*old, 7), 1.0);
  EXPECT_FALSE(hardware_profile_to_json(*old).contains("rank_compute_time_factor"));
  Json j = basic_profile();
  j["rank_compute_time_factor"] = Json::array({1.12, 0.88});
  auto p = hardware_profile_from_json(j, "hw.json");
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->rank_compute_time_factor, (std::vector<double>{1.12, 0.88}));
  EXPECT_TRUE(has_uneven_rank_speeds(*p));
  EXPECT_EQ(rank_compute_time_factor(*p, 1), 0.88);
  EXPECT_EQ(rank_compute_time_factor(*p, 2), 1.0);  // outside the list
  auto again = hardware_profile_from_json(hardware_profile_to_json(*p), "again.json");
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(again->rank_compute_time_factor, p->rank_compute_time_factor);
  j["rank_compute_time_factor"] = Json::array({1.0, 1.0});
  auto even = hardware_profile_from_json(j, "hw.json");
  ASSERT_TRUE(even.ok()) << even.status().message();
  EXPECT_FALSE(has_uneven_rank_speeds(*even));
}

// A measured task time (calibrate's table of the executor probes' tasks) replaces the roofline
// of exactly that task: same name and shape, every copy of a repeated run; another shape keeps
// the fit. Its compute and memory terms keep their proportion; a measurement below the fitted
// overhead is all overhead. The table round-trips through the profile's JSON.
TEST(HardwareProfileLoader, MeasuredTaskTimesReplaceTheirTasksRooflineAndRoundTrip) {
  auto p = hardware_profile_from_json(basic_profile(), "hw.json");
  ASSERT_TRUE(p.ok()) << p.status().message();
  const DeviceRates fit = p->rates;
  Task fc1 = testing::gemm_task("fc1", 512, 512, 512);
  fc1.bytes = 3.0 * 512 * 512 * 4;
  const Task other_shape = testing::gemm_task("fc1", 512, 512, 256);
  Task norm;
  norm.name = "norm1";
  norm.bytes = 1e3;
  norm.memory_kernel = MemoryKernel::kNorm;
  DeviceRates measured = fit;
  measured.measured_tasks =
      std::make_shared<const std::vector<MeasuredTaskTime>>(std::vector<MeasuredTaskTime>{
          measured_task(fc1, 7e-3), measured_task(norm, 0.5 * fit.kernel_overhead_s)});
  EXPECT_DOUBLE_EQ(task_time_s(fc1, measured), 7e-3);
  EXPECT_NE(task_time_s(fc1, fit), 7e-3);
  EXPECT_DOUBLE_EQ(task_time_s(other_shape, measured), task_time_s(other_shape, fit));
  Task repeated = fc1;
  repeated.repeat = 3;
  EXPECT_DOUBLE_EQ(task_time_s(repeated, measured), 3 * 7e-3);
  const WorkShape a = work_shape(fc1, fit), b = work_shape(fc1, measured);
  EXPECT_NEAR(b.compute_s / b.memory_s, a.compute_s / a.memory_s, 1e-12 * a.compute_s / a.memory_s);
  EXPECT_DOUBLE_EQ(b.overhead_s, a.overhead_s);
  EXPECT_DOUBLE_EQ(work_shape(norm, measured).overhead_s, 0.5 * fit.kernel_overhead_s);
  EXPECT_DOUBLE_EQ(task_time_s(norm, measured), 0.5 * fit.kernel_overhead_s);

  EXPECT_FALSE(hardware_profile_to_json(*p).contains("measured_tasks"));
  p->rates = measured;
  const Json written = hardware_profile_to_json(*p);
  ASSERT_TRUE(written.contains("measured_tasks"));
  EXPECT_EQ(written["measured_tasks"][0]["task"], "fc1");
  EXPECT_EQ(written["measured_tasks"][0]["kind"], "gemm");
  EXPECT_DOUBLE_EQ(written["measured_tasks"][0]["time_us"].get<double>(), 7000.0);
  EXPECT_EQ(written["measured_tasks"][1]["memory_kernel"], "norm");
  auto again = hardware_profile_from_json(written, "again.json");
  ASSERT_TRUE(again.ok()) << again.status().message();
  ASSERT_TRUE(again->rates.measured_tasks);
  EXPECT_EQ(again->rates.measured_tasks->size(), 2u);
  EXPECT_DOUBLE_EQ(task_time_s(fc1, again->rates), 7e-3);
  EXPECT_DOUBLE_EQ(task_time_s(norm, again->rates), task_time_s(norm, measured));
}

// Each entry of measured_tasks is read strictly: the error names the entry and its field.
TEST(HardwareProfileLoader, ABadMeasuredTaskEntryIsAnErrorNamingItsField) {
  const Json good = Json::parse(R"({"task": "fc1", "kind": "gemm", "m": 8, "n": 8, "k": 8,
    "executed_flops": 1024, "time_us": 3.5})");
  struct EntryCase {
    const char* field;
    Json value;  // null: the field removed
    std::vector<std::string> expect;
  };
  const std::vector<EntryCase> cases = {
      {"time_us", Json(), {"'time_us'", "missing"}},
      {"time_us", -1, {"'time_us'", "-1"}},
      {"kind", "conv", {"'kind'", "conv"}},
      {"task", 3, {"'task'", "3"}},
      {"m", 2.5, {"'m'", "2.5"}},
      {"memory_kernel", "fast", {"'memory_kernel'", "fast"}},
      {"speed", 1, {"speed"}},
  };
  for (const EntryCase& c : cases) {
    Json entry = good;
    if (c.value.is_null())
      entry.erase(c.field);
    else
      entry[c.field] = c.value;
    Json j = basic_profile();
    j["measured_tasks"] = Json::array({good, entry});
    auto r = hardware_profile_from_json(j, "hw.json");
    EXPECT_TRUE(FailsWith(r, {"hw.json", "measured_tasks[1]"})) << c.field;
    for (const std::string& e : c.expect) {
      ASSERT_FALSE(r.ok());
      EXPECT_NE(r.status().message().find(e), std::string::npos)
          << c.field << ": message lacks \"" << e << "\": " << r.status().message();
    }
  }
  Json j = basic_profile();
  j["measured_tasks"] = Json::array({good});
  EXPECT_TRUE(hardware_profile_from_json(j, "hw.json").ok());
}

TEST(HardwareProfileLoader, BaselineMemoryInMbOrTheOldMib) {
  Json j = basic_profile();
  j["baseline_memory_MB"] = 120.0;
  auto mb = hardware_profile_from_json(j, "hw.json");
  ASSERT_TRUE(mb.ok()) << mb.status().message();
  EXPECT_DOUBLE_EQ(mb->baseline_memory_bytes, 120e6);
  EXPECT_DOUBLE_EQ(hardware_profile_to_json(*mb)["baseline_memory_MB"].get<double>(), 120.0);
  Json old = basic_profile();
  old["baseline_memory_MiB"] = 100.0;
  auto mib = hardware_profile_from_json(old, "hw.json");
  ASSERT_TRUE(mib.ok()) << mib.status().message();
  EXPECT_DOUBLE_EQ(mib->baseline_memory_bytes, 100.0 * 1024 * 1024);
  j["baseline_memory_MiB"] = 100.0;
  EXPECT_TRUE(FailsWith(hardware_profile_from_json(j, "hw.json"),
                        {"hw.json", "'baseline_memory_MiB'", "baseline_memory_MB", "give one"}));
}

TEST(HardwareProfileLoader, MissingUnknownAndLinks) {
  for (const char* field : {"device", "date", "peak_TFLOPs", "memory_GBps", "gemm_efficiency",
                            "memory_efficiency", "parallel_units"}) {
    Json j = basic_profile();
    j.erase(field);
    EXPECT_TRUE(FailsWith(hardware_profile_from_json(j, "hw.json"), {"hw.json", "missing", field}));
  }
  Json j = basic_profile();
  j["peak_tflops"] = 1;
  EXPECT_TRUE(FailsWith(hardware_profile_from_json(j, "hw.json"),
                        {"hw.json", "unknown field 'peak_tflops'"}));
  j = basic_profile();
  j["links"].erase("intra_node_GBps");
  EXPECT_TRUE(FailsWith(hardware_profile_from_json(j, "hw.json"),
                        {"hw.json", "links", "missing", "intra_node_GBps"}));
  j = basic_profile();
  j["links"]["bandwidth"] = 1;
  EXPECT_TRUE(FailsWith(hardware_profile_from_json(j, "hw.json"),
                        {"hw.json", "links", "unknown field 'bandwidth'"}));
  j = basic_profile();
  j["links"]["inter_node_latency_us"] = -1;
  EXPECT_TRUE(FailsWith(hardware_profile_from_json(j, "hw.json"),
                        {"hw.json", "'inter_node_latency_us'", "-1"}));
  // The rendezvous protocol: both keys or neither, each in range.
  j = basic_profile();
  j["links"]["eager_limit_bytes"] = 4096;
  EXPECT_TRUE(FailsWith(hardware_profile_from_json(j, "hw.json"),
                        {"hw.json", "links", "'rendezvous_latency_us'", "missing",
                         "eager_limit_bytes"}));
  j = basic_profile();
  j["links"]["rendezvous_latency_us"] = 4;
  EXPECT_TRUE(FailsWith(hardware_profile_from_json(j, "hw.json"),
                        {"hw.json", "links", "'eager_limit_bytes'", "missing"}));
  j["links"]["eager_limit_bytes"] = 0;
  EXPECT_TRUE(FailsWith(hardware_profile_from_json(j, "hw.json"),
                        {"hw.json", "'eager_limit_bytes'", "0"}));
  j["links"]["eager_limit_bytes"] = 4096;
  j["links"]["rendezvous_latency_us"] = -4;
  EXPECT_TRUE(FailsWith(hardware_profile_from_json(j, "hw.json"),
                        {"hw.json", "'rendezvous_latency_us'", "-4"}));
}

// A profile's MPI rendezvous protocol is read, written back, and handed to the cluster; one
// without it has none.
TEST(HardwareProfileLoader, RendezvousProtocolRoundTripsAndReachesTheCluster) {
  auto plain = hardware_profile_from_json(basic_profile(), "hw.json");
  ASSERT_TRUE(plain.ok()) << plain.status().message();
  EXPECT_EQ(plain->eager_limit_bytes, 0);
  EXPECT_FALSE(hardware_profile_to_json(*plain)["links"].contains("eager_limit_bytes"));
  Json j = basic_profile();
  j["links"]["eager_limit_bytes"] = 2048;
  j["links"]["rendezvous_latency_us"] = 4.5;
  auto p = hardware_profile_from_json(j, "hw.json");
  ASSERT_TRUE(p.ok()) << p.status().message();
  auto again = hardware_profile_from_json(hardware_profile_to_json(*p), "again.json");
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(again->eager_limit_bytes, 2048);
  EXPECT_DOUBLE_EQ(again->rendezvous_latency_s, 4.5e-6);
  ClusterSpec c;
  apply_profile_links(*again, c);
  EXPECT_EQ(c.eager_limit_bytes, 2048);
  EXPECT_DOUBLE_EQ(c.rendezvous_latency_s, 4.5e-6);
}

// --- step report ----------------------------------------------------------------------------

// A collective's exposed time is its span less the compute stream's busy time inside it.
TEST(StepReport, CoveredNsCountsOnlyTheBusyTimeInsideTheSpan) {
  const std::vector<std::pair<TimeNs, TimeNs>> busy = {{0, 10}, {20, 30}, {40, 50}};
  EXPECT_EQ(covered_ns(busy, 5, 45), 5 + 10 + 5);
  EXPECT_EQ(covered_ns(busy, 10, 20), 0);   // wholly in a gap: all exposed
  EXPECT_EQ(covered_ns(busy, 22, 28), 6);   // inside one interval
  EXPECT_EQ(covered_ns(busy, 60, 70), 0);   // after every interval
  EXPECT_EQ(covered_ns(busy, 30, 20), 0);   // empty span
  EXPECT_EQ(covered_ns({}, 0, 100), 0);
}

// What both executors write: the median after the warm-up, rates from it, groups by report name.
TEST(StepReport, MeasuredStepsAndGroupsAsBothExecutorsWriteThem) {
  ModelSpec m = testing::load_repo_model("tiny.json");
  Plan p;
  p.global_batch_size = 4;
  StepReport r;
  set_measured_steps(r, m, p, {9.0, 1.0, 3.0, 2.0, 4.0}, {5, 4, 3, 2, 1}, 1, 2, 0.0);
  EXPECT_EQ(r.kind, "measured");
  EXPECT_DOUBLE_EQ(r.step_time_s, 2.5);  // median of 1, 3, 2, 4: the warm-up's 9 is out
  EXPECT_DOUBLE_EQ(r.tokens_per_s, 4.0 * static_cast<double>(m.seq_len) / 2.5);
  EXPECT_DOUBLE_EQ(r.model_tflops_per_gpu, step_flops(m, p).model / 2.5 / 2 / 1e12);
  EXPECT_EQ(r.mfu, 0.0);  // no peak given
  EXPECT_EQ(r.step_times_s.size(), 5u);
  EXPECT_EQ(r.warmup_steps, 1);
  EXPECT_EQ(r.plan, plan_to_json(p));
  RankStep rank;
  add_group_comm(r, rank, CommGroup::kEmbedding, {.bytes_sent = 8, .time_s = 1, .exposed_s = 0.5});
  add_group_comm(r, rank, CommGroup::kPp, {.bytes_sent = 2, .time_s = 1, .exposed_s = 1});
  add_group_comm(r, rank, CommGroup::kDp, {});  // nothing: left out
  ASSERT_EQ(rank.comm.size(), 1u);
  EXPECT_DOUBLE_EQ(rank.comm.at("pp").bytes_sent, 10);  // the embedding group is pipeline traffic
  EXPECT_DOUBLE_EQ(rank.comm.at("pp").exposed_s, 1.5);
  EXPECT_DOUBLE_EQ(r.bytes_per_group.at("pp"), 10);
  EXPECT_DOUBLE_EQ(median({}), 0.0);
  EXPECT_DOUBLE_EQ(median({3, 1, 2}), 2.0);
}

TEST(StepReportLoader, Errors) {
  auto with = [](const char* key, Json v) {
    Json j = basic_report();
    j[key] = std::move(v);
    return step_report_from_json(j, "measured.json");
  };
  EXPECT_TRUE(FailsWith(with("schema", "trainplan.step_report/2"),
                        {"measured.json", "'schema'", "trainplan.step_report/2"}));
  EXPECT_TRUE(FailsWith(with("schema", nullptr), {"measured.json", "missing", "schema"}));
  EXPECT_TRUE(FailsWith(with("kind", "guessed"), {"measured.json", "'kind'", "guessed"}));
  EXPECT_TRUE(FailsWith(with("kind", 1), {"measured.json", "'kind'", "1"}));
  EXPECT_TRUE(FailsWith(with("step_time_s", -1), {"measured.json", "'step_time_s'", "-1"}));
  EXPECT_TRUE(FailsWith(with("step_time_s", "1"), {"'step_time_s'", "\"1\""}));
  EXPECT_TRUE(FailsWith(with("bubble_fraction", 1.5), {"'bubble_fraction'", "1.5"}));
  EXPECT_TRUE(FailsWith(with("warmup_steps", -1), {"'warmup_steps'", "-1"}));
  EXPECT_TRUE(FailsWith(with("loss", 5), {"measured.json", "'loss'", "array"}));
  EXPECT_TRUE(FailsWith(with("loss", Json::array({1, "x"})), {"'loss'", "\"x\""}));
  EXPECT_TRUE(FailsWith(with("step_times_s", Json::array({-0.5})), {"'step_times_s'", "-0.5"}));
  EXPECT_TRUE(FailsWith(with("bytes_per_group", 5), {"'bytes_per_group'", "object"}));
  EXPECT_TRUE(FailsWith(with("bytes_per_group", {{"tp", "many"}}),
                        {"'bytes_per_group.tp'", "\"many\""}));
  EXPECT_TRUE(FailsWith(with("bytes_per_group", {{"tp", -1}}), {"'bytes_per_group.tp'", "-1"}));
  EXPECT_TRUE(FailsWith(with("ranks", Json::object()), {"'ranks'", "array"}));
  EXPECT_TRUE(FailsWith(with("ranks", Json::array({5})), {"ranks[0]", "object", "5"}));
  EXPECT_TRUE(FailsWith(with("ranks", Json::array({Json::object()})),
                        {"ranks[0]", "missing", "rank"}));
  EXPECT_TRUE(FailsWith(with("ranks", Json::parse(R"([{"rank": 0}, {"rank": -1}])")),
                        {"ranks[1]", "'rank'", "-1"}));
  EXPECT_TRUE(FailsWith(with("ranks", Json::parse(R"([{"rank": 0, "gpu": 1}])")),
                        {"ranks[0]", "unknown field 'gpu'"}));
  EXPECT_TRUE(FailsWith(with("ranks", Json::parse(R"([{"rank": 0, "memory": {"weights_bytes": -1}}])")),
                        {"ranks[0] memory", "'weights_bytes'", "-1"}));
  EXPECT_TRUE(FailsWith(with("ranks", Json::parse(R"([{"rank": 0, "comm": {"tp": 5}}])")),
                        {"ranks[0] comm.tp", "object"}));
  EXPECT_TRUE(FailsWith(with("ranks", Json::parse(R"([{"rank": 0, "comm": {"tp": {"time_s": -2}}}])")),
                        {"comm.tp", "'time_s'", "-2"}));
  EXPECT_TRUE(FailsWith(with("extra", 1), {"measured.json", "unknown field 'extra'"}));
}

// --- round trips ----------------------------------------------------------------------------

// to_json -> dump -> parse -> from_json -> to_json -> dump is byte-identical.
template <class T, class To, class From>
void expect_round_trip(const T& value, To to_json, From from_json, const char* what) {
  const std::string first = to_json(value).dump();
  auto parsed = parse_json_text(first, what);
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  auto back = from_json(*parsed, what);
  ASSERT_TRUE(back.ok()) << what << ": " << back.status().message() << "\n" << first;
  EXPECT_EQ(to_json(*back).dump(), first) << what;
}

TEST(RoundTrip, EveryModelFileLoadsAndRoundTrips) {
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(repo_file("models"))) {
    if (entry.path().extension() != ".json") continue;
    ++files;
    const std::string path = entry.path().string();
    auto json = cli::read_json_file(path);
    ASSERT_TRUE(json.ok()) << json.status().message();
    auto m = model_from_json(*json, path);
    ASSERT_TRUE(m.ok()) << m.status().message();
    expect_round_trip(*m, model_to_json, model_from_json, path.c_str());
  }
  EXPECT_GE(files, 13);
}

Result<ModelSpec> load_zoo(const std::string& name) {
  const std::string path = repo_file("models/" + name);
  auto json = cli::read_json_file(path);
  if (!json.ok()) return json.status();
  return model_from_json(*json, path);
}

TEST(RoundTrip, HuggingFaceConfigsGiveTheExpectedShapes) {
  auto llama = load_zoo("hf-llama3.1-8b-config.json");
  ASSERT_TRUE(llama.ok()) << llama.status().message();
  EXPECT_EQ(llama->num_layers, 32);
  EXPECT_EQ(llama->hidden_size, 4096);
  EXPECT_EQ(llama->num_attention_heads, 32);
  EXPECT_EQ(llama->num_kv_heads, 8);
  EXPECT_EQ(llama->head_dim, 128);
  EXPECT_EQ(llama->ffn_hidden_size, 14336);
  EXPECT_EQ(llama->vocab_size, 128256);
  EXPECT_EQ(llama->activation, Activation::kSwiglu);
  EXPECT_EQ(llama->norm, NormKind::kRmsNorm);
  EXPECT_EQ(llama->position, PositionKind::kRope);
  EXPECT_FALSE(llama->tie_word_embeddings);
  EXPECT_FALSE(llama->bias);
  EXPECT_FALSE(llama->is_moe());

  auto gpt2 = load_zoo("hf-gpt2-config.json");
  ASSERT_TRUE(gpt2.ok()) << gpt2.status().message();
  EXPECT_EQ(gpt2->num_layers, 12);
  EXPECT_EQ(gpt2->hidden_size, 768);
  EXPECT_EQ(gpt2->num_attention_heads, 12);
  EXPECT_EQ(gpt2->num_kv_heads, 12);
  EXPECT_EQ(gpt2->ffn_hidden_size, 3072);
  EXPECT_EQ(gpt2->vocab_size, 50257);
  EXPECT_EQ(gpt2->seq_len, 1024);
  EXPECT_TRUE(gpt2->tie_word_embeddings);
  EXPECT_EQ(gpt2->activation, Activation::kGelu);
  EXPECT_EQ(gpt2->norm, NormKind::kLayerNorm);
  EXPECT_EQ(gpt2->position, PositionKind::kLearned);
  EXPECT_TRUE(gpt2->dropout);

  auto mixtral = load_zoo("hf-mixtral-8x7b-config.json");
  ASSERT_TRUE(mixtral.ok()) << mixtral.status().message();
  EXPECT_EQ(mixtral->num_experts, 8);
  EXPECT_EQ(mixtral->experts_per_token, 2);
  EXPECT_EQ(mixtral->num_kv_heads, 8);
  EXPECT_EQ(mixtral->activation, Activation::kSwiglu);
}

TEST(RoundTrip, ZooShapes) {
  struct Shape {
    const char* file;
    std::int64_t layers, hidden, heads, kv, ffn, vocab, seq, experts;
    bool tied;
  };
  const Shape shapes[] = {
      {"gpt3.json", 96, 12288, 96, 96, 49152, 50257, 2048, 1, true},
      {"gpt2-124m.json", 12, 768, 12, 12, 3072, 50257, 1024, 1, true},
      {"gpt2-350m.json", 24, 1024, 16, 16, 4096, 50257, 1024, 1, true},
      {"gpt2-774m.json", 36, 1280, 20, 20, 5120, 50257, 1024, 1, true},
      {"gpt2-1.5b.json", 48, 1600, 25, 25, 6400, 50257, 1024, 1, true},
      {"llama3-8b.json", 32, 4096, 32, 8, 14336, 128256, 8192, 1, false},
      {"llama3-70b.json", 80, 8192, 64, 8, 28672, 128256, 8192, 1, false},
      {"llama3-405b.json", 126, 16384, 128, 8, 53248, 128256, 8192, 1, false},
      {"mixtral-8x7b.json", 32, 4096, 32, 8, 14336, 32000, 4096, 8, false},
      {"tiny.json", 4, 64, 4, 4, 256, 256, 64, 1, true},
  };
  for (const Shape& s : shapes) {
    auto m = load_zoo(s.file);
    ASSERT_TRUE(m.ok()) << m.status().message();
    EXPECT_EQ(m->num_layers, s.layers) << s.file;
    EXPECT_EQ(m->hidden_size, s.hidden) << s.file;
    EXPECT_EQ(m->num_attention_heads, s.heads) << s.file;
    EXPECT_EQ(m->num_kv_heads, s.kv) << s.file;
    EXPECT_EQ(m->ffn_hidden_size, s.ffn) << s.file;
    EXPECT_EQ(m->vocab_size, s.vocab) << s.file;
    EXPECT_EQ(m->seq_len, s.seq) << s.file;
    EXPECT_EQ(m->num_experts, s.experts) << s.file;
    EXPECT_EQ(m->tie_word_embeddings, s.tied) << s.file;
  }
}

TEST(RoundTrip, ClustersOfEveryPreset) {
  for (const std::string& gpu : gpu_preset_names()) {
    auto c = make_cluster(gpu, 32, 4);
    ASSERT_TRUE(c.ok()) << c.status().message();
    expect_round_trip(*c, cluster_to_json, cluster_from_json, gpu.c_str());
  }
  // Regression: a custom GPU without "nvlink_GBps" wrote 0.0, which the loader then refused.
  auto custom = cluster_from_json(custom_gpu_cluster(), "c.json");
  ASSERT_TRUE(custom.ok());
  expect_round_trip(*custom, cluster_to_json, cluster_from_json, "custom");
}

TEST(RoundTrip, Plans) {
  Plan p;
  expect_round_trip(p, plan_to_json, plan_from_json, "default plan");
  p.tp = 4;
  p.pp = 2;
  p.dp = 8;
  p.ep = 2;
  p.zero_stage = 3;
  p.micro_batch_size = 2;
  p.global_batch_size = 64;
  p.schedule = Schedule::kInterleaved;
  p.virtual_stages = 2;
  p.recompute = Recompute::kSelective;
  p.sequence_parallel = true;
  p.precision = Precision::kFp16;
  p.optimizer = Optimizer::kSgdMomentum;
  p.offload = Offload::kOptimizer;
  p.attention = AttentionImpl::kUnfused;
  p.grad_precision = GradPrecision::kFp32;
  p.layers_per_stage = {3, 2, 2, 3};
  expect_round_trip(p, plan_to_json, plan_from_json, "full plan");
  p.recompute = Recompute::kFull;
  p.recompute_num_layers = 2;
  expect_round_trip(p, plan_to_json, plan_from_json, "partial full recompute");
  p.sequence_parallel = false;
  p.partition_activations = true;
  expect_round_trip(p, plan_to_json, plan_from_json, "partitioned checkpoints");
  EXPECT_NE(describe(p).find("partition-activations"), std::string::npos) << describe(p);
  p.offload_checkpoints = true;
  expect_round_trip(p, plan_to_json, plan_from_json, "offloaded checkpoints");
  EXPECT_NE(describe(p).find("offload-checkpoints"), std::string::npos) << describe(p);
  EXPECT_NE(describe(p).find("recompute=full:2"), std::string::npos) << describe(p);
}

TEST(RoundTrip, HardwareProfile) {
  auto p = hardware_profile_from_json(basic_profile(), "hw.json");
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_TRUE(p->has_links);
  EXPECT_DOUBLE_EQ(p->inter_node_bytes_per_s, 5e9);  // defaults to the intra-node figure
  expect_round_trip(*p, hardware_profile_to_json, hardware_profile_from_json, "hw");
  Json j = basic_profile();
  j.erase("links");
  auto no_links = hardware_profile_from_json(j, "hw.json");
  ASSERT_TRUE(no_links.ok());
  expect_round_trip(*no_links, hardware_profile_to_json, hardware_profile_from_json, "hw");
}

TEST(RoundTrip, StepReports) {
  auto r = step_report_from_json(basic_report(), "measured.json");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->ranks.size(), 1u);
  EXPECT_DOUBLE_EQ(r->ranks[0].comm.at("dp").bytes_sent, 10);
  expect_round_trip(*r, step_report_to_json, step_report_from_json, "measured");
  StepReport predicted;
  predicted.kind = "predicted";
  predicted.source = "simulate";
  predicted.model = model_to_json(*model_from_json(tiny_model(), "m.json"));
  predicted.plan = plan_to_json(Plan{});
  predicted.step_time_s = 1.25;
  predicted.bytes_per_group = {{"tp", 1e9}, {"pp", 0}};
  RankStep rs;
  rs.rank = 3;
  rs.stage = 1;
  rs.memory.activations_bytes = 12345;
  rs.comm["tp"] = {1, 2, 0.5};
  predicted.ranks = {rs};
  expect_round_trip(predicted, step_report_to_json, step_report_from_json, "predicted");
}

// The fuzzers' seed corpus is only useful while every seed is accepted: each one starts the
// search at a valid input of its loader.
TEST(RoundTrip, EveryFuzzSeedLoads) {
  struct Target {
    const char* dir;
    Status (*load)(const Json&, const std::string&);
  };
  const Target targets[] = {
      {"fuzz_model", [](const Json& j, const std::string& s) { return model_from_json(j, s).status(); }},
      {"fuzz_hf_config", [](const Json& j, const std::string& s) { return model_from_json(j, s).status(); }},
      {"fuzz_cluster", [](const Json& j, const std::string& s) { return cluster_from_json(j, s).status(); }},
      {"fuzz_plan", [](const Json& j, const std::string& s) { return plan_from_json(j, s).status(); }},
      {"fuzz_hardware_profile",
       [](const Json& j, const std::string& s) { return hardware_profile_from_json(j, s).status(); }},
      {"fuzz_step_report",
       [](const Json& j, const std::string& s) { return step_report_from_json(j, s).status(); }},
  };
  for (const Target& t : targets) {
    int seeds = 0;
    for (const auto& entry :
         std::filesystem::directory_iterator(repo_file(std::string("tests/fuzz/corpus/") + t.dir))) {
      ++seeds;
      const std::string path = entry.path().string();
      auto json = cli::read_json_file(path);
      ASSERT_TRUE(json.ok()) << json.status().message();
      const Status st = t.load(*json, path);
      EXPECT_TRUE(st.ok()) << st.message();
    }
    EXPECT_GE(seeds, 2) << t.dir;
  }
}

// --- files (the edge) -----------------------------------------------------------------------

TEST(Files, MissingDirectoryAndMalformedFilesNameThePath) {
  EXPECT_TRUE(FailsWith(cli::read_json_file(repo_file("models/no-such-model.json")),
                        {"no-such-model.json", "cannot read"}, ExitCode::kIo));
  EXPECT_TRUE(FailsWith(cli::read_json_file(repo_file("models")),
                        {"models", "directory"}, ExitCode::kIo));
  const std::string dir = std::string(TRAINPLAN_BINARY_DIR) + "/loaders_test_tmp";
  std::filesystem::create_directories(dir);
  const std::string bad = dir + "/bad.json";
  ASSERT_TRUE(cli::write_file_atomic(bad, "{\n  \"num_layers\": 4,\n}\n").ok());
  EXPECT_TRUE(FailsWith(cli::read_json_file(bad), {bad, "malformed JSON at byte"}));
}

TEST(PlanLoader, Fp8RoundTripsAndNeedsSixteenBitPrecision) {
  auto plain = plan_from_json(basic_plan(), "p.json");
  ASSERT_TRUE(plain.ok()) << plain.status().message();
  EXPECT_FALSE(plain->fp8);
  EXPECT_FALSE(plan_to_json(*plain).contains("fp8"));  // plans without FP8 keep their JSON
  Json j = basic_plan();
  j["fp8"] = true;
  auto fp8 = plan_from_json(j, "p.json");
  ASSERT_TRUE(fp8.ok()) << fp8.status().message();
  EXPECT_TRUE(fp8->fp8);
  EXPECT_EQ(plan_to_json(*fp8).at("fp8"), true);
  EXPECT_NE(describe(*fp8).find(" fp8"), std::string::npos) << describe(*fp8);
  j["precision"] = "fp32";
  auto bad = plan_from_json(j, "p.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("fp8 needs precision bf16 or fp16"), std::string::npos)
      << bad.status().message();
  j["precision"] = "bf16";
  j["fp8"] = "yes";
  auto typed = plan_from_json(j, "p.json");
  ASSERT_FALSE(typed.ok());
  EXPECT_NE(typed.status().message().find("field 'fp8'"), std::string::npos);
}

}  // namespace
}  // namespace trainplan
