// An MoE layer's MLP on the CPU stage model; see moe.h. Each all-to-all is named by its
// cost-model task (core/cost/tasks.cc, add_mlp_forward and the MoE part of
// layer_backward_tasks), and each stretch of math between them by the compute task it is.
#include <algorithm>
#include <numeric>

#include "executor/cpu/gpt.h"
#include "executor/cpu/moe.h"

namespace trainplan::executor {

namespace {

// The k best experts of each token by probability, ties to the lower index (so that the
// parallel and single-process runs, whose probabilities agree, route alike).
std::vector<std::int32_t> top_k(const Mat& probs, std::int64_t k) {
  const std::int64_t T = probs.rows(), E = probs.cols();
  std::vector<std::int32_t> out(static_cast<std::size_t>(T * k)), order(static_cast<std::size_t>(E));
  for (std::int64_t t = 0; t < T; ++t) {
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](std::int32_t a, std::int32_t b) {
                        const float pa = probs(t, a), pb = probs(t, b);
                        return pa > pb || (pa == pb && a < b);
                      });
    std::copy_n(order.begin(), k, out.begin() + t * k);
  }
  return out;
}

void softmax_rows(const Mat& logits, Mat& probs) {
  probs = (logits.colwise() - logits.rowwise().maxCoeff()).array().exp().matrix();
  probs.array().colwise() /= probs.rowwise().sum().array();
}

// Rows [first, first + n) of `from` as one matrix per local expert, or back: the received
// buffer holds, for each EP member in turn, its rows for local expert 0, 1, ...
struct ExpertRows {
  std::int64_t members = 1, local = 1;
  const std::vector<std::int64_t>* recv_rows = nullptr;  // (members, local)
  std::int64_t count(std::int64_t s, std::int64_t j) const {
    return (*recv_rows)[static_cast<std::size_t>(s * local + j)];
  }
  // Calls fn(buffer row, expert row) for every row of local expert j.
  template <class Fn>
  void for_rows(std::int64_t j, Fn&& fn) const {
    std::int64_t at = 0, row = 0;
    for (std::int64_t s = 0; s < members; ++s)
      for (std::int64_t e = 0; e < local; ++e) {
        const std::int64_t n = count(s, e);
        if (e == j)
          for (std::int64_t i = 0; i < n; ++i) fn(at + i, row++);
        at += n;
      }
  }
  std::int64_t rows(std::int64_t j) const {
    std::int64_t n = 0;
    for (std::int64_t s = 0; s < members; ++s) n += count(s, j);
    return n;
  }
  Mat gather(std::int64_t j, const Mat& buffer) const {
    Mat out(rows(j), buffer.cols());
    for_rows(j, [&](std::int64_t b, std::int64_t r) { out.row(r) = buffer.row(b); });
    return out;
  }
  void scatter(std::int64_t j, const Mat& m, Mat& buffer) const {
    for_rows(j, [&](std::int64_t b, std::int64_t r) { buffer.row(b) = m.row(r); });
  }
};

ExpertRows expert_rows(const Comm& comm, const ModelSpec& m, const Plan& p, const MoeCache& c) {
  return {comm.group_size(CommGroup::kEp), m.num_experts / p.ep, &c.recv_rows};
}

}  // namespace

