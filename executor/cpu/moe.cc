// An MoE layer's MLP on the CPU stage model; see moe.h. Each all-to-all is named by its
// cost-model task (core/cost/tasks.cc, add_mlp_forward and the MoE part of
// layer_backward_tasks), and each stretch of math between them by the compute task it is.
#include <algorithm>
#include <numeric>
#include <utility>

#include "executor/cpu/gpt.h"
#include "executor/cpu/moe.h"

namespace trainplan::executor {

namespace {

// The k best experts of each token by probability, ties to the lower index (so that the
// parallel and single-process runs, whose probabilities agree, route alike), into `out` (T*k);
// `order` (E) is its workspace.
void top_k(const Mat& probs, std::int64_t k, std::vector<std::int32_t>& order,
           std::vector<std::int32_t>& out) {
  const std::int64_t T = probs.rows(), E = probs.cols();
  out.resize(static_cast<std::size_t>(T * k));
  order.resize(static_cast<std::size_t>(E));
  for (std::int64_t t = 0; t < T; ++t) {
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](std::int32_t a, std::int32_t b) {
                        const float pa = probs(t, a), pb = probs(t, b);
                        return pa > pb || (pa == pb && a < b);
                      });
    std::copy_n(order.begin(), k, out.begin() + t * k);
  }
}

// `row` (T) is its workspace: the rows' maxima, then their sums.
void softmax_rows(const MatMap& logits, Eigen::Map<Vec>& row, Mat& probs) {
  row = logits.rowwise().maxCoeff();
  probs = (logits.colwise() - row).array().exp().matrix();
  row = probs.rowwise().sum();
  probs.array().colwise() /= row.array();
}

// The rows this rank's experts received, in two orders: as all_to_all_v delivers them (member
// order: each EP member's rows for local expert 0, 1, ...) and expert-major (local expert j's
// rows from every member together, at MoeCache::expert_row0[j]), where each expert's GEMMs run.
struct ExpertRows {
  std::int64_t members = 1, local = 1;
  const MoeCache* c = nullptr;
  std::int64_t count(std::int64_t s, std::int64_t j) const {
    return c->recv_rows[static_cast<std::size_t>(s * local + j)];
  }
  std::int64_t row0(std::int64_t j) const { return c->expert_row0[static_cast<std::size_t>(j)]; }
  std::int64_t rows(std::int64_t j) const { return row0(j + 1) - row0(j); }
  std::int64_t total() const { return row0(local); }
  // Copies the rows of `from` (`width` floats each) into `to` in the other order.
  void permute(const float* from, float* to, std::int64_t width, bool to_expert_major) const {
    std::int64_t member_row = 0;
    for (std::int64_t s = 0; s < members; ++s)
      for (std::int64_t e = 0; e < local; ++e) {
        std::int64_t expert_row = row0(e);
        for (std::int64_t before = 0; before < s; ++before) expert_row += count(before, e);
        const std::int64_t n = count(s, e);
        const std::int64_t src = to_expert_major ? member_row : expert_row;
        const std::int64_t dst = to_expert_major ? expert_row : member_row;
        std::copy_n(from + src * width, n * width, to + dst * width);
        member_row += n;
      }
  }
};

// The sources of a layer's expert rows are the ep members, and folded with expert_tp > 1 those
// of every expert-TP member in turn (MoeCache::recv_rows).
ExpertRows expert_rows(const ModelSpec& m, const Plan& p, const MoeCache& c) {
  const std::int64_t local = m.num_experts / p.ep;
  return {static_cast<std::int64_t>(c.recv_rows.size()) / local, local, &c};
}

// Rows [row0, row0 + n) of a buffer of `cols` floats per row, as a matrix.
MatMap rows_of(float* data, std::int64_t cols, std::int64_t row0, std::int64_t n) {
  return MatMap(data + row0 * cols, n, cols);
}
ConstMatMap const_rows_of(const float* data, std::int64_t cols, std::int64_t row0,
                          std::int64_t n) {
  return ConstMatMap(data + row0 * cols, n, cols);
}
ConstMatMap rows_of(const Mat& m, std::int64_t row0, std::int64_t n) {
  return ConstMatMap(m.data() + row0 * m.cols(), n, m.cols());
}

}  // namespace

