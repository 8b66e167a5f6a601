// The training step of one rank, exactly as the plan says: the pipeline schedule (GPipe,
// 1F1B, interleaved 1F1B; replayed from core/schedule.h, the order the simulator plays) over
// the stage's micro-batches, data parallelism (DDP all-reduce, ZeRO-1/2/3 with flat
// per-block buffers padded to a multiple of dp), and AdamW. Together with StageModel it issues
// the collectives of comm_volume_on_stage (core/cost/cost_model.h) exactly.
//
// Usage: make a Comm (comm_mpi.h), then Trainer::make(model, plan, options, comm) and
// step(batch) per optimizer step; step(batch, &recorder) also records that step's trace
// (trace.h). Tested by tests/executor/parallel_check.cc and trace_test.cc.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "executor/comm.h"
#include "executor/gpt.h"
#include "executor/kernels.h"
#include "executor/params.h"
#include "executor/trace.h"
#include "core/status.h"

namespace trainplan::executor {

class Trainer;

struct TrainOptions {
  std::uint64_t seed = 1234;  // parameter initialisation
  AdamW adamw;
  // Linear learning-rate warm-up: step k (from 1) uses lr * min(1, k / lr_warmup_steps), as
  // GPT-2's recipe, nanoGPT and llm.c do; 0: the full rate from step 1.
  std::int64_t lr_warmup_steps = 0;
  // Called once per step after the gradients are complete and before AdamW reads them (the
  // reference check dumps them here with Trainer::for_each_grad). Optional.
  std::function<void(const Trainer&)> before_optimizer;
};

struct StepResult {
  double loss = 0;     // mean token loss over the global batch (the same on every rank)
  double seconds = 0;  // wall time of the step on this rank
  double optimizer_seconds = 0;  // of which the AdamW update (and ZeRO-1/2's all-gather)
};

class Trainer final : private BlockAccess {
 public:
  // Checks that the executor supports the model and plan and that `comm` has the plan's
  // world size; allocates and initialises this rank's parameters.
  static Result<std::unique_ptr<Trainer>> make(const ModelSpec& model, const Plan& plan,
                                               const TrainOptions& options, Comm& comm);
  ~Trainer() override;

  // One optimizer step. `batch` is the whole global batch: global_batch_size sequences of
  // seq_len + 1 tokens each (inputs and the next-token targets); this rank reads its share.
  // A non-finite loss is an error naming the step and the rank that saw it.
  // With `trace`, the step's spans and collectives are recorded there (replacing what it held),
  // timed from the step's start, which every rank then begins together; the recorder is used
  // for this step only.
  Result<StepResult> step(const std::vector<std::int32_t>& batch,
                          TraceRecorder* trace = nullptr);

  std::int64_t stage() const { return stage_; }
  std::int64_t steps_done() const { return step_; }
  // Every parameter element this rank holds authoritatively (ZeRO-3: its shard), with its
  // coordinates in the full tensor. For comparing layouts.
  void for_each_param(const std::function<void(const TensorSlice&, std::int64_t row,
                                               std::int64_t col, float value)>& fn) const;
  // Every element of the step's reduced gradient, with its coordinates; valid inside
  // TrainOptions::before_optimizer. An error under ZeRO-2/3, and ZeRO-1 over several ranks,
  // which hold only a reduced shard.
  Status for_each_grad(const std::function<void(const TensorSlice&, std::int64_t row,
                                                std::int64_t col, float value)>& fn) const;
  // From now on, appends the last stage's logits of every micro-batch, (T, padded vocab / tp)
  // row-major, to `sink` (null: stop). For the reference check.
  void capture_logits(std::vector<float>* sink);

 private:
  struct Block {
    std::int64_t padded = 0;          // size rounded up to a multiple of dp
    std::int64_t shard = 0;           // padded / dp
    std::vector<float> param;         // (padded) full; empty while a ZeRO-3 block is released
    std::vector<float> param_shard;   // (shard) ZeRO-3 only
    std::vector<float> grad;          // (padded) this rank's accumulated gradient; ZeRO-2/3:
                                      // only between a block's backward and its reduce-scatter
    std::vector<float> held;          // ZeRO-2/3: tied / SP-norm gradient kept between them
    std::vector<float> grad_shard;    // (shard) ZeRO-2/3: reduced gradient of the shard
    std::vector<float> m, v;          // AdamW moments over the updated range
    // Ranges (offset, count), in offset order. `decayed`: the tensors AdamW decays
    // (for_each_decay_run). `tied`, `sp_norm`: positions whose gradient needs another group
    // before the DP reduction: the tied table (embedding group) and sequence-parallel norms (tp
    // group).
    Ranges decayed, tied, sp_norm;
    // Calls fn(offset, count) for every tied, then every SP-norm range.
    template <class Fn>
    void for_each_summed_range(Fn&& fn) const {
      for (const auto* ranges : {&tied, &sp_norm})
        for (auto [off, n] : *ranges) fn(off, n);
    }
  };

  Trainer(const ModelSpec& model, const Plan& plan, const TrainOptions& options, Comm& comm);
  void acquire(std::size_t b, DpPoint point) override;
  void release(std::size_t b) override;
  void backward_done(std::size_t b) override;
  const float* params(std::size_t b) override;
  float* grads(std::size_t b) override;
  void reduce_scatter_grad(Block& b);  // ZeRO-2/3: into grad_shard, then frees grad
  void run_schedule(const std::vector<std::int32_t>& batch, double& loss_sum);
  void finish_gradients();
  void optimizer_step();
  void set_trace(TraceRecorder* trace);

  ModelSpec model_;
  Plan plan_;
  TrainOptions options_;
  Comm& comm_;
  std::int64_t stage_ = 0, dp_rank_ = 0, shard_rank_ = 0, step_ = 0;
  std::unique_ptr<StageModel> stage_model_;
  std::vector<Block> blocks_;
  bool last_micro_batch_ = false;
  TraceRecorder* trace_ = nullptr;  // during a traced step only
};

}  // namespace trainplan::executor
