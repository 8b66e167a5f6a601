// simulator/published_run: how a published run's entry becomes a model, plan and cluster (what
// is read, what is inferred and said so, what is refused with the field named), and how its
// measured figures meet the prediction.
#include "validation/published_run.h"

#include <algorithm>
#include <string>
#include <string_view>

#include <gtest/gtest.h>

namespace trainplan {
namespace {

// A Megatron-LM 2021 style entry (the dev set's schema), edited per test.
Json gpt_entry() {
  return Json::parse(R"({
    "id": "t", "source": "arXiv:2104.04473 Table 1",
    "model": {"name": "GPT 1.7B", "params_b": 1.7, "layers": 24, "hidden": 2304, "heads": 24,
              "ffn_hidden": 9216, "seq_len": 2048, "vocab": 51200},
    "hardware": {"gpu": "A100-SXM4-80GB", "num_gpus": 32, "gpus_per_node": 8,
                 "interconnect": "DGX A100"},
    "parallel": {"tp": 1, "pp": 1, "dp": 32, "cp": 1, "vp": 1, "zero_stage": 0,
                 "sequence_parallel": false, "recompute": "full", "micro_batch": 16,
                 "global_batch": 512},
    "measured": {"tflops_per_gpu": 137, "mfu": null, "iteration_time_s": null,
                 "tokens_per_s": null, "memory_gb": null, "pct_of_peak": 0.44,
                 "aggregate_pflops": 4.4},
    "precision": "fp16", "confidence": "high", "notes": ["DDP impl torch per script."]})");
}

// Llama 3 8B's shape (Dubey et al. 2024, Table 3), with no activation given.
Json llama_entry() {
  Json e = gpt_entry();
  e["source"] = "arXiv:2407.21783";
  e["model"] = Json::parse(R"({"name": "Llama 3 8B", "params_b": 8.0, "layers": 32,
      "hidden": 4096, "heads": 32, "kv_heads": 8, "ffn_hidden": 14336, "seq_len": 8192,
      "vocab": 128256})");
  e["hardware"] = Json::parse(R"({"gpu": "H100-SXM5-80GB", "num_gpus": 8})");
  e["parallel"] = Json::parse(R"({"tp": 1, "pp": 1, "dp": 8, "micro_batch": 1,
      "global_batch": 16})");
  e["precision"] = "bf16";
  return e;
}

PublishedRun map_ok(const Json& e) {
  auto r = published_run_from_json(e, "entry 0");
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? *r : PublishedRun{};
}

std::string map_error(const Json& e) {
  auto r = published_run_from_json(e, "entry 0");
  EXPECT_FALSE(r.ok());
  return r.ok() ? std::string() : r.status().message();
}

