// What an MoE layer of the CPU stage model (executor/cpu/gpt.h) keeps from its forward for its
// backward. The layer itself is StageModel::moe_forward / moe_backward (executor/cpu/moe.cc):
//  - router: logits = y Wr (h x num_experts, no bias), softmax over the experts, the top k
//    experts of each token, ties to the lower expert index so that every layout routes alike;
//    a token's output is the sum of its k experts' outputs weighted by their probabilities
//    (GShard, Lepikhin et al. 2020, sec. 2.2, without renormalising the k gates; Switch
//    Transformer, Fedus et al. 2022, eq. 2, for k = 1);
//  - dispatch and combine: each token's row goes to the EP rank holding each of its experts and
//    the result comes back, over all_to_all_v in the ep group (the cost model's ep_dispatch and
//    ep_combine, and their backward ep_combine_bwd and ep_dispatch_bwd). Dropless by default:
//    every token reaches its k experts, as Megatron-Core's default (moe_expert_capacity_factor
//    None); with the model's moe_capacity_factor, each expert takes at most its capacity of the
//    assignments a rank routes of a micro-batch and drops the rest (moe_expert_capacity below;
//    params.h's MoeCapacityShares where ranks route parts of a micro-batch);
//  - experts: this EP rank's num_experts / ep GELU MLPs, each on the rows routed to it;
//  - shared experts (shared_expert_ffn_size > 0): a dense MLP on every token, after the routed
//    ones (Megatron-Core's SharedExpertMLP, as the cost model orders it);
//  - the load-balancing loss of Switch Transformer (Fedus et al. 2022, eqs. 4-6):
//    coeff * E * sum_i f_i P_i over the micro-batch's T tokens, f_i the fraction of the T*k
//    token-expert assignments that went to expert i (as Megatron-Core's
//    switch_load_balancing_loss_func counts top-k) and P_i the mean router probability of
//    expert i. Each micro-batch's term is weighted by 1 / micro-batches in the global batch, so
//    the objective is the same whatever the layout. It adds to the gradient only (the reported
//    loss is the language-model loss) and needs no communication: f and P are the
//    micro-batch's own.
//
// Tested against the single-process run under mpirun by tests/executor/parallel_check.cc (ep2,
// ep2 x dp2, ep2 x pp2) and against finite differences by tests/executor/cpu/gpt_test.cc.
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <vector>

#include "executor/cpu/kernels.h"

