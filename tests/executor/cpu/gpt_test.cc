// The whole single-stage GPT (embedding, 2 blocks, tied head, cross-entropy): its hand-written
// backward against central finite differences of the loss, and layout-independent
// initialisation. Run: ctest -R executor_kernels
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <tuple>

#include "executor/comm.h"
#include "executor/cpu/gpt.h"
#include "executor/params.h"

namespace trainplan::executor {
namespace {

ModelSpec small_model() {
  ModelSpec m;
  m.name = "gradcheck";
  m.num_layers = 2;
  m.hidden_size = 16;
  m.num_attention_heads = 2;
  m.num_kv_heads = 2;
  m.head_dim = 8;
  m.ffn_hidden_size = 32;
  m.vocab_size = 200;  // padded to 256: the padding must stay out of the loss
  m.seq_len = 8;
  m.max_position_embeddings = 8;
  m.dropout = false;
  return m;
}

Plan single_plan(Recompute r) {
  Plan p;
  p.micro_batch_size = 2;
  p.global_batch_size = 2;
  p.precision = Precision::kFp32;
  p.recompute = r;
  return p;
}

// Owns full, resident blocks (no data parallelism).
class Blocks final : public BlockAccess {
 public:
  explicit Blocks(const std::vector<BlockLayout>& layouts, std::uint64_t seed) {
    for (const BlockLayout& l : layouts) {
      p_.emplace_back(static_cast<std::size_t>(l.size), 0.0f);
      g_.emplace_back(static_cast<std::size_t>(l.size), 0.0f);
      for (const TensorSlice& t : l.tensors) init_slice(seed, t, p_.back().data() + t.offset);
    }
  }
  void acquire(std::size_t, DpPoint) override {}
  void release(std::size_t) override {}
  void backward_done(std::size_t) override {}
  const float* params(std::size_t b) override { return p_[b].data(); }
  float* grads(std::size_t b) override { return g_[b].data(); }
  std::vector<std::vector<float>> p_, g_;
};

// (recompute, tied embeddings)
class GptGradient : public ::testing::TestWithParam<std::tuple<Recompute, bool>> {};

TEST_P(GptGradient, BackwardMatchesFiniteDifferences) {
  ModelSpec model = small_model();
  model.tie_word_embeddings = std::get<1>(GetParam());
  const Plan plan = single_plan(std::get<0>(GetParam()));
  auto comm = make_local_comm();
  Blocks* access = nullptr;
  std::vector<BlockLayout> layouts = stage_layouts(model, plan, 0, 0);
  Blocks blocks(layouts, 3);
  access = &blocks;
  StageModel net(model, plan, 0, *comm, *access);
  std::mt19937 gen(9);
  const std::int64_t T = plan.micro_batch_size * model.seq_len;
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(T)), targets(tokens.size());
  std::uniform_int_distribution<int> tok(0, static_cast<int>(model.vocab_size) - 1);
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = tok(gen);
    targets[i] = tok(gen);
  }
  const float scale = 1.0f / static_cast<float>(T);
  auto loss = [&] {
    Mat none;
    const double l = net.forward(0, 0, tokens.data(), targets.data(), nullptr, &none, scale);
    Mat unused;
    // Drop the micro-batch's state (backward also zeroes nothing we check: grads are reset).
    std::vector<std::vector<float>> keep = blocks.g_;
    net.backward(0, 0, nullptr, &unused);
    blocks.g_ = keep;
    return l * scale;
  };
  Mat unused;
  const double l0 = net.forward(0, 0, tokens.data(), targets.data(), nullptr, &unused, scale);
  EXPECT_NEAR(l0 / static_cast<double>(T), std::log(200.0), 0.1);  // near-uniform at init
  net.backward(0, 0, nullptr, &unused);
  const std::vector<std::vector<float>> analytic = blocks.g_;
  for (auto& g : blocks.g_) std::fill(g.begin(), g.end(), 0.0f);

