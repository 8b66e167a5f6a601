// The plan: how one training step is split across GPUs. Written by `plan --emit-plan`, read by
// `simulate` and `execute`. Every field round-trips through plan_to_json / plan_from_json.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "core/cluster_spec.h"
#include "core/json_util.h"
#include "core/model_spec.h"
#include "core/status.h"

namespace trainplan {

// naive: layers split across stages, the whole per-replica batch as one micro-batch (one stage
// busy at a time). gpipe: all forwards, then all backwards (Huang et al. 2019). 1f1b: one
// forward one backward, PipeDream-flush (Narayanan et al. 2021). interleaved: 1F1B over
// `virtual_stages` model chunks per device (Narayanan et al. 2021, sec. 2.2). zb-h1: 1F1B with
// the backward split into input- and weight-gradient passes, the weight passes filling the
// bubble (Qi et al. 2023, arXiv:2401.10241, sec. 2.1). zb-v: the same split over two model
// chunks per device placed in a V (Qi et al. 2024, arXiv:2405.15362; chunk_stage below).
// dualpipe: DeepSeek-V3's bidirectional pipeline (DeepSeek-AI 2024, arXiv:2412.19437, sec.
// 3.2.1): micro-batches fed from both ends, each stage holding two of the pp model chunks (its
// own and a second copy of its mirror's); see core/schedule.h.
enum class Schedule { kNaive, kGpipe, k1F1B, kInterleaved, kZbH1, kZbV, kDualPipe };
// How the interleaved schedule warms up (core/schedule.cc, schedule_interleaved). Both take
// (pp - stage - 1) * 2 + (v - 1) * pp chunk forwards before the first backward (capped at the
// stage's m * v), then alternate. megatron: Megatron-LM's, which runs every forward before any
// backward when the micro-batches are exactly pp ("all_warmup_microbatches",
// megatron/core/pipeline_parallel/schedules.py, forward_backward_pipelining_with_interleaving).
// torch: torch.distributed.pipelining's ScheduleInterleaved1F1B (torch/distributed/pipelining/
// schedules.py, _calculate_single_rank_operations, PyTorch 2.5-2.6, torchtitan's), which has no
// such case: at m == pp the last stages start their backwards after the usual warm-up, so they
// hold fewer micro-batches (the head's logits among them).
enum class InterleavedWarmup { kMegatron, kTorch };
// Which implementation decomposes the TP collectives under Plan::tp_comm_overlap.
// te-userbuffers: Transformer Engine's userbuffers (Megatron-Core's --tp-comm-overlap): every
// sequence-parallel all-gather and reduce-scatter of a layer overlapped with a GEMM beside it,
// forward and backward (core/cost/contention.h for its kernels).
// torch-async: PyTorch's async TP (torch._inductor's micro_pipeline_tp pass, torchtitan's
// enable_async_tensor_parallel): only an all-gather whose gathered tensor is the left operand of
// the matmuls after it (fused_all_gather_matmul) and a reduce-scatter whose input is one matmul's
// output (fused_matmul_reduce_scatter) are decomposed; the GEMM runs as tp chunks of m/tp rows,
// the transfers go over copy engines, and the reduce-scatter ends with a reduction kernel of the
// tp partials (core/cost/cost_model.h, tp_overlap_partners and tp_decomposed_gemm_s).
enum class TpOverlapImpl { kTeUserbuffers, kTorchAsync };
// How an MoE layer's tokens reach the experts of other nodes (Plan::moe_dispatcher).
// alltoall: an all-to-all of every routed copy, each copy crossing the network on its own
// (NCCL's all-to-all; Megatron-Core's alltoall dispatcher). deepep: each token crosses to each
// destination node once and is forwarded inside it over NVLink (DeepEP's normal kernels;
// DeepSeek-V3, arXiv:2412.19437 sec. 3.2.2).
enum class MoeDispatcher { kAllToAll, kDeepEp };
// none: store every activation. selective: recompute the attention core (softmax, dropout,
// scores x V), Korthikanti et al. 2022 sec. 5. full: store only each layer's input, recompute
// the layer's forward in the backward pass (of every layer, or of the first
// Plan::recompute_num_layers of each model chunk). selective-op: torchtitan's op-level selective
// activation checkpointing (activation_checkpoint.selective_ac_option = "op";
// torchtitan/models/llama3/infra/parallelize.py, _apply_ac_to_transformer_block): each layer
// saves its input and the outputs of its matmuls, attention kernel and reduce-scatters, except
// every second matmul in forward order; everything else (norms, activations, residuals, the
// matmuls left out) runs again in the layer's backward.
enum class Recompute { kNone, kSelective, kFull, kSelectiveOp };
enum class Optimizer { kAdamW, kSgd, kSgdMomentum };
// optimizer: ZeRO-Offload (Ren et al. 2021, arXiv:2101.06840): optimizer states and the step
// on the host. optimizer+params: ZeRO-3 offload / ZeRO-Infinity (Rajbhandari et al. 2021,
// arXiv:2104.07857, sec. 5): also the 16-bit parameters and gradients off the device, each
// block's parameters fetched before its forward and backward and its gradients sent back
// after its backward; needs zero_stage 3.
enum class Offload { kNone, kOptimizer, kOptimizerParams };
// Where offloaded states live: host DRAM (cpu), or NVMe drives through host memory (nvme,
// ZeRO-Infinity's infinity offload engine).
enum class OffloadDevice { kCpu, kNvme };
// fused: a memory-efficient attention kernel (FlashAttention; no s^2 tensor kept). unfused:
// scores, softmax and dropout materialised (Megatron-LM 2021).
enum class AttentionImpl { kFused, kUnfused };
// Which fused attention kernel runs, where it matters to the time: generic (the default) times
// it at DeviceRates::attention_efficiency of the GEMM rate, never below FlashAttention-2's
// published rate at the task's length on the GPU's architecture (head dim 128 and up); flash2,
// cudnn, flash3 and flash1 (FlashAttention-1, flash-attn 1.x) take the kernel's published rates
// on the GPU's architecture (core/cost/attention_rates.h), so a plan can say what its framework
// runs (Transformer Engine picks cuDNN on Hopper, PyTorch's SDPA FlashAttention-2, Transformer
// Engine 0.8 flash-attn 1.x). Needs attention=fused.
enum class AttentionKernel { kGeneric, kFlash2, kCudnn, kFlash3, kFlash1 };
// The loss over the vocabulary. fused: one kernel over fp32 logits that keeps its softmax for the
// backward (Megatron-LM's vocab-parallel cross-entropy; 4 bytes per logit, Korthikanti et al.
// 2022 sec. 4.3). unfused: PyTorch's eager F.cross_entropy(logits.float(), ...), as torchtitan
// ran it (train.py loss_fn; compiled only from torchtitan commit bbb1b616, April 2025): an fp32
// copy, the log-softmax output kept for the backward, and in the backward the dense gradient of
// the log-probabilities and of the logits beside it, 12 bytes per logit at once.
// cast: the logits cast to an fp32 copy first, then a Megatron-style vocab-parallel loss written
// as separate PyTorch ops into a third buffer that it keeps as the softmax (nanotron 0.5,
// huggingface/nanotron e24d2483: models/llama.py Loss calls sharded_cross_entropy(..., dtype=
// torch.float); parallel/tensor_parallel/functional.py _ShardedCrossEntropy: max, subtract, exp
// in place, sum, divide in place): at the forward's end the bf16 logits, the fp32 copy and the
// fp32 softmax are alive at once, 2 + 4 + 4 = 10 bytes per logit (core/cost/memory.cc), and
// the kernels move the bytes of each op (core/cost/tasks.cc).
enum class CrossEntropy { kFused, kUnfused, kCast };
// The gradients' precision. compute: as the weights (ZeRO's accounting, Rajbhandari et al. 2019
// sec. 3.1: 2 + 2 + 12 bytes per parameter with mixed-precision Adam). fp32: gradients
// accumulated over micro-batches and reduced over data parallelism in fp32, as Megatron-LM does
// for bf16 (its --accumulate-allreduce-grads-in-fp32, main_grad; its distributed optimizer's
// table counts 18 bytes per parameter for bf16 weights with fp32 gradients).
enum class GradPrecision { kCompute, kFp32 };
// How ZeRO-3 gathers a block's parameters. flat: one all-gather of the block's flat shard
// (PyTorch FSDP's flat parameter and FSDP2's all-gather per module, Megatron-Core's distributed
// optimizer buckets, DeepSpeed from 0.5.5 on with _all_gather_base). per-tensor: DeepSpeed
// 0.3.11-0.5.4's ZeRO-3 (deepspeed/runtime/zero/partition_parameters.py, _allgather_param):
// one torch.distributed.all_gather per parameter tensor, each preceded by torch.cuda.synchronize()
// and into a list of world-size views, which PyTorch's ProcessGroupNCCL::allgather of that era
// fills with one copy per rank after the collective. DeepSpeed's own account of why it was
// replaced (commit c0eeb69, PR #1188, 2021-10-31): "the async version is not async at all,
// because each all_gather calls torch.cuda.synchronize()", and "torch.distributed.all_gather will
// do implicit memcpy". So each tensor pays a collective's latency, waits for the compute queued
// before it, and adds world-size copy launches (core/cost/data_parallel.cc).
enum class ZeroGather { kFlat, kPerTensor };
// How ZeRO-1 moves gradients and parameters between a rank's full copy and the data-parallel
// shards. flat: one reduce-scatter of each gradient bucket and one all-gather of the updated
// parameters, each over a flat buffer the collective reads and writes in place (Megatron-Core's
// distributed optimizer, DeepSpeed's ZeRO-1/2, PyTorch FSDP's flat parameter). per-rank:
// nanotron 0.5's ZeroDistributedOptimizer with fp32 gradient accumulation (huggingface/nanotron
// at e24d2483 and 67c5ebb6, the Ultra-Scale Playbook's benchmark branches). The model is not
// wrapped in DDP then (trainer.py _init_model: make_ddp = dp > 1 and not
// (accumulate_grad_in_fp32 and zero_stage > 0)), so no gradient hook runs in the backward:
// after the pipeline has drained, training_step calls sync_gradients_across_dp with
// reduce_scatter=False ("This is too memory hungry, instead we run all_reduce"), one all-reduce
// of the accumulator's contiguous fp32 gradient buffer in place
// (optim/gradient_accumulator.py FP32GradientAccumulator.sync_gradients_across_dp). After the
// optimizer step on this rank's shard (optim/zero.py, _all_gather_params; distributed.py,
// all_gather_coalesced) the updated parameters are flattened once per rank, gathered into a
// list that PyTorch's ProcessGroupNCCL::allgather fills with one copy per rank
// ("outputTensors[i][j].copy_(outputFlattened[i][j], true)"), and copied back one tensor per
// rank (_unflatten_dense_tensors, then copy_): launches per step grow with the data-parallel
// size times the tensors (core/cost/data_parallel.cc). The all-reduce's place after the
// pipeline is the run's (SimOptions::overlap_grad_reduce false; the published entries say so).
// all-reduce: DeepSpeed's BF16_Optimizer under its PipelineEngine (microsoft/DeepSpeed at
// 56c52238, PR #1801 "bf16+pipeline parallelism", 2022-04-19; the branch BLOOM's tr11 README
// names, olruwase/bf16-updates, became it): optimizer states and fp32 master weights sharded as
// in ZeRO-1, but the fp32 gradients are all-reduced whole, not reduce-scattered
// (runtime/pipe/engine.py _exec_reduce_grads -> _bf16_reduce_grads ->
// buffered_allreduce_fallback over optimizer.get_grads_for_reduction(), the unsharded
// fp32_groups_gradients_flat), each bucket flattened into a copy before the all-reduce and
// copied back after it (engine.py allreduce_and_copy); after the step each rank's updated bf16
// shard is all-gathered (bf16_optimizer.py step: all_gather_dp_groups). BLOOM's README: the
// optimizer "doesn't shard the static fp32 buffer it reuses". Twice the gradient bytes of a
// reduce-scatter on the wire.
enum class ZeroCollectives { kFlat, kPerRank, kAllReduce };
// When ZeRO-1/2's parameter all-gather (the updated shards back to every rank) runs
// (Plan::param_gather). after-step: right after the optimizer step, before the step ends
// (Megatron-Core's default, DistributedDataParallelConfig.overlap_param_gather False; DeepSpeed
// ZeRO-1/2). next-forward: overlapped with the next step's forward (overlap_param_gather True):
// each bucket's all-gather is waited for in the forward pre-hook of the first module that reads
// it, which then dispatches the next bucket's (Megatron-LM distributed_data_parallel.py
// _make_forward_pre_hook, param_and_grad_buffer.py finish_param_sync), so a block's gather may
// start once the block before it has started. aligned: the same with align_param_gather True:
// every bucket of a model chunk is dispatched together before the chunk's first forward
// (training.py sets config.param_sync_func to start_param_sync; the pipeline schedules call it).
enum class ParamGather { kAfterStep, kNextForward, kAligned };
// How the layer's elementwise work runs. fused: one kernel per norm and per activation, rotary
// embedding folded into its neighbours (Megatron-LM's and Transformer Engine's fused kernels,
// torch.compile's Inductor fusion; the model as it was before this field). eager: PyTorch eager
// mode's ATen kernels, one per op, with fp32 intermediates, as torchtitan's Llama code issues
// them with compile off (RMSNorm, apply_rotary_emb, FeedForward's SwiGLU; their byte counts,
// launches and saved tensors in core/cost/tasks.cc and memory.cc).
// eager-swiglu: fused norms and rotary embedding, SwiGLU as PyTorch eager's silu then a product
// (nanotron 0.5's GLUActivation, models/llama.py at e24d2483: act(gate) * up, beside its Triton
// RMSNorm and flash-attn's rotary kernel): the eager SwiGLU's kernels and the silu output autograd
// keeps, nothing else of eager.
enum class Elementwise { kFused, kEager, kEagerSwiglu };
// How each micro-batch's gradients reach an unsharded fp32 buffer when they are not accumulated
// inside the weight-gradient GEMMs. none: they are (Megatron-LM's gradient accumulation fusion
// into main_grad), or the gradients stay in the compute precision. cast-add: DeepSpeed's
// BF16_Optimizer (microsoft/DeepSpeed at 56c52238, runtime/bf16_optimizer.py update_hp_grads:
// "hp_grad.data.add_(lp.grad.data.to(hp_grad.dtype)...)", called after every micro-batch's
// backward by runtime/pipe/engine.py _exec_backward_pass; clear_lp_grads sets param.grad to None
// before it): per parameter tensor a cast to fp32 (reads 2 bytes, writes 4) and an add (reads
// 4 + 4, writes 4), two kernels. add: nanotron 0.5's FP32GradientAccumulator (huggingface/
// nanotron e24d2483, optim/gradient_accumulator.py backward -> _accumulate_grad:
// "fp32_grad.add_(half_param.grad)", then half_param.grad = None), one in-place add per tensor
// with the bf16 gradient cast inside the kernel (reads 2 + 4, writes 4); under DDP the last
// micro-batch's adds run in its communication hook (get_fp32_accum_hook), the same kernels per
// bucket. Either way the `precision` gradients stay allocated beside the fp32 buffer until the
// pass frees them (core/cost/memory.cc), and the pass runs on the compute stream after each
// micro-batch's backward (core/cost/tasks.cc). autograd: PyTorch's own accumulation, where
// the 16-bit gradients stay in each parameter's .grad between micro-batches and no buffer or
// hook takes them (AccumulateGrad, torch/csrc/autograd/functions/accumulate_grad.h: the first
// micro-batch's gradient is stolen, each later one added in place, "variable_grad +=
// new_grad"): Megatron-LM 2021 with fp16 and no contiguous buffers (6985e58938,
// megatron/arguments.py 147-161), DeepSpeed's pipeline engine with ZeRO 0 or 1 and no
// overlap_comm (v0.5.10, runtime/zero/stage_1_and_2.py 468-469, reduce_gradients 582-600). One
// add per tensor reading 2 x 2 bytes and writing 2 at fp16, for micro-batches 2..M; the held
// gradient is the plan's gradient buffer, so no memory is added. shard-add: ZeRO-2/3 with a
// fresh unsharded gradient buffer for every micro-batch's backward, zero-filled before the
// backward writes into it (writes the block's padded elements in the gradient precision), and
// each reduce-scatter's result added into a persistent fp32 shard (reads the shard in the
// gradient precision and in fp32, writes it in fp32), one kernel each: trainplan's CPU
// executor (executor/cpu/cpu_stage.cc, CpuStage::grads and reduce_scatter_grad), whose plans
// set it. The add is PyTorch FSDP2's too (foreach_reduce adds a micro-batch's reduced shard into
// the existing sharded .grad), but not DeepSpeed ZeRO-2's, which copies the reduced partition
// (stage_1_and_2.py copy_grads_in_partition). Priced at the block's reduce-scatter
// (core/cost/data_parallel.cc), on its stream; needs ZeRO 2 or 3.
enum class GradAccumulationPass { kNone, kCastAdd, kAdd, kAutograd, kShardAdd };
// Their names in a plan or a published-run entry, in the enum's order.
inline constexpr std::initializer_list<const char*> kGradAccumulationPassNames = {
    "none", "cast-add", "add", "autograd", "shard-add"};
// Whether ZeRO-3 gathers a fully recomputed layer's weights again for its recompute. again:
// the recompute's forward gathers, then the backward gathers once more (DeepSpeed ZeRO-3, whose
// hooks sit on every submodule and fire inside the recompute; the model as it was before this
// field). kept: one gather before the recompute, kept through the layer's backward (PyTorch
// FSDP2 applied around the checkpoint wrapper, as torchtitan does: fully_shard's pre-backward
// hook on the block's outputs unshards it, and the recompute runs the wrapped module, whose
// forward carries no FSDP hook).
enum class ZeroRecomputeGather { kAgain, kKept };
// When ZeRO-3 issues the parameter gather of the block the backward reaches next, relative to
// the gradient reduce-scatter of the block it is in. Both travel on one communicator, so the
// data-parallel stream runs them in the order they are issued (the simulator's one in-order DP
// stream). after-reduce: a block's gather is issued once the block above it has finished its
// backward and issued its reduce-scatter, so it queues behind that reduce-scatter (the model as
// it was before this field). before-reduce: PyTorch FSDP2's backward prefetch: the block's
// pre-backward hook unshards it and then unshards the next block in backward order
// (FSDPParamGroup.pre_backward -> _backward_prefetch, the reverse post-forward order,
// torch/distributed/_composable/fsdp/_fsdp_param_group.py, PyTorch 2.5-2.7), before the
// block's compute and its post-backward reduce-scatter (post_backward -> foreach_reduce). FSDP2's
// separate all-gather and reduce-scatter CUDA streams do not let the two overlap on the wire:
// both use the shard process group (_all_gather_process_group and _reduce_scatter_process_group
// are mesh_info.shard_process_group), one NCCL communicator that runs one collective at a time
// (PyTorch PRs 177015 and 186335, 2026, which add an opt-in separate reduce-scatter group for
// that reason; issue 65299: "one process group to run single NCCL stream only").
enum class ZeroBackwardPrefetch { kAfterReduce, kBeforeReduce };
// The copies PyTorch FSDP makes around ZeRO-3's collectives, by how it lays out a sharded block
// (bytes, launches and streams in core/cost/data_parallel.cc: gather_copy_in, reduce_copy_in,
// zero3_compute_copies).
// none: gathered into place and reduced in place (the model as it was before this field).
// flat-param: FSDP1's FlatParameter (torch/distributed/fsdp/_flat_param.py,
// _runtime_utils.py; PyTorch 2.2-2.3, fms-fsdp). The all-gather writes the padded flat buffer
// the block's parameters are views of: no copy after it. The backward's gradients reach the flat
// gradient through the views' split, whose backward concatenates them (autograd's
// split_with_sizes_backward: one cat on the compute stream); the post-backward hook, on its own
// stream, pads it to a multiple of the group when it is not one (_get_reduce_scatter_tensors'
// F.pad) and divides it by the predivide factor (_div_if_needed, for every reduce dtype) before
// the reduce-scatter.
// per-param: FSDP2's per-parameter sharding (fully_shard; torch/distributed/_composable/fsdp/
// _fsdp_collectives.py, PyTorch 2.4-2.8, torchtitan and OLMo-core). Before each all-gather each
// parameter's fp32 shard is cast to the gathered dtype and copied into the flat input
// (FSDPParam.all_gather_inputs, then _foreach_copy_, on the all-gather copy-in stream); after it,
// foreach_all_gather_copy_out splits the flat output into each parameter's own storage
// (split_with_sizes_copy, one kernel) on the compute stream, in the block's pre-forward or
// pre-backward (wait_for_unshard); before each reduce-scatter, foreach_reduce copies the
// per-parameter gradients into the flat input in the reduce dtype (torch._chunk_cat, one kernel
// that also casts) on the reduce-scatter stream. No predivide for a bf16 or fp32 reduce (NCCL's
// AVG: _get_gradient_divide_factors).
enum class ZeroCopies { kNone, kFlatParam, kPerParam };
// How an FP8 tensor's scale is found (core/cost/tasks.cc, apply_fp8). current: from this
// tensor's amax, one extra read of it before the cast (Transformer Engine's
// Float8CurrentScaling; torchao float8's dynamic tensorwise scaling). delayed: from the amax
// history of earlier steps, the amax recorded during the cast itself (Transformer Engine's
// DelayedScaling, the only TE recipe before TE 2.2 and NeMo's default through 2024). block:
// one scale per block of elements found inside the cast kernel from the block itself, one read
// (MXFP8's 32-element blocks with an 8-bit scale, TE's MXFP8BlockScaling on Blackwell;
// DeepSeek-V3's 1x128 and 128x128 tiles, arXiv:2412.19437 sec. 3.3.2).
// nvfp4: not FP8 but the recipe Transformer Engine runs in its place, under the same autocast
// (TE 2.8 NVFP4BlockScaling, transformer_engine/common/recipe/__init__.py; Megatron-Core's
// --fp4-format e2m1 --fp4-recipe nvfp4; arXiv:2509.25149): the linear GEMMs' operands are FP4
// (E2M1) in blocks of 16 elements, each block with an E4M3 scale, and a per-tensor FP32 scale
// from the tensor's amax; the GEMMs (forward, data and weight gradients) run at the GPU's FP4
// rate (Blackwell). Weights take 16x16 blocks, activations and gradients 1x16; the two are the
// same bytes. Stochastic rounding of the gradients is done inside the cast (no bytes); the
// random Hadamard transform of the weight-gradient operands is not costed (the runs the corpus
// holds turn it off: NVTE_NVFP4_DISABLE_RHT=1).
enum class Fp8Scaling { kCurrent, kDelayed, kBlock, kNvfp4 };
// Where the expert layers' ranks sit. carved: ep consecutive data-parallel replicas at the same
// tp and cp coordinates exchange tokens (ep divides dp), and the experts are split over the
// attention's tp ranks; with sequence parallelism each TP rank routes its own rows and the TP group
// gathers what the all-to-all brought (Plan::moe_routes_own_rows), without it they all route the
// same (gathered) tokens; the layout of Megatron-Core
// before 0.10 (parallel_state.py's RankGenerator carved ep out of dp, "The ep and dp must be
// adjacent in order") and of the CPU executor. folded: Megatron-Core's MoE parallel folding
// (from core_v0.10.0, Megatron-LM commit 7f22e210cd, 2024-11-23, "MoE parallel folding:
// separate MoE parallel states from dense"; Liu et al. 2025, arXiv:2504.14960): the
// tp*cp*dp ranks of each pipeline stage are divided again for the expert layers, as expert_tp
// x ep x expert data parallel, innermost first (parallel_state.initialize_model_parallel builds
// expert_decoder_rank_generator with tp=expert_tensor_parallel_size, ep, dp=the rest, cp=1, in
// the dense order "tp-cp-ep-dp-pp"), so an expert group may span the attention's tp and cp ranks
// and ep need not divide dp. Each rank routes its own sequence-parallel share of the tokens
// (MoELayer refuses tp > 1 without sequence parallelism), sends them over ep, and the expert_tp
// ranks of an expert gather what they received and scatter the result back
// (MoEAlltoAllTokenDispatcher: "A2A(EP) -> AG(TP) -> ... -> RS(TP) -> A2A(EP)";
// core/cost/tasks.cc).
enum class ExpertLayout { kCarved, kFolded };
// How context parallelism (cp > 1) moves keys and values between the cp ranks, as each framework's
// code runs it (core/cost/tasks.cc prices each: bytes, kernels, and what overlaps what).
// all-gather: the whole sequence's K and V all-gathered before the attention and gathered again
// for its backward, whose K and V gradients are reduce-scattered back; nothing overlaps
// (Llama 3, arXiv:2407.21783 sec. 3.3.2; Transformer Engine's AttnFuncWithCPAndKVAllGather,
// cp_comm_type "all_gather" from TE 1.10: "The all-gather is not async, and cannot be
// overlapped", Megatron-LM 91a8a4c8dc transformer_config.py). The model as it was before this
// field, and what the CPU executor runs.
// p2p: Transformer Engine's ring (AttnFuncWithCP in TE 1.4-1.9, the only CP form before
// cp_comm_type; AttnFuncWithCPAndKVP2P after, and the default of TE's and Megatron-Core's
// cp_comm_type): cp attention steps per layer, each rank's K and V passed to the next rank with
// send/recv while the current step's attention runs; step 0 causal on the rank's own 2 chunks,
// the others unmasked on half the queries or half the keys; the partial outputs merged by their
// softmax statistics; the backward passes K, V and the K/V gradients around the ring the same way.
// a2a: Transformer Engine's AttnFuncWithCPAndQKVOA2A (DeepSpeed Ulysses): Q, K and V all-to-all'd
// from sequence to head sharding, one attention over the whole sequence on heads/cp heads, the
// output all-to-all'd back; the backward all-to-alls the output and its gradient, then Q, K and V's
// gradients. Needs the attention and KV heads per TP rank divisible by cp.
// torch-allgather: PyTorch's torch.distributed.tensor.experimental context_parallel with
// set_rotate_method("allgather") (its default; torchtitan's experimental.context_parallel_
// rotate_method default "allgather", 9dec370): one all-gather of K and V issued before the first
// step's attention and waited for by the second, cp SDPA calls on the load-balanced chunks, each
// output merged into an fp32 output and log-sum-exp; the backward gathers again and passes the
// K/V gradients, in fp32, around the ring with an all-to-all per step.
// torch-alltoall: the same with set_rotate_method("alltoall"): K and V passed to the next rank
// each step (all-to-all with one peer, ft_c.permute_tensor) instead of gathered once.
enum class CpComm { kAllGather, kP2p, kA2a, kTorchAllGather, kTorchAllToAll };

std::string_view to_string(Schedule s);
std::string_view to_string(Recompute r);
std::string_view to_string(Optimizer o);
std::string_view to_string(Offload o);
std::string_view to_string(OffloadDevice o);
std::string_view to_string(AttentionImpl a);
std::string_view to_string(AttentionKernel k);
std::string_view to_string(CrossEntropy c);
std::string_view to_string(GradPrecision g);
std::string_view to_string(ZeroGather g);
std::string_view to_string(ZeroCollectives c);
std::string_view to_string(ParamGather g);
std::string_view to_string(Elementwise e);
std::string_view to_string(GradAccumulationPass g);
std::string_view to_string(ZeroRecomputeGather g);
std::string_view to_string(ZeroBackwardPrefetch p);
std::string_view to_string(ZeroCopies c);
std::string_view to_string(InterleavedWarmup w);
std::string_view to_string(TpOverlapImpl i);
std::string_view to_string(MoeDispatcher d);
std::string_view to_string(Fp8Scaling s);
std::string_view to_string(ExpertLayout l);
std::string_view to_string(CpComm c);

struct Plan {
  std::int64_t tp = 1;                 // tensor-parallel degree (Megatron column/row split)
  // Context-parallel degree: each sequence split into cp parts, every rank of a CP group holding
  // 2 of the sequence's 2*cp chunks (chunks i and 2*cp-1-i, which balances causal attention).
  // Weights are replicated over the cp ranks like data-parallel replicas (Megatron-Core's
  // context parallelism; Llama 3, arXiv:2407.21783 sec. 3.3.2).
  std::int64_t cp = 1;
  // How the cp ranks move keys and values (cp > 1); see CpComm.
  CpComm cp_comm = CpComm::kAllGather;
  // cp > 1: the model's code repeats K and V to every query head before the attention call that
  // the context-parallel ring wraps (torchtitan's repeat_kv at 9dec370, torchtitan/models/llama/
  // model.py: expand + reshape, a copy, then F.scaled_dot_product_attention), so the ring moves,
  // copies and accumulates K, V and their gradients at the query heads' width (heads x head_dim)
  // instead of the KV heads' (core/cost/tasks.cc Shape::ring_kv). false: the attention takes the
  // KV heads as they are (Transformer Engine's and FlashAttention's GQA).
  bool cp_kv_expanded = false;
  std::int64_t pp = 1;                 // pipeline stages (physical)
  std::int64_t dp = 1;                 // data-parallel replicas
  std::int64_t ep = 1;                 // expert-parallel degree (MoE); placed by expert_layout
  ExpertLayout expert_layout = ExpertLayout::kCarved;
  // With expert_layout folded: the ranks each expert's weights are split over (Megatron-Core's
  // --expert-tensor-parallel-size), 0 for tp (Megatron-LM's default: "if
  // args.expert_tensor_parallel_size is None: ... = args.tensor_model_parallel_size"). Carved
  // experts are split over tp.
  std::int64_t expert_tp = 0;
  int zero_stage = 0;                  // 0: DDP, 1: optimizer states, 2: + gradients, 3: + weights
  // Hybrid sharding (PyTorch FSDP's HYBRID_SHARD and torchtitan's HSDP; DeepSpeed's MiCS, Zhang
  // et al. 2022, arXiv:2205.00119): ZeRO shards over groups of this many of the dp*cp ranks,
  // consecutive in placement (a node's, when they fit in one), and the dp*cp/zero_shard_size
  // groups are replicas that sum their reduced gradient shards with one all-reduce across
  // groups per step. 0: one group of all dp*cp ranks (plain ZeRO / FSDP). Needs zero_stage >= 1.
  std::int64_t zero_shard_size = 0;
  std::int64_t micro_batch_size = 1;   // sequences per micro-batch per replica
  std::int64_t global_batch_size = 1;  // sequences per optimizer step, all replicas
  Schedule schedule = Schedule::k1F1B;
  std::int64_t virtual_stages = 1;     // model chunks per device (interleaved; 2: zb-v, dualpipe)
  InterleavedWarmup interleaved_warmup = InterleavedWarmup::kMegatron;  // with interleaved
  Recompute recompute = Recompute::kNone;
  // Full recompute of only the first N layers of each model chunk, the others storing every
  // activation (Megatron-LM's --recompute-method block --recompute-num-layers N; the "skip"
  // checkpointing that leaves out layers while memory allows). 0: every layer.
  std::int64_t recompute_num_layers = 0;
  // ZeRO-R's partitioned activation checkpoints (Rajbhandari et al. 2019, sec. 6.1, "Pa";
  // DeepSpeed's activation_checkpointing.partition_activations): under full recompute each
  // recomputed layer's stored input is split over the TP ranks (each keeps its seq_len/tp
  // tokens) and all-gathered again before the layer's recompute. Needs recompute full, tp >= 2
  // and no sequence parallelism (which already stores the input split).
  bool partition_activations = false;
  // Checkpoints in host memory (the seed notes' activation CPU offloading; DeepSpeed's
  // activation_checkpointing.cpu_checkpointing): under full recompute each recomputed layer's
  // stored input (partitioned or whole) goes to the host over PCIe after the layer's forward
  // and comes back before its recompute, fetched while the layer above it is back-propagated.
  bool offload_checkpoints = false;
  bool sequence_parallel = false;      // Korthikanti et al. 2022: shard norms/dropout over tp
  Precision precision = Precision::kBf16;
  Optimizer optimizer = Optimizer::kAdamW;
  Offload offload = Offload::kNone;
  OffloadDevice offload_device = OffloadDevice::kCpu;  // where offloaded states live
  AttentionImpl attention = AttentionImpl::kFused;
  AttentionKernel attention_kernel = AttentionKernel::kGeneric;
  CrossEntropy cross_entropy = CrossEntropy::kFused;
  GradPrecision grad_precision = GradPrecision::kCompute;
  ZeroGather zero3_gather = ZeroGather::kFlat;  // with zero_stage 3
  ZeroCollectives zero1_collectives = ZeroCollectives::kFlat;  // with zero_stage 1
  // When ZeRO-1/2's parameter all-gather runs (ParamGather): after the optimizer step, or
  // overlapped with the next step's forward. The bytes are the same. Needs zero_stage 1 or 2
  // (with zero_stage 1, zero1_collectives flat: Megatron-Core's distributed optimizer).
  ParamGather param_gather = ParamGather::kAfterStep;
  // The data-parallel collectives of DDP and ZeRO-1/2 (the gradient all-reduce or
  // reduce-scatter, the parameter all-gather) issued per bucket of this many elements instead of
  // once per parameter block: a block of E elements runs k = ceil(E / dp_bucket_elements)
  // collectives of E / k elements back to back, the same bytes, each paying its own latency
  // (NCCL's, collectives.h). 0: one collective per block (the model before this field). Source:
  // apex's DistributedFusedAdam, the optimizer NeMo 1.x's distributed_fused_adam runs
  // (NVIDIA/apex apex/contrib/optimizers/distributed_fused_adam.py): "the parameters are
  // flattened, grouped into fixed-size buckets" of bucket_cap_mb x 2^20 / (bytes of
  // grad_sync_dtype) elements, a parameter split over buckets where it crosses one
  // (ParameterFragment.bucket_id), and each bucket reduce-scattered and all-gathered on its own.
  // Blocks smaller than a bucket keep one collective each: several blocks coalesced into one
  // bucket (fewer latencies) are not modelled, nor buckets that close only at a tensor's end
  // (Megatron-Core's bucket_size, PyTorch DDP's bucket_cap_mb). Needs zero_stage 0, 1 or 2.
  std::int64_t dp_bucket_elements = 0;
  // PyTorch DDP without gradient_as_bucket_view (its default): the Reducer keeps its own copy of
  // every gradient in its buckets, in the parameters' precision, beside the parameters' .grad
  // (PyTorch's DistributedDataParallel documentation: gradient_as_bucket_view "can reduce peak
  // memory usage, where the saved memory size will be equal to the total gradients size").
  // nanotron 0.5 builds DDP so (trainer.py at e24d2483) where it builds DDP at all (dp > 1
  // without ZeRO-1: see ZeroCollectives per-rank) and accumulates into its own fp32 buffer
  // besides. Memory only (core/cost/memory.cc). Needs zero_stage 0 or 1 (DDP).
  bool ddp_bucket_copy = false;
  // Gradients accumulated over micro-batches by a separate pass instead of inside the weight-
  // gradient GEMMs (GradAccumulationPass). cast-add and add need grad_precision fp32, a 16-bit
  // precision and ZeRO 0 or 1; autograd ZeRO 0 or 1; shard-add ZeRO 2 or 3.
  GradAccumulationPass grad_accumulation_pass = GradAccumulationPass::kNone;
  // Megatron-LM's scatter/gather of pipeline messages (Narayanan et al. 2021, arXiv:2104.04473
  // sec. 4.1; megatron/p2p_communication.py at 6985e58938, lines 59-66, 87-94, 132-141): each TP
  // rank sends 1/tp of the stage boundary's activation to its peer in the next stage, and the
  // receiver all-gathers the pieces over the TP group before the pass that reads them. On by
  // default in Megatron-LM from 72e4230bb5 (2021-02-16) until p2p moved into megatron/core
  // (39b83c7953, 2023-01-31), which sends the whole tensor from every TP rank: hence off here.
  // Needs tp > 1, pp > 1 and no sequence parallelism (which already sends 1/tp; Megatron-LM
  // skipped the optimisation under it).
  bool pipeline_scatter_gather = false;
  ZeroRecomputeGather zero3_recompute_gather = ZeroRecomputeGather::kAgain;  // with zero_stage 3
  ZeroBackwardPrefetch zero3_backward_prefetch = ZeroBackwardPrefetch::kAfterReduce;  // with zero_stage 3
  ZeroCopies zero3_copies = ZeroCopies::kNone;  // with zero_stage 3 and zero3_gather flat
  Elementwise elementwise = Elementwise::kFused;
  // FP8 training (Micikevicius et al. 2022, arXiv:2209.05433; Transformer Engine, torchao
  // float8): the transformer layers' linear GEMMs take FP8 operands, scaled per tensor, at the
  // FP8 tensor-core rate; weights, activations, gradients and every other kernel stay in
  // `precision` (bf16 or fp16). Needs a GPU with FP8 tensor cores (Hopper or newer).
  bool fp8 = false;
  Fp8Scaling fp8_scaling = Fp8Scaling::kCurrent;  // with fp8
  // With fp8: each weight cast to FP8 once per step and reused by the step's other
  // micro-batches (Transformer Engine's is_first_microbatch, passed by Megatron-Core's TE
  // layers); false: cast on every micro-batch (torchao float8).
  bool fp8_weight_cache = false;
  // With fp8 and zero_stage 3: FSDP2 all-gathers the linear layers' weights already cast to
  // FP8, one byte per element instead of `precision`'s two (torchao float8's
  // enable_fsdp_float8_all_gather with precompute_float8_dynamic_scale_for_fsdp:
  // WeightWithDynamicFloat8CastTensor.fsdp_pre_all_gather casts the local fp32 shard with a scale
  // precomputed once per step, torchao/float8/fsdp_utils.py). The norms, the embedding and the
  // LM head (which torchtitan leaves out of float8) still travel in `precision`; the gathered
  // weight needs no cast of its own (core/cost/data_parallel.cc, tasks.cc apply_fp8).
  // With zero_stage 1 or 2 (zero1_collectives flat): Megatron-Core's distributed optimizer
  // with fp8_param_gather (--fp8-param-gather): the model's linear weights are FP8 tensors
  // (Transformer Engine's fp8_model_init), the optimizer casts its fp32 shard of them to FP8
  // after the step and all-gathers one byte per element (megatron/core/optimizer/
  // distrib_optimizer.py at d98e8a64, _copy_main_params_to_model_params: quantize_param_shard); the
  // norms, embedding and output layer stay in `precision`. The weight then needs no per-micro-batch
  // cast: each step casts the shard once, and the transposed copy is cached per step. Memory
  // is not changed by it (the weights' FP8 storage is not modelled, as for ZeRO-3).
  bool fp8_all_gather = false;
  // With fp8: the fused attention kernel on FP8 Q, K, V (and dO, O in its backward), Transformer
  // Engine's FP8 dot-product attention (fp8_dpa; Megatron-Core's --fp8-dot-product-attention;
  // NeMo's FP8_DPA), run by cuDNN: timed at cuDNN's published FP8 rate
  // (core/cost/attention_rates.h), which exists for Blackwell only, so the plan needs
  // attention_kernel cudnn there. Each of Q, K, V is cast under current scaling before the
  // forward (an amax read, a cast read, a one-byte write; TE's Float8CurrentScaling, which
  // NVTE_DPA_FP8_RECIPE names in the runs the corpus holds) and O and dO before the backward;
  // the output stays 16-bit (NVTE_DPA_FP8CS_O_in_F16). The other attention tasks are unchanged.
  bool fp8_attention = false;
  // Expert all-to-all overlapped across micro-batches (Megatron-Core's
  // overlap_moe_expert_parallel_comm; DeepSeek-V3's DualPipe, arXiv:2412.19437 sec. 3.2.1): in
  // the 1F1B steady state each backward runs merged with the forward that follows it, so one's
  // dispatch and combine travel while the other computes. Needs ep > 1 and a 1F1B schedule.
  bool ep_overlap = false;
  // The expert all-to-all's dispatcher (MoeDispatcher). deepep: the network carries each token
  // once per destination node; the expected share of a buffer that leaves the node is
  // collectives.h all_to_all_inter_node_share with the model's experts as one router group
  // (node-limited routing, ModelSpec::router_groups, is priced that way under either
  // dispatcher, as DeepSeek-V3's runs). The bytes each rank hands the collective are the same.
  // Needs ep >= 2.
  MoeDispatcher moe_dispatcher = MoeDispatcher::kAllToAll;
  // TP collectives overlapped with the GEMMs beside them (Megatron-Core's --tp-comm-overlap
  // with Transformer Engine's userbuffers; PyTorch's async TP; MegaScale sec. 3.2; Wang et al.,
  // ASPLOS 2023, "decomposition"): each sequence-parallel all-gather is split into tp chunks
  // that the GEMM it feeds consumes as they arrive, and each reduce-scatter sends the chunks of
  // the GEMM before it as they are computed. Needs tp >= 2 and sequence parallelism.
  bool tp_comm_overlap = false;
  // Which implementation overlaps them (TpOverlapImpl); needs tp_comm_overlap.
  TpOverlapImpl tp_comm_overlap_impl = TpOverlapImpl::kTeUserbuffers;
  // The output layer's weight-gradient GEMMs deferred to the pipeline flush (Megatron-Core's
  // defer_embedding_wgrad_compute, megatron/core/tensor_parallel/layers.py
  // LinearWithGradAccumulationAndAsyncCommunication.backward and
  // pipeline_parallel/schedules.py finish_embedding_wgrad_compute, core_v0.11.0): on the last
  // pipeline stage the backward of each of the step's first wgrad_deferral_limit micro-batches
  // (0: all of them) computes only the head's input gradient and keeps the head's input and its
  // output gradient; after the stage's last backward the kept weight-gradient GEMMs run one
  // after another, while the stages before it drain, before the data-parallel gradient
  // reduction. Needs pp > 1 and a schedule whose backwards are whole (not zb-h1 / zb-v).
  bool defer_embedding_wgrad = false;
  std::int64_t wgrad_deferral_limit = 0;
  // Layers per model chunk, in pipeline order (pp * virtual_stages entries). Empty: even split.
  std::vector<std::int64_t> layers_per_stage;

