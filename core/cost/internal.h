// Helpers shared by the cost model's files (core/cost/*.cc), not part of its interface: the
// parameter blocks' shapes, a layer's shape on one rank and the task builders. Each is defined
// in the file that answers its question (named below). Tested through
// tests/core/cost_model_test.cc.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string_view>
#include <vector>

#include "core/cost/cost_model.h"

namespace trainplan::cost_internal {

inline double d(std::int64_t v) { return static_cast<double>(v); }

// ---- parameters.cc
ParamBlock embedding_block(const ModelSpec& m, const Plan& p);
ParamBlock head_block(const ModelSpec& m, const Plan& p);
// A layer's block; `lm` is the layer's view (layer_model).
ParamBlock layer_block(const ModelSpec& lm, const Plan& p);

// Calls fn once for each distinct block on the stage (embedding, one layer of each kind, head),
// without allocating: what a maximum over param_blocks_on_stage needs.
template <typename Fn>
void for_each_block_shape_on_stage(const ModelSpec& m, const Plan& p, std::int64_t stage, Fn fn) {
  if (stage_holds_embedding(p, stage)) fn(embedding_block(m, p));
  const LayerKindCounts kinds = layer_kinds_on_stage(p, m, stage);
  for (LayerKind kind : {LayerKind::kDense, LayerKind::kMoe})
    if (kinds.of(kind) > 0)
      fn(with_layer_model(m, kind, [&](const ModelSpec& lm) { return layer_block(lm, p); }));
  if (stage_holds_head(p, stage)) fn(head_block(m, p));
}

// Calls fn(first layer, layers) for each model chunk on the stage, as chunk_layers() splits them
// (evenly, the first L mod chunks holding one more), without allocating: the planner calls
// this per candidate.
template <typename Fn>
void for_each_chunk_on_stage(const Plan& p, const ModelSpec& m, std::int64_t stage, Fn fn) {
  const std::int64_t chunks = p.num_chunks(), base = m.num_layers / chunks,
                     extra = m.num_layers % chunks;
  for (std::int64_t v = 0; v < p.virtual_stages; ++v) {
    const std::int64_t c = stage_chunk(p, stage, v);
    if (p.layers_per_stage.empty()) {
      fn(c * base + std::min(c, extra), base + (c < extra ? 1 : 0));
      continue;
    }
    std::int64_t first = 0;
    for (std::int64_t i = 0; i < c; ++i) first += p.layers_per_stage[static_cast<std::size_t>(i)];
    fn(first, p.layers_per_stage[static_cast<std::size_t>(c)]);
  }
}

// ---- tasks.cc
// One layer's dimensions on one rank for one micro-batch.
struct Shape {
  double e;           // bytes per element of activations and weights
  // s: the tokens of one sequence on this rank, seq_len/cp; s_full: the whole sequence, whose
  // keys and values a context-parallel rank's queries attend to.
  std::int64_t s, s_full, cp, b, t, h, q, kv, hd, f, heads_per_rank;
  std::int64_t vd, vw, ow;     // value head width, V's width, the attention output's width
  std::int64_t shared_f;       // MoE layers: the shared experts' inner width (0: none)
  // Multi-head latent attention: latent widths and the rotary key width (0 without MLA).
  std::int64_t ql, kvl, rope;
  // Width of the attention block's input as its TP collectives carry it: h, or with MLA the
  // latents (and the input itself where queries are projected from it directly).
  std::int64_t entry;
  std::int64_t tokens;         // T = s*b, this rank's tokens of the micro-batch
  std::int64_t norm_tokens;    // T/t with sequence parallel, else T
  // MoE layers: the experts' tensor-parallel degree (Plan::expert_tp_size), whether each rank
  // routes its own rows (Plan::moe_routes_own_rows: folded, or carved with SP; each rank routes
  // its norm_tokens, the expert_tp ranks of an expert gather what the all-to-all brought them),
  // and the tokens this rank routes: norm_tokens then, else T (carved without SP: every TP rank
  // routes the gathered tokens).
  std::int64_t etp, moe_tokens;
  bool own_rows;
  bool sp, dropout, fused, swiglu, moe, mla;
  // Plan::elementwise eager, where it changes the kernels: an RMSNorm, rotary embedding on the
  // query and key heads (not MLA's), a SwiGLU. PyTorch eager's LayerNorm and GELU are one ATen
  // kernel each (native_layer_norm, gelu), as the fused ones.
  bool eager_norm, eager_rope, eager_swiglu;
  // Context parallelism: how the cp ranks move keys and values (Plan::cp_comm), and whether
  // PyTorch's ring runs its merges as eager ATen kernels (Plan::elementwise eager) or compiled.
  CpComm cp_comm;
  bool eager_merge;
  // K's and V's widths as the attention call receives them, which a context-parallel ring moves:
  // kv and vw, or with Plan::cp_kv_expanded every query head's (q and ow).
  std::int64_t ring_kv, ring_vw;
};
Shape shape_of(const ModelSpec& m, const Plan& p);

Task gemm(std::string_view name, std::int64_t m, std::int64_t n, std::int64_t k,
          std::int64_t batch, double e);
Task memory(std::string_view name, double bytes, MemoryKernel kernel);
Task comm(std::string_view name, Collective c, CommGroup g, std::int64_t group_size,
          double message_bytes);
// Drops collectives over a group of one rank: they move nothing and cost nothing.
std::vector<Task> without_trivial_comm(std::vector<Task> tasks);
// Context parallelism: the keys and values of the whole sequence on this TP rank,
// b*s*(k + v)/t elements in the activations' precision: the all-gather's message (collectives.h: S
// is the gathered size) and the reduce-scatter's of their gradients (S is the unscattered
// size). All-gather based CP as Llama 3 (arXiv:2407.21783 sec. 3.3.2) and Transformer Engine's
// AttnFuncWithCPAndKVAllGather run it.
double cp_kv_bytes(const Shape& x);
// Whether a task belongs to the attention core of a context-parallel layer: its attention
// kernels, and the copies and merges around them (tasks named "cp_..."). Selective-op
// recompute saves the attention's output, so these do not run again.
bool is_cp_attention_task(const Task& t);
// The layer's matmuls, one task each, in forward order as torchtitan issues them (the fused QKV
// GEMM as wq, wk, wv; a gated MLP's first GEMM as w1, w3): what Recompute::kSelectiveOp counts.
std::vector<Task> op_checkpoint_matmuls(const ModelSpec& m, const Plan& p);

}  // namespace trainplan::cost_internal