// Router, top-k, the dispatch plan (which rows go to which EP member) and the counts exchange.
void StageModel::moe_route(std::size_t block, const Mat& y, MoeCache& c, Mat& send) {
  const BlockLayout& l = layouts_[block];
  const float* p = access_.params(block);
  const std::int64_t h = model_.hidden_size, E = model_.num_experts,
                     k = model_.experts_per_token, T = y.rows();
  const std::int64_t members = comm_.group_size(CommGroup::kEp), local = E / plan_.ep;
  // coeff / micro-batches in the global batch (loss_scale_ is 1 / its tokens).
  c.aux_weight = static_cast<float>(model_.router_aux_loss_coef.value_or(kDefaultMoeAuxLossCoeff)) *
                 loss_scale_ *
                 static_cast<float>(plan_.micro_batch_size * model_.seq_len);
  TraceSpan span(trace_);
  span.begin("router");
  Mat logits;
  linear_forward(y, ConstMatMap(p + l.tensors[kRouter].offset, h, E), nullptr, logits);
  softmax_rows(logits, take(c.probs, T, E));
  c.experts = top_k(c.probs, k);
  for (std::int32_t e : c.experts)  // FNV-1a over the choices
    routing_hash_ = (routing_hash_ ^ static_cast<std::uint64_t>(e + 1)) * 0x100000001b3ULL;
  // Token-expert pairs grouped by expert (so by EP member), tokens in order within each.
  std::vector<std::vector<std::int64_t>> by_expert(static_cast<std::size_t>(E));
  for (std::int64_t pair = 0; pair < T * k; ++pair)
    by_expert[static_cast<std::size_t>(c.experts[static_cast<std::size_t>(pair)])].push_back(pair);
  c.assigned.assign(static_cast<std::size_t>(E), 0);
  c.row_of_pair.assign(static_cast<std::size_t>(T * k), 0);
  c.send_counts.assign(static_cast<std::size_t>(members), 0);
  std::vector<std::int64_t> per_expert(static_cast<std::size_t>(members * local), 0);
  send.resize(T * k, h);
  std::int64_t row = 0;
  for (std::int64_t e = 0; e < E; ++e) {
    const auto& pairs = by_expert[static_cast<std::size_t>(e)];
    const auto n = static_cast<std::int64_t>(pairs.size());
    c.assigned[static_cast<std::size_t>(e)] = n;
    per_expert[static_cast<std::size_t>(e)] = n;  // member e / local, its expert e % local
    c.send_counts[static_cast<std::size_t>(e / local)] += n * h;
    for (std::int64_t pair : pairs) {
      c.row_of_pair[static_cast<std::size_t>(pair)] = row;
      send.row(row++) = y.row(pair / k);
    }
  }
  span.end();
  moe_aux_loss(c);
  c.recv_rows = comm_.exchange_counts(CommGroup::kEp, per_expert);
  c.recv_counts.assign(static_cast<std::size_t>(members), 0);
  for (std::int64_t s = 0; s < members; ++s)
    for (std::int64_t j = 0; j < local; ++j)
      c.recv_counts[static_cast<std::size_t>(s)] += c.recv_rows[static_cast<std::size_t>(s * local + j)] * h;
}

// The load-balancing loss's value (its gradient is moe_router_backward's), over the micro-batch's
// whole sequences: with cp > 1 this rank holds 1/cp of each, so the assignment counts f_i are
// summed over the cp group first and this rank adds its tokens' share of sum_i f_i P_i, which
// is linear in P (Megatron-Core sums tokens_per_expert over its tp x cp group the same way
// before switch_load_balancing_loss_func). The counts travel as control traffic, as the
// dispatch's counts do: the cost model lists no collective for them.
void StageModel::moe_aux_loss(MoeCache& c) {
  const std::int64_t E = model_.num_experts, k = model_.experts_per_token;
  c.aux_tokens = c.probs.rows() * plan_.cp;
  if (plan_.cp > 1) {
    const std::int64_t n = comm_.group_size(CommGroup::kCp);
    std::vector<std::int64_t> mine;
    for (std::int64_t s = 0; s < n; ++s) mine.insert(mine.end(), c.assigned.begin(), c.assigned.end());
    const std::vector<std::int64_t> all = comm_.exchange_counts(CommGroup::kCp, mine);
    for (std::int64_t e = 0; e < E; ++e) {
      std::int64_t sum = 0;
      for (std::int64_t s = 0; s < n; ++s) sum += all[static_cast<std::size_t>(s * E + e)];
      c.assigned[static_cast<std::size_t>(e)] = sum;
    }
  }
  const Eigen::RowVectorXf prob_sums = c.probs.colwise().sum();
  const auto tokens = static_cast<double>(c.aux_tokens);
  double aux = 0;
  for (std::int64_t e = 0; e < E; ++e)
    aux += static_cast<double>(c.assigned[static_cast<std::size_t>(e)]) /
           (tokens * static_cast<double>(k)) * static_cast<double>(prob_sums[e]) / tokens;
  // Every TP rank routes the same tokens: one counts the value.
  if (comm_.group_rank(CommGroup::kTp) != 0) return;
  const double value = static_cast<double>(c.aux_weight) * static_cast<double>(E) * aux;
  aux_loss_sum_ += value;
  if (!recomputing_) aux_loss_trained_ += value;
}

