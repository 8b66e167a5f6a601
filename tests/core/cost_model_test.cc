// Unit tests of the cost model's formulas against published figures and hand computations:
// Narayanan et al. 2021 (parameters, eq. 3 FLOPs), Korthikanti et al. 2022 (activations, MFU
// FLOPs), Rajbhandari et al. 2019 (ZeRO memory), nccl-tests (bus bandwidth).
#include "core/cost/cost_model.h"

#include <cmath>
#include <set>
#include <utility>

#include <gtest/gtest.h>

#include "core/cost/collectives.h"
#include "core/cost/compute_model.h"
#include "core/cost/memory_kernel_rates.h"
#include "tests/core/test_util.h"

namespace trainplan {
namespace {

using testing::load_repo_model;

double rel(double a, double b) { return std::fabs(a - b) / std::fabs(b); }

Plan plan_of(std::int64_t tp, std::int64_t pp, std::int64_t dp, std::int64_t mbs,
             std::int64_t gbs) {
  Plan p;
  p.tp = tp;
  p.pp = pp;
  p.dp = dp;
  p.micro_batch_size = mbs;
  p.global_batch_size = gbs;
  return p;
}

// GPT-3 with Megatron's 2021 settings: dropout, unfused attention.
ModelSpec gpt3() {
  ModelSpec m = load_repo_model("gpt3.json");
  EXPECT_TRUE(m.dropout);
  return m;
}

TEST(Parameters, Gpt3HasAbout174Point6Billion) {
  const ModelSpec m = gpt3();
  const double p = count_parameters(m).total();
  EXPECT_NEAR(p / 1e9, 174.6, 0.05);
  // Megatron-LM's closed form (Narayanan et al. 2021, sec. 5.1):
  // P = 12*l*h^2*(1 + 13/(12h) + (V+s)/(12*l*h)): 12h^2 + 13h per layer (weights, biases, two
  // LayerNorms) plus the embeddings; ours adds the final LayerNorm's 2h, so they agree to 1e-6.
  const double l = 96, h = 12288, V = 50257, s = 2048;
  const double megatron = 12 * l * h * h * (1 + 13 / (12 * h) + (V + s) / (12 * l * h));
  EXPECT_LT(rel(p, megatron), 1e-6);
}

TEST(Parameters, Llama3SizesMatchTheirNames) {
  EXPECT_NEAR(count_parameters(load_repo_model("llama3-8b.json")).total() / 1e9, 8.03, 0.01);
  EXPECT_NEAR(count_parameters(load_repo_model("llama3-70b.json")).total() / 1e9, 70.55, 0.01);
  EXPECT_NEAR(count_parameters(load_repo_model("llama3-405b.json")).total() / 1e9, 405.85, 0.05);
  // Mixtral 8x7B: 46.7B total, 12.9B active (Jiang et al. 2024, sec. 2).
  const ParameterCounts mix = count_parameters(load_repo_model("mixtral-8x7b.json"));
  EXPECT_NEAR(mix.total() / 1e9, 46.7, 0.05);
  EXPECT_NEAR(mix.active() / 1e9, 12.9, 0.05);
}

TEST(Parameters, GptTwoSmallIs124Million) {
  EXPECT_NEAR(count_parameters(load_repo_model("gpt2-124m.json")).total() / 1e6, 124.4, 0.1);
}

TEST(Parameters, StageSumsMatchTheBlocks) {
  for (const char* name : {"gpt3.json", "llama3-8b.json", "mixtral-8x7b.json", "tiny.json"}) {
    const ModelSpec m = load_repo_model(name);
    for (std::int64_t tp : {1, 2}) {
      for (std::int64_t pp : {1, 2, 4}) {
        Plan p = plan_of(tp, pp, 8, 1, 64);
        if (m.is_moe()) p.ep = 4;
        double total_dense = 0;
        for (std::int64_t s = 0; s < pp; ++s) {
          double dense = 0, expert = 0;
          for (const ParamBlock& b : param_blocks_on_stage(m, p, s)) {
            dense += static_cast<double>(b.dense_params);
            expert += static_cast<double>(b.expert_params);
          }
          const StageParameters sp = parameters_on_stage(m, p, s);
          EXPECT_EQ(sp.dense, dense) << name << " tp=" << tp << " pp=" << pp << " stage " << s;
          EXPECT_EQ(sp.expert, expert);
          total_dense += sp.dense;
        }
        if (tp == 1 && !m.is_moe() && (pp == 1 || !m.tie_word_embeddings)) {
          // With no sharding the stages add up to the model (vocabulary padded to 128).
          const ParameterCounts c = count_parameters(m);
          const double pad = static_cast<double>(padded_vocab(m, 1) - m.vocab_size) *
                             static_cast<double>(m.hidden_size) *
                             (m.tie_word_embeddings ? 1.0 : 2.0);
          EXPECT_DOUBLE_EQ(total_dense, c.total() + pad) << name;
        }
      }
    }
  }
}

TEST(Flops, HardwareFlopsWithFullRecomputeAreMegatronEq3) {
  ModelSpec m = gpt3();
  Plan p = plan_of(8, 8, 1, 1, 1536);
  p.recompute = Recompute::kFull;
  p.attention = AttentionImpl::kUnfused;
  for (std::int64_t batch : {1, 512, 1536}) {
    p.global_batch_size = batch;
    EXPECT_LT(rel(step_flops(m, p).hardware, megatron_eq3_flops(m, batch)), 1e-12);
  }
}

TEST(Flops, ModelFlopsAreKorthikantiMfuFormula) {
  // Korthikanti et al. 2022, appendix: model FLOPs = 72*B*s*l*h^2*(1 + s/(6h) + V/(12*h*l)).
  const ModelSpec m = gpt3();
  Plan p = plan_of(1, 1, 1, 1, 64);
  p.recompute = Recompute::kSelective;
  p.attention = AttentionImpl::kUnfused;
  const double B = 64, s = 2048, l = 96, h = 12288, V = 50257;
  const double expected = 72 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * h * l));
  EXPECT_LT(rel(step_flops(m, p).model, expected), 1e-12);
  // Selective recompute adds the attention core's forward: 4*B*s^2*h per layer.
  EXPECT_LT(rel(step_flops(m, p).hardware - step_flops(m, p).model, 4 * B * s * s * h * l), 1e-12);
}

// torchtitan's op-level checkpoint on Llama 3 8B (h 4096, 8 KV heads of 128, SwiGLU 14336):
// the matmuls in forward order are wq, wk, wv, wo, w1, w3, w2; every second one (wk, wo, w3)
// runs again in the backward, and a layer keeps its input, the outputs of wq, wv, w1, w2 and the
// attention kernel's output with its fp32 log-sum-exp.
TEST(Recompute, TorchtitanOpLevelCheckpointRedoesEverySecondMatmul) {
  const ModelSpec m = load_repo_model("llama3-8b.json");
  Plan p = plan_of(1, 1, 1, 1, 4);
  p.precision = Precision::kBf16;
  p.attention = AttentionImpl::kFused;
  p.recompute = Recompute::kSelectiveOp;
  const double B = 4, s = 8192, L = 32, h = 4096, kv = 1024, f = 14336, heads = 32;
  const StepFlops fl = step_flops(m, p);
  EXPECT_LT(rel(fl.hardware - fl.model, 2 * B * s * L * h * (kv + h + f)), 1e-12);
  const double T = s;  // one sequence per micro-batch
  const double kept = 2.0 * T * (h + h + kv + f + h + h) + T * heads * 4.0;
  EXPECT_LT(rel(layer_activation_bytes(m, p), kept), 1e-12);
  // Less than storing everything, more than full recompute's input alone.
  Plan none = p;
  none.recompute = Recompute::kNone;
  EXPECT_LT(layer_activation_bytes(m, p), layer_activation_bytes(m, none));
  EXPECT_GT(layer_activation_bytes(m, p), 2.0 * T * h);
  // The recomputed tasks: three matmuls, the layer's memory-bound kernels, no attention kernel.
  int gemms = 0;
  for (const Task& t : layer_recompute_tasks(m, p)) {
    EXPECT_NE(t.kind, TaskKind::kAttention) << t.name;
    if (t.kind == TaskKind::kGemm) ++gemms;
  }
  EXPECT_EQ(gemms, 3);
}

// PyTorch's eager cross-entropy (torchtitan's loss before it was compiled) holds 12 bytes per
// logit at the backward's start against the fused loss's 4: the difference is 8*s*b*V/t on the
// stage with the head, and nothing elsewhere; its kernels move the bytes they read and write.
TEST(Memory, UnfusedCrossEntropyHoldsTwelveBytesPerLogit) {
  const ModelSpec m = testing::gpt_model(4, 512, 8, 1024, 32000);
  Plan p;
  p.pp = 2;
  p.tp = 2;
  p.micro_batch_size = 2;
  p.global_batch_size = 8;
  p.precision = Precision::kBf16;
  Plan unfused = p;
  unfused.cross_entropy = CrossEntropy::kUnfused;
  const double logits_per_rank = 2.0 * 1024 * static_cast<double>(padded_vocab(m, 2)) / 2.0;
  EXPECT_DOUBLE_EQ(memory_on_stage(m, unfused, 1).activations_bytes -
                       memory_on_stage(m, p, 1).activations_bytes,
                   8.0 * logits_per_rank);
  EXPECT_DOUBLE_EQ(memory_on_stage(m, unfused, 0).activations_bytes,
                   memory_on_stage(m, p, 0).activations_bytes);
  auto bytes_of = [](const std::vector<Task>& tasks, std::string_view name) {
    for (const Task& t : tasks)
      if (t.name == name) return t.bytes;
    return -1.0;
  };
  // bf16 logits: forward 2 + 16 against 2 + 8, backward 20 + 2 against 4 + 2.
  EXPECT_DOUBLE_EQ(bytes_of(head_forward_tasks(m, unfused), "cross_entropy"),
                   logits_per_rank * 18.0);
  EXPECT_DOUBLE_EQ(bytes_of(head_forward_tasks(m, p), "cross_entropy"), logits_per_rank * 10.0);
  EXPECT_DOUBLE_EQ(bytes_of(head_backward_tasks(m, unfused), "cross_entropy_bwd"),
                   logits_per_rank * 22.0);
  EXPECT_DOUBLE_EQ(bytes_of(head_backward_tasks(m, p), "cross_entropy_bwd"),
                   logits_per_rank * 6.0);
}

TEST(Memory, MixedPrecisionAdamIsSixteenBytesPerParameter) {
  EXPECT_EQ(state_bytes_per_param(Precision::kBf16, Optimizer::kAdamW).total(), 16.0);
  EXPECT_EQ(state_bytes_per_param(Precision::kFp16, Optimizer::kAdamW).optimizer, 12.0);
  EXPECT_EQ(state_bytes_per_param(Precision::kFp32, Optimizer::kAdamW).total(), 16.0);
  EXPECT_EQ(state_bytes_per_param(Precision::kFp32, Optimizer::kSgd).total(), 8.0);
  EXPECT_EQ(state_bytes_per_param(Precision::kBf16, Optimizer::kSgdMomentum).total(), 12.0);
}

TEST(Memory, Fp32GradientsAreEighteenBytesPerParameterAndReduceInFp32) {
  // Megatron-LM's bf16 default (fp32 main_grad): 2 + 4 + 12 bytes per parameter.
  EXPECT_EQ(state_bytes_per_param(Precision::kBf16, Optimizer::kAdamW, GradPrecision::kFp32)
                .total(),
            18.0);
  EXPECT_EQ(state_bytes_per_param(Precision::kFp32, Optimizer::kAdamW, GradPrecision::kFp32)
                .total(),
            16.0);  // nothing changes in fp32
  const ModelSpec m = load_repo_model("gpt2-124m.json");
  Plan p = plan_of(1, 1, 4, 1, 8);
  p.sequence_parallel = false;
  Plan fp32 = p;
  fp32.grad_precision = GradPrecision::kFp32;
  const double psi = parameters_on_stage(m, p, 0).total();
  EXPECT_DOUBLE_EQ(memory_on_stage(m, fp32, 0).gradients_bytes, 4.0 * psi);
  EXPECT_DOUBLE_EQ(memory_on_stage(m, p, 0).gradients_bytes, 2.0 * psi);
  // The optimizer reads 2 more bytes per parameter.
  EXPECT_DOUBLE_EQ(optimizer_step_bytes_per_param(fp32) - optimizer_step_bytes_per_param(p), 2.0);
  // Gradient collectives carry 4 bytes per element; ZeRO's weight gathers stay at 2.
  for (int zero : {0, 1}) {
    p.zero_stage = fp32.zero_stage = zero;
    for (const ParamBlock& b : param_blocks_on_stage(m, p, 0)) {
      for (DpPoint point : {DpPoint::kAfterLastBackward, DpPoint::kAfterOptimizer}) {
        const std::vector<Task> base = dp_block_tasks(p, b, point);
        const std::vector<Task> wide = dp_block_tasks(fp32, b, point);
        ASSERT_EQ(base.size(), wide.size());
        for (std::size_t i = 0; i < base.size(); ++i) {
          const double ratio = static_cast<double>(wide[i].message_bytes) /
                               static_cast<double>(base[i].message_bytes);
          EXPECT_DOUBLE_EQ(ratio, base[i].collective == Collective::kAllGather ? 1.0 : 2.0)
              << base[i].name;
        }
      }
    }
  }
}

// Plan::grad_accumulation_pass shard-add (the executors' ZeRO-2/3): at each block's
// reduce-scatter, the fresh buffer's zero-fill before it (padded elements x 4 bytes in fp32) and
// the shard's add into the fp32 gradient shard after it (shard x (4 + 4 + 4) bytes); nothing
// else changes, at that point or any other.
TEST(DataParallel, ShardAddFillsTheBufferAndAddsTheShardAroundTheReduceScatter) {
  const ModelSpec m = load_repo_model("gpt2-124m.json");
  for (int zero : {2, 3}) {
    SCOPED_TRACE(zero);
    Plan base = plan_of(1, 1, 2, 1, 4);
    base.sequence_parallel = false;
    base.precision = Precision::kFp32;
    base.zero_stage = zero;
    Plan add = base;
    add.grad_accumulation_pass = GradAccumulationPass::kShardAdd;
    for (const ParamBlock& b : param_blocks_on_stage(m, base, 0)) {
      const std::vector<Task> before = dp_block_tasks(base, b, DpPoint::kAfterBackward);
      const std::vector<Task> after = dp_block_tasks(add, b, DpPoint::kAfterBackward);
      ASSERT_EQ(before.size(), 1u) << "one reduce-scatter (no experts)";
      ASSERT_EQ(after.size(), 3u);
      EXPECT_EQ(after[0].name, "zero_grad_buffer_fill");
      EXPECT_EQ(after[1].name, before[0].name);
      EXPECT_EQ(after[1].message_bytes, before[0].message_bytes);
      EXPECT_EQ(after[2].name, "zero_grad_shard_add");
      const double padded = static_cast<double>(before[0].message_bytes) / 4.0;
      EXPECT_DOUBLE_EQ(after[0].bytes, 4.0 * padded);
      EXPECT_DOUBLE_EQ(after[2].bytes, 12.0 * padded / 2.0);
      EXPECT_EQ(after[2].launches, 1);
      for (DpPoint point : {DpPoint::kBeforeForward, DpPoint::kBeforeBackward,
                            DpPoint::kAfterLastBackward, DpPoint::kAfterOptimizer})
        EXPECT_EQ(dp_block_tasks(add, b, point).size(), dp_block_tasks(base, b, point).size());
    }
  }
}

// Plan::zero1_collectives per-rank (nanotron 0.5's ZeRO-1 with fp32 accumulation): the whole
// fp32 gradient buffer all-reduced in place, no copies, twice a reduce-scatter's bytes on the
// wire; around the parameter all-gather, n + 1 flatten launches before it and n x (tensors + 1)
// copy launches after it. The collectives' messages are the flat plan's.
TEST(DataParallel, PerRankZero1AllReducesGradientsAndCopiesGathersPerRank) {
  const ModelSpec m = load_repo_model("llama3-8b.json");
  for (const std::int64_t n : {2, 8, 128}) {
    SCOPED_TRACE(n);
    Plan flat = plan_of(1, 1, n, 1, n);
    flat.zero_stage = 1;
    flat.grad_precision = GradPrecision::kFp32;
    Plan per = flat;
    per.zero1_collectives = ZeroCollectives::kPerRank;
    const std::vector<ParamBlock> blocks = param_blocks_on_stage(m, per, 0);
    const ParamBlock& layer = blocks[1];
    ASSERT_EQ(layer.kind, BlockKind::kLayer);
    ASSERT_EQ(layer.tensors, 6);
    const double params = static_cast<double>(layer.dense_params);

    const std::vector<Task> rs_flat = dp_block_tasks(flat, layer, DpPoint::kAfterLastBackward);
    const std::vector<Task> ar_per = dp_block_tasks(per, layer, DpPoint::kAfterLastBackward);
    ASSERT_EQ(rs_flat.size(), 1u);
    ASSERT_EQ(ar_per.size(), 1u);
    EXPECT_EQ(ar_per[0].name, "zero1_grad_all_reduce");
    EXPECT_EQ(ar_per[0].kind, TaskKind::kComm);
    EXPECT_EQ(ar_per[0].collective, Collective::kAllReduce);
    EXPECT_EQ(ar_per[0].message_bytes, rs_flat[0].message_bytes);
    EXPECT_NEAR(static_cast<double>(bytes_sent_per_rank(Collective::kAllReduce,
                                                        ar_per[0].message_bytes, n)) /
                    static_cast<double>(bytes_sent_per_rank(Collective::kReduceScatter,
                                                            rs_flat[0].message_bytes, n)),
                2.0, 1e-6);

    const std::vector<Task> ag_flat = dp_block_tasks(flat, layer, DpPoint::kAfterOptimizer);
    const std::vector<Task> ag_per = dp_block_tasks(per, layer, DpPoint::kAfterOptimizer);
    ASSERT_EQ(ag_flat.size(), 1u);
    ASSERT_EQ(ag_per.size(), 3u);
    EXPECT_EQ(ag_per[0].name, "zero1_gather_rank_flatten");
    EXPECT_EQ(ag_per[0].launches, n + 1);
    EXPECT_EQ(ag_per[1].kind, TaskKind::kComm);
    EXPECT_EQ(ag_per[1].collective, Collective::kAllGather);
    EXPECT_EQ(ag_per[1].message_bytes, ag_flat[0].message_bytes);
    EXPECT_EQ(ag_per[2].name, "zero1_gather_rank_copies");
    EXPECT_EQ(ag_per[2].launches, n * 7);
    EXPECT_DOUBLE_EQ(ag_per[2].bytes, 4.0 * params * 2.0);
    // Nothing else changes: the other points are the flat plan's.
    for (DpPoint point : {DpPoint::kBeforeForward, DpPoint::kBeforeBackward,
                          DpPoint::kAfterBackward}) {
      EXPECT_EQ(dp_block_tasks(per, layer, point).size(),
                dp_block_tasks(flat, layer, point).size());
    }
  }
  // One rank: nothing to reduce or gather, no copies.
  Plan one = plan_of(1, 1, 1, 1, 1);
  one.zero_stage = 1;
  one.zero1_collectives = ZeroCollectives::kPerRank;
  const ParamBlock layer = param_blocks_on_stage(load_repo_model("llama3-8b.json"), one, 0)[1];
  EXPECT_TRUE(dp_block_tasks(one, layer, DpPoint::kAfterLastBackward).empty());
  EXPECT_TRUE(dp_block_tasks(one, layer, DpPoint::kAfterOptimizer).empty());
}

