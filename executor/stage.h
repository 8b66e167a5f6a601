// What a backend supplies to the one Trainer (trainer.h): its stage model and the storage of one
// rank's parameters, gradients and AdamW state, as a few block-level operations. The Trainer owns
// the control flow that both backends share: the pipeline order (core/schedule.h), when ZeRO-3
// gathers and frees a block, when ZeRO-2/3 reduce-scatter (per micro-batch, as the cost model's
// dp_block_tasks), the tied-embedding and sequence-parallel sums, hybrid sharding and the
// optimizer loop. A backend says only how: float32 on the host with Comm's collectives
// (executor/cpu/cpu_stage.h), bf16 weights and float32 masters on a GPU with NCCL's device
// collectives (executor/cuda/cuda_stage.h). This is executor/comm.h's idea one level up: the
// fixed part written once, the variable part behind hooks.
//
// Tested through the Trainer by tests/executor/parallel_check.cc and trainer_test.cc (CPU) and
// tests/executor/cuda/gpt_cuda_test.cc (CUDA, on a GPU).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/cost/cost_model.h"
#include "core/status.h"
#include "executor/comm.h"
#include "executor/memory_account.h"
#include "executor/offload.h"
#include "executor/params.h"
#include "executor/trace.h"

namespace trainplan::executor {

// An MoE layer's routing, for the PyTorch reference check (execute --dump-reference): per
// forward of a layer on this rank's T tokens, the router's probabilities (T, num_experts) and
// the chosen experts (T, experts_per_token), best first, both row-major, appended.
struct RoutingCapture {
  std::vector<float> probs;
  std::vector<std::int32_t> experts;
};

// The data-parallel points of a micro-batch's pass: the stage model reports them (through its
// backend's block access) and the Trainer acts on them.
class DpEvents {
 public:
  virtual ~DpEvents() = default;
  // The full parameters of block `b` are needed from now (`point` says why; ZeRO-3 gathers).
  virtual void acquire(std::size_t b, DpPoint point) = 0;
  virtual void release(std::size_t b) = 0;
  // Block `b`'s backward for this micro-batch is complete (ZeRO-2/3 reduce-scatter).
  virtual void backward_done(std::size_t b) = 0;
};

// One block of parameters as the Trainer lays it out for data parallelism.
struct BlockShape {
  std::int64_t padded = 0;  // layout size rounded up to a multiple of the ZeRO shard ranks
  std::int64_t shard = 0;   // the dense part's (all but an MoE layer's experts) / shard ranks
  std::int64_t layer = -1;  // the global layer (trace context), -1 for embedding / head blocks
  // An MoE layer's experts (BlockLayout's): their offset (-1: none) and padded size. They are
  // summed and ZeRO-sharded over the expert data-parallel group (expert_shard each), the rest
  // over dp (as the cost model's dp_block_tasks).
  std::int64_t expert_offset = -1, expert_size = 0, expert_shard = 0;
  // Ranges (offset, count), in offset order. `decayed`: the tensors AdamW decays. `tied`,
  // `sp_norm`: positions whose gradient needs another group's sum before the DP reduction (the
  // tied table: embedding group; sequence-parallel norms: tp group). `summed`: tied, then sp_norm.
  Ranges decayed, tied, sp_norm, summed;
  // The ranges the tensors cover (all but the padding): what DualPipe's mirror sum adds below
  // ZeRO-2 (the cost model's dualpipe_mirror_grad_all_reduce counts the unpadded parameters).
  Ranges filled;
};

// A stretch of a step timed by a backend's own clock (a GPU's events): its phase, start after
// the step's first span, duration.
struct PhaseSpan {
  std::string phase;
  double start_s = 0, duration_s = 0;
};

// A range of one block's gradient: (block, offset, count).
struct BlockRange {
  std::size_t block = 0;
  std::int64_t offset = 0, count = 0;
};

class Stage {
 public:
  virtual ~Stage() = default;

