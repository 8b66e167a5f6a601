// The geometry both stage models share; see stage_model.h.
#include "executor/stage_model.h"

#include <vector>

namespace trainplan::executor {

namespace {
std::vector<Task> without_comm(std::vector<Task> tasks) {
  std::erase_if(tasks, [](const Task& t) { return t.kind == TaskKind::kComm; });
  return tasks;
}
}  // namespace

StageGeometry stage_geometry(const ModelSpec& model, const Plan& plan, std::int64_t stage,
                             std::int64_t tp_rank, std::int64_t cp_rank,
                             std::int64_t ep_rank) {
  StageGeometry g;
  StageShape& x = g.shape;
  x.stage = stage;
  x.tp_rank = tp_rank;
  x.tp = plan.tp;
  x.cp_rank = cp_rank;
  x.cp = plan.cp;
  x.seq_len = model.seq_len;
  x.seq_tokens = model.seq_len / plan.cp;
  x.tokens = plan.micro_batch_size * x.seq_tokens;
  x.sp = plan.sequence_parallel && plan.tp > 1;
  x.local_tokens = x.sp ? x.tokens / plan.tp : x.tokens;
  x.first = stage == 0;
  x.last = stage == head_stage(plan);
  g.layouts = stage_layouts(model, plan, stage, tp_rank, ep_rank);
  // Layer blocks follow the embedding block, chunk after chunk (param_blocks_on_stage order).
  const std::vector<std::int64_t> layers = chunk_layers(plan, model);
  std::size_t next = x.first ? 1 : 0;
  for (std::int64_t v = 0; v < plan.virtual_stages; ++v) {
    std::vector<std::size_t>& blocks = g.chunk_blocks.emplace_back();
    for (std::int64_t i = 0; i < layers[static_cast<std::size_t>(stage_chunk(plan, stage, v))]; ++i)
      blocks.push_back(next++);
  }
  TRAINPLAN_CHECK(next + (x.last ? 1 : 0) == g.layouts.size()) << "block count mismatch";
  // Each backend's attention is one kernel call whichever attention the plan names.
  g.attention_task =
      tasks_between(without_comm(layer_forward_tasks(model, plan)), "qkv", "out_proj");
  g.attention_bwd_task = tasks_between(without_comm(layer_backward_tasks(model, plan)),
                                       "out_proj_wgrad", "qkv_dgrad");
  g.head_reads_table = model.tie_word_embeddings && !splits_tied_embedding(plan);
  return g;
}

std::pair<std::size_t, std::int64_t> StageModelBase::head_matrix() const {
  if (geo_.head_reads_table) return {0, geo_.layouts[0].tensors[kWte].offset};
  return {geo_.layouts.size() - 1, geo_.layouts.back().tensors[kHeadW].offset};
}

}  // namespace trainplan::executor
