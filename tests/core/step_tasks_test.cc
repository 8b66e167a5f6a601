// StepTasks holds exactly what the cost model's functions give for the same model, plan and stage
// (the planner's estimate and the simulator's builder read it in their place, and must get
// byte-identical results).
#include "core/cost/step_tasks.h"

#include <gtest/gtest.h>

#include "tests/core/test_util.h"

namespace trainplan {
namespace {

using testing::load_repo_model;

// Field by field: a copy that differs anywhere would change a sum or an op.
void expect_same(const std::vector<Task>& got, const std::vector<Task>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    SCOPED_TRACE(want[i].name);
    EXPECT_EQ(got[i].name, want[i].name);
    EXPECT_EQ(got[i].kind, want[i].kind);
    EXPECT_EQ(got[i].m, want[i].m);
    EXPECT_EQ(got[i].n, want[i].n);
    EXPECT_EQ(got[i].k, want[i].k);
    EXPECT_EQ(got[i].batch, want[i].batch);
    EXPECT_EQ(got[i].flops, want[i].flops);
    EXPECT_EQ(got[i].executed_flops, want[i].executed_flops);
    EXPECT_EQ(got[i].bytes, want[i].bytes);
    EXPECT_EQ(got[i].transcendentals, want[i].transcendentals);
    EXPECT_EQ(got[i].memory_kernel, want[i].memory_kernel);
    EXPECT_EQ(got[i].fp8, want[i].fp8);
    EXPECT_EQ(got[i].collective, want[i].collective);
    EXPECT_EQ(got[i].group, want[i].group);
    EXPECT_EQ(got[i].group_size, want[i].group_size);
    EXPECT_EQ(got[i].message_bytes, want[i].message_bytes);
  }
}

void expect_matches_cost_model(const ModelSpec& m, const Plan& p) {
  for (std::int64_t stage = 0; stage < p.pp; ++stage) {
    SCOPED_TRACE(stage);
    const StepTasks st = step_tasks(m, p, stage);
    EXPECT_EQ(st.stage, stage);
    for (LayerKind kind : {LayerKind::kDense, LayerKind::kMoe}) {
      const ModelSpec lm = layer_model(m, kind);
      expect_same(st.micro_batch.of(kind).forward, layer_forward_tasks(lm, p));
      expect_same(st.micro_batch.of(kind).backward, layer_backward_tasks(lm, p));
      expect_same(st.micro_batch.of(kind).recompute, layer_recompute_tasks(lm, p));
    }
    expect_same(st.micro_batch.embedding_forward, embedding_forward_tasks(m, p));
    expect_same(st.micro_batch.embedding_backward, embedding_backward_tasks(m, p));
    expect_same(st.micro_batch.head_forward, head_forward_tasks(m, p));
    expect_same(st.micro_batch.head_backward, head_backward_tasks(m, p));
    EXPECT_EQ(st.micro_batch.pipeline_message_bytes, pipeline_message_bytes(m, p));
    expect_same({st.optimizer}, {optimizer_task(m, p, stage)});
    const std::vector<ParamBlock> blocks = param_blocks_on_stage(m, p, stage);
    ASSERT_EQ(st.blocks.size(), blocks.size());
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      EXPECT_EQ(st.blocks[i].layer, blocks[i].layer);
      EXPECT_EQ(st.blocks[i].dense_params, blocks[i].dense_params);
      EXPECT_EQ(st.blocks[i].expert_params, blocks[i].expert_params);
      for (DpPoint point : {DpPoint::kBeforeForward, DpPoint::kBeforeRecompute,
                            DpPoint::kBeforeBackward, DpPoint::kAfterBackward,
                            DpPoint::kAfterLastBackward, DpPoint::kAfterOptimizer})
        expect_same(st.dp(i, point), dp_block_tasks(p, blocks[i], point));
    }
  }
}

TEST(StepTasks, MatchTheCostModelForADenseModelWithZero3AndTiedEmbeddings) {
  Plan p;
  p.tp = 2;
  p.pp = 2;
  p.dp = 2;
  p.micro_batch_size = 2;
  p.global_batch_size = 16;
  p.sequence_parallel = true;
  p.zero_stage = 3;
  p.recompute = Recompute::kFull;
  expect_matches_cost_model(load_repo_model("gpt2-124m.json"), p);
}

TEST(StepTasks, MatchTheCostModelForAnMoeModelWithExpertParallelism) {
  ModelSpec m = load_repo_model("mixtral-8x7b.json");
  m.dense_layers = {0};  // both kinds of layer
  Plan p;
  p.tp = 2;
  p.pp = 4;
  p.dp = 4;
  p.ep = 2;
  p.micro_batch_size = 1;
  p.global_batch_size = 32;
  p.zero_stage = 1;
  expect_matches_cost_model(m, p);
}

}  // namespace
}  // namespace trainplan