// The entry is refused with a message naming `needle` (a field, a value); on failure, the
// message the reader gave, or that it accepted the entry.
::testing::AssertionResult refused_naming(const Json& e, std::string_view needle) {
  auto r = published_run_from_json(e, "entry 0");
  if (r.ok())
    return ::testing::AssertionFailure() << "accepted; expected a refusal naming " << needle;
  if (r.status().message().find(needle) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "refused as \"" << r.status().message()
                                       << "\", which does not name " << needle;
}

// An entry field that names one value of a plan enum: without it the plan keeps `unnamed`,
// `named` maps to `named_value`, and `bad` is refused naming the field. Returns the entry with
// the field at `named`, for a test's further cases.
template <typename T>
Json expect_named_field(Json e, const std::string& field, T Plan::*member, T unnamed,
                        const Json& named, T named_value, const std::string& bad) {
  SCOPED_TRACE(field);
  EXPECT_EQ(map_ok(e).plan.*member, unnamed);
  e[field] = bad;
  EXPECT_TRUE(refused_naming(e, field));
  e[field] = named;
  EXPECT_EQ(map_ok(e).plan.*member, named_value);
  return e;
}

bool has_assumption(const PublishedRun& r, const std::string& part) {
  return std::any_of(r.assumptions.begin(), r.assumptions.end(),
                     [&](const std::string& a) { return a.find(part) != std::string::npos; });
}

TEST(PublishedRun, MapsTheDevSchemaAsMegatronRanIt) {
  const PublishedRun r = map_ok(gpt_entry());
  EXPECT_EQ(r.id, "t");
  EXPECT_EQ(r.model.num_layers, 24);
  EXPECT_EQ(r.model.ffn_hidden_size, 9216);
  EXPECT_EQ(r.model.seq_len, 2048);
  EXPECT_EQ(r.model.vocab_size, 51200);
  EXPECT_EQ(r.model.activation, Activation::kGelu);
  EXPECT_TRUE(r.model.tie_word_embeddings);
  EXPECT_EQ(r.cluster.gpu.name, "A100-80GB");
  EXPECT_EQ(r.cluster.total_gpus(), 32);
  EXPECT_EQ(describe(r.plan), describe([] {
              Plan p;
              p.dp = 32;
              p.micro_batch_size = 16;
              p.global_batch_size = 512;
              p.recompute = Recompute::kFull;
              return p;
            }()));
  EXPECT_EQ(r.plan.precision, Precision::kFp16);
  EXPECT_EQ(r.plan.grad_precision, GradPrecision::kCompute);  // fp16 era: reduced in fp16
  EXPECT_EQ(r.plan.attention, AttentionImpl::kUnfused);       // arXiv 2104: before FlashAttention
  EXPECT_TRUE(r.options.overlap_grad_reduce);
  EXPECT_FALSE(r.options.overlap_p2p);  // blocking sends unless the entry says otherwise
  ASSERT_TRUE(r.measured.tflops_per_gpu.has_value());
  EXPECT_EQ(*r.measured.tflops_per_gpu, 137);
  EXPECT_FALSE(r.measured.mfu.has_value());  // null: not published
  EXPECT_TRUE(r.ignored_fields.empty());
  EXPECT_TRUE(has_assumption(r, "model family: GPT"));
  // Megatron-LM's --recompute-num-layers (block method) maps to the plan's field.
  Json e = gpt_entry();
  e["parallel"]["recompute_num_layers"] = 5;
  EXPECT_EQ(map_ok(e).plan.recompute_num_layers, 5);
  // DeepSpeed's partition_activations, checked with the plan (it needs tp >= 2).
  e["parallel"]["partition_activations"] = true;
  EXPECT_TRUE(refused_naming(e, "partition_activations needs tp >= 2"));
  e["parallel"]["tp"] = 2;
  e["parallel"]["dp"] = 16;
  EXPECT_TRUE(map_ok(e).plan.partition_activations);
}

// DeepSpeed's ZeRO 2 and 3 keep gradients in the model's precision (engine.py get_data_types):
// a bf16 entry that names ZeRO >= 2 and no gradient precision gets compute-precision gradients,
// said under `assumed:`; ZeRO-1, another framework, or a named gradient precision keep theirs.
TEST(PublishedRun, DeepSpeedShardedGradientsStayInTheModelsPrecision) {
  Json e = llama_entry();
  e["family"] = Json::parse(R"({"source": "s", "framework": "deepspeed", "gpu_generation": "H100"})");
  e["parallel"]["zero_stage"] = 3;
  PublishedRun r = map_ok(e);
  EXPECT_EQ(r.plan.grad_precision, GradPrecision::kCompute);
  EXPECT_TRUE(has_assumption(r, "DeepSpeed's ZeRO 3 keeps and reduces gradients"));
  e["family"]["framework"] = "megatron-deepspeed";
  e["parallel"]["zero_stage"] = 2;
  EXPECT_EQ(map_ok(e).plan.grad_precision, GradPrecision::kCompute);
  e["parallel"]["zero_stage"] = 1;  // which bf16 optimizer ran changed between versions
  r = map_ok(e);
  EXPECT_EQ(r.plan.grad_precision, GradPrecision::kFp32);
  EXPECT_FALSE(has_assumption(r, "DeepSpeed's ZeRO"));
  e["parallel"]["zero_stage"] = 3;
  e["grad_precision"] = "fp32";  // named by the entry: kept
  EXPECT_EQ(map_ok(e).plan.grad_precision, GradPrecision::kFp32);
  e.erase("grad_precision");
  e["family"]["framework"] = "pytorch-fsdp";  // FSDP's usual reduce_dtype: fp32
  EXPECT_EQ(map_ok(e).plan.grad_precision, GradPrecision::kFp32);
}

TEST(PublishedRun, FamilyFromParamsWhenNoActivationIsGiven) {
  const PublishedRun r = map_ok(llama_entry());
  EXPECT_EQ(r.model.activation, Activation::kSwiglu);
  EXPECT_EQ(r.model.norm, NormKind::kRmsNorm);
  EXPECT_EQ(r.model.position, PositionKind::kRope);
  EXPECT_FALSE(r.model.bias);
  EXPECT_FALSE(r.model.tie_word_embeddings);
  EXPECT_EQ(r.model.num_kv_heads, 8);
  EXPECT_TRUE(has_assumption(r, "model family: Llama"));
  EXPECT_EQ(r.plan.attention, AttentionImpl::kFused);  // arXiv 2407
  EXPECT_EQ(r.plan.grad_precision, GradPrecision::kFp32);  // bf16: fp32 gradients
  EXPECT_FALSE(has_assumption(r, "parameters by our count"));  // 8.0B matches

  Json e = llama_entry();
  e["model"]["activation"] = "gelu";  // the entry's word wins over the parameter count
  const PublishedRun g = map_ok(e);
  EXPECT_EQ(g.model.activation, Activation::kGelu);
  EXPECT_TRUE(has_assumption(g, "parameters by our count"));  // and the mismatch is said
}

TEST(PublishedRun, AttentionFromTheFieldTheNotesOrTheDate) {
  Json e = gpt_entry();
  e["notes"].push_back("trained with FlashAttention-2");
  EXPECT_EQ(map_ok(e).plan.attention, AttentionImpl::kFused);
  e = gpt_entry();
  e["attention"] = "fused";
  const PublishedRun r = map_ok(e);
  EXPECT_EQ(r.plan.attention, AttentionImpl::kFused);
  EXPECT_FALSE(has_assumption(r, "attention"));
  e = gpt_entry();
  e["source"] = "a blog post";
  EXPECT_EQ(map_ok(e).plan.attention, AttentionImpl::kFused);
}

// How ZeRO-3 gathered: flat unless the entry names its framework version's way; a bad value is
// refused naming the field.
TEST(PublishedRun, Zero3GatherOnlyWhenTheEntryNamesIt) {
  Json e = gpt_entry();
  e["parallel"]["zero_stage"] = 3;
  expect_named_field(e, "zero3_gather", &Plan::zero3_gather, ZeroGather::kFlat, "per-tensor",
                     ZeroGather::kPerTensor, "per-module");
}

// How ZeRO-1 reduced and gathered: flat unless the entry names its framework's way; a bad value
// is refused naming the field, and per-rank on a plan that is not ZeRO-1 is refused by the
// plan's own check.
TEST(PublishedRun, Zero1CollectivesOnlyWhenTheEntryNamesIt) {
  Json e = gpt_entry();
  e["parallel"]["zero_stage"] = 1;
  e = expect_named_field(e, "zero1_collectives", &Plan::zero1_collectives,
                         ZeroCollectives::kFlat, "per-rank", ZeroCollectives::kPerRank,
                         "per-bucket");
  e["parallel"]["zero_stage"] = 0;
  EXPECT_TRUE(refused_naming(e, "zero1_collectives=per-rank"));
}

// DeepSpeed's BF16_Optimizer behaviours only where the entry names them (zero1_collectives
// all-reduce, grad_accumulation_pass cast-add; nanotron's add too); bad values refused naming the
// field (a boolean too), and the pass on an fp16 entry with compute-precision gradients refused
// by the plan's own check.
TEST(PublishedRun, Bf16OptimizerBehavioursOnlyWhenTheEntryNamesThem) {
  Json e = gpt_entry();
  e["parallel"]["zero_stage"] = 1;
  e["precision"] = "bf16";
  EXPECT_EQ(map_ok(e).plan.grad_accumulation_pass, GradAccumulationPass::kNone);
  e["zero1_collectives"] = "all-reduce";
  e["grad_accumulation_pass"] = "cast-add";
  const PublishedRun r = map_ok(e);
  EXPECT_EQ(r.plan.zero1_collectives, ZeroCollectives::kAllReduce);
  EXPECT_EQ(r.plan.grad_accumulation_pass, GradAccumulationPass::kCastAdd);
  EXPECT_EQ(r.plan.grad_precision, GradPrecision::kFp32);
  e["grad_accumulation_pass"] = "add";
  EXPECT_EQ(map_ok(e).plan.grad_accumulation_pass, GradAccumulationPass::kAdd);
  e["grad_accumulation_pass"] = "autograd";  // needs the gradients in bf16
  EXPECT_TRUE(refused_naming(e, "grad_precision fp32"));
  e["grad_precision"] = "compute";
  EXPECT_EQ(map_ok(e).plan.grad_accumulation_pass, GradAccumulationPass::kAutograd);
  e.erase("grad_precision");
  e["grad_accumulation_pass"] = "add";
  e["grad_accumulation_pass"] = "true";
  EXPECT_TRUE(refused_naming(e, "grad_accumulation_pass"));
  e["grad_accumulation_pass"] = true;
  EXPECT_TRUE(refused_naming(e, "grad_accumulation_pass"));
  e["grad_accumulation_pass"] = "cast-add";
  e["precision"] = "fp16";
  EXPECT_TRUE(refused_naming(e, "grad_accumulation_pass=cast-add"));
  e["precision"] = "bf16";
  e["zero1_collectives"] = "allreduce";
  EXPECT_TRUE(refused_naming(e, "zero1_collectives"));
}

// Megatron-LM's pipeline scatter/gather only where the entry names it; a non-boolean refused,
// and a layout it does not apply to refused, naming the field.
TEST(PublishedRun, PipelineScatterGatherOnlyWhenTheEntryNamesIt) {
  Json e = gpt_entry();
  e["parallel"]["tp"] = 8;
  e["parallel"]["pp"] = 2;
  e["parallel"]["dp"] = 2;
  e["parallel"]["micro_batch"] = 1;
  e = expect_named_field(e, "pipeline_scatter_gather", &Plan::pipeline_scatter_gather, false,
                         true, true, "on");
  e["parallel"]["sequence_parallel"] = true;
  EXPECT_TRUE(refused_naming(e, "pipeline_scatter_gather=true"));
}

// nanotron's memory behaviours only where the entry names them: the cast loss, eager SwiGLU and
// DDP's bucket copy; bad values refused naming the field.
TEST(PublishedRun, NanotronLossSwigluAndDdpCopyOnlyWhenTheEntryNamesThem) {
  Json e = gpt_entry();
  EXPECT_EQ(map_ok(e).plan.cross_entropy, CrossEntropy::kFused);
  EXPECT_FALSE(map_ok(e).plan.ddp_bucket_copy);
  e["cross_entropy"] = "cast";
  e["elementwise"] = "eager-swiglu";
  e["ddp_bucket_copy"] = true;
  const PublishedRun r = map_ok(e);
  EXPECT_EQ(r.plan.cross_entropy, CrossEntropy::kCast);
  EXPECT_EQ(r.plan.elementwise, Elementwise::kEagerSwiglu);
  EXPECT_TRUE(r.plan.ddp_bucket_copy);
  e["ddp_bucket_copy"] = 1;
  EXPECT_TRUE(refused_naming(e, "ddp_bucket_copy"));
  e["ddp_bucket_copy"] = true;
  e["parallel"]["zero_stage"] = 3;
  EXPECT_TRUE(refused_naming(e, "ddp_bucket_copy=true"));
}

// Eager PyTorch's elementwise kernels only where the entry says compile was off; a bad value
// is refused naming the field.
TEST(PublishedRun, ElementwiseOnlyWhenTheEntryNamesIt) {
  expect_named_field(gpt_entry(), "elementwise", &Plan::elementwise, Elementwise::kFused,
                     "eager", Elementwise::kEager, "inductor");
}

// Context parallelism's exchange: the entry's when it names one (a bad value refused naming the
// field, one on an entry without CP refused), else its framework's default under `assumed:`
// (Megatron-Core's TE ring for megatron and nemo, PyTorch's all-gather rotater for torchtitan,
// the plan's all-gather for others).
TEST(PublishedRun, CpCommIsTheEntrysOrItsFrameworksDefault) {
  Json e = llama_entry();
  e["parallel"]["cp"] = 2;
  e["parallel"]["dp"] = 4;
  e["family"] = Json::parse(R"({"source": "s", "framework": "other", "gpu_generation": "H100"})");
  e = expect_named_field(e, "cp_comm", &Plan::cp_comm, CpComm::kAllGather, "torch-alltoall",
                         CpComm::kTorchAllToAll, "ring");
  EXPECT_FALSE(has_assumption(map_ok(e), "cp_comm"));
  e.erase("cp_comm");
  EXPECT_TRUE(has_assumption(map_ok(e), "cp_comm: all-gather (not given; no framework default"));
  for (const auto& [framework, form] : {std::pair<std::string, CpComm>{"nemo", CpComm::kP2p},
                                        {"megatron", CpComm::kP2p},
                                        {"torchtitan", CpComm::kTorchAllGather}}) {
    e["family"]["framework"] = framework;
    const PublishedRun r = map_ok(e);
    EXPECT_EQ(r.plan.cp_comm, form) << framework;
    EXPECT_TRUE(has_assumption(r, "cp_comm: " + std::string(to_string(form)) + " (not given;"))
        << framework;
  }
  e["cp_comm"] = "p2p";
  e["parallel"]["cp"] = 1;
  e["parallel"]["dp"] = 8;
  EXPECT_TRUE(refused_naming(e, "cp_comm \"p2p\" needs context parallelism, the entry has cp 1"));
  // Without CP and without the field nothing is assumed.
  e.erase("cp_comm");
  EXPECT_FALSE(has_assumption(map_ok(e), "cp_comm"));
}

// K and V repeated to the query heads before the ring's attention (Plan::cp_kv_expanded): only
// where the entry says so, nothing assumed otherwise.
TEST(PublishedRun, CpKvExpandedOnlyWhereTheEntryNamesIt) {
  Json e = llama_entry();
  e["parallel"]["cp"] = 2;
  e["parallel"]["dp"] = 4;
  EXPECT_FALSE(map_ok(e).plan.cp_kv_expanded);
  EXPECT_FALSE(has_assumption(map_ok(e), "cp_kv_expanded"));
  e["cp_kv_expanded"] = true;
  EXPECT_TRUE(map_ok(e).plan.cp_kv_expanded);
}

// The fused attention kernel: generic unless the entry names one; a bad name is refused naming
// the field.
TEST(PublishedRun, AttentionKernelOnlyWhenTheEntryNamesIt) {
  Json e = llama_entry();
  e["family"] = Json::parse(R"({"source": "s", "framework": "torchtitan", "gpu_generation": "H100"})");
  e = expect_named_field(e, "attention_kernel", &Plan::attention_kernel,
                         AttentionKernel::kGeneric, "flash2", AttentionKernel::kFlash2, "sdpa");
  // Named on a GPU without published rates: refused when the run is mapped, naming the GPU.
  e["attention_kernel"] = "cudnn";
  e["hardware"]["gpu"] = "A100-SXM4-80GB";
  EXPECT_TRUE(refused_naming(e, "attention_kernel=cudnn: no published cudnn rates for A100-80GB"));
  // FlashAttention-1 (MLPerf v3.0's GPT-3 pins flash_attn 1.0.5) is published on A100.
  e["attention_kernel"] = "flash1";
  EXPECT_EQ(map_ok(e).plan.attention_kernel, AttentionKernel::kFlash1);
}

// TP runs that do not say whether they used sequence parallelism: those published from 2023
// on are taken to (Megatron-Core/NeMo recipes, torchtitan, MegaScale), earlier ones not; the
// field, when given, is used as it is.
TEST(PublishedRun, SequenceParallelFromTheFieldOrTheDate) {
  Json e = llama_entry();
  e["parallel"] = Json::parse(R"({"tp": 2, "pp": 1, "dp": 4, "micro_batch": 1,
      "global_batch": 16})");
  PublishedRun r = map_ok(e);
  EXPECT_TRUE(r.plan.sequence_parallel);
  EXPECT_TRUE(has_assumption(r, "parallel.sequence_parallel: true (not given"));
  e["parallel"]["sequence_parallel"] = nullptr;
  EXPECT_TRUE(map_ok(e).plan.sequence_parallel);
  e["parallel"]["sequence_parallel"] = false;
  r = map_ok(e);
  EXPECT_FALSE(r.plan.sequence_parallel);
  EXPECT_FALSE(has_assumption(r, "parallel.sequence_parallel"));
  e["parallel"].erase("sequence_parallel");
  e["source"] = "arXiv:2104.04473";
  r = map_ok(e);
  EXPECT_FALSE(r.plan.sequence_parallel);
  EXPECT_TRUE(has_assumption(r, "parallel.sequence_parallel: false (not given; source dated "
                                "before 2023)"));
  // Partitioned checkpoints store the input split over TP instead of SP.
  e["source"] = "arXiv:2407.21783";
  e["parallel"]["recompute"] = "full";
  e["parallel"]["partition_activations"] = true;
  r = map_ok(e);
  EXPECT_FALSE(r.plan.sequence_parallel);
  EXPECT_TRUE(has_assumption(r, "false (not given; partition_activations splits"));
  // Without TP there is nothing to say.
  r = map_ok(llama_entry());
  EXPECT_FALSE(r.plan.sequence_parallel);
  EXPECT_FALSE(has_assumption(r, "parallel.sequence_parallel"));
}

