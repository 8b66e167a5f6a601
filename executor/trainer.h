// The training step of one rank, exactly as the plan says, over a backend (stage.h): the
// pipeline schedule (GPipe, 1F1B, interleaved 1F1B, ZB-H1, ZB-V, DualPipe; replayed from
// core/schedule.h, the order the simulator plays) over the stage's micro-batches (DualPipe:
// both directions, a loss on both end stages and the two copies of every chunk's gradients
// summed), data parallelism (DDP all-reduce,
// ZeRO-1/2/3 with flat per-block buffers padded to a multiple of the shard ranks, ZeRO-2/3
// reduce-scattering every micro-batch, hybrid sharding), and AdamW. Together with the backend's
// stage model it issues the collectives of comm_volume_on_stage (core/cost/cost_model.h)
// exactly. One Trainer serves both backends: make one with executor/cpu/cpu_stage.h's
// make_cpu_trainer or executor/cuda/cuda_stage.h's make_cuda_trainer.
//
// Usage: make a Comm (executor/cpu/comm_mpi.h, executor/cuda/comm_nccl.h), then a trainer, and
// step(batch) per optimizer step; step(batch, &trace) also records that step's trace
// (trace.h's TraceRecorder on CPU, device_trace.h's DeviceTrace on a GPU).
// Tested by tests/executor/parallel_check.cc, tests/executor/trainer_test.cc and
// tests/executor/trace_test.cc (CPU), tests/executor/cuda/gpt_cuda_test.cc (GPU).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/schedule.h"
#include "core/status.h"
#include "executor/comm.h"
#include "executor/offload.h"
#include "executor/params.h"
#include "executor/stage.h"
#include "executor/trace.h"

namespace trainplan::executor {

class Trainer;

struct TrainOptions {
  std::uint64_t seed = 1234;  // parameter initialisation
  AdamW adamw;
  // Linear learning-rate warm-up: step k (from 1) uses lr * min(1, k / lr_warmup_steps), as
  // GPT-2's recipe, nanoGPT and llm.c do; 0: the full rate from step 1.
  std::int64_t lr_warmup_steps = 0;
  // What the pipeline order is built from besides the model and plan (core/schedule.h's
  // order_costs). Give it the cluster (and profile) `simulate` was given, and zb-v runs the
  // order the simulator plays there; without a cluster, zb-v's send-blind order
  // (`simulate --zb-v-send-blind`). The other schedules' orders do not depend on it.
  sim::OrderInputs order;
  // Called once per step after the gradients are complete and before AdamW reads them (the
  // reference check dumps them here with Trainer::for_each_grad). Optional.
  std::function<void(const Trainer&)> before_optimizer;
  // Where the offloaded states go (Plan::offload, offload.h): offload_device nvme needs a
  // directory; ignored without offload.
  OffloadOptions offload;
  // MoE with a capacity, on one rank: drop share by share as the plan with this cp (and folded
  // tp) does (params.h). Only for a plan that itself routes whole micro-batches (cp 1, not
  // folded over tp > 1): the single-process reference of such a run.
  MoeCapacityShares moe_capacity_shares;
};

struct StepResult {
  double loss = 0;     // mean token loss over the global batch (the same on every rank)
  // MoE: the load-balancing loss the step added to the objective, summed over the MoE layers
  // (each coeff * E * sum_i f_i P_i, averaged over the global batch's micro-batches;
  // executor/cpu/moe.h); 0 without MoE layers. The same on every rank.
  double aux_loss = 0;
  double seconds = 0;  // wall time of the step on this rank
  double optimizer_seconds = 0;  // of which the AdamW update (and ZeRO-1/2's all-gather)
  OffloadBytes offload;  // moved between the offload tiers (zero without offload)
  // A backend's own timings (a GPU's events per phase on its compute stream); empty on CPU.
  std::map<std::string, double> phase_s;
  std::vector<PhaseSpan> spans;
};

// What a backend brings: its support check (a reason when it cannot run the model or plan) and
// its stage for a pipeline stage index.
struct Backend {
  std::function<Status(const ModelSpec&, const Plan&)> check_supports;
  std::function<std::unique_ptr<Stage>(std::int64_t stage, Comm& comm, DpEvents& events)>
      make_stage;
};

class Trainer final : private DpEvents {
 public:
  // Checks that the backend supports the model and plan and that `comm` has the plan's world
  // size; allocates and initialises this rank's parameters. A null `comm` is a single rank
  // (executor/comm.h's local communicator).
  static Result<std::unique_ptr<Trainer>> make(const ModelSpec& model, const Plan& plan,
                                               const TrainOptions& options, Comm* comm,
                                               const Backend& backend);
  ~Trainer() override;

  // One optimizer step. `batch` is the whole global batch: global_batch_size sequences of
  // seq_len + 1 tokens each (inputs and the next-token targets); this rank reads its share.
  // A non-finite loss is an error naming the step and the rank that saw it.
  // With `trace` (of the backend's kind), the step's spans and collectives are recorded there
  // (replacing what it held), timed from the step's start, which every rank then begins
  // together; the trace is used for this step only.
  Result<StepResult> step(const std::vector<std::int32_t>& batch, StepTrace* trace = nullptr);

