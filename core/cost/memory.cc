// The cost model's memory questions: bytes per parameter of the model states, stored
// activations per layer (Korthikanti et al. 2022), a layer's backward workspace, the
// micro-batches in flight per schedule, the memory of one rank of a stage (memory_on_stage) and
// the ZeRO-Offload traffic of the optimizer on the host. Sources in cost_model.h.
// Tested by tests/core/cost_model_test.cc (state bytes, activations, memory per stage,
// offload).
#include "core/cost/cost_model.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "core/cost/internal.h"
#include "core/schedule.h"

namespace trainplan {

using namespace cost_internal;

// ---------------------------------------------------------------------------------------------
// Memory

double grad_bytes_per_element(Precision precision, GradPrecision grads) {
  return grads == GradPrecision::kFp32 ? 4.0 : bytes_per_element(precision);
}
double grad_bytes_per_element(const Plan& p) {
  return grad_bytes_per_element(p.precision, p.grad_precision);
}

StateBytesPerParam state_bytes_per_param(const Plan& p) {
  return state_bytes_per_param(p.precision, p.optimizer, p.grad_precision);
}

StateBytesPerParam state_bytes_per_param(Precision precision, Optimizer optimizer,
                                         GradPrecision grads) {
  StateBytesPerParam s;
  const bool mixed = precision != Precision::kFp32;
  s.weights = bytes_per_element(precision);
  s.gradients = grad_bytes_per_element(precision, grads);
  // Mixed precision keeps an fp32 master copy (4 bytes) besides the optimizer's own states
  // (Micikevicius et al. 2018; Rajbhandari et al. 2019 sec. 3.1: K = 12 for Adam).
  const double master = mixed ? 4.0 : 0.0;
  switch (optimizer) {
    case Optimizer::kAdamW: s.optimizer = master + 8.0; break;       // m and v in fp32
    case Optimizer::kSgdMomentum: s.optimizer = master + 4.0; break; // momentum in fp32
    case Optimizer::kSgd: s.optimizer = master; break;
  }
  return s;
}

double checkpoint_input_bytes(const ModelSpec& m, const Plan& p) {
  const Shape x = shape_of(m, p);
  const double input = d(x.norm_tokens) * d(x.h) * x.e;
  return p.partition_activations ? input / d(p.tp) : input;
}

namespace {
// What torchtitan's op-level checkpoint (Recompute::kSelectiveOp) keeps of one layer: the
// layer's input (the checkpoint wrapper's argument), the output of every odd matmul in forward
// order, and a fused attention kernel's output with its fp32 log-sum-exp per row (SDPA is on
// the save list; an unfused core is not, and is rebuilt from the matmuls).
double op_checkpoint_activation_bytes(const ModelSpec& m, const Plan& p, const Shape& x) {
  double bytes = d(x.norm_tokens) * d(x.h) * x.e;
  std::int64_t index = 0;
  for (const Task& t : op_checkpoint_matmuls(m, p))
    if (++index % 2 == 1) bytes += d(t.batch) * d(t.m) * d(t.n) * x.e;
  if (x.fused)
    bytes += d(x.tokens) * d(x.ow) / d(x.t) * x.e + d(x.b) * d(x.heads_per_rank) * d(x.s) * 4.0;
  return bytes;
}

// Stored activation bytes of one layer under recompute `rc` (the plan's, or none for a layer
// that full recompute leaves out).
double activation_bytes(const ModelSpec& m, const Plan& p, Recompute rc) {
  const Shape x = shape_of(m, p);
  const double T = d(x.tokens), h = d(x.h), t = d(x.t), e = x.e;
  const double mask = x.dropout ? 1.0 : 0.0;
  // Korthikanti et al. 2022, sec. 4.1, per layer: 34*s*b*h + 5*a*s^2*b bytes for GPT with
  // fp16 and dropout. Terms, in elements of e bytes unless noted:
  //  kept whole without SP, split over t with SP: the two norm inputs, the QKV and MLP inputs
  //  (4*T*h), and the two 1-byte dropout masks (2*T*h bytes);
  //  split over t: Q and K (T*(q+kv)), V (T*kv), the out-projection input (T*q), the MLP
  //  activation input (T*f, doubled for SwiGLU's gate) and the fc2 input (T*f);
  //  attention core, split over t: softmax output (2 bytes), dropout mask (1), dropout output (2)
  //  per score; a fused kernel stores only the fp32 log-sum-exp per row.
  //  MLA: the latents, before and after their norms, and the rotary key, on this rank's tokens;
  //  Q, K, V and the attention output at their own widths (K = V = a*head widths);
  //  MoE: the routed MLP inputs and activations for each of the k experts a token visits, and
  //  the shared experts' like a dense MLP's.
  double replicated = 4.0 * T * h * e + 2.0 * T * h * mask;
  if (x.mla) replicated += T * d(2 * (x.ql + x.kvl) + x.rope) * e;
  // Plan::elementwise eager (core/cost/tasks.cc, torchtitan's RMSNorm): autograd keeps each
  // norm's fp32 input (saved by pow and by x * r) and its e-byte output before the weight (saved
  // by * weight), where a fused norm keeps its e-byte input: 4 more bytes per element, 2 norms.
  // The rotary product keeps nothing large: autograd saves mul's `self` only when `other`
  // needs a gradient (PyTorch tools/autograd/gen_variable_type.py, guard_for), and freqs_cis
  // does not.
  constexpr double kFp32Bytes = 4.0;
  if (x.eager_norm) replicated += 2.0 * T * h * kFp32Bytes;
  if (x.sp) replicated /= t;
  // Eager SwiGLU also keeps silu's output, which mul saves for the up projection's gradient.
  const double f_factor = (x.swiglu ? 2.0 : 1.0) + 1.0 + (x.eager_swiglu ? 1.0 : 0.0);
  double expert_tokens = x.moe ? d(m.experts_per_token) : 1.0;
  double split = T * d(x.q + x.kv + x.vw + x.ow) * e +
                 f_factor * T * (expert_tokens * d(x.f) + d(x.shared_f)) * e;
  split /= t;
  // MoE: the dispatched tokens (the experts' first GEMM's input, k copies of each token) and
  // the experts' outputs, which the probability-weighted combine keeps for the gradient of the
  // routing probabilities (Megatron-Core's unpermute with probs; MindSpeed's
  // UnpermuteWithoutActivation exists to drop them). Carved, each TP rank holds them whole;
  // folded, the experts' input is the expert_tp ranks' gathered rows and the combine's the
  // all-to-all's output for this rank's own tokens (moe_tokens).
  const double k_copies = d(m.experts_per_token);
  const double routed =
      !x.moe     ? 0.0
      : x.own_rows ? (d(x.etp) + 1.0) * k_copies * d(x.moe_tokens) * h * e
                 : 2.0 * k_copies * T * h * e;
  if (rc == Recompute::kSelectiveOp) return op_checkpoint_activation_bytes(m, p, x) + routed;
  double core = 0.0;
  const double scores = d(x.b) * d(x.heads_per_rank) * d(x.s) * d(x.s_full);
  const bool core_stored = !x.fused && rc == Recompute::kNone;
  if (core_stored) core = scores * (e + (x.dropout ? 1.0 + e : 0.0));
  if (x.fused) core = d(x.b) * d(x.heads_per_rank) * d(x.s) * 4.0;
  return replicated + split + routed + core;
}
}  // namespace

double layer_activation_bytes(const ModelSpec& m, const Plan& p) {
  return activation_bytes(m, p, p.recompute);
}

double layer_kept_activation_bytes(const ModelSpec& m, const Plan& p) {
  return activation_bytes(m, p, p.recompute == Recompute::kFull ? Recompute::kNone : p.recompute);
}

namespace {
// Context parallelism's buffers around the attention kernels, in e-byte elements, the larger of
// the forward's and the backward's (each Plan::cp_comm's code at tasks.cc's task lists). kv: this
// rank's K and V; q, o: its Q and attention output.
double cp_attention_buffer_elems(const Shape& x) {
  const double kv = cp_kv_bytes(x) / d(x.cp) / x.e;
  const double q = d(x.b) * d(x.s) * d(x.q) / d(x.t), o = d(x.b) * d(x.s) * d(x.ow) / d(x.t);
  const double fp32 = 4.0 / x.e;  // an fp32 element in e-byte elements
  switch (x.cp_comm) {
    case CpComm::kAllGather:
      // The whole sequence's K and V, gathered again, and their gradients before the reduce-
      // scatter, alive around the attention kernel's backward. The forward's gathered K and V
      // alone are half of this, so the backward bounds both.
      return 2.0 * d(x.cp) * kv;
    case CpComm::kP2p:
      // Backward: two send/receive buffers, each K, V and their gradients; forward: every
      // step's partial output, kept until the merge after the last step.
      return std::max(4.0 * kv, d(x.cp) * o);
    case CpComm::kA2a:
      // Q, K and V (or O and dO, then dQ, dK, dV) both before and after their all-to-all.
      return 2.0 * (q + kv) + 2.0 * o;
    case CpComm::kTorchAllGather:
    case CpComm::kTorchAllToAll:
      // The gathered K and V (or the current and next step's), fp32 dQ, and fp32 dK, dV
      // accumulated, in the send buffer and received.
      return (x.cp_comm == CpComm::kTorchAllGather ? d(x.cp) : 2.0) * kv + fp32 * (q + 3.0 * kv);
  }
  return 0.0;
}
}  // namespace

double layer_backward_workspace_bytes(const ModelSpec& m, const Plan& p) {
  const Shape x = shape_of(m, p);
  const double T = d(x.tokens), t = d(x.t), e = x.e;
  const double output_grad = T * d(x.h);
  const double expert_tokens = x.moe ? d(m.experts_per_token) : 1.0;
  const double mlp =
      (expert_tokens * d(x.f) + d(x.shared_f)) * T / t * (1.0 + (x.swiglu ? 2.0 : 1.0));
  const double scores = x.fused ? 0.0 : d(x.b) * d(x.heads_per_rank) * d(x.s) * d(x.s_full);
  const double cp_buffers = x.cp > 1 ? cp_attention_buffer_elems(x) : 0.0;
  const double attention = T * d(x.q) / t + scores + cp_buffers;
  return e * (output_grad + std::max(mlp, attention));
}

double in_flight_micro_batches(const Plan& p, std::int64_t stage) {
  const double M = d(p.num_micro_batches());
  switch (p.schedule) {
    case Schedule::kNaive: return 1.0;
    case Schedule::kGpipe: return M;
    case Schedule::k1F1B:
    case Schedule::kZbH1: return std::min(d(p.pp - stage), M);
    // core/schedule.cc's ZB-V greedy caps every stage at 2pp chunk activations, each half a
    // stage's layers, from F to W: pp micro-batches of the stage, 1F1B's first stage, on every
    // stage (Qi et al. 2024, arXiv:2405.15362, sec. 4: ZB-V at 1F1B's memory). Counted as
    // whole activations (W keeps less than B): a bound, as the paper's.
    case Schedule::kZbV: return std::min(d(p.pp), M);
    // DeepSeek-V3 Table 2: pp + 1 chunk activations at the peak (core/schedule.cc's order
    // reaches it on every stage, tests/simulator/schedule_test.cc), each chunk half the
    // stage's layers.
    case Schedule::kDualPipe: return std::min(d(p.pp + 1), M) / 2.0;
    case Schedule::kInterleaved: {
      // Megatron-LM: warm-up micro-batches = (pp - stage - 1) * 2 + (v - 1) * pp, plus the one
      // in steady state, counted in model chunks of 1/v of the stage's layers.
      const double v = d(p.virtual_stages);
      const double chunks = std::min(d((p.pp - stage - 1) * 2 + (p.virtual_stages - 1) * p.pp + 1),
                                     M * v);
      return chunks / v;
    }
  }
  return 1.0;
}

// The fp32 parameters the host's optimizer step updates, in bytes per parameter it updates, where
// the optimizer states do not count them already: the host updates a copy of its own in fp32
// (ZeRO-Offload, Ren et al. 2021, sec. 4.1; DeepSpeed's fp32 partition, a clone kept on the
// host or, with an NVMe tier, swapped out with the moments: deepspeed/runtime/zero/stage3.py,
// _create_fp32_partitions). Mixed precision counts it in its optimizer states (the master,
// state_bytes_per_param); in fp32 the device's weights are the only other copy, so offload adds
// 4 bytes, read and written by every step with the moments. Under optimizer+params that copy is
// the offloaded parameter shard itself (the weights' bytes), so it adds no memory, only the
// shard's read for the update.
static double offload_master_bytes_per_param(const Plan& p) {
  return p.offload != Offload::kNone && p.precision == Precision::kFp32 ? 4.0 : 0.0;
}

// Moves the offloaded states off the device (Plan::offload, Plan::offload_device); `master`:
// the bytes of offload_master_bytes_per_param over the updated parameters.
static void place_offloaded_states(const Plan& p, double optimizer_bytes, double master,
                                   MemoryBreakdown& mem) {
  if (p.offload == Offload::kNone) {
    mem.optimizer_bytes = optimizer_bytes;
    return;
  }
  const bool nvme = p.offload_device == OffloadDevice::kNvme;
  (nvme ? mem.nvme_bytes : mem.host_optimizer_bytes) +=
      optimizer_bytes + (p.offload == Offload::kOptimizer ? master : 0.0);
  if (p.offload != Offload::kOptimizerParams) return;
  // ZeRO-Infinity (sec. 5.1): parameters on NVMe or in host memory, gradients in host memory;
  // the device keeps only the gathered blocks (buffers_bytes).
  (nvme ? mem.nvme_bytes : mem.host_param_bytes) += mem.weights_bytes;
  mem.host_param_bytes += mem.gradients_bytes;
  mem.weights_bytes = 0;
  mem.gradients_bytes = 0;
}

// The elements of block b's ZeRO shard on one rank (the simulator's shard_params).
static double shard_elements(const Plan& p, const ParamBlock& b) {
  return d(b.dense_params) / d(p.zero_shard_ranks()) + d(b.expert_params) / d(expert_dp_cp(p));
}

// offload optimizer+params on nvme: the host buffer a block's parameter shard is read into
// from NVMe before it goes over PCIe, the largest block's on the stage. It is also what the
// prefetch costs: ZeRO-Infinity (Rajbhandari et al. 2021, arXiv:2104.07857, sec. 6.2, the
// "overlap-centric design") reads the parameters the next operators need while the current
// ones compute, so the buffer holds the next block's shard between two gathers instead of
// being free. One buffer is enough: a shard is copied out of it (to the device) before the
// next read starts into it.
static double nvme_param_read_buffer_bytes(const ModelSpec& m, const Plan& p,
                                           std::int64_t stage) {
  if (p.offload != Offload::kOptimizerParams || p.offload_device != OffloadDevice::kNvme)
    return 0;
  double largest = 0;
  for_each_block_shape_on_stage(m, p, stage, [&](const ParamBlock& b) {
    largest = std::max(largest, shard_elements(p, b));
  });
  return largest * bytes_per_element(p.precision);
}

// The host buffers of the offloaded optimizer step, beside the states themselves, sized by the
// block the rank updates most of (its shard under ZeRO >= 1, all of it under ZeRO 0):
//  - offload_device nvme: two read buffers of the block's optimizer states (the moments and the
//    fp32 parameters, as the file holds them): one block is updated in one while the next
//    block's states are read into the other (ZeRO-Infinity, arXiv:2104.07857, sec. 6.2: the
//    NVMe reads overlap the CPU's update; DeepSpeed's pipelined optimizer swapper keeps a read
//    and a write buffer the same way);
//  - offload optimizer: the block's reduced gradient shard, copied to the host for its update
//    (one block at a time; optimizer+params accumulates the whole shard on the host instead,
//    counted with host_param_bytes).
// executor/cpu/cpu_stage.cc allocates these (states_, grad_in_); tests/executor/offload_check.cc
// checks its host bytes against memory_on_stage's.
static double offload_step_buffer_bytes(const ModelSpec& m, const Plan& p, std::int64_t stage) {
  if (p.offload == Offload::kNone) return 0;
  double largest = 0;
  for_each_block_shape_on_stage(m, p, stage, [&](const ParamBlock& b) {
    largest = std::max(largest, p.zero_stage >= 1 ? shard_elements(p, b)
                                                  : d(b.dense_params + b.expert_params));
  });
  double bytes = 0;
  if (p.offload_device == OffloadDevice::kNvme)
    bytes += 2.0 * largest *
             (state_bytes_per_param(p).optimizer + offload_master_bytes_per_param(p));
  if (p.offload == Offload::kOptimizer) bytes += largest * grad_bytes_per_element(p);
  return bytes;
}

double weight_pending_micro_batches(const Plan& p, std::int64_t stage) {
  if (p.schedule != Schedule::kZbH1) return 0.0;
  // core/schedule.cc schedule_zb_h1: stage s runs W of micro-batch j after B of j + s, so at
  // its peak it holds pp - s micro-batches before B and s after B, before W.
  const std::int64_t M = p.num_micro_batches();
  return d(std::min(stage, std::max<std::int64_t>(0, M - std::min(p.pp - stage, M))));
}

MemoryBreakdown memory_on_stage(const ModelSpec& m, const Plan& p, std::int64_t stage) {
  MemoryBreakdown mem;
  const Shape x = shape_of(m, p);
  const StateBytesPerParam sb = state_bytes_per_param(p);
  const StageParameters sp = parameters_on_stage(m, p, stage);
  const double dense = sp.dense, expert = sp.expert;
  const double dp = d(p.zero_shard_ranks()), edp = d(expert_dp_cp(p));
  // ZeRO (Rajbhandari et al. 2019, fig. 1): stage 1 shards optimizer states over dp, stage 2
  // also gradients, stage 3 also weights; dp here counts the context-parallel ranks too, which
  // hold the same weights (Megatron-Core shards its distributed optimizer over dp*cp), or with
  // hybrid sharding only a shard group's ranks.
  auto shard = [&](double v_dense, double v_expert, bool sharded) {
    return sharded ? v_dense / dp + v_expert / edp : v_dense + v_expert;
  };
  mem.weights_bytes = sb.weights * shard(dense, expert, p.zero_stage >= 3);
  mem.gradients_bytes = sb.gradients * shard(dense, expert, p.zero_stage >= 2);
  // PyTorch DDP's own bucket copy of every gradient, in the parameters' precision
  // (Plan::ddp_bucket_copy; DDP runs unsharded, ZeRO 0 or 1).
  if (p.ddp_bucket_copy) mem.gradients_bytes += sb.weights * (dense + expert);
  // The 16-bit gradients a separate accumulation pass reads are allocated beside the fp32
  // buffer at the end of each micro-batch's backward (Plan::grad_accumulation_pass: DeepSpeed
  // frees them before the next backward, nanotron right after its add; ZeRO 0 or 1, unsharded).
  // autograd adds into the held gradients themselves, the buffer counted above; shard-add
  // into ZeRO-2/3's gradient shard, counted above with its per-micro-batch buffer.
  if (p.grad_accumulation_pass != GradAccumulationPass::kNone &&
      p.grad_accumulation_pass != GradAccumulationPass::kAutograd &&
      p.grad_accumulation_pass != GradAccumulationPass::kShardAdd)
    mem.gradients_bytes += sb.weights * (dense + expert);
  const double opt = sb.optimizer * shard(dense, expert, p.zero_stage >= 1);
  place_offloaded_states(
      p, opt, offload_master_bytes_per_param(p) * shard(dense, expert, p.zero_stage >= 1), mem);
  mem.host_param_bytes += nvme_param_read_buffer_bytes(m, p, stage);
  mem.host_optimizer_bytes += offload_step_buffer_bytes(m, p, stage);
  // Activations: stored bytes per layer and micro-batch, times the layers of this stage, times
  // the micro-batches in flight at the peak.
  const LayerKindCounts kinds = layer_kinds_on_stage(p, m, stage);
  const LayerKindCounts recomputed = recomputed_layer_kinds_on_stage(p, m, stage);
  const double in_flight = in_flight_micro_batches(p, stage);
  // Per micro-batch: a recomputed layer keeps only its input, and while it is back-propagated
  // its activations are rebuilt (the largest recomputed layer's worth on top); every other
  // layer keeps all it stores without full recompute.
  const double input = checkpoint_input_bytes(m, p);
  std::array<double, kLayerKindCount> rebuilt_bytes{}, kept_bytes{};
  double stored = 0, checkpoints = 0, workspace = 0, weight_operands = 0;
  for (LayerKind kind : {LayerKind::kDense, LayerKind::kMoe}) {
    if (kinds.of(kind) == 0) continue;
    const auto k = static_cast<std::size_t>(kind);
    with_layer_model(m, kind, [&](const ModelSpec& lm) {
      rebuilt_bytes[k] = layer_activation_bytes(lm, p);
      kept_bytes[k] = layer_kept_activation_bytes(lm, p);
      workspace = std::max(workspace, layer_backward_workspace_bytes(lm, p));
      if (sim::splits_backward(p))
        weight_operands += d(kinds.of(kind)) * layer_weight_gradient_operand_bytes(lm, p);
    });
    const std::int64_t r = recomputed.of(kind);
    stored += d(kinds.of(kind) - r) * kept_bytes[k];
    checkpoints += d(r) * input;
  }
  // A chunk's backward runs its layers last to first, so the layers full recompute leaves out
  // (the last ones of the chunk) have freed this micro-batch's activations by the time the
  // first recomputed layer is rebuilt: the rebuild adds what it exceeds them by.
  double rebuilt = 0;
  if (p.recompute == Recompute::kSelectiveOp) {
    // While a layer is back-propagated, what its checkpoint did not keep is rebuilt.
    for (LayerKind kind : {LayerKind::kDense, LayerKind::kMoe}) {
      if (kinds.of(kind) == 0) continue;
      with_layer_model(m, kind, [&](const ModelSpec& lm) {
        rebuilt = std::max(rebuilt, activation_bytes(lm, p, Recompute::kNone) -
                                        kept_bytes[static_cast<std::size_t>(kind)]);
      });
    }
  }
  if (p.recompute == Recompute::kFull) {
    for_each_chunk_on_stage(p, m, stage, [&](std::int64_t first, std::int64_t count) {
      const std::int64_t r = recomputed_layers_in_chunk(p, count);
      if (r == 0) return;
      const LayerKindCounts rec = layer_kind_counts(m, first, r);
      const LayerKindCounts kept = layer_kind_counts(m, first + r, count - r);
      double largest = 0, freed = 0;
      for (LayerKind kind : {LayerKind::kDense, LayerKind::kMoe}) {
        const auto k = static_cast<std::size_t>(kind);
        if (rec.of(kind) > 0) largest = std::max(largest, rebuilt_bytes[k]);
        freed += d(kept.of(kind)) * kept_bytes[k];
      }
      rebuilt = std::max(rebuilt, largest - freed);
    });
  }
  if (p.offload_checkpoints) {
    // In host memory; on the device, the checkpoint of the layer being back-propagated and the
    // one being fetched for the layer below it.
    mem.host_activation_bytes = checkpoints * in_flight;
    checkpoints = 0;
    if (recomputed.dense + recomputed.moe > 0) rebuilt += 2.0 * input;
  }
  mem.activations_bytes = (stored + checkpoints) * in_flight + rebuilt +
                          weight_operands * weight_pending_micro_batches(p, stage);
  if (stage_holds_head(p, stage)) {
    // The cross-entropy's fp32 buffers per logit (Plan::cross_entropy): fused, the softmax it
    // keeps, 4*s*b*V/t (Korthikanti et al. 2022, sec. 4.3); unfused (PyTorch eager), at the
    // backward's start the kept log-softmax output, the gradient nll_loss writes for it and the
    // gradient log_softmax's backward writes, 12 bytes; cast (nanotron), at the forward's end
    // the logits, their fp32 copy and the kept softmax, 10 bytes with bf16 logits.
    mem.activations_bytes += cross_entropy_bytes_per_logit(p) * d(x.tokens) *
                             d(padded_vocab(m, p.tp)) / d(p.tp);
    // Plan::defer_embedding_wgrad: the operands kept for the flush, held by the last
    // micro-batch's backward.
    mem.activations_bytes += d(deferred_head_micro_batches(p)) * deferred_head_operand_bytes(m, p);
  }
  if (stage_holds_embedding(p, stage)) {
    // Embedding output (and its dropout mask), per micro-batch in flight.
    mem.activations_bytes +=
        d(x.norm_tokens) * d(x.h) * (x.e + (x.dropout ? 1.0 : 0.0)) * in_flight;
  }
  if (p.zero_stage == 3) {
    // Gathered full parameters of the block in use and the one prefetched.
    mem.buffers_bytes = 2.0 * largest_block_params(m, p, stage) * sb.weights;
  }
  // ZeRO-2/3: the full gradient of the block being back-propagated, until its reduce-scatter.
  double largest_grad = 0;
  if (p.zero_stage >= 2) {
    for_each_block_shape_on_stage(m, p, stage, [&](const ParamBlock& b) {
      largest_grad = std::max(largest_grad, zero_grad_buffer_bytes(p, b));
    });
  }
  mem.buffers_bytes += largest_grad;
  mem.buffers_bytes += workspace;
  return mem;
}

DeviceRuntimeBytes device_runtime_bytes(const Plan& p, CudaModuleLoading loading) {
  constexpr double kMB = 1e6, kMiB = 1024.0 * 1024.0;
  DeviceRuntimeBytes r;
  r.cuda_context_bytes = (loading == CudaModuleLoading::kLazy ? 300 : 1000) * kMB;
  const auto ring_group = [&](std::int64_t size) {
    if (size > 1) r.nccl_bytes += (size == 2 ? 544 : 688) * kMiB;
  };
  ring_group(p.tp);
  ring_group(p.cp);
  ring_group(p.dp * p.cp);  // the gradients' group spans the context-parallel ranks too
  ring_group(p.pp);
  if (p.ep > 1) r.nccl_bytes += 3.28e9;
  return r;
}

double allocator_fragmentation(DeviceAllocator allocator) {
  switch (allocator) {
    case DeviceAllocator::kPyTorchCaching: return 0.15;  // GMLake, arXiv:2401.08156
    case DeviceAllocator::kPyTorchExpandableSegments:
    case DeviceAllocator::kPaddleAutoGrowth: return 0.0;  // no published figure
  }
  return 0.0;
}

bool allocator_reserve_modelled(DeviceAllocator allocator) {
  return allocator_fragmentation(allocator) > 0;
}

double reserved_bytes(double allocated_peak_bytes, DeviceAllocator allocator) {
  return allocated_peak_bytes / (1.0 - allocator_fragmentation(allocator));
}

const char* allocator_description(DeviceAllocator allocator) {
  switch (allocator) {
    case DeviceAllocator::kPyTorchCaching: return "PyTorch's caching allocator";
    case DeviceAllocator::kPyTorchExpandableSegments:
      return "PyTorch's allocator with expandable segments";
    case DeviceAllocator::kPaddleAutoGrowth: return "Paddle's auto-growth allocator";
  }
  return "the allocator";
}

double deferred_head_operand_bytes(const ModelSpec& m, const Plan& p) {
  const double tokens = d(tokens_per_micro_batch(m, p));
  const double input_tokens = tokens / (p.sequence_parallel && p.tp > 1 ? d(p.tp) : 1.0);
  return (input_tokens * d(m.hidden_size) + tokens * d(padded_vocab(m, p.tp)) / d(p.tp)) *
         bytes_per_element(p.precision);
}

std::int64_t deferred_head_micro_batches(const Plan& p) {
  if (!p.defer_embedding_wgrad) return 0;
  const std::int64_t M = p.num_micro_batches();
  return p.wgrad_deferral_limit > 0 ? std::min(p.wgrad_deferral_limit, M) : M;
}

double cross_entropy_bytes_per_logit(const Plan& p) {
  switch (p.cross_entropy) {
    case CrossEntropy::kFused: return 4.0;
    case CrossEntropy::kUnfused: return 12.0;
    // nanotron's loss at the forward's end: the logits in their precision, the fp32 copy the
    // cast wrote and the fp32 softmax the Function keeps (Plan::cross_entropy).
    case CrossEntropy::kCast: return bytes_per_element(p.precision) + 4.0 + 4.0;
  }
  return 4.0;
}

double param_fetches_per_step(const Plan& p, const ParamBlock& b) {
  if (p.zero_stage != 3) return 0;
  double n = 0;
  for (DpPoint point : {DpPoint::kBeforeForward, DpPoint::kBeforeRecompute,
                        DpPoint::kBeforeBackward}) {
    std::int64_t count = dp_point_count(p, b, point);
    // One rank per shard group gathers nothing, but the shard still comes in before every use
    // (the simulator's zero3_gather), the backward's included.
    if (count == 0 && point == DpPoint::kBeforeBackward && p.zero_shard_ranks() == 1)
      count = chunk_copy_micro_batches(p) * (b.read_by_head ? 2 : 1);
    n += d(count);
  }
  return n;
}

// The shard elements one rank streams in per step with offload optimizer+params: each block's
// shard before each of its gathers (param_fetches_per_step), summed over the stage's blocks in
// closed form (no allocation: the planner calls this per candidate), as param_blocks_on_stage
// lists them (tests/core/cost_model_test.cc checks the two agree).
static double streamed_shard_elements(const ModelSpec& m, const Plan& p, std::int64_t stage) {
  double sum = 0;
  auto add = [&](const ParamBlock& b, double copies) {
    if (copies > 0) sum += copies * shard_elements(p, b) * param_fetches_per_step(p, b);
  };
  if (stage_holds_embedding(p, stage)) add(embedding_block(m, p), 1);
  const LayerKindCounts kinds = layer_kinds_on_stage(p, m, stage);
  const LayerKindCounts recomputed = recomputed_layer_kinds_on_stage(p, m, stage);
  for (LayerKind kind : {LayerKind::kDense, LayerKind::kMoe}) {
    if (kinds.of(kind) == 0) continue;
    with_layer_model(m, kind, [&](const ModelSpec& lm) {
      ParamBlock b = layer_block(lm, p);
      b.recomputed = true;
      add(b, d(recomputed.of(kind)));
      b.recomputed = false;
      add(b, d(kinds.of(kind) - recomputed.of(kind)));
    });
  }
  if (stage_holds_head(p, stage)) add(head_block(m, p), 1);
  return sum;
}

OffloadTraffic offload_traffic_on_stage(const ModelSpec& m, const Plan& p, std::int64_t stage) {
  OffloadTraffic t;
  if (p.offload == Offload::kNone) return t;
  const double params = optimizer_params_on_rank(m, p, stage);
  const double e = bytes_per_element(p.precision);
  // ZeRO-Offload (Ren et al. 2021, sec. 4.1): the reduced gradient shard goes to the host, the
  // CPU runs the optimizer over it, and the updated low-precision weights come back.
  t.device_to_host_bytes = params * grad_bytes_per_element(p);
  t.host_to_device_bytes = params * e;
  t.host_memory_bytes = params * optimizer_step_bytes_per_param(p);
  const bool nvme = p.offload_device == OffloadDevice::kNvme;
  if (nvme) {
    // ZeRO-Infinity (sec. 5.1, 6.2): the optimizer states are read from NVMe for the CPU step
    // and written back after it, the fp32 parameters it updates with them (in fp32, the copy
    // offload_master_bytes_per_param counts, or under optimizer+params the shard).
    const double states =
        params * (state_bytes_per_param(p).optimizer + offload_master_bytes_per_param(p));
    t.nvme_read_bytes += states;
    t.nvme_write_bytes += states;
  }
  if (p.offload == Offload::kOptimizerParams) {
    // The weights stay off the device: nothing comes back after the step, but every ZeRO-3
    // gather of a block starts from the rank's shard, streamed in over PCIe each time (per
    // micro-batch, forward, backward and recompute), and each micro-batch's reduced gradient
    // shard goes to the host to be accumulated there (Rajbhandari et al. 2021, sec. 5.1).
    const double M = d(chunk_copy_micro_batches(p));  // through each chunk on the stage
    t.param_stream_bytes = streamed_shard_elements(m, p, stage) * e;
    t.host_to_device_bytes = t.param_stream_bytes;
    t.device_to_host_bytes = params * grad_bytes_per_element(p) * M;
    if (nvme) {
      // Each fetch reads the shard from NVMe; the step writes the updated shard back (in fp32
      // the shard is the fp32 parameters the states above wrote already).
      t.nvme_param_read_bytes = t.param_stream_bytes;
      t.nvme_read_bytes += t.param_stream_bytes;
      if (offload_master_bytes_per_param(p) == 0) t.nvme_write_bytes += params * e;
    }
  }
  return t;
}

}  // namespace trainplan