// Plan::dp_bucket_elements (apex DistributedFusedAdam's buckets): a block's DDP all-reduce or
// ZeRO-1/2 reduce-scatter and all-gather becomes k = ceil(E / bucket) collectives of E / k
// elements, played back to back (Task::repeat), the same bytes; a block no larger than a bucket
// keeps one. The plan file carries it when set; a bucket below the floor or with ZeRO-3 is
// refused naming the field and the value.
TEST(DataParallel, BucketsSplitABlocksCollectivesWithTheSameBytes) {
  const ModelSpec m = load_repo_model("llama3-8b.json");
  for (const std::int64_t zero : {0, 1, 2}) {
    SCOPED_TRACE(zero);
    Plan whole = plan_of(1, 1, 16, 1, 16);
    whole.zero_stage = zero;
    const ParamBlock layer = param_blocks_on_stage(m, whole, 0)[1];
    ASSERT_EQ(layer.kind, BlockKind::kLayer);
    Plan split = whole;
    split.dp_bucket_elements = 52428800;  // bucket_cap_mb 100 of bf16 gradients
    ASSERT_TRUE(validate_plan(split).ok()) << validate_plan(split).message();
    const std::int64_t k = (layer.dense_params + 52428800 - 1) / 52428800;
    ASSERT_GT(k, 1);
    int collectives = 0;
    for (DpPoint point : {DpPoint::kAfterBackward, DpPoint::kAfterLastBackward,
                          DpPoint::kAfterOptimizer}) {
      const std::vector<Task> a = dp_block_tasks(whole, layer, point);
      const std::vector<Task> b = dp_block_tasks(split, layer, point);
      ASSERT_EQ(a.size(), b.size());
      for (std::size_t i = 0; i < a.size(); ++i) {
        if (a[i].kind != TaskKind::kComm || a[i].group != CommGroup::kDp) continue;
        ++collectives;
        EXPECT_EQ(a[i].repeat, 1);
        EXPECT_EQ(b[i].repeat, k);
        EXPECT_TRUE(b[i].repeat_first);
        EXPECT_NEAR(static_cast<double>(b[i].message_bytes) * static_cast<double>(k),
                    static_cast<double>(a[i].message_bytes), static_cast<double>(k));
        EXPECT_NEAR(static_cast<double>(b[i].bytes_sent()), static_cast<double>(a[i].bytes_sent()),
                    1e-6 * static_cast<double>(a[i].bytes_sent()));
      }
    }
    EXPECT_EQ(collectives, zero == 0 ? 1 : 2);
    // A bucket as large as the block: one collective, as without buckets.
    split.dp_bucket_elements = layer.dense_params * 2;
    for (const Task& t : dp_block_tasks(split, layer, DpPoint::kAfterLastBackward))
      EXPECT_EQ(t.repeat, 1);
  }
  Plan p = plan_of(1, 1, 16, 1, 16);
  p.zero_stage = 1;
  p.dp_bucket_elements = 104857600;
  EXPECT_NE(describe(p).find(" dp-bucket=104857600"), std::string::npos);
  Json j = plan_to_json(p);
  EXPECT_EQ(j.at("dp_bucket_elements"), 104857600);
  auto back = plan_from_json(j, "p.json");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->dp_bucket_elements, 104857600);
  EXPECT_FALSE(plan_to_json(plan_of(1, 1, 16, 1, 16)).contains("dp_bucket_elements"));
  j["dp_bucket_elements"] = 1000;
  auto small = plan_from_json(j, "p.json");
  ASSERT_FALSE(small.ok());
  EXPECT_NE(small.status().message().find("dp_bucket_elements=1000"), std::string::npos)
      << small.status().message();
  j["dp_bucket_elements"] = -5;
  auto negative = plan_from_json(j, "p.json");
  ASSERT_FALSE(negative.ok());
  EXPECT_NE(negative.status().message().find("dp_bucket_elements"), std::string::npos);
  p.zero_stage = 3;
  EXPECT_NE(validate_plan(p).message().find("dp_bucket_elements=104857600"), std::string::npos)
      << validate_plan(p).message();
}

// Plan::zero1_collectives all-reduce (DeepSpeed's BF16_Optimizer under its PipelineEngine): the
// block's fp32 gradients all-reduced whole, a flatten before and a copy back after, each reading
// and writing the gradients once; the weights' all-gather after the step is the flat plan's.
// On the wire an all-reduce moves twice a reduce-scatter's bytes.
TEST(DataParallel, AllReduceZero1ReducesTheWholeGradientWithItsCopies) {
  const ModelSpec m = load_repo_model("llama3-8b.json");
  for (const std::int64_t n : {2, 8}) {
    SCOPED_TRACE(n);
    Plan flat = plan_of(1, 1, n, 1, n);
    flat.zero_stage = 1;
    flat.grad_precision = GradPrecision::kFp32;
    Plan ar = flat;
    ar.zero1_collectives = ZeroCollectives::kAllReduce;
    const ParamBlock layer = param_blocks_on_stage(m, ar, 0)[1];
    ASSERT_EQ(layer.kind, BlockKind::kLayer);
    const double params = static_cast<double>(layer.dense_params);
    const std::vector<Task> rs = dp_block_tasks(flat, layer, DpPoint::kAfterLastBackward);
    const std::vector<Task> t = dp_block_tasks(ar, layer, DpPoint::kAfterLastBackward);
    ASSERT_EQ(rs.size(), 1u);
    ASSERT_EQ(t.size(), 3u);
    EXPECT_EQ(t[0].name, "zero1_grad_flatten");
    EXPECT_DOUBLE_EQ(t[0].bytes, 2.0 * params * 4.0);
    EXPECT_EQ(t[1].kind, TaskKind::kComm);
    EXPECT_EQ(t[1].collective, Collective::kAllReduce);
    EXPECT_EQ(t[1].group_size, n);
    EXPECT_DOUBLE_EQ(t[1].message_bytes, params * 4.0);
    EXPECT_EQ(t[2].name, "zero1_grad_unflatten");
    EXPECT_DOUBLE_EQ(t[2].bytes, 2.0 * params * 4.0);
    EXPECT_NEAR(static_cast<double>(bytes_sent_per_rank(t[1].collective, t[1].message_bytes, n)) /
                    static_cast<double>(
                        bytes_sent_per_rank(rs[0].collective, rs[0].message_bytes, n)),
                2.0, 1e-6);
    const std::vector<Task> ag_flat = dp_block_tasks(flat, layer, DpPoint::kAfterOptimizer);
    const std::vector<Task> ag = dp_block_tasks(ar, layer, DpPoint::kAfterOptimizer);
    ASSERT_EQ(ag.size(), 1u);
    EXPECT_EQ(ag[0].collective, Collective::kAllGather);
    EXPECT_EQ(ag[0].message_bytes, ag_flat[0].message_bytes);
  }
}

// Plan::grad_accumulation_pass cast-add (DeepSpeed's BF16_Optimizer.update_hp_grads): each
// block's backward ends with a cast and an add per parameter tensor, 2 + 4 + 4 + 4 + 4 bytes per
// bf16 parameter; memory holds the bf16 gradients beside the fp32 buffer; nothing else changes.
TEST(Tasks, GradAccumulationPassCastsAndAddsEveryGradientEachMicroBatch) {
  const ModelSpec m = gpt3();
  Plan p = plan_of(4, 4, 2, 1, 16);
  p.zero_stage = 1;
  p.grad_precision = GradPrecision::kFp32;
  Plan pass = p;
  pass.grad_accumulation_pass = GradAccumulationPass::kCastAdd;
  const ParamBlock layer = param_blocks_on_stage(m, p, 1)[0];
  ASSERT_EQ(layer.kind, BlockKind::kLayer);
  auto named = [](const std::vector<Task>& tasks) {
    for (const Task& t : tasks)
      if (t.name == "grad_accumulation_pass") return t;
    ADD_FAILURE() << "no grad_accumulation_pass task";
    return Task{};
  };
  const std::vector<Task> a = layer_backward_tasks(m, p), b = layer_backward_tasks(m, pass);
  ASSERT_EQ(b.size(), a.size() + 1);
  const Task t = named(b);
  EXPECT_EQ(t.kind, TaskKind::kMemory);
  EXPECT_DOUBLE_EQ(t.bytes, static_cast<double>(layer.dense_params) * 18.0);
  EXPECT_EQ(t.launches, 2 * layer.tensors);
  const ParamBlock emb = param_blocks_on_stage(m, p, 0)[0];
  ASSERT_EQ(emb.kind, BlockKind::kEmbedding);
  EXPECT_DOUBLE_EQ(named(embedding_backward_tasks(m, pass)).bytes,
                   static_cast<double>(emb.dense_params) * 18.0);
  const std::vector<ParamBlock> last = param_blocks_on_stage(m, p, 3);
  ASSERT_EQ(last.back().kind, BlockKind::kHead);
  EXPECT_DOUBLE_EQ(named(head_backward_tasks(m, pass)).bytes,
                   static_cast<double>(last.back().dense_params) * 18.0);
  EXPECT_EQ(layer_forward_tasks(m, pass).size(), layer_forward_tasks(m, p).size());
  for (std::int64_t stage : {0, 3}) {
    const StageParameters sp = parameters_on_stage(m, p, stage);
    const MemoryBreakdown x = memory_on_stage(m, p, stage), y = memory_on_stage(m, pass, stage);
    EXPECT_DOUBLE_EQ(y.gradients_bytes - x.gradients_bytes, 2.0 * (sp.dense + sp.expert));
    EXPECT_DOUBLE_EQ(y.optimizer_bytes, x.optimizer_bytes);
  }
  // A step's time grows by M passes per block (the simulator plays the micro-batch tasks).
  EXPECT_GT(task_time_s(t, device_rates(*gpu_preset("A100-80GB"), Precision::kBf16)), 0.0);
}

// The one task a grad_accumulation_pass adds to a middle stage's layer backward, and the layer.
struct LayerPass {
  ParamBlock layer;
  Task task;
};
LayerPass layer_pass(const ModelSpec& m, const Plan& without, const Plan& with) {
  LayerPass out{param_blocks_on_stage(m, without, 1)[0], Task{}};
  EXPECT_EQ(out.layer.kind, BlockKind::kLayer);
  const std::vector<Task> a = layer_backward_tasks(m, without), b = layer_backward_tasks(m, with);
  EXPECT_EQ(b.size(), a.size() + 1);
  if (!b.empty()) out.task = b.back();
  EXPECT_EQ(out.task.name, "grad_accumulation_pass");
  return out;
}

// Plan::grad_accumulation_pass add (nanotron's FP32GradientAccumulator): one in-place add per
// parameter tensor that casts the bf16 gradient as it reads it, 2 + 4 + 4 bytes per parameter;
// the same memory as cast-add (the bf16 gradients beside the fp32 buffer).
TEST(Tasks, GradAccumulationPassAddIsOneKernelPerTensor) {
  const ModelSpec m = gpt3();
  Plan p = plan_of(4, 4, 2, 1, 16);
  p.zero_stage = 1;
  p.grad_precision = GradPrecision::kFp32;
  Plan add = p, cast = p;
  add.grad_accumulation_pass = GradAccumulationPass::kAdd;
  cast.grad_accumulation_pass = GradAccumulationPass::kCastAdd;
  const auto [layer, t] = layer_pass(m, p, add);
  EXPECT_DOUBLE_EQ(t.bytes, static_cast<double>(layer.dense_params) * 10.0);
  EXPECT_EQ(t.launches, layer.tensors);
  const MemoryBreakdown x = memory_on_stage(m, add, 1), y = memory_on_stage(m, cast, 1);
  EXPECT_DOUBLE_EQ(x.gradients_bytes, y.gradients_bytes);
}

// Plan::grad_accumulation_pass autograd (PyTorch's AccumulateGrad into .grad: Megatron-LM 2021
// fp16, DeepSpeed's pipeline engine): one in-place fp16 add per tensor, 2 + 2 + 2 bytes per
// parameter, for micro-batches 2..M only, charged (M - 1) / M per micro-batch; nothing with one
// micro-batch; no memory beyond the gradients themselves.
TEST(Tasks, GradAccumulationPassAutogradAddsEveryMicroBatchAfterTheFirst) {
  const ModelSpec m = gpt3();
  Plan p = plan_of(4, 4, 2, 1, 16);  // 8 micro-batches
  p.zero_stage = 1;
  p.precision = Precision::kFp16;
  p.grad_precision = GradPrecision::kCompute;
  ASSERT_EQ(p.num_micro_batches(), 8);
  Plan pass = p;
  pass.grad_accumulation_pass = GradAccumulationPass::kAutograd;
  ASSERT_TRUE(validate_plan(pass).ok()) << validate_plan(pass).message();
  const auto [layer, t] = layer_pass(m, p, pass);
  EXPECT_DOUBLE_EQ(t.bytes, static_cast<double>(layer.dense_params) * 6.0 * 7.0 / 8.0);
  EXPECT_EQ(t.launches, layer.tensors);
  for (std::int64_t stage : {0, 3}) {
    const MemoryBreakdown x = memory_on_stage(m, p, stage), y = memory_on_stage(m, pass, stage);
    EXPECT_DOUBLE_EQ(y.gradients_bytes, x.gradients_bytes);
  }
  Plan one = pass;
  one.global_batch_size = 2;  // one micro-batch: the gradient is kept, nothing is added
  ASSERT_EQ(one.num_micro_batches(), 1);
  EXPECT_EQ(layer_backward_tasks(m, one).size(), layer_backward_tasks(m, p).size());
}

// Plan::zero3_gather per-tensor (DeepSpeed 0.3.11-0.5.4): a layer's gather becomes one
// all-gather per parameter tensor (GPT-3's layer, Megatron-LM's layout: two LayerNorms with
// biases, QKV and the output projection, fc1 and fc2, each with a bias: 12; Llama's: two
// RMSNorms and four bias-free projections: 6), each followed by one copy launch per rank, and
// the bytes are the flat gather's up to each piece's padding to the group.
// Plan::zero3_recompute_gather kept: a fully recomputed layer gathers once, before its
// recompute, and not again before its backward; a layer that is not recomputed, the embedding
// and the head gather as before, and gradients are reduced as before.
TEST(DataParallel, KeptRecomputeGatherGathersARecomputedLayerOnce) {
  const ModelSpec m = load_repo_model("llama3-8b.json");
  Plan again = plan_of(1, 1, 8, 1, 8);
  again.zero_stage = 3;
  again.recompute = Recompute::kFull;
  Plan kept = again;
  kept.zero3_recompute_gather = ZeroRecomputeGather::kKept;
  ASSERT_TRUE(validate_plan(kept).ok()) << validate_plan(kept).message();
  int recomputed = 0;
  for (const ParamBlock& b : param_blocks_on_stage(m, kept, 0)) {
    const bool once = b.kind == BlockKind::kLayer && b.recomputed;
    recomputed += once ? 1 : 0;
    for (DpPoint point : {DpPoint::kBeforeForward, DpPoint::kBeforeRecompute,
                          DpPoint::kBeforeBackward, DpPoint::kAfterBackward,
                          DpPoint::kAfterLastBackward}) {
      const std::size_t a = dp_block_tasks(again, b, point).size();
      const std::size_t k = dp_block_tasks(kept, b, point).size();
      if (once && point == DpPoint::kBeforeBackward) {
        EXPECT_EQ(a, 1u);
        EXPECT_EQ(k, 0u);
      } else {
        EXPECT_EQ(k, a);
      }
    }
  }
  EXPECT_EQ(recomputed, m.num_layers);
  // Needs ZeRO-3, named in the error.
  Plan zero2 = kept;
  zero2.zero_stage = 2;
  EXPECT_NE(validate_plan(zero2).message().find("zero3_recompute_gather=kept"), std::string::npos);
}

// Plan::zero3_copies, on a Llama 3 8B layer (6 tensors) over 8 ranks, bf16 with fp32
// reduce-scatters. per-param (FSDP2): before each gather, the fp32 shard's cast (one kernel per
// tensor: 4 bytes read, 2 written an element) and the foreach copy into the flat input (2 + 2);
// after it, the copy-out on the compute stream reads and writes the gathered bytes; before the
// reduce-scatter, chunk_cat reads the bf16 gradients and writes the padded fp32 input.
// flat-param (FSDP1): the shard's cast before the gather (one kernel), nothing after it; after
// the backward, the gradients' flatten on the compute stream (2 + 2 bytes an element), then on
// the reduce-scatter's stream the cast to fp32, the pad (only when the layer does not divide
// over the group: 7 ranks) and the predivide. The collectives are unchanged.
TEST(DataParallel, FsdpCopiesCountedFromEachFsdpsCode) {
  const ModelSpec m = load_repo_model("llama3-8b.json");
  const std::int64_t n = 8;
  Plan none = plan_of(1, 1, n, 1, n);
  none.zero_stage = 3;
  none.grad_precision = GradPrecision::kFp32;
  Plan per = none, flat = none;
  per.zero3_copies = ZeroCopies::kPerParam;
  flat.zero3_copies = ZeroCopies::kFlatParam;
  ASSERT_TRUE(validate_plan(per).ok()) << validate_plan(per).message();
  const ParamBlock layer = param_blocks_on_stage(m, per, 0)[1];
  ASSERT_EQ(layer.kind, BlockKind::kLayer);
  ASSERT_EQ(layer.dense_params % n, 0);
  const double params = static_cast<double>(layer.dense_params), shard = params / n;
  for (DpPoint point : {DpPoint::kBeforeForward, DpPoint::kBeforeBackward}) {
    const std::vector<Task> plain = dp_block_tasks(none, layer, point);
    ASSERT_EQ(plain.size(), 1u);
    const std::vector<Task> p2 = dp_block_tasks(per, layer, point);
    ASSERT_EQ(p2.size(), 2u);
    EXPECT_EQ(p2[0].name, "fsdp2_all_gather_copy_in");
    EXPECT_DOUBLE_EQ(p2[0].bytes, shard * (4 + 2) + shard * (2 + 2));
    EXPECT_EQ(p2[0].launches, layer.tensors + 1);
    EXPECT_EQ(p2[1].message_bytes, plain[0].message_bytes);
    const std::vector<Task> out = zero3_compute_copies(per, layer, point);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].name, "fsdp2_all_gather_copy_out");
    EXPECT_DOUBLE_EQ(out[0].bytes, 2.0 * static_cast<double>(plain[0].message_bytes));
    const std::vector<Task> p1 = dp_block_tasks(flat, layer, point);
    ASSERT_EQ(p1.size(), 2u);
    EXPECT_EQ(p1[0].name, "fsdp1_shard_cast");
    EXPECT_DOUBLE_EQ(p1[0].bytes, shard * (4 + 2));
    EXPECT_EQ(p1[0].launches, 1);
    EXPECT_TRUE(zero3_compute_copies(flat, layer, point).empty());
  }
  const std::vector<Task> rs2 = dp_block_tasks(per, layer, DpPoint::kAfterBackward);
  ASSERT_EQ(rs2.size(), 2u);
  EXPECT_EQ(rs2[0].name, "fsdp2_reduce_scatter_copy_in");
  EXPECT_DOUBLE_EQ(rs2[0].bytes, params * (2 + 4));
  EXPECT_EQ(rs2[1].collective, Collective::kReduceScatter);
  EXPECT_TRUE(zero3_compute_copies(per, layer, DpPoint::kAfterBackward).empty());
  const std::vector<Task> rs1 = dp_block_tasks(flat, layer, DpPoint::kAfterBackward);
  ASSERT_EQ(rs1.size(), 3u);
  EXPECT_EQ(rs1[0].name, "fsdp1_grad_cast");
  EXPECT_DOUBLE_EQ(rs1[0].bytes, params * (2 + 4));
  EXPECT_EQ(rs1[1].name, "fsdp1_grad_predivide");
  EXPECT_DOUBLE_EQ(rs1[1].bytes, 2.0 * params * 4);
  const std::vector<Task> flatten = zero3_compute_copies(flat, layer, DpPoint::kAfterBackward);
  ASSERT_EQ(flatten.size(), 1u);
  EXPECT_EQ(flatten[0].name, "fsdp1_grad_flatten");
  EXPECT_DOUBLE_EQ(flatten[0].bytes, params * (2 + 2));
  // Over 7 ranks the layer does not divide: FSDP1 pads the flat gradient before dividing it.
  Plan seven = plan_of(1, 1, 7, 1, 7);
  seven.zero_stage = 3;
  seven.zero3_copies = ZeroCopies::kFlatParam;
  ASSERT_NE(layer.dense_params % 7, 0);
  const std::vector<Task> padded = dp_block_tasks(seven, layer, DpPoint::kAfterBackward);
  ASSERT_EQ(padded.size(), 3u);
  EXPECT_EQ(padded[0].name, "fsdp1_grad_pad");
  EXPECT_EQ(padded[1].name, "fsdp1_grad_predivide");
  // None of this without the field, or without ZeRO-3 (refused by name).
  EXPECT_TRUE(zero3_compute_copies(none, layer, DpPoint::kBeforeForward).empty());
  Plan zero2 = per;
  zero2.zero_stage = 2;
  EXPECT_NE(validate_plan(zero2).message().find("zero3_copies=per-param"), std::string::npos);
}

