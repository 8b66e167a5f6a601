// Sizes at the edges (issue 7): absurd values get a clear error, never an overflow. Built with
// -DTRAINPLAN_SANITIZE=ON (.ci/sanitize.sh), UBSan turns any signed overflow or bad cast on these
// paths into a failure. Run: ctest --test-dir build -R models_limits_test
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/cluster_spec.h"
#include "core/cost/cost_model.h"
#include "core/json_util.h"
#include "core/model_spec.h"
#include "core/plan.h"

namespace trainplan {
namespace {

constexpr std::int64_t kInt64Max = std::numeric_limits<std::int64_t>::max();
constexpr std::int64_t k2Pow40 = std::int64_t{1} << 40;

::testing::AssertionResult ErrorNames(const Status& s, const std::vector<std::string>& parts) {
  if (s.ok()) return ::testing::AssertionFailure() << "expected an error, got Ok";
  for (const std::string& p : parts)
    if (s.message().find(p) == std::string::npos)
      return ::testing::AssertionFailure() << "message lacks \"" << p << "\": " << s.message();
  return ::testing::AssertionSuccess();
}
template <class T>
::testing::AssertionResult ErrorNames(const Result<T>& r, const std::vector<std::string>& parts) {
  return ErrorNames(r.status(), parts);
}

Json tiny_model() {
  return Json::parse(R"({"name": "t", "num_layers": 4, "hidden_size": 64,
    "num_attention_heads": 4, "ffn_hidden_size": 256, "vocab_size": 256, "seq_len": 64})");
}
ModelSpec valid_model() { return *model_from_json(tiny_model(), "m.json"); }

// --- GPUs -----------------------------------------------------------------------------------

TEST(Limits, TwoToTheFortyGpus) {
  EXPECT_TRUE(ErrorNames(make_cluster("H100-80GB", k2Pow40, 8), {"--gpus", "1099511627776"}));
  EXPECT_TRUE(ErrorNames(make_cluster("H100-80GB", kInt64Max, 1024), {"--gpus"}));
  EXPECT_TRUE(ErrorNames(make_cluster("H100-80GB", 8, kInt64Max), {"--gpus-per-node"}));
  EXPECT_TRUE(ErrorNames(make_cluster("H100-80GB", std::numeric_limits<std::int64_t>::min(), 8),
                         {"--gpus"}));
  Json c = Json::parse(R"({"gpu": "H100-80GB", "gpus_per_node": 8})");
  c["num_nodes"] = k2Pow40 / 8;
  EXPECT_TRUE(ErrorNames(cluster_from_json(c, "c.json"), {"c.json", "num_nodes", "137438953472"}));
  // Each factor within its own limit, the product beyond: nodes x gpus_per_node.
  c["num_nodes"] = ClusterLimits::kMaxGpus;
  c["gpus_per_node"] = ClusterLimits::kMaxGpusPerNode;
  EXPECT_TRUE(ErrorNames(cluster_from_json(c, "c.json"), {"c.json", "num_nodes x gpus_per_node"}));
  // The largest legal cluster.
  auto biggest = make_cluster("B200-192GB", ClusterLimits::kMaxGpus, 8);
  ASSERT_TRUE(biggest.ok()) << biggest.status().message();
  EXPECT_EQ(biggest->total_gpus(), ClusterLimits::kMaxGpus);
}

TEST(Limits, PlanDegreesNeverOverflow) {
  Plan p;
  p.dp = k2Pow40;
  EXPECT_TRUE(ErrorNames(validate_plan(p), {"1099511627776", "exceeds"}));
  p.tp = p.pp = p.dp = kInt64Max;  // the product would overflow int64 many times over
  EXPECT_TRUE(ErrorNames(validate_plan(p), {"exceeds"}));
  p = Plan{};
  p.tp = p.pp = PlanLimits::kMaxDegree;  // each at the limit, the product 2^48
  EXPECT_TRUE(ErrorNames(validate_plan(p), {"exceeds"}));
  p = Plan{};
  p.tp = 0;
  EXPECT_TRUE(ErrorNames(validate_plan(p), {"at least 1"}));
  p = Plan{};
  p.ep = -1;
  EXPECT_TRUE(ErrorNames(validate_plan(p), {"at least 1"}));
  p = Plan{};
  p.virtual_stages = kInt64Max;
  p.schedule = Schedule::kInterleaved;
  p.pp = 2;
  p.global_batch_size = 2;
  EXPECT_FALSE(validate_plan(p).ok());
  Json j = Json::parse(R"({"tp": 1, "pp": 2, "dp": 1, "micro_batch_size": 1,
                           "global_batch_size": 2, "schedule": "interleaved"})");
  j["virtual_stages"] = k2Pow40;
  EXPECT_TRUE(ErrorNames(plan_from_json(j, "p.json"), {"p.json", "'virtual_stages'"}));
}

// --- layers, heads, widths ------------------------------------------------------------------

