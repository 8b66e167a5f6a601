// The cost model of a transformer training step, per rank.
//
// One source of truth for what a step does: the ordered tasks of a layer's forward, backward and
// recompute (GEMMs, memory-bound kernels, and the collectives between them), the embedding and
// the LM head. The planner sums them analytically, the simulator plays them as events, and the
// executor issues exactly these collectives, so all three agree on bytes by construction.
//
// One header, one .cc per question: parameters.cc (counts, blocks, stage parameters), tasks.cc
// (layer, embedding and head task lists, TP overlap partners), data_parallel.cc (DP/ZeRO block
// tasks, points, buffers), memory.cc (state bytes, activations, memory_on_stage, offload),
// totals.cc (FLOPs, Megatron eq. 3, communication volume, the optimizer task); helpers they
// share are in internal.h. Tested by tests/core/cost_model_test.cc.
//
// Sources, cited where used:
//  - Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters Using
//    Megatron-LM" (arXiv:2104.04473): FLOPs (eq. 3), parameter count, schedules.
//  - Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models"
//    (arXiv:2205.05198): activation memory per layer with TP, SP and selective recompute.
//  - Rajbhandari et al. 2019, "ZeRO" (arXiv:1910.02054): model-state memory by stage.
//  - Ren et al. 2021, "ZeRO-Offload" (arXiv:2101.06840): optimizer states and step on the host.
//  - Context parallelism: Llama 3 (Grattafiori et al. 2024, arXiv:2407.21783, sec. 3.3.2),
//    all-gather of K and V with load-balanced causal chunks; Megatron-Core's "context parallel"
//    docs (CP ranks as extra data-parallel ranks for the weights); each Plan::cp_comm as its
//    code runs it: Transformer Engine's AttnFuncWithCPAndKVAllGather, AttnFuncWithCP /
//    AttnFuncWithCPAndKVP2P and AttnFuncWithCPAndQKVOA2A (NVIDIA/TransformerEngine
//    transformer_engine/pytorch/attention.py at v1.4 and v1.13), PyTorch's
//    torch/distributed/tensor/experimental/_attention.py (_templated_ring_attention and its
//    backward, the rotaters, _SDPAMerger); sources at each task list in tasks.cc.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "core/cluster_spec.h"
#include "core/cost/collectives.h"
#include "core/model_spec.h"
#include "core/plan.h"
#include "core/rank_layout.h"

namespace trainplan {

// ---------------------------------------------------------------------------------------------
// Parameters
struct ParameterCounts {
  double embedding = 0;   // V*h token table
  double position = 0;    // max_positions*h for a learned table, 0 for RoPE
  double attention = 0;   // all layers: Q, K, V, output projection (+ biases, MLA's latents)
  double mlp = 0;         // all layers: MLPs, all experts, routers, shared experts
  double active_mlp = 0;  // all layers: what one token passes through (top-k experts, shared)
  double norms = 0;       // all layers: each block's two norms
  double final_norm = 0;
  double lm_head = 0;     // 0 when tied to the embedding

