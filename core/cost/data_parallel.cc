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

// Plan::zero1_collectives per-rank (nanotron 0.5; sources at the enum). The gradients arrive in
// PyTorch DDP buckets of 25 MiB in the parameters' precision (DistributedDataParallel's default
// bucket_cap_mb, which nanotron's benchmark config also sets); the simulator reduces a block
// at once, so a block counts the buckets its gradients fill.
constexpr double kDdpBucketBytes = 25.0 * 1024.0 * 1024.0;

// Before the reduce-scatter: per bucket the hook flattens the fp32 gradients once per rank of
// the group (reduce_scatter_coalesced) and ProcessGroupNCCL copies each of the n list entries
// into its flat input, each pass reading and writing the block's gradients once; after it, each
// tensor's reduced shard is copied back into the gradient buffer. All counted before the
// collective (the copies back are one launch per tensor and a 1/n of the bytes).
void add_per_rank_grad_copies(std::vector<Task>& out, std::int64_t n, std::int64_t params,
                              std::int64_t tensors, double param_bytes, double grad_bytes) {
  if (params <= 0 || n <= 1) return;
  const auto buckets = static_cast<std::int64_t>(
      std::max(1.0, std::ceil(d(params) * param_bytes / kDdpBucketBytes)));
  Task copies = memory("zero1_grad_rank_copies",
                       (2.0 * 2.0 * d(params) + 2.0 * d(params) / d(n)) * grad_bytes,
                       MemoryKernel::kElementwise);
  copies.launches = buckets * 2 * n + std::max<std::int64_t>(1, tensors);
  out.push_back(copies);
}

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
  auto add = [&](std::string_view dense_name, std::string_view expert_name, Collective c) {
    const double el = c == Collective::kAllGather ? e : g;
    if (b.dense_params > 0)
      out.push_back(comm(dense_name, c, CommGroup::kDp, dense, d(padded(b.dense_params, dense)) * el));
    if (b.expert_params > 0)
      out.push_back(comm(expert_name, c, CommGroup::kExpertDp, expert,
                         d(padded(b.expert_params, expert)) * el));
  };
  auto gather = [&]() {
    if (p.fp8 && p.fp8_all_gather && b.kind == BlockKind::kLayer) {
      // Plan::fp8_all_gather: a layer's linear weights travel as FP8, one byte each; its norms
      // (and an MoE router) stay in the compute precision; the experts' weights too (torchao's
      // Float8Linear swaps nn.Linear modules, not grouped expert weights).
      const std::int64_t wide = std::min(b.tp_replicated_params, b.dense_params);
      const double bytes = d(padded(b.dense_params, dense)) + d(wide) * (e - 1.0);
      if (b.dense_params > 0)
        out.push_back(comm("zero3_param_all_gather", Collective::kAllGather, CommGroup::kDp,
                           dense, bytes));
      if (b.expert_params > 0)
        out.push_back(comm("zero3_expert_param_all_gather", Collective::kAllGather,
                           CommGroup::kExpertDp, expert, d(padded(b.expert_params, expert)) * e));
      return;
    }
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
      if (p.zero_stage >= 2) add("zero_grad_reduce_scatter", "zero_expert_grad_reduce_scatter",
                                 Collective::kReduceScatter);
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
      if (p.zero_stage == 1 && p.zero1_collectives == ZeroCollectives::kPerRank) {
        add_per_rank_grad_copies(out, dense, b.dense_params, b.tensors, e, g);
        add_per_rank_grad_copies(out, expert, b.expert_params, b.expert_tensors, e, g);
      }
      if (p.zero_stage == 1 && p.zero1_collectives == ZeroCollectives::kAllReduce) {
        add_whole_grad_all_reduce(out, "zero1_grad_all_reduce", CommGroup::kDp, dense,
                                  b.dense_params, g);
        add_whole_grad_all_reduce(out, "zero1_expert_grad_all_reduce", CommGroup::kExpertDp,
                                  expert, b.expert_params, g);
      } else if (p.zero_stage == 1) {
        add("zero_grad_reduce_scatter", "zero_expert_grad_reduce_scatter",
            Collective::kReduceScatter);
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
        add("zero_param_all_gather", "zero_expert_param_all_gather", Collective::kAllGather);
      }
      break;
  }
  return without_trivial_comm(out);
}

}  // namespace trainplan
