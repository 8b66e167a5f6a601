// One pipeline stage of a GPT; see gpt.h. Each TP collective below is named by the cost-model
// task it is (core/cost/tasks.cc), and each stretch of math between them by a TraceSpan named
// by the compute task(s) it is, so the code, the cost model and the trace read side by side.
#include "executor/cpu/gpt.h"

#include "executor/stage_model.h"

#include <cmath>
#include <limits>

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


StageModel::StageModel(const ModelSpec& model, const Plan& plan, std::int64_t stage, Comm& comm,
                       BlockAccess& access)
    : StageModelBase(model, plan, stage, comm.group_rank(CommGroup::kTp),
                     comm.group_rank(CommGroup::kCp), comm.group_rank(CommGroup::kEp)),
      model_(model),
      plan_(plan),
      comm_(comm),
      access_(access) {
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
  Mat mine(T, 2 * w), all(cp * T, 2 * w);
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
  Mat all(cp * T, 2 * w), mine(T, 2 * w);
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
  linear_forward(y2, ConstMatMap(P.p[kW1], h, fr), P.p[kB1], c.a);
  span.begin("gelu");
  gelu_forward(c.a, c.g);
  span.begin("fc2");
  Mat partial;
  linear_forward(c.g, ConstMatMap(P.p[kW2], fr, h), nullptr, partial);
  span.end();
  mlp_tp_exit(partial, m);
}

// Megatron's g after the MLP: sum the TP ranks' partial outputs (reduce-scatter them over the
// tokens with SP).
void StageModel::mlp_tp_exit(Mat& partial, Mat& m) {
  if (x_.sp) {
    reduce_scatter_tokens(partial, m, "tp_reduce_scatter_mlp");
  } else {
    comm_.all_reduce(CommGroup::kTp, partial.data(), partial.size(), ReduceOp::kSum,
                     "tp_all_reduce_mlp");
    m.swap(partial);
  }
}

// The backward of Megatron's f before the MLP: sum the TP ranks' partial input gradients dy
// into dyl (reduce-scatter them over the tokens with SP).
void StageModel::mlp_tp_entry_backward(Mat& dy, Mat& dyl) {
  if (x_.sp) {
    reduce_scatter_tokens(dy, dyl, "tp_reduce_scatter_mlp_grad");
  } else {
    comm_.all_reduce(CommGroup::kTp, dy.data(), dy.size(), ReduceOp::kSum,
                     "tp_all_reduce_mlp_grad");
    dyl.swap(dy);
  }
}

void StageModel::layer_forward(std::size_t block, const Mat& x, LayerCache& c, Mat& out) {
  const LayerParams P = layer_params(block, /*with_grads=*/false);
  const std::int64_t h = model_.hidden_size, qr = model_.q_width() / plan_.tp;
  const std::int64_t heads = model_.num_attention_heads / plan_.tp;
  TraceSpan span(trace_);
  span.begin("norm1");
  c.x = x;
  layernorm_forward(x, P.p[kLn1G], P.p[kLn1B], c.ln1, c.ln1_mean, c.ln1_rstd);
  Mat gathered;
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
    Mat k_full, v_full;
    gather_kv(c.k, c.v, k_full, v_full, "cp_all_gather_kv");
    span.begin(attention_task_);
    attention_forward(c.q, k_full, v_full, plan_.micro_batch_size, q_positions_, heads,
                      c.probs, c.attn);
  } else {
    span.begin(attention_task_);
    attention_forward(c.q, c.k, c.v, plan_.micro_batch_size, model_.seq_len, heads, c.probs,
                      c.attn);
  }
  if (plan_.recompute == Recompute::kSelective) c.probs.resize(0, 0);
  span.begin("out_proj");
  Mat partial, o;
  linear_forward(c.attn, ConstMatMap(P.p[kWo], qr, h), nullptr, partial);
  span.end();
  if (x_.sp) {
    reduce_scatter_tokens(partial, o, "tp_reduce_scatter_attn");
  } else {
    comm_.all_reduce(CommGroup::kTp, partial.data(), partial.size(), ReduceOp::kSum,
                     "tp_all_reduce_attn");
    o.swap(partial);
  }
  span.begin("residual1");  // the row-parallel bias, then the residual (as the cost model)
  o.rowwise() += ConstRowMap(P.p[kBo], h);
  c.x1 = x + o;
  span.begin("norm2");
  layernorm_forward(c.x1, P.p[kLn2G], P.p[kLn2B], c.ln2, c.ln2_mean, c.ln2_rstd);
  const Mat* y2 = &c.ln2;
  if (x_.sp) {
    span.end();
    gather_tokens(c.ln2, gathered, "tp_all_gather_mlp");
    y2 = &gathered;
  }
  span.end();
  Mat m;
  const bool moe = layouts_[block].expert_offset >= 0;
  if (moe) {
    Mat moe_partial;
    moe_forward(block, *y2, c.moe, moe_partial);
    mlp_tp_exit(moe_partial, m);
  } else {
    dense_mlp_forward(block, *y2, c, m);
  }
  span.begin("residual2");  // the row-parallel bias, then the residual (as the cost model)
  if (!moe) m.rowwise() += ConstRowMap(P.p[kB2], h);
  out = c.x1 + m;
  span.end();  // before the temporaries are freed
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
  Mat gathered;
  const Mat* dm = &dout;
  if (x_.sp) {
    gather_tokens(dout, gathered, "tp_all_gather_mlp_grad");
    dm = &gathered;
  }
  Mat dg, da, dy;
  span.begin("fc2_dgrad");
  dg.noalias() = *dm * ConstMatMap(P.p[kW2], fr, h).transpose();
  span.begin("fc2_wgrad");
  weight_grad(block, kW2, fr, h, c.g, *dm, P.g[kB2], "fc2_wgrad");
  span.begin("gelu_bwd");
  gelu_backward(c.a, dg, da);
  // Each activation gradient is freed once used, as autograd does; the cost model's
  // layer_backward_workspace_bytes counts what is alive at once.
  dg.resize(0, 0);
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
  da.resize(0, 0);
  mlp_tp_entry_backward(dy, dyl);
}

