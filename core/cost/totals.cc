// The cost model's step totals: FLOPs per step (model and hardware, and Megatron-LM's eq. 3 in
// closed form), the bytes one rank of a stage sends per step by group, and the optimizer step
// as a task. Sources in cost_model.h.
// Tested by tests/core/cost_model_test.cc (FLOPs against eq. 3, communication volume,
// optimizer task).
#include "core/cost/cost_model.h"

#include <cmath>

#include "core/cost/internal.h"

namespace trainplan {

using namespace cost_internal;

// ---------------------------------------------------------------------------------------------
// FLOPs

namespace {
double sum_flops(const std::vector<Task>& tasks) {
  double f = 0;
  for (const Task& t : tasks) f += t.flops * d(t.repeat);
  return f;
}
}  // namespace

StepFlops step_flops(const ModelSpec& m, const Plan& p) {
  // FLOPs of one sequence on the whole model: the per-rank tasks of a tp = 1, mbs = 1 plan.
  Plan one = p;
  one.tp = 1;
  one.cp = 1;
  one.ep = 1;
  one.expert_tp = 0;
  one.micro_batch_size = 1;
  one.sequence_parallel = false;
  const LayerKindCounts kinds = layer_kind_counts(m, 0, m.num_layers);
  // Full recompute of some layers per chunk: those layers, over all stages.
  LayerKindCounts recomputed = kinds;
  if (p.recompute == Recompute::kFull && p.recompute_num_layers > 0) {
    recomputed = {};
    for (std::int64_t s = 0; s < p.pp; ++s) {
      const LayerKindCounts on = recomputed_layer_kinds_on_stage(p, m, s);
      recomputed.dense += on.dense;
      recomputed.moe += on.moe;
    }
  }
  double layers_fwd = 0, layers_recompute = 0;
  for (LayerKind kind : {LayerKind::kDense, LayerKind::kMoe}) {
    if (kinds.of(kind) == 0) continue;
    const ModelSpec lm = layer_model(m, kind);
    layers_fwd += d(kinds.of(kind)) * sum_flops(layer_forward_tasks(lm, one));
    layers_recompute += d(recomputed.of(kind)) * sum_flops(layer_recompute_tasks(lm, one));
  }
  const double head_fwd = sum_flops(head_forward_tasks(m, one));
  const double batch = d(p.global_batch_size);
  StepFlops f;
  f.model = batch * 3.0 * (layers_fwd + head_fwd);
  f.hardware = f.model + batch * layers_recompute;
  return f;
}

double megatron_eq3_flops(const ModelSpec& m, std::int64_t batch) {
  const double B = d(batch), s = d(m.seq_len), l = d(m.num_layers), h = d(m.hidden_size),
               V = d(m.vocab_size);
  return 96.0 * B * s * l * h * h * (1.0 + s / (6.0 * h) + V / (16.0 * l * h));
}

// ---------------------------------------------------------------------------------------------
// Communication volume

void add_task_bytes(const std::vector<Task>& tasks, double times, CommVolume& v) {
  for (const Task& t : tasks) {
    if (t.kind != TaskKind::kComm) continue;
    const double b = d(t.bytes_sent()) * times;
    switch (t.group) {
      case CommGroup::kTp: v.tp_bytes += b; break;
      case CommGroup::kExpertTp:
        v.tp_bytes += b;
        v.expert_tp_bytes += b;
        break;
      case CommGroup::kCp: v.cp_bytes += b; break;
      case CommGroup::kPp:
      case CommGroup::kEmbedding: v.pp_bytes += b; break;
      case CommGroup::kDp:
      case CommGroup::kDpReplica:
      case CommGroup::kExpertDp: v.dp_bytes += b; break;
      case CommGroup::kEp: v.ep_bytes += b; break;
    }
  }
}

CommVolume comm_volume_on_stage(const ModelSpec& m, const Plan& p, std::int64_t stage) {
  CommVolume v;
  // Micro-batches through each chunk on the stage (dualpipe: each copy sees one direction's).
  const double M = d(chunk_copy_micro_batches(p));
  const LayerKindCounts kinds = layer_kinds_on_stage(p, m, stage);
  const LayerKindCounts recomputed = recomputed_layer_kinds_on_stage(p, m, stage);
  for (LayerKind kind : {LayerKind::kDense, LayerKind::kMoe}) {
    if (kinds.of(kind) == 0) continue;
    const ModelSpec lm = layer_model(m, kind);
    const double L = d(kinds.of(kind));
    add_task_bytes(layer_forward_tasks(lm, p), M * L, v);
    // Full recompute: the layers it names; selective: every layer (no collectives today).
    const double R = p.recompute == Recompute::kFull ? d(recomputed.of(kind)) : L;
    add_task_bytes(layer_recompute_tasks(lm, p), M * R, v);
    add_task_bytes(layer_backward_tasks(lm, p), M * L, v);
  }
  if (stage_holds_embedding(p, stage)) {
    add_task_bytes(embedding_forward_tasks(m, p), M, v);
    add_task_bytes(embedding_backward_tasks(m, p), M, v);
  }
  if (stage_holds_head(p, stage)) {
    add_task_bytes(head_forward_tasks(m, p), M, v);
    add_task_bytes(head_backward_tasks(m, p), M, v);
  }
  // Pipeline: each model chunk sends its output forward unless it is the last chunk, and its
  // input gradient backward unless it is the first, once per micro-batch; not when the
  // neighbour chunk is on this stage (the V's turn, chunk_stage). DualPipe: local chunk c
  // carries direction c, its neighbours on that direction's stages.
  // Each message received runs pipeline_receive_tasks (the scatter/gather's TP all-gather).
  const double msg = d(pipeline_message_bytes(m, p));
  const std::vector<Task> receive = pipeline_receive_tasks(m, p);
  for (std::int64_t c = 0; c < p.virtual_stages; ++c) {
    const std::int64_t chunk = stage_chunk(p, stage, c);
    const std::int64_t dir = p.schedule == Schedule::kDualPipe ? c : 0;
    if (chunk < p.num_chunks() - 1 && chunk_stage(p, chunk + 1, dir) != stage) {
      v.pp_bytes += msg * M;        // the activation sent forward
      add_task_bytes(receive, M, v);  // the gradient received back
    }
    if (chunk > 0 && chunk_stage(p, chunk - 1, dir) != stage) {
      v.pp_bytes += msg * M;
      add_task_bytes(receive, M, v);
    }
  }
  for (const ParamBlock& b : param_blocks_on_stage(m, p, stage)) {
    for (DpPoint point : {DpPoint::kBeforeForward, DpPoint::kBeforeRecompute,
                          DpPoint::kBeforeBackward, DpPoint::kAfterBackward,
                          DpPoint::kAfterLastBackward, DpPoint::kAfterOptimizer}) {
      add_task_bytes(dp_block_tasks(p, b, point), d(dp_point_count(p, b, point)), v);
    }
  }
  const OffloadTraffic off = offload_traffic_on_stage(m, p, stage);
  v.host_bytes = off.device_to_host_bytes + off.host_to_device_bytes;
  // Offloaded checkpoints: each recomputed layer's input to the host and back, per micro-batch.
  if (p.offload_checkpoints)
    v.host_bytes += 2.0 * checkpoint_input_bytes(m, p) * M * d(recomputed.dense + recomputed.moe);
  return v;
}

// ---------------------------------------------------------------------------------------------
// Optimizer

double optimizer_step_bytes_per_param(const Plan& p) {
  const StateBytesPerParam s = state_bytes_per_param(p);
  // Read the gradient, read and write every optimizer state, write the weight.
  return s.gradients + 2.0 * s.optimizer + s.weights;
}

double optimizer_params_on_rank(const ModelSpec& m, const Plan& p, std::int64_t stage) {
  const StageParameters sp = parameters_on_stage(m, p, stage);
  if (p.zero_stage >= 1) return sp.dense / d(p.zero_shard_ranks()) + sp.expert / d(expert_dp_cp(p));
  return sp.total();
}

Task optimizer_task(const ModelSpec& m, const Plan& p, std::int64_t stage) {
  return memory("optimizer",
                optimizer_params_on_rank(m, p, stage) *
                    optimizer_step_bytes_per_param(p),
                MemoryKernel::kOptimizer);
}

}  // namespace trainplan