void StageModel::moe_forward(std::size_t block, const Mat& y, MoeCache& c, Mat& out) {
  const BlockLayout& l = layouts_[block];
  const float* p = access_.params(block);
  const std::int64_t h = model_.hidden_size, k = model_.experts_per_token, T = y.rows();
  const bool shared = model_.shared_expert_ffn_size > 0;
  // With tp > 1 each expert's fc1 is column- and fc2 row-parallel (f / tp each), so this rank's
  // outputs are partial sums; the row-parallel biases are added on TP rank 0 only, and the
  // layer's TP sum after the MLP (tp_sum) completes them.
  const std::int64_t f = l.tensors[expert_tensor(shared, 0, kExpW1)].cols;
  const bool bias_rank = comm_.group_rank(CommGroup::kTp) == 0;
  Mat send, recv;
  moe_route(block, y, c, send);
  const ExpertRows rows = expert_rows(comm_, model_, plan_, c);
  recv.resize(std::accumulate(c.recv_counts.begin(), c.recv_counts.end(), std::int64_t{0}) / h, h);
  comm_.all_to_all_v(CommGroup::kEp, send.data(), c.send_counts, recv.data(), c.recv_counts,
                     "ep_dispatch");
  TraceSpan span(trace_);
  c.x.assign(static_cast<std::size_t>(rows.local), Mat());
  c.a = c.g = c.x;
  Mat outputs(recv.rows(), h);
  for (std::int64_t j = 0; j < rows.local; ++j) {
    auto t = [&](ExpertTensor w) {
      return p + l.tensors[expert_tensor(shared, j, w)].offset;
    };
    const auto J = static_cast<std::size_t>(j);
    span.begin("expert_fc1");
    c.x[J] = rows.gather(j, recv);
    linear_forward(c.x[J], ConstMatMap(t(kExpW1), h, f), t(kExpB1), c.a[J]);
    span.begin("gelu");
    gelu_forward(c.a[J], c.g[J]);
    span.begin("expert_fc2");
    Mat o;
    linear_forward(c.g[J], ConstMatMap(t(kExpW2), f, h), bias_rank ? t(kExpB2) : nullptr, o);
    rows.scatter(j, o, outputs);
  }
  span.end();
  take(c.combined, T * k, h);
  comm_.all_to_all_v(CommGroup::kEp, outputs.data(), c.recv_counts, c.combined.data(),
                     c.send_counts, "ep_combine");
  span.begin("expert_fc2");  // the gate-weighted sum of each token's k outputs
  out = Mat::Zero(T, h);
  for (std::int64_t pair = 0; pair < T * k; ++pair) {
    const std::int64_t t = pair / k;
    const float gate = c.probs(t, c.experts[static_cast<std::size_t>(pair)]);
    out.row(t) += gate * c.combined.row(c.row_of_pair[static_cast<std::size_t>(pair)]);
  }
  if (shared) {
    const std::int64_t fs = l.tensors[kSharedW1].cols;
    span.begin("shared_fc1");
    linear_forward(y, ConstMatMap(p + l.tensors[kSharedW1].offset, h, fs),
                   p + l.tensors[kSharedB1].offset, take(c.shared_a, T, fs));
    span.begin("shared_act");
    gelu_forward(c.shared_a, take(c.shared_g, T, fs));
    span.begin("shared_fc2");
    Mat o;
    linear_forward(c.shared_g, ConstMatMap(p + l.tensors[kSharedW2].offset, fs, h),
                   bias_rank ? p + l.tensors[kSharedB2].offset : nullptr, o);
    out += o;
  }
  span.end();
}

