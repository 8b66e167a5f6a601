// The CUDA stage model against the CPU StageModel (executor/cpu/gpt.h) on the same weights and
// batch: loss, logits and the gradient of every parameter tensor, with and without full
// recompute. Skips without a GPU.
// Run: build-cuda/tests/executor/cuda/executor_cuda_gpt_test
//
// Both sides start from the same weights, rounded to bf16 (the CPU then computes in float32).
// Tolerances (relative L2 over a tensor, or relative for the loss), chosen from the bf16
// rounding of 2^-9 = 1.95e-3 per stored activation:
//  - logits: kLogits = 2e-2. Each of the 2 layers stores ~8 bf16 activations on the path to
//    the logits (norm, q/k/v, attention output, residuals, fc1, GELU); independent roundings
//    add in quadrature, ~sqrt(16) * 1.1e-3 = 4.4e-3 RMS, amplified by the layers' gains
//    (about 2-3x for this random init): 2e-2 leaves room without hiding an indexing bug, which
//    gives errors of order 1.
//  - loss (sum over tokens): kLoss = 2e-3 relative. The loss is a smooth average of the
//    logits' log-softmax; logit errors of zero mean largely cancel in the sum.
//  - gradients: kGrad = 5e-2. The backward reads the stored bf16 activations and rounds its
//    own bf16 activation gradients at each of ~10 steps per layer; llm.c's GPT-2 checks accept
//    similar relative differences between its bf16 CUDA and float32 CPU gradients.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <tuple>

#include "calibration/executor_probe.h"
#include "executor/comm.h"
#include "executor/cuda/gpt_cuda.h"
#include "executor/cuda/kernels.h"
#include "executor/cuda/cuda_stage.h"
#include "executor/cpu/gpt.h"
#include "executor/cpu/kernels.h"
#include "executor/cpu/cpu_stage.h"
#include "gpu_test_util.h"