// Router, top-k, token dropping at the capacity, the dispatch plan (which rows go to which EP
// member) and the counts exchange.
void StageModel::moe_route(std::size_t block, const ConstMatRef& y, MoeCache& c, MatRef send) {
  const BlockLayout& l = layouts_[block];
  const float* p = access_.params(block);
  MoeScratch& w = moe_scratch_;
  const std::int64_t h = model_.hidden_size, E = model_.num_experts,
                     k = model_.experts_per_token, T = y.rows();
  const std::int64_t members = comm_.group_size(CommGroup::kEp), local = E / plan_.ep;
  // coeff / micro-batches in the global batch (loss_scale_ is 1 / its tokens).
  c.aux_weight = static_cast<float>(model_.router_aux_loss_coef.value_or(kDefaultMoeAuxLossCoeff)) *
                 loss_scale_ *
                 static_cast<float>(plan_.micro_batch_size * model_.seq_len);
  TraceSpan span(trace_);
  span.begin("router");
  {
    ScratchArena::Frame frame(arena_);
    MatMap logits = arena_.mat(T, E);
    linear_forward(y, ConstMatMap(p + l.tensors[kRouter].offset, h, E), nullptr, logits);
    Eigen::Map<Vec> row = arena_.vec(T);
    softmax_rows(logits, row, take(c.probs, T, E));
  }
  top_k(c.probs, k, w.order, c.experts);
  for (std::int32_t e : c.experts)  // FNV-1a over the choices
    routing_hash_ = (routing_hash_ ^ static_cast<std::uint64_t>(e + 1)) * 0x100000001b3ULL;
  if (routing_sink_ != nullptr && !recomputing_) {
    routing_sink_->probs.insert(routing_sink_->probs.end(), c.probs.data(),
                                c.probs.data() + c.probs.size());
    routing_sink_->experts.insert(routing_sink_->experts.end(), c.experts.begin(),
                                  c.experts.end());
  }
  // Token-expert assignments per expert, before dropping (the load-balancing loss counts them).
  c.assigned.assign(static_cast<std::size_t>(E), 0);
  for (std::int32_t e : c.experts) ++c.assigned[static_cast<std::size_t>(e)];
  moe_drop_over_capacity(c);
  if (expert_capacity_ > 0)  // which assignments were dropped is part of the routing too
    for (std::int64_t row : c.row_of_pair)
      routing_hash_ = (routing_hash_ ^ static_cast<std::uint64_t>(row < 0)) * 0x100000001b3ULL;
  for (std::int64_t pair = 0; pair < T * k; ++pair) {
    const std::int64_t row = c.row_of_pair[static_cast<std::size_t>(pair)];
    if (row >= 0) send.row(row) = y.row(pair / k);
  }
  // Per EP member (expert e is member e / local's expert e % local): floats, and rows per expert.
  c.send_counts.assign(static_cast<std::size_t>(members), 0);
  w.per_expert.assign(w.kept.begin(), w.kept.end());
  for (std::int64_t e = 0; e < E; ++e)
    c.send_counts[static_cast<std::size_t>(e / local)] += w.kept[static_cast<std::size_t>(e)] * h;
  span.end();
  moe_aux_loss(c);
  comm_.exchange_counts(CommGroup::kEp, w.per_expert, c.recv_rows);
  c.recv_counts.assign(static_cast<std::size_t>(members), 0);
  for (std::int64_t s = 0; s < members; ++s)
    for (std::int64_t j = 0; j < local; ++j)
      c.recv_counts[static_cast<std::size_t>(s)] +=
          c.recv_rows[static_cast<std::size_t>(s * local + j)] * h;
  // Folded with expert_tp > 1, the expert-TP members gather what each received, so each needs
  // every member's counts (Megatron-Core's MoEAlltoAllTokenDispatcher.preprocess gathers them
  // over its tp x ep group for output_splits_tp): recv_rows becomes (expert_tp, ep, local).
  const std::int64_t etp = expert_tp_members();
  if (etp > 1) {
    w.etp_mine.clear();
    for (std::int64_t q = 0; q < etp; ++q)
      w.etp_mine.insert(w.etp_mine.end(), c.recv_rows.begin(), c.recv_rows.end());
    comm_.exchange_counts(CommGroup::kExpertTp, w.etp_mine, c.recv_rows);
  }
  c.gather_counts.assign(static_cast<std::size_t>(etp), 0);
  c.expert_row0.assign(static_cast<std::size_t>(local + 1), 0);
  for (std::int64_t s = 0; s < etp * members; ++s)
    for (std::int64_t j = 0; j < local; ++j) {
      const std::int64_t n = c.recv_rows[static_cast<std::size_t>(s * local + j)];
      c.gather_counts[static_cast<std::size_t>(s / members)] += n * h;
      c.expert_row0[static_cast<std::size_t>(j + 1)] += n;
    }
  for (std::int64_t j = 0; j < local; ++j)
    c.expert_row0[static_cast<std::size_t>(j + 1)] += c.expert_row0[static_cast<std::size_t>(j)];
}