// An MoE layer's MLP backward, between the TP collectives the dense MLP's has: with SP, the
// output gradient and the norm2 output are gathered (the cost model regathers the input last;
// here it is gathered first, as the shared experts' weight gradient needs it: the same bytes).
void StageModel::moe_mlp_backward(std::size_t block, LayerCache& c, const Mat& dout, Mat& dyl) {
  Mat dm_gathered, y_gathered, dy;
  const Mat* dm = &dout;
  const Mat* y = &c.ln2;
  if (x_.sp) {
    gather_tokens(dout, dm_gathered, "tp_all_gather_mlp_grad");
    gather_tokens(c.ln2, y_gathered, "tp_all_gather_mlp_input");
    dm = &dm_gathered;
    y = &y_gathered;
  }
  moe_backward(block, *y, c.moe, *dm, dy);
  mlp_tp_entry_backward(dy, dyl);
}

void StageModel::layer_backward(std::size_t block, LayerCache& c, const Mat& dout, Mat& dx) {
  const LayerParams P = layer_params(block, /*with_grads=*/true);
  const std::int64_t h = model_.hidden_size, qr = model_.q_width() / plan_.tp;
  const std::int64_t heads = model_.num_attention_heads / plan_.tp;
  TraceSpan span(trace_);
  Mat dyl, gathered, dy;
  if (layouts_[block].expert_offset >= 0) {
    moe_mlp_backward(block, c, dout, dyl);
  } else {
    dense_mlp_backward(block, c, dout, dyl);
  }
  Mat dn;
  span.begin("norm2_bwd");
  layernorm_backward(dyl, c.x1, P.p[kLn2G], c.ln2_mean, c.ln2_rstd, dn, P.g[kLn2G], P.g[kLn2B]);
  // The residual's gradient passes through unchanged; its one operation is this sum at the
  // branch point, so the span comes after norm2_bwd (the cost model lists it first).
  span.begin("residual2_bwd");
  Mat dx1 = dout + dn;

  // Attention.
  const Mat* dop = &dx1;
  if (x_.sp) {
    span.end();
    gather_tokens(dx1, gathered, "tp_all_gather_attn_grad");
    dop = &gathered;
  }
  Mat dattn;
  span.begin("out_proj_dgrad");
  dattn.noalias() = *dop * ConstMatMap(P.p[kWo], qr, h).transpose();
  span.begin("out_proj_wgrad");
  weight_grad(block, kWo, qr, h, c.attn, *dop, P.g[kBo], "out_proj_wgrad");
  span.end();
  Mat dq, dk, dv;
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
  if (x_.sp) {
    reduce_scatter_tokens(dy, dyl, "tp_reduce_scatter_attn_grad");
  } else {
    comm_.all_reduce(CommGroup::kTp, dy.data(), dy.size(), ReduceOp::kSum,
                     "tp_all_reduce_attn_grad");
    dyl.swap(dy);
  }
  span.begin("norm1_bwd");
  layernorm_backward(dyl, c.x, P.p[kLn1G], c.ln1_mean, c.ln1_rstd, dn, P.g[kLn1G], P.g[kLn1B]);
  span.begin("residual1_bwd");  // as residual2_bwd: the sum at the branch point
  dx = dx1 + dn;
  span.end();  // before the temporaries are freed
}

