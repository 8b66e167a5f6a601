// The CPU backend of the Trainer (executor/stage.h): executor/cpu/gpt.h's StageModel over float32
// host buffers, with Comm's collectives (comm_mpi.h, or the local communicator of one rank).
// A block keeps its full parameters (ZeRO-3: its shard, gathered per use), its gradient (ZeRO-2/3:
// only from a micro-batch's backward to its reduce-scatter) and AdamW's moments over the range it
// updates.
//
// Tested against the single-process run by tests/executor/parallel_check.cc, and by
// tests/executor/trainer_test.cc and tests/executor/trace_test.cc.
#pragma once

#include <memory>

#include "executor/comm.h"
#include "executor/trainer.h"

namespace trainplan::executor {

// The CPU backend: check_executor_supports (params.h) and a CpuStage per rank.
Backend cpu_backend(const ModelSpec& model, const Plan& plan);

// A Trainer on the CPU backend over `comm` (which must outlive it).
Result<std::unique_ptr<Trainer>> make_cpu_trainer(const ModelSpec& model, const Plan& plan,
                                                  const TrainOptions& options, Comm& comm);

}  // namespace trainplan::executor
