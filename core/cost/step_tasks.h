// The tasks of one training step, assembled once: what one rank of a pipeline stage executes per
// micro-batch (each layer kind's forward, backward and recompute, the embedding, the LM head, the
// pipeline message) and per step (its parameter blocks' data-parallel collectives at each point,
// the optimizer step). The planner's estimate costs the per-micro-batch part (its data-parallel
// costs are closed forms over the same blocks) and the simulator's program builder plays all of
// it, so the two read one value instead of each assembling the lists from cost_model.h.
// Tested by tests/core/step_tasks_test.cc.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/cost/cost_model.h"
#include "core/model_spec.h"
#include "core/plan.h"

namespace trainplan {

// One layer of one kind, for one micro-batch.
struct LayerTasks {
  std::vector<Task> forward;    // layer_forward_tasks
  std::vector<Task> backward;   // layer_backward_tasks
  std::vector<Task> recompute;  // layer_recompute_tasks (empty without recompute work)
};

// What one micro-batch costs on one rank, whatever its stage: the same for every stage of a plan.
struct MicroBatchTasks {
  std::array<LayerTasks, kLayerKindCount> layer;  // by LayerKind, of layer_model(model, kind)
  std::vector<Task> embedding_forward, embedding_backward;  // first stage
  std::vector<Task> head_forward, head_backward;            // last stage
  std::int64_t pipeline_message_bytes = 0;  // a stage boundary's send, each way
  std::vector<Task> pipeline_receive;       // pipeline_receive_tasks: after each receive
  const LayerTasks& of(LayerKind kind) const { return layer[static_cast<std::size_t>(kind)]; }
};
MicroBatchTasks micro_batch_tasks(const ModelSpec& model, const Plan& plan);

// DpPoint's values, kBeforeForward to kAfterOptimizer.
inline constexpr std::size_t kDpPointCount = 6;

// One rank of pipeline stage `stage`: the micro-batch tasks with the stage's blocks, their
// data-parallel collectives at each point (dp_block_tasks), the compute-stream copies beside
// them (zero3_compute_copies) and the optimizer step.
struct StepTasks {
  std::int64_t stage = 0;
  MicroBatchTasks micro_batch;
  std::vector<ParamBlock> blocks;  // param_blocks_on_stage, in forward order
  Task optimizer;                  // optimizer_task
  // dp_block_tasks(plan, blocks[i], point), by block and point.
  const std::vector<Task>& dp(std::size_t block, DpPoint point) const {
    return dp_[block][static_cast<std::size_t>(point)];
  }
  // zero3_compute_copies(plan, blocks[i], point), by block and point.
  const std::vector<Task>& compute_copies(std::size_t block, DpPoint point) const {
    return copies_[block][static_cast<std::size_t>(point)];
  }

 private:
  friend StepTasks step_tasks(const ModelSpec& model, const Plan& plan, std::int64_t stage);
  std::vector<std::array<std::vector<Task>, kDpPointCount>> dp_;
  std::vector<std::array<std::vector<Task>, kDpPointCount>> copies_;
};
StepTasks step_tasks(const ModelSpec& model, const Plan& plan, std::int64_t stage);

}  // namespace trainplan