TEST(PublishedRun, DerivedAndDefaultedFieldsAreSaid) {
  Json e = gpt_entry();
  e["parallel"].erase("dp");
  e["parallel"].erase("micro_batch");
  e["parallel"].erase("recompute");
  e["model"].erase("ffn_hidden");
  e["measured"]["mfu"] = 44;
  e["notes"] = {"DDP impl local per script"};
  const PublishedRun r = map_ok(e);
  EXPECT_EQ(r.plan.dp, 32);
  EXPECT_EQ(r.plan.micro_batch_size, 1);
  EXPECT_EQ(r.plan.recompute, Recompute::kNone);
  EXPECT_EQ(r.model.ffn_hidden_size, 4 * 2304);
  ASSERT_TRUE(r.measured.mfu.has_value());
  EXPECT_DOUBLE_EQ(*r.measured.mfu, 0.44);
  EXPECT_FALSE(r.options.overlap_grad_reduce);
  e["parallel"]["overlap_p2p"] = true;
  EXPECT_TRUE(map_ok(e).options.overlap_p2p);
  e["parallel"]["overlap_p2p"] = "yes";
  EXPECT_TRUE(refused_naming(e, "overlap_p2p"));
  e["parallel"].erase("overlap_p2p");
  for (const char* what : {"parallel.dp", "parallel.micro_batch", "parallel.recompute",
                           "model.ffn_hidden", "percentage", "after the pipeline flush"})
    EXPECT_TRUE(has_assumption(r, what)) << what;
}

TEST(PublishedRun, UnevenLayersGiveTheEndStagesFewer) {
  // Llama 3 405B: 126 layers on 16 stages, one fewer on the first and the last.
  Json e = llama_entry();
  e["model"]["layers"] = 126;
  e["hardware"]["num_gpus"] = 16;
  e["parallel"] = Json::parse(R"({"tp": 1, "pp": 16, "dp": 1, "micro_batch": 1,
      "global_batch": 32})");
  PublishedRun r = map_ok(e);
  std::vector<std::int64_t> want(16, 8);
  want.front() = want.back() = 7;
  EXPECT_EQ(r.plan.layers_per_stage, want);
  EXPECT_TRUE(has_assumption(r, "7,8,8,8,8,8,8,8,8,8,8,8,8,8,8,7"));
  // Short by three: first, last, then second.
  e["model"]["layers"] = 13;
  e["parallel"]["pp"] = 4;
  e["hardware"]["num_gpus"] = 4;
  r = map_ok(e);
  EXPECT_EQ(r.plan.layers_per_stage, (std::vector<std::int64_t>{3, 3, 4, 3}));
  // Even splits keep the plan's default.
  e["model"]["layers"] = 12;
  EXPECT_TRUE(map_ok(e).plan.layers_per_stage.empty());
}

