// The geometry both stage models share; see stage_model.h.
#include "executor/stage_model.h"

#include <vector>

namespace trainplan::executor {

namespace {
std::vector<Task> without_comm(std::vector<Task> tasks) {
  std::erase_if(tasks, [](const Task& t) { return t.kind == TaskKind::kComm; });
  return tasks;
}

// The layer blocks of each of the stage's chunks, found by their layers: the blocks are in
// param_blocks_on_stage's order, which is chunk after chunk in local order, except on
// dualpipe's second half of stages, which lists its two chunks in model order (so that a stage
// and its mirror pair up block by block).
std::vector<std::vector<std::size_t>> chunk_layer_blocks(const ModelSpec& model,
                                                         const Plan& plan, std::int64_t stage,
                                                         const std::vector<BlockLayout>& layouts) {
  const std::vector<std::int64_t> layers = chunk_layers(plan, model);
  std::vector<std::int64_t> first_layer(layers.size(), 0);
  for (std::size_t c = 1; c < layers.size(); ++c)
    first_layer[c] = first_layer[c - 1] + layers[c - 1];
  std::vector<std::vector<std::size_t>> out;
  std::size_t found = 0;
  for (std::int64_t v = 0; v < plan.virtual_stages; ++v) {
    const auto c = static_cast<std::size_t>(stage_chunk(plan, stage, v));
    std::vector<std::size_t>& blocks = out.emplace_back();
    for (std::size_t b = 0; b < layouts.size(); ++b)
      if (layouts[b].kind == BlockKind::kLayer && layouts[b].layer >= first_layer[c] &&
          layouts[b].layer < first_layer[c] + layers[c])
        blocks.push_back(b);
    TRAINPLAN_CHECK(static_cast<std::int64_t>(blocks.size()) == layers[c])
        << "stage " << stage << " holds " << blocks.size() << " of chunk " << c << "'s "
        << layers[c] << " layers";
    found += blocks.size();
  }
  const std::size_t edges = (stage_holds_embedding(plan, stage) ? 1 : 0) +
                            (stage_holds_head(plan, stage) ? 1 : 0);
  TRAINPLAN_CHECK(found + edges == layouts.size()) << "block count mismatch";
  return out;
}
}  // namespace

StageGeometry stage_geometry(const ModelSpec& model, const Plan& plan, std::int64_t stage,
                             std::int64_t tp_rank, std::int64_t cp_rank,
                             std::int64_t ep_rank, std::int64_t expert_tp_rank) {
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
  x.first = stage_holds_embedding(plan, stage);
  x.last = stage_holds_head(plan, stage);
  g.layouts = stage_layouts(model, plan, stage, tp_rank, ep_rank, expert_tp_rank);
  g.chunk_blocks = chunk_layer_blocks(model, plan, stage, g.layouts);
  g.num_model_chunks = plan.num_chunks();
  for (std::int64_t v = 0; v < plan.virtual_stages; ++v)
    g.model_chunks.push_back(stage_chunk(plan, stage, v));
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
