// The whole single-stage GPT (embedding, 2 blocks, tied head, cross-entropy; and with a dense
// and an MoE block): its hand-written backward against central finite differences of the loss,
// layout-independent initialisation, and DualPipe's stage geometry. Run: ctest -R executor_kernels
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <tuple>

#include "executor/comm.h"
#include "executor/cpu/gpt.h"
#include "executor/params.h"
#include "executor/stage_model.h"

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

// The model's backward against central finite differences of its objective: the mean token
// loss plus, for an MoE model, the load-balancing loss (StageModel::aux_loss_sum).
// step: the central difference's; abs_tol: the absolute part of the tolerance.
// step: the central differences'; abs_tol: the tolerance's absolute part.
void check_gradients(const ModelSpec& model, const Plan& plan, std::uint64_t seed = 3,
                     float step = 1e-2f, double abs_tol = 2e-5) {
  auto comm = make_local_comm();
  Blocks* access = nullptr;
  std::vector<BlockLayout> layouts = stage_layouts(model, plan, 0, 0);
  Blocks blocks(layouts, seed);
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
  std::uint64_t routing = 0;  // the last forward's MoE routing (StageModel::routing_fingerprint)
  auto loss = [&] {
    Mat none;
    const double aux0 = net.aux_loss_sum();
    const double l = net.forward(0, 0, tokens.data(), targets.data(), nullptr, &none, scale);
    const double aux = net.aux_loss_sum() - aux0;
    routing = net.routing_fingerprint();
    Mat unused;
    // Drop the micro-batch's state (backward also zeroes nothing we check: grads are reset).
    std::vector<std::vector<float>> keep = blocks.g_;
    net.backward(0, 0, nullptr, &unused);
    blocks.g_ = keep;
    return l * scale + aux;
  };
  Mat unused;
  const double l0 = net.forward(0, 0, tokens.data(), targets.data(), nullptr, &unused, scale);
  const std::uint64_t base_routing = net.routing_fingerprint();
  EXPECT_NEAR(l0 / static_cast<double>(T), std::log(200.0), 0.1);  // near-uniform at init
  net.backward(0, 0, nullptr, &unused);
  const std::vector<std::vector<float>> analytic = blocks.g_;
  for (auto& g : blocks.g_) std::fill(g.begin(), g.end(), 0.0f);

  // Per tensor, the two elements with the largest analytic gradient. Tolerance: the loss is a
  // double sum of float32 token losses (noise ~1e-7 relative), central differences with
  // step 1e-2 have O(1e-4) relative truncation error; 3% + 2e-5 absolute accepts those and
  // rejects any wrong term (which is off by O(100%)). An MoE model's loss is discontinuous where
  // a token's k-th and next experts swap (the loss jumps by the gate times the two experts'
  // difference); at initialisation the residual stream is small, so the norms turn a step of
  // 1e-2 in a bias into large moves and some token swaps. An element whose differences change
  // the routing is skipped for the next largest.
  int checked = 0, skipped = 0;
  for (std::size_t b = 0; b < layouts.size(); ++b) {
    for (const TensorSlice& t : layouts[b].tensors) {
      std::vector<std::int64_t> idx(static_cast<std::size_t>(t.size()));
      for (std::size_t i = 0; i < idx.size(); ++i) idx[i] = t.offset + static_cast<std::int64_t>(i);
      std::sort(idx.begin(), idx.end(), [&](std::int64_t x, std::int64_t y) {
        return std::abs(analytic[b][static_cast<std::size_t>(x)]) >
               std::abs(analytic[b][static_cast<std::size_t>(y)]);
      });
      int done = 0;
      for (std::size_t k = 0; k < idx.size() && k < 12 && done < 2; ++k) {
        const auto j = static_cast<std::size_t>(idx[k]);
        float& w = blocks.p_[b][j];
        const float keep = w;
        w = keep + step;
        const double up = loss();
        const std::uint64_t routing_up = routing;
        w = keep - step;
        const double down = loss();
        w = keep;
        if (routing_up != base_routing || routing != base_routing) {
          ++skipped;
          continue;
        }
        const double numeric = (up - down) / (2.0 * static_cast<double>(step));
        EXPECT_NEAR(analytic[b][j], numeric, 0.03 * std::abs(numeric) + abs_tol)
            << t.name << " flat index " << j - static_cast<std::size_t>(t.offset);
        ++checked;
        ++done;
      }
      EXPECT_GE(done, 1) << t.name << ": every element tried changes the routing";
    }
  }
  EXPECT_GT(checked, 30);
  EXPECT_LT(skipped, checked);
  // Padding rows of the tied table get no gradient.
  const TensorSlice& wte = layouts[0].tensors[kWte];
  for (std::int64_t r = model.vocab_size; r < wte.rows; ++r)
    for (std::int64_t c = 0; c < wte.cols; ++c)
      ASSERT_EQ(analytic[0][static_cast<std::size_t>(wte.offset + r * wte.cols + c)], 0.0f);
}