  double total() const;
  // Parameters a token passes through (MoE counts top-k experts), for 6*N*D style estimates.
  double active() const;
};
ParameterCounts count_parameters(const ModelSpec& model);

// Vocabulary padded as Megatron-LM does (make-vocab-size-divisible-by 128, times tp).
std::int64_t padded_vocab(const ModelSpec& model, std::int64_t tp);

// Parameters held by one rank of pipeline stage `stage` (TP-sharded, before ZeRO sharding).
// Expert parameters are separate: they are also divided by ep and synchronised over dp/ep.
struct StageParameters {
  double dense = 0;   // attention, norms, embeddings, head, router
  double expert = 0;  // this rank's share of the experts
  double total() const { return dense + expert; }
};
StageParameters parameters_on_stage(const ModelSpec& model, const Plan& plan, std::int64_t stage);
// Transformer layers held by pipeline stage `stage` over all its model chunks.
std::int64_t layers_on_stage(const Plan& plan, const ModelSpec& model, std::int64_t stage);
// Transformer layers of each kind (an MoE model's dense and expert layers) on stage `stage`.
LayerKindCounts layer_kinds_on_stage(const Plan& plan, const ModelSpec& model, std::int64_t stage);
// Of those, the layers that full recompute runs again (recomputes_layer), by kind.
LayerKindCounts recomputed_layer_kinds_on_stage(const Plan& plan, const ModelSpec& model,
                                                std::int64_t stage);
// Parameters of the largest block on the stage (what ZeRO-3 gathers at once).
double largest_block_params(const ModelSpec& model, const Plan& plan, std::int64_t stage);

// ---------------------------------------------------------------------------------------------
// Tasks: what one rank executes, in order.
enum class TaskKind { kGemm, kAttention, kMemory, kComm };
// The process group a collective runs in. kDp: the ranks holding the same dense weights, dp
// replicas x cp context-parallel ranks, or with hybrid sharding the Plan::zero_shard_size of
// them that share one set of ZeRO shards; kDpReplica: with hybrid sharding, the ranks holding
// the same shard in each shard group; kExpertDp: those holding the same experts
// (Plan::expert_dp); kEmbedding: first and last pipeline stage, for tied embeddings; kCp: the
// context-parallel ranks that share one sequence; kExpertTp: with Plan::expert_layout folded, the
// ranks one expert's weights are split over (Megatron-Core's expert tensor-parallel group), whose
// gather and scatter of the routed tokens sit between the expert all-to-alls.
enum class CommGroup { kTp, kPp, kDp, kEp, kExpertDp, kEmbedding, kCp, kDpReplica, kExpertTp };
inline constexpr std::size_t kCommGroupCount = 9;
std::string_view to_string(CommGroup g);
// The group a collective is reported under in step reports and CommVolume: the embedding group
// counts as pipeline traffic, the expert-data-parallel group as data-parallel, the expert
// tensor-parallel group as tensor-parallel.
std::string_view report_group(CommGroup g);
enum class Pass { kForward, kBackward, kRecompute };
std::string_view to_string(Pass p);
// What a memory-bound task's kernel does. Kernels of one kind reach similar fractions of the
// memory bandwidth and kinds differ: on an A100 a LayerNorm forward+backward reaches ~0.4 of
// peak bandwidth where a copy reaches ~0.9 (pytorch/pytorch#87445), and on a CPU the
// transcendental-heavy ones (GELU's tanh, a softmax's exp) are bound by arithmetic, not memory.
// A hardware profile may give each kind its own efficiency (core/cost/compute_model.h).
enum class MemoryKernel : std::int8_t {
  kElementwise,   // residual adds, copies, the cross-entropy's gradient
  kNorm,          // LayerNorm / RMSNorm forward and backward
  kActivation,    // GELU, SwiGLU
  kSoftmax,       // softmax: attention's (unfused) and the cross-entropy's over the vocabulary
  kEmbedding,     // table lookups and their scatter-add backward
  kOptimizer,     // the parameter update
  kCount
};
inline constexpr std::size_t kMemoryKernelCount = static_cast<std::size_t>(MemoryKernel::kCount);
std::string_view to_string(MemoryKernel k);

struct Task {
  std::string_view name;   // "qkv", "softmax", "tp_all_reduce_attn", ...
  TaskKind kind = TaskKind::kMemory;
  // GEMM / attention shape: batch x (m x k) * (k x n).
  std::int64_t m = 0, n = 0, k = 0, batch = 1;
  double flops = 0;           // model FLOPs by the papers' convention (full s^2 for attention)
  double executed_flops = 0;  // what the kernel executes (a causal fused kernel skips half)
  double bytes = 0;           // device-memory traffic
  // Memory-bound kernels: exp/tanh evaluations (GELU's tanh, SiLU's and softmax's exp), which
  // a CPU computes in software (DeviceRates::transcendental_s).
  double transcendentals = 0;
  MemoryKernel memory_kernel = MemoryKernel::kElementwise;  // for kMemory tasks
  // A GEMM on FP8 operands, timed at the FP8 rate (Plan::fp8); a fused attention kernel on FP8
  // Q, K, V (Plan::fp8_attention), timed at its published FP8 rate.
  bool fp8 = false;
  // With fp8: a GEMM on NVFP4 operands, timed at the FP4 rate (Plan::fp8_scaling nvfp4).
  bool fp4 = false;
  // A fused attention kernel's backward (attention_rates.h); a norm's or an activation's
  // backward kernel, whose published rates differ from the forward's (memory_kernel_rates.h).
  bool backward = false;
  // A memory-bound norm or activation run as PyTorch eager's ATen kernels one by one
  // (Plan::elementwise eager, eager-swiglu), timed at that implementation's published rate
  // (memory_kernel_rates.h); false: one kernel.
  bool eager = false;
  // A fused attention kernel with the causal mask (its m queries end where its n keys end); false:
  // unmasked, as a context-parallel ring step on another rank's keys (attention_rates.h).
  bool causal = true;
  // Kernel launches the task stands for, each paying DeviceRates::kernel_overhead_s: 1 for one
  // kernel; n for the n copies PyTorch's list all-gather makes (Plan::zero3_gather per-tensor).
  std::int64_t launches = 1;
  // Collectives: which group, which collective, message size (nccl-tests' S).
  Collective collective = Collective::kAllReduce;
  CommGroup group = CommGroup::kTp;
  std::int64_t group_size = 1;
  std::int64_t message_bytes = 0;
  // MoE all-to-alls of a model with node-limited routing: how their tokens spread over nodes
  // (collectives.h); empty (copies 0) for every other collective.
  RoutedSpread spread;
  // A collective that runs beside the next `beside` compute tasks of its list (ring attention's
  // exchange for the next step, sent while this step's attention runs); the compute task after
  // them waits for it. 0: the next compute task waits for it (a blocking collective).
  std::int32_t beside = 0;
  // A run of identical steps held as one (compact_repeats: a context-parallel ring's steps of one
  // shape): the task stands for `repeat` copies of itself, one per step. A run's tasks are
  // consecutive and carry the same repeat, the first with repeat_first; one copy of each, in
  // order, is one step. The other fields describe one copy (message_bytes is one exchange's,
  // nccl-tests' S; flops, bytes and launches one kernel's); what is summed counts every copy:
  // task_time_s (repeat times one copy's, its launches too), bytes_sent(), and every total
  // (comm_volume_on_stage, step_flops, the simulator's report). The simulator plays a run as
  // one op per task: a collective of repeat exchanges back to back, each its latency then its
  // bytes (simulator/engine.h), beside the run's compute, repeat times one copy's; compact_repeats
  // forms a run only where that is what its steps take one after another.
  std::int32_t repeat = 1;
  bool repeat_first = false;