namespace trainplan::executor {

// The load-balancing loss coefficient when none is given: Switch Transformer's alpha = 1e-2
// (Fedus et al. 2022, sec. 2.2), also Megatron-Core examples' moe_aux_loss_coeff.
inline constexpr float kDefaultMoeAuxLossCoeff = 1e-2f;

// The routed experts' buffers are sized by the most rows this rank's experts can receive
// (moe_capacity_rows: the capacity, or without one the dropless bound), not by what the routing
// sends them, so that their sizes, and so the buffers, are the same from step to step (no step
// allocates: workspace.h); the rows in use are the first expert_row0[local], local expert j's
// at [expert_row0[j], expert_row0[j + 1]). Untouched rows cost no memory: the pages are faulted
// in as rows are first written.
struct MoeCache {
  Mat probs;                              // (T, E) router softmax
  std::vector<std::int32_t> experts;      // (T, k) chosen experts, best first
  std::vector<std::int64_t> row_of_pair;  // (T*k) row of pair t*k+j in the dispatch buffer;
                                          // -1: dropped over its expert's capacity
  std::vector<std::int64_t> assigned;     // (E) token-expert assignments per expert, over the
                                          // micro-batch's whole sequences (summed over cp)
  std::int64_t aux_tokens = 0;            // the tokens they come from (T x cp)
  std::vector<std::int64_t> send_counts, recv_counts;  // floats per EP member
  std::vector<std::int64_t> recv_rows;    // (ep, local experts) rows received per expert;
                                          // folded with expert_tp > 1, (expert_tp, ep, local):
                                          // what each expert-TP member received, gathered
  std::vector<std::int64_t> gather_counts;  // (expert_tp) floats each expert-TP member received
  std::vector<std::int64_t> expert_row0;  // (local + 1) each local expert's first row in x, a, g
  Mat x, a, g;                            // (capacity, h), (capacity, f), (capacity, f): the
                                          // local experts' input rows, fc1 out, GELU out
  Mat combined;                           // (T*k, h) expert outputs, dispatch order
  Mat shared_a, shared_g;                 // shared experts: fc1 out, GELU out
  float aux_weight = 0;                   // coeff / micro-batches in the global batch
};

// An expert's capacity: the most of a micro-batch's token-expert assignments on one rank it
// takes, C = ceil(T*k / E * factor) (Megatron-Core's get_capacity with num_tokens = T*k, as
// apply_router_token_dropping calls it: megatron/core/transformer/moe/moe_utils.py at NVIDIA/
// Megatron-LM 00611e6; GShard's expert capacity, Lepikhin et al. 2020, sec. 2.2; Switch
// Transformer's tokens per batch / experts x capacity factor, Fedus et al. 2022, eq. 3). When
// more chose it, it keeps the C with the highest router probability (Megatron-Core's default
// moe_token_drop_policy "probs"; ties to the earlier token, so that every layout drops alike)
// and drops the rest: the token gets nothing from that expert (its gate counts 0 and gets no
// gradient) and the residual carries it on, as if it had chosen one expert fewer. The
// load-balancing loss counts the assignments before dropping, as Megatron-Core's router (its
// tokens_per_expert come from a top-k of their own, router.py aux_loss_load_balancing).
// `factor` unset, or C >= T (an expert can take every token): 0, nothing is ever dropped.
inline std::int64_t moe_expert_capacity(std::int64_t tokens, std::int64_t k,
                                        std::int64_t experts, std::optional<double> factor) {
  if (!factor) return 0;
  const double c = std::ceil(static_cast<double>(tokens * k) / static_cast<double>(experts) *
                             *factor);
  return c >= static_cast<double>(tokens) ? 0 : static_cast<std::int64_t>(c);
}

// The most rows an EP rank's experts can receive from a micro-batch of T tokens: every member
// of the ep group sends each token at most once to each of this rank's `local` experts, at most
// k times in all, and, with a capacity C (moe_expert_capacity; 0: none), at most C rows to each.
inline std::int64_t moe_capacity_rows(std::int64_t members, std::int64_t tokens, std::int64_t k,
                                      std::int64_t local, std::int64_t capacity = 0) {
  const std::int64_t dropless = tokens * (k < local ? k : local);
  return members * (capacity > 0 && local * capacity < dropless ? local * capacity : dropless);
}

// The most rows one expert can receive from a micro-batch of T tokens: each member of the ep
// group sends it each token at most once, and at most its capacity. The size a zero-bubble W
// pass would copy an expert's rows at (StageModel::defer_weight_grad's capacity_rows), so that
// the pools find them again; it copies none today (the inputs are read in the cache, the
// output gradients written into buffers held for W: moe_experts_backward), but the capacity is
// still passed so that any copy of a routed operand keeps a fixed size.
inline std::int64_t moe_expert_capacity_rows(std::int64_t members, std::int64_t tokens,
                                             std::int64_t capacity = 0) {
  return members * (capacity > 0 && capacity < tokens ? capacity : tokens);
}

// The routing's bookkeeping in moe.cc, kept from call to call (index vectors; the float
// temporaries come from the stage model's scratch arena, workspace.h).
struct MoeScratch {
  std::vector<std::int32_t> order;                // moe_route's top k: (E)
  std::vector<std::int64_t> pair_at, per_expert;  // moe_route: (E), (ep * local)
  std::vector<std::int64_t> by_expert, kept;      // moe_drop_over_capacity: (T*k), (E)
  std::vector<std::int64_t> cp_mine, cp_all;      // moe_aux_loss, cp > 1: (cp * E) each
  std::vector<std::int64_t> etp_mine;             // moe_route, expert_tp > 1: (etp * ep * local)
  std::vector<std::int64_t> share_pairs, share_kept;  // moe_drop_over_capacity with shares
};

}  // namespace trainplan::executor
