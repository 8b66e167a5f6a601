// executor/scale_down.h on the zoo's models and plans that `plan` emits for them: the layout is
// kept, the result is a plan the CPU executor accepts, every change is listed, and a plan that
// does not fit its model is refused naming the field. Run: ctest -R ScaleDown
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>

#include "executor/params.h"
#include "executor/scale_down.h"

namespace trainplan::executor {
namespace {

ModelSpec zoo(const std::string& name) {
  std::ifstream in(std::string(TRAINPLAN_SOURCE_DIR) + "/models/" + name);
  std::ostringstream s;
  s << in.rdbuf();
  auto m = model_from_json(Json::parse(s.str()), name);
  EXPECT_TRUE(m.ok()) << m.status().message();
  return *m;
}

bool lists(const ScaledRun& r, const std::string& start) {
  return std::any_of(r.changes.begin(), r.changes.end(),
                     [&](const std::string& l) { return l.rfind(start, 0) == 0; });
}

void expect_same_layout(const Plan& a, const Plan& b) {
  EXPECT_EQ(a.tp, b.tp);
  EXPECT_EQ(a.cp, b.cp);
  EXPECT_EQ(a.pp, b.pp);
  EXPECT_EQ(a.dp, b.dp);
  EXPECT_EQ(a.ep, b.ep);
  EXPECT_EQ(a.zero_stage, b.zero_stage);
  EXPECT_EQ(a.zero_shard_size, b.zero_shard_size);
  EXPECT_EQ(a.schedule, b.schedule);
  EXPECT_EQ(a.virtual_stages, b.virtual_stages);
  EXPECT_EQ(a.recompute, b.recompute);
  EXPECT_EQ(a.sequence_parallel, b.sequence_parallel);
  EXPECT_EQ(a.attention, b.attention);
}

// What `plan --model models/llama3-8b.json --gpus 4 --emit-plan` writes: cp 4 with Transformer
// Engine's ring (plan's default cp_comm), ZeRO-2, bf16. The CPU executor refuses the ring by
// name; scaled down, it runs the all-gather and says so, and prices its ZeRO-2 shard add.
TEST(ScaleDown, Llama3ContextParallelPlanRunsOnTheCpuExecutor) {
  const ModelSpec m = zoo("llama3-8b.json");
  Plan p;
  p.cp = 4;
  p.cp_comm = CpComm::kP2p;
  p.zero_stage = 2;
  p.micro_batch_size = 1;
  p.global_batch_size = 256;
  auto r = scale_down(m, p);
  ASSERT_TRUE(r.ok()) << r.status().message();
  expect_same_layout(r->plan, p);
  EXPECT_TRUE(check_executor_supports(r->model, r->plan).ok())
      << check_executor_supports(r->model, r->plan).message();
  EXPECT_EQ(r->model.seq_len % (2 * p.cp), 0);
  EXPECT_EQ(r->model.vocab_size, 256);
  EXPECT_LE(r->model.hidden_size, 128);
  EXPECT_EQ(r->plan.global_batch_size, 2);  // one micro-batch of 1 per stage, twice
  EXPECT_TRUE(lists(*r, "precision bf16 -> fp32"));
  EXPECT_TRUE(lists(*r, "activation swiglu -> gelu"));
  EXPECT_TRUE(lists(*r, "hidden_size 4096 -> "));
  EXPECT_TRUE(lists(*r, "cp_comm p2p -> all-gather"));
  // ZeRO-2: the executors add each reduced gradient shard into an fp32 shard, and say so.
  EXPECT_EQ(r->plan.grad_accumulation_pass, GradAccumulationPass::kShardAdd);
  EXPECT_TRUE(lists(*r, "grad_accumulation_pass none -> shard-add"));
  Plan ring = r->plan;
  for (CpComm form :
       {CpComm::kP2p, CpComm::kA2a, CpComm::kTorchAllGather, CpComm::kTorchAllToAll}) {
    ring.cp_comm = form;
    const Status st = check_executor_supports(r->model, ring);
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.message().find("the CPU executor does not support cp_comm " +
                                std::string(to_string(form))),
              std::string::npos)
        << st.message();
  }
}

// GPT-3 on 4 GPUs: tp 4 with SP, ZeRO-3 offloaded to NVMe, full recompute of 93 of 96 layers.
TEST(ScaleDown, Gpt3KeepsPartialRecomputeAndDropsOffload) {
  const ModelSpec m = zoo("gpt3.json");
  Plan p;
  p.tp = 4;
  p.sequence_parallel = true;
  p.zero_stage = 3;
  p.offload = Offload::kOptimizerParams;
  p.offload_device = OffloadDevice::kNvme;
  p.recompute = Recompute::kFull;
  p.recompute_num_layers = 93;
  p.micro_batch_size = 32;
  p.global_batch_size = 2048;
  auto r = scale_down(m, p);
  ASSERT_TRUE(r.ok()) << r.status().message();
  expect_same_layout(r->plan, p);
  EXPECT_TRUE(check_executor_supports(r->model, r->plan).ok())
      << check_executor_supports(r->model, r->plan).message();
  EXPECT_EQ(r->model.num_layers, 2);
  EXPECT_EQ(r->plan.recompute_num_layers, 1);  // still a part of the chunk, not all of it
  EXPECT_EQ(r->model.num_attention_heads % p.tp, 0);
  EXPECT_EQ(r->model.ffn_hidden_size, 4 * r->model.hidden_size);  // GPT-3's ratio
  EXPECT_EQ(r->plan.offload, Offload::kNone);
  EXPECT_TRUE(lists(*r, "offload optimizer+params -> none"));
  EXPECT_TRUE(lists(*r, "dropout true -> false"));
}

// An interleaved pipeline with uneven chunks keeps pp * virtual_stages chunks and a number of
// micro-batches that is a multiple of pp.
TEST(ScaleDown, InterleavedPipelineKeepsItsChunks) {
  const ModelSpec m = zoo("llama3-70b.json");  // 80 layers
  Plan p;
  p.tp = 8;
  p.pp = 4;
  p.dp = 2;
  p.schedule = Schedule::kInterleaved;
  p.virtual_stages = 2;
  p.layers_per_stage = {9, 10, 10, 11, 11, 10, 10, 9};
  p.micro_batch_size = 1;
  p.global_batch_size = 512;
  auto r = scale_down(m, p);
  ASSERT_TRUE(r.ok()) << r.status().message();
  expect_same_layout(r->plan, p);
  EXPECT_EQ(r->plan.layers_per_stage.size(), 8u);
  EXPECT_EQ(r->plan.num_micro_batches() % p.pp, 0);
  EXPECT_TRUE(validate_plan(r->plan).ok()) << validate_plan(r->plan).message();
  EXPECT_TRUE(check_plan_fits_model(r->plan, r->model).ok());
}

// A mixture-of-experts model stays one: experts, top-k and ep are kept (the CPU executor then
// says whether it runs them).
TEST(ScaleDown, MixtureOfExpertsStaysOne) {
  const ModelSpec m = zoo("mixtral-8x7b.json");
  Plan p;
  p.dp = 8;
  p.ep = 8;
  p.zero_stage = 2;
  p.micro_batch_size = 1;
  p.global_batch_size = 512;
  auto r = scale_down(m, p);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->model.num_experts, m.num_experts);
  EXPECT_EQ(r->model.experts_per_token, m.experts_per_token);
  EXPECT_EQ(r->plan.ep, 8);
}