TEST(PublishedRun, AGivenLayerSplitIsKeptAndChecked) {
  // nanotron's cost-balanced split of a 16-layer model over 2 stages (the LM head's cost on the
  // last stage): kept as given, even where the layers would also divide evenly.
  Json e = llama_entry();
  e["model"]["layers"] = 16;
  e["hardware"]["num_gpus"] = 2;
  e["parallel"] = Json::parse(R"({"tp": 1, "pp": 2, "dp": 1, "micro_batch": 1,
      "global_batch": 8, "layers_per_stage": [11, 5]})");
  EXPECT_EQ(map_ok(e).plan.layers_per_stage, (std::vector<std::int64_t>{11, 5}));
  // Uneven layer counts keep the given split too, with no balanced-split assumption.
  e["model"]["layers"] = 17;
  e["parallel"]["layers_per_stage"] = Json::parse("[11, 6]");
  const PublishedRun r = map_ok(e);
  EXPECT_EQ(r.plan.layers_per_stage, (std::vector<std::int64_t>{11, 6}));
  EXPECT_FALSE(has_assumption(r, "layers per model chunk"));
  // A split that does not add up to the model, or has a stage too many, or an empty stage.
  e["parallel"]["layers_per_stage"] = Json::parse("[11, 5]");
  EXPECT_TRUE(refused_naming(e, "layers_per_stage sums to 16, the model has num_layers=17"));
  e["parallel"]["layers_per_stage"] = Json::parse("[6, 6, 5]");
  EXPECT_TRUE(refused_naming(e, "layers_per_stage has 3"));
  e["parallel"]["layers_per_stage"] = Json::parse("[17, 0]");
  EXPECT_TRUE(refused_naming(e, "field 'layers_per_stage'"));
}

TEST(PublishedRun, ZeroBubbleH1ScheduleIsReadAndChecked) {
  // Qi et al. 2024 (arXiv:2401.10241) Table 3's 1.5B model: 22 layers on 8 pipeline stages,
  // one fewer on the end stages, run with ZB-1p (ZB-H1's order, Table 5).
  Json e = gpt_entry();
  e["model"]["layers"] = 22;
  e["model"]["seq_len"] = 1024;
  e["hardware"]["num_gpus"] = 8;
  e["parallel"] = Json::parse(R"({"tp": 1, "pp": 8, "dp": 1, "micro_batch": 6,
      "global_batch": 144, "schedule": "zb-h1", "layers_per_stage": [2, 3, 3, 3, 3, 3, 3, 2]})");
  const PublishedRun r = map_ok(e);
  EXPECT_EQ(r.plan.schedule, Schedule::kZbH1);
  EXPECT_EQ(r.plan.layers_per_stage, (std::vector<std::int64_t>{2, 3, 3, 3, 3, 3, 3, 2}));
  // The plan's own check: a zero-bubble order needs a pipeline.
  e["model"]["layers"] = 24;
  e["parallel"] = Json::parse(R"({"tp": 1, "pp": 1, "dp": 8, "micro_batch": 6,
      "global_batch": 144, "schedule": "zb-h1"})");
  EXPECT_TRUE(refused_naming(e, "schedule zb-h1 needs pp >= 2"));
  // ZB-2p has no order of its own in the plan: refused by name, not mapped to another.
  e["parallel"]["schedule"] = "zb-2p";
  const std::string err = map_error(e);
  EXPECT_NE(err.find("field 'schedule'"), std::string::npos) << err;
  EXPECT_NE(err.find("unknown value \"zb-2p\""), std::string::npos) << err;
}

// DeepSeek-V3's DualPipe (arXiv:2412.19437 sec. 3.2.1) and the zb-v order: both named schedules
// the simulator plays reach the plan; the plan's own checks name what a bad layout lacks.
TEST(PublishedRun, DualPipeAndZbVSchedulesAreReadAndChecked) {
  Json e = gpt_entry();
  e["parallel"] = Json::parse(R"({"tp": 1, "pp": 4, "dp": 8, "vp": 2, "micro_batch": 2,
      "global_batch": 256, "schedule": "dualpipe"})");
  PublishedRun r = map_ok(e);
  EXPECT_EQ(r.plan.schedule, Schedule::kDualPipe);
  EXPECT_EQ(r.plan.virtual_stages, 2);
  e["parallel"]["schedule"] = "zb-v";
  r = map_ok(e);
  EXPECT_EQ(r.plan.schedule, Schedule::kZbV);
  // DualPipe holds two chunks per stage: vp 1 is refused, naming virtual_stages.
  e["parallel"]["schedule"] = "dualpipe";
  e["parallel"]["vp"] = 1;
  EXPECT_TRUE(refused_naming(e, "virtual_stages must be 2, the plan has virtual_stages=1"));
  // Half the micro-batches enter at each end: 256 / (2 x 8) = 16 is even and >= 2pp, 8 is not
  // >= 2pp at pp 8 (which 24 layers allow: 16 chunks of at least one layer).
  e["parallel"]["vp"] = 2;
  e["parallel"]["pp"] = 8;
  e["parallel"]["dp"] = 4;
  e["parallel"]["micro_batch"] = 8;
  EXPECT_TRUE(refused_naming(e, "must be even and at least 2*pp = 16"));
  // A misspelt schedule is refused by name, not mapped to another.
  e["parallel"]["pp"] = 2;
  e["parallel"]["dp"] = 16;
  e["parallel"]["micro_batch"] = 1;
  e["parallel"]["schedule"] = "dual-pipe";
  const std::string err = map_error(e);
  EXPECT_NE(err.find("field 'schedule'"), std::string::npos) << err;
  EXPECT_NE(err.find("unknown value \"dual-pipe\""), std::string::npos) << err;
}

// hardware.power_limit_W: the part's peaks at that board power (at_power_limit); a value outside
// the published powers is an error naming the field and the value.
TEST(PublishedRun, PowerLimitScalesThePeaks) {
  Json e = gpt_entry();
  e["hardware"]["gpu"] = "B200-192GB";
  e["hardware"]["power_limit_W"] = 750;
  PublishedRun r = map_ok(e);
  EXPECT_EQ(r.cluster.gpu.board_power_w, 750);
  EXPECT_DOUBLE_EQ(r.cluster.gpu.peak_bf16_flops_per_s,
                   at_power_limit(*gpu_preset("B200-192GB"), 750)->peak_bf16_flops_per_s);
  e["hardware"]["power_limit_W"] = 500;
  const std::string error = map_error(e);
  for (const char* part : {"hardware", "'power_limit_W'", "500 W", "700-1200 W"})
    EXPECT_NE(error.find(part), std::string::npos) << part << " in " << error;
  e["hardware"]["power_limit_W"] = "750 W";
  EXPECT_TRUE(refused_naming(e, "power_limit_W"));
}

TEST(PublishedRun, MissingShapeFieldsAndGpuDescriptions) {
  Json e = gpt_entry();
  e["model"].erase("vocab");
  e["model"]["heads"] = nullptr;
  e["model"]["activation"] = "relu";
  e["hardware"]["gpu"] = "H100 96GB HBM2e @500W (Meta Grand Teton variant)";
  e["model"]["hidden"] = 2304;
  PublishedRun r = map_ok(e);
  EXPECT_EQ(r.model.vocab_size, 51200);
  EXPECT_EQ(r.model.num_attention_heads, 18);  // 2304 / 128
  EXPECT_EQ(r.model.activation, Activation::kGelu);
  EXPECT_EQ(r.cluster.gpu.name, "H100-96GB");
  for (const char* what : {"model.vocab", "model.heads: hidden / 128", "relu", "read as preset"})
    EXPECT_TRUE(has_assumption(r, what)) << what;
  e["model"]["hidden"] = 2300;  // not a multiple of 128: the heads cannot be guessed
  EXPECT_TRUE(refused_naming(e, "missing required field 'heads'"));
}