  // This rank's bytes for every copy (one copy's times repeat).
  std::int64_t bytes_sent() const {
    return kind == TaskKind::kComm
               ? bytes_sent_per_rank(collective, message_bytes, group_size) * repeat
               : 0;
  }
  bool operator==(const Task&) const;  // defaulted in tasks.cc (nvcc reads this header as C++17)
};

// Runs of identical steps (Task::repeat). compact_repeats replaces, from `from` on, each run of
// n >= 2 consecutive copies of a unit of tasks by the unit with repeat n; a unit qualifies when
// its steps played one after another take n times one step: each of its collectives a
// context-parallel one whose Task::beside window closes inside the unit, and no window opened
// before it still open where it starts (then a step begins only once the step before it has
// ended, and the run's compute and exchanges, each n times one step's, give n times one step's
// max-plus time). Units of up to kMaxRepeatUnit tasks; the longest run wins. expand_repeats is
// its inverse: each run written out step by step (repeat 1), as the simulator's
// SimOptions::expand_repeats plays it. Tested by tests/core/cp_comm_test.cc.
inline constexpr std::size_t kMaxRepeatUnit = 8;
void compact_repeats(std::vector<Task>& tasks, std::size_t from = 0);
std::vector<Task> expand_repeats(const std::vector<Task>& tasks);
bool has_repeats(const std::vector<Task>& tasks);

// Forward tasks of one transformer layer for one micro-batch on one TP rank. The per-layer
// functions below see `model` as a uniform stack: an MoE model's expert layers. For a model
// with dense_layers, pass each kind's view, layer_model(model, kind).
std::vector<Task> layer_forward_tasks(const ModelSpec& model, const Plan& plan);
// Backward tasks of one layer (reverse order; each GEMM gives a data- and a weight-gradient).
std::vector<Task> layer_backward_tasks(const ModelSpec& model, const Plan& plan);
// The zero-bubble split of a backward task list (Qi et al. 2023, arXiv:2401.10241, sec. 2,
// fig. 1): W is the weight-gradient GEMMs (dW = X^T dY), which nothing in the pipeline waits
// for; B is everything else, the input gradient the previous stage waits for. Order is kept.
bool is_weight_gradient_task(const Task& task);
std::vector<Task> backward_input_tasks(const std::vector<Task>& backward);
std::vector<Task> backward_weight_tasks(const std::vector<Task>& backward);
// What a layer's W pass reads, held from its B pass until it runs, for one micro-batch on one
// TP rank: the operands of its weight-gradient GEMMs, X and dY (Qi et al. 2023, sec. 2: "W ...
// requires the input and the gradient of the output"), the rest of the layer's stored
// activations being freed by B.
double layer_weight_gradient_operand_bytes(const ModelSpec& model, const Plan& plan);
// Forward work redone before a layer's backward pass under recompute (empty for none); under
// full recompute, for the layers that recomputes_layer names.
std::vector<Task> layer_recompute_tasks(const ModelSpec& model, const Plan& plan);
// First stage: token (and position) embedding; last stage: final norm, LM head, loss.
std::vector<Task> embedding_forward_tasks(const ModelSpec& model, const Plan& plan);
std::vector<Task> embedding_backward_tasks(const ModelSpec& model, const Plan& plan);
std::vector<Task> head_forward_tasks(const ModelSpec& model, const Plan& plan);
std::vector<Task> head_backward_tasks(const ModelSpec& model, const Plan& plan);

// Plan::tp_comm_overlap: for each task of a pass, the index of the GEMM its TP collective is
// overlapped with, or -1 (every task that is not such a collective). A GEMM overlaps at most
// one collective. A reduce-scatter drains the GEMM just before it; an all-gather feeds the first
// GEMM after it (only memory-bound kernels, FP8 casts, between), or where a reduce-scatter has
// that GEMM (the backward's re-gather of an input for its weight gradient, which Transformer
// Engine overlaps with the data gradient) runs beside the GEMM just before it. A partner before
// the collective: it runs beside that GEMM and what follows waits; after: that GEMM's last chunk
// waits for it. Empty when the plan does not overlap.
std::vector<std::int32_t> tp_overlap_partners(const std::vector<Task>& tasks, const Plan& plan);
// A TP collective of comm_s decomposed into tp chunks and overlapped with a GEMM of gemm_s
// (ring collective matmul, Wang et al. 2023): the first (all-gather) or last (reduce-scatter)
// chunk of the GEMM waits, the other (tp-1)/tp of it run beside the collective. With
// sm_slowdown s >= 1, how much longer the GEMM runs while the collective's kernels are in flight
// beside it (core/cost/contention.h; 1 when it runs on copy engines), the rest R = gemm_s
// (tp-1)/tp takes comm_s when comm_s >= R s, else R + comm_s (1 - 1/s), the simulator's fluid
// model in closed form; the pair adds the waiting chunk, gemm_s / tp. At s = 1: max(comm_s, R)
// + gemm_s / tp. whole_gemm (a GEMM launched with an SM margin, CommKernels::kUserbuffersMargin):
// the rest runs slowed throughout, max(comm_s, R s) + gemm_s / tp.
double tp_overlapped_pair_s(double comm_s, double gemm_s, std::int64_t tp,
                            double sm_slowdown = 1.0, bool whole_gemm = false);
// Plan::tp_comm_overlap_impl torch-async: one of the tp chunks PyTorch's fused ops run a
// decomposed GEMM as (torch/distributed/_symmetric_memory/__init__.py, _fused_all_gather_matmul
// and _fused_matmul_reduce_scatter_impl: x.chunk(group_size) along the rows, one mm per chunk),
// ceil(m/tp) rows, its FLOPs and bytes in proportion. compute_model.h's tp_decomposed_gemm_s
// times the tp of them with the shape and wave model.
Task tp_decomposed_chunk(const Task& gemm, std::int64_t tp);
// The kernel after torch's decomposed reduce-scatter (_fused_matmul_reduce_scatter_impl:
// reduce_fn over the stacked partials, torch.sum(dim=0)): reads the tp partial chunks of
// ceil(m/tp) x n this rank received and writes their sum, in the activations' dtype. Runs after
// the last transfer, on the compute stream: exposed.
Task tp_partials_reduce_task(const Task& gemm, const Plan& plan);

// Tokens of one micro-batch on one rank: micro_batch_size * seq_len / cp (context parallelism
// splits each sequence over cp ranks).
std::int64_t tokens_per_micro_batch(const ModelSpec& model, const Plan& plan);

// Bytes of the activation tensor a stage boundary sends per micro-batch, from each TP rank: the
// whole tensor, or 1/t of it (the scatter/gather of Narayanan et al. 2021 sec. 4.1) when
// sequence parallel or with Plan::pipeline_scatter_gather.
std::int64_t pipeline_message_bytes(const ModelSpec& model, const Plan& plan);
// What the receiver of a pipeline message runs before the pass that reads it: with
// Plan::pipeline_scatter_gather, the all-gather of the t pieces over the TP group
// (megatron/p2p_communication.py at 6985e58938, 132-141: gather_split_1d_tensor before
// _communicate returns); empty otherwise.
std::vector<Task> pipeline_receive_tasks(const ModelSpec& model, const Plan& plan);

// Parameter blocks: the unit of data-parallel synchronisation (a gradient bucket, a ZeRO-3
// gather). A stage holds, in forward order, [embedding], its layers, [head]. Counts are the
// parameters on one rank (TP-sharded and EP-divided, before ZeRO sharding).
enum class BlockKind { kEmbedding, kLayer, kHead };
struct ParamBlock {
  BlockKind kind = BlockKind::kLayer;
  std::int64_t layer = -1;  // global layer index for kLayer
  std::int64_t dense_params = 0;
  std::int64_t expert_params = 0;
  bool tied_copy = false;   // holds a tied embedding kept on two stages (splits_tied_embedding)
  // The embedding block whose table a tied head in another chunk of the same stage reads (zb-v's
  // V puts chunk 0 and the last chunk on stage 0): ZeRO-3 gathers it again around the head's
  // forward and backward.
  bool read_by_head = false;
  std::int64_t tied_params = 0;  // the tied embedding rows on this rank (when tied_copy)
  // Parameters every TP rank holds whole (norms, MLA's down-projections, MoE routers): with sequence
  // parallelism each TP rank sees only its tokens' share of their gradient, summed over TP once
  // per step (Megatron-LM's allreduce of `sequence_parallel` parameters' gradients).
  std::int64_t tp_replicated_params = 0;
  bool recomputed = false;  // a layer whose forward runs again in its backward (full recompute)
  // Parameter tensors in the block's dense and expert parts (Megatron-LM's module layout;
  // parameters.cc): what Plan::zero3_gather per-tensor gathers one by one.
  std::int64_t tensors = 1;
  std::int64_t expert_tensors = 0;
};
std::vector<ParamBlock> param_blocks_on_stage(const ModelSpec& model, const Plan& plan,
                                              std::int64_t stage);

// When a block's data-parallel collectives run.
enum class DpPoint {
  kBeforeForward,    // every micro-batch (ZeRO-3 parameter all-gather)
  kBeforeRecompute,  // every micro-batch, recomputed layers only (ZeRO-3 gathers again)
  kBeforeBackward,   // every micro-batch (ZeRO-3)
  kAfterBackward,    // every micro-batch (ZeRO-2/3 gradient reduce-scatter)
  kAfterLastBackward,  // once per step: tied-embedding and sequence-parallel norm sums, then
                       // the DDP all-reduce or ZeRO-1 reduce-scatter
  kAfterOptimizer,   // once per step (ZeRO-1/2 parameter all-gather)
};
std::vector<Task> dp_block_tasks(const Plan& plan, const ParamBlock& block, DpPoint point);
// Plan::zero3_copies: the copies PyTorch FSDP runs on the compute stream around a block's
// ZeRO-3 collectives at `point`: FSDP2's all-gather copy-out after each gather (before the
// block computes), FSDP1's gradient flatten at kAfterBackward (before the reduce-scatter is
// issued). Each reads and writes its bytes / 2, and holds its output beside its input while it
// runs. The copies on the collectives' streams are in dp_block_tasks. Empty where none.
std::vector<Task> zero3_compute_copies(const Plan& plan, const ParamBlock& block, DpPoint point);
// Ranks that hold the same experts and sum their gradients (Plan::expert_dp): carved, dp/ep
// replicas x cp; folded, tp*cp*dp / (expert_tp*ep).
std::int64_t expert_dp_cp(const Plan& plan);
// ZeRO-2/3: bytes of the block's full (unsharded) gradient, held from the start of its
// backward until its reduce-scatter (per micro-batch; DeepSpeed's reduce bucket, one block
// here); 0 below ZeRO-2 (the whole gradient is in gradients_bytes) or without a reduction.
double zero_grad_buffer_bytes(const Plan& plan, const ParamBlock& block);
// How many times per step a point occurs for `block` (M for per-micro-batch points, 1
// otherwise, 0 for kBeforeRecompute of a block that is not recomputed; 2M gathers of a block
// read_by_head).
std::int64_t dp_point_count(const Plan& plan, const ParamBlock& block, DpPoint point);

// ---------------------------------------------------------------------------------------------
// FLOPs per step (whole model, all ranks)
struct StepFlops {
  double model = 0;     // forward + backward, no recompute (MFU numerator; PaLM/Korthikanti)
  double hardware = 0;  // + recomputed forward (Narayanan et al. eq. 3 counts this)
};
StepFlops step_flops(const ModelSpec& model, const Plan& plan);
// Narayanan et al. 2021 eq. 3 in closed form, for tests and reports:
// 96*B*s*l*h^2*(1 + s/(6h) + V/(16*l*h)).
double megatron_eq3_flops(const ModelSpec& model, std::int64_t batch);

// ---------------------------------------------------------------------------------------------
// Memory
struct MemoryBreakdown {
  double weights_bytes = 0;
  double gradients_bytes = 0;
  double optimizer_bytes = 0;    // on the device (0 when offloaded)
  double activations_bytes = 0;  // peak stored activations for the schedule and stage
  double buffers_bytes = 0;      // ZeRO-3 gathered parameters, ZeRO-2/3 block gradient, a
                                 // layer's backward workspace
  double host_optimizer_bytes = 0;  // offloaded optimizer states on the host (not device)
  double host_activation_bytes = 0;  // offloaded checkpoints on the host (not device)
  // Offload optimizer+params: the rank's 16-bit parameter and gradient shards in host memory
  // (offload_device cpu), and whatever is on NVMe (offload_device nvme: the optimizer states
  // and, with optimizer+params, the parameter shard; gradients stay in host memory, as
  // ZeRO-Infinity keeps them, sec. 5.1).
  double host_param_bytes = 0;
  double nvme_bytes = 0;
  // Memory the process holds before the model: runtime, libraries, communication buffers.
  // Measured by `calibrate` (HardwareProfile::baseline_memory_bytes); 0 without a profile.
  double runtime_bytes = 0;
  double device_total() const {
    return weights_bytes + gradients_bytes + optimizer_bytes + activations_bytes + buffers_bytes +
           runtime_bytes;
  }
};

// Bytes per parameter of the model states: weights, gradients and optimizer states, before
// sharding. Mixed-precision AdamW: 2 + 2 + 12 = 16 (Rajbhandari et al. 2019, sec. 3.1).
struct StateBytesPerParam {
  double weights = 0, gradients = 0, optimizer = 0;
  double total() const { return weights + gradients + optimizer; }
};
StateBytesPerParam state_bytes_per_param(Precision precision, Optimizer optimizer,
                                         GradPrecision grads = GradPrecision::kCompute);
StateBytesPerParam state_bytes_per_param(const Plan& plan);
// Bytes of one gradient element: accumulated, reduced over data parallelism, read by the
// optimizer (the weights' precision, or 4 with grad_precision fp32).
double grad_bytes_per_element(Precision precision, GradPrecision grads);
double grad_bytes_per_element(const Plan& plan);
// Bytes the loss holds per logit on the stage with the head, at its peak (Plan::cross_entropy):
// 4 fused, 12 unfused.
double cross_entropy_bytes_per_logit(const Plan& plan);
// Plan::defer_embedding_wgrad: what the last stage keeps per deferred micro-batch for the head's
// weight gradient at the flush, on one TP rank: the head's input (its sequence-parallel shard,
// all-gathered again at the flush) and the logits' gradient (tokens x vocab / tp), in the
// activations' precision (Megatron-Core's embedding_activation_buffer and grad_output_buffer);
// and how many micro-batches a step defers (wgrad_deferral_limit, all at 0; 0 when off).
double deferred_head_operand_bytes(const ModelSpec& model, const Plan& plan);
std::int64_t deferred_head_micro_batches(const Plan& plan);

// Stored activation bytes of one layer for one micro-batch on one TP rank (Korthikanti et al.
// 2022 sec. 4, generalised to GQA, SwiGLU and fused attention).
double layer_activation_bytes(const ModelSpec& model, const Plan& plan);
// What a layer stores when it is not recomputed: as layer_activation_bytes, but for a layer that
// full recompute leaves out (recompute_num_layers), everything recompute none keeps.
double layer_kept_activation_bytes(const ModelSpec& model, const Plan& plan);
// What a fully recomputed layer keeps for one micro-batch on one TP rank: its input, split over
// tp with sequence parallelism or partition_activations.
double checkpoint_input_bytes(const ModelSpec& model, const Plan& plan);
// Activation gradients alive at once while one layer is back-propagated, for one micro-batch on
// one TP rank: the layer's output gradient with, at the larger of two moments, the MLP's (the
// gradients at the fc2 input and at the fc1 output, which the activation's backward holds
// together) or the attention core's (the out-projection input's gradient and, unfused, the
// gradient of the scores). Freed when the layer's backward ends; not in Korthikanti et al.'s
// count, which is of stored activations only.
double layer_backward_workspace_bytes(const ModelSpec& model, const Plan& plan);
// Micro-batch-layers of activations held at the peak by pipeline stage `stage`, in units of
// one micro-batch through the stage's layers (GPipe: M; 1F1B: min(pp - stage, M); interleaved:
// Megatron-LM's warm-up count / virtual_stages; zb-v: min(pp, M) on every stage, to W).
double in_flight_micro_batches(const Plan& plan, std::int64_t stage);
// Micro-batches whose B has run but whose W has not, at stage `stage`'s activation peak, each
// holding layer_weight_gradient_operand_bytes per layer (zb-h1: `stage` of them, the W passes
// it holds back; 0 for schedules that do not split the backward, and for zb-v, whose
// in_flight_micro_batches already counts to W).
double weight_pending_micro_batches(const Plan& plan, std::int64_t stage);
MemoryBreakdown memory_on_stage(const ModelSpec& model, const Plan& plan, std::int64_t stage);

// Device memory a GPU process holds outside what its framework allocates: what nvidia-smi counts
// beyond torch.cuda.max_memory_allocated / reserved. Compared with a published figure only where
// the source measured device memory in use (PublishedRun::memory_measure), never added to the
// planner's fit, whose headroom already stands for it.
//  - The CUDA context: about 300 MB with lazy module loading (CUDA 11.7 and later, the default
//    from CUDA 12.2), over 1,000 MB when every kernel is loaded at start (PyTorch issue #107667,
//    an NVIDIA engineer's answer, 2023-08-28); 1,000 MB taken for eager loading, a lower bound.
//  - NCCL's buffers, per communicator the rank uses: 544 MiB for a 2-GPU group and 688 MiB for a
//    larger one running all-reduce (NCCL issue #964: 4 A100 over NVLink, every process group
//    measured after one 4 MB all-reduce); more per rank does not come with scale beyond two
//    nodes (NCCL issue #986, the NCCL lead's answer: memory grows with channels and algorithms,
//    a ring keeps two connections). An all-to-all group connects every pair and takes 3.28 GB
//    (NCCL issue #1685: 8 H100, 1.06 GB before the first all_to_all_single, 4.34 GB after).
//    One communicator each for TP, CP, the data-parallel gradient group, the pipeline's
//    neighbours and EP (all-to-all), where the degree is above one.
enum class CudaModuleLoading { kLazy, kEager };
struct DeviceRuntimeBytes {
  double cuda_context_bytes = 0;
  double nccl_bytes = 0;
  double total() const { return cuda_context_bytes + nccl_bytes; }
};
DeviceRuntimeBytes device_runtime_bytes(const Plan& plan, CudaModuleLoading loading);

// What a framework's allocator reserves from the device at its allocated peak: the peak over
// (1 - f), f the allocator's fragmentation there (the reserve's unallocated share). Compared
// with a published figure only where the source measured reserved or device memory
// (PublishedRun::memory_measure), never added to the planner's fit.
//  - PyTorch's caching allocator with block splitting (its default): f = 0.15, GMLake (Guo et
//    al., ASPLOS 2024, arXiv:2401.08156): 15% average fragmentation (up to 33%) over eight LLMs
//    trained on A100-80GB with recompute, offload, ZeRO and LoRA, PyTorch 2.0.
//  - PyTorch with expandable_segments:True, and Paddle's auto-growth allocator: no published
//    figure, so f = 0 (allocator_reserve_modelled says false and the caller says so).
enum class DeviceAllocator { kPyTorchCaching, kPyTorchExpandableSegments, kPaddleAutoGrowth };
double allocator_fragmentation(DeviceAllocator allocator);
bool allocator_reserve_modelled(DeviceAllocator allocator);
double reserved_bytes(double allocated_peak_bytes, DeviceAllocator allocator);
// The allocator's name as input files and command lines give it ("pytorch-caching",
// "pytorch-expandable-segments", "paddle-auto-growth"; kDeviceAllocatorKeys in that order),
// and as prose says it.
inline constexpr const char* kDeviceAllocatorKeys[] = {
    "pytorch-caching", "pytorch-expandable-segments", "paddle-auto-growth"};
const char* allocator_description(DeviceAllocator allocator);

// ---------------------------------------------------------------------------------------------
// Communication volume per step: bytes one rank of `stage` sends, by group.
struct CommVolume {
  double tp_bytes = 0, pp_bytes = 0, dp_bytes = 0, ep_bytes = 0;
  double cp_bytes = 0;    // context parallelism's K,V all-gathers and dK,dV reduce-scatters
  double host_bytes = 0;  // PCIe traffic of optimizer and checkpoint offload (both directions)
  // Of tp_bytes: the expert-TP group's gathers and scatters of routed rows (CommGroup::kExpertTp),
  // which the CPU executor counts on their own communicator.
  double expert_tp_bytes = 0;
  double total() const { return tp_bytes + pp_bytes + dp_bytes + ep_bytes + cp_bytes; }
};
CommVolume comm_volume_on_stage(const ModelSpec& model, const Plan& plan, std::int64_t stage);
// Sum of bytes_sent_per_rank over a task list, by group (used by comm_volume_on_stage).
void add_task_bytes(const std::vector<Task>& tasks, double times, CommVolume& volume);

}  // namespace trainplan