void StageModel::attention_core_backward(LayerCache& c, const Mat& dattn, std::int64_t heads,
                                         Mat& dq, Mat& dk, Mat& dv) {
  TraceSpan span(trace_);
  // Context parallelism: the forward kept only this rank's K and V, so they are gathered again
  // (the cost model's cp_all_gather_kv_bwd).
  Mat k_full, v_full;
  const bool cp = x_.cp > 1;
  if (cp) gather_kv(c.k, c.v, k_full, v_full, "cp_all_gather_kv_bwd");
  const Mat& k = cp ? k_full : c.k;
  const Mat& v = cp ? v_full : c.v;
  auto forward = [&](Mat& out) {
    if (cp) {
      attention_forward(c.q, k, v, plan_.micro_batch_size, q_positions_, heads, c.probs, out);
    } else {
      attention_forward(c.q, k, v, plan_.micro_batch_size, model_.seq_len, heads, c.probs, out);
    }
  };
  if (c.probs.size() == 0) {
    // Selective recompute: rebuild the softmax (Korthikanti et al. 2022, sec. 5).
    TraceScope recompute(trace_, {.pass = 'R'});
    span.begin(attention_task_);
    Mat unused;
    forward(unused);
    span.end();
  }
  span.begin(attention_bwd_task_);
  if (!cp) {
    attention_backward(c.q, k, v, c.probs, dattn, plan_.micro_batch_size, model_.seq_len, heads,
                       dq, dk, dv);
    c.probs.resize(0, 0);
    return;
  }
  Mat dk_full, dv_full;
  attention_backward(c.q, k, v, c.probs, dattn, plan_.micro_batch_size, q_positions_, heads, dq,
                     dk_full, dv_full);
  c.probs.resize(0, 0);
  span.end();
  reduce_scatter_kv_grad(dk_full, dv_full, dk, dv);
}

void StageModel::embedding_forward(const std::int32_t* tokens, Mat& out) {
  const BlockLayout& l = layouts_[0];
  const TensorSlice& wte = l.tensors[kWte];
  const float* p = access_.params(0);
  const std::int64_t h = model_.hidden_size;
  TraceSpan span(trace_);
  span.begin("embedding");
  // Vocabulary-parallel lookup: rows outside this rank's slice contribute zeros.
  Mat e = Mat::Zero(x_.tokens, h);
  for (std::int64_t i = 0; i < x_.tokens; ++i) {
    const std::int64_t row = tokens[i] - wte.row0;
    if (row >= 0 && row < wte.rows) e.row(i) = ConstRowMap(p + wte.offset + row * h, h);
  }
  span.end();
  std::int64_t first_token = 0;
  if (x_.sp) {
    reduce_scatter_tokens(e, out, "tp_reduce_scatter_embedding");
    first_token = x_.tp_rank * x_.local_tokens;
  } else {
    comm_.all_reduce(CommGroup::kTp, e.data(), e.size(), ReduceOp::kSum,
                     "tp_all_reduce_embedding");
    out.swap(e);
  }
  span.begin("embedding");  // the positions, added after the vocabulary-parallel sum
  const float* wpe = p + l.tensors[kWpe].offset;
  for (std::int64_t i = 0; i < out.rows(); ++i)
    out.row(i) += ConstRowMap(wpe + x_.position(first_token + i) * h, h);
  span.end();  // before the temporaries are freed
}