TEST(Limits, AMillionLayers) {
  Json j = tiny_model();
  j["num_layers"] = 1000000;
  EXPECT_TRUE(ErrorNames(model_from_json(j, "m.json"), {"m.json", "'num_layers'", "1000000"}));
  Json hf = Json::parse(R"({"model_type": "llama", "num_hidden_layers": 1000000, "hidden_size": 64,
    "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 100,
    "max_position_embeddings": 64})");
  EXPECT_TRUE(ErrorNames(model_from_json(hf, "hf.json"),
                         {"hf.json", "'num_hidden_layers'", "1000000"}));
  ModelSpec m = valid_model();
  m.num_layers = 1000000;
  EXPECT_TRUE(ErrorNames(validate_model(m, "direct"), {"'num_layers'", "1000000"}));
  // A plan that asks for a million pipeline chunks of a 4-layer model is refused, not sized.
  Plan p;
  p.pp = 1000000;
  EXPECT_FALSE(check_plan_fits_model(p, valid_model()).ok());
  Json lps = Json::parse(R"({"tp": 1, "pp": 1, "dp": 1, "micro_batch_size": 1,
                             "global_batch_size": 1})");
  lps["layers_per_stage"] = Json::array({1000000});
  EXPECT_TRUE(ErrorNames(plan_from_json(lps, "p.json"), {"p.json", "'layers_per_stage'", "1000000"}));
}

TEST(Limits, ZeroHeadsIsAnErrorNotADivisionByZero) {
  Json j = tiny_model();
  j["num_attention_heads"] = 0;
  EXPECT_TRUE(ErrorNames(model_from_json(j, "m.json"), {"'num_attention_heads'", "0"}));
  j = tiny_model();
  j["num_kv_heads"] = 0;
  EXPECT_TRUE(ErrorNames(model_from_json(j, "m.json"), {"'num_kv_heads'", "0"}));
  Json hf = Json::parse(R"({"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 0, "n_positions": 64,
                            "vocab_size": 100})");
  EXPECT_TRUE(ErrorNames(model_from_json(hf, "hf.json"), {"hf.json", "'n_head'", "0"}));
  hf = Json::parse(R"({"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64,
    "num_attention_heads": 4, "num_key_value_heads": 0, "intermediate_size": 128, "vocab_size": 100,
    "max_position_embeddings": 64})");
  EXPECT_TRUE(ErrorNames(model_from_json(hf, "hf.json"), {"'num_key_value_heads'", "0"}));
  ModelSpec m = valid_model();
  m.num_attention_heads = 0;
  EXPECT_TRUE(ErrorNames(validate_model(m, "direct"), {"'num_attention_heads'", "0"}));
  m = valid_model();
  m.num_kv_heads = 0;
  EXPECT_TRUE(ErrorNames(validate_model(m, "direct"), {"'num_kv_heads'", "0"}));
  m = valid_model();
  m.num_experts = 0;
  EXPECT_TRUE(ErrorNames(validate_model(m, "direct"), {"'num_experts'", "0"}));
}

TEST(Limits, UnvalidatedPlanDegreesAreRefusedNotDividedBy) {
  const ModelSpec m = valid_model();
  Plan p;
  p.tp = 0;
  EXPECT_FALSE(check_plan_fits_model(p, m).ok());
  p = Plan{};
  p.ep = 0;
  EXPECT_FALSE(check_plan_fits_model(p, m).ok());
  p = Plan{};
  p.pp = 0;
  EXPECT_FALSE(check_plan_fits_model(p, m).ok());
  p = Plan{};
  p.virtual_stages = 0;
  EXPECT_FALSE(check_plan_fits_model(p, m).ok());
}

TEST(Limits, HugeWidthsAndVocabularies) {
  const std::int64_t k2Pow62 = std::int64_t{1} << 62;
  struct Case {
    const char* field;
    std::int64_t value;
    const char* text;
  } cases[] = {
      {"hidden_size", k2Pow40, "1099511627776"},
      {"hidden_size", kInt64Max, "9223372036854775807"},
      {"vocab_size", k2Pow62, "4611686018427387904"},
      {"ffn_hidden_size", k2Pow40, "1099511627776"},
      {"head_dim", k2Pow40, "1099511627776"},
      {"seq_len", k2Pow40, "1099511627776"},
      {"num_experts", k2Pow40, "1099511627776"},
      {"num_attention_heads", k2Pow62, "4611686018427387904"},
  };
  for (const Case& c : cases) {
    Json j = tiny_model();
    j[c.field] = c.value;
    EXPECT_TRUE(ErrorNames(model_from_json(j, "m.json"), {"m.json", c.field, c.text})) << c.field;
    ModelSpec m = valid_model();
    if (std::string(c.field) == "hidden_size") m.hidden_size = c.value;
    if (std::string(c.field) == "vocab_size") m.vocab_size = c.value;
    if (std::string(c.field) == "ffn_hidden_size") m.ffn_hidden_size = c.value;
    if (std::string(c.field) == "head_dim") m.head_dim = c.value;
    if (std::string(c.field) == "seq_len") m.seq_len = c.value;
    if (std::string(c.field) == "num_experts") m.num_experts = c.value;
    if (std::string(c.field) == "num_attention_heads") m.num_attention_heads = c.value;
    EXPECT_FALSE(validate_model(m, "direct").ok()) << c.field;
  }
  // Integers that do not fit int64 at all, and doubles that are integers only in name.
  for (const char* text : {"9223372036854775808", "18446744073709551616", "1e19", "-1e19",
                           "1.0e300", "4611686018427387904.5"}) {
    auto j = parse_json_text(std::string(R"({"name": "t", "num_layers": )") + text +
                                 R"(, "hidden_size": 64, "num_attention_heads": 4,
                                 "ffn_hidden_size": 256, "vocab_size": 256, "seq_len": 64})",
                             "m.json");
    ASSERT_TRUE(j.ok()) << text;
    EXPECT_TRUE(ErrorNames(model_from_json(*j, "m.json"), {"m.json", "'num_layers'"})) << text;
  }
}