// (recompute, tied embeddings)
class GptGradient : public ::testing::TestWithParam<std::tuple<Recompute, bool>> {};

TEST_P(GptGradient, BackwardMatchesFiniteDifferences) {
  ModelSpec model = small_model();
  model.tie_word_embeddings = std::get<1>(GetParam());
  check_gradients(model, single_plan(std::get<0>(GetParam())));
}

// small_model() with MoE layers: 4 experts, top-2, a shared expert, layer 0 dense.
ModelSpec small_moe_model() {
  ModelSpec model = small_model();
  model.num_experts = 4;
  model.experts_per_token = 2;
  model.shared_expert_ffn_size = 8;
  model.dense_layers = {0};
  model.dense_ffn_hidden_size = 24;
  return model;
}

// Mixture of experts (executor/cpu/moe.h): a dense first layer, then 4 experts, top-2, with a
// shared expert: the router (through the gates and the load-balancing loss), the experts and
// the shared expert. Full recompute runs the routing again before the backward.
TEST(GptGradientMoe, BackwardMatchesFiniteDifferences) {
  ModelSpec model = small_moe_model();
  // Steps of 1e-3: at 1e-2 every element of the layer biases swaps some token's experts (see
  // check_gradients). Measured: at 1e-3 every element compared agrees within 3% + 2e-5 on
  // seeds 1-6; on seeds 5 and 6 every one of the 12 largest elements of a bias swaps a token.
  check_gradients(model, single_plan(Recompute::kNone), 3, 1e-3f);
  check_gradients(model, single_plan(Recompute::kFull), 3, 1e-3f);
}

// Token dropping (moe.h's moe_expert_capacity): a capacity factor of 0.75 gives each of the 4
// experts 6 of a micro-batch's 16 x 2 assignments, fewer than the routing sends some of them;
// a dropped assignment's gate and expert get no gradient, and the router's still matches the
// finite differences (a step that changes which assignments are dropped changes the routing
// fingerprint and is skipped).
TEST(GptGradientMoe, TokenDroppingAtCapacityMatchesFiniteDifferences) {
  ModelSpec model = small_moe_model();
  model.moe_capacity_factor = 0.75;
  EXPECT_EQ(moe_expert_capacity(16, 2, 4, 0.75), 6);
  EXPECT_EQ(moe_expert_capacity(16, 2, 4, std::nullopt), 0);  // dropless
  EXPECT_EQ(moe_expert_capacity(16, 2, 4, 2.0), 0);  // 16: an expert can take every token
  // The routed buffers: 2 EP members x min(2 local experts x 6, 16 tokens x 2).
  EXPECT_EQ(moe_capacity_rows(2, 16, 2, 2, 6), 24);
  EXPECT_EQ(moe_capacity_rows(2, 16, 2, 2, 0), 64);
  EXPECT_EQ(moe_expert_capacity_rows(2, 16, 6), 12);
  // Something is dropped at this seed and capacity.
  const Plan plan = single_plan(Recompute::kNone);
  auto comm = make_local_comm();
  Blocks blocks(stage_layouts(model, plan, 0, 0), 3);
  StageModel net(model, plan, 0, *comm, blocks);
  std::vector<std::int32_t> tokens(16, 7), targets(16, 9);
  for (std::size_t i = 0; i < tokens.size(); ++i)
    tokens[i] = static_cast<std::int32_t>(13 * i % 200);
  Mat unused;
  net.forward(0, 0, tokens.data(), targets.data(), nullptr, &unused, 1.0f / 16);
  EXPECT_GT(net.dropped_assignments(), 0);
  net.backward(0, 0, nullptr, &unused);
  check_gradients(model, single_plan(Recompute::kNone), 3, 1e-3f);
  check_gradients(model, single_plan(Recompute::kFull), 3, 1e-3f);
}