// A node whose GPUs share fewer NICs than DGX A100's eight (GPT-NeoX-20B's four ConnectX-6
// HDR per eight A100s, Black et al. 2022 sec. 2.3): per GPU, the node's achievable NIC
// bandwidth over its GPUs. The two fields go together and are checked.
TEST(PublishedRun, SharedNicsSetTheInterNodeBandwidth) {
  Json e = gpt_entry();
  const double dgx = map_ok(e).cluster.inter_node_bytes_per_s;
  EXPECT_NEAR(dgx, 23e9, 1e6);  // one 200 Gb/s NIC per GPU at 92%: the preset's figure
  e["hardware"]["nics_per_node"] = 8;
  e["hardware"]["nic_Gbps"] = 200;
  EXPECT_NEAR(map_ok(e).cluster.inter_node_bytes_per_s, dgx, 1e6);
  e["hardware"]["nics_per_node"] = 4;
  const PublishedRun r = map_ok(e);
  EXPECT_NEAR(r.cluster.inter_node_bytes_per_s, dgx / 2, 1e6);
  EXPECT_TRUE(has_assumption(r, "4 x 200 Gb/s NICs shared by 8 GPUs, 11.5 GB/s per GPU"));
  EXPECT_EQ(r.cluster.nics_per_node, 4);  // NCCL's channels across nodes follow the NICs
  e["hardware"].erase("nic_Gbps");
  EXPECT_TRUE(refused_naming(e, "nics_per_node=4 needs nic_Gbps"));
  e["hardware"].erase("nics_per_node");
  e["hardware"]["nic_Gbps"] = 100;
  EXPECT_TRUE(refused_naming(e, "nic_Gbps=100 needs nics_per_node"));
  e["hardware"]["nics_per_node"] = 0;
  EXPECT_TRUE(refused_naming(e, "nics_per_node"));
  e["hardware"]["nics_per_node"] = 4;
  e["hardware"]["nic_Gbps"] = -1;
  EXPECT_TRUE(refused_naming(e, "nic_Gbps"));
}

// torchtitan's HSDP (data_parallel_shard_degree 8 x replicate degree 4): the shard group is
// read and checked with the plan.
TEST(PublishedRun, HybridShardingIsReadAndChecked) {
  Json e = gpt_entry();
  e["parallel"]["zero_stage"] = 3;
  e["parallel"]["zero_shard_size"] = 8;
  EXPECT_EQ(map_ok(e).plan.zero_shard_size, 8);
  e["parallel"]["zero_shard_size"] = 5;
  EXPECT_TRUE(refused_naming(e, "zero_shard_size=5 does not divide dp*cp = 32"));
  e["parallel"]["zero_stage"] = 0;
  e["parallel"]["zero_shard_size"] = 8;
  EXPECT_TRUE(refused_naming(e, "zero_shard_size=8 needs zero_stage >= 1"));
}

// An ungiven ZeRO stage is the smallest that fits, among the stages the framework offers:
// Megatron-Core's distributed optimizer shards optimizer states only, so a NeMo run that does
// not fit by our count stays at stage 1 (and says so); other frameworks go up to ZeRO-3.
TEST(PublishedRun, UngivenZeroStageStaysWithinWhatTheFrameworkOffers) {
  Json e = llama_entry();
  e["model"] = Json::parse(R"({"name": "Llama 3 70B", "params_b": 70.6, "layers": 80,
      "hidden": 8192, "heads": 64, "kv_heads": 8, "ffn_hidden": 28672, "seq_len": 8192,
      "vocab": 128256})");
  e["family"] = Json::parse(R"({"source": "s", "framework": "nemo", "gpu_generation": "H100"})");
  PublishedRun r = map_ok(e);
  EXPECT_EQ(r.plan.zero_stage, 1);
  EXPECT_TRUE(has_assumption(r, "shards no gradients or weights without FSDP"));
  EXPECT_TRUE(has_assumption(r, "stage 1 needs"));
  e["family"]["framework"] = "megatron";
  EXPECT_EQ(map_ok(e).plan.zero_stage, 1);
  e["family"]["framework"] = "deepspeed";
  r = map_ok(e);
  EXPECT_EQ(r.plan.zero_stage, 3);
  EXPECT_TRUE(has_assumption(r, "no stage fits"));
  EXPECT_FALSE(has_assumption(r, "without FSDP"));
  // What fits unsharded stays unsharded, whatever the framework.
  Json small = gpt_entry();
  small["parallel"].erase("zero_stage");
  small["family"] = Json::parse(R"({"source": "s", "framework": "nemo", "gpu_generation": "A100"})");
  EXPECT_EQ(map_ok(small).plan.zero_stage, 0);
}

// torchtitan's interleaved schedule without split points runs 2 stages per rank
// (generate_split_points' default), said so; other frameworks' missing vp is not guessed.
TEST(PublishedRun, TorchtitanInterleavedDefaultsToTwoStagesPerRank) {
  Json e = llama_entry();
  e["hardware"]["num_gpus"] = 16;
  e["parallel"] = Json::parse(R"({"tp": 1, "pp": 4, "dp": 4, "zero_stage": 1, "micro_batch": 1,
      "global_batch": 64, "schedule": "interleaved"})");
  e["family"] = Json::parse(R"({"source": "s", "framework": "torchtitan", "gpu_generation": "H100"})");
  const PublishedRun r = map_ok(e);
  EXPECT_EQ(r.plan.schedule, Schedule::kInterleaved);
  EXPECT_EQ(r.plan.virtual_stages, 2);
  EXPECT_TRUE(has_assumption(r, "parallel.vp: 2"));
  e["family"]["framework"] = "megatron";
  EXPECT_TRUE(refused_naming(e, "virtual"));
}

// torchtitan's "selective" checkpointing is its op-level policy unless the entry names a layer
// frequency (selective_ac_option), which is full recompute of every N-th layer; other frameworks'
// selective is Megatron's; a malformed or misplaced option is refused naming it.
TEST(PublishedRun, TorchtitanSelectiveCheckpointingReadsItsOption) {
  Json e = llama_entry();
  e["parallel"]["recompute"] = "selective";
  e["parallel"]["zero_stage"] = 3;
  e["family"] = Json::parse(R"({"source": "s", "framework": "torchtitan", "gpu_generation": "H100"})");
  PublishedRun r = map_ok(e);
  EXPECT_EQ(r.plan.recompute, Recompute::kSelectiveOp);
  EXPECT_TRUE(has_assumption(r, "parallel.recompute: selective-op"));
  e["parallel"]["selective_ac_option"] = "op";
  r = map_ok(e);
  EXPECT_EQ(r.plan.recompute, Recompute::kSelectiveOp);
  EXPECT_FALSE(has_assumption(r, "parallel.recompute"));
  e["parallel"]["selective_ac_option"] = "2";
  r = map_ok(e);
  EXPECT_EQ(r.plan.recompute, Recompute::kFull);
  EXPECT_EQ(r.plan.recompute_num_layers, 16);  // 32 layers, every second one
  EXPECT_TRUE(has_assumption(r, "full on 16 of each chunk's 32 layers"));
  e["parallel"]["selective_ac_option"] = "3";
  EXPECT_EQ(map_ok(e).plan.recompute_num_layers, 11);
  e["parallel"]["selective_ac_option"] = "0";
  EXPECT_TRUE(
      refused_naming(e, "selective_ac_option \"0\" is neither \"op\" nor a layer frequency"));
  e["parallel"]["selective_ac_option"] = "op2";
  EXPECT_TRUE(refused_naming(e, "selective_ac_option \"op2\""));
  e["parallel"]["selective_ac_option"] = "op";
  e["parallel"]["recompute"] = "full";
  EXPECT_TRUE(refused_naming(e, "selective_ac_option \"op\" needs recompute \"selective\""));
  e["parallel"].erase("selective_ac_option");
  e["parallel"]["recompute"] = "selective";
  e["family"]["framework"] = "megatron";
  EXPECT_EQ(map_ok(e).plan.recompute, Recompute::kSelective);
}

TEST(PublishedRun, ContextParallelRunsMap) {
  // Llama 3 405B's long-context row (Dubey et al. 2024, Table 4): CP 16 at 131072 tokens.
  Json e = llama_entry();
  e["model"]["seq_len"] = 131072;
  e["hardware"]["num_gpus"] = 128;
  e["parallel"] = Json::parse(R"({"tp": 8, "cp": 16, "pp": 1, "micro_batch": 1,
      "global_batch": 1})");
  const PublishedRun r = map_ok(e);
  EXPECT_EQ(r.plan.cp, 16);
  EXPECT_EQ(r.plan.dp, 1);  // derived: 128 / (8 * 16)
  EXPECT_TRUE(has_assumption(r, "num_gpus / (tp*cp*pp)"));
}