  // Per tensor, the two elements with the largest analytic gradient. Tolerance: the loss is a
  // double sum of float32 token losses (noise ~1e-7 relative), central differences with
  // step 1e-2 have O(1e-4) relative truncation error; 3% + 2e-5 absolute accepts those and
  // rejects any wrong term (which is off by O(100%)).
  int checked = 0;
  for (std::size_t b = 0; b < layouts.size(); ++b) {
    for (const TensorSlice& t : layouts[b].tensors) {
      std::vector<std::int64_t> idx(static_cast<std::size_t>(t.size()));
      for (std::size_t i = 0; i < idx.size(); ++i) idx[i] = t.offset + static_cast<std::int64_t>(i);
      std::partial_sort(idx.begin(), idx.begin() + 2, idx.end(), [&](std::int64_t x, std::int64_t y) {
        return std::abs(analytic[b][static_cast<std::size_t>(x)]) >
               std::abs(analytic[b][static_cast<std::size_t>(y)]);
      });
      for (int k = 0; k < 2; ++k) {
        const auto j = static_cast<std::size_t>(idx[static_cast<std::size_t>(k)]);
        float& w = blocks.p_[b][j];
        const float keep = w;
        const float step = 1e-2f;
        w = keep + step;
        const double up = loss();
        w = keep - step;
        const double down = loss();
        w = keep;
        const double numeric = (up - down) / (2.0 * step);
        EXPECT_NEAR(analytic[b][j], numeric, 0.03 * std::abs(numeric) + 2e-5)
            << t.name << " flat index " << j - static_cast<std::size_t>(t.offset);
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 30);
  // Padding rows of the tied table get no gradient.
  const TensorSlice& wte = layouts[0].tensors[kWte];
  for (std::int64_t r = model.vocab_size; r < wte.rows; ++r)
    for (std::int64_t c = 0; c < wte.cols; ++c)
      ASSERT_EQ(analytic[0][static_cast<std::size_t>(wte.offset + r * wte.cols + c)], 0.0f);
}

INSTANTIATE_TEST_SUITE_P(RecomputeTied, GptGradient,
                         ::testing::Values(std::make_tuple(Recompute::kNone, true),
                                           std::make_tuple(Recompute::kSelective, true),
                                           std::make_tuple(Recompute::kFull, true),
                                           std::make_tuple(Recompute::kNone, false)));

TEST(Params, InitialValuesDoNotDependOnTheLayout) {
  ModelSpec model = small_model();
  Plan one = single_plan(Recompute::kNone), two = one;
  two.tp = 2;
  const auto full = stage_layouts(model, one, 0, 0);
  for (std::int64_t r = 0; r < 2; ++r) {
    const auto part = stage_layouts(model, two, 0, r);
    ASSERT_EQ(part.size(), full.size());
    for (std::size_t b = 0; b < part.size(); ++b)
      for (std::size_t t = 0; t < part[b].tensors.size(); ++t) {
        const TensorSlice& s = part[b].tensors[t];
        ASSERT_EQ(s.name, full[b].tensors[t].name);
        for (std::int64_t i = 0; i < s.rows; i += 3)
          for (std::int64_t j = 0; j < s.cols; j += 5)
            ASSERT_EQ(init_value(5, s, s.row0 + i, s.col0 + j),
                      init_value(5, full[b].tensors[t], s.row0 + i, s.col0 + j))
                << s.name;
      }
  }
}

TEST(Params, UnsupportedModelsAreRejectedWithAReason) {
  ModelSpec m = small_model();
  Plan p = single_plan(Recompute::kNone);
  EXPECT_TRUE(check_executor_supports(m, p).ok());
  p.precision = Precision::kBf16;
  EXPECT_NE(check_executor_supports(m, p).message().find("fp32"), std::string::npos);
  p.precision = Precision::kFp32;
  m.dropout = true;
  EXPECT_NE(check_executor_supports(m, p).message().find("dropout"), std::string::npos);
  m.dropout = false;
  // Latent attention and narrower value heads are planned and simulated, not executed.
  ModelSpec mla = m;
  mla.kv_lora_rank = 8;
  EXPECT_NE(check_executor_supports(mla, p).message().find("kv_lora_rank"), std::string::npos);
  ModelSpec narrow_v = m;
  narrow_v.v_head_dim = m.head_dim / 2;
  EXPECT_NE(check_executor_supports(narrow_v, p).message().find("v_head_dim"), std::string::npos);
}

// Plan fields that plan and simulate model and the executor does not run: each is rejected
// before anything runs, naming the field.
TEST(Params, PlanFieldsTheExecutorDoesNotRunAreRejectedNamingTheField) {
  const ModelSpec m = small_model();
  const struct {
    void (*set)(Plan&);
    const char* message_start;
  } cases[] = {
      // The executor's attention has no K,V exchange.
      {[](Plan& p) { p.cp = 2; },
       "cp=2: the executor does not implement context parallelism; plan and simulate do"},
      {[](Plan& p) { p.fp8 = true; }, "fp8: "},
      {[](Plan& p) {
         p.recompute = Recompute::kFull;
         p.offload_checkpoints = true;
       },
       "offload_checkpoints: the executors keep checkpoints"},
      {[](Plan& p) {
         p.tp = 2;
         p.sequence_parallel = true;
         p.tp_comm_overlap = true;
       },
       "tp_comm_overlap: the executors run each TP collective whole"},
      // Issue 26: ZeRO-Infinity's tiers are planned and simulated.
      {[](Plan& p) {
         p.zero_stage = 3;
         p.offload = Offload::kOptimizerParams;
         p.offload_device = OffloadDevice::kNvme;
       },
       "the CPU executor does not support offload optimizer+params (offload_device nvme)"},
  };
  for (const auto& c : cases) {
    Plan p = single_plan(Recompute::kNone);
    c.set(p);
    const Status s = check_executor_supports(m, p);
    ASSERT_FALSE(s.ok()) << c.message_start;
    EXPECT_EQ(s.code(), ExitCode::kInvalidInput);
    EXPECT_EQ(s.message().rfind(c.message_start, 0), 0u) << s.message();
  }
  // The split backward (zb-h1) runs: tests/executor/CMakeLists.txt's pp2_zb_h1 checks.
  Plan zb = single_plan(Recompute::kNone);
  zb.pp = 2;
  zb.schedule = Schedule::kZbH1;
  EXPECT_TRUE(check_executor_supports(m, zb).ok());
  // And zb-v (two chunks per stage in a V): the pp2_zb_v checks.
  zb.schedule = Schedule::kZbV;
  zb.virtual_stages = 2;
  EXPECT_TRUE(check_executor_supports(m, zb).ok());
}

}  // namespace
}  // namespace trainplan::executor