// Megatron-Core's MoE parallel folding with the experts split over expert_tp 4 beside tp 2: the
// experts' width stays a multiple of both (expert_tp splits it), and the CPU executor runs it.
TEST(ScaleDown, FoldedExpertTensorParallelKeepsTheExpertsDivisible) {
  const ModelSpec m = zoo("mixtral-8x7b.json");
  Plan p;
  p.tp = 2;
  p.sequence_parallel = true;
  p.dp = 4;
  p.ep = 2;
  p.expert_layout = ExpertLayout::kFolded;
  p.expert_tp = 4;
  p.micro_batch_size = 1;
  p.global_batch_size = 64;
  auto r = scale_down(m, p);
  ASSERT_TRUE(r.ok()) << r.status().message();
  expect_same_layout(r->plan, p);
  EXPECT_EQ(r->plan.expert_tp, 4);
  EXPECT_EQ(r->model.ffn_hidden_size % 4, 0) << r->model.ffn_hidden_size;
  EXPECT_TRUE(check_executor_supports(r->model, r->plan).ok())
      << check_executor_supports(r->model, r->plan).message();
}

// DeepSeek-V3's group-limited routing becomes top-k over every expert, and an FP8 plan written
// as Transformer Engine runs it (delayed scaling, cached weights) loses its FP8 fields with its
// FP8, so the scaled plan is still one the planner accepts; each change is listed.
// FSDP's FP8 weight all-gather goes with the plan's FP8, listed.
TEST(ScaleDown, Fp8AllGatherIsDroppedWithFp8) {
  const ModelSpec m = zoo("llama3-8b.json");
  Plan p;
  p.dp = 8;
  p.zero_stage = 3;
  p.micro_batch_size = 1;
  p.global_batch_size = 64;
  p.fp8 = true;
  p.fp8_all_gather = true;
  ASSERT_TRUE(validate_plan(p).ok()) << validate_plan(p).message();
  auto r = scale_down(m, p);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_TRUE(check_executor_supports(r->model, r->plan).ok())
      << check_executor_supports(r->model, r->plan).message();
  EXPECT_FALSE(r->plan.fp8_all_gather);
  EXPECT_TRUE(lists(*r, "fp8_all_gather true -> false"));
}