TEST(DataParallel, PerTensorZero3GathersOneCollectiveAndGroupSizeCopiesPerTensor) {
  const std::int64_t n = 8;
  for (const auto& [file, tensors] :
       std::vector<std::pair<const char*, std::int64_t>>{{"gpt3.json", 12}, {"llama3-8b.json", 6}}) {
    SCOPED_TRACE(file);
    const ModelSpec m = load_repo_model(file);
    Plan flat = plan_of(1, 1, n, 1, n);
    flat.zero_stage = 3;
    Plan per = flat;
    per.zero3_gather = ZeroGather::kPerTensor;
    const std::vector<ParamBlock> blocks = param_blocks_on_stage(m, per, 0);
    const ParamBlock& layer = blocks[1];
    ASSERT_EQ(layer.kind, BlockKind::kLayer);
    EXPECT_EQ(layer.tensors, tensors);
    for (DpPoint point : {DpPoint::kBeforeForward, DpPoint::kBeforeRecompute,
                          DpPoint::kBeforeBackward}) {
      const std::vector<Task> one = dp_block_tasks(flat, layer, point);
      const std::vector<Task> many = dp_block_tasks(per, layer, point);
      ASSERT_EQ(one.size(), 1u);
      ASSERT_EQ(many.size(), static_cast<std::size_t>(2 * tensors));
      double bytes = 0;
      for (std::size_t i = 0; i < many.size(); i += 2) {
        EXPECT_EQ(many[i].kind, TaskKind::kComm);
        EXPECT_EQ(many[i].collective, Collective::kAllGather);
        EXPECT_EQ(many[i].group_size, n);
        EXPECT_EQ(many[i + 1].kind, TaskKind::kMemory);
        EXPECT_EQ(many[i + 1].launches, n);
        EXPECT_DOUBLE_EQ(many[i + 1].bytes, 2.0 * static_cast<double>(many[i].message_bytes));
        bytes += static_cast<double>(many[i].message_bytes);
      }
      const double flat_bytes = static_cast<double>(one[0].message_bytes);
      EXPECT_GE(bytes, flat_bytes);
      EXPECT_LE(bytes, flat_bytes + static_cast<double>(tensors * n * 2));  // padding only
    }
    // Gradients are reduced as before.
    EXPECT_EQ(dp_block_tasks(per, layer, DpPoint::kAfterBackward).size(),
              dp_block_tasks(flat, layer, DpPoint::kAfterBackward).size());
  }
  // A copy task's time pays one kernel overhead per launch.
  const DeviceRates r = device_rates(*gpu_preset("A100-80GB"), Precision::kBf16);
  Task copies;
  copies.kind = TaskKind::kMemory;
  copies.launches = 100;
  EXPECT_DOUBLE_EQ(task_time_s(copies, r), 100 * r.kernel_overhead_s);
}

// Plan::elementwise eager (torchtitan's RMSNorm, apply_rotary_emb and SwiGLU with compile off;
// byte counts per element in core/cost/tasks.cc): Llama's norms move 4e + 28 bytes per element
// in 8 launches forward and 8e + 76 in 16 backward, a rotary task appears on q and k (2e + 16
// bytes per element, 6 launches each way), SwiGLU moves 5 elements in 2 launches forward and 9
// in 3 backward; autograd keeps each norm's fp32 input and silu's output. GPT-3's LayerNorm
// and GELU are one ATen kernel each in eager PyTorch: nothing changes.
const Task& task_named(const std::vector<Task>& tasks, const std::string& name) {
  for (const Task& t : tasks)
    if (t.name == name) return t;
  ADD_FAILURE() << "no task " << name;
  return tasks.front();
}
bool has_task(const std::vector<Task>& tasks, const std::string& name) {
  for (const Task& t : tasks)
    if (t.name == name) return true;
  return false;
}
TEST(Tasks, EagerElementwiseMovesTheUnfusedBytesInTheUnfusedLaunches) {
  const ModelSpec m = load_repo_model("llama3-8b.json");
  Plan fused = plan_of(1, 1, 8, 1, 8);
  Plan eager = fused;
  eager.elementwise = Elementwise::kEager;
  const double e = 2.0;  // bf16
  const double T = static_cast<double>(m.seq_len), h = static_cast<double>(m.hidden_size);
  const double f = static_cast<double>(m.ffn_hidden_size);
  const double qk = static_cast<double>(m.q_width() + m.kv_width());
  const std::vector<Task> ff = layer_forward_tasks(m, fused), ef = layer_forward_tasks(m, eager);
  const std::vector<Task> fb = layer_backward_tasks(m, fused), eb = layer_backward_tasks(m, eager);
  for (const char* norm : {"norm1", "norm2"}) {
    EXPECT_DOUBLE_EQ(task_named(ff, norm).bytes, 2.0 * e * T * h);
    EXPECT_DOUBLE_EQ(task_named(ef, norm).bytes, (4.0 * e + 28.0) * T * h);
    EXPECT_EQ(task_named(ef, norm).launches, 8);
    const std::string bwd = std::string(norm) + "_bwd";
    EXPECT_DOUBLE_EQ(task_named(eb, bwd).bytes, (8.0 * e + 76.0) * T * h);
    EXPECT_EQ(task_named(eb, bwd).launches, 16);
  }
  EXPECT_FALSE(has_task(ff, "rope"));
  EXPECT_FALSE(has_task(fb, "rope_bwd"));
  EXPECT_DOUBLE_EQ(task_named(ef, "rope").bytes, (2.0 * e + 16.0) * T * qk);
  EXPECT_EQ(task_named(ef, "rope").launches, 6);
  EXPECT_DOUBLE_EQ(task_named(eb, "rope_bwd").bytes, task_named(ef, "rope").bytes);
  EXPECT_DOUBLE_EQ(task_named(ff, "swiglu").bytes, 3.0 * e * T * f);
  EXPECT_DOUBLE_EQ(task_named(ef, "swiglu").bytes, 5.0 * e * T * f);
  EXPECT_EQ(task_named(ef, "swiglu").launches, 2);
  EXPECT_DOUBLE_EQ(task_named(fb, "swiglu_bwd").bytes, 6.0 * e * T * f);
  EXPECT_DOUBLE_EQ(task_named(eb, "swiglu_bwd").bytes, 9.0 * e * T * f);
  EXPECT_EQ(task_named(eb, "swiglu_bwd").launches, 3);
  EXPECT_DOUBLE_EQ(task_named(ef, "swiglu").transcendentals,
                   task_named(ff, "swiglu").transcendentals);
  EXPECT_EQ(task_named(head_forward_tasks(m, eager), "final_norm").launches, 8);
  // Memory: 4 bytes per element more for each norm, one more inner-width tensor for SwiGLU;
  // per-op checkpointing recomputes them, so it keeps the same either way.
  EXPECT_DOUBLE_EQ(layer_activation_bytes(m, eager) - layer_activation_bytes(m, fused),
                   2.0 * 4.0 * T * h + e * T * f);
  fused.recompute = eager.recompute = Recompute::kSelectiveOp;
  EXPECT_DOUBLE_EQ(layer_activation_bytes(m, eager), layer_activation_bytes(m, fused));
  // LayerNorm, GELU and learned positions: the same tasks and bytes.
  const ModelSpec g = load_repo_model("gpt3.json");
  const std::vector<Task> gf = layer_forward_tasks(g, fused), ge = layer_forward_tasks(g, eager);
  ASSERT_EQ(gf.size(), ge.size());
  for (std::size_t i = 0; i < gf.size(); ++i) {
    EXPECT_EQ(gf[i].name, ge[i].name);
    EXPECT_DOUBLE_EQ(gf[i].bytes, ge[i].bytes);
    EXPECT_EQ(gf[i].launches, ge[i].launches);
  }
}

// Plan::elementwise eager-swiglu (nanotron's GLUActivation beside fused norms and rotary): the
// eager SwiGLU's bytes, launches and kept silu output, and nothing of the eager norms or rotary.
TEST(Tasks, EagerSwigluAloneKeepsNormsAndRotaryFused) {
  const ModelSpec m = load_repo_model("llama3-8b.json");
  Plan fused = plan_of(1, 1, 8, 1, 8);
  Plan eager = fused, glu = fused;
  eager.elementwise = Elementwise::kEager;
  glu.elementwise = Elementwise::kEagerSwiglu;
  const double e = 2.0;
  const double T = static_cast<double>(m.seq_len), f = static_cast<double>(m.ffn_hidden_size);
  const std::vector<Task> ff = layer_forward_tasks(m, fused), gf = layer_forward_tasks(m, glu);
  const std::vector<Task> ef = layer_forward_tasks(m, eager);
  const std::vector<Task> fb = layer_backward_tasks(m, fused), gb = layer_backward_tasks(m, glu);
  const std::vector<Task> eb = layer_backward_tasks(m, eager);
  for (const char* norm : {"norm1", "norm2"}) {
    EXPECT_DOUBLE_EQ(task_named(gf, norm).bytes, task_named(ff, norm).bytes);
    EXPECT_EQ(task_named(gf, norm).launches, 1);
  }
  EXPECT_FALSE(has_task(gf, "rope"));
  EXPECT_FALSE(has_task(gb, "rope_bwd"));
  EXPECT_DOUBLE_EQ(task_named(gf, "swiglu").bytes, task_named(ef, "swiglu").bytes);
  EXPECT_EQ(task_named(gf, "swiglu").launches, task_named(ef, "swiglu").launches);
  EXPECT_DOUBLE_EQ(task_named(gb, "swiglu_bwd").bytes, task_named(eb, "swiglu_bwd").bytes);
  EXPECT_EQ(task_named(gb, "swiglu_bwd").launches, task_named(eb, "swiglu_bwd").launches);
  EXPECT_EQ(task_named(head_forward_tasks(m, glu), "final_norm").launches, 1);
  EXPECT_DOUBLE_EQ(layer_activation_bytes(m, glu) - layer_activation_bytes(m, fused), e * T * f);
  // A GELU model has no SwiGLU: unchanged.
  const ModelSpec g = load_repo_model("gpt3.json");
  EXPECT_DOUBLE_EQ(layer_activation_bytes(g, glu), layer_activation_bytes(g, fused));
}

// The fifty-first pass (core/cost/memory_kernel_rates.h): a preset times each memory-bound task
// at the published rate of its kind, direction and implementation; a uniform GPU and a measured
// per-kind figure keep theirs.
TEST(MemoryKernelRates, APresetTimesEachKindDirectionAndImplementationAtItsPublishedRate) {
  EXPECT_DOUBLE_EQ(published_memory_efficiency(MemoryKernel::kElementwise, false, false), 0.873);
  EXPECT_DOUBLE_EQ(published_memory_efficiency(MemoryKernel::kNorm, false, false), 0.713);
  EXPECT_DOUBLE_EQ(published_memory_efficiency(MemoryKernel::kNorm, true, false), 0.455);
  EXPECT_DOUBLE_EQ(published_memory_efficiency(MemoryKernel::kNorm, false, true), 0.617);
  EXPECT_DOUBLE_EQ(published_memory_efficiency(MemoryKernel::kNorm, true, true), 0.604);
  EXPECT_DOUBLE_EQ(published_memory_efficiency(MemoryKernel::kActivation, false, false), 0.845);
  EXPECT_DOUBLE_EQ(published_memory_efficiency(MemoryKernel::kActivation, true, false), 0.504);
  EXPECT_DOUBLE_EQ(published_memory_efficiency(MemoryKernel::kActivation, false, true), 0.536);
  EXPECT_DOUBLE_EQ(published_memory_efficiency(MemoryKernel::kActivation, true, true), 0.315);
  EXPECT_DOUBLE_EQ(published_memory_efficiency(MemoryKernel::kSoftmax, true, false), 0.600);
  EXPECT_DOUBLE_EQ(published_memory_efficiency(MemoryKernel::kEmbedding, false, false), 0.300);
  // No figure of its own: the optimizer takes the elementwise rate; eager means nothing there.
  EXPECT_DOUBLE_EQ(published_memory_efficiency(MemoryKernel::kOptimizer, true, true),
                   kPublishedElementwiseEfficiency);

  const ModelSpec m = load_repo_model("llama3-8b.json");
  Plan fused = plan_of(1, 1, 8, 1, 8);
  Plan eager = fused;
  eager.elementwise = Elementwise::kEager;
  const GpuSpec h100 = *gpu_preset("H100-80GB");
  ASSERT_EQ(h100.memory_rates, MemoryRates::kPublished);
  const DeviceRates r = device_rates(h100, Precision::kBf16);
  auto memory_s = [&](const Task& t) { return work_shape(t, r).memory_s; };
  const std::vector<Task> ff = layer_forward_tasks(m, fused), fb = layer_backward_tasks(m, fused);
  const std::vector<Task> ef = layer_forward_tasks(m, eager), eb = layer_backward_tasks(m, eager);
  const double bw = h100.hbm_bytes_per_s;
  EXPECT_DOUBLE_EQ(memory_s(task_named(ff, "norm1")), task_named(ff, "norm1").bytes / (bw * 0.713));
  EXPECT_DOUBLE_EQ(memory_s(task_named(fb, "norm1_bwd")),
                   task_named(fb, "norm1_bwd").bytes / (bw * 0.455));
  EXPECT_DOUBLE_EQ(memory_s(task_named(eb, "norm1_bwd")),
                   task_named(eb, "norm1_bwd").bytes / (bw * 0.604));
  EXPECT_EQ(task_named(ef, "norm1").memory_kernel, MemoryKernel::kNorm);
  EXPECT_DOUBLE_EQ(memory_s(task_named(fb, "swiglu_bwd")),
                   task_named(fb, "swiglu_bwd").bytes / (bw * 0.504));
  EXPECT_DOUBLE_EQ(memory_s(task_named(ef, "swiglu")),
                   task_named(ef, "swiglu").bytes / (bw * 0.536));
  EXPECT_DOUBLE_EQ(memory_s(task_named(ff, "residual1")),
                   task_named(ff, "residual1").bytes / (bw * 0.873));
  // A GEMM's operand traffic streams at the presets' memory_efficiency, the elementwise figure.
  EXPECT_DOUBLE_EQ(h100.memory_efficiency, kPublishedElementwiseEfficiency);

  // Uniform: every memory-bound kernel at memory_efficiency, as before the pass.
  GpuSpec uniform = h100;
  uniform.memory_rates = MemoryRates::kUniform;
  uniform.memory_efficiency = 0.5;
  const DeviceRates u = device_rates(uniform, Precision::kBf16);
  EXPECT_DOUBLE_EQ(work_shape(task_named(fb, "norm1_bwd"), u).memory_s,
                   task_named(fb, "norm1_bwd").bytes / (bw * 0.5));
  // A measured per-kind figure (a `calibrate` profile) wins over the published one.
  DeviceRates measured = r;
  measured.memory_kernel_efficiency[static_cast<std::size_t>(MemoryKernel::kNorm)] = 0.25;
  EXPECT_DOUBLE_EQ(work_shape(task_named(fb, "norm1_bwd"), measured).memory_s,
                   task_named(fb, "norm1_bwd").bytes / (bw * 0.25));
}

// Plan::cross_entropy cast (nanotron's loss): 10 bytes per bf16 logit at the forward's end (the
// logits, their fp32 copy, the kept softmax) against the fused loss's 4, on the head's stage
// only; its six forward and two backward ops move their own bytes.
TEST(Memory, CastCrossEntropyHoldsTheLogitsTheirFp32CopyAndTheSoftmax) {
  const ModelSpec m = testing::gpt_model(4, 512, 8, 1024, 32000);
  Plan p = plan_of(2, 2, 1, 2, 8);
  Plan cast = p;
  cast.cross_entropy = CrossEntropy::kCast;
  EXPECT_DOUBLE_EQ(cross_entropy_bytes_per_logit(cast), 10.0);
  const double logits_per_rank = 2.0 * 1024 * static_cast<double>(padded_vocab(m, 2)) / 2.0;
  EXPECT_DOUBLE_EQ(memory_on_stage(m, cast, 1).activations_bytes -
                       memory_on_stage(m, p, 1).activations_bytes,
                   6.0 * logits_per_rank);
  EXPECT_DOUBLE_EQ(memory_on_stage(m, cast, 0).activations_bytes,
                   memory_on_stage(m, p, 0).activations_bytes);
  const Task fwd = task_named(head_forward_tasks(m, cast), "cross_entropy");
  EXPECT_DOUBLE_EQ(fwd.bytes, logits_per_rank * (2.0 + 36.0));
  EXPECT_EQ(fwd.launches, 6);
  const Task bwd = task_named(head_backward_tasks(m, cast), "cross_entropy_bwd");
  EXPECT_DOUBLE_EQ(bwd.bytes, logits_per_rank * (8.0 + 4.0 + 2.0));
  EXPECT_EQ(bwd.launches, 2);
}

// Plan::ddp_bucket_copy: PyTorch DDP's bucket copy of every gradient, in the parameters'
// precision, unsharded; nothing else changes.
TEST(Memory, DdpBucketCopyAddsAGradientCopyInTheParametersPrecision) {
  const ModelSpec m = gpt3();
  for (int zero : {0, 1}) {
    SCOPED_TRACE(zero);
    Plan p = plan_of(8, 4, 4, 1, 64);
    p.zero_stage = zero;
    p.grad_precision = GradPrecision::kFp32;
    Plan copy = p;
    copy.ddp_bucket_copy = true;
    for (std::int64_t stage : {0, 3}) {
      const StageParameters sp = parameters_on_stage(m, p, stage);
      const MemoryBreakdown a = memory_on_stage(m, p, stage), b = memory_on_stage(m, copy, stage);
      EXPECT_DOUBLE_EQ(b.gradients_bytes - a.gradients_bytes, 2.0 * (sp.dense + sp.expert));
      EXPECT_DOUBLE_EQ(b.activations_bytes, a.activations_bytes);
      EXPECT_DOUBLE_EQ(b.optimizer_bytes, a.optimizer_bytes);
    }
  }
}