  std::int64_t world_size() const { return tp * cp * pp * dp; }
  // Ranks that hold the same dense weights and sum their gradients: the data-parallel replicas
  // and, within each, the context-parallel ranks (Megatron-Core's data-parallel group "with
  // context parallel"). ZeRO shards over all of them, or over zero_shard_ranks() of them.
  std::int64_t dp_cp() const { return dp * cp; }
  // Ranks one ZeRO shard group spans (Plan::zero_shard_size, or all dp*cp), and how many such
  // groups replicate each other.
  std::int64_t zero_shard_ranks() const { return zero_shard_size > 0 ? zero_shard_size : dp_cp(); }
  std::int64_t zero_replicas() const { return dp_cp() / zero_shard_ranks(); }
  // The experts' tensor-parallel degree: expert_tp (tp when 0) when folded, tp when carved.
  std::int64_t expert_tp_size() const {
    return expert_layout == ExpertLayout::kFolded && expert_tp > 0 ? expert_tp : tp;
  }
  // Whether each rank of an MoE layer routes its own sequence-parallel rows, the expert's TP ranks
  // gathering the rows the all-to-all brought them before the experts and reduce-scattering the
  // outputs after: folded, and carved with tp > 1 and sequence parallelism, as Megatron-Core's
  // MoEAlltoAllTokenDispatcher runs both (core_v0.6.0 cac60ce4c8 all_to_all_sp2hp before the ep
  // all-to-all; core_v0.9.0 1afee592e8 token_dispatcher.py l.515-533: permute, ep all-to-all, then
  // gather_from_sequence_parallel_region over TP; validation/corpus/NOTES.md, twenty-eighth pass).
  // Otherwise (carved without SP) every TP rank routes the TP-gathered tokens.
  bool moe_routes_own_rows() const {
    return expert_layout == ExpertLayout::kFolded || (sequence_parallel && tp > 1);
  }
  // Ranks that hold the same experts and sum their gradients: folded, the stage's tp*cp*dp
  // ranks over expert_tp*ep; carved, the dp/ep replicas holding them times the cp ranks.
  std::int64_t expert_dp() const {
    return expert_layout == ExpertLayout::kFolded ? tp * cp * dp / (expert_tp_size() * ep)
                                                  : dp / ep * cp;
  }
  // Model chunks (pipeline order). dualpipe splits the model in pp chunks and holds each twice.
  std::int64_t num_chunks() const {
    return schedule == Schedule::kDualPipe ? pp : pp * virtual_stages;
  }
  // Micro-batches per replica per step (M). Only meaningful for a validated plan.
  std::int64_t num_micro_batches() const { return global_batch_size / (micro_batch_size * dp); }
};

struct PlanLimits {
  static constexpr std::int64_t kMaxDegree = std::int64_t{1} << 24;
  static constexpr std::int64_t kMaxBatch = std::int64_t{1} << 30;
  static constexpr std::int64_t kMaxVirtualStages = 1024;
  // Plan::dp_bucket_elements, when set: at least 2^16 (a block then splits into at most 2^24
  // collectives for any block a rank can hold), at most 2^40.
  static constexpr std::int64_t kMinBucketElements = std::int64_t{1} << 16;
  static constexpr std::int64_t kMaxBucketElements = std::int64_t{1} << 40;
};

Result<Plan> plan_from_json(const Json& json, std::string_view source);
Json plan_to_json(const Plan& plan);
// One line: "tp=8 pp=4 dp=2 zero=1 mbs=2 1f1b recompute=full sp" ("tp=8 cp=2 pp=4 ..." with
// context parallelism; "recompute=full:3" for the first 3 layers of each chunk; "zero=3/8"
// for ZeRO-3 sharded over groups of 8).
std::string describe(const Plan& plan);

// Checks that the plan is consistent on its own (degrees, batch divisibility, schedule fields).
Status validate_plan(const Plan& plan);
// Checks the plan against a model and a world size: why it cannot run, or Ok. The planner uses
// the same checks to prune, so messages read as reasons ("tp=16 does not divide ...").
Status check_plan_fits_model(const Plan& plan, const ModelSpec& model);
Status check_plan_world_size(const Plan& plan, std::int64_t world_size);

// Layers held by each model chunk (pp * virtual_stages entries), in pipeline order; the chunk's
// stage is chunk_stage.
std::vector<std::int64_t> chunk_layers(const Plan& plan, const ModelSpec& model);

// Chunk placement: which pipeline stage holds model chunk `chunk` (0 .. num_chunks-1, pipeline
// order), and which model chunk is the `local`-th (0 .. virtual_stages-1) of `stage`. The one
// mapping every layer (cost, simulator, planner, executor) reads. Round-robin (Megatron-LM's
// interleaved assignment, Narayanan et al. 2021 sec. 2.2): chunk c on stage c % pp. V (zb-v;
// Qi et al. 2024, arXiv:2405.15362, sec. 4, and sail-sg/zero-bubble-pipeline-parallelism's
// zbv scheduler): stage s holds chunks s and 2pp-1-s, so the forward runs down the stages and
// back up, and the first stage holds both the embedding and the head. DualPipe (DeepSeek-V3 sec.
// 3.2.1; deepseek-ai/DualPipe's example gives rank r modules r and pp-1-r): local 0 of stage s
// is chunk s, for micro-batches fed at stage 0 (direction 0); local 1 is chunk pp-1-s, for
// those fed at stage pp-1 (direction 1); chunk_stage without a direction gives direction 0's.
std::int64_t chunk_stage(const Plan& plan, std::int64_t chunk);
std::int64_t chunk_stage(const Plan& plan, std::int64_t chunk, std::int64_t direction);
std::int64_t stage_chunk(const Plan& plan, std::int64_t stage, std::int64_t local);
// The stage that holds the LM head and the loss (the last model chunk's; dualpipe: direction
// 0's, stage pp-1; stage 0 holds direction 1's).
std::int64_t head_stage(const Plan& plan);
// Whether `stage` holds the embedding (chunk 0) or the head and loss (the last chunk): stage 0
// and head_stage, and with dualpipe both end stages both.
bool stage_holds_embedding(const Plan& plan, std::int64_t stage);
bool stage_holds_head(const Plan& plan, std::int64_t stage);
// DualPipe: micro-batches 0 .. M/2-1 run in direction 0, the rest in direction 1 (0 for every
// other schedule); and how many micro-batches each chunk copy sees per step (M, or M/2).
std::int64_t pipeline_direction(const Plan& plan, std::int64_t micro_batch);
std::int64_t chunk_copy_micro_batches(const Plan& plan);
// Whether the embedding and the head sit on different stages, so a tied table has two copies
// whose gradients are summed over the embedding group (Megatron-LM's pp > 1 with round-robin).
bool splits_tied_embedding(const Plan& plan);
// Layers per model chunk for `layers` that do not divide evenly over `chunks` (needs layers >=
// chunks): the end stages, which also hold the embedding and the LM head, take the shortfall.
std::vector<std::int64_t> balanced_chunk_layers(std::int64_t layers, std::int64_t chunks);
// Whether the layer at `index_in_chunk` of its model chunk is fully recomputed, and how many
// of a chunk of `chunk_layers` are (the first recompute_num_layers, or all).
bool recomputes_layer(const Plan& plan, std::int64_t index_in_chunk);
// "none", "selective", "full", or "full:3" for the first 3 layers of each chunk.
std::string recompute_label(const Plan& plan);
// "3", or "3/8" for ZeRO-3 sharded over groups of 8 (Plan::zero_shard_size).
std::string zero_label(const Plan& plan);
std::int64_t recomputed_layers_in_chunk(const Plan& plan, std::int64_t chunk_layers);

}  // namespace trainplan