// The dispatch plan: the token-expert pairs grouped by expert, tokens in order within each (a
// counting sort), and, with a capacity C (moe.h's moe_expert_capacity), an expert chosen by more
// than C keeps its C pairs of the highest probability (ties to the earlier pair) and drops the
// rest. row_of_pair: each kept pair's row in the dispatch buffer, -1 for a dropped one;
// MoeScratch::kept: the pairs each expert keeps.
void StageModel::moe_drop_over_capacity(MoeCache& c) {
  MoeScratch& w = moe_scratch_;
  const std::int64_t E = model_.num_experts, k = model_.experts_per_token;
  const auto pairs = static_cast<std::int64_t>(c.experts.size());
  w.pair_at.assign(static_cast<std::size_t>(E), 0);
  for (std::int64_t e = 1; e < E; ++e)
    w.pair_at[static_cast<std::size_t>(e)] =
        w.pair_at[static_cast<std::size_t>(e - 1)] + c.assigned[static_cast<std::size_t>(e - 1)];
  w.by_expert.resize(static_cast<std::size_t>(pairs));
  for (std::int64_t pair = 0; pair < pairs; ++pair)
    w.by_expert[static_cast<std::size_t>(
        w.pair_at[static_cast<std::size_t>(c.experts[static_cast<std::size_t>(pair)])]++)] = pair;
  w.kept.assign(c.assigned.begin(), c.assigned.end());
  c.row_of_pair.assign(static_cast<std::size_t>(pairs), -1);
  std::int64_t row = 0, begin = 0;
  // The C highest gates of [first, last) stay, back in pair order (ties to the earlier pair).
  auto keep_best = [&](auto first, auto last, std::int64_t e) {
    std::partial_sort(first, first + expert_capacity_, last, [&](std::int64_t a, std::int64_t b) {
      const float pa = c.probs(a / k, e), pb = c.probs(b / k, e);
      return pa > pb || (pa == pb && a < b);
    });
    std::sort(first, first + expert_capacity_);
  };
  for (std::int64_t e = 0; e < E; ++e) {
    const std::int64_t n = c.assigned[static_cast<std::size_t>(e)];
    const auto first = w.by_expert.begin() + begin, last = first + n;
    if (expert_capacity_ > 0 && capacity_share_count_ > 1) {
      // On one rank for a plan whose ranks route parts of the micro-batch (MoeCapacityShares):
      // each share keeps its own C, then the kept pairs go back in pair order, as the ranks'
      // (whose local order is the pairs' order within each share) would keep them.
      w.share_kept.clear();
      for (std::int64_t share = 0; share < capacity_share_count_; ++share) {
        w.share_pairs.clear();
        for (auto it = first; it != last; ++it)
          if (capacity_share(*it / k) == share) w.share_pairs.push_back(*it);
        auto n_share = static_cast<std::int64_t>(w.share_pairs.size());
        if (n_share > expert_capacity_) {
          keep_best(w.share_pairs.begin(), w.share_pairs.end(), e);
          if (!recomputing_) dropped_assignments_ += n_share - expert_capacity_;
          n_share = expert_capacity_;
        }
        w.share_kept.insert(w.share_kept.end(), w.share_pairs.begin(),
                            w.share_pairs.begin() + n_share);
      }
      std::sort(w.share_kept.begin(), w.share_kept.end());
      std::copy(w.share_kept.begin(), w.share_kept.end(), first);
      w.kept[static_cast<std::size_t>(e)] = static_cast<std::int64_t>(w.share_kept.size());
    } else if (expert_capacity_ > 0 && n > expert_capacity_) {
      // Megatron-Core's drop policy "probs": the C highest gates stay, then back in token order.
      keep_best(first, last, e);
      w.kept[static_cast<std::size_t>(e)] = expert_capacity_;
      if (!recomputing_) dropped_assignments_ += n - expert_capacity_;
    }
    for (auto it = first; it != first + w.kept[static_cast<std::size_t>(e)]; ++it)
      c.row_of_pair[static_cast<std::size_t>(*it)] = row++;
    begin += n;
  }
}