TEST(Memory, DualPipeHoldsTwiceTheParametersAndPpPlusOneChunkActivations) {
  // DeepSeek-V3 Table 2 (arXiv:2412.19437): 2x parameters, PP+1 activations. Stage s holds
  // chunk s and a copy of chunk pp-1-s: a middle stage holds 1F1B's stages s and pp-1-s.
  const ModelSpec m = gpt3();
  Plan one = plan_of(1, 4, 1, 1, 16);  // pp 4, M 16
  Plan dual = one;
  dual.schedule = Schedule::kDualPipe;
  dual.virtual_stages = 2;
  ASSERT_TRUE(validate_plan(dual).ok());
  EXPECT_EQ(dual.num_chunks(), 4);
  for (std::int64_t s : {1, 2}) {
    const double both = parameters_on_stage(m, one, s).total() +
                        parameters_on_stage(m, one, 3 - s).total();
    EXPECT_DOUBLE_EQ(parameters_on_stage(m, dual, s).total(), both);
    EXPECT_DOUBLE_EQ(parameters_on_stage(m, dual, s).total(),
                     2.0 * parameters_on_stage(m, one, s).total());
    // pp + 1 = 5 chunk activations, each half the stage's layers: 2.5 stage micro-batches
    // (1F1B's first stage: pp = 4).
    EXPECT_DOUBLE_EQ(in_flight_micro_batches(dual, s), 2.5);
  }
}

TEST(Memory, ZeroStagesDivideModelStatesAsRajbhandari) {
  // ZeRO (Rajbhandari et al. 2019, fig. 1): with Psi parameters, K = 12 and N_d replicas:
  // baseline (2+2+K)Psi, P_os (2+2+K/N_d)Psi, P_os+g (2+(2+K)/N_d)Psi, P_os+g+p (2+2+K)Psi/N_d.
  const ModelSpec m = load_repo_model("llama3-8b.json");
  Plan p = plan_of(1, 1, 64, 1, 64);
  const double psi = parameters_on_stage(m, p, 0).total();
  const double expected[4] = {16 * psi, (4 + 12.0 / 64) * psi, (2 + 14.0 / 64) * psi,
                              16 * psi / 64};
  for (int z = 0; z < 4; ++z) {
    p.zero_stage = z;
    const MemoryBreakdown mem = memory_on_stage(m, p, 0);
    EXPECT_LT(rel(mem.weights_bytes + mem.gradients_bytes + mem.optimizer_bytes, expected[z]),
              1e-12)
        << "zero " << z;
  }
  // The paper's 7.5B / 64 GPU example: 120, 31.4, 16.6, 1.9 GB.
  const double psi75 = 7.5e9;
  EXPECT_NEAR((4 + 12.0 / 64) * psi75 / 1e9, 31.4, 0.05);
  EXPECT_NEAR((2 + 14.0 / 64) * psi75 / 1e9, 16.6, 0.05);
}

// Hybrid sharding (Plan::zero_shard_size): the states divide over a shard group, not all
// replicas; the collectives run in it, and one all-reduce of each block's reduced shard
// across the groups follows the last backward.
TEST(Memory, HybridShardingDividesStatesOverTheShardGroup) {
  const ModelSpec m = load_repo_model("llama3-8b.json");
  for (int zero : {1, 2, 3}) {
    Plan hybrid = plan_of(1, 1, 64, 1, 64), within = plan_of(1, 1, 8, 1, 8);
    hybrid.zero_stage = within.zero_stage = zero;
    hybrid.zero_shard_size = 8;
    const MemoryBreakdown a = memory_on_stage(m, hybrid, 0), b = memory_on_stage(m, within, 0);
    EXPECT_DOUBLE_EQ(a.weights_bytes, b.weights_bytes) << zero;
    EXPECT_DOUBLE_EQ(a.gradients_bytes, b.gradients_bytes) << zero;
    EXPECT_DOUBLE_EQ(a.optimizer_bytes, b.optimizer_bytes) << zero;
    EXPECT_DOUBLE_EQ(optimizer_params_on_rank(m, hybrid, 0),
                     optimizer_params_on_rank(m, within, 0));
    const double e = grad_bytes_per_element(hybrid);
    for (const ParamBlock& blk : param_blocks_on_stage(m, hybrid, 0)) {
      const std::int64_t padded = (blk.dense_params + 7) / 8 * 8;
      for (DpPoint point : {DpPoint::kBeforeForward, DpPoint::kAfterBackward,
                            DpPoint::kAfterLastBackward, DpPoint::kAfterOptimizer}) {
        for (const Task& t : dp_block_tasks(hybrid, blk, point)) {
          if (t.group == CommGroup::kDp) {
            EXPECT_EQ(t.group_size, 8) << t.name;
            EXPECT_EQ(t.message_bytes, static_cast<std::int64_t>(
                                           padded * (t.collective == Collective::kAllGather
                                                         ? bytes_per_element(hybrid.precision)
                                                         : e)))
                << t.name;
          } else {
            ASSERT_EQ(t.group, CommGroup::kDpReplica) << t.name;
            EXPECT_EQ(point, DpPoint::kAfterLastBackward);
            EXPECT_EQ(t.name, "hsdp_grad_all_reduce");
            EXPECT_EQ(t.collective, Collective::kAllReduce);
            EXPECT_EQ(t.group_size, 8);  // 64 / 8 groups
            EXPECT_EQ(t.message_bytes, static_cast<std::int64_t>(padded / 8 * e));
          }
        }
      }
      const std::vector<Task> last = dp_block_tasks(hybrid, blk, DpPoint::kAfterLastBackward);
      ASSERT_FALSE(last.empty());
      EXPECT_EQ(last.back().group, CommGroup::kDpReplica);  // after the reduce-scatter
    }
    // The replica all-reduce counts as data-parallel traffic.
    EXPECT_GT(comm_volume_on_stage(m, hybrid, 0).dp_bytes, 0.0);
  }
  EXPECT_EQ(report_group(CommGroup::kDpReplica), "dp");
  EXPECT_EQ(to_string(CommGroup::kDpReplica), "dp_replica");
  // Shard groups of all dp ranks are plain ZeRO.
  Plan all = plan_of(1, 1, 64, 1, 64), plain = all;
  all.zero_stage = plain.zero_stage = 3;
  all.zero_shard_size = 64;
  EXPECT_DOUBLE_EQ(memory_on_stage(m, all, 0).device_total(),
                   memory_on_stage(m, plain, 0).device_total());
  EXPECT_EQ(comm_volume_on_stage(m, all, 0).dp_bytes, comm_volume_on_stage(m, plain, 0).dp_bytes);
}

TEST(Memory, Gpt3ModelStatesOn32GpusAre87GB) {
  const ModelSpec m = gpt3();
  Plan p = plan_of(1, 1, 32, 1, 32);
  p.zero_stage = 3;
  const MemoryBreakdown mem = memory_on_stage(m, p, 0);
  EXPECT_NEAR((mem.weights_bytes + mem.gradients_bytes + mem.optimizer_bytes) / 1e9, 87.3, 0.1);
}

// The largest number of parameters one rank updates of a block on stage 0 (its shard under ZeRO
// >= 1, the whole block under ZeRO 0): what the offloaded step's host buffers hold one block of.
double largest_updated(const ModelSpec& m, const Plan& p) {
  double largest = 0;
  for (const ParamBlock& b : param_blocks_on_stage(m, p, 0)) {
    const double whole = static_cast<double>(b.dense_params + b.expert_params);
    largest = std::max(largest, p.zero_stage >= 1 ? whole / static_cast<double>(p.dp) : whole);
  }
  return largest;
}

// On the host: the optimizer states, and the gradient shard of the block being updated, copied
// there for its update (executor/cpu/cpu_stage.cc's staging buffer).
TEST(Memory, OffloadMovesOptimizerStatesToTheHost) {
  const ModelSpec m = gpt3();
  Plan p = plan_of(8, 4, 1, 1, 8);
  const double on_device = memory_on_stage(m, p, 0).optimizer_bytes;
  p.offload = Offload::kOptimizer;
  const MemoryBreakdown mem = memory_on_stage(m, p, 0);
  EXPECT_EQ(mem.optimizer_bytes, 0.0);
  EXPECT_DOUBLE_EQ(mem.host_optimizer_bytes,
                   on_device + largest_updated(m, p) * grad_bytes_per_element(p));
}

// fp32 has no master copy among its optimizer states (state_bytes_per_param: 8 bytes of AdamW
// moments), but the host's step updates fp32 parameters of its own: offload counts them with
// the states (4 bytes per updated parameter, on the host or on NVMe), reads and writes them
// with the moments on NVMe, and keeps two read buffers of one block's states. Under
// optimizer+params the parameter shard is that copy: no more memory, only its read.
TEST(Memory, OffloadInFp32CountsTheHostsFp32Parameters) {
  const ModelSpec m = gpt3();
  Plan p = plan_of(8, 1, 8, 1, 64);
  p.precision = Precision::kFp32;
  p.zero_stage = 1;
  const double n = optimizer_params_on_rank(m, p, 0);
  const double largest = largest_updated(m, p);
  p.offload = Offload::kOptimizer;
  MemoryBreakdown mem = memory_on_stage(m, p, 0);
  EXPECT_DOUBLE_EQ(mem.host_optimizer_bytes, n * (8.0 + 4.0) + largest * 4.0);
  p.offload_device = OffloadDevice::kNvme;
  mem = memory_on_stage(m, p, 0);
  EXPECT_DOUBLE_EQ(mem.nvme_bytes, n * 12.0);
  EXPECT_DOUBLE_EQ(mem.host_optimizer_bytes, 2.0 * largest * 12.0 + largest * 4.0);
  OffloadTraffic t = offload_traffic_on_stage(m, p, 0);
  EXPECT_DOUBLE_EQ(t.nvme_read_bytes, n * 12.0);
  EXPECT_DOUBLE_EQ(t.nvme_write_bytes, n * 12.0);
  p.zero_stage = 3;
  p.offload = Offload::kOptimizerParams;
  mem = memory_on_stage(m, p, 0);
  EXPECT_DOUBLE_EQ(mem.nvme_bytes, n * 8.0 + n * 4.0);  // the moments, the shard
  EXPECT_DOUBLE_EQ(mem.host_optimizer_bytes, 2.0 * largest * 12.0);
  t = offload_traffic_on_stage(m, p, 0);
  EXPECT_DOUBLE_EQ(t.nvme_read_bytes, n * 12.0 + t.nvme_param_read_bytes);
  EXPECT_DOUBLE_EQ(t.nvme_write_bytes, n * 12.0);
  p.offload_device = OffloadDevice::kCpu;
  mem = memory_on_stage(m, p, 0);
  EXPECT_DOUBLE_EQ(mem.host_optimizer_bytes, n * 8.0);
  EXPECT_DOUBLE_EQ(mem.host_param_bytes, n * 4.0 + n * 4.0);  // the shard, the gradients
}

// ZeRO-Infinity (Rajbhandari et al. 2021, sec. 5.1): with parameters offloaded the device keeps
// no weight or gradient shard; host memory holds both (cpu) or the gradients only, NVMe the
// parameters and optimizer states (nvme). Per step the shard crosses PCIe for every fetch (2 per
// micro-batch, 3 with full recompute) and each micro-batch's gradient shard comes back.
TEST(Memory, OffloadTiersMoveStatesToHostAndNvmeWithTheirTraffic) {
  const ModelSpec m = gpt3();
  Plan p = plan_of(8, 1, 8, 1, 64);
  p.zero_stage = 3;
  const MemoryBreakdown dev = memory_on_stage(m, p, 0);
  const double params = optimizer_params_on_rank(m, p, 0);
  const std::int64_t M = p.num_micro_batches();
  p.offload = Offload::kOptimizerParams;
  const MemoryBreakdown cpu = memory_on_stage(m, p, 0);
  EXPECT_EQ(cpu.weights_bytes + cpu.gradients_bytes + cpu.optimizer_bytes, 0.0);
  EXPECT_EQ(cpu.host_optimizer_bytes, dev.optimizer_bytes);
  EXPECT_EQ(cpu.host_param_bytes, dev.weights_bytes + dev.gradients_bytes);
  EXPECT_EQ(cpu.nvme_bytes, 0.0);
  EXPECT_EQ(cpu.buffers_bytes, dev.buffers_bytes);
  OffloadTraffic t = offload_traffic_on_stage(m, p, 0);
  EXPECT_DOUBLE_EQ(t.host_to_device_bytes, params * 2.0 * 2.0 * static_cast<double>(M));
  EXPECT_DOUBLE_EQ(t.device_to_host_bytes, params * 2.0 * static_cast<double>(M));
  EXPECT_EQ(t.nvme_read_bytes + t.nvme_write_bytes, 0.0);
  // Full recompute gathers the layers a third time (the embedding and head are not recomputed).
  p.recompute = Recompute::kFull;
  double layers = 0;
  for (const ParamBlock& b : param_blocks_on_stage(m, p, 0))
    if (b.kind == BlockKind::kLayer) layers += static_cast<double>(b.dense_params) / 8.0;
  EXPECT_DOUBLE_EQ(offload_traffic_on_stage(m, p, 0).host_to_device_bytes,
                   (params * 2.0 + layers) * 2.0 * static_cast<double>(M));
  p.recompute = Recompute::kNone;
  p.offload_device = OffloadDevice::kNvme;
  const MemoryBreakdown nvme = memory_on_stage(m, p, 0);
  // Two read buffers of one block's optimizer states (12 bytes per parameter with AdamW).
  EXPECT_DOUBLE_EQ(nvme.host_optimizer_bytes, 2.0 * largest_updated(m, p) * 12.0);
  // The gradients, and the read buffer of the largest block's shard (the prefetch's).
  double largest = 0;
  for (const ParamBlock& b : param_blocks_on_stage(m, p, 0))
    largest = std::max(largest, static_cast<double>(b.dense_params) / 8.0);
  EXPECT_EQ(nvme.host_param_bytes, dev.gradients_bytes + largest * 2.0);
  EXPECT_EQ(nvme.nvme_bytes, dev.optimizer_bytes + dev.weights_bytes);
  t = offload_traffic_on_stage(m, p, 0);
  // Optimizer states read and written once per step (12 bytes per parameter with AdamW);
  // the parameter shard read for every fetch and written back once.
  EXPECT_DOUBLE_EQ(t.nvme_read_bytes, params * 12.0 + params * 2.0 * 2.0 * static_cast<double>(M));
  EXPECT_DOUBLE_EQ(t.nvme_write_bytes, params * 12.0 + params * 2.0);
}

// The parameter shards streamed in per step (offload optimizer+params) are each block's shard
// times its gathers (dp_point_count: what the simulator's zero3_gather fetches and the CPU
// executor streams in), summed in closed form: equal to the sum over param_blocks_on_stage for
// partial and full recompute, zb-v's V (the tied embedding gathered again around the head in
// the last chunk), dualpipe's two copies, MoE parts, hybrid sharding and one shard rank.
TEST(Memory, ParamStreamIsEveryBlocksShardTimesItsGathers) {
  const ModelSpec gpt = gpt3();
  ModelSpec moe = gpt3();
  moe.num_experts = 8;
  moe.experts_per_token = 2;
  struct Case {
    const ModelSpec* m;
    Plan p;
  };
  std::vector<Case> cases;
  auto add = [&](const ModelSpec& m, Plan p) {
    p.zero_stage = 3;
    p.offload = Offload::kOptimizerParams;
    cases.push_back({&m, p});
  };
  add(gpt, plan_of(8, 1, 8, 1, 64));
  Plan p = plan_of(8, 1, 8, 1, 64);
  p.recompute = Recompute::kFull;
  add(gpt, p);
  p.recompute_num_layers = 5;
  add(gpt, p);
  p = plan_of(1, 4, 8, 1, 64);
  p.schedule = Schedule::kZbV;
  p.virtual_stages = 2;
  add(gpt, p);
  p.schedule = Schedule::kDualPipe;
  add(gpt, p);
  p = plan_of(1, 1, 8, 1, 64);
  p.zero_shard_size = 4;
  add(gpt, p);
  p = plan_of(1, 1, 1, 1, 64);  // one shard rank: fetched before every use all the same
  add(gpt, p);
  p = plan_of(1, 2, 8, 1, 64);
  p.ep = 4;
  add(moe, p);
  for (const Case& c : cases) {
    for (std::int64_t stage = 0; stage < c.p.pp; ++stage) {
      double want = 0;
      for (const ParamBlock& b : param_blocks_on_stage(*c.m, c.p, stage))
        want += (static_cast<double>(b.dense_params) / static_cast<double>(c.p.zero_shard_ranks()) +
                 static_cast<double>(b.expert_params) / static_cast<double>(expert_dp_cp(c.p))) *
                param_fetches_per_step(c.p, b) * 2.0;
      EXPECT_DOUBLE_EQ(offload_traffic_on_stage(*c.m, c.p, stage).param_stream_bytes, want)
          << describe(c.p) << " stage " << stage;
    }
  }
  // zb-v: stage 0 gathers the tied embedding 4 times per micro-batch (forward and backward of
  // the first chunk and of the head's), every layer twice.
  p = plan_of(1, 4, 8, 1, 64);
  p.zero_stage = 3;
  p.schedule = Schedule::kZbV;
  p.virtual_stages = 2;
  const std::vector<ParamBlock> blocks = param_blocks_on_stage(gpt, p, 0);
  ASSERT_TRUE(blocks.front().read_by_head);
  EXPECT_EQ(param_fetches_per_step(p, blocks.front()), 4.0 * static_cast<double>(p.num_micro_batches()));
  EXPECT_EQ(param_fetches_per_step(p, blocks[1]), 2.0 * static_cast<double>(p.num_micro_batches()));
}

// Qi et al. 2023 (sec. 2): W is the weight-gradient GEMMs, B the rest; together they are the
// backward, with W a third of a layer's backward-plus-forward GEMM FLOPs.
TEST(Tasks, BackwardSplitsIntoInputAndWeightGradients) {
  const ModelSpec m = gpt3();
  const Plan p = plan_of(8, 1, 1, 1, 1);
  const std::vector<Task> all = layer_backward_tasks(m, p);
  const std::vector<Task> b = backward_input_tasks(all);
  const std::vector<Task> w = backward_weight_tasks(all);
  EXPECT_EQ(b.size() + w.size(), all.size());
  double gemm_flops = 0, w_flops = 0;
  for (const Task& t : all)
    if (t.kind == TaskKind::kGemm && t.name.find("attn_") == std::string_view::npos &&
        t.name != "attention_bwd")
      gemm_flops += t.flops;
  for (const Task& t : w) {
    EXPECT_TRUE(is_weight_gradient_task(t)) << t.name;
    w_flops += t.flops;
  }
  EXPECT_NEAR(w_flops / gemm_flops, 0.5, 1e-12);
  // W reads X and dY of each linear layer: at most what the layer stores plus its gradients.
  EXPECT_GT(layer_weight_gradient_operand_bytes(m, p), 0.0);
}

TEST(Activations, KorthikantiFormulas) {
  // Korthikanti et al. 2022, table 2, per layer (bytes, fp16, dropout, no flash attention):
  //   no parallelism: s*b*h*(34 + 5*a*s/h); TP: s*b*h*(10 + 24/t + 5*a*s/(h*t));
  //   TP+SP: s*b*h/t*(34 + 5*a*s/h); TP+SP+selective: 34*s*b*h/t.
  const ModelSpec m = gpt3();
  const double s = 2048, h = 12288, a = 96;
  for (std::int64_t b : {1, 4}) {
    for (std::int64_t t : {1, 2, 8}) {
      Plan p = plan_of(t, 1, 1, b, b);
      p.attention = AttentionImpl::kUnfused;
      p.precision = Precision::kFp16;
      const double sbh = s * static_cast<double>(b) * h, dt = static_cast<double>(t);
      EXPECT_LT(rel(layer_activation_bytes(m, p), sbh * (10 + 24 / dt + 5 * a * s / (h * dt))),
                1e-12);
      if (t > 1) {
        p.sequence_parallel = true;
        EXPECT_LT(rel(layer_activation_bytes(m, p), sbh / dt * (34 + 5 * a * s / h)), 1e-12);
        p.recompute = Recompute::kSelective;
        EXPECT_LT(rel(layer_activation_bytes(m, p), 34 * sbh / dt), 1e-12);
      }
    }
  }
}

