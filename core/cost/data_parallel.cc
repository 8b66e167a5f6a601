// The cost model's data-parallel questions: which collectives a parameter block issues at each
// point of the step (DDP all-reduce, ZeRO-1/2/3 reduce-scatters and gathers, hybrid sharding's
// cross-group sum, tied-embedding and sequence-parallel norm sums), how often each point occurs,
// and the ZeRO-2/3 gradient buffer a block holds. Sources in cost_model.h.
// Tested by tests/core/cost_model_test.cc (DP block tasks, ZeRO points and buffers).
#include "core/cost/cost_model.h"

#include <algorithm>
#include <cmath>

#include "core/cost/internal.h"

namespace trainplan {

using namespace cost_internal;

// ---------------------------------------------------------------------------------------------
// Data parallel

namespace {
// A flat buffer of `params` elements padded to a multiple of the group size, so that every rank
// owns an equal shard (Megatron-LM's distributed optimizer pads the same way).
std::int64_t padded(std::int64_t params, std::int64_t n) { return (params + n - 1) / n * n; }

// The gradient elements of block b a rank holds at the step's end: all of them, or under
// ZeRO-2/3 its shard of each part.
double mirror_grad_elements(const Plan& p, const ParamBlock& b) {
  if (p.zero_stage < 2) return static_cast<double>(b.dense_params + b.expert_params);
  const std::int64_t dense = p.zero_shard_ranks(), expert = expert_dp_cp(p);
  return static_cast<double>(padded(b.dense_params, dense) / dense +
                             padded(b.expert_params, expert) / expert);
}
}  // namespace

std::int64_t expert_dp_cp(const Plan& p) { return p.expert_dp(); }

std::int64_t dp_point_count(const Plan& p, const ParamBlock& b, DpPoint point) {
  switch (point) {
    case DpPoint::kBeforeForward: return chunk_copy_micro_batches(p) * (b.read_by_head ? 2 : 1);
    case DpPoint::kBeforeBackward:
      // Plan::zero3_recompute_gather kept: a recomputed layer's gather came before its recompute.
      if (p.zero_stage == 3 && p.zero3_recompute_gather == ZeroRecomputeGather::kKept &&
          b.kind == BlockKind::kLayer && b.recomputed)
        return 0;
      return chunk_copy_micro_batches(p) * (b.read_by_head ? 2 : 1);
    case DpPoint::kAfterBackward: return chunk_copy_micro_batches(p);
    case DpPoint::kBeforeRecompute: return b.recomputed ? chunk_copy_micro_batches(p) : 0;
    case DpPoint::kAfterLastBackward:
    case DpPoint::kAfterOptimizer: return 1;
  }
  return 0;
}

double zero_grad_buffer_bytes(const Plan& p, const ParamBlock& b) {
  if (p.zero_stage < 2) return 0;
  const double e = grad_bytes_per_element(p);
  const std::int64_t dense = p.zero_shard_ranks(), expert = expert_dp_cp(p);
  double bytes = 0;
  if (dense > 1) bytes += d(padded(b.dense_params, dense)) * e;
  if (expert > 1) bytes += d(padded(b.expert_params, expert)) * e;
  return bytes;
}

namespace {
// Plan::zero3_gather per-tensor (DeepSpeed 0.3.11-0.5.4; sources at the enum): one all-gather per
// parameter tensor, each paying its own latency, then PyTorch's list all-gather copies the
// gathered tensor into the group's n views, one launch per rank (ProcessGroupNCCL::allgather,
// "outputTensors[i][j].copy_(outputFlattened[i][j])"), reading and writing it once in all. The
// part's parameters are split evenly over its tensors: only the count matters to the latencies
// and launches, and the bytes sum to the part's (each piece padded to the group).
void add_per_tensor_gathers(std::vector<Task>& out, std::string_view name, CommGroup group,
                            std::int64_t n, std::int64_t params, std::int64_t tensors,
                            double bytes_per_element) {
  if (params <= 0 || n <= 1) return;
  const std::int64_t pieces = std::max<std::int64_t>(1, tensors);
  const double bytes = d(padded((params + pieces - 1) / pieces, n)) * bytes_per_element;
  for (std::int64_t i = 0; i < pieces; ++i) {
    out.push_back(comm(name, Collective::kAllGather, group, n, bytes));
    Task copies = memory("zero3_gather_copies", 2.0 * bytes, MemoryKernel::kElementwise);
    copies.launches = n;
    out.push_back(copies);
  }
}

// Plan::zero1_collectives per-rank (nanotron 0.5; sources at the enum).
// Around the parameter all-gather: before it, one flatten per rank of that rank's slices of
// every tensor (all_gather_coalesced's output lists; the whole block read and written) and the
// flatten of this rank's own shard; after it, ProcessGroupNCCL's copy out of the flat output
// into each of the n list entries and one copy per rank and tensor back into the parameters
// (_unflatten_dense_tensors, copy_), each reading and writing the whole block once.
void add_per_rank_gather(std::vector<Task>& out, std::string_view name, CommGroup group,
                         std::int64_t n, std::int64_t params, std::int64_t tensors,
                         double bytes_per_element) {
  if (params <= 0 || n <= 1) return;
  const std::int64_t pieces = std::max<std::int64_t>(1, tensors);
  Task flatten = memory("zero1_gather_rank_flatten",
                        (2.0 * d(params) + 2.0 * d(params) / d(n)) * bytes_per_element,
                        MemoryKernel::kElementwise);
  flatten.launches = n + 1;
  out.push_back(flatten);
  out.push_back(comm(name, Collective::kAllGather, group, n,
                     d(padded(params, n)) * bytes_per_element));
  Task copies = memory("zero1_gather_rank_copies", 2.0 * 2.0 * d(params) * bytes_per_element,
                       MemoryKernel::kElementwise);
  copies.launches = n * (pieces + 1);
  out.push_back(copies);
}

// Plan::zero1_collectives all-reduce (DeepSpeed's BF16_Optimizer; sources at the enum): the
// block's fp32 gradients all-reduced whole over the group, the bucket flattened into a copy
// before the collective and copied back after it (engine.py allreduce_bucket's flatten,
// allreduce_and_copy's buf.copy_), each copy reading and writing the gradients once. Buckets
// hold up to 500M elements (buffered_allreduce_fallback's elements_per_buffer) and a block
// fills one: a flatten and a copy back per block.
void add_whole_grad_all_reduce(std::vector<Task>& out, std::string_view name, CommGroup group,
                               std::int64_t n, std::int64_t params, double grad_bytes) {
  if (params <= 0 || n <= 1) return;
  Task flatten = memory("zero1_grad_flatten", 2.0 * d(params) * grad_bytes,
                        MemoryKernel::kElementwise);
  out.push_back(flatten);
  out.push_back(comm(name, Collective::kAllReduce, group, n, d(params) * grad_bytes));
  Task back = memory("zero1_grad_unflatten", 2.0 * d(params) * grad_bytes,
                     MemoryKernel::kElementwise);
  out.push_back(back);
}

// Plan::zero3_copies (sources at the enum). One part of a block: its parameters, the group it is
// sharded over and its padded size; bytes below are per rank.
struct CopyPart {
  std::int64_t params = 0, n = 1, tensors = 1;
  double padded = 0;
};

// Before a part's all-gather of `gathered_bytes` (the collective's S): the shard's cast from the
// fp32 master to the gathered dtype, one kernel per parameter (FSDP2's
// FSDPParam.all_gather_inputs, _to_dtype_if_needed; FSDP1's _use_low_precision_shard on the flat
// shard, one kernel), reading 4 bytes an element and writing its share of S; then FSDP2's
// _foreach_copy_ of the cast shards into the flat input, reading and writing that share again.
// No cast when the compute precision is fp32. On the copy-in (FSDP2) or pre-unshard (FSDP1)
// stream, which the all-gather waits for.
Task gather_copy_in(const Plan& p, const CopyPart& part, double gathered_bytes) {
  const double shard_bytes = gathered_bytes / d(part.n);
  const bool cast = bytes_per_element(p.precision) < 4.0;
  const bool per_param = p.zero3_copies == ZeroCopies::kPerParam;
  double bytes = 0;
  std::int64_t launches = 0;
  if (cast) {
    bytes += 4.0 * part.padded / d(part.n) + shard_bytes;
    launches += per_param ? std::max<std::int64_t>(1, part.tensors) : 1;
  }
  if (per_param) {
    bytes += 2.0 * shard_bytes;
    launches += 1;
  }
  Task t = memory(per_param ? "fsdp2_all_gather_copy_in" : "fsdp1_shard_cast", bytes,
                  MemoryKernel::kElementwise);
  t.launches = launches;
  return t;
}

// Before a part's reduce-scatter, on the stream that issues it. FSDP2: foreach_reduce's
// torch._chunk_cat of the per-parameter gradients (compute precision) into the flat input in the
// reduce dtype, one kernel that casts and pads (aten/src/ATen/native/cuda/TensorShape.cu,
// chunk_cat_cuda_kernel); a divide before the collective only for an fp16 reduce. FSDP1: the
// flat gradient cast to the reduce dtype when it differs, padded to a multiple of the group when
// it is not one (F.pad, a copy), and divided by the predivide factor (always above 1 for two or
// more ranks) in place.
std::vector<Task> reduce_copy_in(const Plan& p, const CopyPart& part) {
  std::vector<Task> out;
  const double e = bytes_per_element(p.precision), g = grad_bytes_per_element(p);
  const double params = d(part.params);
  if (p.zero3_copies == ZeroCopies::kPerParam) {
    out.push_back(memory("fsdp2_reduce_scatter_copy_in", params * e + part.padded * g,
                         MemoryKernel::kElementwise));
    if (p.precision == Precision::kFp16 && p.grad_precision == GradPrecision::kCompute)
      out.push_back(memory("fsdp2_grad_predivide", 2.0 * part.padded * g,
                           MemoryKernel::kElementwise));
    return out;
  }
  if (g != e)
    out.push_back(memory("fsdp1_grad_cast", params * (e + g), MemoryKernel::kElementwise));
  if (part.padded > params)
    out.push_back(memory("fsdp1_grad_pad", (params + part.padded) * g, MemoryKernel::kElementwise));
  out.push_back(memory("fsdp1_grad_predivide", 2.0 * part.padded * g, MemoryKernel::kElementwise));
  return out;
}

// Plan::grad_accumulation_pass shard-add (sources at GradAccumulationPass), bytes per rank. The
// fresh gradient buffer's zero-fill: every padded element of the block's parts (dense over
// `dense` ranks, experts over `expert`), written once in the gradient precision, one kernel.
Task grad_buffer_fill(const ParamBlock& b, std::int64_t dense, std::int64_t expert, double g) {
  const double elements = d(padded(b.dense_params, dense)) + d(padded(b.expert_params, expert));
  return memory("zero_grad_buffer_fill", elements * g, MemoryKernel::kElementwise);
}

// After the reduce-scatter: this rank's shard of each part added into its fp32 gradient shard,
// reading the reduced shard (g bytes) and the accumulator (4) and writing the accumulator (4);
// one kernel per part.
Task grad_shard_add(const ParamBlock& b, std::int64_t dense, std::int64_t expert, double g) {
  double elements = 0;
  std::int64_t launches = 0;
  if (b.dense_params > 0) {
    elements += d(padded(b.dense_params, dense)) / d(dense);
    ++launches;
  }
  if (b.expert_params > 0) {
    elements += d(padded(b.expert_params, expert)) / d(expert);
    ++launches;
  }
  Task t = memory("zero_grad_shard_add", elements * (g + 4.0 + 4.0), MemoryKernel::kElementwise);
  t.launches = std::max<std::int64_t>(1, launches);
  return t;
}

// The block's parts as dp_block_tasks shards them.
std::vector<CopyPart> copy_parts(const Plan& p, const ParamBlock& b) {
  std::vector<CopyPart> parts;
  const std::int64_t dense = p.zero_shard_ranks(), expert = expert_dp_cp(p);
  if (b.dense_params > 0 && dense > 1)
    parts.push_back({b.dense_params, dense, b.tensors, d(padded(b.dense_params, dense))});
  if (b.expert_params > 0 && expert > 1)
    parts.push_back(
        {b.expert_params, expert, b.expert_tensors, d(padded(b.expert_params, expert))});
  return parts;
}

// Inserts each all-gather's copy-in before it (the dense part's collective is on kDp, the
// experts' on kExpertDp).
void add_gather_copy_ins(const Plan& p, const ParamBlock& b, std::vector<Task>& out) {
  std::vector<Task> with;
  for (const Task& t : out) {
    if (t.kind == TaskKind::kComm && t.collective == Collective::kAllGather && t.group_size > 1) {
      const bool experts = t.group == CommGroup::kExpertDp;
      const std::int64_t n = experts ? expert_dp_cp(p) : p.zero_shard_ranks();
      const std::int64_t params = experts ? b.expert_params : b.dense_params;
      const CopyPart part{params, n, experts ? b.expert_tensors : b.tensors, d(padded(params, n))};
      Task copy = gather_copy_in(p, part, d(t.message_bytes));
      if (copy.launches > 0) with.push_back(std::move(copy));  // FSDP1 in fp32: nothing to cast
    }
    with.push_back(t);
  }
  out = std::move(with);
}
}  // namespace

std::vector<Task> dp_block_tasks(const Plan& p, const ParamBlock& b, DpPoint point) {
  std::vector<Task> out;
  // Weights travel in their precision, gradients in theirs (grad_precision).
  const double e = bytes_per_element(p.precision), g = grad_bytes_per_element(p);
  // Each part (dense over dp*cp, experts over dp/ep*cp) gets the same treatment: context-parallel
  // ranks hold the same weights and see different tokens, so they sum gradients like replicas
  // (Megatron-Core's data-parallel group with context parallel). With hybrid sharding the dense
  // part's group is one shard group (Plan::zero_shard_size).
  const std::int64_t dense = p.zero_shard_ranks(), expert = expert_dp_cp(p);
  // Plan::dp_bucket_elements: DDP's and ZeRO-1/2's collective over `elements` becomes k
  // buckets' collectives of 1/k of it, played back to back (Task::repeat), the same bytes.
  auto bucketed = [&](Task t, std::int64_t elements) {
    const std::int64_t bucket = p.dp_bucket_elements;
    if (bucket > 0 && p.zero_stage <= 2 && elements > bucket) {
      const std::int64_t k = (elements + bucket - 1) / bucket;
      t.message_bytes = std::llround(d(t.message_bytes) / d(k));
      t.repeat = static_cast<std::int32_t>(k);
      t.repeat_first = true;
    }
    return t;
  };
  auto add = [&](std::string_view dense_name, std::string_view expert_name, Collective c) {
    const double el = c == Collective::kAllGather ? e : g;
    if (b.dense_params > 0) {
      const std::int64_t n = padded(b.dense_params, dense);
      out.push_back(bucketed(comm(dense_name, c, CommGroup::kDp, dense, d(n) * el), n));
    }
    if (b.expert_params > 0) {
      const std::int64_t n = padded(b.expert_params, expert);
      out.push_back(bucketed(comm(expert_name, c, CommGroup::kExpertDp, expert, d(n) * el), n));
    }
  };
  // Plan::fp8_all_gather: a layer's linear weights travel as FP8, one byte each; its norms (and
  // an MoE router) stay in the compute precision; the experts' weights too (torchao's
  // Float8Linear swaps nn.Linear modules, not grouped expert weights; Megatron-Core's grouped
  // experts are left as torchao's are). Returns false where it does not apply (not FP8, not a
  // layer block): the caller gathers in `precision`.
  auto fp8_gather = [&](std::string_view dense_name, std::string_view expert_name) {
    if (!p.fp8 || !p.fp8_all_gather || b.kind != BlockKind::kLayer) return false;
    const std::int64_t wide = std::min(b.tp_replicated_params, b.dense_params);
    const std::int64_t n = padded(b.dense_params, dense);
    if (b.dense_params > 0)
      out.push_back(bucketed(comm(dense_name, Collective::kAllGather, CommGroup::kDp, dense,
                                  d(n) + d(wide) * (e - 1.0)),
                             n));
    if (b.expert_params > 0) {
      const std::int64_t ne = padded(b.expert_params, expert);
      out.push_back(bucketed(
          comm(expert_name, Collective::kAllGather, CommGroup::kExpertDp, expert, d(ne) * e), ne));
    }
    return true;
  };
  auto gather = [&]() {
    if (fp8_gather("zero3_param_all_gather", "zero3_expert_param_all_gather")) return;
    if (p.zero3_gather == ZeroGather::kFlat) {
      add("zero3_param_all_gather", "zero3_expert_param_all_gather", Collective::kAllGather);
      return;
    }
    add_per_tensor_gathers(out, "zero3_param_all_gather", CommGroup::kDp, dense, b.dense_params,
                           b.tensors, e);
    add_per_tensor_gathers(out, "zero3_expert_param_all_gather", CommGroup::kExpertDp, expert,
                           b.expert_params, b.expert_tensors, e);
  };
  // Plan::zero3_recompute_gather kept: a recomputed layer's one backward gather comes before
  // its recompute and serves the backward too (FSDP2's pre-backward unshard; the checkpoint
  // wrapper's recompute runs inside it).
  const bool kept = p.zero3_recompute_gather == ZeroRecomputeGather::kKept &&
                    b.kind == BlockKind::kLayer && b.recomputed;
  const bool copies = p.zero_stage == 3 && p.zero3_copies != ZeroCopies::kNone;
  const bool shard_add = p.grad_accumulation_pass == GradAccumulationPass::kShardAdd;
  switch (point) {
    case DpPoint::kBeforeForward:
      if (p.zero_stage == 3) gather();
      break;
    case DpPoint::kBeforeBackward:
      if (p.zero_stage == 3 && !kept) gather();
      break;
    case DpPoint::kBeforeRecompute:
      // Only transformer layers are recomputed; the embedding and head are not gathered again.
      if (p.zero_stage == 3 && b.kind == BlockKind::kLayer) gather();
      break;
    case DpPoint::kAfterBackward:
      // Plan::zero3_copies: each part's copies before its reduce-scatter, in the same order.
      if (copies)
        for (const CopyPart& part : copy_parts(p, b))
          for (Task& t : reduce_copy_in(p, part)) out.push_back(std::move(t));
      if (p.zero_stage < 2) break;
      if (shard_add) out.push_back(grad_buffer_fill(b, dense, expert, g));
      add("zero_grad_reduce_scatter", "zero_expert_grad_reduce_scatter",
          Collective::kReduceScatter);
      if (shard_add) out.push_back(grad_shard_add(b, dense, expert, g));
      break;
    case DpPoint::kAfterLastBackward:
      // These sums must see every micro-batch's gradient before the data-parallel reduction.
      // Tied embeddings on two stages: sum the two copies' gradients (Megatron-LM's embedding
      // group), with the embedding rows this rank holds.
      if (b.tied_copy)
        out.push_back(comm("embedding_grad_all_reduce", Collective::kAllReduce,
                           CommGroup::kEmbedding, 2, d(b.tied_params) * g));
      // DualPipe holds every chunk twice (stage s and pp-1-s): the two copies' gradients are
      // summed, as deepseek-ai/DualPipe's example adds each module's gradient to its mirror
      // rank's; under ZeRO-2/3 the per-micro-batch reduce-scatter has left a shard of each.
      if (p.schedule == Schedule::kDualPipe)
        out.push_back(comm("dualpipe_mirror_grad_all_reduce", Collective::kAllReduce,
                           CommGroup::kEmbedding, 2, mirror_grad_elements(p, b) * g));
      if (p.sequence_parallel && p.tp > 1 && b.tp_replicated_params > 0)
        out.push_back(comm("tp_sp_norm_grad_all_reduce", Collective::kAllReduce, CommGroup::kTp,
                           p.tp, d(b.tp_replicated_params) * g));
      if (p.zero_stage == 0) add("dp_grad_all_reduce", "expert_dp_grad_all_reduce",
                                 Collective::kAllReduce);
      if (p.zero_stage == 1) {
        switch (p.zero1_collectives) {
          case ZeroCollectives::kFlat:
            add("zero_grad_reduce_scatter", "zero_expert_grad_reduce_scatter",
                Collective::kReduceScatter);
            break;
          case ZeroCollectives::kPerRank:
            // nanotron: its accumulator's contiguous fp32 buffer, all-reduced in place.
            add("zero1_grad_all_reduce", "zero1_expert_grad_all_reduce", Collective::kAllReduce);
            break;
          case ZeroCollectives::kAllReduce:
            add_whole_grad_all_reduce(out, "zero1_grad_all_reduce", CommGroup::kDp, dense,
                                      b.dense_params, g);
            add_whole_grad_all_reduce(out, "zero1_expert_grad_all_reduce", CommGroup::kExpertDp,
                                      expert, b.expert_params, g);
            break;
        }
      }
      // Hybrid sharding: the shard groups sum the step's reduced shards across each other once,
      // after the last micro-batch (FSDP2's HSDP with the all-reduce skipped on the others,
      // set_requires_all_reduce; MiCS's hierarchical reduction, Zhang et al. 2022 sec. 3.3).
      if (p.zero_stage >= 1 && p.zero_replicas() > 1 && b.dense_params > 0)
        out.push_back(comm("hsdp_grad_all_reduce", Collective::kAllReduce, CommGroup::kDpReplica,
                           p.zero_replicas(), d(padded(b.dense_params, dense) / dense) * g));
      break;
    case DpPoint::kAfterOptimizer:
      if (p.zero_stage == 1 && p.zero1_collectives == ZeroCollectives::kPerRank) {
        add_per_rank_gather(out, "zero_param_all_gather", CommGroup::kDp, dense, b.dense_params,
                            b.tensors, e);
        add_per_rank_gather(out, "zero_expert_param_all_gather", CommGroup::kExpertDp, expert,
                            b.expert_params, b.expert_tensors, e);
      } else if (p.zero_stage == 1 || p.zero_stage == 2) {
        if (!fp8_gather("zero_param_all_gather", "zero_expert_param_all_gather"))
          add("zero_param_all_gather", "zero_expert_param_all_gather", Collective::kAllGather);
      }
      break;
  }
  out = without_trivial_comm(out);
  if (copies && (point == DpPoint::kBeforeForward || point == DpPoint::kBeforeRecompute ||
                 point == DpPoint::kBeforeBackward))
    add_gather_copy_ins(p, b, out);
  return out;
}

std::vector<Task> zero3_compute_copies(const Plan& p, const ParamBlock& b, DpPoint point) {
  std::vector<Task> out;
  if (p.zero_stage != 3) return out;
  if (p.zero3_copies == ZeroCopies::kPerParam && point != DpPoint::kAfterBackward &&
      point != DpPoint::kAfterLastBackward && point != DpPoint::kAfterOptimizer) {
    // foreach_all_gather_copy_out: split_with_sizes_copy of the flat output into the
    // parameters' storage, one kernel (TensorShape.cu's fast path), reading and writing the
    // gathered bytes.
    double gathered = 0;
    for (const Task& t : dp_block_tasks(p, b, point))
      if (t.kind == TaskKind::kComm && t.collective == Collective::kAllGather)
        gathered += d(t.message_bytes);
    if (gathered > 0)
      out.push_back(
          memory("fsdp2_all_gather_copy_out", 2.0 * gathered, MemoryKernel::kElementwise));
  }
  if (p.zero3_copies == ZeroCopies::kFlatParam && point == DpPoint::kAfterBackward &&
      !copy_parts(p, b).empty()) {
    // The views' split backward (split_with_sizes_backward's cat): the parameters' gradients,
    // in the compute precision, into the flat gradient.
    const double params = d(b.dense_params + b.expert_params);
    out.push_back(memory("fsdp1_grad_flatten", 2.0 * params * bytes_per_element(p.precision),
                         MemoryKernel::kElementwise));
  }
  return out;
}

}  // namespace trainplan