TEST(PublishedRun, Fp8RunsTrainLinearGemmsInFp8) {
  Json e = llama_entry();  // H100
  e["precision"] = "fp8";
  const PublishedRun r = map_ok(e);
  EXPECT_TRUE(r.plan.fp8);
  EXPECT_EQ(r.plan.precision, Precision::kBf16);
  EXPECT_TRUE(has_assumption(r, "precision fp8"));
  EXPECT_EQ(r.plan.fp8_scaling, Fp8Scaling::kCurrent);
  EXPECT_FALSE(r.plan.fp8_weight_cache);
  EXPECT_TRUE(has_assumption(r, "fp8_scaling: current (not given)"));
}

// NVFP4 and FP8 attention, where the entry names them (the MLPerf v5.1 NVFP4 runs); FP8
// attention on a part without a published FP8 attention rate, or without fp8, is refused naming
// the field.
TEST(PublishedRun, Nvfp4AndFp8AttentionFromTheEntry) {
  Json e = llama_entry();  // H100
  e["precision"] = "fp8";
  e["fp8_scaling"] = "nvfp4";
  EXPECT_TRUE(refused_naming(e, "fp8_scaling nvfp4: H100"));
  e["hardware"]["gpu"] = "B200";
  e["attention"] = "fused";
  e["attention_kernel"] = "cudnn";
  e["fp8_attention"] = true;
  const PublishedRun r = map_ok(e);
  EXPECT_EQ(r.plan.fp8_scaling, Fp8Scaling::kNvfp4);
  EXPECT_TRUE(r.plan.fp8_attention);
  EXPECT_NE(describe(r.plan).find("fp8-nvfp4-attention"), std::string::npos) << describe(r.plan);
  e["attention_kernel"] = "flash2";
  EXPECT_TRUE(refused_naming(e, "fp8_attention: no published FP8 rate"));
  e["attention_kernel"] = "cudnn";
  e["precision"] = "bf16";
  e.erase("fp8_scaling");
  EXPECT_TRUE(refused_naming(e, "fp8_attention runs under the FP8 recipe"));
  e["precision"] = "fp8";
  e["fp8_attention"] = "yes";
  EXPECT_TRUE(refused_naming(e, "fp8_attention"));
}

// The FP8 recipe is read where the entry names it, and then not said to be assumed; on a run
// that is not FP8 it is an error naming the field.
TEST(PublishedRun, Fp8RecipeFromTheEntry) {
  Json e = llama_entry();
  e["precision"] = "fp8";
  e["fp8_scaling"] = "delayed";
  e["fp8_weight_cache"] = true;
  const PublishedRun r = map_ok(e);
  EXPECT_EQ(r.plan.fp8_scaling, Fp8Scaling::kDelayed);
  EXPECT_TRUE(r.plan.fp8_weight_cache);
  EXPECT_FALSE(has_assumption(r, "fp8_scaling"));
  e["fp8_scaling"] = "tilewise";
  EXPECT_TRUE(refused_naming(e, "fp8_scaling"));
  e["fp8_scaling"] = "block";
  e["precision"] = "bf16";
  EXPECT_TRUE(refused_naming(e, "needs fp8 true"));
}

// FSDP's one gather for a recomputed layer only where the entry names it; a bad value is
// refused naming the field.
TEST(PublishedRun, Zero3RecomputeGatherOnlyWhenTheEntryNamesIt) {
  Json e = llama_entry();
  e["parallel"]["zero_stage"] = 3;
  expect_named_field(e, "zero3_recompute_gather", &Plan::zero3_recompute_gather,
                     ZeroRecomputeGather::kAgain, "kept", ZeroRecomputeGather::kKept, "once");
}

// FSDP's backward prefetch ahead of the reduce-scatter only where the entry names it; a bad
// value is refused naming the field.
TEST(PublishedRun, Zero3BackwardPrefetchOnlyWhenTheEntryNamesIt) {
  Json e = llama_entry();
  e["parallel"]["zero_stage"] = 3;
  expect_named_field(e, "zero3_backward_prefetch", &Plan::zero3_backward_prefetch,
                     ZeroBackwardPrefetch::kAfterReduce, "before-reduce",
                     ZeroBackwardPrefetch::kBeforeReduce, "ahead");
}

// torch.distributed.pipelining's interleaved warm-up only where the entry names it; a bad value
// is refused naming the field.
TEST(PublishedRun, InterleavedWarmupOnlyWhenTheEntryNamesIt) {
  Json e = llama_entry();
  e["parallel"]["pp"] = 2;
  e["parallel"]["dp"] = 4;
  e["parallel"]["schedule"] = "interleaved";
  e["parallel"]["vp"] = 2;
  expect_named_field(e, "interleaved_warmup", &Plan::interleaved_warmup,
                     InterleavedWarmup::kMegatron, "torch", InterleavedWarmup::kTorch, "titan");
}

// PyTorch's async TP only where the entry names it; a bad value is refused naming the field,
// and the value without tp_comm_overlap is refused by the plan's own check.
TEST(PublishedRun, TpCommOverlapImplOnlyWhenTheEntryNamesIt) {
  Json e = llama_entry();
  e["parallel"]["tp"] = 8;
  e["parallel"]["dp"] = 1;
  e["parallel"]["sequence_parallel"] = true;
  e["parallel"]["tp_comm_overlap"] = true;
  e = expect_named_field(e, "tp_comm_overlap_impl", &Plan::tp_comm_overlap_impl,
                         TpOverlapImpl::kTeUserbuffers, "torch-async", TpOverlapImpl::kTorchAsync,
                         "micro-pipeline");
  e["parallel"]["tp_comm_overlap"] = false;
  EXPECT_TRUE(refused_naming(e, "tp_comm_overlap_impl=torch-async needs tp_comm_overlap"));
}

// PyTorch FSDP's copies only where the entry names its FSDP; a bad value is refused naming the
// field.
TEST(PublishedRun, Zero3CopiesOnlyWhenTheEntryNamesThem) {
  Json e = llama_entry();
  e["parallel"]["zero_stage"] = 3;
  expect_named_field(e, "zero3_copies", &Plan::zero3_copies, ZeroCopies::kNone, "per-param",
                     ZeroCopies::kPerParam, "fsdp2");
  expect_named_field(e, "zero3_copies", &Plan::zero3_copies, ZeroCopies::kNone, "flat-param",
                     ZeroCopies::kFlatParam, "flat");
}

// FSDP's or the distributed optimizer's FP8 weight all-gather only where the entry names it;
// on a run without sharded weights it is an error naming the field.
TEST(PublishedRun, Fp8AllGatherOnlyWhenTheEntryNamesIt) {
  Json e = llama_entry();
  e["precision"] = "fp8";
  e["parallel"]["zero_stage"] = 3;
  e = expect_named_field(e, "fp8_all_gather", &Plan::fp8_all_gather, false, true, true, "on");
  e.erase("fp8_all_gather");
  e["parallel"]["zero_stage"] = 1;
  e = expect_named_field(e, "fp8_all_gather", &Plan::fp8_all_gather, false, true, true, "on");
  e["parallel"]["zero_stage"] = 0;
  EXPECT_TRUE(refused_naming(e, "fp8_all_gather"));
}

