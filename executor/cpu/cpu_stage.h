// The CPU backend of the Trainer (executor/stage.h): executor/cpu/gpt.h's StageModel over float32
// host buffers, with Comm's collectives (comm_mpi.h, or the local communicator of one rank).
// A block keeps its full parameters (ZeRO-3: its shard, gathered per use), its gradient (ZeRO-2/3:
// only from a micro-batch's backward to its reduce-scatter) and AdamW's moments over the range it
// updates.
//
// Offload (executor/offload.h): on a CPU host and "device" are one memory, so the tiers are
// what can be done honestly there. The offloaded states sit in buffers of their own (counted
// off the device by account_memory), the transfers ZeRO-Offload / ZeRO-Infinity put on PCIe are
// copies between those and the device buffers, counted in bytes (OffloadBytes; the cost
// model's offload_traffic_on_stage), and offload_device nvme keeps them in a real file, read
// with pread and written with pwrite around each block's AdamW step (the next block's moments
// read on a thread meanwhile, OffloadOptions::prefetch; with optimizer+params also each
// gather's parameter shard, read ahead along the first step's gather order). AdamW runs the same calls on the same
// values as without offload, so losses and weights are bitwise those of the plan without it.
//
// Tested against the single-process run by tests/executor/parallel_check.cc, and by
// tests/executor/trainer_test.cc and tests/executor/trace_test.cc.
#pragma once

#include <memory>

#include "executor/comm.h"
#include "executor/trainer.h"

namespace trainplan::executor {

// The CPU backend: check_executor_supports (params.h) and a CpuStage per rank, which keeps the
// states the plan offloads (Plan::offload) in host buffers apart from its "device" ones, or in a
// file per rank under offload.dir (offload_device nvme; executor/offload.h).
Backend cpu_backend(const ModelSpec& model, const Plan& plan, const OffloadOptions& offload = {},
                    MoeCapacityShares capacity_shares = {});

// A Trainer on the CPU backend over `comm` (which must outlive it).
Result<std::unique_ptr<Trainer>> make_cpu_trainer(const ModelSpec& model, const Plan& plan,
                                                  const TrainOptions& options, Comm& comm);

}  // namespace trainplan::executor