  // ---- the stage model (as executor/cpu/gpt.h's StageModel) ----
  virtual const std::vector<BlockLayout>& layouts() const = 0;
  // Whether chunk c begins with the embedding / ends with the head and loss.
  virtual bool has_embedding(std::int64_t chunk) const = 0;
  virtual bool has_head(std::int64_t chunk) const = 0;
  // A pipeline message (local_tokens x hidden activations) in Comm's float32 words; a bf16
  // backend sends its activations as pairs, so the bytes counted are its own.
  virtual std::int64_t message_words() const = 0;
  // The step's tokens of this replica: inputs and targets, (micro-batches, T) each. Starts a
  // step: the loss sum is zero again.
  virtual void load_tokens(const std::vector<std::int32_t>& inputs,
                           const std::vector<std::int32_t>& targets) = 0;
  // Where the next pipeline receive lands (the next forward's input, or backward's gradient).
  virtual float* receive_buffer() = 0;
  // Forward / backward of micro-batch `mb` through `chunk` (StageModel's contract); the head
  // chunk adds its token losses to the loss sum. `loss_scale`: 1 / tokens in the global batch.
  virtual void forward(std::int64_t chunk, std::int64_t mb, float loss_scale) = 0;
  virtual void backward(std::int64_t chunk, std::int64_t mb) = 0;
  // Zero-bubble schedules (core/schedule.h, Qi et al. 2023): backward's B part, with the
  // weight-gradient GEMMs and the blocks' backward_done held back, and later its W part. A
  // backend that does not split its backward refuses those schedules before the step (its
  // check_*_supports), so reaching these defaults is a broken invariant.
  virtual void backward_input(std::int64_t chunk, std::int64_t mb) {
    TRAINPLAN_CHECK(false) << "backend does not split the backward (chunk " << chunk
                           << ", micro-batch " << mb << ")";
  }
  virtual void backward_weight(std::int64_t chunk, std::int64_t mb) {
    TRAINPLAN_CHECK(false) << "backend does not split the backward (chunk " << chunk
                           << ", micro-batch " << mb << ")";
  }
  // What the last forward / backward produced for the neighbour stage, complete.
  virtual const float* send_buffer() = 0;
  // Frees the pass's messages (once sent).
  virtual void drop_messages() = 0;
  // The sum of the head's token losses over the step's forwards (host value).
  virtual double loss_sum() = 0;
  // This rank's share of the step's load-balancing loss (MoE layers; recomputed forwards not
  // counted); 0 for a backend without MoE.
  virtual double aux_loss_sum() { return 0; }