// DeepSeek-V3's shape in the schema's spelling: the experts' width makes ffn_hidden the dense
// layers', shared experts by count, the first k layers dense, latent attention; H800 preset.
TEST(PublishedRun, NonUniformMoeAndLatentAttentionMap) {
  Json e = llama_entry();
  e["model"] = Json::parse(R"({"name": "DeepSeek-V3", "params_b": 671, "layers": 61,
      "hidden": 7168, "heads": 128, "ffn_hidden": 18432, "moe_ffn_hidden": 2048,
      "num_experts": 256, "top_k": 8, "shared_experts": 1, "first_dense_layers": 3,
      "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
      "qk_rope_head_dim": 64, "v_head_dim": 128, "seq_len": 4096, "vocab": 129280,
      "activation": "swiglu", "norm": "rmsnorm", "position": "rope",
      "tied_embeddings": false, "bias": false})");
  e["hardware"] = Json::parse(R"({"gpu": "H800", "num_gpus": 2048, "gpus_per_node": 8})");
  e["parallel"] = Json::parse(R"({"tp": 1, "pp": 16, "dp": 128, "ep": 64, "zero_stage": 1,
      "micro_batch": 1, "global_batch": 15360})");
  const PublishedRun r = map_ok(e);
  const ModelSpec& m = r.model;
  EXPECT_EQ(m.ffn_hidden_size, 2048);
  EXPECT_EQ(m.dense_ffn_hidden_size, 18432);
  EXPECT_EQ(m.shared_expert_ffn_size, 2048);
  EXPECT_EQ(m.dense_layers, (std::vector<std::int64_t>{0, 1, 2}));
  EXPECT_EQ(m.head_dim, 192);
  EXPECT_TRUE(m.is_mla());
  EXPECT_NEAR(count_parameters(m).total() / 1e9, 671.0, 1.0);
  EXPECT_EQ(r.cluster.gpu.name, "H800-80GB");
  EXPECT_EQ(r.plan.ep, 64);
  EXPECT_EQ(r.plan.layers_per_stage.size(), 16u);  // 61 layers: the end stages take fewer
  EXPECT_FALSE(has_assumption(r, "check the shape"));
  EXPECT_FALSE(r.plan.ep_overlap);
  // The expert all-to-all overlap is read where an entry gives it, and checked with the plan:
  // with pp > 1 it needs the interleaved schedule.
  e["parallel"]["ep_overlap"] = true;
  EXPECT_TRUE(refused_naming(e, "ep_overlap"));
  e["parallel"]["pp"] = 1;
  e["parallel"]["dp"] = 2048;
  e["parallel"]["global_batch"] = 2048;
  EXPECT_TRUE(map_ok(e).plan.ep_overlap);
}

// Megatron-Core's overlap_param_gather where the entry names it (parallel.param_gather),
// checked with the plan: it needs ZeRO 1 or 2; an unknown value is refused naming the field.
TEST(PublishedRun, ParamGatherOnlyWhenTheEntryNamesIt) {
  Json e = llama_entry();
  EXPECT_EQ(map_ok(e).plan.param_gather, ParamGather::kAfterStep);
  e["parallel"]["zero_stage"] = 0;
  e["parallel"]["param_gather"] = "aligned";
  EXPECT_TRUE(refused_naming(e, "param_gather=aligned"));
  e["parallel"]["zero_stage"] = 1;
  EXPECT_EQ(map_ok(e).plan.param_gather, ParamGather::kAligned);
  e["parallel"]["param_gather"] = "next-forward";
  EXPECT_EQ(map_ok(e).plan.param_gather, ParamGather::kNextForward);
  e["parallel"]["param_gather"] = "overlapped";
  EXPECT_TRUE(refused_naming(e, "param_gather"));
}

// apex DistributedFusedAdam's buckets where the entry names them (parallel.dp_bucket_elements),
// checked with the plan: not with ZeRO-3, not below the floor; absent, one collective per block.
TEST(PublishedRun, DpBucketsOnlyWhenTheEntryNamesThem) {
  Json e = llama_entry();
  EXPECT_EQ(map_ok(e).plan.dp_bucket_elements, 0);
  e["parallel"]["zero_stage"] = 1;
  e["parallel"]["dp_bucket_elements"] = 104857600;
  EXPECT_EQ(map_ok(e).plan.dp_bucket_elements, 104857600);
  e["parallel"]["zero_stage"] = 3;
  EXPECT_TRUE(refused_naming(e, "dp_bucket_elements=104857600"));
  e["parallel"]["zero_stage"] = 1;
  e["parallel"]["dp_bucket_elements"] = 100;
  EXPECT_TRUE(refused_naming(e, "dp_bucket_elements=100"));
  e["parallel"]["dp_bucket_elements"] = "100MB";
  EXPECT_TRUE(refused_naming(e, "dp_bucket_elements"));
}

// Megatron-Core's defer_embedding_wgrad_compute where the entry names it (parallel.
// defer_embedding_wgrad, parallel.wgrad_deferral_limit), checked with the plan: it needs a
// pipeline, and a negative limit is refused naming the field.
TEST(PublishedRun, DeferredEmbeddingWgradOnlyWhenTheEntryNamesIt) {
  Json e = llama_entry();
  EXPECT_FALSE(map_ok(e).plan.defer_embedding_wgrad);
  e["parallel"]["defer_embedding_wgrad"] = true;
  e["parallel"]["wgrad_deferral_limit"] = 22;
  EXPECT_TRUE(refused_naming(e, "defer_embedding_wgrad needs pp >= 2"));
  e["parallel"]["pp"] = 2;
  e["parallel"]["dp"] = 4;
  const PublishedRun r = map_ok(e);
  EXPECT_TRUE(r.plan.defer_embedding_wgrad);
  EXPECT_EQ(r.plan.wgrad_deferral_limit, 22);
  e["parallel"]["wgrad_deferral_limit"] = -1;
  EXPECT_TRUE(refused_naming(e, "wgrad_deferral_limit"));
}

// Megatron-Core's MoE parallel folding where the entry names it (parallel.expert_layout and
// parallel.expert_tp): the Model Zoo's Qwen3-235B row at TP 2, EP 32, DP 16 is refused carved
// (ep does not divide dp) and placed folded; bad values are refused naming the field.
TEST(PublishedRun, FoldedExpertLayoutOnlyWhenTheEntryNamesIt) {
  Json e = llama_entry();
  e["model"] = Json::parse(R"({"name": "Qwen3-235B-A22B", "params_b": 235, "layers": 94,
      "hidden": 4096, "heads": 64, "kv_heads": 4, "head_dim": 128, "ffn_hidden": 12288,
      "moe_ffn_hidden": 1536, "num_experts": 128, "top_k": 8, "seq_len": 4096,
      "vocab": 151936, "activation": "swiglu", "norm": "rmsnorm", "position": "rope",
      "tied_embeddings": false, "bias": false})");
  e["hardware"] = Json::parse(R"({"gpu": "H100-SXM5-80GB", "num_gpus": 256})");
  e["parallel"] = Json::parse(R"({"tp": 2, "pp": 8, "vp": 4, "ep": 32, "dp": 16,
      "zero_stage": 1, "sequence_parallel": true, "micro_batch": 1, "global_batch": 2048})");
  EXPECT_TRUE(refused_naming(e, "ep=32 does not divide dp=16"));
  e["parallel"]["expert_layout"] = "folded";
  // Without expert_tp the experts split over tp (Megatron-LM's default), and EP 32 x ETP 2 does
  // not divide the stage's 32 ranks.
  EXPECT_TRUE(refused_naming(e, "expert_tp*ep = 2*32 does not divide"));
  e["parallel"]["expert_tp"] = 1;
  const PublishedRun r = map_ok(e);
  EXPECT_EQ(r.plan.expert_tp_size(), 1);
  EXPECT_EQ(r.plan.expert_dp(), 1);
  e["parallel"]["expert_layout"] = "stacked";
  EXPECT_TRUE(refused_naming(e, "expert_layout"));
  e["parallel"]["expert_layout"] = "carved";
  EXPECT_TRUE(refused_naming(e, "expert_tp=1 needs expert_layout folded"));
  e["parallel"]["expert_layout"] = "folded";
  e["parallel"]["expert_tp"] = 0;
  EXPECT_TRUE(refused_naming(e, "expert_tp"));
}

TEST(PublishedRun, FieldsItDoesNotUseAreListed) {
  Json e = gpt_entry();
  e["framework"] = "Megatron-LM";
  e["model"]["rope_theta"] = 500000;
  e["measured"]["loss"] = 2.1;
  const PublishedRun r = map_ok(e);
  EXPECT_EQ(r.ignored_fields,
            (std::vector<std::string>{"framework", "model.rope_theta", "measured.loss"}));
}

