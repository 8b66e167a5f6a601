// Parameter layout of one pipeline stage on one rank: the blocks of
// param_blocks_on_stage (core/cost/cost_model.h) as flat float32 buffers, each a list of tensor
// slices. A tensor is named as in the whole model ("h3.wq"); this rank holds a rectangular
// slice of it (Megatron's column/row split over tp). Initial values depend only on the seed,
// the name and the element's coordinates in the full tensor, so every layout starts from the
// same weights.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/cost/cost_model.h"
#include "core/model_spec.h"
#include "core/plan.h"
#include "core/status.h"

namespace trainplan::executor {

struct TensorSlice {
  std::string name;                     // in the full model: "wte", "h0.wq", "lnf.g", ...
  std::int64_t full_rows = 1, full_cols = 1;
  std::int64_t row0 = 0, rows = 1;      // this rank's rows of the full tensor
  std::int64_t col0 = 0, cols = 1;      // and columns
  std::int64_t offset = 0;              // first element in the block's flat buffer
  std::int64_t valid_rows = 0;          // rows >= valid_rows are vocabulary padding (zero)
  float init_std = 0;                   // normal(0, init_std); 0: constant init_value
  float init_value = 0;
  bool decay = false;                   // AdamW weight decay (matrices only)
  bool tied = false;                    // the tied embedding table (pp > 1 keeps two copies)
  bool sp_norm = false;                 // a norm (or an MoE router) in the sequence-parallel
                                        // region (tp > 1, sp): its gradient is summed over TP
  std::int64_t size() const { return rows * cols; }
};

struct BlockLayout {
  BlockKind kind = BlockKind::kLayer;
  std::int64_t layer = -1;
  std::vector<TensorSlice> tensors;
  std::int64_t size = 0;  // elements, before padding to a multiple of dp
  // An MoE layer's experts (this rank's num_experts / ep of them) follow its dense tensors at
  // expert_offset, the dense part padded to a multiple of the dense gradient group
  // (Plan::zero_shard_ranks) and the expert part to one of the expert group (expert_dp_cp), as
  // dp_block_tasks pads each part: the two parts are summed over different groups. -1: none.
  std::int64_t expert_offset = -1;
  std::int64_t expert_size = 0;  // padded
};

// Element ranges (offset, count) of a block's flat buffer.
using Ranges = std::vector<std::pair<std::int64_t, std::int64_t>>;

// Calls fn(tensor, row, col, at) for every element at offset `at` in [begin, end) of a block laid
// out as `l`, with its coordinates in the full tensor (both backends' for_each_param).
template <class Fn>
void for_each_element(const BlockLayout& l, std::int64_t begin, std::int64_t end, Fn&& fn) {
  end = std::min(end, l.size);
  for (const TensorSlice& t : l.tensors)
    for (std::int64_t j = std::max(begin, t.offset); j < std::min(end, t.offset + t.size()); ++j) {
      const std::int64_t local = j - t.offset;
      fn(t, t.row0 + local / t.cols, t.col0 + local % t.cols, j);
    }
}

// Calls fn(offset, count, decay) over [begin, end) in runs that AdamW decays (inside one of
// `decayed`, sorted and disjoint) or does not. Both executors keep the decayed tensors as
// ranges, not as a mask per element: a byte per parameter is 1/16 of the mixed-precision model
// state, which the cost model does not count.
template <class Fn>
void for_each_decay_run(const Ranges& decayed, std::int64_t begin, std::int64_t end, Fn&& fn) {
  std::int64_t at = begin;
  for (auto [off, n] : decayed) {
    const std::int64_t from = std::max(off, at), to = std::min(off + n, end);
    if (from >= to) continue;
    if (from > at) fn(at, from - at, false);
    fn(from, to - from, true);
    at = to;
  }
  if (at < end) fn(at, end - at, false);
}

// AdamW's settings (Loshchilov & Hutter 2019), shared by both backends' updates; the betas and
// decay are GPT-3's (Brown et al. 2020, appendix B).
struct AdamW {
  float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.1f;
};

// Indices into BlockLayout::tensors of a layer block.
enum LayerTensor : std::size_t {
  kLn1G, kLn1B, kWq, kBq, kWk, kBk, kWv, kBv, kWo, kBo,
  kLn2G, kLn2B, kW1, kB1, kW2, kB2, kNumLayerTensors
};
// An MoE layer (layer_is_moe) keeps kLn1G..kLn2B, then its router (h x num_experts, no bias),
// then the shared experts' kSharedW1..kSharedB2 when the model has them, then each local
// expert's w1, b1, w2, b2 (expert_tensor()).
enum MoeLayerTensor : std::size_t { kRouter = kW1, kSharedW1, kSharedB1, kSharedW2, kSharedB2 };
enum ExpertTensor : std::size_t { kExpW1, kExpB1, kExpW2, kExpB2, kTensorsPerExpert };
// Index into BlockLayout::tensors of local expert j's tensor `which` in an MoE layer block.
inline std::size_t expert_tensor(bool shared_experts, std::int64_t j, ExpertTensor which) {
  return (shared_experts ? kSharedB2 + 1 : kRouter + 1) +
         static_cast<std::size_t>(j) * kTensorsPerExpert + which;
}
enum EmbeddingTensor : std::size_t { kWte, kWpe };
enum HeadTensor : std::size_t { kLnfG, kLnfB, kHeadW };  // kHeadW only when the head holds a matrix

// What the CPU executor supports, as a reason when it does not (GPT shape, fp32, AdamW; MoE
// with expert parallelism at tp = cp = 1 and ZeRO 0). Offload (Plan::offload) is the CPU
// backend's (executor/cpu/cpu_stage.h); the CUDA backend refuses it itself.
Status check_executor_supports(const ModelSpec& model, const Plan& plan);

// How the tokens of a micro-batch are split between the ranks that route them, for an expert
// capacity (ModelSpec::moe_capacity_factor): each share drops over its own capacity, computed
// on its own tokens, as Megatron-Core's router computes it on the tokens it sees (moe_utils.py's
// topk_routing_with_score_function: get_capacity(num_tokens * topk) over its logits' rows, a
// cp rank's part of the sequences and with sequence parallelism a TP rank's part of those).
// cp: context parallelism's load-balanced chunks (data.h's cp_position); tp: then the
// sequence-parallel rows of each cp share (a folded layout over tp routes them apart). A rank
// of such a plan routes one share; the single-process reference of its run takes the plan's
// (TrainOptions::moe_capacity_shares) and drops share by share. 1, 1: the whole micro-batch.
struct MoeCapacityShares {
  std::int64_t cp = 1, tp = 1;
};

// The blocks of `stage` for TP rank `tp_rank`, EP rank `ep_rank` (which num_experts / ep
// experts it holds) and, folded, expert-TP rank `expert_tp_rank` (which slice of each expert's
// MLP), in param_blocks_on_stage order. Their dense and expert sizes equal that function's
// dense_params and expert_params (checked).
std::vector<BlockLayout> stage_layouts(const ModelSpec& model, const Plan& plan,
                                       std::int64_t stage, std::int64_t tp_rank,
                                       std::int64_t ep_rank = 0,
                                       std::int64_t expert_tp_rank = 0);

// The initial value of element (row, col) of the full tensor `name`.
float init_value(std::uint64_t seed, const TensorSlice& t, std::int64_t row, std::int64_t col);
// Fills `data` (t.size()) with this rank's slice of the initial tensor.
void init_slice(std::uint64_t seed, const TensorSlice& t, float* data);

}  // namespace trainplan::executor