// The shared experts' backward: dy (the layer's norm2 output gradient) += their input gradient.
void StageModel::moe_shared_backward(std::size_t block, const Mat& y, MoeCache& c, const Mat& dm,
                                     Mat& dy) {
  const BlockLayout& l = layouts_[block];
  const float* p = access_.params(block);
  float* g = access_.grads(block);
  const std::int64_t h = model_.hidden_size, fs = l.tensors[kSharedW1].cols;
  TraceSpan span(trace_);
  span.begin("shared_fc2_dgrad");
  Mat dg, da;
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

// The local experts' backward on the combine's gradient rows; returns their input gradients in
// the received buffer's layout.
Mat StageModel::moe_experts_backward(std::size_t block, MoeCache& c, const Mat& dout_rows) {
  const BlockLayout& l = layouts_[block];
  const float* p = access_.params(block);
  float* grads = access_.grads(block);
  const bool shared = model_.shared_expert_ffn_size > 0;
  const std::int64_t h = model_.hidden_size,
                     f = l.tensors[expert_tensor(shared, 0, kExpW1)].cols;  // f / tp
  const ExpertRows rows = expert_rows(comm_, model_, plan_, c);
  Mat dx_rows(dout_rows.rows(), h);
  TraceSpan span(trace_);
  for (std::int64_t j = 0; j < rows.local; ++j) {
    const auto J = static_cast<std::size_t>(j);
    auto at = [&](ExpertTensor w) { return l.tensors[expert_tensor(shared, j, w)].offset; };
    const Mat d = rows.gather(j, dout_rows);
    Mat dg, da, dx;
    span.begin("expert_fc2_dgrad");
    dg.noalias() = d * ConstMatMap(p + at(kExpW2), f, h).transpose();
    span.begin("expert_fc2_wgrad");
    weight_grad(block, expert_tensor(shared, j, kExpW2), f, h, c.g[J], d, grads + at(kExpB2),
                "expert_fc2_wgrad");
    span.begin("gelu_bwd");
    gelu_backward(c.a[J], dg, da);
    span.begin("expert_fc1_dgrad");
    dx.noalias() = da * ConstMatMap(p + at(kExpW1), h, f).transpose();
    rows.scatter(j, dx, dx_rows);
    span.begin("expert_fc1_wgrad");
    weight_grad(block, expert_tensor(shared, j, kExpW1), h, f, c.x[J], da, grads + at(kExpB1),
                "expert_fc1_wgrad");
  }
  return dx_rows;
}

// The router's backward: from the gates' gradient and the load-balancing loss's to the logits
// (softmax backward), then to the input and the router matrix.
void StageModel::moe_router_backward(std::size_t block, const Mat& y, MoeCache& c,
                                     const Mat& dgates, Mat& dy) {
  const BlockLayout& l = layouts_[block];
  const float* p = access_.params(block);
  const std::int64_t h = model_.hidden_size, E = model_.num_experts,
                     k = model_.experts_per_token, T = y.rows();
  TraceSpan span(trace_);
  span.begin("router_dgrad");
  // Switch's loss coeff * E * sum_i f_i * mean_t(P_ti): d/dP_ti = coeff * E * f_i / T. With
  // tp > 1 every TP rank routes the same tokens, and the gates' gradients (from partial expert
  // outputs) and so the router's are partial sums over TP (summed by the layer's
  // tp_*_mlp_grad and, for the router's weight, the sequence-parallel gradient sum): the
  // loss's own term is added on TP rank 0 only.
  Mat dprobs = Mat::Zero(T, E);
  const auto tokens = static_cast<double>(c.aux_tokens);  // the whole sequences' (cp)
  for (std::int64_t e = 0; e < E && comm_.group_rank(CommGroup::kTp) == 0; ++e) {
    const double f_e = static_cast<double>(c.assigned[static_cast<std::size_t>(e)]) /
                       (tokens * static_cast<double>(k));
    dprobs.col(e).setConstant(static_cast<float>(c.aux_weight * static_cast<double>(E) * f_e /
                                                 tokens));
  }
  for (std::int64_t pair = 0; pair < T * k; ++pair)
    dprobs(pair / k, c.experts[static_cast<std::size_t>(pair)]) += dgates(pair / k, pair % k);
  // Softmax backward: dlogits = P * (dP - sum_j P_j dP_j), per row.
  const Eigen::VectorXf dot = c.probs.cwiseProduct(dprobs).rowwise().sum();
  const Mat dlogits = c.probs.cwiseProduct(dprobs.colwise() - dot);
  dy.noalias() += dlogits * ConstMatMap(p + l.tensors[kRouter].offset, h, E).transpose();
  span.begin("router_wgrad");
  weight_grad(block, kRouter, h, E, y, dlogits, nullptr, "router_wgrad");
  span.end();
}

void StageModel::moe_backward(std::size_t block, const Mat& y, MoeCache& c, const Mat& dm,
                              Mat& dy) {
  const std::int64_t h = model_.hidden_size, k = model_.experts_per_token, T = y.rows();
  dy = Mat::Zero(T, h);
  if (model_.shared_expert_ffn_size > 0) moe_shared_backward(block, y, c, dm, dy);
  // Combine's backward: each pair's output row gets gate * dm of its token; the gate gets the
  // dot product of dm with the expert's output.
  TraceSpan span(trace_);
  span.begin("expert_fc2_dgrad");
  Mat dsend(T * k, h), dgates(T, k);
  for (std::int64_t pair = 0; pair < T * k; ++pair) {
    const std::int64_t t = pair / k, row = c.row_of_pair[static_cast<std::size_t>(pair)];
    const float gate = c.probs(t, c.experts[static_cast<std::size_t>(pair)]);
    dsend.row(row) = gate * dm.row(t);
    dgates(t, pair % k) = dm.row(t).dot(c.combined.row(row));
  }
  span.end();
  Mat drecv(std::accumulate(c.recv_counts.begin(), c.recv_counts.end(), std::int64_t{0}) / h, h);
  comm_.all_to_all_v(CommGroup::kEp, dsend.data(), c.send_counts, drecv.data(), c.recv_counts,
                     "ep_combine_bwd");
  const Mat dx_rows = moe_experts_backward(block, c, drecv);
  comm_.all_to_all_v(CommGroup::kEp, dx_rows.data(), c.recv_counts, dsend.data(), c.send_counts,
                     "ep_dispatch_bwd");
  // Dispatch's backward: each token sums the input gradients of its k copies, in slot order.
  span.begin("expert_fc1_dgrad");
  for (std::int64_t pair = 0; pair < T * k; ++pair)
    dy.row(pair / k) += dsend.row(c.row_of_pair[static_cast<std::size_t>(pair)]);
  span.end();
  moe_router_backward(block, y, c, dgates, dy);
}

}  // namespace trainplan::executor
