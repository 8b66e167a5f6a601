// What an MoE layer of the CPU stage model (executor/cpu/gpt.h) keeps from its forward for its
// backward. The layer itself is StageModel::moe_forward / moe_backward (executor/cpu/moe.cc):
//  - router: logits = y Wr (h x num_experts, no bias), softmax over the experts, the top k
//    experts of each token, ties to the lower expert index so that every layout routes alike;
//    a token's output is the sum of its k experts' outputs weighted by their probabilities
//    (GShard, Lepikhin et al. 2020, sec. 2.2, without renormalising the k gates; Switch
//    Transformer, Fedus et al. 2022, eq. 2, for k = 1);
//  - dispatch and combine: each token's row goes to the EP rank holding each of its experts and
//    the result comes back, over all_to_all_v in the ep group (the cost model's ep_dispatch and
//    ep_combine, and their backward ep_combine_bwd and ep_dispatch_bwd). Dropless: every
//    token reaches its k experts, as Megatron-Core's default (moe_expert_capacity_factor None);
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

#include <cstdint>
#include <vector>

#include "executor/cpu/kernels.h"

namespace trainplan::executor {

// The load-balancing loss coefficient when none is given: Switch Transformer's alpha = 1e-2
// (Fedus et al. 2022, sec. 2.2), also Megatron-Core examples' moe_aux_loss_coeff.
inline constexpr float kDefaultMoeAuxLossCoeff = 1e-2f;

struct MoeCache {
  Mat probs;                              // (T, E) router softmax
  std::vector<std::int32_t> experts;      // (T, k) chosen experts, best first
  std::vector<std::int64_t> row_of_pair;  // (T*k) row of pair t*k+j in the dispatch buffer
  std::vector<std::int64_t> assigned;     // (E) token-expert assignments per expert, over the
                                          // micro-batch's whole sequences (summed over cp)
  std::int64_t aux_tokens = 0;            // the tokens they come from (T x cp)
  std::vector<std::int64_t> send_counts, recv_counts;  // floats per EP member
  std::vector<std::int64_t> recv_rows;    // (ep, local experts) rows received per expert
  std::vector<Mat> x, a, g;               // per local expert: input rows, fc1 out, GELU out
  Mat combined;                           // (T*k, h) expert outputs, dispatch order
  Mat shared_a, shared_g;                 // shared experts: fc1 out, GELU out
  float aux_weight = 0;                   // coeff / micro-batches in the global batch
};

}  // namespace trainplan::executor