// The scratch arena (workspace.h) is sized from the plan before anything runs
// (StageModel::scratch_floats); a forward and backward of one micro-batch reach exactly that
// size (the sizing mirrors the functions, none over-counted), dense and MoE, with and without
// capacity, under each recompute.
TEST(ScratchArena, APassReachesTheSizeWorkedOutFromThePlan) {
  const ModelSpec moe = small_moe_model();
  ModelSpec capped = moe;
  capped.moe_capacity_factor = 1.0;
  for (const ModelSpec& model : {small_model(), moe, capped}) {
    for (Recompute r : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
      const Plan plan = single_plan(r);
      auto comm = make_local_comm();
      Blocks blocks(stage_layouts(model, plan, 0, 0), 3);
      StageModel net(model, plan, 0, *comm, blocks);
      const std::size_t size = net.scratch().capacity();
      EXPECT_GT(size, 0u);
      std::vector<std::int32_t> tokens(16), targets(16);
      for (std::size_t i = 0; i < tokens.size(); ++i) {
        tokens[i] = static_cast<std::int32_t>(13 * i % 200);
        targets[i] = static_cast<std::int32_t>(7 * i % 200);
      }
      Mat unused;
      net.forward(0, 0, tokens.data(), targets.data(), nullptr, &unused, 1.0f / 16);
      net.backward(0, 0, nullptr, &unused);
      EXPECT_EQ(net.scratch().high_water(), size)
          << model.num_experts << " experts, recompute " << to_string(r);
    }
  }
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
  // The head's weight gradient deferred to the flush is planned and simulated, not executed.
  Plan deferred = p;
  deferred.defer_embedding_wgrad = true;
  EXPECT_NE(check_executor_supports(m, deferred).message().find("defer_embedding_wgrad"),
            std::string::npos);
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
  // Group-limited routing (DeepSeek-V3's) would be routed as plain top-k: refused by name.
  ModelSpec grouped = m;
  grouped.num_experts = 8;
  grouped.experts_per_token = 2;
  grouped.router_groups = 4;
  grouped.router_group_topk = 2;
  EXPECT_NE(check_executor_supports(grouped, p).message().find("router_groups=4"),
            std::string::npos);
  // An expert capacity runs, with context parallelism and folded over tp too (each rank drops
  // over the capacity of the tokens it routes, as Megatron-Core's router: params.h's
  // MoeCapacityShares).
  ModelSpec capped = m;
  capped.num_experts = 4;
  capped.experts_per_token = 2;
  capped.moe_capacity_factor = 1.0;
  EXPECT_TRUE(check_executor_supports(capped, p).ok());
  Plan cp2 = p;
  cp2.cp = 2;
  EXPECT_TRUE(check_executor_supports(capped, cp2).ok())
      << check_executor_supports(capped, cp2).message();
  Plan folded = p;
  folded.expert_layout = ExpertLayout::kFolded;
  folded.ep = 2;
  folded.expert_tp = 1;
  EXPECT_TRUE(check_executor_supports(capped, folded).ok())
      << check_executor_supports(capped, folded).message();
  folded.tp = 2;
  folded.sequence_parallel = true;
  EXPECT_TRUE(check_executor_supports(capped, folded).ok())
      << check_executor_supports(capped, folded).message();
  // Folded with the experts split over expert_tp > 1 runs (moe.cc gathers the routed rows over
  // the expert-TP group and reduce-scatters the experts' partial outputs), with a capacity too
  // where each rank routes whole micro-batches (tp 1).
  ModelSpec dropless = capped;
  dropless.moe_capacity_factor.reset();
  Plan etp2 = folded;
  etp2.ep = 1;
  etp2.expert_tp = 2;
  EXPECT_TRUE(check_executor_supports(dropless, etp2).ok())
      << check_executor_supports(dropless, etp2).message();
  etp2.tp = 1;
  etp2.sequence_parallel = false;
  etp2.dp = 2;
  EXPECT_TRUE(check_executor_supports(capped, etp2).ok())
      << check_executor_supports(capped, etp2).message();
}