// The load-balancing loss's value (its gradient is moe_router_backward's), over the micro-batch's
// whole sequences: with cp > 1 this rank holds 1/cp of each, so the assignment counts f_i are
// summed over the cp group first and this rank adds its tokens' share of sum_i f_i P_i, which
// is linear in P (Megatron-Core sums tokens_per_expert over its tp x cp group the same way
// before switch_load_balancing_loss_func). The counts travel as control traffic, as the
// dispatch's counts do: the cost model lists no collective for them.
void StageModel::moe_aux_loss(MoeCache& c) {
  MoeScratch& w = moe_scratch_;
  const std::int64_t E = model_.num_experts, k = model_.experts_per_token;
  // Folded, or carved with SP (Plan::moe_routes_own_rows), each TP rank routes its own
  // sequence-parallel share of the tokens, so the counts are summed over TP too (Megatron-Core
  // sums tokens_per_expert over its tp x cp group).
  const bool split_over_tp = plan_.moe_routes_own_rows() && plan_.tp > 1;
  c.aux_tokens = c.probs.rows() * plan_.cp * (split_over_tp ? plan_.tp : 1);
  auto sum_over = [&](CommGroup g) {
    const std::int64_t n = comm_.group_size(g);
    w.cp_mine.clear();
    for (std::int64_t s = 0; s < n; ++s)
      w.cp_mine.insert(w.cp_mine.end(), c.assigned.begin(), c.assigned.end());
    comm_.exchange_counts(g, w.cp_mine, w.cp_all);
    for (std::int64_t e = 0; e < E; ++e) {
      std::int64_t sum = 0;
      for (std::int64_t s = 0; s < n; ++s) sum += w.cp_all[static_cast<std::size_t>(s * E + e)];
      c.assigned[static_cast<std::size_t>(e)] = sum;
    }
  };
  if (split_over_tp) sum_over(CommGroup::kTp);
  if (plan_.cp > 1) sum_over(CommGroup::kCp);
  ScratchArena::Frame frame(arena_);
  Eigen::Map<Eigen::RowVectorXf> prob_sums(arena_.floats(E), E);
  prob_sums = c.probs.colwise().sum();
  const auto tokens = static_cast<double>(c.aux_tokens);
  double aux = 0;
  for (std::int64_t e = 0; e < E; ++e)
    aux += static_cast<double>(c.assigned[static_cast<std::size_t>(e)]) /
           (tokens * static_cast<double>(k)) * static_cast<double>(prob_sums[e]) / tokens;
  // Carved, every TP rank routes the same tokens: one counts the value. Folded, each adds its
  // own tokens' share.
  if (!plan_.moe_routes_own_rows() && comm_.group_rank(CommGroup::kTp) != 0)
    return;
  const double value = static_cast<double>(c.aux_weight) * static_cast<double>(E) * aux;
  aux_loss_sum_ += value;
  if (!recomputing_) aux_loss_trained_ += value;
}

