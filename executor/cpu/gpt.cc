// One pipeline stage of a GPT; see gpt.h. Each TP collective below is named by the cost-model
// task it is (core/cost/tasks.cc), and each stretch of math between them by a TraceSpan named
// by the compute task(s) it is, so the code, the cost model and the trace read side by side.
#include "executor/cpu/gpt.h"

#include "executor/stage_model.h"

#include <array>
#include <cmath>
#include <limits>
#include <new>
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
                       BlockAccess& access, MoeCapacityShares capacity_shares)
    : StageModelBase(model, plan, stage, comm.group_rank(CommGroup::kTp),
                     comm.group_rank(CommGroup::kCp), comm.group_rank(CommGroup::kEp),
                     comm.group_rank(CommGroup::kExpertTp)),
      model_(model),
      plan_(plan),
      comm_(comm),
      access_(access) {
  for (std::int64_t j = 0; j < x_.seq_tokens; ++j) q_positions_.push_back(x_.position(j));
  if (model_.is_moe()) {
    // The capacity of the tokens one router sees (params.h's MoeCapacityShares): this rank's,
    // its cp part of the sequences and, folded over tp with sequence parallelism, its TP rank's
    // rows of those; on one rank given shares, one share of the micro-batch.
    const bool folded_sp = plan_.moe_routes_own_rows() && x_.sp;
    capacity_shares_ = capacity_shares;
    capacity_share_count_ = capacity_shares.cp * capacity_shares.tp;
    TRAINPLAN_CHECK(capacity_share_count_ == 1 || (x_.cp == 1 && !folded_sp))
        << "capacity shares are for the single-process reference of a plan that splits the "
           "routed tokens";
    const std::int64_t routed = folded_sp ? x_.local_tokens : x_.tokens;
    expert_capacity_ =
        moe_expert_capacity(routed / capacity_share_count_, model_.experts_per_token,
                            model_.num_experts, model_.moe_capacity_factor);
  }
  // Sized once, from the plan; the kernels' workspace first, below every frame.
  arena_.reserve(scratch_floats());
  kernel_workspace_ = arena_.floats(static_cast<std::int64_t>(kernel_workspace_floats()));
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

void StageModel::gather_tokens(const ConstMatRef& local, MatRef full, std::string_view task) {
  TRAINPLAN_CHECK(full.rows() == x_.tokens && full.cols() == local.cols())
      << task << ": the gathered rows' buffer is " << full.rows() << " x " << full.cols();
  comm_.all_gather(CommGroup::kTp, local.data(), full.data(), local.size(), task);
}

void StageModel::reduce_scatter_tokens(const ConstMatRef& full, MatRef local,
                                       std::string_view task) {
  TRAINPLAN_CHECK(local.rows() == x_.local_tokens && local.cols() == full.cols())
      << task << ": the scattered rows' buffer is " << local.rows() << " x " << local.cols();
  comm_.reduce_scatter(CommGroup::kTp, full.data(), local.data(), local.size(), task);
}

ConstMatMap StageModel::gathered_rows(const ConstMatRef& local, std::string_view task) {
  if (!x_.sp) return ConstMatMap(local.data(), local.rows(), local.cols());
  MatMap full = arena_.mat(x_.tokens, local.cols());
  gather_tokens(local, full, task);
  return ConstMatMap(full.data(), full.rows(), full.cols());
}

// Context parallelism (Megatron-LM's, as Transformer Engine's AttnFuncWithCPAndKVAllGather):
// one all-gather of this rank's [K | V] rows over the cp group, reordered into each sequence's
// token order (the ranks hold data.h's load-balanced chunks).
void StageModel::gather_kv(const ConstMatRef& k, const ConstMatRef& v, MatRef k_full,
                           MatRef v_full, std::string_view task) {
  const std::int64_t T = x_.tokens, w = k.cols(), cp = x_.cp;
  ScratchArena::Frame frame(arena_);
  MatMap mine = arena_.mat(T, 2 * w);
  MatMap all = arena_.mat(cp * T, 2 * w);
  mine << k, v;
  comm_.all_gather(CommGroup::kCp, mine.data(), all.data(), mine.size(), task);
  const std::int64_t b = plan_.micro_batch_size, sl = x_.seq_tokens, s = x_.seq_len;
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
void StageModel::reduce_scatter_kv_grad(const ConstMatRef& dk_full, const ConstMatRef& dv_full,
                                        MatRef dk, MatRef dv) {
  const std::int64_t T = x_.tokens, w = dk_full.cols(), cp = x_.cp;
  const std::int64_t b = plan_.micro_batch_size, sl = x_.seq_tokens, s = x_.seq_len;
  ScratchArena::Frame frame(arena_);
  MatMap all = arena_.mat(cp * T, 2 * w);
  MatMap mine = arena_.mat(T, 2 * w);
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

void StageModel::dense_mlp_forward(std::size_t block, const ConstMatRef& y2, LayerCache& c,
                                   MatRef partial) {
  const LayerParams P = layer_params(block, /*with_grads=*/false);
  const std::int64_t h = model_.hidden_size, fr = layouts_[block].tensors[kW1].cols;
  TraceSpan span(trace_);
  span.begin("fc1");
  linear_forward(y2, ConstMatMap(P.p[kW1], h, fr), P.p[kB1], take(c.a, y2.rows(), fr));
  span.begin("gelu");
  gelu_forward(c.a, take(c.g, y2.rows(), fr));
  span.begin("fc2");
  linear_forward(c.g, ConstMatMap(P.p[kW2], fr, h), nullptr, partial);
  span.end();
}

// Megatron's g after a row-parallel layer, and the backward of its f before a column-parallel
// one: the TP ranks' partial sums `partial` (T rows) summed into `out`, by an all-reduce, or
// with SP by a reduce-scatter over the tokens (T/tp rows). The two names are the cost model's
// tasks for the two cases (the byte check matches them). Without SP the all-reduce runs in
// place, and `out` is best `partial` itself (a caller that passes another buffer gets a copy).
void StageModel::tp_sum(MatRef partial, MatRef out, std::string_view reduce_scatter_task,
                        std::string_view all_reduce_task) {
  if (x_.sp) {
    reduce_scatter_tokens(partial, out, reduce_scatter_task);
    return;
  }
  comm_.all_reduce(CommGroup::kTp, partial.data(), partial.size(), ReduceOp::kSum,
                   all_reduce_task);
  if (out.data() != partial.data()) out = partial;
}

void StageModel::layer_forward(std::size_t block, const ConstMatRef& x, LayerCache& c,
                               MatRef out) {
  const LayerParams P = layer_params(block, /*with_grads=*/false);
  const std::int64_t h = model_.hidden_size, qr = model_.q_width() / plan_.tp;
  const std::int64_t heads = model_.num_attention_heads / plan_.tp;
  TraceSpan span(trace_);
  const Eigen::Index Tl = x.rows(), T = x_.tokens;
  take_cache(c, Tl, T, qr, heads);
  span.begin("norm1");
  if (x.data() != c.x.data()) c.x = x;  // a recompute reads the cache's own input
  layernorm_forward(x, P.p[kLn1G], P.p[kLn1B], c.ln1, c.ln1_mean, c.ln1_rstd);
  {
    ScratchArena::Frame frame(arena_);  // the gathered input, cp's whole-sequence K and V
    if (x_.sp) span.end();
    const ConstMatMap y1 = gathered_rows(c.ln1, "tp_all_gather_attn");
    span.begin("qkv");
    linear_forward(y1, ConstMatMap(P.p[kWq], h, qr), P.p[kBq], c.q);
    linear_forward(y1, ConstMatMap(P.p[kWk], h, qr), P.p[kBk], c.k);
    linear_forward(y1, ConstMatMap(P.p[kWv], h, qr), P.p[kBv], c.v);
    if (x_.cp > 1) {
      // The whole sequences' K and V for this rank's queries; only this rank's rows are kept.
      span.end();
      const std::int64_t S = plan_.micro_batch_size * x_.seq_len;
      MatMap k_full = arena_.mat(S, qr), v_full = arena_.mat(S, qr);
      gather_kv(c.k, c.v, k_full, v_full, "cp_all_gather_kv");
      span.begin(attention_task_);
      attention_forward(c.q, k_full, v_full, plan_.micro_batch_size, q_positions_, heads,
                        c.probs, c.attn);
    } else {
      span.begin(attention_task_);
      attention_forward(c.q, c.k, c.v, plan_.micro_batch_size, q_positions_, heads, c.probs,
                        c.attn);
    }
  }
  if (plan_.recompute == Recompute::kSelective) mats_.give(c.probs);
  {
    ScratchArena::Frame frame(arena_);  // the out-projection's partial and summed rows
    span.begin("out_proj");
    MatMap partial = arena_.mat(T, h);
    linear_forward(c.attn, ConstMatMap(P.p[kWo], qr, h), nullptr, partial);
    span.end();
    MatMap o = x_.sp ? arena_.mat(Tl, h) : partial;
    tp_sum(partial, o, "tp_reduce_scatter_attn", "tp_all_reduce_attn");
    span.begin("residual1");  // the row-parallel bias, then the residual (as the cost model)
    o.rowwise() += ConstRowMap(P.p[kBo], h);
    c.x1 = x + o;
  }
  span.begin("norm2");
  layernorm_forward(c.x1, P.p[kLn2G], P.p[kLn2B], c.ln2, c.ln2_mean, c.ln2_rstd);
  ScratchArena::Frame frame(arena_);  // the gathered input, the MLP's partial and summed rows
  const bool moe = layouts_[block].expert_offset >= 0;
  // A folded MoE layer, or a carved one with SP, routes this rank's own tokens
  // (Plan::moe_routes_own_rows, moe_folded_forward).
  const bool folded = moe && plan_.moe_routes_own_rows();
  if (x_.sp && !folded) span.end();
  const ConstMatMap y2 = folded ? ConstMatMap(c.ln2.data(), c.ln2.rows(), c.ln2.cols())
                                : gathered_rows(c.ln2, "tp_all_gather_mlp");
  span.end();
  MatMap partial = folded ? MatMap(nullptr, 0, h) : arena_.mat(T, h);
  MatMap m = (x_.sp || folded) ? arena_.mat(Tl, h) : partial;
  if (folded) {
    moe_folded_forward(block, c, m);
  } else {
    if (moe) {
      moe_forward(block, y2, c.moe, partial);
    } else {
      dense_mlp_forward(block, y2, c, partial);
    }
    tp_sum(partial, m, "tp_reduce_scatter_mlp", "tp_all_reduce_mlp");
  }
  span.begin("residual2");  // the row-parallel bias, then the residual (as the cost model)
  if (!moe) m.rowwise() += ConstRowMap(P.p[kB2], h);
  out = c.x1 + m;
  span.end();
  c.complete = true;
}

// The dense MLP's backward from the layer output's gradient dout to norm2's output gradient dyl
// (TP-summed, or reduce-scattered with SP).
void StageModel::dense_mlp_backward(std::size_t block, LayerCache& c, const ConstMatRef& dout,
                                    MatRef dyl) {
  const LayerParams P = layer_params(block, /*with_grads=*/true);
  const std::int64_t h = model_.hidden_size, fr = layouts_[block].tensors[kW1].cols;
  const Eigen::Index T = x_.tokens;
  TraceSpan span(trace_);
  ScratchArena::Frame frame(arena_);
  // MLP. g's backward: with SP, gather the output gradient of the row-parallel fc2 (it also
  // gives b2's gradient over every token, identical on all TP ranks). The gathered rows' slice
  // is used again for norm2's output once fc2's gradients are done with it.
  MatMap gathered = arena_.mat(x_.sp ? T : 0, h);
  ConstMatMap dm(dout.data(), dout.rows(), dout.cols());
  if (x_.sp) {
    gather_tokens(dout, gathered, "tp_all_gather_mlp_grad");
    new (&dm) ConstMatMap(gathered.data(), T, h);  // Eigen's way to point a Map elsewhere
  }
  MatMap da = arena_.mat(T, fr);
  {
    ScratchArena::Frame dg_frame(arena_);
    MatMap dg = arena_.mat(T, fr);
    span.begin("fc2_dgrad");
    dg.noalias() = dm * ConstMatMap(P.p[kW2], fr, h).transpose();
    span.begin("fc2_wgrad");
    weight_grad(block, kW2, fr, h, c.g, dm, P.g[kB2], "fc2_wgrad");
    span.begin("gelu_bwd");
    gelu_backward(c.a, dg, da);
  }
  span.begin("fc1_dgrad");
  MatMap dy = x_.sp ? arena_.mat(T, h) : MatMap(dyl.data(), T, h);
  dy.noalias() = da * ConstMatMap(P.p[kW1], h, fr).transpose();
  ConstMatMap y2(c.ln2.data(), c.ln2.rows(), c.ln2.cols());
  if (x_.sp) {
    span.end();
    // the weight gradient needs all of it
    gather_tokens(c.ln2, gathered, "tp_all_gather_mlp_input");
    new (&y2) ConstMatMap(gathered.data(), T, h);
  }
  span.begin("fc1_wgrad");
  weight_grad(block, kW1, h, fr, y2, da, P.g[kB1], "fc1_wgrad");
  span.end();
  tp_sum(dy, dyl, "tp_reduce_scatter_mlp_grad", "tp_all_reduce_mlp_grad");
}

// An MoE layer's MLP backward, between the TP collectives the dense MLP's has: with SP, the
// output gradient and the norm2 output are gathered (the cost model regathers the input last;
// here it is gathered first, as the shared experts' weight gradient needs it: the same bytes).
void StageModel::moe_mlp_backward(std::size_t block, LayerCache& c, const ConstMatRef& dout,
                                  MatRef dyl) {
  ScratchArena::Frame frame(arena_);
  const ConstMatMap dm = gathered_rows(dout, "tp_all_gather_mlp_grad");
  const ConstMatMap y = gathered_rows(c.ln2, "tp_all_gather_mlp_input");
  MatMap dy = x_.sp ? arena_.mat(x_.tokens, model_.hidden_size)
                    : MatMap(dyl.data(), dyl.rows(), dyl.cols());
  moe_backward(block, y, c.moe, dm, dy);
  tp_sum(dy, dyl, "tp_reduce_scatter_mlp_grad", "tp_all_reduce_mlp_grad");
}

// A folded MoE layer (Plan::expert_layout folded; Megatron-Core's MoELayer.forward): the shared
// experts first, a TP-split MLP entered by the gather of the sequence-parallel norm2 output and
// left by its TP sum; then the routed experts on this rank's own tokens, whose outputs come back
// complete from the all-to-all (with expert_tp > 1, once the expert-TP group's reduce-scatter has
// summed them: moe_forward).
void StageModel::moe_folded_forward(std::size_t block, LayerCache& c, MatRef m) {
  ScratchArena::Frame frame(arena_);
  const bool shared = model_.shared_expert_ffn_size > 0;
  const std::int64_t h = model_.hidden_size;
  MatMap shared_sum = arena_.mat(shared ? c.ln2.rows() : 0, h);
  if (shared) {
    ScratchArena::Frame inner(arena_);  // the gathered input, the shared experts' partial rows
    const ConstMatMap y = gathered_rows(c.ln2, "tp_all_gather_shared");
    MatMap partial = arena_.mat(x_.tokens, h);
    moe_shared_forward(block, y, c.moe, partial);
    tp_sum(partial, shared_sum, "tp_reduce_scatter_shared", "tp_all_reduce_shared");
  }
  moe_forward(block, c.ln2, c.moe, m);
  if (shared) m += shared_sum;
}

// Its backward: the routed experts and the router on this rank's tokens (complete, no TP sum),
// then the shared experts' on the gathered output gradient and input, TP-summed back to this
// rank's tokens, as the cost model orders them.
void StageModel::moe_folded_backward(std::size_t block, LayerCache& c, const ConstMatRef& dout,
                                     MatRef dyl) {
  moe_backward(block, c.ln2, c.moe, dout, dyl);
  if (model_.shared_expert_ffn_size == 0) return;
  ScratchArena::Frame frame(arena_);
  const std::int64_t h = model_.hidden_size;
  const ConstMatMap dm = gathered_rows(dout, "tp_all_gather_shared_grad");
  const ConstMatMap y = gathered_rows(c.ln2, "tp_all_gather_shared_input");
  MatMap dy = arena_.mat(x_.tokens, h);
  dy.setZero();
  moe_shared_backward(block, y, c.moe, dm, dy);
  MatMap dy_shared = arena_.mat(dyl.rows(), h);
  tp_sum(dy, dy_shared, "tp_reduce_scatter_shared_grad", "tp_all_reduce_shared_grad");
  dyl += dy_shared;
}

void StageModel::layer_backward(std::size_t block, LayerCache& c, const ConstMatRef& dout,
                                MatRef dx) {
  const LayerParams P = layer_params(block, /*with_grads=*/true);
  const std::int64_t h = model_.hidden_size, qr = model_.q_width() / plan_.tp;
  const std::int64_t heads = model_.num_attention_heads / plan_.tp;
  const Eigen::Index Tl = x_.local_tokens, T = x_.tokens;
  TraceSpan span(trace_);
  ScratchArena::Frame frame(arena_);
  // The gradient after the second residual lives in dx's buffer (the pass's other slot, not
  // written until the end), where norm1's part is added last.
  MatMap dx1(dx.data(), Tl, h);
  {
    ScratchArena::Frame mlp(arena_);  // norm2's output gradient, then its input's
    MatMap dyl = arena_.mat(Tl, h);
    if (layouts_[block].expert_offset >= 0 && plan_.moe_routes_own_rows()) {
      moe_folded_backward(block, c, dout, dyl);
    } else if (layouts_[block].expert_offset >= 0) {
      moe_mlp_backward(block, c, dout, dyl);
    } else {
      dense_mlp_backward(block, c, dout, dyl);
    }
    MatMap dn = arena_.mat(Tl, h);
    span.begin("norm2_bwd");
    layernorm_backward(dyl, c.x1, P.p[kLn2G], c.ln2_mean, c.ln2_rstd, dn, P.g[kLn2G], P.g[kLn2B],
                       kernel_workspace());
    // The residual's gradient passes through unchanged; its one operation is this sum at the
    // branch point, so the span comes after norm2_bwd (the cost model lists it first).
    span.begin("residual2_bwd");
    dx1 = dout + dn;
  }

  // Attention.
  MatMap dq = arena_.mat(T, qr), dk = arena_.mat(T, qr), dv = arena_.mat(T, qr);
  {
    ScratchArena::Frame attention(arena_);  // the gathered output gradient, dattn
    if (x_.sp) span.end();
    const ConstMatMap dop = gathered_rows(dx1, "tp_all_gather_attn_grad");
    MatMap dattn = arena_.mat(T, qr);
    span.begin("out_proj_dgrad");
    dattn.noalias() = dop * ConstMatMap(P.p[kWo], qr, h).transpose();
    span.begin("out_proj_wgrad");
    weight_grad(block, kWo, qr, h, c.attn, dop, P.g[kBo], "out_proj_wgrad");
    span.end();
    attention_core_backward(c, dattn, heads, dq, dk, dv);
  }
  MatMap dyl = arena_.mat(Tl, h);
  MatMap dy = x_.sp ? arena_.mat(T, h) : dyl;
  span.begin("qkv_dgrad");
  dy.noalias() = dq * ConstMatMap(P.p[kWq], h, qr).transpose();
  dy.noalias() += dk * ConstMatMap(P.p[kWk], h, qr).transpose();
  dy.noalias() += dv * ConstMatMap(P.p[kWv], h, qr).transpose();
  {
    ScratchArena::Frame input(arena_);  // norm1's output, gathered: the weight gradients read it
    if (x_.sp) span.end();
    const ConstMatMap y1 = gathered_rows(c.ln1, "tp_all_gather_attn_input");
    span.begin("qkv_wgrad");
    weight_grad(block, kWq, h, qr, y1, dq, P.g[kBq], "qkv_wgrad");
    weight_grad(block, kWk, h, qr, y1, dk, P.g[kBk], "qkv_wgrad");
    weight_grad(block, kWv, h, qr, y1, dv, P.g[kBv], "qkv_wgrad");
  }
  span.end();
  tp_sum(dy, dyl, "tp_reduce_scatter_attn_grad", "tp_all_reduce_attn_grad");
  MatMap dn = arena_.mat(Tl, h);
  span.begin("norm1_bwd");
  layernorm_backward(dyl, c.x, P.p[kLn1G], c.ln1_mean, c.ln1_rstd, dn, P.g[kLn1G], P.g[kLn1B],
                     kernel_workspace());
  span.begin("residual1_bwd");  // as residual2_bwd: the sum at the branch point
  dx += dn;  // dx holds dx1
  span.end();
}

void StageModel::attention_core_backward(LayerCache& c, const ConstMatRef& dattn,
                                         std::int64_t heads, MatRef dq, MatRef dk, MatRef dv) {
  TraceSpan span(trace_);
  ScratchArena::Frame frame(arena_);
  // Context parallelism: the forward kept only this rank's K and V, so they are gathered again
  // (the cost model's cp_all_gather_kv_bwd).
  const bool cp = x_.cp > 1;
  const std::int64_t b = plan_.micro_batch_size, S = b * x_.seq_len;
  const std::int64_t qr = c.q.cols(), sq = static_cast<std::int64_t>(q_positions_.size());
  MatMap k_full = arena_.mat(cp ? S : 0, qr), v_full = arena_.mat(cp ? S : 0, qr);
  if (cp) gather_kv(c.k, c.v, k_full, v_full, "cp_all_gather_kv_bwd");
  const ConstMatRef k = cp ? ConstMatRef(k_full) : ConstMatRef(c.k);
  const ConstMatRef v = cp ? ConstMatRef(v_full) : ConstMatRef(c.v);
  if (c.probs.size() == 0) {
    // Selective recompute: rebuild the softmax (Korthikanti et al. 2022, sec. 5).
    TraceScope recompute(trace_, {.pass = 'R'});
    span.begin(attention_task_);
    take(c.probs, b * heads * sq, k.rows() / b);
    ScratchArena::Frame out(arena_);
    attention_forward(c.q, k, v, b, q_positions_, heads, c.probs, arena_.mat(c.q.rows(), qr));
    span.end();
  }
  span.begin(attention_bwd_task_);
  MatMap workspace(kernel_workspace(), sq, k.rows() / b);
  if (!cp) {
    attention_backward(c.q, k, v, c.probs, dattn, b, q_positions_, heads, dq, dk, dv, workspace);
    mats_.give(c.probs);
    return;
  }
  MatMap dk_full = arena_.mat(S, qr), dv_full = arena_.mat(S, qr);
  attention_backward(c.q, k, v, c.probs, dattn, b, q_positions_, heads, dq, dk_full, dv_full,
                     workspace);
  mats_.give(c.probs);
  span.end();
  reduce_scatter_kv_grad(dk_full, dv_full, dk, dv);
}

void StageModel::embedding_forward(const std::int32_t* tokens, MatRef out) {
  const BlockLayout& l = layouts_[0];
  const TensorSlice& wte = l.tensors[kWte];
  const float* p = access_.params(0);
  const std::int64_t h = model_.hidden_size;
  TraceSpan span(trace_);
  span.begin("embedding");
  // Vocabulary-parallel lookup: rows outside this rank's slice contribute zeros. Without SP
  // the rows are summed in place in `out` (T rows).
  ScratchArena::Frame frame(arena_);
  MatMap e = x_.sp ? arena_.mat(x_.tokens, h) : MatMap(out.data(), x_.tokens, h);
  e.setZero();
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

void StageModel::embedding_backward(const std::int32_t* tokens, const ConstMatRef& dout) {
  const BlockLayout& l = layouts_[0];
  const TensorSlice& wte = l.tensors[kWte];
  float* g = access_.grads(0);
  const std::int64_t h = model_.hidden_size;
  ScratchArena::Frame frame(arena_);
  const ConstMatMap d = gathered_rows(dout, "tp_all_gather_embedding_grad");
  TraceSpan span(trace_);
  span.begin("embedding_bwd");
  float* dwpe = g + l.tensors[kWpe].offset;
  for (std::int64_t i = 0; i < x_.tokens; ++i) {
    RowMap(dwpe + x_.position(i) * h, h) += d.row(i);
    const std::int64_t row = tokens[i] - wte.row0;
    if (row >= 0 && row < wte.rows) RowMap(g + wte.offset + row * h, h) += d.row(i);
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

double StageModel::head_forward(MicroBatch& s, const ConstMatRef& x, const std::int32_t* targets,
                                float scale) {
  const std::size_t hb = layouts_.size() - 1;
  const BlockLayout& l = layouts_[hb];
  const float* p = access_.params(hb);
  const std::int64_t h = model_.hidden_size, vr = padded_vocab(model_, plan_.tp) / plan_.tp;
  const std::int64_t v0 = x_.tp_rank * vr, T = x_.tokens;
  TraceSpan span(trace_);
  span.begin("final_norm");
  take(s.head_in, x.rows(), h) = x;
  s.targets.assign(targets, targets + T);
  s.loss_scale = scale;
  vecs_.take(s.lnf_mean, x.rows());
  vecs_.take(s.lnf_rstd, x.rows());
  take(s.lnf, T, h);
  take(s.probs, T, vr);
  ScratchArena::Frame frame(arena_);
  // The final norm's output: with SP this rank's rows, gathered into the cache; without, it is
  // the cache's own.
  MatMap y = x_.sp ? arena_.mat(x.rows(), h) : MatMap(s.lnf.data(), T, h);
  layernorm_forward(x, p + l.tensors[kLnfG].offset, p + l.tensors[kLnfB].offset, y, s.lnf_mean,
                    s.lnf_rstd);
  if (x_.sp) {
    span.end();
    gather_tokens(y, s.lnf, "tp_all_gather_head");
  }
  span.begin("lm_head");
  // (T, V/tp), float32 (Megatron keeps the cross-entropy in fp32 as well)
  MatMap logits = arena_.mat(T, vr);
  logits.noalias() = s.lnf * ConstMatMap(head_weights(), vr, h).transpose();
  if (logits_sink_ != nullptr) logits_sink_->insert(logits_sink_->end(), logits.data(),
                                                    logits.data() + logits.size());
  span.begin("cross_entropy");  // in four pieces around its three all-reduces
  // Vocabulary padding never wins: its logits are -inf.
  const std::int64_t valid = std::clamp<std::int64_t>(model_.vocab_size - v0, 0, vr);
  if (valid < vr)
    logits.rightCols(vr - valid).setConstant(-std::numeric_limits<float>::infinity());
  // Megatron's vocabulary-parallel cross-entropy: three all-reduces of T floats.
  auto mx = arena_.vec(T);
  mx = logits.rowwise().maxCoeff();
  span.end();
  comm_.all_reduce(CommGroup::kTp, mx.data(), T, ReduceOp::kMax, "tp_all_reduce_logit_max");
  span.begin("cross_entropy");
  s.probs = (logits.colwise() - mx).array().exp().matrix();
  auto sum = arena_.vec(T);
  sum = s.probs.rowwise().sum();
  span.end();
  comm_.all_reduce(CommGroup::kTp, sum.data(), T, ReduceOp::kSum, "tp_all_reduce_sum_exp");
  span.begin("cross_entropy");
  auto target = arena_.vec(T);
  target.setZero();
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

void StageModel::head_backward(MicroBatch& s, MatRef dx) {
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
  ScratchArena::Frame frame(arena_);
  MatMap dyl = arena_.mat(x_.local_tokens, h);
  MatMap dy = x_.sp ? arena_.mat(x_.tokens, h) : dyl;
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
  tp_sum(dy, dyl, "tp_reduce_scatter_head_grad", "tp_all_reduce_head_grad");
  span.begin("final_norm_bwd");
  layernorm_backward(dyl, s.head_in, p + l.tensors[kLnfG].offset, s.lnf_mean, s.lnf_rstd, dx,
                     g + l.tensors[kLnfG].offset, g + l.tensors[kLnfB].offset,
                     kernel_workspace());
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

// The pass slot that does not hold `in`.
StageModel::Slot StageModel::other_slot(float* const* slots, Slot in) {
  return {in.data == slots[0] ? slots[1] : slots[0]};
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

// The steps of a chunk's pass on host matrices; stage_model.h orders them. The pass's two slots
// are the first thing in the arena above the kernels' workspace; each layer's temporaries come
// above them and go when the layer is done.
double StageModel::forward(std::int64_t chunk, std::int64_t mb, const std::int32_t* tokens,
                           const std::int32_t* targets, const Mat* input, Mat* output,
                           float loss_scale) {
  loss_scale_ = loss_scale;
  routing_hash_ = 0;
  MicroBatch& s =
      start_micro_batch(chunk, mb, chunk_blocks_[static_cast<std::size_t>(chunk)].size());
  ScratchArena::Frame pass(arena_);
  const std::int64_t slot_floats = x_.local_tokens * model_.hidden_size;
  struct Steps {
    StageModel& m;
    MicroBatch& s;
    const std::int32_t *tokens, *targets;
    const Mat* input;
    Mat* output;
    float loss_scale;
    float* slots[2];
    Slot embed() {
      s.tokens.assign(tokens, tokens + m.x_.tokens);
      m.embedding_forward(tokens, m.view({slots[0]}));
      return {slots[0]};
    }
    Slot received() { return {const_cast<float*>(input->data())}; }  // read only
    Slot layer(std::size_t i, std::size_t b, Slot h) {
      const Slot out = other_slot(slots, h);
      m.layer_forward(b, m.view(h), s.layers[i], m.view(out));
      return out;
    }
    void keep_input_only(std::size_t i) {
      LayerCache& c = s.layers[i];
      m.release(c, /*keep_input=*/true);
      if (!m.plan_.partition_activations) return;
      // Only this TP rank's rows of the input (ZeRO-R's partitioned checkpoint), in a buffer
      // of the pools; the whole input's goes back to them.
      const std::int64_t rows = m.x_.tokens / m.plan_.tp;
      Mat part;
      m.take(part, rows, c.x.cols()) = c.x.middleRows(m.x_.tp_rank * rows, rows);
      c.x.swap(part);
      m.mats_.give(part);
    }
    double head(Slot h) { return m.head_forward(s, m.view(h), targets, loss_scale); }
    // Copied: the message buffer is the stage's own (its size is set by the first send).
    void send(Slot h) { *output = m.view(h); }
  } steps{*this, s, tokens, targets, input, output, loss_scale,
          {arena_.floats(slot_floats), arena_.floats(slot_floats)}};
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
  ScratchArena::Frame pass(arena_);
  const std::int64_t slot_floats = x_.local_tokens * model_.hidden_size;
  struct Steps {
    StageModel& m;
    MicroBatch& s;
    const Mat* grad_output;
    Mat* grad_input;
    float* slots[2];
    std::size_t recompute_mark = 0;  // the arena's top before a recompute's input
    Slot head_backward() {
      m.head_backward(s, m.view({slots[0]}));
      return {slots[0]};
    }
    Slot received() { return {const_cast<float*>(grad_output->data())}; }  // read only
    bool complete(std::size_t i) const { return s.layers[i].complete; }
    // The input full recompute kept, read in place (layer_forward sees it is the cache's
    // own), or with partitioned checkpoints gathered from every TP rank's rows (ZeRO-R) into
    // the arena, until the recompute is done.
    Slot recompute_input(std::size_t i) {
      LayerCache& c = s.layers[i];
      recompute_mark = m.arena_.mark();
      if (!m.plan_.partition_activations) return {c.x.data()};
      MatMap x = m.arena_.mat(m.x_.tokens, c.x.cols());
      m.gather_tokens(c.x, x, "tp_all_gather_checkpoint");
      m.mats_.give(c.x);
      return {x.data()};
    }
    void recompute(std::size_t i, std::size_t b, Slot x) {
      LayerCache& c = s.layers[i];
      const Eigen::Index rows = m.plan_.partition_activations ? m.x_.tokens : c.x.rows();
      const ConstMatMap input(x.data, rows, m.model_.hidden_size);
      MatMap out = m.arena_.mat(m.x_.local_tokens, m.model_.hidden_size);  // not used
      m.recomputing_ = true;
      m.layer_forward(b, input, c, out);
      m.recomputing_ = false;
      m.arena_.release(recompute_mark);
    }
    Slot layer_backward(std::size_t i, std::size_t b, Slot d) {
      const Slot dx = other_slot(slots, d);
      m.layer_backward(b, s.layers[i], m.view(d), m.view(dx));
      return dx;
    }
    void drop(std::size_t i) { m.release(s.layers[i], /*keep_input=*/false); }
    void embedding_backward(Slot d) { m.embedding_backward(s.tokens.data(), m.view(d)); }
    void send(Slot d) { *grad_input = m.view(d); }  // copied, as forward's send
  } steps{*this, *in_flight_[at].state, grad_output, grad_input,
          {arena_.floats(slot_floats), arena_.floats(slot_floats)}};
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

// ---------------------------------------------------------------------------------------------
// The scratch arena's size (workspace.h): for each function, the floats it takes in the order it
// takes them, the most it holds at once with what the functions it calls hold on top. A
// function's slices are rounded as the arena rounds them (A below). The pass adds its two slots
// to the largest of its steps; the kernels' workspace is below everything.
namespace {
std::size_t A(std::int64_t rows, std::int64_t cols) { return ScratchArena::rounded(rows * cols); }
}  // namespace

std::size_t StageModel::kernel_workspace_floats() const {
  const std::int64_t h = model_.hidden_size, sq = static_cast<std::int64_t>(q_positions_.size());
  return std::max<std::size_t>(2 * static_cast<std::size_t>(layernorm_workspace_floats(h)),
                               A(sq, model_.seq_len));
}

std::int64_t StageModel::expert_tp_members() const {
  return plan_.moe_routes_own_rows() ? comm_.group_size(CommGroup::kExpertTp) : 1;
}

std::int64_t StageModel::routed_capacity_rows() const {
  return moe_capacity_rows(comm_.group_size(CommGroup::kEp) * expert_tp_members(), x_.tokens,
                           model_.experts_per_token, model_.num_experts / plan_.ep,
                           expert_capacity_rows());
}

std::int64_t StageModel::dispatch_capacity_rows() const {
  return moe_capacity_rows(comm_.group_size(CommGroup::kEp), x_.tokens, model_.experts_per_token,
                           model_.num_experts / plan_.ep, expert_capacity_rows());
}

std::int64_t StageModel::capacity_share(std::int64_t t) const {
  const std::int64_t cp = capacity_shares_.cp, tp = capacity_shares_.tp, seq = x_.seq_len;
  const std::int64_t sequence = t / seq, s = t % seq;
  // The cp rank holding position s (data.h's cp_position: chunks r and 2cp-1-r), and s's
  // place among that rank's positions.
  std::int64_t rank = 0, j = s;
  if (cp > 1) {
    const std::int64_t chunk = seq / (2 * cp), c = s / chunk;
    rank = c < cp ? c : 2 * cp - 1 - c;
    j = (c < cp ? 0 : chunk) + s - c * chunk;
  }
  // Its row among that rank's rows of the micro-batch, and the TP rank whose sequence-parallel
  // block of rows holds it.
  const std::int64_t row = sequence * (seq / cp) + j, rows = x_.tokens / cp;
  return rank * tp + row / (rows / tp);
}

std::size_t StageModel::gather_kv_floats() const {
  const std::int64_t qr = model_.q_width() / plan_.tp;
  return A(x_.tokens, 2 * qr) + A(x_.cp * x_.tokens, 2 * qr);
}

std::size_t StageModel::moe_forward_floats() const {
  const std::int64_t h = model_.hidden_size, T = x_.tokens, E = model_.num_experts;
  const std::int64_t k = model_.experts_per_token, cap = routed_capacity_rows();
  const std::size_t route = std::max(A(T, E) + A(T, 1), A(1, E));
  const bool shared = model_.shared_expert_ffn_size > 0;
  // Folded with expert_tp > 1: the received rows beside the gathered ones.
  const std::size_t received = expert_tp_members() > 1 ? A(dispatch_capacity_rows(), h) : 0;
  return received + A(cap, h) +
         std::max({A(T * k, h) + route, A(cap, h), shared ? A(T, h) : 0});
}

std::size_t StageModel::moe_backward_floats(std::size_t block) const {
  const BlockLayout& l = layouts_[block];
  const bool shared = model_.shared_expert_ffn_size > 0;
  const std::int64_t h = model_.hidden_size, T = x_.tokens, E = model_.num_experts;
  const std::int64_t k = model_.experts_per_token, cap = routed_capacity_rows();
  const std::int64_t f = l.tensors[expert_tensor(shared, 0, kExpW1)].cols;
  const std::size_t shared_bwd = shared ? 2 * A(T, l.tensors[kSharedW1].cols) : 0;
  const std::size_t experts = 2 * A(cap, f) + A(cap, h);
  const std::size_t router = 2 * A(T, E) + A(T, 1);
  const std::size_t received = expert_tp_members() > 1 ? A(dispatch_capacity_rows(), h) : 0;
  return std::max(shared_bwd, A(T * k, h) + A(T, k) + 2 * A(cap, h) + received +
                                  std::max(experts, router));
}

// Folded (moe_folded_forward / _backward): the routed experts on this rank's Tl tokens, bounded
// by the T-token figures above; the shared experts' gathered rows and partial and summed rows.
std::size_t StageModel::moe_folded_forward_floats(std::size_t block) const {
  if (model_.shared_expert_ffn_size == 0) return moe_forward_floats();
  (void)block;
  const std::int64_t h = model_.hidden_size, T = x_.tokens, Tl = x_.local_tokens;
  const std::size_t gathered = x_.sp ? A(T, h) : 0;
  return A(Tl, h) + std::max(gathered + A(T, h), moe_forward_floats());
}

std::size_t StageModel::moe_folded_backward_floats(std::size_t block) const {
  if (model_.shared_expert_ffn_size == 0) return moe_backward_floats(block);
  const std::int64_t h = model_.hidden_size, T = x_.tokens, Tl = x_.local_tokens;
  const std::size_t gathered = x_.sp ? A(T, h) : 0;
  const std::int64_t fs = layouts_[block].tensors[kSharedW1].cols;
  return std::max(moe_backward_floats(block),
                  2 * gathered + A(T, h) + std::max(2 * A(T, fs), A(Tl, h)));
}

std::size_t StageModel::attention_backward_floats() const {
  const std::int64_t qr = model_.q_width() / plan_.tp, T = x_.tokens;
  const std::size_t recompute = plan_.recompute == Recompute::kSelective ? A(T, qr) : 0;
  if (x_.cp == 1) return recompute;
  const std::int64_t S = plan_.micro_batch_size * x_.seq_len;
  // reduce_scatter_kv_grad takes what gather_kv does, in the other order.
  const std::size_t kv = 2 * A(S, qr);  // the whole sequence's K and V, or dK and dV
  return kv + std::max({gather_kv_floats(), recompute, kv + gather_kv_floats()});
}

std::size_t StageModel::layer_forward_floats(std::size_t block) const {
  const std::int64_t h = model_.hidden_size, T = x_.tokens, Tl = x_.local_tokens;
  const std::int64_t qr = model_.q_width() / plan_.tp;
  const std::size_t gathered = x_.sp ? A(T, h) : 0, summed = x_.sp ? A(Tl, h) : 0;
  std::size_t attention = gathered;
  if (x_.cp > 1) attention += 2 * A(plan_.micro_batch_size * x_.seq_len, qr) + gather_kv_floats();
  const std::size_t out_proj = A(T, h) + summed;
  const bool moe = layouts_[block].expert_offset >= 0;
  const std::size_t mlp =
      moe && plan_.moe_routes_own_rows()
          ? A(Tl, h) + moe_folded_forward_floats(block)
          : gathered + A(T, h) + std::max(moe ? moe_forward_floats() : 0, summed);
  return std::max({attention, out_proj, mlp});
}

std::size_t StageModel::layer_backward_floats(std::size_t block) const {
  const BlockLayout& l = layouts_[block];
  const std::int64_t h = model_.hidden_size, T = x_.tokens, Tl = x_.local_tokens;
  const std::int64_t qr = model_.q_width() / plan_.tp;
  const std::size_t gathered = x_.sp ? A(T, h) : 0;
  std::size_t mlp = 0;
  if (l.expert_offset >= 0 && plan_.moe_routes_own_rows()) {
    mlp = moe_folded_backward_floats(block);
  } else if (l.expert_offset >= 0) {
    mlp = 3 * gathered + moe_backward_floats(block);  // dm, y and dy gathered / summed
  } else {
    const std::int64_t fr = l.tensors[kW1].cols;
    mlp = gathered + A(T, fr) + std::max(A(T, fr), gathered);
  }
  const std::size_t norm2 = A(Tl, h) + std::max(mlp, A(Tl, h));
  const std::size_t out_proj = gathered + A(T, qr) + attention_backward_floats();
  const std::size_t qkv = A(Tl, h) + gathered + std::max(gathered, A(Tl, h));
  return std::max(norm2, 3 * A(T, qr) + std::max(out_proj, qkv));  // dx1 is in dx's slot
}

std::size_t StageModel::scratch_floats() const {
  const std::int64_t h = model_.hidden_size, T = x_.tokens, Tl = x_.local_tokens;
  const std::int64_t vr = padded_vocab(model_, plan_.tp) / plan_.tp;
  const std::size_t gathered = x_.sp ? A(T, h) : 0;
  std::size_t forward = 0, backward = 0;
  for (std::int64_t c = 0; c < num_chunks(); ++c) {
    if (has_embedding(c)) {
      forward = std::max(forward, gathered);
      backward = std::max(backward, gathered);
    }
    if (has_head(c)) {
      forward = std::max(forward, (x_.sp ? A(Tl, h) : 0) + A(T, vr) + 3 * A(T, 1));
      backward = std::max(backward, A(Tl, h) + gathered);
    }
    for (std::size_t b : chunk_blocks_[static_cast<std::size_t>(c)]) {
      forward = std::max(forward, layer_forward_floats(b));
      backward = std::max(backward, layer_backward_floats(b));
      if (plan_.recompute == Recompute::kFull)  // the input (gathered if partitioned), the output
        backward = std::max(backward, (plan_.partition_activations ? A(T, h) : 0) + A(Tl, h) +
                                          layer_forward_floats(b));
    }
  }
  return kernel_workspace_floats() + 2 * A(Tl, h) + std::max(forward, backward);
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

// The scratch arena (its size: every temporary of every function shares it) and moe.h's index
// vectors.
void StageModel::account_scratch(MemoryAccount& account) const {
  account.add("scratch.arena", MemoryUse::kScratch, arena_.bytes());
  const MoeScratch& e = moe_scratch_;
  account.add("scratch.moe_routing", MemoryUse::kScratch,
              bytes_of(e.order) + bytes_of(e.pair_at) + bytes_of(e.per_expert) +
                  bytes_of(e.by_expert) + bytes_of(e.kept) + bytes_of(e.cp_mine) +
                  bytes_of(e.cp_all));
}

}  // namespace trainplan::executor