namespace trainplan::executor::cuda {
namespace {

constexpr double kLogits = 2e-2, kLoss = 2e-3, kGrad = 5e-2;

ModelSpec small_model() {
  ModelSpec m;
  m.name = "cuda-check";
  m.num_layers = 2;
  m.hidden_size = 64;
  m.num_attention_heads = 4;
  m.num_kv_heads = 4;
  m.head_dim = 16;
  m.ffn_hidden_size = 256;
  m.vocab_size = 200;  // padded: the padding must stay out of the loss
  m.seq_len = 32;
  m.max_position_embeddings = 32;
  m.dropout = false;
  return m;
}

Plan plan_for(Precision p, Recompute r) {
  Plan plan;
  plan.micro_batch_size = 2;
  plan.global_batch_size = 2;
  plan.precision = p;
  plan.recompute = r;
  return plan;
}

// Initial weights of every block, rounded to bf16.
std::vector<std::vector<float>> initial_blocks(const std::vector<BlockLayout>& layouts) {
  std::vector<std::vector<float>> out;
  for (const BlockLayout& l : layouts) {
    std::vector<float>& b = out.emplace_back(static_cast<std::size_t>(l.size), 0.0f);
    for (const TensorSlice& t : l.tensors) init_slice(1234, t, b.data() + t.offset);
    for (float& x : b) x = testing::round_bf16(x);
  }
  return out;
}

class CpuBlocks final : public BlockAccess {
 public:
  explicit CpuBlocks(std::vector<std::vector<float>> p) : p_(std::move(p)) {
    for (const auto& b : p_) g_.emplace_back(b.size(), 0.0f);
  }
  void acquire(std::size_t, DpPoint) override {}
  void release(std::size_t) override {}
  void backward_done(std::size_t) override {}
  const float* params(std::size_t b) override { return p_[b].data(); }
  float* grads(std::size_t b) override { return g_[b].data(); }
  std::vector<std::vector<float>> p_, g_;
};

class GpuBlocks final : public DeviceBlockAccess {
 public:
  explicit GpuBlocks(const std::vector<std::vector<float>>& p) {
    for (const auto& b : p) {
      p_.push_back(testing::upload_bf16(b));
      g_.emplace_back(static_cast<std::int64_t>(b.size()));
      TP_CUDA(cudaMemset(g_.back().data(), 0, b.size() * sizeof(float)));
    }
  }
  void acquire(std::size_t, DpPoint) override {}
  void release(std::size_t) override {}
  void backward_done(std::size_t) override {}
  const bf16* params(std::size_t b) override { return p_[b].data(); }
  float* grads(std::size_t b) override { return g_[b].data(); }
  std::vector<DeviceBuffer<bf16>> p_;
  std::vector<DeviceBuffer<float>> g_;
};

// Reference logits (T, padded vocab) of a single-stage model with the CPU kernels.
Mat reference_logits(const ModelSpec& m, const std::vector<BlockLayout>& layouts,
                     const std::vector<std::vector<float>>& p, const std::vector<std::int32_t>& tok,
                     std::int64_t batch) {
  const std::int64_t h = m.hidden_size, T = static_cast<std::int64_t>(tok.size());
  const std::int64_t q = m.q_width(), f = m.ffn_hidden_size;
  auto at = [&](std::size_t b, std::size_t t) { return p[b].data() + layouts[b].tensors[t].offset; };
  Mat x(T, h);
  for (std::int64_t i = 0; i < T; ++i)
    for (std::int64_t j = 0; j < h; ++j)
      x(i, j) = at(0, kWte)[tok[i] * h + j] + at(0, kWpe)[(i % m.seq_len) * h + j];
  for (std::size_t b = 1; b + 1 < layouts.size(); ++b) {
    // The CPU kernels write into buffers the caller has shaped (executor/cpu/kernels.h).
    Mat ln(T, h), qm(T, q), km(T, q), vm(T, q), attn(T, q), o(T, h), x1, a(T, f), g(T, f), mm(T, h);
    Mat probs(batch * m.num_attention_heads * m.seq_len, m.seq_len);
    Vec mean(T), rstd(T);
    executor::layernorm_forward(x, at(b, kLn1G), at(b, kLn1B), ln, mean, rstd);
    executor::linear_forward(ln, ConstMatMap(at(b, kWq), h, q), at(b, kBq), qm);
    executor::linear_forward(ln, ConstMatMap(at(b, kWk), h, q), at(b, kBk), km);
    executor::linear_forward(ln, ConstMatMap(at(b, kWv), h, q), at(b, kBv), vm);
    executor::attention_forward(qm, km, vm, batch, m.seq_len, m.num_attention_heads, probs, attn);
    executor::linear_forward(attn, ConstMatMap(at(b, kWo), q, h), at(b, kBo), o);
    x1 = x + o;
    executor::layernorm_forward(x1, at(b, kLn2G), at(b, kLn2B), ln, mean, rstd);
    executor::linear_forward(ln, ConstMatMap(at(b, kW1), h, f), at(b, kB1), a);
    executor::gelu_forward(a, g);
    executor::linear_forward(g, ConstMatMap(at(b, kW2), f, h), at(b, kB2), mm);
    x = x1 + mm;
  }
  const std::size_t hb = layouts.size() - 1;
  Mat ln(T, h);
  Vec mean(T), rstd(T);
  executor::layernorm_forward(x, at(hb, kLnfG), at(hb, kLnfB), ln, mean, rstd);
  const std::int64_t vp = layouts[0].tensors[kWte].rows;
  return ln * ConstMatMap(at(0, kWte), vp, h).transpose();
}

// Recompute, and TRAINPLAN_CUDA_QKV (q, k, v as one batched product or three).
class CudaStageModelTest : public ::testing::TestWithParam<std::tuple<Recompute, const char*>> {};

TEST_P(CudaStageModelTest, MatchesCpuStageModel) {
  TRAINPLAN_REQUIRE_GPU();
  const auto [recompute, qkv] = GetParam();
  testing::ScopedEnv env;
  env.set("TRAINPLAN_CUDA_QKV", qkv);
  const ModelSpec model = small_model();
  const Plan cpu_plan = plan_for(Precision::kFp32, recompute);
  const Plan gpu_plan = plan_for(Precision::kBf16, recompute);
  ASSERT_TRUE(check_cuda_executor_supports(model, gpu_plan).ok());
  const std::vector<BlockLayout> layouts = stage_layouts(model, cpu_plan, 0, 0);
  const auto weights = initial_blocks(layouts);
  const std::int64_t T = gpu_plan.micro_batch_size * model.seq_len;
  std::vector<std::int32_t> tokens(T), targets(T);
  for (std::int64_t i = 0; i < T; ++i) {
    tokens[i] = static_cast<std::int32_t>((i * 31 + 7) % model.vocab_size);
    targets[i] = static_cast<std::int32_t>((i * 17 + 3) % model.vocab_size);
  }
  const float scale = 1.0f / static_cast<float>(T);

  // CPU.
  auto local = make_local_comm();
  CpuBlocks cpu(weights);
  StageModel cpu_model(model, cpu_plan, 0, *local, cpu);
  const double cpu_loss = cpu_model.forward(0, 0, tokens.data(), targets.data(), nullptr, nullptr,
                                            scale);
  cpu_model.backward(0, 0, nullptr, nullptr);

  // GPU.
  cudaStream_t stream = nullptr;
  TP_CUDA(cudaStreamCreate(&stream));
  Gemm gemm;
  GpuBlocks gpu(weights);
  CudaStageModel gpu_model(model, gpu_plan, 0, nullptr, gpu, gemm, stream);
  DeviceBuffer<std::int32_t> tok_d(T), tgt_d(T);
  to_device(tokens.data(), tok_d.data(), T);
  to_device(targets.data(), tgt_d.data(), T);
  DeviceBuffer<double> loss_d(1);
  TP_CUDA(cudaMemset(loss_d.data(), 0, sizeof(double)));
  gpu_model.forward(0, 0, tok_d.data(), tgt_d.data(), nullptr, nullptr, scale, loss_d.data());
  TP_CUDA(cudaStreamSynchronize(stream));
  const std::vector<float> logits = testing::download(*gpu_model.logits(0, 0));
  gpu_model.backward(0, 0, nullptr, nullptr);
  TP_CUDA(cudaStreamSynchronize(stream));
  const double gpu_loss = to_host(loss_d.data(), 1)[0];

  const Mat ref = reference_logits(model, layouts, weights, tokens, gpu_plan.micro_batch_size);
  ASSERT_EQ(static_cast<std::int64_t>(logits.size()), ref.size());
  EXPECT_LT(testing::rel_l2(logits, ref.data(), logits.size()), kLogits);
  EXPECT_NEAR(gpu_loss, cpu_loss, kLoss * std::abs(cpu_loss));
  auto l2 = [](const float* v, std::int64_t n) {
    double s = 0;
    for (std::int64_t i = 0; i < n; ++i) s += static_cast<double>(v[i]) * v[i];
    return std::sqrt(s);
  };
  for (std::size_t b = 0; b < layouts.size(); ++b) {
    const std::vector<float> g = testing::download(gpu.g_[b]);
    const float* cpu_grad = cpu.g_[b].data();
    for (const TensorSlice& t : layouts[b].tensors) {
      const std::vector<float> got(g.begin() + t.offset, g.begin() + t.offset + t.size());
      if (t.name.ends_with(".bk")) {
        // The key bias's gradient is zero: softmax is unchanged by a constant added to a row's
        // scores, so each row of dS sums to 0 and so do the dK rows that dbk adds up. A
        // relative error against 0 is rounding noise over nothing (the bf16 dS and dK leave
        // about 1e-3 of |dK|): judge it against the key weight's gradient instead.
        const TensorSlice& wk = layouts[b].tensors[kWk];
        const double wk_norm = l2(cpu_grad + wk.offset, wk.size());
        EXPECT_LT(l2(cpu_grad + t.offset, t.size()), 1e-4 * wk_norm) << "CPU gradient of " << t.name;
        EXPECT_LT(l2(got.data(), t.size()), kGrad * wk_norm) << "gradient of " << t.name;
        continue;
      }
      EXPECT_LT(testing::rel_l2(got, cpu_grad + t.offset, got.size()), kGrad)
          << "gradient of " << t.name;
    }
  }
  TP_CUDA(cudaStreamDestroy(stream));
}

INSTANTIATE_TEST_SUITE_P(
    RecomputeQkv, CudaStageModelTest,
    ::testing::Combine(::testing::Values(Recompute::kNone, Recompute::kFull),
                       ::testing::Values("batched", "separate")),
    [](const ::testing::TestParamInfo<std::tuple<Recompute, const char*>>& p) {
      return std::string(std::get<0>(p.param) == Recompute::kNone ? "none_" : "full_") +
             std::get<1>(p.param);
    });

// TRAINPLAN_CUDA_QKV: unset, batched or separate; any other value is an error naming the
// variable and the value. Runs without a GPU.
TEST(CudaQkvChoice, EnvironmentSelectsAndRejectsWithTheValue) {
  testing::ScopedEnv env;
  env.set("TRAINPLAN_CUDA_QKV", nullptr);
  EXPECT_TRUE(batched_qkv_from_env());
  env.set("TRAINPLAN_CUDA_QKV", "batched");
  EXPECT_TRUE(batched_qkv_from_env());
  env.set("TRAINPLAN_CUDA_QKV", "separate");
  EXPECT_FALSE(batched_qkv_from_env());
  env.set("TRAINPLAN_CUDA_QKV", "fused");
  try {
    batched_qkv_from_env();
    ADD_FAILURE() << "no error for an unknown value";
  } catch (const CudaError& e) {
    EXPECT_NE(std::string(e.what()).find("TRAINPLAN_CUDA_QKV=fused"), std::string::npos)
        << e.what();
  }
}

// Whole optimizer steps: the CUDA trainer (bf16 compute, float32 master weights and AdamW state)
// against the CPU Trainer (float32) over a few steps on the same batches. The CPU starts from
// unrounded float32 weights, so the difference is the bf16 rounding of weights, activations
// and gradient collectives; AdamW's update is bounded by lr per step whatever the gradient, so
// the losses stay within kStepLoss = 1e-2 relative over three steps.
TEST(CudaTrainerTest, LossCurveMatchesCpuTrainer) {
  TRAINPLAN_REQUIRE_GPU();
  constexpr double kStepLoss = 1e-2;
  const ModelSpec model = small_model();
  Plan cpu_plan = plan_for(Precision::kFp32, Recompute::kNone);
  Plan gpu_plan = plan_for(Precision::kBf16, Recompute::kNone);
  cpu_plan.global_batch_size = gpu_plan.global_batch_size = 4;  // two micro-batches
  auto local = make_local_comm();
  auto cpu = make_cpu_trainer(model, cpu_plan, TrainOptions{}, *local);
  ASSERT_TRUE(cpu.ok()) << cpu.status().message();
  auto gpu = make_cuda_trainer(model, gpu_plan, TrainOptions{}, nullptr);
  ASSERT_TRUE(gpu.ok()) << gpu.status().message();
  std::vector<std::int32_t> batch(static_cast<std::size_t>(4 * (model.seq_len + 1)));
  for (int step = 0; step < 3; ++step) {
    for (std::size_t i = 0; i < batch.size(); ++i)
      batch[i] = static_cast<std::int32_t>((i * 13 + step * 7) % model.vocab_size);
    auto a = (*cpu)->step(batch);
    auto b = (*gpu)->step(batch);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_NEAR(b->loss, a->loss, kStepLoss * a->loss) << "step " << step + 1;
    EXPECT_GT(b->phase_s.at("forward"), 0.0);
    EXPECT_GT(b->phase_s.at("backward"), 0.0);
  }
}

// The traced step (device_trace.h) names every compute span after cost-model tasks of the plan,
// in the simulator's layout: what the GPU calibration (tools/calibrate_cuda.cc) and the measured
// trace rely on. task_samples_from_events rejects any compute span that is not such a task.
TEST(CudaTrainerTest, TracedStepNamesEveryComputeSpanAfterTheCostModel) {
  TRAINPLAN_REQUIRE_GPU();
  const ModelSpec model = small_model();
  Plan plan = plan_for(Precision::kBf16, Recompute::kFull);
  plan.global_batch_size = 4;  // two micro-batches
  auto gpu = make_cuda_trainer(model, plan, TrainOptions{}, nullptr);
  ASSERT_TRUE(gpu.ok()) << gpu.status().message();
  std::vector<std::int32_t> batch(static_cast<std::size_t>(4 * (model.seq_len + 1)));
  for (std::size_t i = 0; i < batch.size(); ++i)
    batch[i] = static_cast<std::int32_t>((i * 13) % model.vocab_size);
  DeviceTrace trace;
  std::vector<std::vector<TraceEvent>> steps;
  for (int step = 0; step < 2; ++step) {
    auto r = (*gpu)->step(batch, &trace);
    ASSERT_TRUE(r.ok()) << r.status().message();
    steps.push_back(trace.events());
    ASSERT_FALSE(steps.back().empty());
    for (const TraceEvent& e : steps.back()) {
      EXPECT_GE(e.begin_ns, 0) << e.task;
      EXPECT_GE(e.end_ns, e.begin_ns) << e.task;
      EXPECT_LE(e.end_ns, static_cast<std::int64_t>(r->seconds * 1e9) + 1000000) << e.task;
    }
  }
  auto samples = calibration::task_samples_from_events(steps, model, plan, 0, "test");
  ASSERT_TRUE(samples.ok()) << samples.status().message();
  std::map<std::string, int> seen;
  for (const TraceEvent& e : steps.back())
    seen[std::string(1, e.context.pass) + " " + e.task] += 1;
  const int layer_passes = static_cast<int>(model.num_layers * 2);  // layers x micro-batches
  EXPECT_EQ(seen["F qkv"], layer_passes);
  EXPECT_EQ(seen["R qkv"], layer_passes);  // full recompute
  EXPECT_EQ(seen["B qkv_wgrad"], layer_passes);
  EXPECT_EQ(seen["O optimizer"], 1);
}

TEST(CudaStageModelSupport, RejectsFp32Plans) {
  // Runs without a GPU: a plain check of the plan.
  const Status s = check_cuda_executor_supports(small_model(), plan_for(Precision::kFp32, Recompute::kNone));
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("bf16"), std::string::npos) << s.message();
}

TEST(CudaStageModelSupport, RejectsContextParallelPlans) {
  // Runs without a GPU: the CPU executor runs context parallelism, the CUDA one does not.
  Plan p = plan_for(Precision::kBf16, Recompute::kNone);
  p.cp = 2;
  const Status s = check_cuda_executor_supports(small_model(), p);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("cp=2: the CUDA executor does not implement context parallelism"),
            std::string::npos) << s.message();
}