void StageModel::moe_forward(std::size_t block, const ConstMatRef& y, MoeCache& c, MatRef out) {
  const BlockLayout& l = layouts_[block];
  const float* p = access_.params(block);
  const std::int64_t h = model_.hidden_size, k = model_.experts_per_token, T = y.rows();
  const bool shared = model_.shared_expert_ffn_size > 0;
  const bool folded = plan_.moe_routes_own_rows();
  // Carved without SP and tp > 1, each expert's fc1 is column- and fc2 row-parallel (f / tp
  // each), so this rank's outputs are partial sums; the row-parallel biases are added on TP rank
  // 0 only, and the layer's TP sum after the MLP (tp_sum) completes them. Folded, or carved
  // with SP (Plan::moe_routes_own_rows; the expert-TP group is then the TP group), the same
  // holds over the expert_tp group, whose members gather the rows the all-to-all brought each of
  // them before the experts and reduce-scatter the partial outputs back after (Megatron-Core's
  // MoEAlltoAllTokenDispatcher: dispatch_postprocess's gather_from_sequence_parallel_region and
  // combine_preprocess's reduce_scatter_to_sequence_parallel_region over the expert tp group,
  // with output_splits_tp; megatron/core/transformer/moe/token_dispatcher.py at NVIDIA/
  // Megatron-LM 0014f13): the cost model's expert_tp_all_gather and expert_tp_reduce_scatter.
  // With expert_tp 1 each expert is whole on its rank and its outputs complete.
  const std::int64_t f = l.tensors[expert_tensor(shared, 0, kExpW1)].cols;
  const bool expert_bias_rank = folded ? comm_.group_rank(CommGroup::kExpertTp) == 0
                                       : comm_.group_rank(CommGroup::kTp) == 0;
  const std::int64_t capacity = routed_capacity_rows();
  const bool gather = expert_tp_members() > 1;
  ScratchArena::Frame frame(arena_);
  // The received rows, and once they are in the cache the experts' outputs in member order;
  // with expert_tp > 1 the expert-TP group's rows gathered, then the partial outputs.
  MatMap recv = arena_.mat(gather ? dispatch_capacity_rows() : capacity, h);
  MatMap gathered = gather ? arena_.mat(capacity, h) : MatMap(recv.data(), capacity, h);
  TraceSpan span(trace_);
  {
    ScratchArena::Frame dispatch(arena_);
    MatMap send = arena_.mat(T * k, h);
    moe_route(block, y, c, send);
    comm_.all_to_all_v(CommGroup::kEp, send.data(), c.send_counts, recv.data(), c.recv_counts,
                       "ep_dispatch");
  }
  if (gather)
    comm_.all_gather_v(CommGroup::kExpertTp, recv.data(), gathered.data(), c.gather_counts,
                       "expert_tp_all_gather");
  const ExpertRows rows = expert_rows(model_, plan_, c);
  take(c.x, capacity, h);
  take(c.a, capacity, f);
  take(c.g, capacity, f);
  rows.permute(gathered.data(), c.x.data(), h, /*to_expert_major=*/true);
  {
    ScratchArena::Frame experts(arena_);
    MatMap expert_out = arena_.mat(capacity, h);
    for (std::int64_t j = 0; j < rows.local; ++j) {
      auto t = [&](ExpertTensor e) { return p + l.tensors[expert_tensor(shared, j, e)].offset; };
      const std::int64_t r0 = rows.row0(j), n = rows.rows(j);
      span.begin("expert_fc1");
      linear_forward_rows(rows_of(std::as_const(c.x), r0, n), ConstMatMap(t(kExpW1), h, f),
                          t(kExpB1), rows_of(c.a.data(), f, r0, n));
      span.begin("gelu");
      gelu_forward_rows(rows_of(std::as_const(c.a), r0, n), rows_of(c.g.data(), f, r0, n));
      span.begin("expert_fc2");
      linear_forward_rows(rows_of(std::as_const(c.g), r0, n), ConstMatMap(t(kExpW2), f, h),
                          expert_bias_rank ? t(kExpB2) : nullptr,
                          rows_of(expert_out.data(), h, r0, n));
    }
    rows.permute(expert_out.data(), gathered.data(), h, /*to_expert_major=*/false);
  }
  span.end();
  if (gather)
    comm_.reduce_scatter_v(CommGroup::kExpertTp, gathered.data(), recv.data(), c.gather_counts,
                           "expert_tp_reduce_scatter");
  take(c.combined, T * k, h);
  comm_.all_to_all_v(CommGroup::kEp, recv.data(), c.recv_counts, c.combined.data(),
                     c.send_counts, "ep_combine");
  span.begin("expert_fc2");  // the gate-weighted sum of each token's kept outputs
  out.setZero();
  for (std::int64_t pair = 0; pair < T * k; ++pair) {
    const std::int64_t row = c.row_of_pair[static_cast<std::size_t>(pair)];
    if (row < 0) continue;  // dropped over its expert's capacity
    const std::int64_t t = pair / k;
    const float gate = c.probs(t, c.experts[static_cast<std::size_t>(pair)]);
    out.row(t) += gate * c.combined.row(row);
  }
  span.end();
  // Folded, the layer runs the shared experts itself (moe_folded_forward).
  if (shared && !folded) {
    ScratchArena::Frame shared_out(arena_);
    MatMap shared_o = arena_.mat(T, h);
    moe_shared_forward(block, y, c, shared_o);
    out += shared_o;
  }
}