TEST(Activations, InFlightMicroBatchesBySchedule) {
  Plan p = plan_of(1, 4, 1, 1, 16);  // M = 16
  p.schedule = Schedule::kGpipe;
  EXPECT_EQ(in_flight_micro_batches(p, 0), 16.0);
  p.schedule = Schedule::k1F1B;
  for (std::int64_t s = 0; s < 4; ++s) EXPECT_EQ(in_flight_micro_batches(p, s), 4.0 - s);
  p.schedule = Schedule::kInterleaved;
  p.virtual_stages = 2;
  // Megatron-LM: warm-up (pp - 1 - s)*2 + (v - 1)*pp chunks, +1, in units of 1/v of a stage.
  EXPECT_EQ(in_flight_micro_batches(p, 0), (3 * 2 + 4 + 1) / 2.0);
  p.schedule = Schedule::kGpipe;
  p.virtual_stages = 1;
  p.global_batch_size = 2;  // M < pp
  EXPECT_EQ(in_flight_micro_batches(p, 0), 2.0);
}

// A node-deduplicating MoE dispatcher (DeepSeek-V3 sec. 3.2.2): closed forms of the share of the
// buffer that crosses the NICs.
TEST(Collectives, NodeLimitedAllToAllSendsEachTokenOncePerNode) {
  // Copies travelling alone: (n - per_node)/n.
  EXPECT_DOUBLE_EQ(all_to_all_inter_node_share({}, 8, 8), 56.0 / 64.0);
  // DeepSeek-V3 over 8 nodes of 8 ranks: 8 groups (one per node), 4 chosen: C(7,4)/C(8,4) =
  // 1/2 of missing a node, 4 distinct nodes, 3.5 others, over 8 copies.
  const RoutedSpread v3{256, 8, 4, 8};
  EXPECT_DOUBLE_EQ(all_to_all_inter_node_share(v3, 8, 8), 3.5 / 8.0);
  // 4 nodes of 2 groups each: C(6,4)/C(8,4) = 15/70; distinct 4 * 55/70, others 3/4 of that.
  EXPECT_NEAR(all_to_all_inter_node_share(v3, 4, 8), 4.0 * 55.0 / 70.0 * 0.75 / 8.0, 1e-12);
  // 16 nodes of 4 ranks: each group spans 2 nodes; the 8 copies among the 4 groups' 128 experts,
  // each node holds 16: distinct = 8 * (1 - C(112,8)/C(128,8)).
  double avoid = 1.0;
  for (int i = 0; i < 8; ++i) avoid *= (112.0 - i) / (128.0 - i);
  EXPECT_NEAR(all_to_all_inter_node_share(v3, 16, 4), 8.0 * (1.0 - avoid) * 15.0 / 16.0 / 8.0,
              1e-12);
  // Never more than the copies travelling alone; layouts it cannot split evenly fall back.
  EXPECT_DOUBLE_EQ(all_to_all_inter_node_share(RoutedSpread{256, 8, 8, 8}, 8, 8), 56.0 / 64.0);
  EXPECT_DOUBLE_EQ(all_to_all_inter_node_share(v3, 3, 8), 16.0 / 24.0);
  // And the time uses it: the inter-node part shrinks by the same ratio.
  const double plain = group_collective_time_s(Collective::kAllToAll, 1 << 30, 8, 8, 4e11, 0, 5e10, 0);
  const double dedup =
      group_collective_time_s(Collective::kAllToAll, 1 << 30, 8, 8, 4e11, 0, 5e10, 0, v3);
  EXPECT_NEAR(dedup / plain, (3.5 / 8.0) / (56.0 / 64.0), 1e-9);
}

// The MPI rendezvous term: each ring step over the eager limit pays the handshake once; the
// step's message is bytes_sent_per_rank / ring_steps (a send's whole message).
TEST(Collectives, RendezvousIsPaidPerRingStepOverTheEagerLimit) {
  EXPECT_EQ(per_step_message_bytes(Collective::kAllReduce, 32768, 2), 16384);
  EXPECT_EQ(per_step_message_bytes(Collective::kAllGather, 32768, 4), 8192);
  EXPECT_EQ(per_step_message_bytes(Collective::kSendRecv, 32768, 2), 32768);
  EXPECT_EQ(per_step_message_bytes(Collective::kAllReduce, 32768, 1), 0);
  EXPECT_DOUBLE_EQ(rendezvous_time_s(Collective::kAllReduce, 32768, 2, 4096, 3e-6), 2 * 3e-6);
  EXPECT_DOUBLE_EQ(rendezvous_time_s(Collective::kAllGather, 32768, 4, 4096, 3e-6), 3 * 3e-6);
  EXPECT_DOUBLE_EQ(rendezvous_time_s(Collective::kAllReduce, 8192, 2, 4096, 3e-6), 0.0);
  EXPECT_DOUBLE_EQ(rendezvous_time_s(Collective::kSendRecv, 4097, 2, 4096, 3e-6), 3e-6);
  EXPECT_DOUBLE_EQ(rendezvous_time_s(Collective::kAllReduce, 1 << 20, 2, 0, 3e-6), 0.0);
  EXPECT_DOUBLE_EQ(rendezvous_time_s(Collective::kAllReduce, 1 << 20, 1, 4096, 3e-6), 0.0);
}

TEST(Collectives, NcclTestsBusBandwidthFactors) {
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(Collective::kAllReduce, 8), 2.0 * 7 / 8);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(Collective::kReduceScatter, 8), 7.0 / 8);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(Collective::kAllGather, 4), 3.0 / 4);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(Collective::kSendRecv, 2), 1.0);
  EXPECT_EQ(bytes_sent_per_rank(Collective::kAllReduce, 800, 8), 1400);
  EXPECT_EQ(bytes_sent_per_rank(Collective::kAllGather, 800, 8), 700);
  EXPECT_EQ(bytes_sent_per_rank(Collective::kAllReduce, 800, 1), 0);
  EXPECT_EQ(ring_steps(Collective::kAllReduce, 8), 14);
  // 1 GB all-reduce over 8 ranks at 100 GB/s, 1 us per step: 14 us + 1.75 GB / 100 GB/s.
  EXPECT_NEAR(ring_collective_time_s(Collective::kAllReduce, 1'000'000'000, 8, 100e9, 1e-6),
              14e-6 + 0.0175, 1e-12);
  // Two-level: inside one node it is the flat ring.
  EXPECT_DOUBLE_EQ(group_collective_time_s(Collective::kAllGather, 1 << 20, 1, 8, 1e11, 1e-6, 1e10, 5e-6),
                   ring_collective_time_s(Collective::kAllGather, 1 << 20, 8, 1e11, 1e-6));
  // DataParallel's gather-broadcast moves (n-1) * S through one link, twice.
  EXPECT_GT(gather_broadcast_time_s(1 << 30, 8, 1e11, 0),
            ring_collective_time_s(Collective::kAllReduce, 1 << 30, 8, 1e11, 0));
}

// NCCL's algorithm and protocol choice (collectives.h; NCCL src/graph/tuning.cc 2.19-2.2x).
TEST(Collectives, NcclChoiceFollowsTuningModel) {
  const double intra = 3.4e-6, inter = 14.0e-6;  // the presets' ring Simple hops
  // A tiny all-reduce inside a node runs LL: base 6.6 + 14 hops x 0.6 us, the transfer doubled.
  const double tiny_transfer = 1e-7;
  NcclChoice t = nccl_choice(Collective::kAllReduce, 4096, 1, 8, tiny_transfer, intra, inter, false);
  EXPECT_EQ(t.protocol, NcclProtocol::kLL);
  EXPECT_EQ(t.algorithm, NcclAlgorithm::kRing);
  EXPECT_NEAR(t.latency_s, (6.6 + 14 * 0.6) * 1e-6, 1e-12);
  EXPECT_NEAR(t.time_s, t.latency_s + tiny_transfer / 0.5, 1e-12);
  // A large one runs Simple: base 8.4 + 14 hops x 3.4 us, the transfer at full rate.
  const double big_transfer = 0.02;
  NcclChoice b = nccl_choice(Collective::kAllReduce, 1 << 30, 1, 8, big_transfer, intra, inter, false);
  EXPECT_EQ(b.protocol, NcclProtocol::kSimple);
  EXPECT_NEAR(b.latency_s, (8.4 + 14 * 3.4) * 1e-6, 1e-12);
  EXPECT_NEAR(b.time_s, b.latency_s + big_transfer, 1e-12);
  // Across 4 nodes of 8 a large all-reduce pays the ring's plateau: 62 steps, 6 across nodes,
  // times 1.4 (1.9 before sm80).
  const double ring = (8.4 + 56 * 3.4 + 6 * 14.0) * 1e-6;
  NcclChoice r = nccl_choice(Collective::kAllReduce, 1 << 30, 4, 8, 1.0, intra, inter, false);
  EXPECT_EQ(r.algorithm, NcclAlgorithm::kRing);
  EXPECT_NEAR(r.latency_s, ring * 1.4, 1e-12);
  EXPECT_NEAR(nccl_choice(Collective::kAllReduce, 1 << 30, 4, 8, 1.0, intra, inter, true).latency_s,
              ring * 1.9, 1e-12);
  // Over 512 nodes a mid-size all-reduce goes to the tree: log2 of the nodes, not their count.
  NcclChoice tr = nccl_choice(Collective::kAllReduce, 1 << 20, 512, 8, 1e-4, intra, inter, false);
  EXPECT_EQ(tr.algorithm, NcclAlgorithm::kTree);
  // Reduce-scatter and all-gather have no tree; their ring counts n-1 steps, nodes-1 across.
  NcclChoice ag = nccl_choice(Collective::kAllGather, 1 << 30, 4, 8, 1.0, intra, inter, false);
  EXPECT_EQ(ag.algorithm, NcclAlgorithm::kRing);
  EXPECT_NEAR(ag.latency_s, (8.4 + 28 * 3.4 + 3 * 14.0) * 1e-6, 1e-12);
  // A cluster's own Simple hop scales the other protocols' hops with it.
  NcclChoice slow = nccl_choice(Collective::kAllReduce, 4096, 1, 8, tiny_transfer, 2 * intra, inter, false);
  EXPECT_NEAR(slow.latency_s, (6.6 + 14 * 1.2) * 1e-6, 1e-12);
  // Never slower than the best single choice, never below the transfer itself.
  EXPECT_GE(b.time_s, big_transfer);
  EXPECT_TRUE(nccl_tuned(Collective::kReduceScatter));
  EXPECT_FALSE(nccl_tuned(Collective::kAllToAll));
  EXPECT_FALSE(nccl_tuned(Collective::kSendRecv));
  EXPECT_DOUBLE_EQ(nccl_choice(Collective::kAllReduce, 1 << 20, 1, 1, 1.0, intra, inter, false).time_s, 0.0);
}

TEST(CommVolume, TensorParallelClosedForm) {
  // Per layer and micro-batch without SP: 2 all-reduces forward and 2 backward of s*b*h*e
  // (Megatron's f and g); full recompute repeats the forward's 2. Each rank sends 2(t-1)/t of it.
  const ModelSpec m = gpt3();
  for (Recompute rc : {Recompute::kNone, Recompute::kFull}) {
    for (bool sp : {false, true}) {
      Plan p = plan_of(8, 4, 2, 1, 32);  // M = 16
      p.recompute = rc;
      p.sequence_parallel = sp;
      const double t = 8, e = 2, sbh = 2048.0 * 12288, M = 16, L = 24;
      const double ar = 2 * (t - 1) / t * sbh * e, half = (t - 1) / t * sbh * e;
      // SP: forward 2 all-gathers + 2 reduce-scatters (= 2 all-reduces); backward the same plus
      // 2 re-gathers of the inputs for the weight gradients.
      const double fwd = 2 * ar, bwd = sp ? 2 * ar + 2 * half : 2 * ar;
      const double per_layer = fwd + bwd + (rc == Recompute::kFull ? fwd : 0.0);
      // SP also sums the two LayerNorms' gradients (2 x 2h) over tp once per step.
      const double norms = sp ? L * 2 * (t - 1) / t * (4 * 12288) * e : 0.0;
      const CommVolume mid = comm_volume_on_stage(m, p, 1);
      EXPECT_LT(rel(mid.tp_bytes, M * L * per_layer + norms), 1e-12) << "sp=" << sp;
      // PP: a middle stage sends one activation forward and one gradient back per micro-batch.
      EXPECT_DOUBLE_EQ(mid.pp_bytes, 2 * M * sbh * e / (sp ? t : 1.0));
    }
  }
}

TEST(CommVolume, DataParallelAllReduceOfPaddedBlocks) {
  const ModelSpec m = load_repo_model("tiny.json");
  Plan p = plan_of(1, 1, 4, 2, 16);
  p.precision = Precision::kFp32;
  double expected = 0;
  for (const ParamBlock& b : param_blocks_on_stage(m, p, 0)) {
    const double padded = std::ceil(static_cast<double>(b.dense_params) / 4) * 4;
    expected += 2.0 * 3 / 4 * padded * 4;
  }
  EXPECT_DOUBLE_EQ(comm_volume_on_stage(m, p, 0).dp_bytes, expected);
  // ZeRO-1 (reduce-scatter + all-gather) moves what one all-reduce does; ZeRO-2 reduce-scatters
  // every micro-batch (M = 2); ZeRO-3 adds the parameter gathers of forward and backward.
  p.zero_stage = 1;
  EXPECT_DOUBLE_EQ(comm_volume_on_stage(m, p, 0).dp_bytes, expected);
  p.zero_stage = 2;
  EXPECT_DOUBLE_EQ(comm_volume_on_stage(m, p, 0).dp_bytes, expected / 2 * (2 + 1));
  p.zero_stage = 3;
  EXPECT_DOUBLE_EQ(comm_volume_on_stage(m, p, 0).dp_bytes, expected / 2 * 2 * 3);
}

TEST(Memory, Zero2HoldsOneBlocksGradientUntilItsReduceScatter) {
  const ModelSpec m = gpt3();
  Plan p = plan_of(8, 4, 4, 1, 8);
  p.zero_stage = 1;
  // Beyond a layer's backward workspace (its own test), nothing: gradients are whole anyway.
  const double workspace = layer_backward_workspace_bytes(m, p);
  EXPECT_EQ(memory_on_stage(m, p, 1).buffers_bytes, workspace);
  double largest = 0;
  for (const ParamBlock& b : param_blocks_on_stage(m, p, 1))
    largest = std::max(largest, static_cast<double>((b.dense_params + 3) / 4 * 4));
  const double grad_bytes = state_bytes_per_param(p.precision, p.optimizer).gradients;
  p.zero_stage = 2;
  EXPECT_DOUBLE_EQ(memory_on_stage(m, p, 1).buffers_bytes, workspace + largest * grad_bytes);
  p.zero_stage = 3;  // on top of the two gathered blocks' weights
  EXPECT_DOUBLE_EQ(memory_on_stage(m, p, 1).buffers_bytes,
                   workspace +
                       2.0 * largest_block_params(m, p, 1) *
                           state_bytes_per_param(p.precision, p.optimizer).weights +
                       largest * grad_bytes);
  // Without data parallelism there is nothing to reduce-scatter.
  p = plan_of(8, 4, 1, 1, 8);
  p.zero_stage = 2;
  EXPECT_EQ(memory_on_stage(m, p, 1).buffers_bytes, workspace);
}

TEST(Memory, BackwardWorkspaceIsTheLargerOfTheMlpAndAttentionGradients) {
  // GPT-3 175B at t = 8, micro-batch 1, bf16: T = 2048, h = 12288, f/t = 6144, q/t = 1536,
  // 12 heads per rank. MLP: the output gradient (T*h) and the fc2-input and fc1-output
  // gradients (2*T*f/t); attention, unfused: T*h + T*q/t + 12*s^2 scores.
  const ModelSpec m = gpt3();
  Plan p = plan_of(8, 1, 1, 1, 1);
  p.attention = AttentionImpl::kFused;
  const double T = 2048, h = 12288, f = 6144, q = 1536, e = 2;
  EXPECT_DOUBLE_EQ(layer_backward_workspace_bytes(m, p), e * (T * h + 2 * T * f));
  p.attention = AttentionImpl::kUnfused;  // 12 * 2048^2 scores outweigh the MLP's gradients
  EXPECT_DOUBLE_EQ(layer_backward_workspace_bytes(m, p), e * (T * h + T * q + 12 * T * T));
  // SwiGLU's fc1 output is two tensors: its gradient is too.
  ModelSpec g = m;
  g.activation = Activation::kSwiglu;
  p.attention = AttentionImpl::kFused;
  EXPECT_DOUBLE_EQ(layer_backward_workspace_bytes(g, p), e * (T * h + 3 * T * f));
}

TEST(Tasks, UnfusedSoftmaxMovesWhatMegatronsCausalKernelsAndDropoutMove) {
  // GPT-3 175B at t = 8, micro-batch 2, bf16 (e = 2), dropout on: 2 x 12 heads x 2048 x 2048
  // scores per rank. The causal kernels (scaled_upper_triang_masked_softmax.h) load a row up to
  // the diagonal, (s + 1) / 2s of it, and store the whole row; dropout moves 1 + 2e per score
  // each way. Forward: e r + e + 1 + 2e; backward: 2 e r + e + 1 + 2e (validation/corpus/
  // NOTES.md, nineteenth pass).
  const ModelSpec m = gpt3();
  Plan p = plan_of(8, 1, 1, 2, 2);
  p.attention = AttentionImpl::kUnfused;
  const double s = static_cast<double>(m.seq_len), e = 2.0;
  const double scores = 2.0 * (m.num_attention_heads / 8) * s * s, r = (s + 1) / (2 * s);
  auto bytes_of = [](const std::vector<Task>& tasks, std::string_view name) {
    for (const Task& t : tasks)
      if (t.name == name) return t.bytes;
    ADD_FAILURE() << "no task " << name;
    return 0.0;
  };
  EXPECT_DOUBLE_EQ(bytes_of(layer_forward_tasks(m, p), "softmax"),
                   scores * (e * r + e + 1 + 2 * e));
  EXPECT_DOUBLE_EQ(bytes_of(layer_backward_tasks(m, p), "softmax_bwd"),
                   scores * (2 * e * r + e + 1 + 2 * e));
  // Without dropout only the softmax's own bytes remain.
  ModelSpec nd = m;
  nd.dropout = false;
  EXPECT_DOUBLE_EQ(bytes_of(layer_forward_tasks(nd, p), "softmax"), scores * (e * r + e));
  EXPECT_DOUBLE_EQ(bytes_of(layer_backward_tasks(nd, p), "softmax_bwd"),
                   scores * (2 * e * r + e));
}

