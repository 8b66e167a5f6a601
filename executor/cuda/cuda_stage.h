// The CUDA backend of the Trainer (executor/stage.h): gpt_cuda.h's CudaStageModel on one
// compute stream, with NCCL's device collectives (comm_nccl.h). Mixed precision: bf16 compute
// weights, float32 master weights and AdamW state, float32 gradient accumulation (Megatron-LM's
// main_grad). Gradients are reduced in the plan's grad_precision: fp32 as accumulated (the cost
// model's 18 bytes per parameter), or, with grad_precision compute, cast to bf16 for the
// collective (its bytes as the cost model counts them; the float32 accumulator and a bf16
// scratch of the largest block are then more memory than its 16 bytes per parameter). A
// collective over a group of one rank moves nothing and is skipped (no cast either).
//
// The Trainer gives it what the CPU backend has: every pipeline schedule (interleaved 1F1B
// included) and ZeRO-2/3 reduce-scattering each micro-batch's gradient and freeing the full
// one (a float32 shard accumulator per block holds the step's sum).
//
// Tested by tests/executor/cuda/gpt_cuda_test.cc (on a GPU; it skips without one, saying why)
// and bench/gpu/run_all.sh (several ranks against one).
#pragma once

#include <memory>

#include "executor/cuda/comm_nccl.h"
#include "executor/trainer.h"

namespace trainplan::executor::cuda {

// The CUDA backend over `comm` (null: a single rank; ZeRO then has nothing to shard over).
Backend cuda_backend(const ModelSpec& model, const Plan& plan, NcclComm* comm);

// A Trainer on the CUDA backend: step(batch, &device_trace) records a DeviceTrace
// (device_trace.h); StepResult::phase_s and spans hold the compute stream's CUDA-event times of
// "forward", "backward", "gradient_sync" and "optimizer". Pipeline sends and receives are
// host-synchronous and not in the trace.
Result<std::unique_ptr<Trainer>> make_cuda_trainer(const ModelSpec& model, const Plan& plan,
                                                   const TrainOptions& options, NcclComm* comm);

}  // namespace trainplan::executor::cuda