// The shared experts: a dense MLP split over TP (fc1 column-, fc2 row-parallel) on every token
// of y, into `partial`, this TP rank's partial sum (its row-parallel bias on TP rank 0).
void StageModel::moe_shared_forward(std::size_t block, const ConstMatRef& y, MoeCache& c,
                                    MatRef partial) {
  const BlockLayout& l = layouts_[block];
  const float* p = access_.params(block);
  const std::int64_t h = model_.hidden_size, T = y.rows(), fs = l.tensors[kSharedW1].cols;
  const bool bias_rank = comm_.group_rank(CommGroup::kTp) == 0;
  TraceSpan span(trace_);
  span.begin("shared_fc1");
  linear_forward(y, ConstMatMap(p + l.tensors[kSharedW1].offset, h, fs),
                 p + l.tensors[kSharedB1].offset, take(c.shared_a, T, fs));
  span.begin("shared_act");
  gelu_forward(c.shared_a, take(c.shared_g, T, fs));
  span.begin("shared_fc2");
  linear_forward(c.shared_g, ConstMatMap(p + l.tensors[kSharedW2].offset, fs, h),
                 bias_rank ? p + l.tensors[kSharedB2].offset : nullptr, partial);
  span.end();
}

// The shared experts' backward: dy (the layer's norm2 output gradient) += their input gradient.
void StageModel::moe_shared_backward(std::size_t block, const ConstMatRef& y, MoeCache& c,
                                     const ConstMatRef& dm, MatRef dy) {
  const BlockLayout& l = layouts_[block];
  const float* p = access_.params(block);
  float* g = access_.grads(block);
  const std::int64_t h = model_.hidden_size, fs = l.tensors[kSharedW1].cols, T = y.rows();
  ScratchArena::Frame frame(arena_);
  MatMap dg = arena_.mat(T, fs), da = arena_.mat(T, fs);
  TraceSpan span(trace_);
  span.begin("shared_fc2_dgrad");
  dg.noalias() = dm * ConstMatMap(p + l.tensors[kSharedW2].offset, fs, h).transpose();
  span.begin("shared_fc2_wgrad");
  weight_grad(block, kSharedW2, fs, h, c.shared_g, dm, g + l.tensors[kSharedB2].offset,
              "shared_fc2_wgrad");
  span.begin("shared_act_bwd");
  gelu_backward(c.shared_a, dg, da);
  span.begin("shared_fc1_dgrad");
  dy.noalias() += da * ConstMatMap(p + l.tensors[kSharedW1].offset, h, fs).transpose();
  span.begin("shared_fc1_wgrad");
  weight_grad(block, kSharedW1, h, fs, y, da, g + l.tensors[kSharedB1].offset,
              "shared_fc1_wgrad");
  span.end();
}