TEST(Tasks, TranscendentalsCountTheExpAndTanhEvaluated) {
  const ModelSpec m = gpt3();
  Plan p = plan_of(8, 1, 1, 2, 2);
  p.attention = AttentionImpl::kUnfused;
  const double tokens = 2.0 * m.seq_len, f_rank = 4.0 * m.hidden_size / 8;
  auto find = [](const std::vector<Task>& tasks, std::string_view name) {
    for (const Task& t : tasks)
      if (t.name == name) return t;
    ADD_FAILURE() << "no task " << name;
    return Task{};
  };
  const std::vector<Task> fwd = layer_forward_tasks(m, p), bwd = layer_backward_tasks(m, p);
  // GELU's tanh, forward and (recomputed) backward; none in the GEMMs or the norms.
  EXPECT_DOUBLE_EQ(find(fwd, "gelu").transcendentals, tokens * f_rank);
  EXPECT_DOUBLE_EQ(find(bwd, "gelu_bwd").transcendentals, tokens * f_rank);
  EXPECT_EQ(find(fwd, "fc1").transcendentals, 0.0);
  EXPECT_EQ(find(fwd, "norm1").transcendentals, 0.0);
  // Causal softmax: an exp per unmasked score; its backward has none.
  const double s = static_cast<double>(m.seq_len);
  EXPECT_DOUBLE_EQ(find(fwd, "softmax").transcendentals,
                   2.0 * m.num_attention_heads / 8 * s * (s + 1) / 2);
  EXPECT_EQ(find(bwd, "softmax_bwd").transcendentals, 0.0);
  // Cross-entropy: an exp per logit of this rank's vocabulary slice.
  const double v_rank = static_cast<double>(padded_vocab(m, 8) / 8);
  EXPECT_DOUBLE_EQ(find(head_forward_tasks(m, p), "cross_entropy").transcendentals,
                   tokens * v_rank);
  // Timed only where the device says they cost something (a CPU), and added to the bytes.
  DeviceRates r;
  r.peak_flops_per_s = 1e12;
  r.hbm_bytes_per_s = 1e11;
  r.memory_efficiency = 1.0;
  r.kernel_overhead_s = 0;
  const Task gelu = find(fwd, "gelu");
  EXPECT_DOUBLE_EQ(task_time_s(gelu, r), gelu.bytes / 1e11);
  r.transcendental_s = 2e-9;
  EXPECT_DOUBLE_EQ(task_time_s(gelu, r), gelu.bytes / 1e11 + gelu.transcendentals * 2e-9);
  const Task fc1 = find(fwd, "fc1");
  DeviceRates free_tanh = r;
  free_tanh.transcendental_s = 0;
  EXPECT_DOUBLE_EQ(task_time_s(fc1, r), task_time_s(fc1, free_tanh));
}

// Split-K (compute_model.h): the H200 run's out_proj weight gradient of GPT-2 124M at micro-batch
// 8 (768 x 768 output, K = 8,192 tokens; bench/results/gpu-2026-12-04/notes.md) has 36 tiles of
// 128 x 128 on 132 SMs: one wave at 27% without a split; split in 3, 108 of 132 units work.
TEST(GemmShape, SplitKFillsIdleUnitsOnGpuRatesOnly) {
  DeviceRates gpu = device_rates(*gpu_preset("H100-80GB"), Precision::kBf16);
  gpu.sm_count = 132;
  ASSERT_TRUE(gpu.split_k);
  const double k_eff = 8192.0 / (8192.0 + gpu.k_half);
  EXPECT_NEAR(gemm_shape_efficiency(gpu, 768, 768, 8192, 1), 36.0 / 132.0 * k_eff, 1e-12);
  const double split = gemm_shape_efficiency(gpu, 768, 768, 8192, 1, true);
  const double k3 = std::ceil(8192.0 / 3.0);
  EXPECT_NEAR(split, 108.0 / 132.0 * k3 / (k3 + gpu.k_half), 1e-12);
  // A GEMM that fills the units already is not split: 12 x 24 = 288 tiles.
  EXPECT_DOUBLE_EQ(gemm_shape_efficiency(gpu, 1536, 3072, 8192, 1, true),
                   gemm_shape_efficiency(gpu, 1536, 3072, 8192, 1));
  // A slice is at least one 64-deep K-tile: K = 128 splits in two at most, K = 100 not at all.
  const double two = gemm_shape_efficiency(gpu, 128, 128, 128, 1, true);
  EXPECT_NEAR(two, 2.0 / 132.0 * 64.0 / (64.0 + gpu.k_half), 1e-12);
  EXPECT_DOUBLE_EQ(gemm_shape_efficiency(gpu, 128, 128, 100, 1, true),
                   gemm_shape_efficiency(gpu, 128, 128, 100, 1));
  // Rates without split_k (a CPU profile) keep the unsplit figure.
  DeviceRates cpu = gpu;
  cpu.split_k = false;
  EXPECT_DOUBLE_EQ(gemm_shape_efficiency(cpu, 768, 768, 8192, 1, true),
                   gemm_shape_efficiency(cpu, 768, 768, 8192, 1));
  // The task time: a weight-gradient GEMM task takes the split.
  const Task t = testing::gemm_task("out_proj_wgrad", 768, 768, 8192);
  EXPECT_LT(task_time_s(t, gpu), task_time_s(t, cpu));
}

TEST(Tasks, BackwardHasTwiceTheForwardFlops) {
  for (const char* name : {"gpt3.json", "llama3-8b.json", "mixtral-8x7b.json"}) {
    const ModelSpec m = load_repo_model(name);
    Plan p = plan_of(2, 1, 1, 2, 2);
    if (m.is_moe()) p.ep = 1;
    double fwd = 0, bwd = 0;
    for (const Task& t : layer_forward_tasks(m, p)) fwd += t.flops;
    for (const Task& t : layer_backward_tasks(m, p)) bwd += t.flops;
    EXPECT_LT(rel(bwd, 2 * fwd), 1e-12) << name;
  }
}


// --- context parallelism --------------------------------------------------------------------

// Llama 3 8B at 8192 tokens: fused attention (CP's requirement), GQA (8 KV heads), SwiGLU.
Plan cp_plan(std::int64_t tp, std::int64_t cp, std::int64_t dp) {
  Plan p = plan_of(tp, 1, dp, 1, 4 * dp);
  p.cp = cp;
  return p;
}
double sum_flops(const std::vector<Task>& tasks, TaskKind kind) {
  double f = 0;
  for (const Task& t : tasks)
    if (t.kind == kind) f += t.flops;
  return f;
}
const Task* find_task(const std::vector<Task>& tasks, std::string_view name) {
  for (const Task& t : tasks)
    if (t.name == name) return &t;
  return nullptr;
}

TEST(ContextParallel, HalvesALayersGemmsActivationsAndAttentionCore) {
  const ModelSpec m = load_repo_model("llama3-8b.json");
  for (std::int64_t tp : {1, 2}) {
    const Plan one = cp_plan(tp, 1, 2), two = cp_plan(tp, 2, 2);
    for (auto tasks : {layer_forward_tasks, layer_backward_tasks}) {
      // Each CP rank holds s/cp tokens of every sequence: every GEMM has half the rows.
      EXPECT_DOUBLE_EQ(sum_flops(tasks(m, two), TaskKind::kGemm),
                       sum_flops(tasks(m, one), TaskKind::kGemm) / 2);
      // Its s/cp queries attend to the whole sequence's keys, load-balanced: the
      // full-sequence core's FLOPs / cp, model and executed alike.
      EXPECT_DOUBLE_EQ(sum_flops(tasks(m, two), TaskKind::kAttention),
                       sum_flops(tasks(m, one), TaskKind::kAttention) / 2);
    }
    const std::vector<Task> f1 = layer_forward_tasks(m, one), f2 = layer_forward_tasks(m, two);
    const Task& a1 = *find_task(f1, "attention");
    const Task& a2 = *find_task(f2, "attention");
    EXPECT_DOUBLE_EQ(a2.executed_flops, a1.executed_flops / 2);
    EXPECT_EQ(a2.m, m.seq_len / 2);  // local queries
    EXPECT_EQ(a2.n, m.seq_len);      // all keys
    // Stored activations (Korthikanti et al.'s terms and the fused kernel's log-sum-exp per
    // query row) all scale with the tokens held.
    EXPECT_DOUBLE_EQ(layer_activation_bytes(m, two), layer_activation_bytes(m, one) / 2);
    // So do the memory-bound kernels, the embedding, the head and the stage-boundary message.
    EXPECT_DOUBLE_EQ(find_task(f2, "norm1")->bytes, find_task(f1, "norm1")->bytes / 2);
    EXPECT_DOUBLE_EQ(sum_flops(head_forward_tasks(m, two), TaskKind::kGemm),
                     sum_flops(head_forward_tasks(m, one), TaskKind::kGemm) / 2);
    EXPECT_EQ(pipeline_message_bytes(m, two), pipeline_message_bytes(m, one) / 2);
    EXPECT_EQ(tokens_per_micro_batch(m, two), m.seq_len / 2);
  }
  // The whole step's FLOPs do not depend on how sequences are split.
  Plan big = cp_plan(2, 4, 2);
  Plan flat = cp_plan(2, 1, 2);
  EXPECT_DOUBLE_EQ(step_flops(m, big).model, step_flops(m, flat).model);
}

TEST(ContextParallel, KvAllGatherAndReduceScatterBytesFollowTheFormula) {
  const ModelSpec m = load_repo_model("llama3-8b.json");  // kv width 8 heads x 128 = 1024
  const std::int64_t tp = 2, cp = 4, b = 2;
  Plan p = cp_plan(tp, cp, 1);
  p.micro_batch_size = b;
  p.global_batch_size = 8;  // M = 4
  // The whole sequence's K and V on this TP rank, in bf16: 2 * b * s * kv / tp * 2 bytes; a
  // ring all-gather (reduce-scatter) sends (cp - 1)/cp of it from each rank (collectives.h).
  const std::int64_t kv_bytes = 2 * b * m.seq_len * m.kv_width() / tp * 2;
  const std::int64_t sent = kv_bytes * (cp - 1) / cp;
  const std::vector<Task> fwd = layer_forward_tasks(m, p);  // find_task points into it
  const Task* ag = find_task(fwd, "cp_all_gather_kv");
  ASSERT_NE(ag, nullptr);
  EXPECT_EQ(ag->group, CommGroup::kCp);
  EXPECT_EQ(ag->collective, Collective::kAllGather);
  EXPECT_EQ(ag->group_size, cp);
  EXPECT_EQ(ag->message_bytes, kv_bytes);
  EXPECT_EQ(ag->bytes_sent(), sent);
  // Backward: K and V gathered again (the forward kept its own chunk only), dK and dV
  // reduce-scattered (Transformer Engine's AttnFuncWithCPAndKVAllGather).
  const std::vector<Task> bwd = layer_backward_tasks(m, p);
  const Task* ag_bwd = find_task(bwd, "cp_all_gather_kv_bwd");
  const Task* rs = find_task(bwd, "cp_reduce_scatter_dkv");
  ASSERT_TRUE(ag_bwd != nullptr && rs != nullptr);
  EXPECT_EQ(ag_bwd->message_bytes, kv_bytes);
  EXPECT_EQ(rs->collective, Collective::kReduceScatter);
  EXPECT_EQ(rs->message_bytes, kv_bytes);
  EXPECT_EQ(rs->bytes_sent(), sent);
  // Per step on a stage: M * L layers, three collectives each, a fourth under full recompute.
  const double M = 4, L = static_cast<double>(m.num_layers);
  EXPECT_DOUBLE_EQ(comm_volume_on_stage(m, p, 0).cp_bytes, M * L * 3 * static_cast<double>(sent));
  p.recompute = Recompute::kFull;
  EXPECT_DOUBLE_EQ(comm_volume_on_stage(m, p, 0).cp_bytes, M * L * 4 * static_cast<double>(sent));
  // Without CP there is no CP task and no CP traffic.
  const Plan none = cp_plan(tp, 1, 1);
  for (const auto& tasks : {layer_forward_tasks(m, none), layer_backward_tasks(m, none)})
    for (const Task& t : tasks) EXPECT_NE(t.group, CommGroup::kCp) << t.name;
  EXPECT_EQ(comm_volume_on_stage(m, none, 0).cp_bytes, 0.0);
  EXPECT_EQ(report_group(CommGroup::kCp), "cp");
}

TEST(ContextParallel, GradientsAreSummedAndShardedOverDpTimesCp) {
  const ModelSpec m = load_repo_model("llama3-8b.json");
  const Plan p = cp_plan(2, 4, 2);
  for (const ParamBlock& b : param_blocks_on_stage(m, p, 0)) {
    const std::vector<Task> ar = dp_block_tasks(p, b, DpPoint::kAfterLastBackward);
    ASSERT_EQ(ar.size(), 1u);
    EXPECT_EQ(ar[0].group, CommGroup::kDp);
    EXPECT_EQ(ar[0].group_size, 8);  // dp * cp
    EXPECT_EQ(ar[0].message_bytes, (b.dense_params + 7) / 8 * 8 * 2);
  }
  // ZeRO divides by dp * cp: the same states per rank as dp * cp replicas without CP.
  for (int zero : {1, 2, 3}) {
    Plan with = p, without = cp_plan(2, 1, 8);
    with.zero_stage = without.zero_stage = zero;
    const MemoryBreakdown a = memory_on_stage(m, with, 0), c = memory_on_stage(m, without, 0);
    EXPECT_DOUBLE_EQ(a.weights_bytes, c.weights_bytes) << zero;
    EXPECT_DOUBLE_EQ(a.gradients_bytes, c.gradients_bytes) << zero;
    EXPECT_DOUBLE_EQ(a.optimizer_bytes, c.optimizer_bytes) << zero;
    EXPECT_DOUBLE_EQ(optimizer_params_on_rank(m, with, 0), optimizer_params_on_rank(m, without, 0));
  }
  // Experts: dp/ep replicas x cp.
  Plan moe = cp_plan(1, 2, 4);
  moe.ep = 2;
  EXPECT_EQ(expert_dp_cp(moe), 4);
}

TEST(ContextParallel, GatheredKvIsATransientBufferOfTheLayer) {
  const ModelSpec m = load_repo_model("llama3-8b.json");
  const Plan one = cp_plan(2, 1, 1), two = cp_plan(2, 2, 1);
  // The backward workspace's attention moment gains the gathered K,V and their gradients
  // (2 x 2*b*s*kv/tp elements); Llama 3 8B's MLP moment stays the larger one at cp = 2.
  const double e = 2, T1 = 8192, h = 4096, q = 4096, f = 14336, t = 2, kv = 1024;
  const double mlp = T1 / 2 * f / t * 3;
  const double attention = T1 / 2 * q / t + 2 * (2 * 1 * T1 * kv / t);
  EXPECT_DOUBLE_EQ(layer_backward_workspace_bytes(m, two),
                   e * (T1 / 2 * h + std::max(mlp, attention)));
  EXPECT_DOUBLE_EQ(layer_backward_workspace_bytes(m, one), e * (T1 * h + T1 * f / t * 3));
  // Longer sequences on more CP ranks: the gathered K,V outgrow the MLP's gradients, and the
  // memory model counts them in the buffers of a stage.
  ModelSpec longer = m;
  longer.seq_len = 131072;
  const Plan wide = cp_plan(2, 16, 1);
  const double T = 131072.0 / 16;
  EXPECT_DOUBLE_EQ(layer_backward_workspace_bytes(longer, wide),
                   e * (T * h + T * q / t + 2 * (2 * 131072.0 * kv / t)));
  EXPECT_DOUBLE_EQ(memory_on_stage(longer, wide, 0).buffers_bytes,
                   layer_backward_workspace_bytes(longer, wide));
}

// The cast's bytes per element under each scaling (e = 2 for bf16): current reads the tensor
// twice (amax, then cast), delayed and block once; each writes the FP8 tensor and its
// transpose, block also a one-byte scale per 32 elements of each. A cached weight is cast on
// the step's first micro-batch only: each of the M micro-batches carries 1/M of its cast.
// Llama 3 8B's plan for the FP8 tests: tp 2, dp 4, one sequence per micro-batch.
Plan fp8_test_plan(std::int64_t global_batch_size, bool fp8) {
  Plan p;
  p.tp = 2;
  p.dp = 4;
  p.micro_batch_size = 1;
  p.global_batch_size = global_batch_size;
  p.fp8 = fp8;
  return p;
}

// The bytes of the cast task before the qkv GEMM in one layer's forward; the GEMM's input and
// weight element counts through input_elems and weight_elems.
double qkv_cast_bytes(const ModelSpec& m, const Plan& plan, double* input_elems,
                      double* weight_elems) {
  const std::vector<Task> fwd = layer_forward_tasks(m, plan);
  for (std::size_t i = 1; i < fwd.size(); ++i)
    if (fwd[i].name == "qkv") {
      *input_elems = double(fwd[i].m) * double(fwd[i].k);
      *weight_elems = double(fwd[i].k) * double(fwd[i].n);
      return fwd[i - 1].bytes;
    }
  ADD_FAILURE() << "no qkv task";
  return 0.0;
}

TEST(Fp8, CastBytesFollowTheScalingAndTheWeightCache) {
  const ModelSpec m = load_repo_model("llama3-8b.json");
  const Plan p = fp8_test_plan(32, true);  // M = 8 micro-batches per replica
  double in = 0, w = 0;
  const double current = qkv_cast_bytes(m, p, &in, &w);
  EXPECT_GT(in, 0.0);
  EXPECT_DOUBLE_EQ(current, 6.0 * (in + w));  // current: 2e + 2
  Plan delayed = p;
  delayed.fp8_scaling = Fp8Scaling::kDelayed;
  EXPECT_DOUBLE_EQ(qkv_cast_bytes(m, delayed, &in, &w), 4.0 * (in + w));  // e + 2
  Plan block = p;
  block.fp8_scaling = Fp8Scaling::kBlock;
  EXPECT_DOUBLE_EQ(qkv_cast_bytes(m, block, &in, &w), (4.0 + 2.0 / 32.0) * (in + w));
  Plan cached = delayed;
  cached.fp8_weight_cache = true;
  ASSERT_EQ(cached.num_micro_batches(), 8);
  EXPECT_DOUBLE_EQ(qkv_cast_bytes(m, cached, &in, &w), 4.0 * (in + w / 8.0));
  // The gradient's cast follows the scaling too; the cache is about weights only.
  auto grad_cast_bytes = [&](const Plan& plan) {
    double total = 0;
    for (const Task& t : layer_backward_tasks(m, plan))
      if (t.name == "fp8_cast_grad") total += t.bytes;
    return total;
  };
  EXPECT_DOUBLE_EQ(grad_cast_bytes(delayed) / grad_cast_bytes(p), 4.0 / 6.0);
  EXPECT_DOUBLE_EQ(grad_cast_bytes(cached), grad_cast_bytes(delayed));
}

// Plan::fp8_all_gather's data-parallel tasks: at each of `points`, for every parameter block,
// plan `g` (with it) has the same tasks as `p` (without); a layer block's all-gathers carry its
// linear weights in one byte and its norms in two (bf16: 2 bytes per padded parameter), every
// other collective the same bytes. Returns the points at which a layer's all-gather was found.
std::set<DpPoint> fp8_layer_gather_points(const ModelSpec& m, const Plan& p, const Plan& g,
                                          std::initializer_list<DpPoint> points) {
  std::set<DpPoint> found;
  for (const ParamBlock& b : param_blocks_on_stage(m, g, 0)) {
    SCOPED_TRACE(static_cast<int>(b.kind));
    for (DpPoint point : points) {
      const std::vector<Task> base = dp_block_tasks(p, b, point);
      const std::vector<Task> fp8 = dp_block_tasks(g, b, point);
      EXPECT_EQ(base.size(), fp8.size());
      for (std::size_t i = 0; i < std::min(base.size(), fp8.size()); ++i) {
        EXPECT_EQ(fp8[i].name, base[i].name);
        if (b.kind != BlockKind::kLayer || base[i].collective != Collective::kAllGather) {
          EXPECT_EQ(fp8[i].message_bytes, base[i].message_bytes) << base[i].name;
          continue;
        }
        found.insert(point);
        const double padded = static_cast<double>(base[i].message_bytes) / 2.0;
        EXPECT_NEAR(static_cast<double>(fp8[i].message_bytes),
                    padded + static_cast<double>(b.tp_replicated_params), 1.0);
        EXPECT_LT(static_cast<double>(fp8[i].message_bytes),
                  0.51 * static_cast<double>(base[i].message_bytes));
      }
    }
  }
  return found;
}

