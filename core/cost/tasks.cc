// The cost model's task questions: what one rank executes, in order, for a layer's forward,
// backward and recompute, the embedding and the LM head (GEMMs, memory-bound kernels and the
// collectives between them, FP8 casts included); which GEMM a TP collective overlaps with
// (Plan::tp_comm_overlap); the tokens of a micro-batch and the pipeline message. Also the names
// of the task enums. Sources in cost_model.h.
// Tested by tests/core/cost_model_test.cc (task lists, FLOPs and bytes per task, TP overlap
// partners) and tests/core/moe_mla_test.cc (MoE and MLA task lists).
#include "core/cost/cost_model.h"

#include <algorithm>
#include <cmath>

#include "core/cost/compute_model.h"
#include "core/cost/internal.h"

namespace trainplan {

using namespace cost_internal;

std::string_view to_string(Pass p) {
  switch (p) {
    case Pass::kForward: return "forward";
    case Pass::kBackward: return "backward";
    case Pass::kRecompute: return "recompute";
  }
  return "?";
}

std::string_view to_string(MemoryKernel k) {
  switch (k) {
    case MemoryKernel::kElementwise: return "elementwise";
    case MemoryKernel::kNorm: return "norm";
    case MemoryKernel::kActivation: return "activation";
    case MemoryKernel::kSoftmax: return "softmax";
    case MemoryKernel::kEmbedding: return "embedding";
    case MemoryKernel::kOptimizer: return "optimizer";
    case MemoryKernel::kCount: break;
  }
  return "?";
}

std::string_view to_string(CommGroup g) {
  switch (g) {
    case CommGroup::kTp: return "tp";
    case CommGroup::kPp: return "pp";
    case CommGroup::kDp: return "dp";
    case CommGroup::kEp: return "ep";
    case CommGroup::kExpertDp: return "expert_dp";
    case CommGroup::kEmbedding: return "embedding";
    case CommGroup::kCp: return "cp";
    case CommGroup::kDpReplica: return "dp_replica";
    case CommGroup::kExpertTp: return "expert_tp";
  }
  return "?";
}

std::string_view report_group(CommGroup g) {
  switch (g) {
    case CommGroup::kTp:
    case CommGroup::kExpertTp: return "tp";
    case CommGroup::kCp: return "cp";
    case CommGroup::kPp:
    case CommGroup::kEmbedding: return "pp";
    case CommGroup::kDp:
    case CommGroup::kDpReplica:
    case CommGroup::kExpertDp: return "dp";
    case CommGroup::kEp: return "ep";
  }
  return "?";
}

// ---------------------------------------------------------------------------------------------
// The task builders other files share (internal.h).

namespace cost_internal {

Shape shape_of(const ModelSpec& m, const Plan& p) {
  Shape x{};
  x.e = bytes_per_element(p.precision);
  x.cp = p.cp;
  x.s_full = m.seq_len;
  x.s = m.seq_len / p.cp;
  x.b = p.micro_batch_size;
  x.t = p.tp;
  x.h = m.hidden_size;
  x.q = m.q_width();
  x.kv = m.kv_width();
  x.hd = m.head_dim;
  x.f = m.ffn_hidden_size;
  x.vd = m.v_dim();
  x.vw = m.v_width();
  x.ow = m.o_width();
  x.shared_f = m.is_moe() ? m.shared_expert_ffn_size : 0;
  x.mla = m.is_mla();
  x.ql = m.q_lora_rank;
  x.kvl = m.kv_lora_rank;
  x.rope = m.qk_rope_head_dim;
  x.entry = x.mla ? (x.ql > 0 ? x.ql : x.h) + x.kvl + x.rope : x.h;
  x.heads_per_rank = m.num_attention_heads / p.tp;
  x.tokens = x.s * x.b;
  x.sp = p.sequence_parallel && p.tp > 1;
  x.norm_tokens = x.sp ? x.tokens / x.t : x.tokens;
  x.dropout = m.dropout;
  x.fused = p.attention == AttentionImpl::kFused;
  x.swiglu = m.activation == Activation::kSwiglu;
  x.moe = m.is_moe();
  // Routing its own rows (Plan::moe_routes_own_rows): folded, or carved with SP; the task list is
  // the same, the ranks' placement (core/rank_layout.h) is not.
  x.own_rows = x.moe && p.moe_routes_own_rows();
  x.etp = p.expert_tp_size();
  x.moe_tokens = x.own_rows ? x.norm_tokens : x.tokens;
  const bool eager = p.elementwise == Elementwise::kEager;
  x.eager_norm = eager && m.norm == NormKind::kRmsNorm;
  x.eager_rope = eager && m.position == PositionKind::kRope && !x.mla;
  x.eager_swiglu = (eager || p.elementwise == Elementwise::kEagerSwiglu) && x.swiglu;
  x.cp_comm = p.cp_comm;
  x.eager_merge = eager;
  x.ring_kv = p.cp_kv_expanded ? x.q : x.kv;
  x.ring_vw = p.cp_kv_expanded ? x.ow : x.vw;
  return x;
}

Task gemm(std::string_view name, std::int64_t m, std::int64_t n, std::int64_t k,
          std::int64_t batch, double e) {
  Task t;
  t.name = name;
  t.kind = TaskKind::kGemm;
  t.m = m;
  t.n = n;
  t.k = k;
  t.batch = batch;
  t.flops = 2.0 * d(batch) * d(m) * d(n) * d(k);
  t.executed_flops = t.flops;
  t.bytes = e * d(batch) * (d(m) * d(k) + d(k) * d(n) + d(m) * d(n));
  return t;
}

Task memory(std::string_view name, double bytes, MemoryKernel kernel) {
  Task t;
  t.name = name;
  t.kind = TaskKind::kMemory;
  t.bytes = bytes;
  t.memory_kernel = kernel;
  return t;
}

Task comm(std::string_view name, Collective c, CommGroup g, std::int64_t group_size,
          double message_bytes) {
  Task t;
  t.name = name;
  t.kind = TaskKind::kComm;
  t.collective = c;
  t.group = g;
  t.group_size = group_size;
  t.message_bytes = std::llround(message_bytes);
  return t;
}

// Drops collectives over a group of one rank: they move nothing and cost nothing.
std::vector<Task> without_trivial_comm(std::vector<Task> tasks) {
  tasks.erase(std::remove_if(tasks.begin(), tasks.end(),
                             [](const Task& t) {
                               return t.kind == TaskKind::kComm && t.group_size <= 1;
                             }),
              tasks.end());
  return tasks;
}

double cp_kv_bytes(const Shape& x) {
  return d(x.b) * d(x.s_full) * d(x.ring_kv + x.ring_vw) / d(x.t) * x.e;
}

bool is_cp_attention_task(const Task& t) {
  return t.kind == TaskKind::kAttention ||
         (t.kind == TaskKind::kMemory && t.name.substr(0, 3) == "cp_");
}

}  // namespace cost_internal

// ---------------------------------------------------------------------------------------------
// Tasks

namespace {

// Megatron's g operator after a row-parallel linear: all-reduce, or reduce-scatter to the
// sequence-parallel region (Korthikanti et al. 2022, sec. 4.2.2).
Task tp_exit(std::string_view ar_name, std::string_view rs_name, const Shape& x) {
  const double bytes = d(x.tokens) * d(x.h) * x.e;
  return x.sp ? comm(rs_name, Collective::kReduceScatter, CommGroup::kTp, x.t, bytes)
              : comm(ar_name, Collective::kAllReduce, CommGroup::kTp, x.t, bytes);
}
// The all-gather that enters a column-parallel linear from the sequence-parallel region.
Task tp_gather(std::string_view name, const Shape& x) {
  return comm(name, Collective::kAllGather, CommGroup::kTp, x.t, d(x.tokens) * d(x.h) * x.e);
}

// Plan::elementwise eager's SwiGLU, F.silu(w1(x)) * w3(x) (torchtitan/models/llama/model.py at
// ba2469780, FeedForward.forward), in e-byte elements per element of the inner width: silu
// reads the gate and writes its output (2), the product reads both and writes (3): 5 in two
// launches, where a fused kernel reads the gate and the up projection and writes once (3).
// Backward (PyTorch tools/autograd/derivatives.yaml): mul's two gradients, grad * other and
// grad * self (read 2, write 1 each), and silu_backward(grad, self) (read 2, write 1): 9 in
// three launches.
constexpr double kEagerSwigluForwardElements = 5.0;
constexpr double kEagerSwigluBackwardElements = 9.0;
constexpr std::int64_t kEagerSwigluForwardLaunches = 2;
constexpr std::int64_t kEagerSwigluBackwardLaunches = 3;

// The activation's backward reads its input and the incoming gradient and writes the
// gradient: twice the forward's traffic, and the same tanh / exp again (recomputed). Eager
// SwiGLU: its three autograd kernels (above).
Task activation_backward(const Task& fwd) {
  const std::string_view name = fwd.name == "swiglu"       ? "swiglu_bwd"
                                : fwd.name == "shared_act" ? "shared_act_bwd"
                                                           : "gelu_bwd";
  const bool eager = fwd.eager;
  Task t = memory(name,
                  eager ? fwd.bytes * kEagerSwigluBackwardElements / kEagerSwigluForwardElements
                        : 2.0 * fwd.bytes,
                  MemoryKernel::kActivation);
  t.transcendentals = fwd.transcendentals;
  t.backward = true;
  t.eager = eager;
  if (eager) t.launches = kEagerSwigluBackwardLaunches;
  return t;
}

Task cp_gather_kv(std::string_view name, const Shape& x) {
  return comm(name, Collective::kAllGather, CommGroup::kCp, x.cp, cp_kv_bytes(x));
}

// The unfused attention core's scores on this rank: b x heads x s queries x s_full keys.
double unfused_scores(const Shape& x) {
  return d(x.b * x.heads_per_rank) * d(x.s) * d(x.s_full);
}
// The share of a row's scores Megatron-LM's causal softmax kernels load: row i loads i + 1 of s,
// (s + 1) / 2s on average. 1 where the queries are not the whole sequence (context parallelism,
// which runs fused attention only).
double unfused_causal_read_fraction(const Shape& x) {
  return x.s == x.s_full ? d(x.s_full + 1) / (2.0 * d(x.s_full)) : 1.0;
}
// Bytes per score of attention dropout (torch Dropout): forward reads e and writes e and a 1-byte
// mask; backward reads the gradient and the mask and writes e. 0 without dropout.
double attention_dropout_bytes(const Shape& x) { return x.dropout ? 1.0 + 2.0 * x.e : 0.0; }

// The attention core of this rank's s queries against the keys of the whole sequence (s_full;
// s = s_full without context parallelism). With the load-balanced chunks each CP rank does
// 1/cp of the causal work, so its FLOPs are the full-sequence core's / cp.
void add_attention_core(std::vector<Task>& out, const Shape& x) {
  const std::int64_t batch = x.b * x.heads_per_rank;
  if (x.fused) {
    // FlashAttention-style kernel: 2*b*a*s^2*(hd + vd) model FLOPs (QK^T and PV; 4*b*a*s^2*hd
    // when vd = hd); a causal kernel executes about half of them. Reads Q, K, V and writes O.
    // With a value head narrower than the query/key head (MLA), PV has vd where QK^T has hd.
    Task t = gemm("attention", x.s, x.s_full, x.hd, batch, x.e);
    t.kind = TaskKind::kAttention;
    t.flops = 2.0 * d(batch) * d(x.s) * d(x.s_full) * d(x.hd + x.vd);
    t.executed_flops = t.flops / 2.0;
    t.bytes = x.e * (d(x.tokens) * d(x.q + x.ow) + d(x.b) * d(x.s_full) * d(x.kv + x.vw)) / d(x.t);
    out.push_back(t);
    return;
  }
  out.push_back(gemm("attn_scores", x.s, x.s_full, x.hd, batch, x.e));
  // Scale, causal mask and softmax (one fused kernel), then dropout. Megatron-LM's causal kernel
  // (scaled_upper_triang_masked_softmax_warp_forward, megatron/fused_kernels/
  // scaled_upper_triang_masked_softmax.h, NVIDIA/Megatron-LM 2387ce01) loads a row's scores only
  // up to the diagonal and stores the whole row (the masked part as zeros): e x
  // unfused_causal_read_fraction read, e written per score. Dropout, its own op (torch Dropout),
  // reads the probabilities and writes them with a 1-byte mask. validation/corpus/NOTES.md,
  // nineteenth pass.
  Task softmax = memory("softmax",
                        unfused_scores(x) * (x.e * unfused_causal_read_fraction(x) + x.e +
                                             attention_dropout_bytes(x)),
                        MemoryKernel::kSoftmax);
  // Causal: an exp for each unmasked score, s(s+1)/2 per row block (Megatron's
  // scaled_upper_triang_masked_softmax skips the masked ones).
  softmax.transcendentals = d(batch) * d(x.s) * d(x.s_full + 1) / 2.0;
  out.push_back(softmax);
  out.push_back(gemm("attn_values", x.s, x.vd, x.s_full, batch, x.e));
}

// ---------------------------------------------------------------------------------------------
// Context parallelism (Plan::cp_comm): the attention core of a layer whose sequence is split
// over cp ranks, each holding 2 of the sequence's 2*cp chunks (s tokens, chunks of c = s/2), as
// each framework's code runs it. A ring runs cp attention steps: step 0 on the rank's own keys,
// causal; each later step on another rank's keys, unmasked, either all s queries against the
// first of the two key chunks (steps i <= rank) or the second query chunk against both
// (i > rank), c*s scores either way. Ranks differ in the mix; the task lists take the average
// rank's, half of each (ring_step_full_queries).

// This rank's K and V (both chunks): b*s*(kv + vw)/t elements, cp_kv_bytes / cp.
double local_kv_bytes(const Shape& x) { return cp_kv_bytes(x) / d(x.cp); }
// Q's and the attention output's elements over `tokens` of this rank's rows.
double q_elems(const Shape& x, std::int64_t tokens) { return d(x.b) * d(tokens) * d(x.q) / d(x.t); }
double o_elems(const Shape& x, std::int64_t tokens) {
  return d(x.b) * d(tokens) * d(x.ow) / d(x.t);
}
// Per-row statistics (the log-sum-exp): one value per query row and head.
double row_elems(const Shape& x, std::int64_t tokens) {
  return d(x.b) * d(tokens) * d(x.heads_per_rank);
}

bool ring_step_full_queries(std::int64_t step, std::int64_t cp) { return step <= cp / 2; }

// One attention kernel call of `q` queries against `k` keys on `heads` heads of this rank, masked
// or not, whose Q, K, V and O are `width_split` times narrower than the TP rank's (Ulysses holds
// heads/cp heads). Model FLOPs are twice the executed ones, so a layer's steps sum to
// add_attention_core's (the full s x s_full rectangle, half of it executed).
Task attention_step(std::string_view name, const Shape& x, std::int64_t q, std::int64_t k,
                    bool causal, std::int64_t heads, std::int64_t width_split) {
  const std::int64_t batch = x.b * heads;
  Task t = gemm(name, q, k, x.hd, batch, x.e);
  t.kind = TaskKind::kAttention;
  t.causal = causal;
  t.executed_flops = 2.0 * d(batch) * d(q) * d(k) * d(x.hd + x.vd) / (causal ? 2.0 : 1.0);
  t.flops = 2.0 * t.executed_flops;
  t.bytes = x.e * d(x.b) * (d(q) * d(x.q + x.ow) + d(k) * d(x.ring_kv + x.ring_vw)) /
            d(x.t * width_split);
  return t;
}
// Its backward: FlashAttention's backward recomputes the scores, 5 matmuls against the forward's
// 2, i.e. 2.5x the forward's executed FLOPs (Dao 2023, sec. 3.1).
Task attention_step_backward(Task t, std::string_view name) {
  t.name = name;
  t.backward = true;
  t.flops = 2.0 * t.flops;
  t.executed_flops = 2.5 * t.executed_flops;
  t.bytes = 2.0 * t.bytes;
  return t;
}
Task ring_step(const Shape& x, std::int64_t step, bool backward) {
  const std::int64_t s = x.s, c = x.s / 2;
  const bool full = ring_step_full_queries(step, x.cp);
  Task t = step == 0 ? attention_step("attention", x, s, s, true, x.heads_per_rank, 1)
                     : attention_step("attention_step", x, full ? s : c, full ? c : s, false,
                                      x.heads_per_rank, 1);
  return backward ? attention_step_backward(t, step == 0 ? "attention_bwd" : "attention_step_bwd")
                  : t;
}

Task cp_collective(std::string_view name, Collective c, const Shape& x, double bytes,
                   std::int32_t beside) {
  Task t = comm(name, c, CommGroup::kCp, x.cp, bytes);
  t.beside = beside;
  return t;
}
Task cp_kernel(std::string_view name, double bytes, std::int64_t launches) {
  Task t = memory(name, bytes, MemoryKernel::kElementwise);
  t.launches = launches;
  return t;
}

// Transformer Engine's ring, cp_comm_type "p2p" (AttnFuncWithCP.forward in TE v1.4,
// transformer_engine/pytorch/attention.py at 0fbc76af3; AttnFuncWithCPAndKVP2P from v1.10 on).
// Step i waits for the K and V received in step i-1, sends them on to the next rank and
// receives the next (flash_attn_p2p_communicate: isend/irecv, beside the step), makes the half
// it needs contiguous (K and V's first chunk, or Q's second) and runs its kernel. The log-sum-
// exps are merged after each step (flash_attn_fwd_softmax_lse_correction, fp64 in 1.4) and the
// partial outputs after the last (flash_attn_fwd_out_correction per step, into a zeroed
// output): one fused kernel each (jit_fuser). K and V are first copied into the send buffer
// (p2p_comm_buffers[0] = torch.cat((k, v))).
void add_cp_p2p_forward(std::vector<Task>& out, const Shape& x) {
  const double kv = local_kv_bytes(x), e = x.e;
  const std::int64_t s = x.s, c = x.s / 2;
  out.push_back(cp_kernel("cp_kv_cat", 2.0 * kv, 1));
  double merge_bytes = o_elems(x, s) * e;  // torch.empty_like(q).zero_()
  for (std::int64_t i = 0; i < x.cp; ++i) {
    const bool full = ring_step_full_queries(i, x.cp);
    if (i + 1 < x.cp)
      out.push_back(cp_collective("cp_send_recv_kv", Collective::kSendRecv, x, kv, i == 0 ? 1 : 2));
    // kv_inputs[:, :, 0].contiguous() reads and writes half of K and V; q[:, 1].contiguous()
    // half of Q.
    if (i > 0) out.push_back(cp_kernel("cp_step_copy", full ? kv : 2.0 * q_elems(x, c) * e, 1));
    out.push_back(ring_step(x, i, false));
    const std::int64_t rows = i == 0 || full ? s : c;
    // out.add_(out_per_step * exp(lse_step - lse)): reads both outputs and writes one, reads two
    // fp32 statistics per row and head; the lse correction reads fp64 and fp32, writes fp64.
    merge_bytes += 3.0 * o_elems(x, rows) * e + row_elems(x, rows) * 8.0;
    if (i > 0) merge_bytes += row_elems(x, rows) * (8.0 + 4.0 + 8.0);
  }
  out.push_back(cp_kernel("cp_merge_outputs", merge_bytes, 1 + x.cp + (x.cp - 1)));
}

// Its backward (AttnFuncWithCP.backward): K and V copied into the first of two send buffers,
// then cp steps in reverse, each waiting for the previous exchange, sending K, V and the K/V
// gradients accumulated so far to the next rank (K and V alone at step 0, the gradients alone at
// the last), running its kernel beside the exchange on the step's halves (made contiguous:
// K and V's first chunk, or Q's, O's and dO's second), adding its dQ, then waiting for the
// exchange to add its dK and dV into the received gradients.
void add_cp_p2p_backward(std::vector<Task>& out, const Shape& x) {
  const double kv = local_kv_bytes(x), e = x.e;
  const std::int64_t s = x.s, c = x.s / 2, cp = x.cp;
  out.push_back(cp_kernel("cp_kv_copy", 2.0 * kv, 1));
  for (std::int64_t i = 0; i < cp; ++i) {
    // The last step runs the rank's own chunks, causal (TE's "reversed order of fwd").
    const std::int64_t step = i == cp - 1 ? 0 : i + 1;
    const bool full = step == 0 || ring_step_full_queries(step, cp);
    const double bytes = i == 0 || i == cp - 1 ? kv : 2.0 * kv;
    out.push_back(
        cp_collective("cp_send_recv_kv_dkv", Collective::kSendRecv, x, bytes, step == 0 ? 2 : 3));
    if (step > 0)
      out.push_back(cp_kernel("cp_step_copy",
                              full ? kv : 2.0 * (q_elems(x, c) + 2.0 * o_elems(x, c)) * e,
                              full ? 1 : 3));
    out.push_back(ring_step(x, step, true));
    // dq.add_(dq_) over the step's queries; dkv.add_(dkv_) over its keys: read two, write one.
    out.push_back(cp_kernel("cp_dq_update", 3.0 * q_elems(x, full ? s : c) * e, 1));
    out.push_back(cp_kernel("cp_dkv_update", 3.0 * (full && step > 0 ? kv / 2.0 : kv), 1));
  }
}

// PyTorch's ring attention at the torchtitan 2024-12 benchmark's torch (1963fc8, 2024-12-23):
// torch/distributed/tensor/experimental/_attention.py as the PyTorch 2.6 line has it (read in
// the version with _RotateMethod.PRE_ALL_GATHER and the flash and efficient SDPA handlers; the
// same loops through 2025's). _templated_ring_attention: for each step, wait for the keys of
// step i-1 (rotater.next_buffer), torch.cat K and V into the send buffer (i < cp-1) and
// exchange it (the all-gather rotater gathers once, at step 0, and only slices after), run one
// SDPA on the step's chunks, and merge its output into the fp32 output and log-sum-exp
// (_SDPAMerger, convert_to_f32: out - sigmoid(lse_b - lse) * (out - out_b),
// lse - logsigmoid(lse - lse_b); the second query chunk's steps through _partial_update, a
// torch.cat of the untouched half and the new one). Compiled (torchtitan's per-block
// torch.compile traces the ring: _maybe_wait's "When tracing the code"), the merge is one fused
// kernel and the unused send buffers of the all-gather rotater are dropped; eager, each ATen op
// is a kernel.
struct TorchMerge {
  double bytes;  // per element of the step's output
  std::int64_t launches;
};
TorchMerge torch_merge(const Shape& x) {
  // Eager: out_b.to(fp32) (e + 4), out - out_b (12), sigmoid(...) * diff (8), out - that (12);
  // the statistics' sub, sigmoid, sub, logsigmoid, sub on rows.
  return x.eager_merge ? TorchMerge{36.0 + x.e, 9} : TorchMerge{8.0 + x.e, 1};
}
// K and V for the ring's next steps: torch's all-gather rotater gathers every chunk once (at
// step 0), its all-to-all rotater passes the local chunk on at every step.
void push_torch_kv_exchange(std::vector<Task>& out, const Shape& x, bool all_gather,
                            std::string_view gather_name, std::int32_t waits) {
  if (all_gather)
    out.push_back(cp_collective(gather_name, Collective::kAllGather, x, cp_kv_bytes(x), waits));
  else
    out.push_back(
        cp_collective("cp_rotate_kv", Collective::kSendRecv, x, local_kv_bytes(x), waits));
}
void add_torch_ring_forward(std::vector<Task>& out, const Shape& x, bool all_gather) {
  const double kv = local_kv_bytes(x), e = x.e;
  const std::int64_t s = x.s, c = x.s / 2, cp = x.cp;
  const TorchMerge merge = torch_merge(x);
  for (std::int64_t i = 0; i < cp; ++i) {
    const bool full = ring_step_full_queries(i, cp);
    if (i + 1 < cp && (i == 0 || !all_gather || x.eager_merge))
      out.push_back(cp_kernel("cp_kv_cat", 2.0 * kv, 1));
    // The all-gather is waited for at step 1, after step 0's kernel and merge; each rotation
    // at the step after it.
    if (i + 1 < cp && (i == 0 || !all_gather))
      push_torch_kv_exchange(out, x, all_gather, "cp_all_gather_kv", 2);
    out.push_back(ring_step(x, i, false));
    const std::int64_t rows = i == 0 || full ? s : c;
    if (i == 0) {
      out.push_back(cp_kernel("cp_merge", o_elems(x, s) * (e + 4.0), 1));  // out_b.to(fp32)
    } else {
      double bytes = o_elems(x, rows) * merge.bytes + row_elems(x, rows) * 16.0;
      std::int64_t launches = merge.launches;
      if (!full) {  // _partial_update's torch.cat copies the untouched half (out, lse)
        bytes += o_elems(x, c) * 8.0 + row_elems(x, c) * 8.0;
        launches += 2;
      }
      out.push_back(cp_kernel("cp_merge", bytes, launches));
    }
  }
  out.push_back(cp_kernel("cp_merge_result", o_elems(x, s) * (4.0 + e), 1));  // out.to(dtype)
}

// _templated_ring_attention_backward: fp32 zeros for dQ, dK, dV; K and V gathered again (or
// rotated each step, as the forward); each step's SDPA backward; dK and dV, once the previous
// step's arrive (a second rotater, always all-to-all: ft_c.permute_tensor of the fp32 gradients,
// issued every step and waited for after the next step's kernel), added to (_partial_update on
// the first key chunk's steps), torch.cat into the send buffer and passed on; dQ added; after the
// loop dQ cast back, the last dK/dV rotation waited for and cast back.
void add_torch_ring_backward(std::vector<Task>& out, const Shape& x, bool all_gather) {
  const double kv = local_kv_bytes(x), e = x.e, kv_elems = kv / e;
  const std::int64_t s = x.s, c = x.s / 2, cp = x.cp;
  out.push_back(cp_kernel("cp_grad_zeros", 4.0 * (q_elems(x, s) + kv_elems), 3));
  for (std::int64_t i = 0; i < cp; ++i) {
    const bool full = ring_step_full_queries(i, cp);
    const bool send_kv = i + 1 < cp && (i == 0 || !all_gather);
    if (i + 1 < cp && (send_kv || x.eager_merge))
      out.push_back(cp_kernel("cp_kv_cat", 2.0 * kv, 1));
    // Waited for at the next step's start: after this step's kernel, its dK/dV update and cat,
    // and its dQ update.
    if (send_kv) push_torch_kv_exchange(out, x, all_gather, "cp_all_gather_kv_bwd", 4);
    out.push_back(ring_step(x, i, true));
    // grad_key += grad_key_ (fp32 += e, read both, write fp32), on the first key chunk through
    // _partial_update (and its torch.cat of the other half), K and V each.
    const bool first_chunk = i > 0 && full;
    out.push_back(cp_kernel("cp_dkv_update",
                            (first_chunk ? kv_elems / 2.0 : kv_elems) * (8.0 + e) +
                                (first_chunk ? kv_elems / 2.0 * 8.0 : 0.0),
                            first_chunk ? 4 : 2));
    out.push_back(cp_kernel("cp_dkv_cat", 8.0 * kv_elems, 1));
    // Waited for after the next step's kernel (its dK/dV update), or after the loop's dQ cast.
    const bool kv_cat_next = i + 2 < cp && (!all_gather || x.eager_merge);
    out.push_back(cp_collective("cp_rotate_dkv", Collective::kSendRecv, x, 4.0 * kv_elems,
                                i + 1 < cp ? (kv_cat_next ? 3 : 2) : 2));
    const std::int64_t rows = i == 0 || full ? s : c;
    out.push_back(cp_kernel("cp_dq_update",
                            q_elems(x, rows) * (8.0 + e) + (rows == c ? q_elems(x, c) * 8.0 : 0.0),
                            rows == c ? 2 : 1));
  }
  out.push_back(cp_kernel("cp_dq_cast", q_elems(x, s) * (4.0 + e), 1));
  out.push_back(cp_kernel("cp_dkv_cast", kv_elems * (4.0 + e), 1));
}

// Transformer Engine's Ulysses, cp_comm_type "a2a" (AttnFuncWithCPAndQKVOA2A at TE v1.13,
// flash_attn_a2a_communicate): each of Q, K, V made contiguous with the heads split in cp
// ([b, s, cp, h/cp, d] moved to the front), all-to-all'd (async, one after the other) and, once
// arrived, moved back and its sequence chunks reordered (movedim().contiguous(), index_select),
// the reorder of one beside the next one's all-to-all; one causal attention over the whole
// sequence on heads/cp heads; the output reordered, all-to-all'd back and moved into place. The
// backward does the same for O and dO before its kernel and for dQ, dK, dV after it.
void add_a2a_exchange(std::vector<Task>& out, const Shape& x, const std::vector<double>& bytes,
                      std::string_view name, bool before_attention) {
  // Before the attention: one pass (movedim) before each all-to-all and two after (movedim,
  // index_select); after it: two before and one after. Each pass reads and writes the tensor.
  const std::int64_t pre = before_attention ? 1 : 2, post = before_attention ? 2 : 1;
  auto pass = [&](std::int64_t passes, double b) {
    out.push_back(cp_kernel("cp_a2a_reorder", 2.0 * d(passes) * b, passes));
  };
  // Tensor i's all-to-all runs beside tensor i+1's preparation and tensor i-1's reorder; its own
  // reorder waits for it.
  const std::size_t n = bytes.size();
  for (std::size_t i = 0; i < n; ++i) {
    pass(pre, bytes[i]);
    const std::int32_t beside = n == 1 ? 0 : i == 0 ? 1 : i + 1 < n ? 2 : 1;
    out.push_back(cp_collective(name, Collective::kAllToAll, x, bytes[i], beside));
    if (i > 0) pass(post, bytes[i - 1]);
  }
  pass(post, bytes[n - 1]);
}
void add_cp_a2a_forward(std::vector<Task>& out, const Shape& x) {
  const double e = x.e, s = d(x.s), b = d(x.b), t = d(x.t);
  add_a2a_exchange(
      out, x, {b * s * d(x.q) / t * e, b * s * d(x.ring_kv) / t * e, b * s * d(x.ring_vw) / t * e},
      "cp_all_to_all_qkv", true);
  out.push_back(
      attention_step("attention", x, x.s_full, x.s_full, true, x.heads_per_rank / x.cp, x.cp));
  add_a2a_exchange(out, x, {b * s * d(x.ow) / t * e}, "cp_all_to_all_out", false);
}
void add_cp_a2a_backward(std::vector<Task>& out, const Shape& x) {
  const double e = x.e, s = d(x.s), b = d(x.b), t = d(x.t);
  const double o = b * s * d(x.ow) / t * e;
  add_a2a_exchange(out, x, {o, o}, "cp_all_to_all_out_grad", true);
  out.push_back(attention_step_backward(
      attention_step("attention", x, x.s_full, x.s_full, true, x.heads_per_rank / x.cp, x.cp),
      "attention_bwd"));
  add_a2a_exchange(
      out, x, {b * s * d(x.q) / t * e, b * s * d(x.ring_kv) / t * e, b * s * d(x.ring_vw) / t * e},
      "cp_all_to_all_qkv_grad", false);
}

// The attention core of a layer under context parallelism, forward and backward. A ring's
// steps of one shape are held as runs (compact_repeats): the simulator's program for a cp 16
// ring was about three times the all-gather's without them (bench/results/cp-compact-2026-12-02).
void add_cp_attention_forward(std::vector<Task>& out, const Shape& x) {
  const std::size_t from = out.size();
  switch (x.cp_comm) {
    case CpComm::kAllGather:
      out.push_back(cp_gather_kv("cp_all_gather_kv", x));
      add_attention_core(out, x);
      return;
    case CpComm::kP2p: add_cp_p2p_forward(out, x); break;
    case CpComm::kA2a: add_cp_a2a_forward(out, x); return;
    case CpComm::kTorchAllGather: add_torch_ring_forward(out, x, true); break;
    case CpComm::kTorchAllToAll: add_torch_ring_forward(out, x, false); break;
  }
  compact_repeats(out, from);
}
void add_cp_attention_backward(std::vector<Task>& out, const Shape& x, const Task& attention) {
  const std::size_t from = out.size();
  switch (x.cp_comm) {
    case CpComm::kAllGather: {
      // The forward kept only this rank's K and V, so the backward gathers them again, and the
      // gradients of the whole sequence's K and V are reduce-scattered back to their owners
      // (Transformer Engine's AttnFuncWithCPAndKVAllGather.backward).
      out.push_back(cp_gather_kv("cp_all_gather_kv_bwd", x));
      out.push_back(attention_step_backward(attention, "attention_bwd"));
      out.push_back(comm("cp_reduce_scatter_dkv", Collective::kReduceScatter, CommGroup::kCp, x.cp,
                         cp_kv_bytes(x)));
      return;
    }
    case CpComm::kP2p: add_cp_p2p_backward(out, x); break;
    case CpComm::kA2a: add_cp_a2a_backward(out, x); return;
    case CpComm::kTorchAllGather: add_torch_ring_backward(out, x, true); break;
    case CpComm::kTorchAllToAll: add_torch_ring_backward(out, x, false); break;
  }
  compact_repeats(out, from);
}

// One tanh (GELU's approximation) or exp (SiLU's sigmoid) per activation element, over `times`
// token copies of an MLP of inner width f_rank on this rank.
Task activation_task(std::string_view name, const Shape& x, std::int64_t f_rank, double times) {
  const double elements = x.eager_swiglu ? kEagerSwigluForwardElements : x.swiglu ? 3.0 : 2.0;
  Task t = memory(name, d(x.tokens) * d(f_rank) * x.e * elements * times,
                  MemoryKernel::kActivation);
  t.transcendentals = d(x.tokens) * d(f_rank) * times;
  if (x.eager_swiglu) {
    t.launches = kEagerSwigluForwardLaunches;
    t.eager = true;
  }
  return t;
}
std::string_view activation_name(const Shape& x) { return x.swiglu ? "swiglu" : "gelu"; }

// A tensor-parallel MLP of inner width f on all this rank's tokens: the dense layer's, or an
// MoE layer's shared experts (Megatron-Core's SharedExpertMLP is a dense MLP split over TP).
void add_dense_mlp(std::vector<Task>& out, const Shape& x, std::int64_t f, bool shared) {
  const std::int64_t f_rank = f / x.t;
  out.push_back(gemm(shared ? "shared_fc1" : "fc1", x.tokens, (x.swiglu ? 2 : 1) * f_rank, x.h, 1,
                     x.e));
  out.push_back(activation_task(shared ? "shared_act" : activation_name(x), x, f_rank, 1.0));
  out.push_back(gemm(shared ? "shared_fc2" : "fc2", x.tokens, x.h, f_rank, 1, x.e));
}

// The token permutations around an MoE layer's all-to-alls, memory-bound copies of the routed
// tokens (Megatron-Core's MoEAlltoAllTokenDispatcher, megatron/core/transformer/moe/
// token_dispatcher.py and moe_utils.permute/unpermute): before the dispatch, each of the
// `tokens` this rank routes is copied once per chosen expert into expert order (read T*h, write
// T*k*h); after the dispatch, with several experts on the rank, the received rows are regrouped
// by local expert (sort_chunks_by_idxs: read and write each row), and undone before the
// combine; after the combine, the k copies are weighted by their router probabilities and summed
// back into token order (read T*k*h, write T*h). The backward runs the same copies in reverse.
Task moe_permute_task(std::string_view name, const Shape& x, std::int64_t k) {
  return memory(name, d(x.moe_tokens) * d(x.h) * x.e * (1.0 + d(k)), MemoryKernel::kElementwise);
}
// An expert-parallel all-to-all of this rank's routed tokens; with node-limited routing, or with
// a node-deduplicating dispatcher (Plan::moe_dispatcher deepep: the experts as one router group),
// each token is sent once per node (RoutedSpread, collectives.h).
Task ep_all_to_all(std::string_view name, const Shape& x, const ModelSpec& m, const Plan& p) {
  Task t = comm(name, Collective::kAllToAll, CommGroup::kEp, p.ep,
                d(x.moe_tokens) * d(m.experts_per_token) * d(x.h) * x.e);
  if (m.router_groups > 0)
    t.spread = RoutedSpread{m.num_experts, m.router_groups, m.router_group_topk,
                            m.experts_per_token};
  else if (p.moe_dispatcher == MoeDispatcher::kDeepEp)
    t.spread = RoutedSpread{m.num_experts, 1, 1, m.experts_per_token};
  return t;
}
// Token-expert rows this rank's experts process per micro-batch, with balanced routing: carved,
// the k copies of the T tokens every TP rank routes; folded, the expert_tp ranks of an expert
// gather what the all-to-all brought each of them, expert_tp x k copies of norm_tokens.
double expert_rows(const Shape& x, std::int64_t k) {
  return d(x.own_rows ? x.etp : 1) * d(x.moe_tokens) * d(k);
}
// Folded with expert_tp > 1: the gather of the rows the all-to-all brought over the expert's
// tensor-parallel ranks before its GEMMs, and the scatter of their partial outputs after
// (MoEAlltoAllTokenDispatcher.dispatch_postprocess's gather_from_sequence_parallel_region and
// combine_preprocess's reduce_scatter_to_sequence_parallel_region over the expert tp group).
// The message is the gathered buffer, as for TP's.
Task expert_tp_comm(std::string_view name, Collective c, const Shape& x, std::int64_t k) {
  return comm(name, c, CommGroup::kExpertTp, x.etp, expert_rows(x, k) * d(x.h) * x.e);
}
Task moe_regroup_task(std::string_view name, const Shape& x, std::int64_t k) {
  return memory(name, 2.0 * expert_rows(x, k) * d(x.h) * x.e, MemoryKernel::kElementwise);
}

// Megatron-Core's TEGroupedMLP around a clamped gated activation and expert biases (GPT-OSS:
// ModelSpec::glu_clamp, bias), read at Megatron-Core 92c8482e and 44151194
// (validation/corpus/NOTES.md, fifty-seventh pass). Per routed row of `rows`, inner width f and
// model width h, e-byte elements:
//  - the clamp runs as eager PyTorch before the compiled activation
//    (megatron/core/fusions/fused_bias_geglu.py, weighted_bias_quick_geglu_impl): forward, the
//    gate half's clamp and the linear half's each read and write f, the cat reads and writes 2f:
//    8 f e bytes in 3 launches; backward, clamp_backward's comparison masks (1 byte) and where
//    (le, where on the gate half; ge, le, logical_and, where on the linear half) and the chunk's
//    cat: 11 f e + 8 f bytes in 7 launches;
//  - the fc2 bias is added with the routing weight by a loop over the local experts
//    (megatron/core/transformer/moe/experts.py, _apply_bias: cat([t + b * p ...])): forward b * p
//    writes h, the add reads 2h and writes h, the cat reads and writes h: 6 h e bytes in 2 E + 1
//    launches; backward, per expert grad * p and its sum over rows (the bias gradient), grad * b
//    and its sum over h (the weight's gradient), then the split's cat: 8 h e bytes in 4 E + 1.
// The fc1 bias is in the grouped GEMM's epilogue (cuBLASLt BIAS / BGRADB): nothing added.
Task glu_clamp_task(std::string_view name, const Shape& x, double rows, std::int64_t f_rank,
                    bool backward) {
  const double per_row =
      backward ? 11.0 * x.e * d(f_rank) + 8.0 * d(f_rank) : 8.0 * x.e * d(f_rank);
  Task t = memory(name, rows * per_row, MemoryKernel::kElementwise);
  t.launches = backward ? 7 : 3;
  t.backward = backward;
  return t;
}
Task expert_bias_task(std::string_view name, const Shape& x, double rows,
                      std::int64_t local_experts, bool backward) {
  Task t = memory(name, rows * (backward ? 8.0 : 6.0) * x.e * d(x.h), MemoryKernel::kElementwise);
  t.launches = (backward ? 4 : 2) * local_experts + 1;
  t.backward = backward;
  return t;
}

// A dense MLP of the folded MoE layer (its shared experts) on the attention's TP ranks, which
// enters and leaves it through sequence parallelism's gather and scatter of this rank's tokens
// (Megatron-Core's SharedExpertMLP is an MLP over tp; MoELayer.forward computes it first, on the
// layer's sequence-parallel input).
void add_folded_shared_mlp(std::vector<Task>& out, const Shape& x) {
  if (x.sp) out.push_back(tp_gather("tp_all_gather_shared", x));
  add_dense_mlp(out, x, x.shared_f, /*shared=*/true);
  out.push_back(tp_exit("tp_all_reduce_shared", "tp_reduce_scatter_shared", x));
}

void add_mlp_forward(std::vector<Task>& out, const Shape& x, const ModelSpec& m,
                     const Plan& p) {
  if (!x.moe) {
    add_dense_mlp(out, x, x.f, /*shared=*/false);
    return;
  }
  // Mixture of experts: route, send each token to its top-k experts (all-to-all over ep),
  // run the local experts, and send the results back (Lepikhin et al. 2020, GShard).
  if (x.own_rows && x.shared_f > 0) add_folded_shared_mlp(out, x);
  const std::int64_t f_rank = x.f / x.etp;
  const std::int64_t k = m.experts_per_token;
  const std::int64_t local_experts = m.num_experts / p.ep;
  const double routed = expert_rows(x, k);  // token-expert pairs this rank's experts process
  out.push_back(gemm("router", x.moe_tokens, m.num_experts, x.h, 1, x.e));
  out.push_back(moe_permute_task("moe_permute", x, k));
  out.push_back(ep_all_to_all("ep_dispatch", x, m, p));
  if (x.own_rows)
    out.push_back(expert_tp_comm("expert_tp_all_gather", Collective::kAllGather, x, k));
  if (local_experts > 1) out.push_back(moe_regroup_task("moe_regroup", x, k));
  // Balanced routing: each local expert sees routed / local_experts rows (after the
  // all-to-all, this rank holds the routed tokens of the whole ep group for its experts).
  const std::int64_t per_expert =
      std::max<std::int64_t>(1, std::llround(routed / d(local_experts)));
  const std::int64_t fc1_n = (x.swiglu ? 2 : 1) * f_rank;
  Task fc1 = gemm("expert_fc1", per_expert, fc1_n, x.h, local_experts, x.e);
  fc1.flops = fc1.executed_flops = 2.0 * routed * d(fc1_n) * d(x.h);
  out.push_back(fc1);
  if (m.glu_clamp > 0) out.push_back(glu_clamp_task("moe_act_clamp", x, routed, f_rank, false));
  // The activation on each routed row (times: copies of this rank's T tokens).
  out.push_back(activation_task(activation_name(x), x, f_rank,
                                x.own_rows ? routed / d(x.tokens) : d(k)));
  Task fc2 = gemm("expert_fc2", per_expert, x.h, f_rank, local_experts, x.e);
  fc2.flops = fc2.executed_flops = 2.0 * routed * d(x.h) * d(f_rank);
  out.push_back(fc2);
  if (m.bias) out.push_back(expert_bias_task("moe_expert_bias", x, routed, local_experts, false));
  if (local_experts > 1) out.push_back(moe_regroup_task("moe_unregroup", x, k));
  if (x.own_rows)
    out.push_back(expert_tp_comm("expert_tp_reduce_scatter", Collective::kReduceScatter, x, k));
  out.push_back(ep_all_to_all("ep_combine", x, m, p));
  out.push_back(moe_permute_task("moe_unpermute", x, k));
  // Shared experts (DeepSeekMoE, Qwen-MoE, Llama 4): after the routed experts, as Megatron-Core
  // runs them unless moe_shared_expert_overlap is set.
  if (!x.own_rows && x.shared_f > 0) add_dense_mlp(out, x, x.shared_f, /*shared=*/true);
}

// The attention block's input projections. Standard attention: one column-parallel QKV GEMM
// on the (gathered) input. Multi-head latent attention (DeepSeek-V2 sec. 2.1; Megatron-Core's
// MLASelfAttention): the down-projections to the latents and their norms are duplicated on
// every TP rank and run on this rank's tokens (T/t with sequence parallel, so their FLOPs are
// not repeated); the latents (and, without a query latent, the input) are then gathered and
// up-projected by column-parallel GEMMs.
void add_attention_input(std::vector<Task>& out, const Shape& x) {
  if (!x.mla) {
    if (x.sp) out.push_back(tp_gather("tp_all_gather_attn", x));
    out.push_back(gemm("qkv", x.tokens, (x.q + x.kv + x.vw) / x.t, x.h, 1, x.e));
    return;
  }
  const std::int64_t local = x.norm_tokens;
  if (x.ql > 0) {
    out.push_back(gemm("q_down", local, x.ql, x.h, 1, x.e));
    out.push_back(memory("q_norm", 2.0 * d(local) * d(x.ql) * x.e, MemoryKernel::kNorm));
  }
  out.push_back(gemm("kv_down", local, x.kvl + x.rope, x.h, 1, x.e));
  out.push_back(memory("kv_norm", 2.0 * d(local) * d(x.kvl) * x.e, MemoryKernel::kNorm));
  if (x.sp)
    out.push_back(comm("tp_all_gather_attn", Collective::kAllGather, CommGroup::kTp, x.t,
                       d(x.tokens) * d(x.entry) * x.e));
  out.push_back(x.ql > 0 ? gemm("q_up", x.tokens, x.q / x.t, x.ql, 1, x.e)
                         : gemm("q_proj", x.tokens, x.q / x.t, x.h, 1, x.e));
  // Keys' non-rotary part and values, per head; the rotary key is shared by all heads.
  out.push_back(gemm("kv_up", x.tokens, x.heads_per_rank * (x.hd - x.rope + x.vd), x.kvl, 1,
                     x.e));
}

// Norm: read x, write y. Bias + dropout + residual add: read two, write one, a 1-byte mask.
double norm_bytes(const Shape& x) { return 2.0 * d(x.norm_tokens) * d(x.h) * x.e; }
double residual_bytes(const Shape& x) {
  return d(x.norm_tokens) * d(x.h) * (3.0 * x.e + (x.dropout ? 1.0 : 0.0));
}

// Plan::elementwise eager's RMSNorm, torchtitan/models/norms.py at ba2469780 (RMSNorm.forward:
// self._norm(x.float()).type_as(x) * self.weight; _norm: x * torch.rsqrt(x.pow(2).mean(-1,
// keepdim=True) + eps)). Bytes per element of the e-byte input, fp32 intermediates of 4 bytes,
// per-row tensors (the mean, +eps, rsqrt) taken as nothing beside the row's h elements:
//  forward, 8 launches: float (e + 4), pow (8), mean (4), +eps, rsqrt, x * r (8), type_as (4 + e),
//  * weight (2e): 4e + 28, where the fused kernel reads e and writes e.
//  backward, 16 launches, each op's formula in PyTorch's tools/autograd/derivatives.yaml:
//  * weight: grad * weight (2e), grad * self (3e) summed to the weight's shape (e), 3 launches;
//  type_as's: the gradient cast to fp32 (e + 4); x * r: grad * r (read 4, write 4: r is per row),
//  grad * x (12) summed over the row (4), 3 launches; rsqrt: -0.5 * grad * result.pow(3), per
//  row, 3 launches; +eps: none; mean: the row's gradient expanded and divided by h (writes 4);
//  pow: pow_backward, grad * (2 * self.pow(1)): the pow(1) copy (ATen's pow with exponent 1
//  copies its input) (8), the scale (8), the product
//  (12), 3 launches; the sum of the two gradients of the fp32 x (12); float's: the cast back
//  (4 + e): 8e + 76 bytes.
constexpr double kFp32Bytes = 4.0;
constexpr std::int64_t kEagerRmsNormForwardLaunches = 8;
constexpr std::int64_t kEagerRmsNormBackwardLaunches = 16;
double eager_rmsnorm_forward_bytes_per_element(double e) { return 4.0 * e + 7.0 * kFp32Bytes; }
double eager_rmsnorm_backward_bytes_per_element(double e) { return 8.0 * e + 19.0 * kFp32Bytes; }

// A norm over this rank's tokens (norm1, norm2, the final norm), fused or eager.
Task norm_task(std::string_view name, const Shape& x, bool backward) {
  if (!x.eager_norm) {
    Task t = memory(name, (backward ? 2.0 : 1.0) * norm_bytes(x), MemoryKernel::kNorm);
    t.backward = backward;
    return t;
  }
  const double elements = d(x.norm_tokens) * d(x.h);
  Task t = memory(name,
                  elements * (backward ? eager_rmsnorm_backward_bytes_per_element(x.e)
                                       : eager_rmsnorm_forward_bytes_per_element(x.e)),
                  MemoryKernel::kNorm);
  t.launches = backward ? kEagerRmsNormBackwardLaunches : kEagerRmsNormForwardLaunches;
  t.backward = backward;
  t.eager = true;
  return t;
}

// Plan::elementwise eager's rotary embedding, torchtitan/models/llama/model.py at ba2469780
// (apply_rotary_emb: view_as_complex(xq.float()...), * freqs_cis, view_as_real, type_as), on
// this rank's query and key heads: per element, the cast to fp32 (e + 4), the complex product
// (read 4, write 4; freqs_cis, one row per position, taken as nothing) and the cast back
// (4 + e), three launches per tensor. Its backward (derivatives.yaml: mul's grad * other.conj();
// the casts' casts back) moves the same bytes in as many launches. A fused rotary kernel rides
// on the QKV GEMM's neighbours, which is why fused plans have no such task.
Task rope_task(std::string_view name, const Shape& x) {
  const double elements = d(x.tokens) * d(x.q + x.kv) / d(x.t);
  Task t = memory(name, elements * (2.0 * x.e + 4.0 * kFp32Bytes), MemoryKernel::kElementwise);
  t.launches = 2 * 3;  // q and k
  return t;
}

// Backward of a GEMM: data gradient dX = dY W^T and weight gradient dW = X^T dY, each with
// the forward's FLOPs (Narayanan et al. 2021: backward = 2x forward).
void add_gemm_backward(std::vector<Task>& out, const Task& fwd, std::string_view dgrad,
                       std::string_view wgrad, double e) {
  Task dg = gemm(dgrad, fwd.m, fwd.k, fwd.n, fwd.batch, e);
  Task wg = gemm(wgrad, fwd.k, fwd.n, fwd.m, fwd.batch, e);
  dg.flops = wg.flops = fwd.flops;
  dg.executed_flops = wg.executed_flops = fwd.executed_flops;
  out.push_back(dg);
  out.push_back(wg);
}

const Task& find_task(const std::vector<Task>& tasks, std::string_view name) {
  for (const Task& t : tasks)
    if (t.name == name) return t;
  TRAINPLAN_CHECK(false) << "no task named " << name;
  return tasks.front();
}

}  // namespace

// FP8 training (Plan::fp8): the linear layers' GEMMs (QKV, output projection, the MLP's and
// the experts', forward and backward) take one-byte operands at the FP8 rate; the attention
// core, the router and the LM head keep the compute precision (Transformer Engine's and
// torchao float8's defaults). Each FP8 operand is made by a memory-bound cast that writes it
// once and once transposed for the other GEMM that uses it (Transformer Engine's
// cast_transpose) and reads the 16-bit tensor once per pass: two passes under current scaling
// (the tensor's amax, then the scaled cast: TE's Float8CurrentScaling, torchao's dynamic
// tensorwise scaling), one under delayed scaling (the scale comes from the amax history of
// earlier steps and the cast records this tensor's amax as it goes: TE's DelayedScaling,
// transformer_engine/common/recipe/__init__.py); one also under block scaling, whose scales come
// from the block being cast, written beside it (one byte per 32 elements for MXFP8, OCP
// Microscaling Formats spec v1.0; fewer for DeepSeek-V3's 128-element tiles). Forward GEMMs cast their input and weight; a
// backward pass casts the incoming gradient once, before its data-gradient GEMM (the
// weight-gradient GEMM reuses it). Under Plan::fp8_weight_cache the weight's cast is made on
// the step's first micro-batch only and reused by the others (TE's Linear is_first_microbatch,
// "caching of the FP8 versions of the weights", which Megatron-Core's TE layers pass:
// megatron/core/extensions/transformer_engine.py), so each micro-batch carries 1/M of it.
namespace {

bool is_linear_gemm(std::string_view name) {
  for (std::string_view prefix : {"qkv", "q_down", "q_up", "q_proj", "kv_down", "kv_up",
                                  "out_proj", "fc1", "fc2", "expert_fc1", "expert_fc2",
                                  "shared_fc1", "shared_fc2"})
    if (name.substr(0, prefix.size()) == prefix) return true;
  return false;
}

// Bytes per element of a linear GEMM's low-precision operand: FP8's one byte; NVFP4's half
// byte and an E4M3 scale per 16-element block (TE's NVFP4BlockScaling; nvfp4.rst: "each block
// of 16" consecutive values, the scale "FP8 E4M3"), which the GEMM reads beside the data.
constexpr double kNvfp4BlockElements = 16.0;
double low_precision_operand_bytes(const Plan& p) {
  return p.fp8_scaling == Fp8Scaling::kNvfp4 ? 0.5 + 1.0 / kNvfp4BlockElements : 1.0;
}

// Bytes moved per element cast to FP8: `passes` reads of the e-byte tensor, two 1-byte writes
// (the tensor and its transpose), and under block scaling two 1-byte scales per 32 elements.
// NVFP4: two reads (the per-tensor amax its FP32 scale needs, then the cast) and two writes of
// the operand bytes (the row-wise copy and the column-wise one for the other GEMM, both made
// from the 16-bit input: TE's recipe docstring, "both versions are computed from the high
// precision input").
double fp8_cast_bytes_per_element(const Plan& p, double e) {
  constexpr double kMxBlockElements = 32.0;  // OCP Microscaling Formats v1.0, MXFP8
  switch (p.fp8_scaling) {
    case Fp8Scaling::kCurrent: return 2.0 * e + 2.0;
    case Fp8Scaling::kDelayed: return e + 2.0;
    case Fp8Scaling::kBlock: return e + 2.0 + 2.0 / kMxBlockElements;
    case Fp8Scaling::kNvfp4: return 2.0 * e + 2.0 * low_precision_operand_bytes(p);
  }
  return 2.0 * e + 2.0;
}

void apply_fp8(std::vector<Task>& tasks, double e, const Plan& p) {
  std::vector<Task> out;
  out.reserve(tasks.size() * 2);
  const double cast_bytes_per_element = fp8_cast_bytes_per_element(p, e);
  const double weight_share =
      p.fp8_weight_cache ? 1.0 / d(std::max<std::int64_t>(1, p.num_micro_batches())) : 1.0;
  // Bytes per weight element that a forward's casts move. Plan::fp8_all_gather: the weight
  // arrives cast; what remains is the cast of the local fp32 shard before each gather (read 4,
  // write 1, over the shard ranks: fsdp_pre_all_gather, torchao/float8/fsdp_utils.py at
  // eab345c) and one transposed copy of the gathered FP8 weight (read 1, write 1) for the
  // data-gradient GEMM, which scaled_mm needs column-major (preprocess_addmm's
  // b_data.t().contiguous().t(), torchao/float8/float8_ops.py at eab345c).
  // Under ZeRO-1/2 (the distributed optimizer's fp8_param_gather) the weight stays FP8 between
  // steps: the shard's cast runs once a step, after the optimizer, and the transposed copy is
  // made once a step with fp8_weight_cache (Transformer Engine's is_first_microbatch), every
  // micro-batch without.
  const double shard_cast_bytes =
      (kFp32Bytes + 1.0) / d(std::max<std::int64_t>(1, p.zero_shard_ranks()));
  const double weight_bytes =
      !p.fp8_all_gather   ? cast_bytes_per_element * weight_share
      : p.zero_stage == 3 ? shard_cast_bytes + 2.0
                          : shard_cast_bytes / d(std::max<std::int64_t>(1, p.num_micro_batches())) +
                                2.0 * weight_share;
  auto ends_with = [](std::string_view s, std::string_view suffix) {
    return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
  };
  for (Task t : tasks) {
    if (t.kind == TaskKind::kGemm && is_linear_gemm(t.name)) {
      const double b = d(t.batch), mk = b * d(t.m) * d(t.k), kn = b * d(t.k) * d(t.n);
      if (ends_with(t.name, "_dgrad")) {
        out.push_back(memory("fp8_cast_grad", cast_bytes_per_element * mk,
                             MemoryKernel::kElementwise));
      } else if (!ends_with(t.name, "_wgrad")) {
        out.push_back(memory("fp8_cast", cast_bytes_per_element * mk + weight_bytes * kn,
                             MemoryKernel::kElementwise));
      }
      t.fp8 = true;
      t.fp4 = p.fp8_scaling == Fp8Scaling::kNvfp4;
      // Low-precision operands, 16-bit output.
      t.bytes = low_precision_operand_bytes(p) * (mk + kn) + e * b * d(t.m) * d(t.n);
    }
    out.push_back(t);
  }
  tasks = std::move(out);
}

// Plan::fp8_attention: every fused attention kernel of the list runs on FP8 operands, after one
// current-scaling cast (an amax read, a cast read, a one-byte write per element) of this rank's
// Q, K and V before the forward's first kernel, or of O and dO before the backward's.
void apply_fp8_attention(std::vector<Task>& tasks, const Shape& x) {
  std::vector<Task> out;
  out.reserve(tasks.size() + 1);
  bool cast = false;
  for (Task t : tasks) {
    if (t.kind == TaskKind::kAttention) {
      if (!cast) {
        const double elements = t.backward ? 2.0 * d(x.tokens) * d(x.ow) / d(x.t)
                                           : d(x.tokens) * d(x.q + x.kv + x.vw) / d(x.t);
        out.push_back(memory(t.backward ? "fp8_attention_cast_grad" : "fp8_attention_cast",
                             (2.0 * x.e + 1.0) * elements, MemoryKernel::kElementwise));
        cast = true;
      }
      t.fp8 = true;
    }
    out.push_back(t);
  }
  tasks = std::move(out);
}

void apply_low_precision(std::vector<Task>& tasks, const Shape& x, const Plan& p) {
  if (p.fp8) apply_fp8(tasks, x.e, p);
  if (p.fp8_attention) apply_fp8_attention(tasks, x);
}

}  // namespace

namespace {
// A layer's forward before FP8's casts are added and trivial collectives dropped.
std::vector<Task> layer_forward_tasks_unscaled(const ModelSpec& m, const Plan& p) {
  const Shape x = shape_of(m, p);
  std::vector<Task> out;
  out.push_back(norm_task("norm1", x, /*backward=*/false));
  add_attention_input(out, x);
  if (x.eager_rope) out.push_back(rope_task("rope", x));
  if (x.cp > 1 && x.fused) {
    add_cp_attention_forward(out, x);
  } else {
    out.push_back(cp_gather_kv("cp_all_gather_kv", x));
    add_attention_core(out, x);
  }
  out.push_back(gemm("out_proj", x.tokens, x.h, x.ow / x.t, 1, x.e));
  out.push_back(tp_exit("tp_all_reduce_attn", "tp_reduce_scatter_attn", x));
  out.push_back(memory("residual1", residual_bytes(x), MemoryKernel::kElementwise));
  out.push_back(norm_task("norm2", x, /*backward=*/false));
  // A folded MoE layer takes the sequence-parallel input as it is: each rank routes its own
  // tokens and gets their outputs back from the all-to-all.
  if (x.sp && !x.own_rows) out.push_back(tp_gather("tp_all_gather_mlp", x));
  add_mlp_forward(out, x, m, p);
  if (!x.own_rows) out.push_back(tp_exit("tp_all_reduce_mlp", "tp_reduce_scatter_mlp", x));
  out.push_back(memory("residual2", residual_bytes(x), MemoryKernel::kElementwise));
  return out;
}

bool is_attention_core_gemm(const Task& t) {
  return t.name == "attn_scores" || t.name == "attn_values";
}

// One task per matmul as torchtitan's modules issue them: the fused QKV projection is three
// (wq, wk, wv: torchtitan/models/llama3/model.py, Attention), a gated MLP's first GEMM two (w1,
// w3: FeedForward), every other GEMM of the layer one.
void add_matmul_parts(std::vector<Task>& out, const Task& t, const Shape& x) {
  auto part = [&](std::string_view name, std::int64_t n) {
    Task g = gemm(name, t.m, n, t.k, t.batch, x.e);
    if (t.flops != d(t.batch) * 2.0 * d(t.m) * d(t.n) * d(t.k))  // MoE: routed, not m*batch
      g.flops = g.executed_flops = t.flops * d(n) / d(t.n);
    out.push_back(g);
  };
  const bool gated_fc1 = x.swiglu && (t.name == "fc1" || t.name == "shared_fc1" ||
                                      t.name == "expert_fc1");
  if (t.name == "qkv") {
    part("qkv_q", x.q / x.t);
    part("qkv_k", x.kv / x.t);
    part("qkv_v", x.vw / x.t);
  } else if (gated_fc1) {
    part(t.name == "fc1" ? "fc1_gate" : t.name == "shared_fc1" ? "shared_fc1_gate"
                                                               : "expert_fc1_gate", t.n / 2);
    part(t.name == "fc1" ? "fc1_up" : t.name == "shared_fc1" ? "shared_fc1_up"
                                                             : "expert_fc1_up", t.n / 2);
  } else {
    out.push_back(t);
  }
}
}  // namespace

std::vector<Task> layer_forward_tasks(const ModelSpec& m, const Plan& p) {
  std::vector<Task> out = layer_forward_tasks_unscaled(m, p);
  apply_low_precision(out, shape_of(m, p), p);
  return without_trivial_comm(out);
}

std::vector<Task> cost_internal::op_checkpoint_matmuls(const ModelSpec& m, const Plan& p) {
  const Shape x = shape_of(m, p);
  std::vector<Task> out;
  for (const Task& t : layer_forward_tasks_unscaled(m, p))
    if (t.kind == TaskKind::kGemm && !is_attention_core_gemm(t)) add_matmul_parts(out, t, x);
  return out;
}

namespace {
// Plan::grad_accumulation_pass (sources at GradAccumulationPass): after each micro-batch's
// backward, every parameter tensor of block b has its fresh `precision` gradient added into the
// fp32 buffer. cast-add (DeepSpeed's BF16_Optimizer.update_hp_grads): a cast to fp32 (reads e
// bytes, writes 4) and an add (reads 4 + 4, writes 4), two kernels per tensor. add (nanotron's
// FP32GradientAccumulator): one in-place add that casts as it reads (reads e + 4, writes 4).
// autograd (PyTorch's AccumulateGrad into .grad): one in-place add in the compute precision
// (reads e + e, writes e) for micro-batches 2..M only, the first's gradient being stolen; each
// micro-batch is charged (M - 1) / M of it, so a step's total is exact.
void add_grad_accumulation_pass(std::vector<Task>& out, const ParamBlock& b, const Plan& p) {
  if (p.grad_accumulation_pass == GradAccumulationPass::kNone) return;
  const double params = d(b.dense_params + b.expert_params);
  if (params <= 0) return;
  const double e = bytes_per_element(p.precision);
  double bytes = 0.0;
  switch (p.grad_accumulation_pass) {
    case GradAccumulationPass::kCastAdd: bytes = e + 4.0 + 4.0 + 4.0 + 4.0; break;
    case GradAccumulationPass::kAdd: bytes = e + 4.0 + 4.0; break;
    case GradAccumulationPass::kAutograd: {
      const double m = d(std::max<std::int64_t>(1, p.num_micro_batches()));
      bytes = 3.0 * e * (m - 1.0) / m;
      break;
    }
    case GradAccumulationPass::kNone:
    case GradAccumulationPass::kShardAdd: return;  // at the reduce-scatter (data_parallel.cc)
  }
  if (bytes <= 0) return;
  const bool cast = p.grad_accumulation_pass == GradAccumulationPass::kCastAdd;
  Task t = memory("grad_accumulation_pass", params * bytes, MemoryKernel::kElementwise);
  t.launches = (cast ? 2 : 1) * std::max<std::int64_t>(1, b.tensors + b.expert_tensors);
  out.push_back(t);
}
}  // namespace

std::vector<Task> layer_backward_tasks(const ModelSpec& m, const Plan& p) {
  const Shape x = shape_of(m, p);
  const std::vector<Task> fwd = layer_forward_tasks(m, p);
  std::vector<Task> out;
  const double th = d(x.tokens) * d(x.h) * x.e;
  // Backward of Megatron's f (identity forward) is an all-reduce; with sequence parallel the
  // backward of the all-gather is a reduce-scatter and of the reduce-scatter an all-gather.
  auto f_backward = [&](std::string_view ar, std::string_view rs) {
    out.push_back(x.sp ? comm(rs, Collective::kReduceScatter, CommGroup::kTp, x.t, th)
                       : comm(ar, Collective::kAllReduce, CommGroup::kTp, x.t, th));
  };
  auto g_backward = [&](std::string_view name) {
    if (x.sp) out.push_back(comm(name, Collective::kAllGather, CommGroup::kTp, x.t, th));
  };
  // The weight gradient of a column-parallel linear needs its full input; with sequence
  // parallel only the local shard was stored, so it is gathered again (Megatron-LM does this).
  auto regather = [&](std::string_view name) {
    if (x.sp) out.push_back(comm(name, Collective::kAllGather, CommGroup::kTp, x.t, th));
  };

  out.push_back(memory("residual2_bwd", residual_bytes(x), MemoryKernel::kElementwise));
  if (!x.own_rows) g_backward("tp_all_gather_mlp_grad");
  // The shared experts' backward, a dense MLP's on the gathered tokens (folded: entered by the
  // backward of its reduce-scatter, left by that of its gather).
  auto shared_backward = [&] {
    if (x.own_rows) g_backward("tp_all_gather_shared_grad");
    add_gemm_backward(out, find_task(fwd, "shared_fc2"), "shared_fc2_dgrad", "shared_fc2_wgrad",
                      x.e);
    out.push_back(activation_backward(find_task(fwd, "shared_act")));
    add_gemm_backward(out, find_task(fwd, "shared_fc1"), "shared_fc1_dgrad", "shared_fc1_wgrad",
                      x.e);
    if (x.own_rows) {
      regather("tp_all_gather_shared_input");
      f_backward("tp_all_reduce_shared_grad", "tp_reduce_scatter_shared_grad");
    }
  };
  if (x.moe) {
    if (!x.own_rows && x.shared_f > 0) shared_backward();
    const std::int64_t k = m.experts_per_token;
    const bool regroup = m.num_experts / p.ep > 1;
    out.push_back(moe_permute_task("moe_unpermute_bwd", x, k));
    out.push_back(ep_all_to_all("ep_combine_bwd", x, m, p));
    if (x.own_rows)
      out.push_back(expert_tp_comm("expert_tp_all_gather_grad", Collective::kAllGather, x, k));
    if (regroup) out.push_back(moe_regroup_task("moe_unregroup_bwd", x, k));
    const std::int64_t local_experts = m.num_experts / p.ep;
    const double routed = expert_rows(x, k);
    if (m.bias)
      out.push_back(expert_bias_task("moe_expert_bias_bwd", x, routed, local_experts, true));
    add_gemm_backward(out, find_task(fwd, "expert_fc2"), "expert_fc2_dgrad", "expert_fc2_wgrad",
                      x.e);
    out.push_back(activation_backward(find_task(fwd, activation_name(x))));
    if (m.glu_clamp > 0)
      out.push_back(glu_clamp_task("moe_act_clamp_bwd", x, routed, x.f / x.etp, true));
    add_gemm_backward(out, find_task(fwd, "expert_fc1"), "expert_fc1_dgrad", "expert_fc1_wgrad",
                      x.e);
    if (regroup) out.push_back(moe_regroup_task("moe_regroup_bwd", x, k));
    if (x.own_rows)
      out.push_back(
          expert_tp_comm("expert_tp_reduce_scatter_grad", Collective::kReduceScatter, x, k));
    out.push_back(ep_all_to_all("ep_dispatch_bwd", x, m, p));
    out.push_back(moe_permute_task("moe_permute_bwd", x, k));
    add_gemm_backward(out, find_task(fwd, "router"), "router_dgrad", "router_wgrad", x.e);
    if (x.own_rows && x.shared_f > 0) shared_backward();
    if (!x.own_rows) regather("tp_all_gather_mlp_input");
  } else {
    add_gemm_backward(out, find_task(fwd, "fc2"), "fc2_dgrad", "fc2_wgrad", x.e);
    out.push_back(activation_backward(find_task(fwd, activation_name(x))));
    const Task& fc1 = find_task(fwd, "fc1");
    Task dg = gemm("fc1_dgrad", fc1.m, fc1.k, fc1.n, 1, x.e);
    dg.flops = dg.executed_flops = fc1.flops;
    out.push_back(dg);
    regather("tp_all_gather_mlp_input");
    Task wg = gemm("fc1_wgrad", fc1.k, fc1.n, fc1.m, 1, x.e);
    wg.flops = wg.executed_flops = fc1.flops;
    out.push_back(wg);
  }
  if (!x.own_rows) f_backward("tp_all_reduce_mlp_grad", "tp_reduce_scatter_mlp_grad");
  out.push_back(norm_task("norm2_bwd", x, /*backward=*/true));
  out.push_back(memory("residual1_bwd", residual_bytes(x), MemoryKernel::kElementwise));
  g_backward("tp_all_gather_attn_grad");
  add_gemm_backward(out, find_task(fwd, "out_proj"), "out_proj_dgrad", "out_proj_wgrad", x.e);
  if (x.fused) {
    if (x.cp > 1)
      add_cp_attention_backward(out, x, find_task(fwd, "attention"));
    else
      out.push_back(attention_step_backward(find_task(fwd, "attention"), "attention_bwd"));
  } else {
    add_gemm_backward(out, find_task(fwd, "attn_values"), "attn_values_dgrad_p",
                      "attn_values_dgrad_v", x.e);
    // The causal kernel's backward (scaled_upper_triang_masked_softmax_warp_backward, same file)
    // loads the gradient and the saved probabilities below the diagonal and stores the whole
    // row; dropout's backward reads the gradient and the mask and writes the gradient.
    out.push_back(memory("softmax_bwd",
                         unfused_scores(x) * (2.0 * x.e * unfused_causal_read_fraction(x) + x.e +
                                              attention_dropout_bytes(x)),
                         MemoryKernel::kSoftmax));
    add_gemm_backward(out, find_task(fwd, "attn_scores"), "attn_scores_dgrad_q",
                      "attn_scores_dgrad_k", x.e);
  }
  // The column-parallel input projections: data gradients, then (with sequence parallel) the
  // input gathered again for their weight gradients, then the input gradient's TP reduction.
  struct Backward { std::string_view fwd, dgrad, wgrad; };
  std::vector<Backward> column_parallel;
  if (!x.mla) {
    column_parallel.push_back({"qkv", "qkv_dgrad", "qkv_wgrad"});
  } else {
    column_parallel.push_back({"kv_up", "kv_up_dgrad", "kv_up_wgrad"});
    column_parallel.push_back(x.ql > 0 ? Backward{"q_up", "q_up_dgrad", "q_up_wgrad"}
                                       : Backward{"q_proj", "q_proj_dgrad", "q_proj_wgrad"});
  }
  auto grad_gemm = [&](const Task& f, std::string_view name, bool weight) {
    Task g = weight ? gemm(name, f.k, f.n, f.m, f.batch, x.e)
                    : gemm(name, f.m, f.k, f.n, f.batch, x.e);
    g.flops = g.executed_flops = f.flops;
    out.push_back(g);
  };
  if (x.eager_rope) out.push_back(rope_task("rope_bwd", x));
  for (const Backward& b : column_parallel) grad_gemm(find_task(fwd, b.fwd), b.dgrad, false);
  const double entry = d(x.tokens) * d(x.entry) * x.e;  // T*h without MLA
  if (x.sp)
    out.push_back(comm("tp_all_gather_attn_input", Collective::kAllGather, CommGroup::kTp, x.t,
                       entry));
  for (const Backward& b : column_parallel) grad_gemm(find_task(fwd, b.fwd), b.wgrad, true);
  out.push_back(x.sp ? comm("tp_reduce_scatter_attn_grad", Collective::kReduceScatter,
                            CommGroup::kTp, x.t, entry)
                     : comm("tp_all_reduce_attn_grad", Collective::kAllReduce, CommGroup::kTp,
                            x.t, entry));
  if (x.mla) {
    // The duplicated down-projections and latent norms, on this rank's tokens.
    const std::int64_t local = x.norm_tokens;
    out.push_back(memory("kv_norm_bwd", 4.0 * d(local) * d(x.kvl) * x.e, MemoryKernel::kNorm));
    out.back().backward = true;
    add_gemm_backward(out, find_task(fwd, "kv_down"), "kv_down_dgrad", "kv_down_wgrad", x.e);
    if (x.ql > 0) {
      out.push_back(memory("q_norm_bwd", 4.0 * d(local) * d(x.ql) * x.e, MemoryKernel::kNorm));
      out.back().backward = true;
      add_gemm_backward(out, find_task(fwd, "q_down"), "q_down_dgrad", "q_down_wgrad", x.e);
    }
  }
  out.push_back(norm_task("norm1_bwd", x, /*backward=*/true));
  apply_low_precision(out, x, p);
  add_grad_accumulation_pass(out, layer_block(m, p), p);
  return without_trivial_comm(out);
}

// ---------------------------------------------------------------------------------------------
// Runs of identical steps (Task::repeat)

namespace {
// Whether tasks[p, p + k) can be one step of a run: each collective a context-parallel one whose
// beside window (its next `beside` compute tasks; none for a blocking one) closes inside it. Then
// the step after it starts only once it has ended: its collectives have ended by its last compute
// task or are waited for by the next step's first, and its first collective is issued after the
// compute before it.
bool self_contained_unit(const std::vector<Task>& t, std::size_t p, std::size_t k) {
  for (std::size_t i = p; i < p + k; ++i) {
    if (t[i].kind != TaskKind::kComm) continue;
    if (t[i].group != CommGroup::kCp || t[i].repeat != 1) return false;
    std::int32_t left = t[i].beside;
    for (std::size_t j = i + 1; j < p + k && left > 0; ++j)
      if (t[j].kind != TaskKind::kComm) --left;
    if (left > 0) return false;
  }
  for (std::size_t i = p; i < p + k; ++i)
    if (t[i].repeat != 1) return false;
  return true;
}
// Copies of tasks[p, p + k) that follow one another from p.
std::size_t copies_from(const std::vector<Task>& t, std::size_t p, std::size_t k) {
  std::size_t n = 1;
  while (p + (n + 1) * k <= t.size() &&
         std::equal(t.begin() + static_cast<std::ptrdiff_t>(p),
                    t.begin() + static_cast<std::ptrdiff_t>(p + k),
                    t.begin() + static_cast<std::ptrdiff_t>(p + n * k)))
    ++n;
  return n;
}
}  // namespace

void compact_repeats(std::vector<Task>& tasks, std::size_t from) {
  std::vector<Task> out(tasks.begin(), tasks.begin() + static_cast<std::ptrdiff_t>(from));
  // Compute tasks still to run beside each collective issued so far (its window is open).
  std::vector<std::int32_t> open;
  std::size_t p = from;
  while (p < tasks.size()) {
    std::size_t best_k = 0, best_n = 1;
    if (open.empty())
      for (std::size_t k = 1; k <= kMaxRepeatUnit && p + 2 * k <= tasks.size(); ++k) {
        if (!self_contained_unit(tasks, p, k)) continue;
        const std::size_t n = copies_from(tasks, p, k);
        if (n >= 2 && n * k > best_n * best_k) {
          best_k = k;
          best_n = n;
        }
      }
    if (best_k > 0) {
      for (std::size_t i = p; i < p + best_k; ++i) {
        Task t = tasks[i];
        t.repeat = static_cast<std::int32_t>(best_n);
        t.repeat_first = i == p;
        out.push_back(t);
      }
      p += best_n * best_k;
      continue;
    }
    const Task& t = tasks[p++];
    if (t.kind == TaskKind::kComm) {
      if (t.beside > 0) open.push_back(t.beside);
    } else {
      for (std::int32_t& left : open) --left;
      std::erase(open, 0);
    }
    out.push_back(t);
  }
  tasks = std::move(out);
}

std::vector<Task> expand_repeats(const std::vector<Task>& tasks) {
  std::vector<Task> out;
  out.reserve(tasks.size());
  for (std::size_t i = 0; i < tasks.size();) {
    std::size_t j = i + 1;
    if (tasks[i].repeat != 1)
      while (j < tasks.size() && tasks[j].repeat == tasks[i].repeat && !tasks[j].repeat_first) ++j;
    for (std::int32_t c = 0; c < tasks[i].repeat; ++c)
      for (std::size_t k = i; k < j; ++k) {
        Task t = tasks[k];
        t.repeat = 1;
        t.repeat_first = false;
        out.push_back(t);
      }
    i = j;
  }
  return out;
}

bool has_repeats(const std::vector<Task>& tasks) {
  return std::any_of(tasks.begin(), tasks.end(), [](const Task& t) { return t.repeat != 1; });
}

bool is_weight_gradient_task(const Task& t) {
  constexpr std::string_view kSuffix = "_wgrad";
  return t.kind == TaskKind::kGemm && t.name.size() >= kSuffix.size() &&
         t.name.substr(t.name.size() - kSuffix.size()) == kSuffix;
}

std::vector<Task> backward_input_tasks(const std::vector<Task>& backward) {
  std::vector<Task> out;
  for (const Task& t : backward)
    if (!is_weight_gradient_task(t)) out.push_back(t);
  return out;
}

std::vector<Task> backward_weight_tasks(const std::vector<Task>& backward) {
  std::vector<Task> out;
  for (const Task& t : backward)
    if (is_weight_gradient_task(t)) out.push_back(t);
  return out;
}

double layer_weight_gradient_operand_bytes(const ModelSpec& m, const Plan& p) {
  // A weight-gradient GEMM batch x (m x k) * (k x n): X^T is m x k, dY is k x n.
  // The weight-gradient GEMMs do not depend on how context parallelism moves keys and values,
  // only on cp's share of the sequence: the all-gather form lists them without a ring of cp
  // steps, which the memory model would otherwise build for every candidate it checks.
  Plan q = p;
  q.cp_comm = CpComm::kAllGather;
  double bytes = 0;
  const double e = bytes_per_element(p.precision);
  for (const Task& t : backward_weight_tasks(layer_backward_tasks(m, q)))
    bytes += d(t.batch) * (d(t.m) * d(t.k) + d(t.k) * d(t.n)) * e;
  return bytes;
}

namespace {
// torchtitan's op-level policy (Plan's Recompute::kSelectiveOp) saves the outputs of aten.mm,
// the SDPA kernels and reduce_scatter_tensor, except every second mm in forward order; the
// rest of the layer's forward runs again: its memory-bound kernels, the matmuls left out, the
// unfused attention core (bmm and softmax are not on the list) and the sequence-parallel
// all-gathers.
std::vector<Task> op_checkpoint_recompute_tasks(const ModelSpec& m, const Plan& p) {
  const Shape x = shape_of(m, p);
  std::vector<Task> out;
  std::int64_t matmuls = 0;
  for (const Task& t : layer_forward_tasks_unscaled(m, p)) {
    if (t.kind == TaskKind::kGemm && !is_attention_core_gemm(t)) {
      std::vector<Task> parts;
      add_matmul_parts(parts, t, x);
      for (Task& g : parts)
        if (++matmuls % 2 == 0) out.push_back(std::move(g));
    } else if ((t.kind == TaskKind::kMemory && !is_cp_attention_task(t)) ||
               is_attention_core_gemm(t) ||
               (t.kind == TaskKind::kComm && t.group == CommGroup::kTp &&
                t.collective == Collective::kAllGather)) {
      out.push_back(t);
    }
  }
  apply_low_precision(out, x, p);
  return without_trivial_comm(out);
}
}  // namespace

std::vector<Task> layer_recompute_tasks(const ModelSpec& m, const Plan& p) {
  switch (p.recompute) {
    case Recompute::kNone: return {};
    case Recompute::kFull: {
      // ZeRO-R's partitioned checkpoint: the input is gathered from the TP ranks first.
      std::vector<Task> out;
      if (p.partition_activations) {
        out.push_back(tp_gather("tp_all_gather_checkpoint", shape_of(m, p)));
      }
      for (Task& t : layer_forward_tasks(m, p)) out.push_back(std::move(t));
      return without_trivial_comm(out);
    }
    case Recompute::kSelective: {
      // Only the attention core (Korthikanti et al. 2022, sec. 5); a fused kernel already
      // recomputes it inside its backward, so there is nothing extra to do.
      if (p.attention == AttentionImpl::kFused) return {};
      std::vector<Task> out;
      add_attention_core(out, shape_of(m, p));
      return out;
    }
    case Recompute::kSelectiveOp: return op_checkpoint_recompute_tasks(m, p);
  }
  return {};
}

std::vector<Task> embedding_forward_tasks(const ModelSpec& m, const Plan& p) {
  const Shape x = shape_of(m, p);
  std::vector<Task> out;
  // Gather rows of this rank's vocabulary slice (and add positions): write T*h.
  out.push_back(memory("embedding", 2.0 * d(x.tokens) * d(x.h) * x.e, MemoryKernel::kEmbedding));
  // Vocabulary-parallel embedding: ranks without a token's row contribute zeros; the sum is an
  // all-reduce, or a reduce-scatter into the sequence-parallel region.
  out.push_back(tp_exit("tp_all_reduce_embedding", "tp_reduce_scatter_embedding", x));
  return without_trivial_comm(out);
}

std::vector<Task> embedding_backward_tasks(const ModelSpec& m, const Plan& p) {
  const Shape x = shape_of(m, p);
  std::vector<Task> out;
  if (x.sp)
    out.push_back(tp_gather("tp_all_gather_embedding_grad", x));
  out.push_back(memory("embedding_bwd", 2.0 * d(x.tokens) * d(x.h) * x.e,
                       MemoryKernel::kEmbedding));
  add_grad_accumulation_pass(out, embedding_block(m, p), p);
  return without_trivial_comm(out);
}

std::vector<Task> head_forward_tasks(const ModelSpec& m, const Plan& p) {
  const Shape x = shape_of(m, p);
  const std::int64_t v_rank = padded_vocab(m, p.tp) / p.tp;
  std::vector<Task> out;
  out.push_back(norm_task("final_norm", x, /*backward=*/false));
  if (x.sp) out.push_back(tp_gather("tp_all_gather_head", x));
  Task head = gemm("lm_head", x.tokens, v_rank, x.h, 1, x.e);
  head.flops = 2.0 * d(x.tokens) * d(m.vocab_size) / d(p.tp) * d(x.h);  // unpadded, as eq. 3
  out.push_back(head);
  // Cross-entropy over vocabulary-parallel logits in fp32: read logits, write softmax.
  // A softmax over the vocabulary slice (exp per logit) and the loss: the softmax kind.
  // Unfused (PyTorch eager): the cast writes an fp32 copy, log_softmax reads it twice (the
  // row's max and sum, then the output pass) and writes the log-probabilities.
  // Cast (nanotron's _ShardedCrossEntropy, Plan::cross_entropy): the cast writes an fp32 copy,
  // then max reads it, the subtraction reads it and writes the shifted logits, exp and the
  // division rewrite those in place and the sum reads them: 2 + 4 + 4 + 8 + 8 + 4 + 8 bytes per
  // logit in the kernels of those six ops.
  const bool unfused = p.cross_entropy == CrossEntropy::kUnfused;
  const bool cast = p.cross_entropy == CrossEntropy::kCast;
  const double forward_fp32 = cast ? 4.0 + 4.0 + 8.0 + 8.0 + 4.0 + 8.0 : unfused ? 4.0 * 4.0 : 2.0 * 4.0;
  Task ce = memory("cross_entropy", d(x.tokens) * d(v_rank) * (x.e + forward_fp32),
                   MemoryKernel::kSoftmax);
  ce.transcendentals = d(x.tokens) * d(v_rank);  // an exp per logit
  if (cast) ce.launches = 6;
  out.push_back(ce);
  // Megatron's vocab-parallel cross-entropy all-reduces the max, the sum of exponentials and
  // the target logit: three fp32 values per token.
  for (std::string_view name : {"tp_all_reduce_logit_max", "tp_all_reduce_sum_exp",
                                "tp_all_reduce_target_logit"})
    out.push_back(comm(name, Collective::kAllReduce, CommGroup::kTp, p.tp, d(x.tokens) * 4.0));
  return without_trivial_comm(out);
}

std::vector<Task> head_backward_tasks(const ModelSpec& m, const Plan& p) {
  const Shape x = shape_of(m, p);
  const std::int64_t v_rank = padded_vocab(m, p.tp) / p.tp;
  std::vector<Task> out;
  // Probabilities minus the one-hot target, scaled: elementwise. Unfused (PyTorch eager):
  // nll_loss's backward writes a zero-filled fp32 gradient, log_softmax's backward reads it and
  // the kept output and writes its own, and the cast back reads that and writes the logits'.
  // Cast (nanotron): the one-hot subtraction in place, the in-place scaling by the loss's
  // gradient (reads and writes the fp32 softmax) and the cast's backward to the logits' type.
  const bool cast = p.cross_entropy == CrossEntropy::kCast;
  const double per_logit = p.cross_entropy == CrossEntropy::kUnfused ? 4.0 + 3.0 * 4.0 + 4.0 + x.e
                           : cast                                    ? 8.0 + 4.0 + x.e
                                                                     : 4.0 + x.e;
  Task ce_bwd = memory("cross_entropy_bwd", d(x.tokens) * d(v_rank) * per_logit,
                       MemoryKernel::kElementwise);
  if (cast) ce_bwd.launches = 2;
  out.push_back(ce_bwd);
  Task head = gemm("lm_head", x.tokens, v_rank, x.h, 1, x.e);
  head.flops = 2.0 * d(x.tokens) * d(m.vocab_size) / d(p.tp) * d(x.h);
  add_gemm_backward(out, head, "lm_head_dgrad", "lm_head_wgrad", x.e);
  out.push_back(tp_exit("tp_all_reduce_head_grad", "tp_reduce_scatter_head_grad", x));
  out.push_back(norm_task("final_norm_bwd", x, /*backward=*/true));
  add_grad_accumulation_pass(out, head_block(m, p), p);
  return without_trivial_comm(out);
}

std::int64_t tokens_per_micro_batch(const ModelSpec& m, const Plan& p) {
  return shape_of(m, p).tokens;
}

std::vector<std::int32_t> tp_overlap_partners(const std::vector<Task>& tasks, const Plan& p) {
  if (!p.tp_comm_overlap) return {};
  std::vector<std::int32_t> partner(tasks.size(), -1);
  std::vector<bool> taken(tasks.size(), false);
  auto tp_comm = [&](std::size_t i, Collective c) {
    return tasks[i].kind == TaskKind::kComm && tasks[i].group == CommGroup::kTp &&
           tasks[i].collective == c;
  };
  auto claim = [&](std::size_t comm, std::size_t gemm) {
    if (tasks[gemm].kind != TaskKind::kGemm || taken[gemm]) return false;
    partner[comm] = static_cast<std::int32_t>(gemm);
    taken[gemm] = true;
    return true;
  };
  // PyTorch's async TP decomposes only what its micro_pipeline_tp pass matches
  // (torch/_inductor/fx_passes/micro_pipeline_tp.py; read at pytorch/pytorch 00122fb1, 2024-06,
  // and at the 2026 file, cyyever/pytorch 0011014f; the rules below hold in both):
  //  - fuse_matmul_reduce_scatter: the reduce-scatter's input must be one matmul's output
  //    (_find_producer_matmul: mm, _scaled_mm or reshape(mm)). The forward's row-parallel GEMMs
  //    (output projection, fc2) match. The backward's reduce-scatters of the input gradient do
  //    not: that gradient is the sum of the data gradients of every column-parallel layer that
  //    read the gathered input (torchtitan's wq, wk, wv; w1, w3), an add node. They stay whole.
  //  - fuse_all_gather_matmul: the gathered tensor must be the left operand of the matmuls
  //    (_find_consumer_matmuls). The forward's column-parallel GEMMs and the backward's data
  //    gradient after the gathered output gradient match; a weight gradient (X^T dY: the
  //    gathered tensor transposed) does not.
  const bool torch_async = p.tp_comm_overlap_impl == TpOverlapImpl::kTorchAsync;
  // Reduce-scatters first: each drains the GEMM just before it.
  for (std::size_t i = 1; i < tasks.size(); ++i)
    if (tp_comm(i, Collective::kReduceScatter) &&
        (!torch_async || (tasks[i - 1].kind == TaskKind::kGemm &&
                          gemm_direction(tasks[i - 1]) == GemmDirection::kForward)))
      claim(i, i - 1);
  // All-gathers feed the first GEMM after them; one whose GEMM a reduce-scatter has (the
  // backward's re-gather for a weight gradient) runs beside the GEMM before it instead. Under
  // torch-async a weight gradient is never fed: torch does not gather the input again (the
  // fused op returns the gathered A, which autograd keeps), so the task list's re-gather (the
  // Megatron-LM order) stays beside the data gradient before it, costing what TE's does.
  for (std::size_t i = 0; i < tasks.size(); ++i) {
    if (!tp_comm(i, Collective::kAllGather)) continue;
    bool fed = false;
    for (std::size_t j = i + 1; j < tasks.size(); ++j) {
      if (tasks[j].kind == TaskKind::kGemm) {
        if (!torch_async || gemm_direction(tasks[j]) != GemmDirection::kWeightGradient)
          fed = claim(i, j);
        break;
      }
      if (tasks[j].kind != TaskKind::kMemory) break;
    }
    if (!fed && i > 0) claim(i, i - 1);
  }
  return partner;
}

double tp_overlapped_pair_s(double comm_s, double gemm_s, std::int64_t tp, double sm_slowdown,
                            bool whole_gemm) {
  const double chunk = gemm_s / d(std::max<std::int64_t>(1, tp));
  const double rest = gemm_s - chunk;
  if (whole_gemm) return std::max(comm_s, rest * std::max(1.0, sm_slowdown)) + chunk;
  // The rest runs at 1/sm_slowdown of its rate while the collective is in flight: all of it
  // (comm_s >= rest * s), or comm_s of it, the remainder at full rate.
  const double s = std::max(1.0, sm_slowdown);
  const double beside = comm_s >= rest * s ? comm_s : rest + comm_s * (1.0 - 1.0 / s);
  return beside + chunk;
}

Task tp_decomposed_chunk(const Task& gemm, std::int64_t tp) {
  Task c = gemm;
  const std::int64_t parts = std::max<std::int64_t>(1, tp);
  c.m = (gemm.m + parts - 1) / parts;
  const double share = d(c.m) / d(std::max<std::int64_t>(1, gemm.m));
  c.flops = gemm.flops * share;
  c.executed_flops = gemm.executed_flops * share;
  const double whole = d(gemm.m) * d(gemm.k) + d(gemm.k) * d(gemm.n) + d(gemm.m) * d(gemm.n);
  const double part = d(c.m) * d(c.k) + d(c.k) * d(c.n) + d(c.m) * d(c.n);
  if (whole > 0) c.bytes = gemm.bytes * part / whole;
  return c;
}

Task tp_partials_reduce_task(const Task& gemm, const Plan& p) {
  const std::int64_t parts = std::max<std::int64_t>(1, p.tp);
  const double rows = d((gemm.m + parts - 1) / parts) * d(gemm.batch);
  // The output dtype: the activations' (a float8 _scaled_mm writes out_dtype bf16).
  const double e = bytes_per_element(p.precision);
  return memory("tp_partials_reduce", (d(parts) + 1.0) * rows * d(gemm.n) * e,
                MemoryKernel::kElementwise);
}

std::int64_t pipeline_message_bytes(const ModelSpec& m, const Plan& p) {
  const Shape x = shape_of(m, p);
  const double pieces = p.pipeline_scatter_gather ? d(x.t) : 1.0;
  return std::llround(d(x.norm_tokens) * d(x.h) * x.e / pieces);
}

std::vector<Task> pipeline_receive_tasks(const ModelSpec& m, const Plan& p) {
  if (!p.pipeline_scatter_gather) return {};
  return {tp_gather("pp_recv_all_gather", shape_of(m, p))};
}

bool Task::operator==(const Task&) const = default;

}  // namespace trainplan