// --- batches --------------------------------------------------------------------------------

TEST(Limits, BatchNotDivisibleByAnything) {
  Plan p;
  p.dp = 2;
  p.global_batch_size = 7919;  // prime
  EXPECT_TRUE(ErrorNames(validate_plan(p), {"global_batch_size=7919", "micro_batch_size*dp = 2"}));
  p.dp = 1;
  p.micro_batch_size = 3;
  EXPECT_TRUE(ErrorNames(validate_plan(p), {"global_batch_size=7919"}));
  p.micro_batch_size = PlanLimits::kMaxBatch;
  p.dp = PlanLimits::kMaxDegree;  // product 2^54: computed without overflow
  EXPECT_FALSE(validate_plan(p).ok());
}

TEST(Limits, HugeMicroBatchCounts) {
  Plan p;
  p.global_batch_size = PlanLimits::kMaxBatch;  // 2^30 micro-batches of one sequence
  ASSERT_TRUE(validate_plan(p).ok());
  EXPECT_EQ(p.num_micro_batches(), PlanLimits::kMaxBatch);
  p.schedule = Schedule::kInterleaved;
  p.pp = 2;
  p.virtual_stages = PlanLimits::kMaxVirtualStages;
  EXPECT_TRUE(validate_plan(p).ok());
  p.global_batch_size = PlanLimits::kMaxBatch + 1;
  EXPECT_TRUE(ErrorNames(validate_plan(p), {"2^30"}));
  p.global_batch_size = kInt64Max;
  EXPECT_FALSE(validate_plan(p).ok());
  p = Plan{};
  p.micro_batch_size = kInt64Max;
  p.global_batch_size = kInt64Max;
  EXPECT_FALSE(validate_plan(p).ok());
  Json j = Json::parse(R"({"tp": 1, "pp": 1, "dp": 1, "micro_batch_size": 1})");
  j["global_batch_size"] = k2Pow40;
  EXPECT_TRUE(ErrorNames(plan_from_json(j, "p.json"), {"p.json", "'global_batch_size'",
                                                       "1099511627776"}));
}

// --- the largest legal model through the cost model -----------------------------------------

// Every limit at once: the derived quantities must stay finite and positive (UBSan watches the
// integer arithmetic on the way).
TEST(Limits, LargestLegalModelHasFiniteCosts) {
  ModelSpec m;
  m.name = "limits";
  m.num_layers = ModelLimits::kMaxLayers;
  m.hidden_size = ModelLimits::kMaxHidden;
  m.num_attention_heads = ModelLimits::kMaxHeads;
  m.num_kv_heads = ModelLimits::kMaxHeads;
  m.head_dim = m.hidden_size / m.num_attention_heads;
  m.ffn_hidden_size = ModelLimits::kMaxFfn;
  m.vocab_size = ModelLimits::kMaxVocab;
  m.seq_len = ModelLimits::kMaxSeq;
  m.max_position_embeddings = ModelLimits::kMaxSeq;
  m.activation = Activation::kSwiglu;
  m.num_experts = ModelLimits::kMaxExperts;
  m.experts_per_token = 2;
  ASSERT_TRUE(validate_model(m, "limits").ok());
  const ParameterCounts counts = count_parameters(m);
  EXPECT_TRUE(std::isfinite(counts.total()) && counts.total() > 0);
  Plan p;
  p.tp = 8;
  p.pp = 1024;
  p.dp = 2048;
  p.ep = 2048;
  p.micro_batch_size = 1024;
  p.global_batch_size = PlanLimits::kMaxBatch;
  p.recompute = Recompute::kFull;
  ASSERT_TRUE(validate_plan(p).ok()) << validate_plan(p).message();
  ASSERT_TRUE(check_plan_fits_model(p, m).ok()) << check_plan_fits_model(p, m).message();
  const MemoryBreakdown mem = memory_on_stage(m, p, 0);
  EXPECT_TRUE(std::isfinite(mem.device_total()) && mem.device_total() > 0);
  const StepFlops flops = step_flops(m, p);
  (void)flops;
  const CommVolume comm = comm_volume_on_stage(m, p, p.pp - 1);
  (void)comm;
}

}  // namespace
}  // namespace trainplan