TEST(CudaStageModelSupport, RejectsMixtureOfExperts) {
  // Runs without a GPU: the CPU executor runs MoE and expert parallelism, the CUDA one neither.
  ModelSpec moe = small_model();
  moe.num_experts = 4;
  moe.experts_per_token = 2;
  Plan p = plan_for(Precision::kBf16, Recompute::kNone);
  Status s = check_cuda_executor_supports(moe, p);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.message().rfind("num_experts=4: the CUDA executor", 0), 0u) << s.message();
  p.ep = 2;
  p.dp = 2;
  s = check_cuda_executor_supports(small_model(), p);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.message().rfind("ep=2: the CUDA executor", 0), 0u) << s.message();
}

TEST(CudaStageModelSupport, RejectsZeroBubbleSchedulesNamingThem) {
  // Runs without a GPU: the CUDA executor runs each backward whole.
  for (const auto& [schedule, v, name] :
       {std::tuple{Schedule::kZbH1, 1, "schedule zb-h1"}, std::tuple{Schedule::kZbV, 2, "schedule zb-v"}}) {
    Plan p = plan_for(Precision::kBf16, Recompute::kNone);
    p.pp = 2;
    p.schedule = schedule;
    p.virtual_stages = v;
    const Status s = check_cuda_executor_supports(small_model(), p);
    EXPECT_FALSE(s.ok()) << name;
    EXPECT_EQ(s.message().rfind(std::string(name) + ": the CUDA executor runs each backward whole", 0),
              0u) << s.message();
  }
}

