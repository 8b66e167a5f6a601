// The training step of one rank on a GPU: executor/trainer.h's Trainer with device buffers,
// until the Trainer is made generic over the stage model (see the integration notes in
// executor/cuda/README.md). Pipeline schedules GPipe and 1F1B; data parallelism DDP and
// ZeRO-1/2/3; mixed precision: bf16 compute weights, float32 master weights and AdamW state,
// float32 gradient accumulation (Megatron-LM's main_grad). Gradients are reduced in the plan's
// grad_precision: fp32 as accumulated (the cost model's 18 bytes per parameter), or, with
// grad_precision compute, cast to bf16 for the collective (its bytes as the cost model counts
// them; the float32 accumulator and a bf16 scratch of the largest block are then more memory
// than its 16 bytes per parameter).
//
// Differences from the CPU Trainer, stated so that tests compare like with like:
//  - ZeRO-2/3 reduce-scatter the gradients once per step, after the last micro-batch, not after
//    every micro-batch: identical bytes when each replica runs one micro-batch per step, but the
//    full gradient stays allocated (ZeRO-1's memory, not ZeRO-2's).
//  - Interleaved 1F1B is not supported yet (rejected with a reason).
//
// Tested by bench/gpu/run_all.sh (several ranks against one, on a GPU).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "executor/cuda/comm_nccl.h"
#include "executor/cuda/gpt_cuda.h"
#include "executor/cuda/kernels.h"

namespace trainplan::executor::cuda {

struct CudaTrainOptions {
  std::uint64_t seed = 1234;
  AdamWConfig adamw;
};

struct CudaStepResult {
  double loss = 0;     // mean token loss over the global batch (every rank)
  double seconds = 0;  // wall time of the step on this rank (device synchronized)
  std::map<std::string, double> phase_s;  // CUDA-event time per phase on the compute stream
  std::vector<PhaseTimer::SpanTime> spans;  // each forward/backward/sync/optimizer span
};

class CudaTrainer final : private DeviceBlockAccess {
 public:
  // comm may be null for a single-rank plan.
  static Result<std::unique_ptr<CudaTrainer>> make(const ModelSpec& model, const Plan& plan,
                                                   const CudaTrainOptions& options,
                                                   NcclComm* comm);
  ~CudaTrainer() override;

  // As Trainer::step: `batch` holds the global batch (global_batch_size * (seq_len + 1)).
  // With a trace, records this step's compute per cost-model task and its device collectives
  // (device_trace.h; read it with trace->events() after the call), laid out as trainer.cc's
  // trace. Pipeline sends and receives are host-synchronous and not in it.
  Result<CudaStepResult> step(const std::vector<std::int32_t>& batch,
                              DeviceTrace* trace = nullptr);

  std::int64_t stage() const { return stage_; }
  const CudaStageModel& stage_model() const { return *model_net_; }
  // Every float32 master value this rank holds authoritatively, with its full-tensor
  // coordinates (ZeRO >= 1: its shard). Downloads; for comparing layouts.
  void for_each_param(const std::function<void(const TensorSlice&, std::int64_t row,
                                               std::int64_t col, float value)>& fn) const;

 private:
  struct Block {
    std::int64_t padded = 0, shard = 0;
    std::int64_t master_offset = 0;      // first padded element of `master` (dp_rank * shard)
    DeviceBuffer<float> master;          // (padded) DDP, (shard) ZeRO >= 1
    DeviceBuffer<float> m, v;            // like master
    DeviceBuffer<std::int64_t> decayed;  // (begin, end) pairs into master: AdamW decays there
    std::int64_t decayed_ranges = 0;
    DeviceBuffer<bf16> compute;          // (padded) compute weights; ZeRO-3: (shard)
    DeviceBuffer<bf16> gathered;         // ZeRO-3: (padded) while acquired
    DeviceBuffer<float> grad;            // (padded) accumulated over micro-batches; ZeRO >= 1:
                                         // reduced in place, this rank's shard at master_offset
    std::vector<std::pair<std::int64_t, std::int64_t>> tied, sp_norm;
  };

  CudaTrainer(const ModelSpec& model, const Plan& plan, const CudaTrainOptions& options,
              NcclComm* comm);
  void acquire(std::size_t b, DpPoint point) override;
  void release(std::size_t b) override;
  void backward_done(std::size_t) override {}
  const bf16* params(std::size_t b) override;
  float* grads(std::size_t b) override;
  void run_schedule(const std::vector<std::int32_t>& batch);
  void finish_gradients();
  // Sums n gradient elements over group g in the plan's gradient precision.
  void all_reduce_grad(CommGroup g, float* grad, std::int64_t n, std::string_view task);
  void optimizer_step();

  ModelSpec model_;
  Plan plan_;
  CudaTrainOptions options_;
  NcclComm* comm_;
  std::int64_t stage_ = 0, dp_rank_ = 0, step_ = 0;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<Gemm> gemm_;
  std::unique_ptr<CudaStageModel> model_net_;
  std::vector<Block> blocks_;
  DeviceBuffer<double> loss_sum_;
  DeviceBuffer<bf16> grad16_;  // grad_precision compute: gradients cast for the collectives
  std::unique_ptr<PhaseTimer> timer_;
  DeviceTrace* trace_ = nullptr;  // during a traced step
};

}  // namespace trainplan::executor::cuda