// The plan pair the FP8-gather tests compare: fp8_test_plan at 32 GPUs (8 micro-batches per
// replica, 4 shard ranks) at `zero_stage`, without and with Plan::fp8_all_gather.
std::pair<Plan, Plan> fp8_gather_plans(std::int32_t zero_stage) {
  Plan p = fp8_test_plan(32, true);
  p.zero_stage = zero_stage;
  Plan g = p;
  g.fp8_all_gather = true;
  return {p, g};
}

// Plan::fp8_all_gather: a layer's ZeRO-3 gathers carry its linear weights in one byte and its
// norms in two; the embedding, the head and the gradients' reduce-scatter are unchanged. The
// forward's weight cast becomes the shard's cast (read 4, write 1, over the shard ranks) plus
// one transposed FP8 copy (read 1, write 1); the input's cast is unchanged.
TEST(Fp8, AllGatherCarriesLinearWeightsInOneByteAndCastsTheShard) {
  const ModelSpec m = load_repo_model("llama3-8b.json");
  auto [p, g] = fp8_gather_plans(3);
  ASSERT_TRUE(validate_plan(g).ok()) << validate_plan(g).message();
  EXPECT_EQ(fp8_layer_gather_points(m, p, g,
                                    {DpPoint::kBeforeForward, DpPoint::kBeforeRecompute,
                                     DpPoint::kBeforeBackward, DpPoint::kAfterBackward}),
            (std::set<DpPoint>{DpPoint::kBeforeForward, DpPoint::kBeforeRecompute,
                               DpPoint::kBeforeBackward}));
  double in = 0, w = 0;
  const double plain = qkv_cast_bytes(m, p, &in, &w);
  EXPECT_GT(w, 0.0);
  EXPECT_DOUBLE_EQ(plain, 6.0 * (in + w));
  ASSERT_EQ(g.zero_shard_ranks(), 4);
  const double gathered = qkv_cast_bytes(m, g, &in, &w);
  EXPECT_DOUBLE_EQ(gathered, 6.0 * in + (5.0 / 4.0 + 2.0) * w);
  // Refused without fp8, without sharding or with DeepSpeed's per-tensor gather, naming the
  // field.
  Plan no_fp8 = g;
  no_fp8.fp8 = false;
  EXPECT_NE(validate_plan(no_fp8).message().find("fp8_all_gather"), std::string::npos);
  Plan zero0 = g;
  zero0.zero_stage = 0;
  EXPECT_NE(validate_plan(zero0).message().find("zero_stage 0"), std::string::npos);
  Plan per = g;
  per.zero3_gather = ZeroGather::kPerTensor;
  EXPECT_NE(validate_plan(per).message().find("zero3_gather per-tensor"), std::string::npos);
}

// Plan::fp8_all_gather under ZeRO-1/2 (Megatron-Core's fp8_param_gather): the gather after the
// optimizer carries a layer's linear weights in one byte and its norms in two, nothing else
// changes; the forward's weight cast becomes the shard's cast once a step (5 bytes over the
// shard ranks, spread over the micro-batches) plus the transposed copy (2 bytes), once a step
// with fp8_weight_cache. Refused with nanotron's per-rank ZeRO-1 collectives.
TEST(Fp8, DistributedOptimizerGathersLinearWeightsInOneByteOnceAStep) {
  const ModelSpec m = load_repo_model("llama3-8b.json");
  for (std::int32_t stage : {1, 2}) {
    SCOPED_TRACE(stage);
    auto [p, g] = fp8_gather_plans(stage);
    ASSERT_TRUE(validate_plan(g).ok()) << validate_plan(g).message();
    EXPECT_EQ(fp8_layer_gather_points(m, p, g,
                                      {DpPoint::kBeforeForward, DpPoint::kAfterBackward,
                                       DpPoint::kAfterLastBackward, DpPoint::kAfterOptimizer}),
              std::set<DpPoint>{DpPoint::kAfterOptimizer});
    double in = 0, w = 0;
    const double plain = qkv_cast_bytes(m, p, &in, &w);
    EXPECT_GT(w, 0.0);
    EXPECT_DOUBLE_EQ(plain, 6.0 * (in + w));
    const double each = qkv_cast_bytes(m, g, &in, &w);
    EXPECT_DOUBLE_EQ(each, 6.0 * in + (5.0 / 4.0 / 8.0 + 2.0) * w);
    g.fp8_weight_cache = true;
    const double cached = qkv_cast_bytes(m, g, &in, &w);
    EXPECT_DOUBLE_EQ(cached, 6.0 * in + (5.0 / 4.0 + 2.0) / 8.0 * w);
  }
  Plan per_rank = fp8_test_plan(32, true);
  per_rank.zero_stage = 1;
  per_rank.fp8_all_gather = true;
  per_rank.zero1_collectives = ZeroCollectives::kPerRank;
  const std::string message = validate_plan(per_rank).message();
  EXPECT_NE(message.find("fp8_all_gather"), std::string::npos) << message;
  EXPECT_NE(message.find("zero1_collectives per-rank"), std::string::npos) << message;
}

TEST(Fp8, LinearGemmsRunInFp8AfterTheirCastsAndNothingElseChanges) {
  const ModelSpec m = load_repo_model("llama3-8b.json");
  const Plan p = fp8_test_plan(8, false);
  const Plan f = fp8_test_plan(8, true);
  const std::vector<Task> fwd = layer_forward_tasks(m, f), base = layer_forward_tasks(m, p);
  int fp8_gemms = 0, casts = 0;
  for (const Task& t : fwd) {
    if (t.fp8) {
      ++fp8_gemms;
      EXPECT_EQ(t.kind, TaskKind::kGemm) << t.name;
    }
    if (t.name == "fp8_cast") ++casts;
    if (t.name == "attention") {
      EXPECT_FALSE(t.fp8);  // the attention core stays in bf16
    }
  }
  EXPECT_EQ(fp8_gemms, 4);  // qkv, out_proj, fc1 (gate and up), fc2
  EXPECT_EQ(casts, 4);
  EXPECT_EQ(fwd.size(), base.size() + 4);
  // A cast of QKV's input (T x h) and weight (h x qkv/t): (2e + 2) bytes per element.
  const Task* qkv = nullptr;
  const Task* cast = nullptr;
  for (std::size_t i = 0; i < fwd.size(); ++i)
    if (fwd[i].name == "qkv") {
      qkv = &fwd[i];
      cast = &fwd[i - 1];
    }
  ASSERT_NE(qkv, nullptr);
  EXPECT_EQ(cast->name, "fp8_cast");
  EXPECT_DOUBLE_EQ(cast->bytes, 6.0 * (double(qkv->m) * double(qkv->k) + double(qkv->k) * double(qkv->n)));
  // The backward casts each incoming gradient once (before its data gradient).
  int grad_casts = 0, bwd_fp8 = 0;
  for (const Task& t : layer_backward_tasks(m, f)) {
    grad_casts += t.name == "fp8_cast_grad";
    bwd_fp8 += t.fp8;
  }
  EXPECT_EQ(grad_casts, 4);
  EXPECT_EQ(bwd_fp8, 8);  // data and weight gradient of each
  // FLOPs, memory and bytes on the wire are those of the bf16 plan.
  EXPECT_DOUBLE_EQ(step_flops(m, f).model, step_flops(m, p).model);
  EXPECT_DOUBLE_EQ(memory_on_stage(m, f, 0).device_total(), memory_on_stage(m, p, 0).device_total());
  EXPECT_DOUBLE_EQ(comm_volume_on_stage(m, f, 0).total(), comm_volume_on_stage(m, p, 0).total());
  // An FP8 GEMM takes the FP8 rate: half the time of the bf16 one where compute-bound.
  const GpuSpec h100 = *gpu_preset("H100-80GB");
  EXPECT_DOUBLE_EQ(h100.peak_fp8_flops_per_s, 2.0 * h100.peak_bf16_flops_per_s);
  const DeviceRates r = device_rates(h100, Precision::kBf16);
  Task big = *qkv;
  big.fp8 = false;
  const double bf16_s = task_time_s(big, r);
  EXPECT_LT(task_time_s(*qkv, r), 0.6 * bf16_s);
}

TEST(Fp8, PlanRatesNameADeviceWithoutFp8) {
  Plan p;
  p.fp8 = true;
  EXPECT_TRUE(plan_rates(p, *gpu_preset("H100-80GB"), std::nullopt).ok());
  auto a100 = plan_rates(p, *gpu_preset("A100-80GB"), std::nullopt);
  ASSERT_FALSE(a100.ok());
  EXPECT_EQ(a100.status().code(), ExitCode::kInfeasible);
  EXPECT_NE(a100.status().message().find("fp8: A100-80GB has no FP8 tensor-core rate"),
            std::string::npos);
  p.fp8 = false;
  EXPECT_TRUE(plan_rates(p, *gpu_preset("A100-80GB"), std::nullopt).ok());
}

// Fp8Scaling::kNvfp4 (TE's NVFP4BlockScaling): the same linear GEMMs as FP8, on half-byte
// operands with an E4M3 scale per 16 elements, at the FP4 rate; each cast reads the 16-bit
// tensor twice (amax, cast) and writes the row-wise and column-wise NVFP4 copies.
TEST(Nvfp4, LinearGemmsRunAtTheFp4RateOnHalfByteOperandsWithBlockScales) {
  const ModelSpec m = load_repo_model("llama3-8b.json");
  const Plan fp8 = fp8_test_plan(8, true);
  Plan nv = fp8;
  nv.fp8_scaling = Fp8Scaling::kNvfp4;
  ASSERT_TRUE(validate_plan(nv).ok()) << validate_plan(nv).message();
  double in = 0, w = 0;
  constexpr double kOperand = 0.5 + 1.0 / 16.0;
  const double cast = qkv_cast_bytes(m, nv, &in, &w);
  EXPECT_DOUBLE_EQ(cast, (4.0 + 2.0 * kOperand) * (in + w));
  const std::vector<Task> a = layer_forward_tasks(m, fp8), b = layer_forward_tasks(m, nv);
  ASSERT_EQ(a.size(), b.size());
  int fp4 = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].name, b[i].name);
    EXPECT_EQ(b[i].fp4, a[i].fp8) << b[i].name;  // exactly FP8's GEMMs
    if (!b[i].fp4) continue;
    ++fp4;
    const double mk = double(a[i].batch) * double(a[i].m) * double(a[i].k);
    const double kn = double(a[i].batch) * double(a[i].k) * double(a[i].n);
    EXPECT_DOUBLE_EQ(a[i].bytes - b[i].bytes, (1.0 - kOperand) * (mk + kn)) << b[i].name;
  }
  EXPECT_EQ(fp4, 4);
  int bwd_fp4 = 0;
  for (const Task& t : layer_backward_tasks(m, nv)) bwd_fp4 += t.fp4;
  EXPECT_EQ(bwd_fp4, 8);  // the data and weight gradients too (TE: Fprop, Dgrad and Wgrad)
  // B200: FP4 is twice FP8 (9,000 against 4,500 TFLOP/s dense); a compute-bound NVFP4 GEMM takes
  // half its FP8 time, and the power limit scales the FP4 peak with the others.
  const GpuSpec b200 = *gpu_preset("B200-192GB");
  EXPECT_DOUBLE_EQ(b200.peak_fp4_flops_per_s, 9000e12);
  EXPECT_DOUBLE_EQ(gpu_preset("H100-80GB")->peak_fp4_flops_per_s, 0.0);
  const auto at750 = at_power_limit(b200, 750);
  ASSERT_TRUE(at750.ok());
  EXPECT_DOUBLE_EQ(at750->peak_fp4_flops_per_s / b200.peak_fp4_flops_per_s,
                   at750->peak_bf16_flops_per_s / b200.peak_bf16_flops_per_s);
  const DeviceRates r = *plan_rates(nv, b200, std::nullopt);
  Task big;
  for (const Task& t : b)
    if (t.name == "fc1") big = t;
  ASSERT_TRUE(big.fp4);
  Task as_fp8 = big;
  as_fp8.fp4 = false;
  big.bytes = as_fp8.bytes = 0;  // compute alone
  EXPECT_NEAR(task_time_s(big, r) - r.kernel_overhead_s,
              0.5 * (task_time_s(as_fp8, r) - r.kernel_overhead_s), 1e-15);
}

TEST(Nvfp4, RefusedOnAPartWithoutFp4AndWithTheFp8WeightGather) {
  Plan p = fp8_test_plan(8, true);
  p.fp8_scaling = Fp8Scaling::kNvfp4;
  EXPECT_TRUE(plan_rates(p, *gpu_preset("B200-192GB"), std::nullopt).ok());
  auto h100 = plan_rates(p, *gpu_preset("H100-80GB"), std::nullopt);
  ASSERT_FALSE(h100.ok());
  EXPECT_EQ(h100.status().code(), ExitCode::kInfeasible);
  EXPECT_NE(h100.status().message().find("fp8_scaling nvfp4: H100-80GB has no FP4"),
            std::string::npos)
      << h100.status().message();
  p.zero_stage = 1;
  p.fp8_all_gather = true;
  const std::string message = validate_plan(p).message();
  EXPECT_NE(message.find("fp8_all_gather"), std::string::npos) << message;
  EXPECT_NE(message.find("nvfp4"), std::string::npos) << message;
  Plan no_fp8;
  no_fp8.fp8_scaling = Fp8Scaling::kNvfp4;
  EXPECT_NE(validate_plan(no_fp8).message().find("fp8_scaling"), std::string::npos);
}

// Plan::fp8_attention: the fused attention kernels take the FP8 flag (and cuDNN's FP8 rate on
// Blackwell) after one current-scaling cast of Q, K, V (forward) or O, dO (backward); nothing
// else changes.
TEST(Fp8Attention, AttentionKernelsRunInFp8AfterOneCastOfTheirOperands) {
  const ModelSpec m = load_repo_model("llama3-8b.json");
  const Plan f = fp8_test_plan(8, true);
  Plan a = f;
  a.fp8_attention = true;
  a.attention_kernel = AttentionKernel::kCudnn;
  ASSERT_TRUE(validate_plan(a).ok()) << validate_plan(a).message();
  for (bool backward : {false, true}) {
    SCOPED_TRACE(backward);
    auto tasks = [&](const Plan& plan) {
      return backward ? layer_backward_tasks(m, plan) : layer_forward_tasks(m, plan);
    };
    const std::vector<Task> base = tasks(f), with = tasks(a);
    ASSERT_EQ(with.size(), base.size() + 1);
    std::size_t j = 0;
    for (std::size_t i = 0; i < with.size(); ++i) {
      if (with[i].name == (backward ? "fp8_attention_cast_grad" : "fp8_attention_cast")) {
        ASSERT_LT(i + 1, with.size());
        EXPECT_EQ(with[i + 1].kind, TaskKind::kAttention);
        // Llama 3 8B at tp 2: T = 8192 tokens, q 4096, kv = v = 1024, o 4096 wide, over tp.
        const double t = 8192;
        const double elements = backward ? 2.0 * t * 4096 / 2 : t * (4096 + 1024 + 1024) / 2;
        EXPECT_DOUBLE_EQ(with[i].bytes, (2.0 * 2 + 1.0) * elements);
        continue;
      }
      EXPECT_EQ(with[i].name, base[j].name);
      EXPECT_EQ(with[i].fp8, base[j].fp8 || with[i].kind == TaskKind::kAttention) << with[i].name;
      ++j;
    }
  }
  // cuDNN's FP8 rate on B200 is faster than its bf16 one at 8k, forward and backward.
  const DeviceRates r = *plan_rates(a, *gpu_preset("B200-192GB"), std::nullopt);
  for (const Task& t : layer_backward_tasks(m, a)) {
    if (t.kind != TaskKind::kAttention) continue;
    Task bf16 = t;
    bf16.fp8 = false;
    EXPECT_LT(task_time_s(t, r), task_time_s(bf16, r)) << t.name;
  }
}

TEST(Fp8Attention, RefusedWithoutFp8UnfusedOrWithoutAPublishedFp8Rate) {
  Plan p = fp8_test_plan(8, true);
  p.fp8_attention = true;
  p.attention_kernel = AttentionKernel::kCudnn;
  EXPECT_TRUE(plan_rates(p, *gpu_preset("B200-192GB"), std::nullopt).ok());
  for (const auto& [gpu, kernel] :
       {std::pair{"H100-80GB", AttentionKernel::kCudnn},
        std::pair{"B200-192GB", AttentionKernel::kGeneric},
        std::pair{"B200-192GB", AttentionKernel::kFlash2}}) {
    Plan q = p;
    q.attention_kernel = kernel;
    auto r = plan_rates(q, *gpu_preset(gpu), std::nullopt);
    ASSERT_FALSE(r.ok()) << gpu;
    EXPECT_EQ(r.status().code(), ExitCode::kInfeasible);
    EXPECT_NE(r.status().message().find("fp8_attention: no published FP8 rate for "
                                        "attention_kernel=" + std::string(to_string(kernel))),
              std::string::npos)
        << r.status().message();
  }
  Plan no_fp8 = p;
  no_fp8.fp8 = false;
  EXPECT_NE(validate_plan(no_fp8).message().find("fp8_attention runs under the FP8 recipe"),
            std::string::npos);
  Plan unfused = p;
  unfused.attention_kernel = AttentionKernel::kGeneric;
  unfused.attention = AttentionImpl::kUnfused;
  EXPECT_NE(validate_plan(unfused).message().find("fp8_attention is a fused attention kernel's"),
            std::string::npos);
}

// --- Plan::tp_comm_overlap ----------------------------------------------------------------