TEST(CudaStageModelSupport, RejectsOffloadNamingIt) {
  // Runs without a GPU: the CPU executor runs the offload tiers (executor/offload.h), the CUDA
  // one keeps every state in device memory.
  for (const auto& [offload, device, name] :
       {std::tuple{Offload::kOptimizer, OffloadDevice::kCpu, "offload optimizer (offload_device cpu)"},
        std::tuple{Offload::kOptimizerParams, OffloadDevice::kNvme,
                   "offload optimizer+params (offload_device nvme)"}}) {
    Plan p = plan_for(Precision::kBf16, Recompute::kNone);
    p.zero_stage = 3;
    p.offload = offload;
    p.offload_device = device;
    const Status s = check_cuda_executor_supports(small_model(), p);
    EXPECT_FALSE(s.ok()) << name;
    EXPECT_EQ(s.message().rfind(std::string(name) + ": the CUDA executor keeps every state", 0), 0u)
        << s.message();
  }
}

TEST(CudaStageModelSupport, RejectsDualPipeNamingIt) {
  // Runs without a GPU: one direction of micro-batches, whole backwards.
  Plan p = plan_for(Precision::kBf16, Recompute::kNone);
  p.pp = 2;
  p.schedule = Schedule::kDualPipe;
  p.virtual_stages = 2;
  const Status s = check_cuda_executor_supports(small_model(), p);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.message().rfind("schedule dualpipe: the CUDA executor", 0), 0u) << s.message();
}