void StageModel::embedding_backward(const std::int32_t* tokens, const Mat& dout) {
  const BlockLayout& l = layouts_[0];
  const TensorSlice& wte = l.tensors[kWte];
  float* g = access_.grads(0);
  const std::int64_t h = model_.hidden_size;
  Mat gathered;
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
  s.head_in = x;
  s.targets.assign(targets, targets + T);
  s.loss_scale = scale;
  Mat y;
  layernorm_forward(x, p + l.tensors[kLnfG].offset, p + l.tensors[kLnfB].offset, y, s.lnf_mean,
                    s.lnf_rstd);
  if (x_.sp) {
    span.end();
    gather_tokens(y, s.lnf, "tp_all_gather_head");
  } else {
    s.lnf.swap(y);
  }
  span.begin("lm_head");
  Mat logits;  // (T, V/tp), float32 (Megatron keeps the cross-entropy in fp32 as well)
  logits.noalias() = s.lnf * ConstMatMap(head_weights(), vr, h).transpose();
  if (logits_sink_ != nullptr) logits_sink_->insert(logits_sink_->end(), logits.data(),
                                                    logits.data() + logits.size());
  span.begin("cross_entropy");  // in four pieces around its three all-reduces
  // Vocabulary padding never wins: its logits are -inf.
  const std::int64_t valid = std::clamp<std::int64_t>(model_.vocab_size - v0, 0, vr);
  if (valid < vr)
    logits.rightCols(vr - valid).setConstant(-std::numeric_limits<float>::infinity());
  // Megatron's vocabulary-parallel cross-entropy: three all-reduces of T floats.
  Eigen::VectorXf mx = logits.rowwise().maxCoeff();
  span.end();
  comm_.all_reduce(CommGroup::kTp, mx.data(), T, ReduceOp::kMax, "tp_all_reduce_logit_max");
  span.begin("cross_entropy");
  s.probs = (logits.colwise() - mx).array().exp().matrix();
  Eigen::VectorXf sum = s.probs.rowwise().sum();
  span.end();
  comm_.all_reduce(CommGroup::kTp, sum.data(), T, ReduceOp::kSum, "tp_all_reduce_sum_exp");
  span.begin("cross_entropy");
  Eigen::VectorXf target = Eigen::VectorXf::Zero(T);
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
  span.end();  // before the temporaries are freed
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
  Mat dy;
  span.begin("lm_head_dgrad");
  dy.noalias() = dlogits * ConstMatMap(head_weights(), vr, h);
  span.begin("lm_head_wgrad");
  if (deferring_ == nullptr) {
    MatMap(head_grads(), vr, h).noalias() += dlogits.transpose() * s.lnf;
  } else {
    deferring_->grads.emplace_back("lm_head_wgrad", [this, vr, h, dl = Mat(dlogits), x = s.lnf] {
      MatMap(head_grads(), vr, h).noalias() += dl.transpose() * x;
    });
  }
  span.end();
  Mat dyl;
  if (x_.sp) {
    reduce_scatter_tokens(dy, dyl, "tp_reduce_scatter_head_grad");
  } else {
    comm_.all_reduce(CommGroup::kTp, dy.data(), dy.size(), ReduceOp::kSum,
                     "tp_all_reduce_head_grad");
    dyl.swap(dy);
  }
  span.begin("final_norm_bwd");
  layernorm_backward(dyl, s.head_in, p + l.tensors[kLnfG].offset, s.lnf_mean, s.lnf_rstd, dx,
                     g + l.tensors[kLnfG].offset, g + l.tensors[kLnfB].offset);
  span.end();  // before the temporaries are freed
}