// Every sequence-parallel collective of a GPT layer, forward, backward and recompute, with and
// without FP8 casts between, is paired with a GEMM of its own: a reduce-scatter with the GEMM
// just before it, an all-gather with the first GEMM after it or (the backward's re-gather for
// a weight gradient) the one before it.
TEST(TpCommOverlap, EverySequenceParallelCollectiveHasAGemmOfItsOwn) {
  const ModelSpec m = gpt3();
  Plan p = plan_of(8, 1, 1, 1, 8);
  p.sequence_parallel = true;
  p.recompute = Recompute::kFull;
  EXPECT_TRUE(tp_overlap_partners(layer_forward_tasks(m, p), p).empty());
  p.tp_comm_overlap = true;
  for (bool fp8 : {false, true}) {
    p.fp8 = fp8;
    for (const auto& tasks : {layer_forward_tasks(m, p), layer_backward_tasks(m, p),
                              layer_recompute_tasks(m, p)}) {
      const std::vector<std::int32_t> partner = tp_overlap_partners(tasks, p);
      ASSERT_EQ(partner.size(), tasks.size());
      std::set<std::int32_t> gemms;
      for (std::size_t i = 0; i < tasks.size(); ++i) {
        const Task& t = tasks[i];
        if (t.kind != TaskKind::kComm || t.group != CommGroup::kTp) {
          EXPECT_EQ(partner[i], -1) << t.name;
          continue;
        }
        ASSERT_GE(partner[i], 0) << t.name;
        const auto g = static_cast<std::size_t>(partner[i]);
        EXPECT_EQ(tasks[g].kind, TaskKind::kGemm) << t.name;
        EXPECT_TRUE(gemms.insert(partner[i]).second) << t.name << " shares " << tasks[g].name;
        if (t.collective == Collective::kReduceScatter) {
          EXPECT_EQ(g + 1, i) << t.name;
        }
        if (t.collective == Collective::kAllGather) {
          EXPECT_TRUE(g > i || g + 1 == i) << t.name;
        }
      }
    }
  }
  // The forward's four: the attention input and the MLP input gathered into QKV and FC1, the
  // output projection's and FC2's outputs reduce-scattered.
  p.fp8 = false;
  const std::vector<Task> fwd = layer_forward_tasks(m, p);
  const std::vector<std::int32_t> partner = tp_overlap_partners(fwd, p);
  std::vector<std::string> pairs;
  for (std::size_t i = 0; i < fwd.size(); ++i)
    if (partner[i] >= 0)
      pairs.push_back(std::string(fwd[i].name) + ">" +
                      std::string(fwd[static_cast<std::size_t>(partner[i])].name));
  EXPECT_EQ(pairs, (std::vector<std::string>{"tp_all_gather_attn>qkv",
                                             "tp_reduce_scatter_attn>out_proj",
                                             "tp_all_gather_mlp>fc1",
                                             "tp_reduce_scatter_mlp>fc2"}));
}

// The decomposed pair: the GEMM alone when the collective is short, the collective and one
// GEMM chunk when it is long, never less than either.
TEST(TpCommOverlap, PairTimeBetweenTheGemmAndTheCollectivePlusAChunk) {
  EXPECT_DOUBLE_EQ(tp_overlapped_pair_s(0.0, 8.0, 8), 8.0);
  EXPECT_DOUBLE_EQ(tp_overlapped_pair_s(7.0, 8.0, 8), 8.0);
  EXPECT_DOUBLE_EQ(tp_overlapped_pair_s(20.0, 8.0, 8), 21.0);
  EXPECT_DOUBLE_EQ(tp_overlapped_pair_s(5.0, 8.0, 2), 9.0);
  for (double c : {0.5, 3.0, 9.0})
    EXPECT_GE(tp_overlapped_pair_s(c, 4.0, 4), std::max(c, 4.0));
}

// The rest of the GEMM runs slowed only while the collective is in flight (contention.h): all
// of it when the collective outlasts it slowed, else the collective's time of it.
TEST(TpCommOverlap, TheGemmIsSlowedOnlyWhileTheCollectiveIsInFlight) {
  // The first chunk alone, the other 7 of 8: beside a collective of 3, 7 + 3 (1 - 1/1.5) = 8.
  EXPECT_DOUBLE_EQ(tp_overlapped_pair_s(3.0, 8.0, 8, 1.5), 1.0 + 7.0 + 3.0 * (1.0 - 1.0 / 1.5));
  EXPECT_DOUBLE_EQ(tp_overlapped_pair_s(0.0, 8.0, 8, 1.5), 8.0);
  // A collective of 7 * 1.5 or more: the rest runs beside it throughout.
  EXPECT_DOUBLE_EQ(tp_overlapped_pair_s(10.5, 8.0, 8, 1.5), 11.5);
  EXPECT_DOUBLE_EQ(tp_overlapped_pair_s(20.0, 8.0, 8, 1.5), 21.0);
  // Continuous at comm = rest * s, and never below the pair without contention.
  EXPECT_NEAR(tp_overlapped_pair_s(10.5 - 1e-9, 8.0, 8, 1.5), 11.5, 1e-8);
  for (double c : {0.5, 3.0, 9.0, 12.0})
    EXPECT_GE(tp_overlapped_pair_s(c, 4.0, 4, 1.3), tp_overlapped_pair_s(c, 4.0, 4));
}

// Plan::tp_comm_overlap_impl torch-async: what torch's micro_pipeline_tp pass decomposes. The
// forward's four pairs as TE's; in the backward only the gathered output gradients feed their
// data gradients (the reduce-scatters of input gradients, sums of several matmuls, stay whole;
// a weight gradient is never fed), and the re-gather stays beside the data gradient before it.
TEST(TpCommOverlap, TorchAsyncDecomposesOnlyWhatMicroPipelineTpMatches) {
  const ModelSpec m = gpt3();
  Plan p = plan_of(8, 1, 1, 1, 8);
  p.sequence_parallel = true;
  p.recompute = Recompute::kFull;
  p.tp_comm_overlap = true;
  p.tp_comm_overlap_impl = TpOverlapImpl::kTorchAsync;
  auto pairs_of = [&](const std::vector<Task>& tasks) {
    const std::vector<std::int32_t> partner = tp_overlap_partners(tasks, p);
    std::vector<std::string> pairs;
    for (std::size_t i = 0; i < tasks.size(); ++i)
      if (partner[i] >= 0)
        pairs.push_back(std::string(tasks[i].name) + ">" +
                        std::string(tasks[static_cast<std::size_t>(partner[i])].name));
    return pairs;
  };
  EXPECT_EQ(pairs_of(layer_forward_tasks(m, p)),
            (std::vector<std::string>{"tp_all_gather_attn>qkv", "tp_reduce_scatter_attn>out_proj",
                                      "tp_all_gather_mlp>fc1", "tp_reduce_scatter_mlp>fc2"}));
  EXPECT_EQ(pairs_of(layer_recompute_tasks(m, p)), pairs_of(layer_forward_tasks(m, p)));
  const std::vector<std::string> bwd = pairs_of(layer_backward_tasks(m, p));
  EXPECT_EQ(bwd, (std::vector<std::string>{"tp_all_gather_mlp_grad>fc2_dgrad",
                                           "tp_all_gather_mlp_input>fc1_dgrad",
                                           "tp_all_gather_attn_grad>out_proj_dgrad",
                                           "tp_all_gather_attn_input>qkv_dgrad"}));
  for (const std::string& pair : bwd) EXPECT_EQ(pair.find("reduce_scatter"), std::string::npos);
  for (bool fp8 : {false, true}) {  // FP8 casts between change nothing
    p.fp8 = fp8;
    EXPECT_EQ(pairs_of(layer_backward_tasks(m, p)).size(), 4u);
  }
}

// torch-async's decomposed GEMM: tp chunks of ceil(m/tp) rows, never faster than the GEMM whole,
// FLOPs kept; te-userbuffers' is the GEMM whole. The reduction after its reduce-scatter reads
// the tp partials and writes their sum.
TEST(TpCommOverlap, TorchAsyncChunksTheGemmAndSumsThePartials) {
  const ModelSpec m = gpt3();
  Plan p = plan_of(8, 1, 1, 1, 8);
  p.sequence_parallel = true;
  p.tp_comm_overlap = true;
  const DeviceRates r = device_rates(*gpu_preset("H100-80GB"), Precision::kBf16);
  const std::vector<Task> fwd = layer_forward_tasks(m, p);
  const Task& out_proj = *std::find_if(fwd.begin(), fwd.end(),
                                       [](const Task& t) { return t.name == "out_proj"; });
  EXPECT_DOUBLE_EQ(tp_decomposed_gemm_s(out_proj, p, r), task_time_s(out_proj, r));
  p.tp_comm_overlap_impl = TpOverlapImpl::kTorchAsync;
  const Task chunk = tp_decomposed_chunk(out_proj, p.tp);
  EXPECT_EQ(chunk.m, (out_proj.m + 7) / 8);
  EXPECT_EQ(chunk.n, out_proj.n);
  EXPECT_EQ(chunk.k, out_proj.k);
  EXPECT_NEAR(8.0 * chunk.flops, out_proj.flops, 1e-6 * out_proj.flops);
  EXPECT_GE(tp_decomposed_gemm_s(out_proj, p, r), task_time_s(out_proj, r));
  EXPECT_DOUBLE_EQ(tp_decomposed_gemm_s(out_proj, p, r), 8.0 * task_time_s(chunk, r));
  const Task red = tp_partials_reduce_task(out_proj, p);
  EXPECT_EQ(red.kind, TaskKind::kMemory);
  EXPECT_DOUBLE_EQ(red.bytes, 9.0 * static_cast<double>(chunk.m) *
                                  static_cast<double>(out_proj.n) * 2.0);
}

// tp_comm_overlap_impl: needs tp_comm_overlap; written only when torch-async; shown in the
// description; an unknown value is refused naming the field and the value.
TEST(TpCommOverlap, ImplNeedsTheOverlapAndRoundTrips) {
  Plan p = plan_of(4, 1, 2, 1, 8);
  p.sequence_parallel = true;
  p.tp_comm_overlap_impl = TpOverlapImpl::kTorchAsync;
  Status st = validate_plan(p);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("tp_comm_overlap_impl=torch-async needs tp_comm_overlap"),
            std::string::npos) << st.message();
  p.tp_comm_overlap = true;
  ASSERT_TRUE(validate_plan(p).ok());
  EXPECT_NE(describe(p).find(" tp-overlap=torch-async"), std::string::npos);
  Json j = plan_to_json(p);
  EXPECT_EQ(j.at("tp_comm_overlap_impl"), "torch-async");
  auto back = plan_from_json(j, "p.json");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->tp_comm_overlap_impl, TpOverlapImpl::kTorchAsync);
  j["tp_comm_overlap_impl"] = "te-userbuffers";
  back = plan_from_json(j, "p.json");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->tp_comm_overlap_impl, TpOverlapImpl::kTeUserbuffers);
  EXPECT_FALSE(plan_to_json(*back).contains("tp_comm_overlap_impl"));
  j["tp_comm_overlap_impl"] = "async";
  auto bad = plan_from_json(j, "p.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("tp_comm_overlap_impl"), std::string::npos);
  EXPECT_NE(bad.status().message().find("async"), std::string::npos);
}

TEST(TpCommOverlap, NeedsTpAndSequenceParallelAndRoundTrips) {
  Plan p = plan_of(1, 1, 8, 1, 8);
  p.tp_comm_overlap = true;
  Status st = validate_plan(p);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("tp_comm_overlap needs tp >= 2 and sequence_parallel"),
            std::string::npos) << st.message();
  EXPECT_NE(st.message().find("tp=1 sequence_parallel=false"), std::string::npos);
  p = plan_of(4, 1, 2, 1, 8);
  p.tp_comm_overlap = true;
  EXPECT_FALSE(validate_plan(p).ok());
  p.sequence_parallel = true;
  EXPECT_TRUE(validate_plan(p).ok());
  EXPECT_NE(describe(p).find(" tp-overlap"), std::string::npos);
  const Json j = plan_to_json(p);
  EXPECT_TRUE(j.at("tp_comm_overlap").get<bool>());
  auto back = plan_from_json(j, "p.json");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_TRUE(back->tp_comm_overlap);
  p.tp_comm_overlap = false;
  EXPECT_FALSE(plan_to_json(p).contains("tp_comm_overlap"));
}

// --- Plan::defer_embedding_wgrad ---------------------------------------------------------

TEST(DeferEmbeddingWgrad, RefusedWithoutAPipelineOrWithSplitBackwardsAndRoundTrips) {
  Plan p = plan_of(2, 1, 4, 1, 8);
  p.defer_embedding_wgrad = true;
  Status st = validate_plan(p);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("defer_embedding_wgrad needs pp >= 2"), std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("pp=1"), std::string::npos);
  p = plan_of(2, 4, 2, 1, 16);
  p.schedule = Schedule::kZbH1;
  p.defer_embedding_wgrad = true;
  st = validate_plan(p);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("defer_embedding_wgrad with schedule zb-h1"), std::string::npos)
      << st.message();
  p.schedule = Schedule::k1F1B;
  p.wgrad_deferral_limit = -3;
  st = validate_plan(p);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("wgrad_deferral_limit=-3"), std::string::npos) << st.message();
  p.wgrad_deferral_limit = 22;
  p.defer_embedding_wgrad = false;
  st = validate_plan(p);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("wgrad_deferral_limit=22 needs defer_embedding_wgrad"),
            std::string::npos) << st.message();
  p.defer_embedding_wgrad = true;
  ASSERT_TRUE(validate_plan(p).ok());
  EXPECT_NE(describe(p).find(" defer-embedding-wgrad=22"), std::string::npos) << describe(p);
  const Json j = plan_to_json(p);
  EXPECT_TRUE(j.at("defer_embedding_wgrad").get<bool>());
  EXPECT_EQ(j.at("wgrad_deferral_limit").get<std::int64_t>(), 22);
  auto back = plan_from_json(j, "p.json");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_TRUE(back->defer_embedding_wgrad);
  EXPECT_EQ(back->wgrad_deferral_limit, 22);
  Json bad = j;
  bad["wgrad_deferral_limit"] = -1;
  auto refused = plan_from_json(bad, "p.json");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("wgrad_deferral_limit"), std::string::npos)
      << refused.status().message();
  p.defer_embedding_wgrad = false;
  p.wgrad_deferral_limit = 0;
  EXPECT_FALSE(plan_to_json(p).contains("defer_embedding_wgrad"));
  EXPECT_FALSE(plan_to_json(p).contains("wgrad_deferral_limit"));
}

// The last stage holds the operands of every deferred micro-batch (at most the step's).
TEST(DeferEmbeddingWgrad, TheLastStageHoldsTheDeferredOperands) {
  const ModelSpec m = gpt3();
  Plan p = plan_of(8, 4, 1, 1, 16);
  p.sequence_parallel = true;
  const double plain_last = memory_on_stage(m, p, 3).activations_bytes;
  const double plain_first = memory_on_stage(m, p, 0).activations_bytes;
  p.defer_embedding_wgrad = true;
  EXPECT_EQ(deferred_head_micro_batches(p), 16);
  EXPECT_DOUBLE_EQ(memory_on_stage(m, p, 3).activations_bytes - plain_last,
                   16 * deferred_head_operand_bytes(m, p));
  EXPECT_DOUBLE_EQ(memory_on_stage(m, p, 0).activations_bytes, plain_first);
  p.wgrad_deferral_limit = 5;
  EXPECT_EQ(deferred_head_micro_batches(p), 5);
  p.wgrad_deferral_limit = 40;
  EXPECT_EQ(deferred_head_micro_batches(p), 16);
}

}  // namespace
}  // namespace trainplan

namespace trainplan {
namespace {

// Plan::pipeline_scatter_gather (Megatron-LM 2021, p2p_communication.py at 6985e58938): each TP
// rank sends 1/tp of the boundary activation, and the receiver all-gathers the tp pieces, the
// whole s*b*h tensor, over the TP group; a middle stage of a 1F1B pipeline receives one message
// each way per micro-batch, so its TP bytes grow by two gathers per micro-batch.
TEST(PipelineScatterGather, SendsOneTpthAndGathersTheWholeTensorOnReceipt) {
  const ModelSpec m = gpt3();
  Plan whole = plan_of(8, 4, 1, 2, 16);
  whole.sequence_parallel = false;
  Plan sg = whole;
  sg.pipeline_scatter_gather = true;
  const std::int64_t tensor_bytes = 2 * m.seq_len * m.hidden_size * 2;  // mbs 2, bf16
  EXPECT_EQ(pipeline_message_bytes(m, whole), tensor_bytes);
  EXPECT_EQ(pipeline_message_bytes(m, sg), tensor_bytes / 8);
  EXPECT_TRUE(pipeline_receive_tasks(m, whole).empty());
  const std::vector<Task> receive = pipeline_receive_tasks(m, sg);
  ASSERT_EQ(receive.size(), 1u);
  EXPECT_EQ(receive[0].collective, Collective::kAllGather);
  EXPECT_EQ(receive[0].group, CommGroup::kTp);
  EXPECT_EQ(receive[0].group_size, 8);
  EXPECT_EQ(receive[0].message_bytes, tensor_bytes);
  const CommVolume a = comm_volume_on_stage(m, whole, 1);
  const CommVolume b = comm_volume_on_stage(m, sg, 1);
  EXPECT_DOUBLE_EQ(b.pp_bytes, a.pp_bytes / 8);
  EXPECT_DOUBLE_EQ(b.tp_bytes - a.tp_bytes, 2.0 * 8 * receive[0].bytes_sent());
  // The first stage receives only the gradients, the last only the activations.
  EXPECT_DOUBLE_EQ(comm_volume_on_stage(m, sg, 0).tp_bytes - comm_volume_on_stage(m, whole, 0).tp_bytes,
                   8 * receive[0].bytes_sent());
  // Sequence parallelism already sends 1/tp: the two are refused together (plan.cc).
  sg.sequence_parallel = true;
  Json j = plan_to_json(sg);
  auto refused = plan_from_json(j, "p.json");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("pipeline_scatter_gather=true"), std::string::npos)
      << refused.status().message();
  EXPECT_NE(refused.status().message().find("sequence_parallel true"), std::string::npos)
      << refused.status().message();
}

// The device memory a GPU process holds beyond its framework's allocations: the CUDA context
// (300 MB lazy, 1,000 MB eager: PyTorch issue #107667) and one NCCL communicator per parallel
// group above one rank (544 MiB for two ranks, 688 MiB for more: NCCL issue #964; an
// all-to-all group 3.28 GB: NCCL issue #1685).
TEST(DeviceRuntime, ContextAndOneCommunicatorPerGroup) {
  constexpr double kMiB = 1024.0 * 1024.0;
  Plan p;  // one GPU: the context alone
  EXPECT_DOUBLE_EQ(device_runtime_bytes(p, CudaModuleLoading::kLazy).total(), 300e6);
  EXPECT_DOUBLE_EQ(device_runtime_bytes(p, CudaModuleLoading::kEager).total(), 1000e6);
  p.tp = 2;
  p.dp = 4;
  p.pp = 4;
  DeviceRuntimeBytes r = device_runtime_bytes(p, CudaModuleLoading::kLazy);
  EXPECT_DOUBLE_EQ(r.cuda_context_bytes, 300e6);
  EXPECT_DOUBLE_EQ(r.nccl_bytes, (544 + 688 + 688) * kMiB);
  p.cp = 2;  // its own group, and the gradients' group spans it: dp x cp = 8
  EXPECT_DOUBLE_EQ(device_runtime_bytes(p, CudaModuleLoading::kLazy).nccl_bytes,
                   (544 + 544 + 688 + 688) * kMiB);
  p.ep = 8;
  EXPECT_DOUBLE_EQ(device_runtime_bytes(p, CudaModuleLoading::kLazy).nccl_bytes,
                   (544 + 544 + 688 + 688) * kMiB + 3.28e9);
}

// The reserve a framework's allocator holds at its allocated peak: PyTorch's caching allocator
// 15% fragmentation (GMLake, arXiv:2401.08156), so the peak / 0.85; no published figure for
// expandable segments or Paddle's auto-growth allocator, so the peak itself.
TEST(AllocatorReserve, CachingAllocatorFifteenPercentOthersNone) {
  EXPECT_DOUBLE_EQ(allocator_fragmentation(DeviceAllocator::kPyTorchCaching), 0.15);
  EXPECT_TRUE(allocator_reserve_modelled(DeviceAllocator::kPyTorchCaching));
  EXPECT_DOUBLE_EQ(reserved_bytes(68e9, DeviceAllocator::kPyTorchCaching), 80e9);
  for (DeviceAllocator a :
       {DeviceAllocator::kPyTorchExpandableSegments, DeviceAllocator::kPaddleAutoGrowth}) {
    EXPECT_FALSE(allocator_reserve_modelled(a));
    EXPECT_DOUBLE_EQ(reserved_bytes(68e9, a), 68e9);
  }
}

}  // namespace
}  // namespace trainplan