// The local experts' backward on the combine's gradient rows (member order, as received, in
// `dout_rows`); writes their input gradients to dx_rows in the same order. Once read,
// dout_rows holds the experts' input gradients in expert-major order.
void StageModel::moe_experts_backward(std::size_t block, MoeCache& c, MatMap dout_rows,
                                      MatRef dx_rows) {
  const BlockLayout& l = layouts_[block];
  const float* p = access_.params(block);
  float* grads = access_.grads(block);
  const bool shared = model_.shared_expert_ffn_size > 0;
  const std::int64_t h = model_.hidden_size,
                     f = l.tensors[expert_tensor(shared, 0, kExpW1)].cols;  // f / tp
  const ExpertRows rows = expert_rows(model_, plan_, c);
  const Eigen::Index capacity = c.x.rows();
  const std::int64_t expert_capacity =
      moe_expert_capacity_rows(rows.members, c.probs.rows(), expert_capacity_rows());
  ScratchArena::Frame frame(arena_);
  // The output gradients the weight GEMMs read: in a zero-bubble B pass, written straight into
  // two buffers held for the W pass (the layer's capacity rows, one per tensor, so the pools
  // find the same sizes every step), instead of a copy per expert.
  float* d_rows = nullptr;
  float* da_rows = nullptr;
  if (deferring_ != nullptr) {
    const std::size_t at = deferring_->held.size();
    hold_for_weight_pass("copy.dy.expert_fc2_wgrad", capacity, h);
    hold_for_weight_pass("copy.dy.expert_fc1_wgrad", capacity, f);
    d_rows = deferring_->held[at].m.data();  // held is not appended to again in this function
    da_rows = deferring_->held[at + 1].m.data();
  } else {
    d_rows = arena_.floats(capacity * h);
    da_rows = arena_.floats(capacity * f);
  }
  float* dg_rows = arena_.floats(capacity * f);
  rows.permute(dout_rows.data(), d_rows, h, /*to_expert_major=*/true);
  float* dx_expert = dout_rows.data();  // read: now the experts' input gradients
  TraceSpan span(trace_);
  for (std::int64_t j = 0; j < rows.local; ++j) {
    auto at = [&](ExpertTensor e) { return l.tensors[expert_tensor(shared, j, e)].offset; };
    const std::int64_t r0 = rows.row0(j), n = rows.rows(j);
    const ConstMatMap d = const_rows_of(d_rows, h, r0, n);
    MatMap dg = rows_of(dg_rows, f, r0, n), da = rows_of(da_rows, f, r0, n);
    span.begin("expert_fc2_dgrad");
    dg.noalias() = d * ConstMatMap(p + at(kExpW2), f, h).transpose();
    span.begin("expert_fc2_wgrad");
    weight_grad(block, expert_tensor(shared, j, kExpW2), f, h, rows_of(std::as_const(c.g), r0, n),
                d, grads + at(kExpB2), "expert_fc2_wgrad", expert_capacity);
    span.begin("gelu_bwd");
    gelu_backward_rows(rows_of(std::as_const(c.a), r0, n), const_rows_of(dg_rows, f, r0, n), da);
    span.begin("expert_fc1_dgrad");
    rows_of(dx_expert, h, r0, n).noalias() = da * ConstMatMap(p + at(kExpW1), h, f).transpose();
    span.begin("expert_fc1_wgrad");
    weight_grad(block, expert_tensor(shared, j, kExpW1), h, f, rows_of(std::as_const(c.x), r0, n),
                da, grads + at(kExpB1), "expert_fc1_wgrad", expert_capacity);
  }
  span.end();
  rows.permute(dx_expert, dx_rows.data(), h, /*to_expert_major=*/false);
}

// The router's backward: from the gates' gradient and the load-balancing loss's to the logits
// (softmax backward), then to the input and the router matrix.
void StageModel::moe_router_backward(std::size_t block, const ConstMatRef& y, MoeCache& c,
                                     const ConstMatRef& dgates, MatRef dy) {
  const BlockLayout& l = layouts_[block];
  const float* p = access_.params(block);
  const std::int64_t h = model_.hidden_size, E = model_.num_experts,
                     k = model_.experts_per_token, T = y.rows();
  ScratchArena::Frame frame(arena_);
  TraceSpan span(trace_);
  span.begin("router_dgrad");
  // Switch's loss coeff * E * sum_i f_i * mean_t(P_ti): d/dP_ti = coeff * E * f_i / T. With
  // tp > 1 every TP rank routes the same tokens, and the gates' gradients (from partial expert
  // outputs) and so the router's are partial sums over TP (summed by the layer's
  // tp_*_mlp_grad and, for the router's weight, the sequence-parallel gradient sum): the
  // loss's own term is added on TP rank 0 only.
  MatMap dprobs = arena_.mat(T, E);
  dprobs.setZero();
  const auto tokens = static_cast<double>(c.aux_tokens);  // the whole sequences' (cp)
  // Folded, each TP rank routes its own tokens and adds its own term.
  const bool own_term = plan_.moe_routes_own_rows() ||
                        comm_.group_rank(CommGroup::kTp) == 0;
  for (std::int64_t e = 0; e < E && own_term; ++e) {
    const double f_e = static_cast<double>(c.assigned[static_cast<std::size_t>(e)]) /
                       (tokens * static_cast<double>(k));
    dprobs.col(e).setConstant(static_cast<float>(c.aux_weight * static_cast<double>(E) * f_e /
                                                 tokens));
  }
  // A dropped pair's gate took no part in the output: no gradient through it.
  for (std::int64_t pair = 0; pair < T * k; ++pair)
    if (c.row_of_pair[static_cast<std::size_t>(pair)] >= 0)
      dprobs(pair / k, c.experts[static_cast<std::size_t>(pair)]) += dgates(pair / k, pair % k);
  // Softmax backward: dlogits = P * (dP - sum_j P_j dP_j), per row.
  Eigen::Map<Vec> dot = arena_.vec(T);
  dot = c.probs.cwiseProduct(dprobs).rowwise().sum();
  MatMap dlogits = arena_.mat(T, E);
  dlogits = c.probs.cwiseProduct(dprobs.colwise() - dot);
  dy.noalias() += dlogits * ConstMatMap(p + l.tensors[kRouter].offset, h, E).transpose();
  span.begin("router_wgrad");
  weight_grad(block, kRouter, h, E, y, dlogits, nullptr, "router_wgrad");
  span.end();
}