// Plan fields that plan and simulate model and the executor does not run: each is rejected
// before anything runs, naming the field.
TEST(Params, PlanFieldsTheExecutorDoesNotRunAreRejectedNamingTheField) {
  const ModelSpec m = small_model();
  const struct {
    void (*set)(Plan&);
    const char* message_start;
  } cases[] = {
      {[](Plan& p) { p.fp8 = true; }, "fp8: "},
      {[](Plan& p) { p.recompute = Recompute::kSelectiveOp; },
       "the CPU executor does not support recompute selective-op"},
      // Issue 23: other frameworks' loss and attention kernels.
      {[](Plan& p) { p.cross_entropy = CrossEntropy::kUnfused; },
       "the CPU executor does not support cross_entropy unfused"},
      {[](Plan& p) { p.attention_kernel = AttentionKernel::kCudnn; },
       "the CPU executor does not support attention_kernel cudnn"},
      // DeepSpeed 0.3-0.5's per-tensor ZeRO-3 gathers are simulated, not executed.
      {[](Plan& p) {
         p.zero_stage = 3;
         p.zero3_gather = ZeroGather::kPerTensor;
       },
       "the CPU executor does not support zero3_gather per-tensor"},
      // nanotron's ZeRO-1 list collectives are simulated, not executed.
      {[](Plan& p) {
         p.zero_stage = 1;
         p.zero1_collectives = ZeroCollectives::kPerRank;
       },
       "the CPU executor does not support zero1_collectives per-rank"},
      // DeepSpeed BF16_Optimizer's whole-gradient all-reduce and accumulation pass are
      // simulated, not executed.
      {[](Plan& p) {
         p.zero_stage = 1;
         p.zero1_collectives = ZeroCollectives::kAllReduce;
       },
       "the CPU executor does not support zero1_collectives all-reduce"},
      {[](Plan& p) {
         p.zero_stage = 1;
         p.precision = Precision::kBf16;
         p.grad_precision = GradPrecision::kFp32;
         p.grad_accumulation_pass = GradAccumulationPass::kAdd;
       },
       "the CPU executor does not support grad_accumulation_pass"},
      // nanotron's loss, eager SwiGLU and DDP bucket copy are simulated, not executed.
      {[](Plan& p) { p.cross_entropy = CrossEntropy::kCast; },
       "the CPU executor does not support cross_entropy cast"},
      {[](Plan& p) { p.elementwise = Elementwise::kEagerSwiglu; },
       "the CPU executor does not support elementwise eager-swiglu"},
      {[](Plan& p) { p.ddp_bucket_copy = true; },
       "the CPU executor does not support ddp_bucket_copy"},
      // Megatron-LM 2021's split pipeline sends are simulated, not executed.
      {[](Plan& p) {
         p.tp = 2;
         p.pp = 2;
         p.sequence_parallel = false;
         p.pipeline_scatter_gather = true;
       },
       "the CPU executor does not support pipeline_scatter_gather"},
      // PyTorch eager's unfused norm, rotary and activation kernels are simulated, not executed.
      {[](Plan& p) { p.elementwise = Elementwise::kEager; },
       "the CPU executor does not support elementwise eager"},
      // FSDP's one gather for a recomputed layer is simulated, not executed.
      {[](Plan& p) {
         p.zero_stage = 3;
         p.zero3_recompute_gather = ZeroRecomputeGather::kKept;
       },
       "the CPU executor does not support zero3_recompute_gather kept"},
      // FSDP2's backward prefetch ahead of the reduce-scatter is simulated, not executed.
      {[](Plan& p) {
         p.zero_stage = 3;
         p.zero3_backward_prefetch = ZeroBackwardPrefetch::kBeforeReduce;
       },
       "the CPU executor does not support zero3_backward_prefetch before-reduce"},
      // PyTorch FSDP's copies around its collectives are simulated, not executed.
      {[](Plan& p) {
         p.zero_stage = 3;
         p.zero3_copies = ZeroCopies::kPerParam;
       },
       "the CPU executor does not support zero3_copies per-param"},
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
      {[](Plan& p) {
         p.tp = 2;
         p.sequence_parallel = true;
         p.tp_comm_overlap = true;
         p.tp_comm_overlap_impl = TpOverlapImpl::kTorchAsync;
       },
       "the CPU executor does not support tp_comm_overlap_impl torch-async"},
  };
  for (const auto& c : cases) {
    Plan p = single_plan(Recompute::kNone);
    c.set(p);
    const Status s = check_executor_supports(m, p);
    ASSERT_FALSE(s.ok()) << c.message_start;
    EXPECT_EQ(s.code(), ExitCode::kInvalidInput);
    EXPECT_EQ(s.message().rfind(c.message_start, 0), 0u) << s.message();
  }
  // Issue 26: the CPU executor runs ZeRO-Offload and ZeRO-Infinity's tiers
  // (executor/offload.h; tests/executor/offload_test.cc).
  for (OffloadDevice device : {OffloadDevice::kCpu, OffloadDevice::kNvme}) {
    Plan p = single_plan(Recompute::kNone);
    p.zero_stage = 3;
    p.offload = Offload::kOptimizerParams;
    p.offload_device = device;
    EXPECT_TRUE(check_executor_supports(m, p).ok()) << check_executor_supports(m, p).message();
  }
  // Mixture of experts runs with any ZeRO stage, with cp, and with tp under sequence
  // parallelism (executor/cpu/moe.h); the rest is refused.
  ModelSpec moe = m;
  moe.num_experts = 4;
  moe.experts_per_token = 2;
  Plan ep = single_plan(Recompute::kNone);
  ep.dp = ep.ep = 2;
  EXPECT_TRUE(check_executor_supports(moe, ep).ok());
  for (int zero = 1; zero <= 3; ++zero) {
    Plan z = ep;
    z.zero_stage = zero;
    EXPECT_TRUE(check_executor_supports(moe, z).ok()) << "zero_stage " << zero;
  }
  Plan tp_sp = ep;
  tp_sp.tp = 2;
  tp_sp.sequence_parallel = true;
  tp_sp.cp = 2;
  EXPECT_TRUE(check_executor_supports(moe, tp_sp).ok());
  const struct {
    void (*set)(Plan&);
    const char* message_start;
  } moe_cases[] = {
      {[](Plan& p) { p.tp = 2; },
       "the CPU executor does not support tp=2 with a mixture-of-experts model without "
       "sequence_parallel"},
      {[](Plan& p) { p.ep_overlap = true; }, "ep_overlap: the executors run each expert"},
  };
  for (const auto& c : moe_cases) {
    Plan p = ep;
    c.set(p);
    const Status s = check_executor_supports(moe, p);
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
  // And dualpipe (both directions, every chunk twice): the pp2_dualpipe and pp4_dualpipe
  // checks; the CUDA executor refuses it on its own (tests/executor/cuda/gpt_cuda_test.cc).
  zb.schedule = Schedule::kDualPipe;
  EXPECT_TRUE(check_executor_supports(m, zb).ok());
}

// DualPipe's placement as the stage model reads it: stage s's chunk 0 is model chunk s (fed at
// stage 0), its chunk 1 a copy of chunk pp-1-s (fed at stage pp-1); each holds its layers'
// blocks, the end stages the embedding and the head of both; a stage and its mirror hold the
// same blocks in the same order, so that their gradients sum block by block.
TEST(StageGeometry, DualPipeHoldsEachChunkTwiceAndPairsMirrorsBlockByBlock) {
  ModelSpec m = small_model();
  m.num_layers = 8;
  for (const std::int64_t pp : {2, 4}) {
    Plan p = single_plan(Recompute::kNone);
    p.pp = pp;
    p.schedule = Schedule::kDualPipe;
    p.virtual_stages = 2;
    p.global_batch_size = 2 * pp * p.micro_batch_size;
    ASSERT_TRUE(validate_plan(p).ok());
    const std::int64_t per_chunk = m.num_layers / pp;
    for (std::int64_t s = 0; s < pp; ++s) {
      SCOPED_TRACE("pp " + std::to_string(pp) + " stage " + std::to_string(s));
      const StageGeometry g = stage_geometry(m, p, s, 0);
      ASSERT_EQ(g.num_chunks(), 2);
      for (std::int64_t local = 0; local < 2; ++local) {
        const std::int64_t chunk = local == 0 ? s : pp - 1 - s;
        const auto& blocks = g.chunk_blocks[static_cast<std::size_t>(local)];
        ASSERT_EQ(static_cast<std::int64_t>(blocks.size()), per_chunk);
        for (std::size_t i = 0; i < blocks.size(); ++i)
          EXPECT_EQ(g.layouts[blocks[i]].layer, chunk * per_chunk + static_cast<std::int64_t>(i));
        EXPECT_EQ(g.has_embedding(local), chunk == 0);
        EXPECT_EQ(g.has_head(local), chunk == pp - 1);
      }
      const bool end = s == 0 || s == pp - 1;
      EXPECT_EQ(g.shape.first, end);
      EXPECT_EQ(g.shape.last, end);
      const StageGeometry mirror = stage_geometry(m, p, pp - 1 - s, 0);
      ASSERT_EQ(mirror.layouts.size(), g.layouts.size());
      for (std::size_t b = 0; b < g.layouts.size(); ++b) {
        EXPECT_EQ(mirror.layouts[b].kind, g.layouts[b].kind);
        EXPECT_EQ(mirror.layouts[b].layer, g.layouts[b].layer);
        EXPECT_EQ(mirror.layouts[b].size, g.layouts[b].size);
      }
    }
  }
}

}  // namespace
}  // namespace trainplan::executor