  // ---- parameters and gradients ----
  // Keeps block b, whose full initial values are `full` (shape.padded), as the plan's ZeRO stage
  // holds it on this rank.
  virtual void init_block(std::size_t b, const BlockShape& shape, std::vector<float> full) = 0;
  // ZeRO-3: all-gather the block's parameter shards; free the gathered copy.
  virtual void gather_params(std::size_t b) = 0;
  virtual void free_params(std::size_t b) = 0;
  // ZeRO-2/3: whether the block's full gradient is allocated; allocate it (zeroed, with the sums
  // set aside by hold_summed put back).
  virtual bool has_grad(std::size_t b) const = 0;
  virtual void ensure_grad(std::size_t b) = 0;
  // ZeRO-2/3: moves the block's summed ranges (BlockShape::summed) out of its gradient, to be
  // put back by the next ensure_grad.
  virtual void hold_summed(std::size_t b) = 0;
  // Reduce-scatters the block's gradient over the dp (shard) group, in place; ZeRO-2/3 then add
  // the reduced shard to the step's shard gradient and free the full one.
  virtual void reduce_scatter_grad(std::size_t b) = 0;
  // Sums gradient elements over group g: one block's range, several ranges as one call, or the
  // reduced shard (hybrid sharding).
  virtual void all_reduce_grad(CommGroup g, const BlockRange& r, std::string_view task) = 0;
  virtual void all_reduce_grads(CommGroup g, const std::vector<BlockRange>& rs,
                                std::string_view task) = 0;
  virtual void all_reduce_grad_shard(CommGroup g, std::size_t b, std::string_view task) = 0;
  // ZeRO-2/3: sums every part's reduced shard of the block (dense and experts) over group g:
  // DualPipe's mirror sum. A backend that does not run dualpipe refuses it before the step
  // (its check_*_supports), so reaching this default is a broken invariant.
  virtual void all_reduce_grad_shards(CommGroup g, std::size_t b, std::string_view task) {
    TRAINPLAN_CHECK(false) << "backend does not sum whole shards (" << to_string(g) << ", block "
                           << b << ", " << task << ")";
  }
  // AdamW over the block's updated range (all of it, or with ZeRO its shard), optimizer step
  // `step` (from 1).
  virtual void update(std::size_t b, const AdamW& opt, std::int64_t step) = 0;
  // ZeRO-1/2: all-gather the updated shards into the full parameters.
  virtual void all_gather_params(std::size_t b) = 0;
  // Zeroes the step's gradients of the block.
  virtual void clear_grads(std::size_t b) = 0;
  // Every parameter element this rank holds authoritatively (the master copy where there is
  // one), with its coordinates in the full tensor.
  virtual void for_each_param(const std::function<void(const TensorSlice&, std::int64_t row,
                                                       std::int64_t col, float value)>& fn)
      const = 0;
  // Every element of the step's full gradient (block by block, as the Trainer's
  // TrainOptions::before_optimizer sees it once the gradient is reduced), with its coordinates
  // in the full tensor. The Trainer checks that the ZeRO stage keeps a full gradient; a backend
  // that does not read its gradients back to the host says so (an error).
  virtual Status for_each_grad(const std::function<void(const TensorSlice&, std::int64_t row,
                                                        std::int64_t col, float value)>& fn)
      const = 0;
  // From now on, appends the head's logits of every micro-batch, (T, padded vocab / tp)
  // row-major, to `sink` (null: stop); an error where the backend cannot.
  virtual Status capture_logits(std::vector<float>* sink) = 0;
  // From now on, appends what every MoE layer's router decides in each forward (recomputes
  // left out), in the order the forwards run, to `sink` (null: stop); an error where the
  // backend cannot (the CUDA backend has no MoE layer).
  virtual Status capture_routing(RoutingCapture* /*sink*/) {
    return Status::Error("this backend does not capture the MoE routing");
  }

  // ---- offload tiers (offload.h; Plan::offload) ----
  // After every block is initialised: a backend that offloads puts the offloaded states in
  // their tier (the NVMe file created and filled); an error says why it cannot. A backend that
  // does not offload refuses such plans in its check_*_supports.
  virtual Status place_offloaded() { return Status::Ok(); }
  // The bytes moved between the tiers since the step began (load_tokens).
  virtual OffloadBytes offload_bytes() const { return {}; }
  // The first offload I/O error of the run (reads and writes happen inside the void operations
  // above; states that could not be read or written leave the run unusable, so it stays); the
  // Trainer fails the step with it.
  virtual Status offload_status() const { return Status::Ok(); }

  // ---- memory ----
  // Adds every buffer the backend holds now to `account` (memory_account.h); nothing where the
  // backend does not itemise its memory (the CUDA backend's device memory).
  virtual void account_memory(MemoryAccount& /*account*/) const {}

  // ---- tracing and timing ----
  // Installs `trace` (a recorder of the backend's kind; null: uninstall) in the stage model and
  // the communicator; a non-null trace starts its step at `origin`.
  virtual void set_trace(StepTrace* trace, TraceClock::time_point origin) = 0;
  // Consecutive compute spans outside the stage model (the optimizer's): begin closes the open
  // one; end closes it.
  virtual void begin_span(std::string_view task) = 0;
  virtual void end_span() = 0;
  // Phases of the step for the backend's own timers ("forward", "gradient_sync", ...).
  virtual void begin_phase(const char* /*phase*/) {}
  virtual void end_phase(const char* /*phase*/) {}
  // The step's work is done: wait for it (a device), and add the backend's timings to `phases`.
  virtual void finish_step(std::map<std::string, double>& /*phase_s*/,
                           std::vector<PhaseSpan>& /*spans*/) {}
};

}  // namespace trainplan::executor
