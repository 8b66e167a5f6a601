// One pipeline stage of a GPT on a GPU; see gpt_cuda.h. Read side by side with
// executor/cpu/gpt.cc: the same steps in the same order, each TP collective tagged with its
// cost-model task (core/cost/tasks.cc).
#include "executor/cuda/gpt_cuda.h"

#include <algorithm>
#include <cstdlib>

#include "executor/cuda/kernels.h"

namespace trainplan::executor::cuda {

using Buf = DeviceBuffer<bf16>;
using FBuf = DeviceBuffer<float>;

Status check_cuda_executor_supports(const ModelSpec& m, const Plan& p) {
  Plan as_fp32 = p;
  if (p.precision != Precision::kBf16)
    return Status::Error("the CUDA executor computes in bf16: the plan must say \"precision\": "
                         "\"bf16\"");
  as_fp32.precision = Precision::kFp32;
  // The CPU executor runs MoE (executor/cpu/moe.cc); this one has no router, experts or
  // expert all-to-all.
  if (m.is_moe())
    return Status::Error("num_experts=" + std::to_string(m.num_experts) +
                             ": the CUDA executor does not run mixture-of-experts models (the CPU "
                             "executor, plan and simulate do)",
                         ExitCode::kInvalidInput);
  if (p.ep != 1)
    return Status::Error("ep=" + std::to_string(p.ep) +
                             ": the CUDA executor does not implement expert parallelism",
                         ExitCode::kInvalidInput);
  if (p.expert_layout != ExpertLayout::kCarved)
    return Status::Error("expert_layout " + std::string(to_string(p.expert_layout)) +
                             ": the CUDA executor does not implement expert parallelism",
                         ExitCode::kInvalidInput);
  if (p.schedule == Schedule::kDualPipe)
    return Status::Error("schedule dualpipe: the CUDA executor runs one direction of "
                         "micro-batches and each backward whole",
                         ExitCode::kInvalidInput);
  if (p.offload != Offload::kNone)
    return Status::Error("offload " + std::string(to_string(p.offload)) + " (offload_device " +
                             std::string(to_string(p.offload_device)) +
                             "): the CUDA executor keeps every state in device memory (the CPU "
                             "executor, plan and simulate run the offload tiers)",
                         ExitCode::kInvalidInput);
  Status s = check_executor_supports(m, as_fp32);
  if (!s.ok()) return s;
  // The CPU executor runs context parallelism (executor/cpu/gpt.cc); the CUDA attention kernel
  // takes whole sequences only.
  if (p.cp != 1)
    return Status::Error("cp=" + std::to_string(p.cp) +
                             ": the CUDA executor does not implement context parallelism (the "
                             "CPU executor, plan and simulate do)",
                         ExitCode::kInvalidInput);
  if (p.schedule == Schedule::kZbH1 || p.schedule == Schedule::kZbV)
    return Status::Error("schedule " + std::string(to_string(p.schedule)) +
                             ": the CUDA executor runs each backward whole (the CPU executor, "
                             "plan and simulate split it into B and W)",
                         ExitCode::kInvalidInput);
  if (p.partition_activations)
    return Status::Error("partition_activations: the CUDA executor keeps whole layer inputs "
                         "under full recompute (the CPU executor, plan and simulate model it)",
                         ExitCode::kInvalidInput);
  if (p.zero_shard_size > 0 && p.zero_shard_size < p.dp_cp())
    return Status::Error("zero_shard_size=" + std::to_string(p.zero_shard_size) +
                             ": the CUDA executor shards over all dp ranks (the CPU executor, "
                             "plan and simulate run hybrid sharding)",
                         ExitCode::kInvalidInput);
  const std::int64_t hd = m.q_width() / m.num_attention_heads;
  // cuBLASLt's kernels may read operands and bias vectors in 16-byte units; the packed
  // parameter tensors, and the per-head slices the attention GEMMs stride over, start on 8
  // bf16 elements only when these widths are multiples of 8 (a bias epilogue does not check).
  const std::pair<const char*, std::int64_t> widths[] = {
      {"hidden_size", m.hidden_size}, {"head_dim", hd}, {"ffn_hidden_size / tp", m.ffn_hidden_size / p.tp}};
  for (const auto& [name, width] : widths)
    if (width % 8 != 0)
      return Status::Error(std::string("the CUDA executor needs ") + name +
                           " to be a multiple of 8 (16-byte rows for cuBLASLt), the model has " +
                           std::to_string(width));
  if (hd > kMaxHeadDim)
    return Status::Error("the CUDA executor's attention supports head_dim <= " +
                         std::to_string(kMaxHeadDim) + ", the model has " + std::to_string(hd));
  return Status::Ok();
}

namespace {

// The stride (elements) at which the block's layout keeps W_q, W_k, W_v and their biases, and
// so their gradients (executor/params.h: kWq, kBq, kWk, kBk, kWv, kBv, equal sizes); 0 when
// they are not at one stride, and the three products then run apart.
template <class Params>
std::int64_t qkv_stride(const Params& P) {
  const std::int64_t s = P.p[kWk] - P.p[kWq];
  const bool weights = P.p[kWv] - P.p[kWk] == s && P.g[kWk] - P.g[kWq] == s &&
                       P.g[kWv] - P.g[kWk] == s;
  const bool biases = P.p[kBq] == nullptr ||
                      (P.p[kBk] - P.p[kBq] == s && P.p[kBv] - P.p[kBk] == s);
  return weights && biases ? s : 0;
}

}  // namespace

bool batched_qkv_from_env() {
  const char* v = std::getenv("TRAINPLAN_CUDA_QKV");
  const std::string choice = v != nullptr ? v : "";
  if (choice.empty() || choice == "batched") return true;
  if (choice == "separate") return false;
  throw CudaError("TRAINPLAN_CUDA_QKV=" + choice + ": expected batched or separate");
}

struct CudaStageModel::LayerCache {
  Buf x;                       // (Tl, h) layer input (all that full recompute keeps)
  Buf ln1;                     // (Tl, h)
  FBuf ln1_mean, ln1_rstd;     // (Tl)
  Buf qkv;                     // (3, T, q/tp): q, k, v one after another
  Buf attn;                    // (T, q/tp)
  FBuf lse;                    // (b * heads/tp * s) attention log-sum-exp per row
  Buf x1;                      // (Tl, h)
  Buf ln2;                     // (Tl, h)
  FBuf ln2_mean, ln2_rstd;     // (Tl)
  Buf a;                       // (T, f/tp) fc1 output
  Buf g;                       // (T, f/tp) GELU output
  bool complete = false;
};

struct CudaStageModel::MicroBatch {
  const std::int32_t* tokens = nullptr;   // (T) device, owned by the caller until backward
  DeviceBuffer<std::int32_t> targets;     // (T) last stage
  DeviceBuffer<std::int32_t> token_copy;  // (T) first stage, for the embedding backward
  std::vector<LayerCache> layers;
  Buf head_in;                            // (Tl, h)
  FBuf lnf_mean, lnf_rstd;                // (Tl)
  Buf lnf;                                // (T, h)
  Buf logits;                             // (T, V/tp); the backward overwrites it in place
  FBuf row_max, sum_exp, target_logit;    // (T)
  float loss_scale = 0;
};

CudaStageModel::CudaStageModel(const ModelSpec& model, const Plan& plan, std::int64_t stage,
                               NcclComm* comm, DeviceBlockAccess& access, Gemm& gemm,
                               cudaStream_t stream)
    : StageModelBase(model, plan, stage, comm != nullptr ? comm->group_rank(CommGroup::kTp) : 0),
      model_(model),
      plan_(plan),
      comm_(comm),
      access_(access),
      gemm_(gemm),
      stream_(stream) {
  TRAINPLAN_CHECK(comm != nullptr || plan.world_size() == 1)
      << "a multi-rank plan needs a communicator";
  heads_ = model.num_attention_heads / plan.tp;
  hd_ = model.q_width() / model.num_attention_heads;
  attention_impl_ = attention_impl_from_env(hd_, model.q_width() / plan.tp);
  batched_qkv_ = batched_qkv_from_env();
}

CudaStageModel::~CudaStageModel() = default;

CudaStageModel::LayerParams CudaStageModel::layer_params(std::size_t block) {
  LayerParams lp{};
  const bf16* p = access_.params(block);
  float* g = access_.grads(block);
  const BlockLayout& l = layouts_[block];
  for (std::size_t i = 0; i < kNumLayerTensors; ++i) {
    lp.p[i] = p + l.tensors[i].offset;
    lp.g[i] = g + l.tensors[i].offset;
  }
  return lp;
}

void CudaStageModel::all_reduce(bf16* data, std::int64_t count, std::string_view task) {
  if (comm_ != nullptr)
    comm_->all_reduce_device(CommGroup::kTp, data, count, DType::kBF16, ReduceOp::kSum, stream_,
                             task);
}

void CudaStageModel::all_reduce_f32(float* data, std::int64_t count, ReduceOp op,
                                    std::string_view task) {
  if (comm_ != nullptr)
    comm_->all_reduce_device(CommGroup::kTp, data, count, DType::kF32, op, stream_, task);
}

void CudaStageModel::gather_tokens(const Buf& local, Buf& full, std::string_view task) {
  full.resize(local.size() * x_.tp);
  comm_->all_gather_device(CommGroup::kTp, local.data(), full.data(), local.size(), DType::kBF16,
                           stream_, task);
}

void CudaStageModel::reduce_scatter_tokens(const Buf& full, Buf& local, std::string_view task) {
  local.resize(full.size() / x_.tp);
  comm_->reduce_scatter_device(CommGroup::kTp, full.data(), local.data(), local.size(),
                               DType::kBF16, stream_, task);
}

void CudaStageModel::layer_forward(std::size_t block, Buf&& x, LayerCache& c, Buf& out) {
  const LayerParams P = layer_params(block);
  const std::int64_t h = model_.hidden_size, qr = model_.q_width() / plan_.tp,
                     fr = model_.ffn_hidden_size / plan_.tp;
  const std::int64_t T = x_.tokens, Tl = x_.local_tokens;
  DeviceTraceSpan span(trace_, stream_);
  span.begin("norm1");
  c.x = std::move(x);
  c.ln1.resize(Tl * h);
  c.ln1_mean.resize(Tl);
  c.ln1_rstd.resize(Tl);
  layernorm_forward(c.x.data(), P.p[kLn1G], P.p[kLn1B], c.ln1.data(), c.ln1_mean.data(),
                    c.ln1_rstd.data(), Tl, h, stream_);
  Buf gathered;
  const Buf* y1 = &c.ln1;
  if (x_.sp) {
    span.end();
    gather_tokens(c.ln1, gathered, "tp_all_gather_attn");
    y1 = &gathered;
  }
  span.begin("qkv");
  c.qkv.resize(3 * T * qr);
  bf16* const q = c.qkv.data();
  bf16* const k = q + T * qr;
  bf16* const v = k + T * qr;
  if (const std::int64_t stride = batched_qkv_ ? qkv_stride(P) : 0; stride != 0) {
    gemm_.linear_forward_shared_input(y1->data(), P.p[kWq], P.p[kBq], stride, q, T * qr, 3, T, h,
                                      qr, stream_);
  } else {
    gemm_.linear_forward(y1->data(), P.p[kWq], P.p[kBq], q, T, h, qr, stream_);
    gemm_.linear_forward(y1->data(), P.p[kWk], P.p[kBk], k, T, h, qr, stream_);
    gemm_.linear_forward(y1->data(), P.p[kWv], P.p[kBv], v, T, h, qr, stream_);
  }
  span.begin(attention_task_);
  c.attn.resize(T * qr);
  c.lse.resize(plan_.micro_batch_size * heads_ * model_.seq_len);
  if (attention_impl_ == AttentionImpl::kFlash)
    flash_attention_forward(q, k, v, qr, c.attn.data(), c.lse.data(),
                            plan_.micro_batch_size, model_.seq_len, heads_, hd_, stream_);
  else
    attention_forward(q, k, v, qr, c.attn.data(), c.lse.data(),
                      plan_.micro_batch_size, model_.seq_len, heads_, hd_, stream_,
                      attention_impl_ == AttentionImpl::kGemm ? &gemm_ : nullptr);
  span.begin("out_proj");
  Buf partial(T * h), o;
  gemm_.linear_forward(c.attn.data(), P.p[kWo], nullptr, partial.data(), T, qr, h, stream_);
  span.end();
  if (x_.sp) {
    reduce_scatter_tokens(partial, o, "tp_reduce_scatter_attn");
  } else {
    all_reduce(partial.data(), partial.size(), "tp_all_reduce_attn");
    o = std::move(partial);
  }
  span.begin("residual1");  // the row-parallel bias, then the residual (as the cost model)
  c.x1.resize(Tl * h);
  residual_bias_add(c.x.data(), o.data(), P.p[kBo], c.x1.data(), Tl, h, stream_);
  span.begin("norm2");
  c.ln2.resize(Tl * h);
  c.ln2_mean.resize(Tl);
  c.ln2_rstd.resize(Tl);
  layernorm_forward(c.x1.data(), P.p[kLn2G], P.p[kLn2B], c.ln2.data(), c.ln2_mean.data(),
                    c.ln2_rstd.data(), Tl, h, stream_);
  const Buf* y2 = &c.ln2;
  if (x_.sp) {
    span.end();
    gather_tokens(c.ln2, gathered, "tp_all_gather_mlp");
    y2 = &gathered;
  }
  span.begin("fc1");
  c.a.resize(T * fr);
  c.g.resize(T * fr);
  gemm_.linear_forward(y2->data(), P.p[kW1], P.p[kB1], c.a.data(), T, h, fr, stream_);
  span.begin("gelu");
  gelu_forward(c.a.data(), c.g.data(), T * fr, stream_);
  span.begin("fc2");
  partial.resize(T * h);
  gemm_.linear_forward(c.g.data(), P.p[kW2], nullptr, partial.data(), T, fr, h, stream_);
  span.end();
  Buf m;
  if (x_.sp) {
    reduce_scatter_tokens(partial, m, "tp_reduce_scatter_mlp");
  } else {
    all_reduce(partial.data(), partial.size(), "tp_all_reduce_mlp");
    m = std::move(partial);
  }
  span.begin("residual2");
  out.resize(Tl * h);
  residual_bias_add(c.x1.data(), m.data(), P.p[kB2], out.data(), Tl, h, stream_);
  span.end();
  c.complete = true;
}

void CudaStageModel::layer_backward(std::size_t block, LayerCache& c, const Buf& dout, Buf& dx) {
  const LayerParams P = layer_params(block);
  const std::int64_t h = model_.hidden_size, qr = model_.q_width() / plan_.tp,
                     fr = model_.ffn_hidden_size / plan_.tp;
  const std::int64_t T = x_.tokens, Tl = x_.local_tokens;
  DeviceTraceSpan span(trace_, stream_);
  // MLP.
  Buf gathered;
  const Buf* dm = &dout;
  if (x_.sp) {
    gather_tokens(dout, gathered, "tp_all_gather_mlp_grad");
    dm = &gathered;
  }
  Buf dg(T * fr), da(T * fr), dy(T * h);
  span.begin("fc2_dgrad");
  gemm_.linear_dgrad(dm->data(), P.p[kW2], dg.data(), T, fr, h, false, stream_);
  span.begin("fc2_wgrad");
  gemm_.linear_wgrad(c.g.data(), dm->data(), P.g[kW2], T, fr, h, stream_);
  bias_backward(dm->data(), P.g[kB2], T, h, stream_);
  span.begin("gelu_bwd");
  gelu_backward(c.a.data(), dg.data(), da.data(), T * fr, stream_);
  span.begin("fc1_dgrad");
  gemm_.linear_dgrad(da.data(), P.p[kW1], dy.data(), T, h, fr, false, stream_);
  const Buf* y2 = &c.ln2;
  if (x_.sp) {
    span.end();
    gather_tokens(c.ln2, gathered, "tp_all_gather_mlp_input");
    y2 = &gathered;
  }
  span.begin("fc1_wgrad");
  gemm_.linear_wgrad(y2->data(), da.data(), P.g[kW1], T, h, fr, stream_);
  bias_backward(da.data(), P.g[kB1], T, fr, stream_);
  span.end();
  Buf dyl;
  if (x_.sp) {
    reduce_scatter_tokens(dy, dyl, "tp_reduce_scatter_mlp_grad");
  } else {
    all_reduce(dy.data(), dy.size(), "tp_all_reduce_mlp_grad");
    dyl = std::move(dy);
  }
  Buf dn(Tl * h), dx1(Tl * h);
  span.begin("norm2_bwd");
  layernorm_backward(dyl.data(), c.x1.data(), P.p[kLn2G], c.ln2_mean.data(), c.ln2_rstd.data(),
                     dn.data(), P.g[kLn2G], P.g[kLn2B], Tl, h, stream_);
  span.begin("residual2_bwd");  // the sum at the branch point, after norm2_bwd (as gpt.cc)
  add(dout.data(), dn.data(), dx1.data(), Tl * h, stream_);

  // Attention.
  const Buf* dop = &dx1;
  if (x_.sp) {
    span.end();
    gather_tokens(dx1, gathered, "tp_all_gather_attn_grad");
    dop = &gathered;
  }
  span.begin("out_proj_dgrad");
  Buf dattn(T * qr);
  gemm_.linear_dgrad(dop->data(), P.p[kWo], dattn.data(), T, qr, h, false, stream_);
  span.begin("out_proj_wgrad");
  gemm_.linear_wgrad(c.attn.data(), dop->data(), P.g[kWo], T, qr, h, stream_);
  bias_backward(dop->data(), P.g[kBo], T, h, stream_);
  span.begin(attention_bwd_task_);
  const bf16* const q = c.qkv.data();
  const bf16* const k = q + T * qr;
  const bf16* const v = k + T * qr;
  Buf dqkv(3 * T * qr);  // dq, dk, dv one after another, as the forward's q, k, v
  bf16* const dq = dqkv.data();
  bf16* const dk = dq + T * qr;
  bf16* const dv = dk + T * qr;
  FBuf delta(c.lse.size());
  if (attention_impl_ == AttentionImpl::kFlash)
    flash_attention_backward(q, k, v, qr, c.attn.data(), dattn.data(), c.lse.data(),
                             delta.data(), dq, dk, dv, plan_.micro_batch_size, model_.seq_len,
                             heads_, hd_, stream_);
  else
    attention_backward(q, k, v, qr, c.attn.data(), dattn.data(), c.lse.data(), delta.data(),
                       dq, dk, dv,
                       plan_.micro_batch_size, model_.seq_len, heads_, hd_, stream_,
                       attention_impl_ == AttentionImpl::kGemm ? &gemm_ : nullptr);
  span.begin("qkv_dgrad");
  dy.resize(T * h);
  gemm_.linear_dgrad(dq, P.p[kWq], dy.data(), T, h, qr, false, stream_);
  gemm_.linear_dgrad(dk, P.p[kWk], dy.data(), T, h, qr, true, stream_);
  gemm_.linear_dgrad(dv, P.p[kWv], dy.data(), T, h, qr, true, stream_);
  const Buf* y1 = &c.ln1;
  if (x_.sp) {
    span.end();
    gather_tokens(c.ln1, gathered, "tp_all_gather_attn_input");
    y1 = &gathered;
  }
  span.begin("qkv_wgrad");
  if (const std::int64_t stride = batched_qkv_ ? qkv_stride(P) : 0; stride != 0) {
    gemm_.linear_wgrad_shared_input(y1->data(), dq, T * qr, P.g[kWq], stride, 3, T, h, qr,
                                    stream_);
  } else {
    gemm_.linear_wgrad(y1->data(), dq, P.g[kWq], T, h, qr, stream_);
    gemm_.linear_wgrad(y1->data(), dk, P.g[kWk], T, h, qr, stream_);
    gemm_.linear_wgrad(y1->data(), dv, P.g[kWv], T, h, qr, stream_);
  }
  bias_backward(dq, P.g[kBq], T, qr, stream_);
  bias_backward(dk, P.g[kBk], T, qr, stream_);
  bias_backward(dv, P.g[kBv], T, qr, stream_);
  span.end();
  if (x_.sp) {
    reduce_scatter_tokens(dy, dyl, "tp_reduce_scatter_attn_grad");
  } else {
    all_reduce(dy.data(), dy.size(), "tp_all_reduce_attn_grad");
    dyl = std::move(dy);
  }
  span.begin("norm1_bwd");
  dn.resize(Tl * h);
  layernorm_backward(dyl.data(), c.x.data(), P.p[kLn1G], c.ln1_mean.data(), c.ln1_rstd.data(),
                     dn.data(), P.g[kLn1G], P.g[kLn1B], Tl, h, stream_);
  span.begin("residual1_bwd");  // as residual2_bwd: the sum at the branch point
  dx.resize(Tl * h);
  add(dx1.data(), dn.data(), dx.data(), Tl * h, stream_);
  span.end();
}

void CudaStageModel::embedding_forward(const std::int32_t* tokens, Buf& out) {
  const BlockLayout& l = layouts_[0];
  const TensorSlice& wte = l.tensors[kWte];
  const bf16* p = access_.params(0);
  const std::int64_t h = model_.hidden_size, T = x_.tokens;
  DeviceTraceSpan span(trace_, stream_);
  span.begin("embedding");
  Buf e(T * h);
  cuda::embedding_forward(tokens, p + wte.offset, wte.row0, wte.rows, e.data(), T, h, stream_);
  span.end();
  std::int64_t first_token = 0;
  if (x_.sp) {
    reduce_scatter_tokens(e, out, "tp_reduce_scatter_embedding");
    first_token = x_.tp_rank * x_.local_tokens;
  } else {
    all_reduce(e.data(), e.size(), "tp_all_reduce_embedding");
    out = std::move(e);
  }
  span.begin("embedding");  // the positions, added after the vocabulary-parallel sum
  add_positions(out.data(), p + l.tensors[kWpe].offset, first_token, model_.seq_len,
                out.size() / h, h, stream_);
  span.end();
}

void CudaStageModel::embedding_backward(const std::int32_t* tokens, const Buf& dout) {
  const BlockLayout& l = layouts_[0];
  const TensorSlice& wte = l.tensors[kWte];
  float* g = access_.grads(0);
  Buf gathered;
  const Buf* d = &dout;
  if (x_.sp) {
    gather_tokens(dout, gathered, "tp_all_gather_embedding_grad");
    d = &gathered;
  }
  DeviceTraceSpan span(trace_, stream_);
  span.begin("embedding_bwd");
  cuda::embedding_backward(tokens, d->data(), g + wte.offset, wte.row0, wte.rows,
                     g + l.tensors[kWpe].offset, model_.seq_len, x_.tokens, model_.hidden_size,
                     stream_);
}

const bf16* CudaStageModel::head_weights() {
  const auto [block, offset] = head_matrix();
  return access_.params(block) + offset;
}

float* CudaStageModel::head_grads() {
  const auto [block, offset] = head_matrix();
  return access_.grads(block) + offset;
}

void CudaStageModel::head_forward(MicroBatch& s, Buf&& x, const std::int32_t* targets,
                                  float scale, double* loss_sum) {
  const std::size_t hb = layouts_.size() - 1;
  const BlockLayout& l = layouts_[hb];
  const bf16* p = access_.params(hb);
  const std::int64_t h = model_.hidden_size, vr = padded_vocab(model_, plan_.tp) / plan_.tp;
  const std::int64_t v0 = x_.tp_rank * vr, T = x_.tokens, Tl = x_.local_tokens;
  DeviceTraceSpan span(trace_, stream_);
  span.begin("final_norm");
  s.head_in = std::move(x);
  s.targets.resize(T);
  TP_CUDA(cudaMemcpyAsync(s.targets.data(), targets, static_cast<std::size_t>(T) * 4,
                          cudaMemcpyDeviceToDevice, stream_));
  s.loss_scale = scale;
  Buf y(Tl * h);
  s.lnf_mean.resize(Tl);
  s.lnf_rstd.resize(Tl);
  layernorm_forward(s.head_in.data(), p + l.tensors[kLnfG].offset, p + l.tensors[kLnfB].offset,
                    y.data(), s.lnf_mean.data(), s.lnf_rstd.data(), Tl, h, stream_);
  if (x_.sp) {
    span.end();
    gather_tokens(y, s.lnf, "tp_all_gather_head");
  } else {
    s.lnf = std::move(y);
  }
  span.begin("lm_head");
  // logits (T, vr) = lnf (T, h) * W^T, W (vr, h).
  s.logits.resize(T * vr);
  GemmArgs g;
  g.trans_b = true;
  g.m = T; g.n = vr; g.k = h;
  g.a = s.lnf.data(); g.lda = h;
  g.b = head_weights(); g.ldb = h;
  g.c = s.logits.data(); g.ldc = vr;
  gemm_.run(g, stream_);
  span.begin("cross_entropy");  // in four pieces around its three all-reduces (as gpt.cc)
  const std::int64_t valid = std::clamp<std::int64_t>(model_.vocab_size - v0, 0, vr);
  s.row_max.resize(T);
  s.sum_exp.resize(T);
  s.target_logit.resize(T);
  cross_entropy_max(s.logits.data(), s.row_max.data(), T, vr, valid, stream_);
  span.end();
  all_reduce_f32(s.row_max.data(), T, ReduceOp::kMax, "tp_all_reduce_logit_max");
  span.begin("cross_entropy");
  cross_entropy_sum_exp(s.logits.data(), s.row_max.data(), s.targets.data(), v0,
                        s.sum_exp.data(), s.target_logit.data(), T, vr, valid, stream_);
  span.end();
  all_reduce_f32(s.sum_exp.data(), T, ReduceOp::kSum, "tp_all_reduce_sum_exp");
  all_reduce_f32(s.target_logit.data(), T, ReduceOp::kSum, "tp_all_reduce_target_logit");
  span.begin("cross_entropy");
  cross_entropy_loss(s.row_max.data(), s.sum_exp.data(), s.target_logit.data(), loss_sum, T,
                     stream_);
}

void CudaStageModel::head_backward(MicroBatch& s, Buf& dx) {
  const std::size_t hb = layouts_.size() - 1;
  const BlockLayout& l = layouts_[hb];
  const bf16* p = access_.params(hb);
  float* g = access_.grads(hb);
  const std::int64_t h = model_.hidden_size, vr = padded_vocab(model_, plan_.tp) / plan_.tp;
  const std::int64_t v0 = x_.tp_rank * vr, T = x_.tokens, Tl = x_.local_tokens;
  const std::int64_t valid = std::clamp<std::int64_t>(model_.vocab_size - v0, 0, vr);
  DeviceTraceSpan span(trace_, stream_);
  span.begin("cross_entropy_bwd");
  // dlogits = (softmax - one_hot(target)) * loss scale, in place.
  cross_entropy_backward(s.logits.data(), s.row_max.data(), s.sum_exp.data(), s.targets.data(),
                         v0, s.loss_scale, T, vr, valid, stream_);
  span.begin("lm_head_dgrad");  // dlogits (T, vr) * W (vr, h)
  Buf dy(T * h);
  gemm_.linear_forward(s.logits.data(), head_weights(), nullptr, dy.data(), T, vr, h, stream_);
  span.begin("lm_head_wgrad");  // dW (vr, h) += dlogits^T lnf
  gemm_.linear_wgrad(s.logits.data(), s.lnf.data(), head_grads(), T, vr, h, stream_);
  span.end();
  Buf dyl;
  if (x_.sp) {
    reduce_scatter_tokens(dy, dyl, "tp_reduce_scatter_head_grad");
  } else {
    all_reduce(dy.data(), dy.size(), "tp_all_reduce_head_grad");
    dyl = std::move(dy);
  }
  span.begin("final_norm_bwd");
  dx.resize(Tl * h);
  layernorm_backward(dyl.data(), s.head_in.data(), p + l.tensors[kLnfG].offset,
                     s.lnf_mean.data(), s.lnf_rstd.data(), dx.data(),
                     g + l.tensors[kLnfG].offset, g + l.tensors[kLnfB].offset, Tl, h, stream_);
}

// The steps of a chunk's pass on device buffers; executor/stage_model.h orders them (as
// executor/cpu/gpt.cc's).
void CudaStageModel::forward(std::int64_t chunk, std::int64_t mb, const std::int32_t* tokens,
                             const std::int32_t* targets, Buf* input, Buf* output,
                             float loss_scale, double* loss_sum) {
  auto state = std::make_unique<MicroBatch>();
  MicroBatch& s = *state;
  s.layers.resize(chunk_blocks_[static_cast<std::size_t>(chunk)].size());
  struct Steps {
    CudaStageModel& m;
    MicroBatch& s;
    const std::int32_t *tokens, *targets;
    Buf *input, *output;
    float loss_scale;
    double* loss_sum;
    Buf embed() {
      s.token_copy.resize(m.x_.tokens);
      TP_CUDA(cudaMemcpyAsync(s.token_copy.data(), tokens,
                              static_cast<std::size_t>(m.x_.tokens) * sizeof(std::int32_t),
                              cudaMemcpyDeviceToDevice, m.stream_));
      Buf h;
      m.embedding_forward(tokens, h);
      return h;
    }
    Buf received() { return std::move(*input); }
    Buf layer(std::size_t i, std::size_t b, Buf& h) {
      Buf out;
      m.layer_forward(b, std::move(h), s.layers[i], out);
      return out;
    }
    void keep_input_only(std::size_t i) {
      LayerCache kept;  // only the layer input
      kept.x = std::move(s.layers[i].x);
      s.layers[i] = std::move(kept);
    }
    double head(Buf& h) {
      m.head_forward(s, std::move(h), targets, loss_scale, loss_sum);
      return 0;  // added to *loss_sum on the device
    }
    void send(Buf& h) { *output = std::move(h); }
  } steps{*this, s, tokens, targets, input, output, loss_scale, loss_sum};
  forward_chunk<Buf>(geo_, chunk, pass_context(), steps);
  in_flight_[{chunk, mb}] = std::move(state);
}

void CudaStageModel::backward(std::int64_t chunk, std::int64_t mb, Buf* grad_output,
                              Buf* grad_input) {
  auto it = in_flight_.find({chunk, mb});
  TRAINPLAN_CHECK(it != in_flight_.end()) << "backward of micro-batch " << mb << " chunk "
                                          << chunk << " without its forward";
  struct Steps {
    CudaStageModel& m;
    MicroBatch& s;
    Buf *grad_output, *grad_input;
    Buf head_backward() {
      Buf d;
      m.head_backward(s, d);
      return d;
    }
    Buf received() { return std::move(*grad_output); }
    bool complete(std::size_t i) const { return s.layers[i].complete; }
    Buf recompute_input(std::size_t i) { return std::move(s.layers[i].x); }
    void recompute(std::size_t i, std::size_t b, Buf& x) {
      Buf unused;
      m.layer_forward(b, std::move(x), s.layers[i], unused);
    }
    Buf layer_backward(std::size_t i, std::size_t b, Buf& d) {
      Buf dx;
      m.layer_backward(b, s.layers[i], d, dx);
      return dx;
    }
    void drop(std::size_t i) { s.layers[i] = LayerCache{}; }
    void embedding_backward(Buf& d) { m.embedding_backward(s.token_copy.data(), d); }
    void send(Buf& d) { *grad_input = std::move(d); }
  } steps{*this, *it->second, grad_output, grad_input};
  backward_chunk<Buf>(geo_, chunk, pass_context(), steps);
  in_flight_.erase(it);
}

const DeviceBuffer<bf16>* CudaStageModel::logits(std::int64_t chunk, std::int64_t mb) const {
  auto it = in_flight_.find({chunk, mb});
  return it == in_flight_.end() ? nullptr : &it->second->logits;
}

}  // namespace trainplan::executor::cuda
