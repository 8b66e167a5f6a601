// Assembles a step's tasks from the cost model; see step_tasks.h.
// Tested by tests/core/step_tasks_test.cc.
#include "core/cost/step_tasks.h"

namespace trainplan {

MicroBatchTasks micro_batch_tasks(const ModelSpec& model, const Plan& plan) {
  MicroBatchTasks t;
  // Each kind of layer (an MoE model's dense and expert layers) has its own task lists.
  for (LayerKind kind : {LayerKind::kDense, LayerKind::kMoe}) {
    const ModelSpec lm = layer_model(model, kind);
    LayerTasks& l = t.layer[static_cast<std::size_t>(kind)];
    l.forward = layer_forward_tasks(lm, plan);
    l.backward = layer_backward_tasks(lm, plan);
    l.recompute = layer_recompute_tasks(lm, plan);
  }
  t.embedding_forward = embedding_forward_tasks(model, plan);
  t.embedding_backward = embedding_backward_tasks(model, plan);
  t.head_forward = head_forward_tasks(model, plan);
  t.head_backward = head_backward_tasks(model, plan);
  t.pipeline_message_bytes = pipeline_message_bytes(model, plan);
  t.pipeline_receive = pipeline_receive_tasks(model, plan);
  return t;
}

StepTasks step_tasks(const ModelSpec& model, const Plan& plan, std::int64_t stage) {
  StepTasks t;
  t.stage = stage;
  t.micro_batch = micro_batch_tasks(model, plan);
  t.blocks = param_blocks_on_stage(model, plan, stage);
  t.optimizer = optimizer_task(model, plan, stage);
  t.dp_.resize(t.blocks.size());
  t.copies_.resize(t.blocks.size());
  for (std::size_t i = 0; i < t.blocks.size(); ++i)
    for (DpPoint point : {DpPoint::kBeforeForward, DpPoint::kBeforeRecompute,
                          DpPoint::kBeforeBackward, DpPoint::kAfterBackward,
                          DpPoint::kAfterLastBackward, DpPoint::kAfterOptimizer}) {
      t.dp_[i][static_cast<std::size_t>(point)] = dp_block_tasks(plan, t.blocks[i], point);
      t.copies_[i][static_cast<std::size_t>(point)] =
          zero3_compute_copies(plan, t.blocks[i], point);
    }
  return t;
}

}  // namespace trainplan
