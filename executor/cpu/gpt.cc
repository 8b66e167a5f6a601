// One pipeline stage of a GPT; see gpt.h. Each TP collective below is named by the cost-model
// task it is (core/cost/tasks.cc), and each stretch of math between them by a TraceSpan named
// by the compute task(s) it is, so the code, the cost model and the trace read side by side.
#include "executor/cpu/gpt.h"

#include "executor/stage_model.h"

#include <array>
#include <cmath>
#include <limits>
#include <span>
#include <string>
#include <type_traits>
#include <utility>

namespace trainplan::executor {

// Stored activations of one layer for one micro-batch. Tl = local tokens (T/tp with SP).
struct StageModel::LayerCache {
  Mat x;                             // (Tl, h) layer input (all that full recompute keeps)
  Mat ln1;                           // (Tl, h) norm1 output
  Vec ln1_mean, ln1_rstd;            // (Tl)
  Mat q, k, v;                       // (T, q/tp); with cp > 1, this rank's tokens only
  Mat probs;                         // (b*heads/tp*T/b, s); empty under selective recompute
  Mat attn;                          // (T, q/tp) attention output, out_proj input
  Mat x1;                            // (Tl, h) after the first residual
  Mat ln2;                           // (Tl, h)
  Vec ln2_mean, ln2_rstd;            // (Tl)
  Mat a;                             // (T, f/tp) fc1 output (GELU input)
  Mat g;                             // (T, f/tp) GELU output (fc2 input)
  MoeCache moe;                      // an MoE layer's router, dispatch and experts (moe.h)
  bool complete = false;             // false: only x is kept (full recompute)
};

struct StageModel::MicroBatch {
  std::vector<std::int32_t> tokens;   // (T) stage 0: for the embedding backward
  std::vector<std::int32_t> targets;  // (T) last stage
  std::vector<LayerCache> layers;
  Mat head_in;                        // (Tl, h) final norm input
  Vec lnf_mean, lnf_rstd;             // (Tl)
  Mat lnf;                            // (T, h) final norm output (gathered with SP)
  Mat probs;                          // (T, V/tp) softmax of this rank's vocabulary slice
  float loss_scale = 0;
};

struct StageModel::LayerParams {
  const float* p[kNumLayerTensors];
  float* g[kNumLayerTensors];  // null unless asked for (backward)
};

// Each function's temporaries, kept from call to call so that a micro-batch after the first
// allocates none (workspace.h): each is named for the one function that uses it, as a full
// recompute runs a layer's forward inside the backward. The pass slots carry the activation
// (or its gradient) from layer to layer: a layer writes its output into the slot its input is
// not in.
struct StageModel::Scratch {
  Mat fwd_slot[2], bwd_slot[2], recompute_x, recompute_out;
  Mat kv_mine, kv_all;                                        // gather_kv
  Mat kvg_all, kvg_mine;                                      // reduce_scatter_kv_grad
  Mat mlp_partial;                                            // dense_mlp_forward
  Mat lf_gathered, lf_k_full, lf_v_full, lf_partial, lf_o, lf_m, lf_moe_partial;  // layer_forward
  Mat mb_gathered, mb_dg, mb_da, mb_dy;                       // dense_mlp_backward
  Mat moeb_dm, moeb_y, moeb_dy;                               // moe_mlp_backward
  Mat mff_shared_partial, mff_shared;                         // moe_folded_forward
  Mat mfb_dm, mfb_y, mfb_dy, mfb_dy_shared;                   // moe_folded_backward
  Mat lb_dyl, lb_gathered, lb_dy, lb_dn, lb_dx1, lb_dattn, lb_dq, lb_dk, lb_dv;  // layer_backward
  Mat ab_k_full, ab_v_full, ab_out, ab_dk_full, ab_dv_full;  // attention_core_backward
  Mat emb_e, emb_gathered;                                    // embedding_forward / _backward
  Mat head_y, head_logits, head_dy, head_dyl;                 // head_forward / head_backward
  Vec head_max, head_sum, head_target;                        // head_forward
};

// One held-back weight gradient of a B pass: dW (rows x cols, at `offset` in block `block`'s
// gradients) += x^T dy over their first `used_rows` rows, run by the micro-batch's W pass. Each
// operand is read where the B pass found it when that is the micro-batch's cache (the buffer is
// then held until W: give_or_hold), else from a copy taken from the pools.
struct StageModel::DeferredGrad {
  std::string_view task;
  std::size_t block = 0, offset = 0;
  std::int64_t rows = 0, cols = 0, used_rows = 0;
  const float* x = nullptr;   // x's first row, in the cache or in x_copy
  const float* dy = nullptr;  // dy's, in the cache or in dy_copy
  std::int64_t x_cols = 0, dy_cols = 0;
  Mat x_copy, dy_copy;
};

namespace {
// A layer cache's matrices with their names (the memory account's), in the order `release`
// gives them back; Cache is LayerCache or const LayerCache.
template <class Cache>
auto cache_mats(Cache& c) {
  using M = std::conditional_t<std::is_const_v<Cache>, const Mat, Mat>;
  return std::array<std::pair<const char*, M*>, 18>{{
      {"layer.x", &c.x}, {"layer.ln1", &c.ln1}, {"layer.q", &c.q}, {"layer.k", &c.k},
      {"layer.v", &c.v}, {"layer.attn_probs", &c.probs}, {"layer.attn_out", &c.attn},
      {"layer.x1", &c.x1}, {"layer.ln2", &c.ln2}, {"layer.fc1_out", &c.a},
      {"layer.gelu_out", &c.g}, {"moe.router_probs", &c.moe.probs},
      {"moe.combined", &c.moe.combined}, {"moe.shared_fc1_out", &c.moe.shared_a},
      {"moe.shared_gelu_out", &c.moe.shared_g}, {"moe.routed_x", &c.moe.x},
      {"moe.routed_fc1_out", &c.moe.a}, {"moe.routed_gelu_out", &c.moe.g}}};
}

double bytes_of(const Mat& m) { return static_cast<double>(m.size()) * sizeof(float); }
double bytes_of(const Vec& v) { return static_cast<double>(v.size()) * sizeof(float); }
template <class T>
double bytes_of(const std::vector<T>& v) {
  return static_cast<double>(v.capacity() * sizeof(T));
}
}  // namespace

Mat& StageModel::take(Mat& m, Eigen::Index rows, Eigen::Index cols) {
  mats_.take(m, rows, cols);
  return m;
}

// A layer's cache back to the pools (all of it, or all but its input x under full recompute).
// The routed experts' buffers have the same sizes every step (moe.h), so they pool as well.
void StageModel::release(LayerCache& c, bool keep_input) {
  for (auto [name, m] : cache_mats(c))
    if (!keep_input || m != &c.x) give_or_hold(name, *m);
  for (Vec* v : {&c.ln1_mean, &c.ln1_rstd, &c.ln2_mean, &c.ln2_rstd}) vecs_.give(*v);
  c.complete = false;
}

void StageModel::give_or_hold(const char* name, Mat& m) {
  if (deferring_ != nullptr && m.size() > 0) {
    const float *begin = m.data(), *end = m.data() + m.size();
    auto inside = [&](const float* p) { return p != nullptr && p >= begin && p < end; };
    for (const DeferredGrad& d : deferring_->grads) {
      if (!inside(d.x) && !inside(d.dy)) continue;
      HeldBuffer& h = deferring_->held.emplace_back();
      h.name = name;
      h.m.swap(m);  // the heap buffer moves, so d.x and d.dy stay valid
      return;
    }
  }
  mats_.give(m);
}

Mat& StageModel::hold_for_weight_pass(const char* name, Eigen::Index rows, Eigen::Index cols) {
  HeldBuffer& h = deferring_->held.emplace_back();
  h.name = name;
  h.use = MemoryUse::kWeightPassCopies;
  return take(h.m, rows, cols);
}

bool StageModel::kept_until_weight_pass(const float* p) const {
  auto inside = [p](const Mat& m) {
    return m.size() > 0 && p >= m.data() && p < m.data() + m.size();
  };
  for (const HeldBuffer& h : deferring_->held)
    if (inside(h.m)) return true;
  if (backward_state_ == nullptr) return false;
  for (const LayerCache& c : backward_state_->layers) {
    for (auto [name, m] : cache_mats(c))
      if (inside(*m)) return true;
  }
  const MicroBatch& s = *backward_state_;
  return inside(s.head_in) || inside(s.lnf) || inside(s.probs);
}


StageModel::StageModel(const ModelSpec& model, const Plan& plan, std::int64_t stage, Comm& comm,
                       BlockAccess& access)
    : StageModelBase(model, plan, stage, comm.group_rank(CommGroup::kTp),
                     comm.group_rank(CommGroup::kCp), comm.group_rank(CommGroup::kEp)),
      model_(model),
      plan_(plan),
      comm_(comm),
      access_(access),
      scratch_(std::make_unique<Scratch>()) {
  for (std::int64_t j = 0; j < x_.seq_tokens; ++j) q_positions_.push_back(x_.position(j));
}

StageModel::~StageModel() = default;

StageModel::LayerParams StageModel::layer_params(std::size_t block, bool with_grads) {
  LayerParams lp{};
  const float* p = access_.params(block);
  // Only backward asks: under ZeRO-2/3, grads() allocates the block's full gradient, which
  // must not exist from the forward on (the cost model counts one block's, during backward).
  float* g = with_grads ? access_.grads(block) : nullptr;
  const BlockLayout& l = layouts_[block];
  // An MoE layer's tensors past norm2 are its router and experts (moe.cc reads them).
  for (std::size_t i = 0; i < std::min<std::size_t>(kNumLayerTensors, l.tensors.size()); ++i) {
    lp.p[i] = p + l.tensors[i].offset;
    if (g) lp.g[i] = g + l.tensors[i].offset;
  }
  return lp;
}

void StageModel::gather_tokens(const Mat& local, Mat& full, std::string_view task) {
  full.resize(x_.tokens, local.cols());
  comm_.all_gather(CommGroup::kTp, local.data(), full.data(), local.size(), task);
}

void StageModel::reduce_scatter_tokens(const Mat& full, Mat& local, std::string_view task) {
  local.resize(x_.local_tokens, full.cols());
  comm_.reduce_scatter(CommGroup::kTp, full.data(), local.data(), local.size(), task);
}

// Context parallelism (Megatron-LM's, as Transformer Engine's AttnFuncWithCPAndKVAllGather):
// one all-gather of this rank's [K | V] rows over the cp group, reordered into each sequence's
// token order (the ranks hold data.h's load-balanced chunks).
void StageModel::gather_kv(const Mat& k, const Mat& v, Mat& k_full, Mat& v_full,
                           std::string_view task) {
  const std::int64_t T = x_.tokens, w = k.cols(), cp = x_.cp;
  Mat& mine = take(scratch_->kv_mine, T, 2 * w);
  Mat& all = take(scratch_->kv_all, cp * T, 2 * w);
  mine << k, v;
  comm_.all_gather(CommGroup::kCp, mine.data(), all.data(), mine.size(), task);
  const std::int64_t b = plan_.micro_batch_size, sl = x_.seq_tokens, s = x_.seq_len;
  k_full.resize(b * s, w);
  v_full.resize(b * s, w);
  for (std::int64_t r = 0; r < cp; ++r)
    for (std::int64_t i = 0; i < b; ++i)
      for (std::int64_t j = 0; j < sl; ++j) {
        const std::int64_t from = r * T + i * sl + j, to = i * s + cp_position(s, {cp, r}, j);
        k_full.row(to) = all.row(from).head(w);
        v_full.row(to) = all.row(from).tail(w);
      }
}

// The backward of gather_kv: each rank's share of the sequence's dK, dV, summed over the cp
// group (one reduce-scatter of [dK | dV]).
void StageModel::reduce_scatter_kv_grad(const Mat& dk_full, const Mat& dv_full, Mat& dk,
                                        Mat& dv) {
  const std::int64_t T = x_.tokens, w = dk_full.cols(), cp = x_.cp;
  const std::int64_t b = plan_.micro_batch_size, sl = x_.seq_tokens, s = x_.seq_len;
  Mat& all = take(scratch_->kvg_all, cp * T, 2 * w);
  Mat& mine = take(scratch_->kvg_mine, T, 2 * w);
  for (std::int64_t r = 0; r < cp; ++r)
    for (std::int64_t i = 0; i < b; ++i)
      for (std::int64_t j = 0; j < sl; ++j) {
        const std::int64_t to = r * T + i * sl + j, from = i * s + cp_position(s, {cp, r}, j);
        all.row(to) << dk_full.row(from), dv_full.row(from);
      }
  comm_.reduce_scatter(CommGroup::kCp, all.data(), mine.data(), mine.size(),
                       "cp_reduce_scatter_dkv");
  dk = mine.leftCols(w);
  dv = mine.rightCols(w);
}

// The dense MLP on the (gathered) norm2 output y2, up to its TP sum (the row-parallel bias is
// added with the residual).
void StageModel::dense_mlp_forward(std::size_t block, const Mat& y2, LayerCache& c, Mat& m) {
  const LayerParams P = layer_params(block, /*with_grads=*/false);
  const std::int64_t h = model_.hidden_size, fr = layouts_[block].tensors[kW1].cols;
  TraceSpan span(trace_);
  span.begin("fc1");
  linear_forward(y2, ConstMatMap(P.p[kW1], h, fr), P.p[kB1], take(c.a, y2.rows(), fr));
  span.begin("gelu");
  gelu_forward(c.a, take(c.g, y2.rows(), fr));
  span.begin("fc2");
  Mat& partial = scratch_->mlp_partial;
  linear_forward(c.g, ConstMatMap(P.p[kW2], fr, h), nullptr, partial);
  span.end();
  tp_sum(partial, m, "tp_reduce_scatter_mlp", "tp_all_reduce_mlp");
}

// Megatron's g after a row-parallel layer, and the backward of its f before a column-parallel
// one: the TP ranks' partial sums `partial` (T rows) summed into `out`, by an all-reduce, or
// with SP by a reduce-scatter over the tokens (T/tp rows). The two names are the cost model's
// tasks for the two cases (the byte check matches them); `partial` is left in an unspecified
// state (the all-reduce swaps it into `out`).
void StageModel::tp_sum(Mat& partial, Mat& out, std::string_view reduce_scatter_task,
                        std::string_view all_reduce_task) {
  if (x_.sp) {
    reduce_scatter_tokens(partial, out, reduce_scatter_task);
  } else {
    comm_.all_reduce(CommGroup::kTp, partial.data(), partial.size(), ReduceOp::kSum,
                     all_reduce_task);
    out.swap(partial);
  }
}

void StageModel::layer_forward(std::size_t block, const Mat& x, LayerCache& c, Mat& out) {
  const LayerParams P = layer_params(block, /*with_grads=*/false);
  const std::int64_t h = model_.hidden_size, qr = model_.q_width() / plan_.tp;
  const std::int64_t heads = model_.num_attention_heads / plan_.tp;
  TraceSpan span(trace_);
  const Eigen::Index Tl = x.rows(), T = x_.tokens;
  Scratch& w = *scratch_;
  take_cache(c, Tl, T, qr, heads);
  span.begin("norm1");
  c.x = x;
  layernorm_forward(x, P.p[kLn1G], P.p[kLn1B], c.ln1, c.ln1_mean, c.ln1_rstd);
  Mat& gathered = w.lf_gathered;
  const Mat* y1 = &c.ln1;
  if (x_.sp) {
    span.end();
    gather_tokens(c.ln1, gathered, "tp_all_gather_attn");
    y1 = &gathered;
  }
  span.begin("qkv");
  linear_forward(*y1, ConstMatMap(P.p[kWq], h, qr), P.p[kBq], c.q);
  linear_forward(*y1, ConstMatMap(P.p[kWk], h, qr), P.p[kBk], c.k);
  linear_forward(*y1, ConstMatMap(P.p[kWv], h, qr), P.p[kBv], c.v);
  if (x_.cp > 1) {
    // The whole sequences' K and V for this rank's queries; only this rank's rows are kept.
    span.end();
    gather_kv(c.k, c.v, w.lf_k_full, w.lf_v_full, "cp_all_gather_kv");
    span.begin(attention_task_);
    attention_forward(c.q, w.lf_k_full, w.lf_v_full, plan_.micro_batch_size, q_positions_, heads,
                      c.probs, c.attn);
  } else {
    span.begin(attention_task_);
    attention_forward(c.q, c.k, c.v, plan_.micro_batch_size, q_positions_, heads, c.probs,
                      c.attn);
  }
  if (plan_.recompute == Recompute::kSelective) mats_.give(c.probs);
  span.begin("out_proj");
  Mat &partial = w.lf_partial, &o = w.lf_o;
  linear_forward(c.attn, ConstMatMap(P.p[kWo], qr, h), nullptr, partial);
  span.end();
  tp_sum(partial, o, "tp_reduce_scatter_attn", "tp_all_reduce_attn");
  span.begin("residual1");  // the row-parallel bias, then the residual (as the cost model)
  o.rowwise() += ConstRowMap(P.p[kBo], h);
  c.x1 = x + o;
  span.begin("norm2");
  layernorm_forward(c.x1, P.p[kLn2G], P.p[kLn2B], c.ln2, c.ln2_mean, c.ln2_rstd);
  const bool moe = layouts_[block].expert_offset >= 0;
  // A folded MoE layer routes this rank's own tokens (Plan::expert_layout, moe_folded_forward).
  const bool folded = moe && plan_.expert_layout == ExpertLayout::kFolded;
  const Mat* y2 = &c.ln2;
  if (x_.sp && !folded) {
    span.end();
    gather_tokens(c.ln2, gathered, "tp_all_gather_mlp");
    y2 = &gathered;
  }
  span.end();
  Mat& m = w.lf_m;
  if (folded) {
    moe_folded_forward(block, c, m);
  } else if (moe) {
    Mat& moe_partial = w.lf_moe_partial;
    moe_forward(block, *y2, c.moe, moe_partial);
    tp_sum(moe_partial, m, "tp_reduce_scatter_mlp", "tp_all_reduce_mlp");
  } else {
    dense_mlp_forward(block, *y2, c, m);
  }
  span.begin("residual2");  // the row-parallel bias, then the residual (as the cost model)
  if (!moe) m.rowwise() += ConstRowMap(P.p[kB2], h);
  out = c.x1 + m;
  span.end();
  c.complete = true;
}

// The dense MLP's backward from the layer output's gradient dout to norm2's output gradient dyl
// (TP-summed, or reduce-scattered with SP).
void StageModel::dense_mlp_backward(std::size_t block, LayerCache& c, const Mat& dout, Mat& dyl) {
  const LayerParams P = layer_params(block, /*with_grads=*/true);
  const std::int64_t h = model_.hidden_size, fr = layouts_[block].tensors[kW1].cols;
  TraceSpan span(trace_);
  // MLP. g's backward: with SP, gather the output gradient of the row-parallel fc2 (it also
  // gives b2's gradient over every token, identical on all TP ranks).
  Scratch& w = *scratch_;
  Mat &gathered = w.mb_gathered, &dg = w.mb_dg, &da = w.mb_da, &dy = w.mb_dy;
  const Mat* dm = &dout;
  if (x_.sp) {
    gather_tokens(dout, gathered, "tp_all_gather_mlp_grad");
    dm = &gathered;
  }
  span.begin("fc2_dgrad");
  dg.noalias() = *dm * ConstMatMap(P.p[kW2], fr, h).transpose();
  span.begin("fc2_wgrad");
  weight_grad(block, kW2, fr, h, c.g, *dm, P.g[kB2], "fc2_wgrad");
  span.begin("gelu_bwd");
  gelu_backward(c.a, dg, da);
  span.begin("fc1_dgrad");
  dy.noalias() = da * ConstMatMap(P.p[kW1], h, fr).transpose();
  const Mat* y2 = &c.ln2;
  if (x_.sp) {
    span.end();
    gather_tokens(c.ln2, gathered,
                  "tp_all_gather_mlp_input");  // the weight gradient needs all of it
    y2 = &gathered;
  }
  span.begin("fc1_wgrad");
  weight_grad(block, kW1, h, fr, *y2, da, P.g[kB1], "fc1_wgrad");
  span.end();
  tp_sum(dy, dyl, "tp_reduce_scatter_mlp_grad", "tp_all_reduce_mlp_grad");
}

// An MoE layer's MLP backward, between the TP collectives the dense MLP's has: with SP, the
// output gradient and the norm2 output are gathered (the cost model regathers the input last;
// here it is gathered first, as the shared experts' weight gradient needs it: the same bytes).
void StageModel::moe_mlp_backward(std::size_t block, LayerCache& c, const Mat& dout, Mat& dyl) {
  Mat &dm_gathered = scratch_->moeb_dm, &y_gathered = scratch_->moeb_y, &dy = scratch_->moeb_dy;
  const Mat* dm = &dout;
  const Mat* y = &c.ln2;
  if (x_.sp) {
    gather_tokens(dout, dm_gathered, "tp_all_gather_mlp_grad");
    gather_tokens(c.ln2, y_gathered, "tp_all_gather_mlp_input");
    dm = &dm_gathered;
    y = &y_gathered;
  }
  moe_backward(block, *y, c.moe, *dm, dy);
  tp_sum(dy, dyl, "tp_reduce_scatter_mlp_grad", "tp_all_reduce_mlp_grad");
}

// A folded MoE layer (Plan::expert_layout folded; Megatron-Core's MoELayer.forward): the shared
// experts first, a TP-split MLP entered by the gather of the sequence-parallel norm2 output and
// left by its TP sum; then the routed experts on this rank's own tokens, whose outputs come back
// complete from the all-to-all (expert_tp 1).
void StageModel::moe_folded_forward(std::size_t block, LayerCache& c, Mat& m) {
  Scratch& w = *scratch_;
  const bool shared = model_.shared_expert_ffn_size > 0;
  if (shared) {
    const Mat* y = &c.ln2;
    if (x_.sp) {
      gather_tokens(c.ln2, w.lf_gathered, "tp_all_gather_shared");
      y = &w.lf_gathered;
    }
    moe_shared_forward(block, *y, c.moe, w.mff_shared_partial);
    tp_sum(w.mff_shared_partial, w.mff_shared, "tp_reduce_scatter_shared", "tp_all_reduce_shared");
  }
  moe_forward(block, c.ln2, c.moe, m);
  if (shared) m += w.mff_shared;
}

// Its backward: the routed experts and the router on this rank's tokens (complete, no TP sum),
// then the shared experts' on the gathered output gradient and input, TP-summed back to this
// rank's tokens, as the cost model orders them.
void StageModel::moe_folded_backward(std::size_t block, LayerCache& c, const Mat& dout,
                                     Mat& dyl) {
  Scratch& w = *scratch_;
  moe_backward(block, c.ln2, c.moe, dout, dyl);
  if (model_.shared_expert_ffn_size == 0) return;
  const Mat* dm = &dout;
  const Mat* y = &c.ln2;
  if (x_.sp) {
    gather_tokens(dout, w.mfb_dm, "tp_all_gather_shared_grad");
    gather_tokens(c.ln2, w.mfb_y, "tp_all_gather_shared_input");
    dm = &w.mfb_dm;
    y = &w.mfb_y;
  }
  w.mfb_dy.setZero(y->rows(), model_.hidden_size);
  moe_shared_backward(block, *y, c.moe, *dm, w.mfb_dy);
  tp_sum(w.mfb_dy, w.mfb_dy_shared, "tp_reduce_scatter_shared_grad", "tp_all_reduce_shared_grad");
  dyl += w.mfb_dy_shared;
}

void StageModel::layer_backward(std::size_t block, LayerCache& c, const Mat& dout, Mat& dx) {
  const LayerParams P = layer_params(block, /*with_grads=*/true);
  const std::int64_t h = model_.hidden_size, qr = model_.q_width() / plan_.tp;
  const std::int64_t heads = model_.num_attention_heads / plan_.tp;
  TraceSpan span(trace_);
  Scratch& w = *scratch_;
  Mat &dyl = w.lb_dyl, &gathered = w.lb_gathered, &dy = w.lb_dy, &dn = w.lb_dn,
      &dx1 = w.lb_dx1, &dattn = w.lb_dattn, &dq = w.lb_dq, &dk = w.lb_dk, &dv = w.lb_dv;
  if (layouts_[block].expert_offset >= 0 && plan_.expert_layout == ExpertLayout::kFolded) {
    moe_folded_backward(block, c, dout, dyl);
  } else if (layouts_[block].expert_offset >= 0) {
    moe_mlp_backward(block, c, dout, dyl);
  } else {
    dense_mlp_backward(block, c, dout, dyl);
  }
  span.begin("norm2_bwd");
  layernorm_backward(dyl, c.x1, P.p[kLn2G], c.ln2_mean, c.ln2_rstd, dn, P.g[kLn2G], P.g[kLn2B]);
  // The residual's gradient passes through unchanged; its one operation is this sum at the
  // branch point, so the span comes after norm2_bwd (the cost model lists it first).
  span.begin("residual2_bwd");
  dx1 = dout + dn;

  // Attention.
  const Mat* dop = &dx1;
  if (x_.sp) {
    span.end();
    gather_tokens(dx1, gathered, "tp_all_gather_attn_grad");
    dop = &gathered;
  }
  span.begin("out_proj_dgrad");
  dattn.noalias() = *dop * ConstMatMap(P.p[kWo], qr, h).transpose();
  span.begin("out_proj_wgrad");
  weight_grad(block, kWo, qr, h, c.attn, *dop, P.g[kBo], "out_proj_wgrad");
  span.end();
  attention_core_backward(c, dattn, heads, dq, dk, dv);
  span.begin("qkv_dgrad");
  dy.noalias() = dq * ConstMatMap(P.p[kWq], h, qr).transpose();
  dy.noalias() += dk * ConstMatMap(P.p[kWk], h, qr).transpose();
  dy.noalias() += dv * ConstMatMap(P.p[kWv], h, qr).transpose();
  const Mat* y1 = &c.ln1;
  if (x_.sp) {
    span.end();
    gather_tokens(c.ln1, gathered, "tp_all_gather_attn_input");
    y1 = &gathered;
  }
  span.begin("qkv_wgrad");
  weight_grad(block, kWq, h, qr, *y1, dq, P.g[kBq], "qkv_wgrad");
  weight_grad(block, kWk, h, qr, *y1, dk, P.g[kBk], "qkv_wgrad");
  weight_grad(block, kWv, h, qr, *y1, dv, P.g[kBv], "qkv_wgrad");
  span.end();
  tp_sum(dy, dyl, "tp_reduce_scatter_attn_grad", "tp_all_reduce_attn_grad");
  span.begin("norm1_bwd");
  layernorm_backward(dyl, c.x, P.p[kLn1G], c.ln1_mean, c.ln1_rstd, dn, P.g[kLn1G], P.g[kLn1B]);
  span.begin("residual1_bwd");  // as residual2_bwd: the sum at the branch point
  dx = dx1 + dn;
  span.end();
}

void StageModel::attention_core_backward(LayerCache& c, const Mat& dattn, std::int64_t heads,
                                         Mat& dq, Mat& dk, Mat& dv) {
  TraceSpan span(trace_);
  // Context parallelism: the forward kept only this rank's K and V, so they are gathered again
  // (the cost model's cp_all_gather_kv_bwd).
  Scratch& w = *scratch_;
  const bool cp = x_.cp > 1;
  if (cp) gather_kv(c.k, c.v, w.ab_k_full, w.ab_v_full, "cp_all_gather_kv_bwd");
  const Mat& k = cp ? w.ab_k_full : c.k;
  const Mat& v = cp ? w.ab_v_full : c.v;
  const std::int64_t b = plan_.micro_batch_size;
  if (c.probs.size() == 0) {
    // Selective recompute: rebuild the softmax (Korthikanti et al. 2022, sec. 5).
    TraceScope recompute(trace_, {.pass = 'R'});
    span.begin(attention_task_);
    take(c.probs, b * heads * static_cast<std::int64_t>(q_positions_.size()), k.rows() / b);
    attention_forward(c.q, k, v, b, q_positions_, heads, c.probs, w.ab_out);
    span.end();
  }
  span.begin(attention_bwd_task_);
  if (!cp) {
    attention_backward(c.q, k, v, c.probs, dattn, b, q_positions_, heads, dq, dk, dv);
    mats_.give(c.probs);
    return;
  }
  attention_backward(c.q, k, v, c.probs, dattn, b, q_positions_, heads, dq, w.ab_dk_full,
                     w.ab_dv_full);
  mats_.give(c.probs);
  span.end();
  reduce_scatter_kv_grad(w.ab_dk_full, w.ab_dv_full, dk, dv);
}

void StageModel::embedding_forward(const std::int32_t* tokens, Mat& out) {
  const BlockLayout& l = layouts_[0];
  const TensorSlice& wte = l.tensors[kWte];
  const float* p = access_.params(0);
  const std::int64_t h = model_.hidden_size;
  TraceSpan span(trace_);
  span.begin("embedding");
  // Vocabulary-parallel lookup: rows outside this rank's slice contribute zeros.
  Mat& e = scratch_->emb_e;
  e.setZero(x_.tokens, h);
  for (std::int64_t i = 0; i < x_.tokens; ++i) {
    const std::int64_t row = tokens[i] - wte.row0;
    if (row >= 0 && row < wte.rows) e.row(i) = ConstRowMap(p + wte.offset + row * h, h);
  }
  span.end();
  tp_sum(e, out, "tp_reduce_scatter_embedding", "tp_all_reduce_embedding");
  const std::int64_t first_token = x_.sp ? x_.tp_rank * x_.local_tokens : 0;
  span.begin("embedding");  // the positions, added after the vocabulary-parallel sum
  const float* wpe = p + l.tensors[kWpe].offset;
  for (std::int64_t i = 0; i < out.rows(); ++i)
    out.row(i) += ConstRowMap(wpe + x_.position(first_token + i) * h, h);
  span.end();
}

void StageModel::embedding_backward(const std::int32_t* tokens, const Mat& dout) {
  const BlockLayout& l = layouts_[0];
  const TensorSlice& wte = l.tensors[kWte];
  float* g = access_.grads(0);
  const std::int64_t h = model_.hidden_size;
  Mat& gathered = scratch_->emb_gathered;
  const Mat* d = &dout;
  if (x_.sp) {
    gather_tokens(dout, gathered, "tp_all_gather_embedding_grad");
    d = &gathered;
  }
  TraceSpan span(trace_);
  span.begin("embedding_bwd");
  float* dwpe = g + l.tensors[kWpe].offset;
  for (std::int64_t i = 0; i < x_.tokens; ++i) {
    RowMap(dwpe + x_.position(i) * h, h) += d->row(i);
    const std::int64_t row = tokens[i] - wte.row0;
    if (row >= 0 && row < wte.rows) RowMap(g + wte.offset + row * h, h) += d->row(i);
  }
}

const float* StageModel::head_weights() {
  const auto [block, offset] = head_matrix();
  return access_.params(block) + offset;
}

float* StageModel::head_grads() {
  const auto [block, offset] = head_matrix();
  return access_.grads(block) + offset;
}

double StageModel::head_forward(MicroBatch& s, const Mat& x, const std::int32_t* targets,
                                float scale) {
  const std::size_t hb = layouts_.size() - 1;
  const BlockLayout& l = layouts_[hb];
  const float* p = access_.params(hb);
  const std::int64_t h = model_.hidden_size, vr = padded_vocab(model_, plan_.tp) / plan_.tp;
  const std::int64_t v0 = x_.tp_rank * vr, T = x_.tokens;
  TraceSpan span(trace_);
  span.begin("final_norm");
  Scratch& w = *scratch_;
  take(s.head_in, x.rows(), h) = x;
  s.targets.assign(targets, targets + T);
  s.loss_scale = scale;
  Mat& y = w.head_y;
  vecs_.take(s.lnf_mean, x.rows());
  vecs_.take(s.lnf_rstd, x.rows());
  take(s.lnf, T, h);
  take(s.probs, T, vr);
  layernorm_forward(x, p + l.tensors[kLnfG].offset, p + l.tensors[kLnfB].offset, y, s.lnf_mean,
                    s.lnf_rstd);
  if (x_.sp) {
    span.end();
    gather_tokens(y, s.lnf, "tp_all_gather_head");
  } else {
    s.lnf.swap(y);
  }
  span.begin("lm_head");
  Mat& logits = w.head_logits;  // (T, V/tp), float32 (Megatron keeps the cross-entropy in fp32 as well)
  logits.noalias() = s.lnf * ConstMatMap(head_weights(), vr, h).transpose();
  if (logits_sink_ != nullptr) logits_sink_->insert(logits_sink_->end(), logits.data(),
                                                    logits.data() + logits.size());
  span.begin("cross_entropy");  // in four pieces around its three all-reduces
  // Vocabulary padding never wins: its logits are -inf.
  const std::int64_t valid = std::clamp<std::int64_t>(model_.vocab_size - v0, 0, vr);
  if (valid < vr)
    logits.rightCols(vr - valid).setConstant(-std::numeric_limits<float>::infinity());
  // Megatron's vocabulary-parallel cross-entropy: three all-reduces of T floats.
  Vec& mx = w.head_max;
  mx = logits.rowwise().maxCoeff();
  span.end();
  comm_.all_reduce(CommGroup::kTp, mx.data(), T, ReduceOp::kMax, "tp_all_reduce_logit_max");
  span.begin("cross_entropy");
  s.probs = (logits.colwise() - mx).array().exp().matrix();
  Vec& sum = w.head_sum;
  sum = s.probs.rowwise().sum();
  span.end();
  comm_.all_reduce(CommGroup::kTp, sum.data(), T, ReduceOp::kSum, "tp_all_reduce_sum_exp");
  span.begin("cross_entropy");
  Vec& target = w.head_target;
  target.setZero(T);
  for (std::int64_t i = 0; i < T; ++i) {
    const std::int64_t col = targets[i] - v0;
    if (col >= 0 && col < vr) target[i] = logits(i, col);
  }
  span.end();
  comm_.all_reduce(CommGroup::kTp, target.data(), T, ReduceOp::kSum,
                   "tp_all_reduce_target_logit");
  span.begin("cross_entropy");
  double loss = 0;
  for (std::int64_t i = 0; i < T; ++i)
    loss += std::log(static_cast<double>(sum[i])) + mx[i] - target[i];
  s.probs.array().colwise() /= sum.array();
  span.end();
  return loss;
}

void StageModel::head_backward(MicroBatch& s, Mat& dx) {
  const std::size_t hb = layouts_.size() - 1;
  const BlockLayout& l = layouts_[hb];
  const float* p = access_.params(hb);
  float* g = access_.grads(hb);
  const std::int64_t h = model_.hidden_size, vr = padded_vocab(model_, plan_.tp) / plan_.tp;
  const std::int64_t v0 = x_.tp_rank * vr;
  TraceSpan span(trace_);
  span.begin("cross_entropy_bwd");
  Mat& dlogits = s.probs;  // softmax - one_hot(target), times the loss scale
  for (std::int64_t i = 0; i < x_.tokens; ++i) {
    const std::int64_t col = s.targets[i] - v0;
    if (col >= 0 && col < vr) dlogits(i, col) -= 1.0f;
  }
  dlogits *= s.loss_scale;
  Mat& dy = scratch_->head_dy;
  span.begin("lm_head_dgrad");
  dy.noalias() = dlogits * ConstMatMap(head_weights(), vr, h);
  span.begin("lm_head_wgrad");
  if (deferring_ == nullptr) {
    MatMap(head_grads(), vr, h).noalias() += dlogits.transpose() * s.lnf;
  } else {
    const auto [block, offset] = head_matrix();
    defer_weight_grad("lm_head_wgrad", block, offset, vr, h, dlogits, s.lnf);
  }
  span.end();
  Mat& dyl = scratch_->head_dyl;
  tp_sum(dy, dyl, "tp_reduce_scatter_head_grad", "tp_all_reduce_head_grad");
  span.begin("final_norm_bwd");
  layernorm_backward(dyl, s.head_in, p + l.tensors[kLnfG].offset, s.lnf_mean, s.lnf_rstd, dx,
                     g + l.tensors[kLnfG].offset, g + l.tensors[kLnfB].offset);
  span.end();
}

// The cache of layer `b`'s forward: every buffer at its shape, from the pools (workspace.h).
void StageModel::take_cache(LayerCache& c, Eigen::Index Tl, Eigen::Index T, Eigen::Index qr,
                            std::int64_t heads) {
  const Eigen::Index h = model_.hidden_size;
  const auto sq = static_cast<Eigen::Index>(q_positions_.size());
  for (Mat* m : {&c.x, &c.ln1, &c.x1, &c.ln2}) take(*m, Tl, h);
  for (Mat* m : {&c.q, &c.k, &c.v, &c.attn}) take(*m, T, qr);
  take(c.probs, plan_.micro_batch_size * heads * sq, model_.seq_len);
  for (Vec* v : {&c.ln1_mean, &c.ln1_rstd, &c.ln2_mean, &c.ln2_rstd}) vecs_.take(*v, Tl);
}

// The pass slot that does not hold `in` (gpt.cc's Scratch).
StageModel::Slot StageModel::other_slot(Mat* slots, Slot in) {
  return {in.m == &slots[0] ? &slots[1] : &slots[0]};
}

// A micro-batch's state: a released one if any (its vectors keep their capacity; its matrices
// come from the pools as the passes take them).
StageModel::MicroBatch& StageModel::start_micro_batch(std::int64_t chunk, std::int64_t mb,
                                                      std::size_t layers) {
  std::unique_ptr<MicroBatch> state;
  if (spare_batches_.empty()) {
    state = std::make_unique<MicroBatch>();
  } else {
    state = std::move(spare_batches_.back());
    spare_batches_.pop_back();
  }
  state->layers.resize(layers);
  in_flight_.push_back({chunk, mb, std::move(state)});
  return *in_flight_.back().state;
}

void StageModel::finish_micro_batch(std::size_t at) {
  MicroBatch& s = *in_flight_[at].state;
  for (LayerCache& c : s.layers) release(c, /*keep_input=*/false);
  give_or_hold("head.final_norm_in", s.head_in);
  give_or_hold("head.final_norm_out", s.lnf);
  give_or_hold("head.softmax", s.probs);
  for (Vec* v : {&s.lnf_mean, &s.lnf_rstd}) vecs_.give(*v);
  spare_batches_.push_back(std::move(in_flight_[at].state));
  in_flight_.erase(in_flight_.begin() + static_cast<std::ptrdiff_t>(at));
}

// The steps of a chunk's pass on host matrices; stage_model.h orders them.
double StageModel::forward(std::int64_t chunk, std::int64_t mb, const std::int32_t* tokens,
                           const std::int32_t* targets, const Mat* input, Mat* output,
                           float loss_scale) {
  loss_scale_ = loss_scale;
  routing_hash_ = 0;
  MicroBatch& s =
      start_micro_batch(chunk, mb, chunk_blocks_[static_cast<std::size_t>(chunk)].size());
  struct Steps {
    StageModel& m;
    MicroBatch& s;
    const std::int32_t *tokens, *targets;
    const Mat* input;
    Mat* output;
    float loss_scale;
    Mat* slots = m.scratch_->fwd_slot;
    Slot embed() {
      s.tokens.assign(tokens, tokens + m.x_.tokens);
      m.embedding_forward(tokens, slots[0]);
      return {&slots[0]};
    }
    Slot received() { return {const_cast<Mat*>(input)}; }  // read only
    Slot layer(std::size_t i, std::size_t b, Slot h) {
      const Slot out = other_slot(slots, h);
      m.layer_forward(b, *h.m, s.layers[i], *out.m);
      return out;
    }
    void keep_input_only(std::size_t i) {
      LayerCache& c = s.layers[i];
      m.release(c, /*keep_input=*/true);
      if (!m.plan_.partition_activations) return;
      // Only this TP rank's rows of the input (ZeRO-R's partitioned checkpoint).
      const std::int64_t rows = m.x_.tokens / m.plan_.tp;
      Mat& part = m.take(m.scratch_->recompute_x, rows, c.x.cols());
      part = c.x.middleRows(m.x_.tp_rank * rows, rows);
      c.x.swap(part);
    }
    double head(Slot h) { return m.head_forward(s, *h.m, targets, loss_scale); }
    // Copied, not swapped: a swap would hand the pass slot the message's previous buffer (none
    // before the first send), and which slot ends up without one depends on the schedule's
    // order, so ZB-H1 needed a second step to size them all (issue 28).
    void send(Slot h) { *output = *h.m; }
  } steps{*this, s, tokens, targets, input, output, loss_scale};
  return forward_chunk<Slot>(geo_, chunk, pass_context(), steps);
}

namespace {
// The data-parallel events of a B pass: parameters are acquired and released as they come, the
// blocks' backward_done (ZeRO-2/3 reduce-scatter) kept for the micro-batch's W pass.
class DeferredDone final : public DpEvents {
 public:
  DeferredDone(DpEvents& inner, std::vector<std::size_t>& done) : inner_(inner), done_(done) {}
  void acquire(std::size_t b, DpPoint point) override { inner_.acquire(b, point); }
  void release(std::size_t b) override { inner_.release(b); }
  void backward_done(std::size_t b) override { done_.push_back(b); }