TEST(ScaleDown, GroupedRoutingAndTheFp8RecipeAreDropped) {
  ModelSpec m = zoo("mixtral-8x7b.json");
  m.router_groups = 4;
  m.router_group_topk = 2;
  Plan p;
  p.dp = 8;
  p.ep = 8;
  p.micro_batch_size = 1;
  p.global_batch_size = 512;
  p.fp8 = true;
  p.fp8_scaling = Fp8Scaling::kDelayed;
  p.fp8_weight_cache = true;
  p.fp8_attention = true;
  p.attention_kernel = AttentionKernel::kFlash2;
  p.moe_dispatcher = MoeDispatcher::kDeepEp;
  {  // The executors refuse another dispatcher's traffic by name.
    Plan only = p;
    only.fp8 = false;
    only.fp8_scaling = Fp8Scaling::kCurrent;
    only.fp8_weight_cache = false;
    only.fp8_attention = false;
    only.attention_kernel = AttentionKernel::kGeneric;
    const Status st = check_executor_supports(zoo("mixtral-8x7b.json"), only);
    EXPECT_NE(st.message().find("moe_dispatcher deepep"), std::string::npos) << st.message();
  }
  auto r = scale_down(m, p);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_TRUE(check_executor_supports(r->model, r->plan).ok())
      << check_executor_supports(r->model, r->plan).message();
  EXPECT_EQ(r->model.router_groups, 0);
  EXPECT_EQ(r->plan.moe_dispatcher, MoeDispatcher::kAllToAll);
  EXPECT_FALSE(r->plan.fp8_weight_cache);
  for (const char* what : {"router_groups 4 -> 0", "fp8_scaling delayed -> current",
                           "fp8_weight_cache true -> false", "fp8_attention true -> false",
                           "attention_kernel flash2 -> generic",
                           "moe_dispatcher deepep -> alltoall"})
    EXPECT_TRUE(lists(*r, what)) << what;
}

// A ZeRO-1 plan with one field `set` that the executors do not run: they refuse it naming it
// (`refused`), and --scale-down puts the default back (`is_default`), listing it (`listed`).
void expect_refused_then_reset(const std::function<void(Plan&)>& set, const std::string& refused,
                               const std::string& listed,
                               const std::function<bool(const Plan&)>& is_default) {
  Plan p;
  p.dp = 8;
  p.zero_stage = 1;
  p.micro_batch_size = 1;
  p.global_batch_size = 8;
  set(p);
  ModelSpec m = zoo("gpt2-124m.json");
  m.dropout = false;  // the CPU executor runs none, and computes in fp32
  Plan fp32 = p;
  fp32.precision = Precision::kFp32;
  const Status st = check_executor_supports(m, fp32);
  EXPECT_NE(st.message().find(refused), std::string::npos) << st.message();
  auto r = scale_down(zoo("llama3-8b.json"), p);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_TRUE(check_executor_supports(r->model, r->plan).ok())
      << check_executor_supports(r->model, r->plan).message();
  EXPECT_TRUE(is_default(r->plan));
  EXPECT_TRUE(lists(*r, listed)) << listed;
}

// Plan::param_gather: the executors gather the updated shards after the step.
TEST(ScaleDown, TheOverlappedParameterGatherIsPutBackAfterTheStep) {
  expect_refused_then_reset([](Plan& p) { p.param_gather = ParamGather::kNextForward; },
                            "param_gather next-forward", "param_gather next-forward -> after-step",
                            [](const Plan& p) { return p.param_gather == ParamGather::kAfterStep; });
}

// Plan::dp_bucket_elements: the executors run one collective per parameter block.
TEST(ScaleDown, DpBucketsArePutBackToOneCollectivePerBlock) {
  expect_refused_then_reset([](Plan& p) { p.dp_bucket_elements = 52428800; },
                            "dp_bucket_elements 52428800", "dp_bucket_elements 52428800 -> 0",
                            [](const Plan& p) { return p.dp_bucket_elements == 0; });
}

TEST(ScaleDown, APlanThatDoesNotFitItsModelIsRefusedNamingTheField) {
  Plan p;
  p.tp = 5;
  p.micro_batch_size = 1;
  p.global_batch_size = 8;
  auto r = scale_down(zoo("gpt3.json"), p);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("tp=5 does not divide num_attention_heads=96"),
            std::string::npos)
      << r.status().message();
}

}  // namespace
}  // namespace trainplan::executor