  std::int64_t stage() const { return stage_; }
  // This stage's passes in the order every step runs them (core/schedule.h's stage_schedule
  // with TrainOptions::order's costs).
  const std::vector<sim::PipeStep>& schedule() const { return schedule_; }
  std::int64_t steps_done() const { return step_; }
  // Every parameter element this rank holds authoritatively (ZeRO: its shard of the master
  // copy), with its coordinates in the full tensor. For comparing layouts.
  void for_each_param(const std::function<void(const TensorSlice&, std::int64_t row,
                                               std::int64_t col, float value)>& fn) const {
    stage_model_->for_each_param(fn);
  }
  // Every element of the step's reduced gradient, with its coordinates; valid inside
  // TrainOptions::before_optimizer. An error under ZeRO-2/3, and ZeRO-1 over several ranks,
  // which hold only a reduced shard, and on a backend that does not read its gradients back
  // (the CUDA backend's, stage.h).
  Status for_each_grad(const std::function<void(const TensorSlice&, std::int64_t row,
                                                std::int64_t col, float value)>& fn) const;
  // From now on, appends the last stage's logits of every micro-batch, (T, padded vocab / tp)
  // row-major, to `sink` (null: stop). For the reference check; an error on a backend that does
  // not capture them.
  Status capture_logits(std::vector<float>* sink) { return stage_model_->capture_logits(sink); }
  // From now on, appends every MoE layer's routing per forward (stage.h, RoutingCapture) to
  // `sink` (null: stop). For the reference check.
  Status capture_routing(RoutingCapture* sink) { return stage_model_->capture_routing(sink); }
  const Stage& backend_stage() const { return *stage_model_; }
  // What this rank's executor holds now, buffer by buffer (memory_account.h): the backend's
  // buffers and the trainer's own pipeline messages.
  MemoryAccount memory_account() const;
  // From now on (true), takes the account at the end of every pass and keeps the one with the
  // most memory in use (peak_memory_account). Off by default: taking an account allocates, so
  // the allocation-free step (issue 28) holds only without it.
  void track_memory_peak(bool on) { track_memory_ = on; }
  const MemoryAccount& peak_memory_account() const { return peak_account_; }

 private:
  Trainer(const ModelSpec& model, const Plan& plan, const TrainOptions& options, Comm& comm);
  void init_blocks();
  void acquire(std::size_t b, DpPoint point) override;
  void release(std::size_t b) override;
  void backward_done(std::size_t b) override;
  Status check_batch(const std::vector<std::int32_t>& batch) const;
  void run_schedule(const std::vector<std::int32_t>& batch);
  void forward(std::int64_t chunk, std::int64_t mb);
  // A whole backward, or (zero-bubble schedules) its B part; weight runs the W part.
  void backward(std::int64_t chunk, std::int64_t mb, bool input_only);
  void weight(std::int64_t chunk, std::int64_t mb);
  // A pipeline message of micro-batch mb to / from the stage holding model chunk `peer_chunk`
  // (core/plan.h's chunk_stage); one on this stage (the V's turn, zb-v) is kept in memory.
  void send_message(int tag, std::int64_t peer_chunk, std::int64_t mb, const char* name);
  void receive_message(int tag, std::int64_t peer_chunk, std::int64_t mb, const char* name);
  Result<double> reduce_loss();
  // Whether micro-batch mb is the last of the step through the chunk copy that runs it.
  bool last_through_chunk(std::int64_t mb) const;
  // DualPipe: sums block i's gradient (or, `shard`, its reduced ZeRO-2/3 shard) with the mirror
  // stage's copy of the block; nothing for the other schedules.
  void mirror_sum(std::size_t i, bool shard);
  void finish_gradients();
  void optimizer_step();
  void set_trace(StepTrace* trace, TraceClock::time_point origin);
  void note_memory();  // track_memory_peak's bookkeeping after a pass

  ModelSpec model_;
  Plan plan_;
  TrainOptions options_;
  std::unique_ptr<Comm> own_comm_;  // the local communicator of a single rank made without one
  Comm& comm_;
  std::int64_t stage_ = 0, dp_rank_ = 0, cp_rank_ = 0, step_ = 0;
  double aux_loss_ = 0;  // the last step's load-balancing loss (StepResult::aux_loss)
  std::unique_ptr<Stage> stage_model_;
  std::vector<BlockShape> blocks_;
  bool last_micro_batch_ = false;
  std::vector<std::int32_t> mb_inputs_, mb_targets_;  // run_schedule's, (M, T) each
  std::vector<sim::PipeStep> schedule_;  // this stage's passes in order, made by make()
  std::vector<BlockRange> sp_norms_;     // finish_gradients' sequence-parallel norm ranges
  // Messages a stage sends itself (zb-v's V turns on the last stage), until read: slots kept
  // from step to step, a free one refilled (every message has the same size), so that a step
  // allocates nothing; a new slot only past the most messages ever waiting.
  struct LocalMessage {
    int tag = 0;
    std::int64_t mb = -1;  // -1: free
    std::vector<float> data;
  };
  std::vector<LocalMessage> local_messages_;
  StepTrace* trace_ = nullptr;  // during a traced step only
  bool track_memory_ = false;
  MemoryAccount peak_account_;
};

}  // namespace trainplan::executor