TEST(CudaStageModelSupport, RejectsPartitionedActivationCheckpoints) {
  // Runs without a GPU: the CPU executor partitions checkpoints, the CUDA one does not.
  Plan p = plan_for(Precision::kBf16, Recompute::kFull);
  p.tp = 2;
  p.partition_activations = true;
  const Status s = check_cuda_executor_supports(small_model(), p);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("partition_activations: the CUDA executor"), std::string::npos)
      << s.message();
}

TEST(CudaStageModelSupport, RejectsHybridSharding) {
  // Runs without a GPU: the CPU executor runs hybrid sharding, the CUDA one shards over all dp.
  Plan p = plan_for(Precision::kBf16, Recompute::kNone);
  p.dp = 4;
  p.global_batch_size = 8;
  p.micro_batch_size = 2;
  p.zero_stage = 2;
  p.zero_shard_size = 2;
  const Status s = check_cuda_executor_supports(small_model(), p);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("zero_shard_size=2: the CUDA executor"), std::string::npos)
      << s.message();
  p.zero_shard_size = 4;  // the whole dp group: plain ZeRO
  EXPECT_TRUE(check_cuda_executor_supports(small_model(), p).ok());
}

TEST(CudaStageModelSupport, RejectsWidthsThatBreakSixteenByteAlignment) {
  // Runs without a GPU. head_dim 12: the attention's per-head slices start 24 bytes apart.
  ModelSpec m = small_model();
  m.num_attention_heads = m.num_kv_heads = 4;
  m.head_dim = 12;
  m.hidden_size = 48;
  const Status s = check_cuda_executor_supports(m, plan_for(Precision::kBf16, Recompute::kNone));
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("head_dim to be a multiple of 8"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("has 12"), std::string::npos) << s.message();
  EXPECT_TRUE(check_cuda_executor_supports(small_model(), plan_for(Precision::kBf16,
                                                                   Recompute::kNone)).ok());
}

}  // namespace
}  // namespace trainplan::executor::cuda