void StageModel::moe_backward(std::size_t block, const ConstMatRef& y, MoeCache& c,
                              const ConstMatRef& dm, MatRef dy) {
  const std::int64_t h = model_.hidden_size, k = model_.experts_per_token, T = y.rows();
  dy.setZero();
  // Folded, the layer runs the shared experts' backward itself (moe_folded_backward).
  if (model_.shared_expert_ffn_size > 0 && !plan_.moe_routes_own_rows())
    moe_shared_backward(block, y, c, dm, dy);
  ScratchArena::Frame frame(arena_);
  // Combine's backward: each kept pair's output row gets gate * dm of its token; the gate gets
  // the dot product of dm with the expert's output (a dropped pair's gets nothing).
  TraceSpan span(trace_);
  span.begin("expert_fc2_dgrad");
  MatMap dsend = arena_.mat(T * k, h), dgates = arena_.mat(T, k);
  for (std::int64_t pair = 0; pair < T * k; ++pair) {
    const std::int64_t t = pair / k, row = c.row_of_pair[static_cast<std::size_t>(pair)];
    if (row < 0) {
      dgates(t, pair % k) = 0.0f;
      continue;
    }
    const float gate = c.probs(t, c.experts[static_cast<std::size_t>(pair)]);
    dsend.row(row) = gate * dm.row(t);
    dgates(t, pair % k) = dm.row(t).dot(c.combined.row(row));
  }
  span.end();
  // Folded with expert_tp > 1, the received gradient rows are gathered over the expert-TP
  // group before the experts' backward and their partial input gradients reduce-scattered back
  // after (the backward of the forward's scatter and gather: the cost model's
  // expert_tp_all_gather_grad and expert_tp_reduce_scatter_grad).
  const bool gather = expert_tp_members() > 1;
  MatMap dx_rows = arena_.mat(c.x.rows(), h), dgathered = arena_.mat(c.x.rows(), h);
  MatMap drecv = gather ? arena_.mat(dispatch_capacity_rows(), h) : dgathered;
  comm_.all_to_all_v(CommGroup::kEp, dsend.data(), c.send_counts, drecv.data(), c.recv_counts,
                     "ep_combine_bwd");
  if (gather)
    comm_.all_gather_v(CommGroup::kExpertTp, drecv.data(), dgathered.data(), c.gather_counts,
                       "expert_tp_all_gather_grad");
  moe_experts_backward(block, c, dgathered, dx_rows);
  if (gather)
    comm_.reduce_scatter_v(CommGroup::kExpertTp, dx_rows.data(), drecv.data(), c.gather_counts,
                           "expert_tp_reduce_scatter_grad");
  comm_.all_to_all_v(CommGroup::kEp, gather ? drecv.data() : dx_rows.data(), c.recv_counts,
                     dsend.data(), c.send_counts, "ep_dispatch_bwd");
  // Dispatch's backward: each token sums the input gradients of its kept copies, in slot order.
  span.begin("expert_fc1_dgrad");
  for (std::int64_t pair = 0; pair < T * k; ++pair) {
    const std::int64_t row = c.row_of_pair[static_cast<std::size_t>(pair)];
    if (row >= 0) dy.row(pair / k) += dsend.row(row);
  }
  span.end();
  moe_router_backward(block, y, c, dgates, dy);
}

}  // namespace trainplan::executor