 private:
  DpEvents& inner_;
  std::vector<std::size_t>& done_;
};
}  // namespace

void StageModel::backward(std::int64_t chunk, std::int64_t mb, const Mat* grad_output,
                          Mat* grad_input) {
  std::size_t at = 0;
  while (at < in_flight_.size() && (in_flight_[at].chunk != chunk || in_flight_[at].mb != mb))
    ++at;
  TRAINPLAN_CHECK(at < in_flight_.size()) << "backward of micro-batch " << mb << " chunk "
                                          << chunk << " without its forward";
  struct Steps {
    StageModel& m;
    MicroBatch& s;
    const Mat* grad_output;
    Mat* grad_input;
    Mat* slots = m.scratch_->bwd_slot;
    Slot head_backward() {
      m.head_backward(s, slots[0]);
      return {&slots[0]};
    }
    Slot received() { return {const_cast<Mat*>(grad_output)}; }  // read only
    bool complete(std::size_t i) const { return s.layers[i].complete; }
    Slot recompute_input(std::size_t i) {
      LayerCache& c = s.layers[i];
      Mat& x = m.scratch_->recompute_x;
      if (!m.plan_.partition_activations) {
        x.swap(c.x);  // layer_forward copies it back into the cache
        return {&x};
      }
      m.take(x, m.x_.tokens, c.x.cols());
      m.gather_tokens(c.x, x, "tp_all_gather_checkpoint");  // ZeRO-R: the rows of every TP rank
      m.mats_.give(c.x);
      return {&x};
    }
    void recompute(std::size_t i, std::size_t b, Slot x) {
      m.recomputing_ = true;
      m.layer_forward(b, *x.m, s.layers[i], m.scratch_->recompute_out);
      m.recomputing_ = false;
    }
    Slot layer_backward(std::size_t i, std::size_t b, Slot d) {
      const Slot dx = other_slot(slots, d);
      m.layer_backward(b, s.layers[i], *d.m, *dx.m);
      return dx;
    }
    void drop(std::size_t i) { m.release(s.layers[i], /*keep_input=*/false); }
    void embedding_backward(Slot d) { m.embedding_backward(s.tokens.data(), *d.m); }
    void send(Slot d) { *grad_input = *d.m; }  // copied, as forward's send
  } steps{*this, *in_flight_[at].state, grad_output, grad_input};
  backward_state_ = in_flight_[at].state.get();
  if (deferring_ == nullptr) {
    backward_chunk<Slot>(geo_, chunk, pass_context(), steps);
  } else {
    // B pass: the blocks' backward_done calls wait for W (backward_weight).
    DeferredDone events(access_, deferring_->done);
    backward_chunk<Slot>(geo_, chunk, {plan_, model_.tie_word_embeddings, events, trace_}, steps);
  }
  finish_micro_batch(at);
  backward_state_ = nullptr;
}

void StageModel::weight_grad(std::size_t block, std::size_t tensor, std::int64_t rows,
                             std::int64_t cols, const ConstMatRef& x, const ConstMatRef& dy,
                             float* db, std::string_view task, std::int64_t capacity_rows) {
  const std::size_t offset = layouts_[block].tensors[tensor].offset;
  if (deferring_ == nullptr) {
    MatMap dw(access_.grads(block) + offset, rows, cols);
    linear_backward(x, ConstMatMap(access_.params(block) + offset, rows, cols), dy, nullptr, dw,
                    db);
    return;
  }
  if (db != nullptr) RowMap(db, dy.cols()) += dy.colwise().sum();
  defer_weight_grad(task, block, offset, rows, cols, x, dy, capacity_rows);
}

// The gradient buffer is looked up when W runs: under ZeRO-2/3 another micro-batch's W may have
// reduce-scattered and freed the one B wrote its bias gradients into. An operand that is rows of
// the micro-batch's cache is referenced (give_or_hold keeps its buffer until W); another is
// copied, at `capacity_rows` rows (the used ones first) so that the pools find the size again.
void StageModel::defer_weight_grad(std::string_view task, std::size_t block, std::size_t offset,
                                   std::int64_t rows, std::int64_t cols, const ConstMatRef& x,
                                   const ConstMatRef& dy, std::int64_t capacity_rows) {
  TRAINPLAN_CHECK(capacity_rows == 0 || capacity_rows >= x.rows())
      << task << ": " << x.rows() << " rows over a capacity of " << capacity_rows;
  if (x.rows() == 0) return;  // an expert no token chose: dW += 0
  const std::int64_t copy_rows = capacity_rows > 0 ? capacity_rows : x.rows();
  DeferredGrad& d = deferring_->grads.emplace_back();
  d.task = task;
  d.block = block;
  d.offset = offset;
  d.rows = rows;
  d.cols = cols;
  d.used_rows = x.rows();
  d.x_cols = x.cols();
  d.dy_cols = dy.cols();
  auto keep = [&](const ConstMatRef& m, Mat& copy) -> const float* {
    // Contiguous rows (a row-major block of whole rows) can be read in place.
    const bool whole_rows = m.rows() <= 1 || m.outerStride() == m.cols();
    if (whole_rows && kept_until_weight_pass(m.data())) return m.data();
    take(copy, copy_rows, m.cols()).topRows(d.used_rows) = m;
    return copy.data();
  };
  d.x = keep(x, d.x_copy);
  d.dy = keep(dy, d.dy_copy);
}

void StageModel::backward_input(std::int64_t chunk, std::int64_t mb, const Mat* grad_output,
                                Mat* grad_input) {
  WeightPass* w = nullptr;
  if (spare_passes_.empty()) {
    weight_passes_.push_back({chunk, mb, std::make_unique<WeightPass>()});
  } else {
    weight_passes_.push_back({chunk, mb, std::move(spare_passes_.back())});
    spare_passes_.pop_back();
  }
  w = weight_passes_.back().pass.get();
  deferring_ = w;
  backward(chunk, mb, grad_output, grad_input);
  deferring_ = nullptr;
}

void StageModel::backward_weight(std::int64_t chunk, std::int64_t mb) {
  std::size_t at = 0;
  while (at < weight_passes_.size() &&
         (weight_passes_[at].chunk != chunk || weight_passes_[at].mb != mb))
    ++at;
  TRAINPLAN_CHECK(at < weight_passes_.size())
      << "weight pass of micro-batch " << mb << " chunk " << chunk << " without its B pass";
  WeightPass& w = *weight_passes_[at].pass;
  {
    TraceScope weight(trace_, {.pass = 'W'});
    TraceSpan span(trace_);
    for (DeferredGrad& d : w.grads) {
      span.begin(d.task);
      MatMap(access_.grads(d.block) + d.offset, d.rows, d.cols).noalias() +=
          ConstMatMap(d.x, d.used_rows, d.x_cols).transpose() *
          ConstMatMap(d.dy, d.used_rows, d.dy_cols);
      mats_.give(d.x_copy);
      mats_.give(d.dy_copy);
    }
    span.end();
  }
  for (HeldBuffer& h : w.held) mats_.give(h.m);
  w.held.clear();  // capacity kept
  for (std::size_t b : w.done) access_.backward_done(b);
  w.grads.clear();  // capacity kept for the pass's next use
  w.done.clear();
  spare_passes_.push_back(std::move(weight_passes_[at].pass));
  weight_passes_.erase(weight_passes_.begin() + static_cast<std::ptrdiff_t>(at));
}

// The memory account (memory_account.h): every matrix the model holds, by what it lives for.
void StageModel::account_memory(MemoryAccount& account) const {
  for (const InFlight& f : in_flight_) {
    for (const LayerCache& c : f.state->layers) {
      account_cache(c, account);
      for (const Vec* v : {&c.ln1_mean, &c.ln1_rstd, &c.ln2_mean, &c.ln2_rstd})
        account.add("layer.norm_stats", MemoryUse::kKeptForBackward, bytes_of(*v));
      const MoeCache& r = c.moe;
      for (double b : {bytes_of(r.experts), bytes_of(r.row_of_pair), bytes_of(r.assigned)})
        account.add("moe.routing_indices", MemoryUse::kKeptForBackward, b);
    }
    const MicroBatch& s = *f.state;
    account.add("head.final_norm_in", MemoryUse::kKeptForBackward, bytes_of(s.head_in));
    account.add("head.final_norm_out", MemoryUse::kKeptForBackward, bytes_of(s.lnf));
    account.add("head.softmax", MemoryUse::kKeptForBackward, bytes_of(s.probs));
  }
  for (const PendingWeightPass& p : weight_passes_) {
    for (const HeldBuffer& h : p.pass->held) account.add(h.name, h.use, bytes_of(h.m));
    for (const DeferredGrad& d : p.pass->grads) {
      account.add(std::string("copy.x.") + std::string(d.task), MemoryUse::kWeightPassCopies,
                  bytes_of(d.x_copy));
      account.add(std::string("copy.dy.") + std::string(d.task), MemoryUse::kWeightPassCopies,
                  bytes_of(d.dy_copy));
    }
  }
  account_scratch(account);
  account.add("pool.matrices", MemoryUse::kPooled, mats_.bytes());
  account.add("pool.vectors", MemoryUse::kPooled, vecs_.bytes());
}

// A layer cache's matrices; the routed experts' buffers (capacity rows, moe.h) split into the
// rows the routing used and the rest, whose pages are resident only where an earlier
// micro-batch wrote them.
void StageModel::account_cache(const LayerCache& c, MemoryAccount& account) const {
  const MoeCache& r = c.moe;
  const std::int64_t used = r.expert_row0.empty() ? 0 : r.expert_row0.back();
  for (auto [name, m] : cache_mats(c)) {
    const bool routed = m == &r.x || m == &r.a || m == &r.g;
    if (!routed || m->rows() == 0) {
      account.add(name, MemoryUse::kKeptForBackward, bytes_of(*m));
      continue;
    }
    const double row_bytes = static_cast<double>(m->cols()) * sizeof(float);
    account.add(name, MemoryUse::kKeptForBackward, static_cast<double>(used) * row_bytes);
    account.add(std::string(name) + ".unused_capacity", MemoryUse::kKeptForBackward,
                static_cast<double>(m->rows() - used) * row_bytes);
  }
}

// gpt.cc's Scratch and moe.h's MoeScratch, by the function each buffer serves.
void StageModel::account_scratch(MemoryAccount& account) const {
  const Scratch& w = *scratch_;
  const std::pair<const char*, std::vector<const Mat*>> gpt[] = {
      {"scratch.pass_slots", {&w.fwd_slot[0], &w.fwd_slot[1], &w.bwd_slot[0], &w.bwd_slot[1]}},
      {"scratch.recompute", {&w.recompute_x, &w.recompute_out}},
      {"scratch.cp_kv", {&w.kv_mine, &w.kv_all, &w.kvg_all, &w.kvg_mine}},
      {"scratch.layer_forward",
       {&w.mlp_partial, &w.lf_gathered, &w.lf_k_full, &w.lf_v_full, &w.lf_partial, &w.lf_o,
        &w.lf_m, &w.lf_moe_partial}},
      {"scratch.mlp_backward", {&w.mb_gathered, &w.mb_dg, &w.mb_da, &w.mb_dy}},
      {"scratch.moe_mlp_backward", {&w.moeb_dm, &w.moeb_y, &w.moeb_dy}},
      {"scratch.moe_folded_forward", {&w.mff_shared_partial, &w.mff_shared}},
      {"scratch.moe_folded_backward", {&w.mfb_dm, &w.mfb_y, &w.mfb_dy, &w.mfb_dy_shared}},
      {"scratch.layer_backward",
       {&w.lb_dyl, &w.lb_gathered, &w.lb_dy, &w.lb_dn, &w.lb_dx1, &w.lb_dattn, &w.lb_dq,
        &w.lb_dk, &w.lb_dv}},
      {"scratch.attention_backward",
       {&w.ab_k_full, &w.ab_v_full, &w.ab_out, &w.ab_dk_full, &w.ab_dv_full}},
      {"scratch.embedding", {&w.emb_e, &w.emb_gathered}},
      {"scratch.head", {&w.head_y, &w.head_logits, &w.head_dy, &w.head_dyl}}};
  const MoeScratch& e = moe_scratch_;
  const std::pair<const char*, std::vector<const Mat*>> moe[] = {
      {"scratch.moe_route", {&e.logits}},
      {"scratch.moe_dispatch", {&e.send, &e.recv}},
      {"scratch.moe_experts_out", {&e.expert_out, &e.outputs, &e.shared_o}},
      {"scratch.moe_shared_backward", {&e.sb_dg, &e.sb_da}},
      {"scratch.moe_dispatch_backward", {&e.dsend, &e.dgates, &e.drecv, &e.dx_rows}},
      {"scratch.moe_experts_backward", {&e.eb_d, &e.eb_dg, &e.eb_da, &e.eb_dx}},
      {"scratch.moe_router_backward", {&e.rb_dprobs, &e.rb_dlogits}}};
  using Named = std::pair<const char*, std::vector<const Mat*>>;
  for (std::span<const Named> list : {std::span<const Named>(gpt), std::span<const Named>(moe)})
    for (const auto& [name, mats] : list)
      for (const Mat* m : mats) account.add(name, MemoryUse::kScratch, bytes_of(*m));
  for (const Vec* v : {&w.head_max, &w.head_sum, &w.head_target})
    account.add("scratch.head", MemoryUse::kScratch, bytes_of(*v));
}

}  // namespace trainplan::executor