// The steps of a chunk's pass on host matrices; stage_model.h orders them.
double StageModel::forward(std::int64_t chunk, std::int64_t mb, const std::int32_t* tokens,
                           const std::int32_t* targets, const Mat* input, Mat* output,
                           float loss_scale) {
  loss_scale_ = loss_scale;
  routing_hash_ = 0;
  auto state = std::make_unique<MicroBatch>();
  MicroBatch& s = *state;
  s.layers.resize(chunk_blocks_[static_cast<std::size_t>(chunk)].size());
  struct Steps {
    StageModel& m;
    MicroBatch& s;
    const std::int32_t *tokens, *targets;
    const Mat* input;
    Mat* output;
    float loss_scale;
    Mat embed() {
      s.tokens.assign(tokens, tokens + m.x_.tokens);
      Mat h;
      m.embedding_forward(tokens, h);
      return h;
    }
    Mat received() { return *input; }
    Mat layer(std::size_t i, std::size_t b, Mat& h) {
      Mat out;
      m.layer_forward(b, h, s.layers[i], out);
      return out;
    }
    void keep_input_only(std::size_t i) {
      LayerCache kept;  // only the layer input, or this TP rank's rows of it (partitioned)
      if (m.plan_.partition_activations) {
        const std::int64_t rows = m.x_.tokens / m.plan_.tp;
        kept.x = s.layers[i].x.middleRows(m.x_.tp_rank * rows, rows);
      } else {
        kept.x = std::move(s.layers[i].x);
      }
      s.layers[i] = std::move(kept);
    }
    double head(Mat& h) { return m.head_forward(s, h, targets, loss_scale); }
    void send(Mat& h) { output->swap(h); }
  } steps{*this, s, tokens, targets, input, output, loss_scale};
  const double loss = forward_chunk<Mat>(geo_, chunk, pass_context(), steps);
  in_flight_[{chunk, mb}] = std::move(state);
  return loss;
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
  auto it = in_flight_.find({chunk, mb});
  TRAINPLAN_CHECK(it != in_flight_.end()) << "backward of micro-batch " << mb << " chunk "
                                          << chunk << " without its forward";
  struct Steps {
    StageModel& m;
    MicroBatch& s;
    const Mat* grad_output;
    Mat* grad_input;
    Mat head_backward() {
      Mat d;
      m.head_backward(s, d);
      return d;
    }
    Mat received() { return *grad_output; }
    bool complete(std::size_t i) const { return s.layers[i].complete; }
    Mat recompute_input(std::size_t i) {
      LayerCache& c = s.layers[i];
      if (!m.plan_.partition_activations) return std::move(c.x);
      Mat x;
      m.gather_tokens(c.x, x, "tp_all_gather_checkpoint");  // ZeRO-R: the rows of every TP rank
      c.x = Mat();
      return x;
    }
    void recompute(std::size_t i, std::size_t b, Mat& x) {
      Mat unused;
      m.recomputing_ = true;
      m.layer_forward(b, x, s.layers[i], unused);
      m.recomputing_ = false;
    }
    Mat layer_backward(std::size_t i, std::size_t b, Mat& d) {
      Mat dx;
      m.layer_backward(b, s.layers[i], d, dx);
      return dx;
    }
    void drop(std::size_t i) { s.layers[i] = LayerCache{}; }
    void embedding_backward(Mat& d) { m.embedding_backward(s.tokens.data(), d); }
    void send(Mat& d) { grad_input->swap(d); }
  } steps{*this, *it->second, grad_output, grad_input};
  if (deferring_ == nullptr) {
    backward_chunk<Mat>(geo_, chunk, pass_context(), steps);
  } else {
    // B pass: the blocks' backward_done calls wait for W (backward_weight).
    DeferredDone events(access_, deferring_->done);
    backward_chunk<Mat>(geo_, chunk, {plan_, model_.tie_word_embeddings, events, trace_}, steps);
  }
  in_flight_.erase(it);
}

void StageModel::weight_grad(std::size_t block, std::size_t tensor, std::int64_t rows,
                             std::int64_t cols, const Mat& x, const Mat& dy, float* db,
                             std::string_view task) {
  const std::size_t offset = layouts_[block].tensors[tensor].offset;
  if (deferring_ == nullptr) {
    MatMap dw(access_.grads(block) + offset, rows, cols);
    linear_backward(x, ConstMatMap(access_.params(block) + offset, rows, cols), dy, nullptr, dw,
                    db);
    return;
  }
  if (db != nullptr) RowMap(db, dy.cols()) += dy.colwise().sum();
  // The gradient buffer is looked up when W runs: under ZeRO-2/3 another micro-batch's W may
  // have reduce-scattered and freed the one B wrote its bias gradients into.
  deferring_->grads.emplace_back(task, [this, block, offset, rows, cols, xs = Mat(x), dys = Mat(dy)] {
    MatMap(access_.grads(block) + offset, rows, cols).noalias() += xs.transpose() * dys;
  });
}

void StageModel::backward_input(std::int64_t chunk, std::int64_t mb, const Mat* grad_output,
                                Mat* grad_input) {
  WeightPass& w = weight_passes_[{chunk, mb}];
  deferring_ = &w;
  backward(chunk, mb, grad_output, grad_input);
  deferring_ = nullptr;
}

void StageModel::backward_weight(std::int64_t chunk, std::int64_t mb) {
  auto it = weight_passes_.find({chunk, mb});
  TRAINPLAN_CHECK(it != weight_passes_.end())
      << "weight pass of micro-batch " << mb << " chunk " << chunk << " without its B pass";
  {
    TraceScope weight(trace_, {.pass = 'W'});
    TraceSpan span(trace_);
    for (auto& [task, run] : it->second.grads) {
      span.begin(task);
      run();
    }
    span.end();
  }
  for (std::size_t b : it->second.done) access_.backward_done(b);
  weight_passes_.erase(it);
}

}  // namespace trainplan::executor