namespace trainplan {

// ---------------------------------------------------------------------------------------------
// The optimizer step: device-memory bytes touched per parameter (a memory-bound kernel).
// AdamW mixed precision reads the gradient (grad_bytes_per_element), reads and writes fp32
// master, m and v (24 bytes) and writes the low-precision weight (e bytes).
double optimizer_step_bytes_per_param(const Plan& plan);
// Parameters this rank updates per step: its stage parameters, divided by dp*cp under ZeRO >= 1.
double optimizer_params_on_rank(const ModelSpec& model, const Plan& plan, std::int64_t stage);
// The optimizer step of one rank of `stage` as a memory-bound task ("optimizer").
Task optimizer_task(const ModelSpec& model, const Plan& plan, std::int64_t stage);

// ZeRO-Offload traffic per step for one rank (Ren et al. 2021, sec. 4): gradients to the host,
// updated weights back, and the host optimizer's memory traffic.
// One rank's offload traffic per step (Plan::offload): over PCIe each way, the CPU optimizer
// step's host DRAM traffic, and NVMe reads and writes (offload_device nvme).
struct OffloadTraffic {
  double device_to_host_bytes = 0;
  double host_to_device_bytes = 0;
  double host_memory_bytes = 0;  // host DRAM traffic of the CPU optimizer step
  double nvme_read_bytes = 0;
  double nvme_write_bytes = 0;
  // Of host_to_device_bytes, the parameter shards streamed in before each block's gathers
  // (optimizer+params), which prefetching overlaps with compute; and of nvme_read_bytes, the
  // part read for them.
  double param_stream_bytes = 0;
  double nvme_param_read_bytes = 0;
};
// Times per step block b's ZeRO-3 shard is fetched (streamed in with offload
// optimizer+params): before each of its gathers, as dp_point_count counts them (per micro-batch
// its forward and backward, its recompute when recomputed, twice each for an embedding a head
// in another chunk reads), which is where the simulator's zero3_gather fetches; 0 below ZeRO-3.
double param_fetches_per_step(const Plan& plan, const ParamBlock& block);
OffloadTraffic offload_traffic_on_stage(const ModelSpec& model, const Plan& plan,
                                        std::int64_t stage);

}  // namespace trainplan