TEST(PublishedRun, ErrorsNameTheFieldAndValue) {
  struct Case {
    const char* what;
    Json entry;
    const char* expect;
  };
  std::vector<Case> cases;
  Json e = gpt_entry();
  e["parallel"].erase("global_batch");
  cases.push_back({"missing", e, "missing required field 'global_batch'"});
  e = gpt_entry();
  e["parallel"]["dp"] = 16;
  cases.push_back({"degrees", e, "tp*cp*pp*dp = 1*1*1*16 = 16 but hardware.num_gpus is 32"});
  e = gpt_entry();
  e["parallel"]["cp"] = 2;  // 2 x 32 ranks on 32 GPUs
  cases.push_back({"cp degrees", e, "tp*cp*pp*dp = 1*2*1*32 = 64"});
  e = gpt_entry();
  e["parallel"]["cp"] = 2;
  e["parallel"]["dp"] = 16;  // unfused attention (a 2021 source): CP needs a fused kernel
  cases.push_back({"cp unfused", e, "cp=2"});
  e = gpt_entry();
  e["precision"] = "fp8";
  cases.push_back({"fp8 on A100", e, "fp8: A100-80GB has no FP8 tensor-core rate"});
  e = gpt_entry();
  e["precision"] = "int4";
  cases.push_back({"precision", e, "unknown value \"int4\""});
  e = gpt_entry();
  e["hardware"]["gpu"] = "P100-16GB";
  cases.push_back({"gpu", e, "unknown GPU \"P100-16GB\""});
  e = gpt_entry();
  e["hardware"]["gpu"] = "V100-SXM2-32GB";
  e["precision"] = "bf16";
  cases.push_back({"bf16 on V100", e, "precision bf16: V100-32GB has no bf16 rate"});
  e = gpt_entry();
  e["parallel"]["recompute"] = "some";
  cases.push_back({"recompute", e, "field 'recompute': unknown value \"some\""});
  e = gpt_entry();
  e["parallel"]["recompute"] = "selective";
  e["parallel"]["recompute_num_layers"] = 2;
  cases.push_back({"recompute_num_layers", e, "recompute_num_layers=2 needs recompute full"});
  e = gpt_entry();
  e["parallel"]["recompute_num_layers"] = -1;
  cases.push_back({"recompute_num_layers range", e, "field 'recompute_num_layers'"});
  e = gpt_entry();
  e["parallel"]["tp"] = 5;
  e["parallel"]["dp"] = 32;
  e["hardware"]["num_gpus"] = 160;
  cases.push_back({"fits", e, "tp=5"});
  e = gpt_entry();
  e["parallel"]["global_batch"] = 513;
  cases.push_back({"batch", e, "global_batch_size=513"});
  e = gpt_entry();
  e["model"]["layers"] = "24";
  cases.push_back({"type", e, "field 'layers': expected an integer"});
  e = gpt_entry();
  e["measured"]["tflops_per_gpu"] = -1;
  cases.push_back({"range", e, "field 'tflops_per_gpu'"});
  cases.push_back({"not an object", Json::array(), "expected a JSON object"});
  for (const Case& c : cases) {
    const std::string msg = map_error(c.entry);
    EXPECT_NE(msg.find(c.expect), std::string::npos) << c.what << ": " << msg;
    EXPECT_NE(msg.find("entry 0"), std::string::npos) << c.what << ": " << msg;
  }
}

TEST(PublishedRun, MetricsMeetTheirPredictionsIterationTimeFirst) {
  Json e = gpt_entry();
  e["measured"]["iteration_time_s"] = 4.0;
  e["measured"]["mfu"] = 0.33;
  e["measured"]["tokens_per_s"] = 250000;
  e["measured"]["memory_gb"] = 40;
  const PublishedRun r = map_ok(e);
  StepReport p;
  p.step_time_s = 3.0;
  p.hardware_tflops_per_gpu = 150;
  p.mfu = 0.36;
  p.tokens_per_s = 300000;
  p.ranks.resize(2);
  p.ranks[0].peak_memory_bytes = 30e9;
  p.ranks[1].peak_memory_bytes = 42e9;
  const std::vector<PublishedMetric> m = compare_published_run(r, p);
  ASSERT_EQ(m.size(), 5u);
  EXPECT_EQ(m[0].name, "iteration_time_s");
  EXPECT_DOUBLE_EQ(m[0].error(), -0.25);
  EXPECT_DOUBLE_EQ(m[0].throughput_error(), 4.0 / 3.0 - 1.0);  // predicted faster: positive
  EXPECT_DOUBLE_EQ(m[1].throughput_error(), m[1].error());
  EXPECT_EQ(m[1].name, "tflops_per_gpu");
  EXPECT_DOUBLE_EQ(m[1].predicted, 150);
  EXPECT_EQ(m[2].name, "mfu");
  EXPECT_EQ(m[3].name, "tokens_per_s");
  EXPECT_EQ(m[4].name, "memory_gb");
  EXPECT_DOUBLE_EQ(m[4].predicted, 42);  // the fullest rank
  ASSERT_TRUE(headline_metric(m).has_value());
  EXPECT_EQ(headline_metric(m)->name, "iteration_time_s");
  EXPECT_FALSE(headline_metric({m[4]}).has_value());
}

// measured.memory_measure says what memory_gb counted. "reserved" is compared with the
// allocated peak over (1 - f), f the run's allocator's fragmentation (PyTorch's caching
// allocator 15%, GMLake; no figure, so none, for expandable segments and Paddle's auto-growth);
// "device" (nvidia-smi's memory in use) with that reserve plus the CUDA context and NCCL's
// buffers (device_runtime_bytes). A measure without a figure, or an unknown measure or
// allocator, is refused by name.
TEST(PublishedRun, ReservedAndDeviceMemoryAddTheAllocatorsReserveAndTheRuntime) {
  Json e = gpt_entry();  // dp 32: one data-parallel communicator
  e["measured"]["memory_gb"] = 40;
  StepReport p;
  p.ranks.resize(1);
  p.ranks[0].peak_memory_bytes = 30e9;
  const auto memory_predicted = [&](const Json& entry) {
    const std::vector<PublishedMetric> m = compare_published_run(map_ok(entry), p);
    return m.back().predicted;
  };
  EXPECT_DOUBLE_EQ(memory_predicted(e), 30);  // allocated, the default
  e["measured"]["memory_measure"] = "reserved";
  EXPECT_NEAR(memory_predicted(e), 30 / 0.85, 1e-9);  // PyTorch's caching allocator unless given
  EXPECT_TRUE(has_assumption(map_ok(e),
                             "allocated peak / 0.85, PyTorch's caching allocator "
                             "(allocator not given)"));
  e["allocator"] = "pytorch-expandable-segments";
  EXPECT_DOUBLE_EQ(memory_predicted(e), 30);
  EXPECT_TRUE(has_assumption(map_ok(e), "expandable segments has no published fragmentation"));
  e["allocator"] = "paddle-auto-growth";
  EXPECT_DOUBLE_EQ(memory_predicted(e), 30);
  EXPECT_TRUE(has_assumption(map_ok(e), "Paddle's auto-growth allocator has no published"));
  e["allocator"] = "pytorch-caching";
  EXPECT_FALSE(has_assumption(map_ok(e), "allocator not given"));

  e["measured"]["memory_measure"] = "device";
  const double dp_group = 688 * 1024.0 * 1024.0 / 1e9;
  EXPECT_NEAR(memory_predicted(e), 30 / 0.85 + 0.3 + dp_group, 1e-9);  // lazy unless given
  EXPECT_TRUE(has_assumption(map_ok(e), "lazy module loading, not given"));
  e["cuda_module_loading"] = "eager";
  e["allocator"] = "paddle-auto-growth";
  EXPECT_NEAR(memory_predicted(e), 30 + 1.0 + dp_group, 1e-9);
  EXPECT_TRUE(has_assumption(map_ok(e), "device memory in use = the reserve + 1.00 GB"));

  e["cuda_module_loading"] = "jit";
  EXPECT_TRUE(refused_naming(e, "cuda_module_loading"));
  e.erase("cuda_module_loading");
  e["allocator"] = "jemalloc";
  EXPECT_TRUE(refused_naming(e, "allocator"));
  e.erase("allocator");
  e["measured"]["memory_measure"] = "nvidia-smi";
  EXPECT_TRUE(refused_naming(e, "memory_measure"));
  e["measured"]["memory_measure"] = "device";
  e["measured"]["memory_gb"] = nullptr;
  const std::string error = map_error(e);
  for (const char* part : {"measured", "memory_measure 'device'", "without memory_gb"})
    EXPECT_NE(error.find(part), std::string::npos) << part << " in " << error;
}

}  // namespace
}  // namespace trainplan
