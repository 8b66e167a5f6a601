// The NCCL backend of executor/comm.h: one world communicator, then one per process group
// (tp, dp, pp, embedding) by ncclCommSplit with the colors of core/rank_layout.h, exactly as
// comm_mpi.cc splits MPI_COMM_WORLD. Each group runs on its own CUDA stream, so its
// collectives overlap compute on the model's stream (events order the two).
//
// Two ways in:
//  - The executor/comm.h hooks (float32, host-synchronous: the data is ready when the call
//    returns). Host pointers are staged through a device buffer, so the CPU Trainer runs over
//    NCCL unchanged; device pointers go straight to NCCL.
//  - Device collectives for the CUDA stage model (*_device): any DType, device pointers,
//    ordered after `compute` and before whatever `compute` runs next, without a host wait.
//    Their bytes are counted per group with the same collectives.h math as Comm's counters;
//    group_counters() adds both.
//
// Faults: every NCCL call is checked (call text, file:line, rank). Host waits poll the stream
// and ncclCommGetAsyncError; a watchdog thread aborts every communicator when an NCCL error
// is reported or one wait exceeds NcclOptions::timeout_s, and the waiting call then throws
// CommError. With hard_exit_after_s > 0 (the tool's choice) the watchdog ends the process
// with exit code kRuntime when the main thread has not come back that long after the abort.
//
// Tested by tests/executor/cuda/comm_nccl_test.cc (skips without a GPU) and by
// bench/gpu/run_all.sh (several ranks on one GPU).
#pragma once

#include <nccl.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "executor/comm.h"
#include "executor/cuda/bootstrap.h"
#include "executor/cuda/device.h"
#include "executor/cuda/device_trace.h"
#include "core/plan.h"

namespace trainplan::executor::cuda {

enum class DType { kF32, kBF16, kF64 };
std::int64_t dtype_bytes(DType t);

void check_nccl(ncclResult_t r, const char* call, const char* file, int line);
#define TP_NCCL(call) ::trainplan::executor::cuda::check_nccl((call), #call, __FILE__, __LINE__)

struct NcclOptions {
  double timeout_s = 300;         // one host wait longer than this is a hang
  double rendezvous_timeout_s = 120;
  double hard_exit_after_s = 0;   // 0: never exit the process from the watchdog
};

class NcclComm final : public Comm {
 public:
  // Collective over all ranks of the job: selects the device (bootstrap.h), exchanges the
  // NCCL id, creates the world communicator and splits the groups.
  static Result<std::unique_ptr<NcclComm>> make(const Plan& plan, const LaunchInfo& info,
                                                const NcclOptions& options);
  ~NcclComm() override;

  std::int64_t world_rank() const override { return rank_; }
  std::int64_t world_size() const override { return size_; }
  std::int64_t group_size(CommGroup g) const override { return sizes_[idx(g)]; }
  std::int64_t group_rank(CommGroup g) const override { return ranks_[idx(g)]; }
  std::string backend_name() const override;
  int device() const { return device_; }

  // Device collectives (see above). count is in elements of `type`; `task` is the cost-model
  // task the call is, for the trace (as executor/comm.h's calls).
  void all_reduce_device(CommGroup g, void* data, std::int64_t count, DType type, ReduceOp op,
                         cudaStream_t compute, std::string_view task = {});
  void reduce_scatter_device(CommGroup g, const void* in, void* out, std::int64_t count,
                             DType type, cudaStream_t compute, std::string_view task = {});
  void all_gather_device(CommGroup g, const void* in, void* out, std::int64_t count, DType type,
                         cudaStream_t compute, std::string_view task = {});
  // Records every device collective over 2+ ranks as a span on its group's track (null: none).
  void set_trace(DeviceTrace* trace) { trace_ = trace; }
  // Bytes and calls of this rank in group g over both ways in.
  GroupCounters group_counters(CommGroup g) const;
  void reset_all_counters();
  // Waits (with the watchdog's deadline) until every group stream is idle.
  void synchronize();

 protected:
  void do_all_reduce(CommGroup g, float* data, std::int64_t n, ReduceOp op) override;
  void do_reduce_scatter(CommGroup g, const float* in, float* out, std::int64_t n) override;
  void do_all_gather(CommGroup g, const float* in, float* out, std::int64_t n) override;
  void do_all_to_all(CommGroup g, const float* in, float* out, std::int64_t n) override;
  // MoE's variable all-to-all: not on NCCL (the CUDA backend refuses MoE models before a step,
  // gpt_cuda.h); each throws CommError.
  void do_all_to_all_v(CommGroup g, const float* in, const std::vector<std::int64_t>& send_counts,
                       float* out, const std::vector<std::int64_t>& recv_counts) override;
  void do_exchange_counts(CommGroup g, const std::int64_t* in, std::int64_t* out,
                          std::int64_t per_member) override;
  // Pipeline sends and receives, host-synchronous; with a device trace set, a span on the p2p
  // stream around the NCCL call (a receive's includes its wait for the peer's send).
  void do_send(CommGroup g, const float* data, std::int64_t n, std::int64_t peer, int tag,
               std::string_view task) override;
  void do_recv(CommGroup g, float* data, std::int64_t n, std::int64_t peer, int tag,
               std::string_view task) override;
  void do_wait_sends() override;
  void do_barrier(CommGroup g) override;
  void do_control_all_reduce(double* data, std::int64_t n, ReduceOp op) override;

 private:
  NcclComm() = default;
  static std::size_t idx(CommGroup g) { return static_cast<std::size_t>(g); }
  ncclComm_t comm(CommGroup g) const;
  // Point-to-point of the pipeline: one communicator and stream per direction (towards the
  // next stage, towards the previous), so that two stages sending to each other at once
  // (1F1B's steady state) cannot block each other on one NCCL queue.
  int p2p_channel(CommGroup g, std::int64_t peer, bool sending) const;
  void wait_stream(cudaStream_t s, const char* what);
  void check_async(const char* what);
  // Counts the call; returns the bytes this rank sends.
  std::int64_t count_device(CommGroup g, Collective c, std::int64_t message_bytes);
  // Runs `enqueue` on group g's stream between the compute stream's work before and after,
  // as a traced span when a trace is set.
  template <typename Enqueue>
  void ordered_on_group(CommGroup g, Collective c, std::string_view task, std::int64_t bytes_sent,
                        cudaStream_t compute, Enqueue&& enqueue);
  // Host pointers are staged through scratch_ (grown as needed).
  bool is_device_pointer(const void* p) const;
  void* scratch(std::size_t slot, std::int64_t bytes);
  void watchdog_loop();
  void abort_all(const std::string& why);

  NcclOptions options_;
  int rank_ = 0, size_ = 1, device_ = 0;
  ncclComm_t world_ = nullptr;
  std::array<ncclComm_t, kNumCommGroups> groups_{};
  std::array<ncclComm_t, 2> p2p_{};       // towards next, towards previous (pp group)
  std::array<std::int64_t, kNumCommGroups> sizes_{}, ranks_{};
  std::array<cudaStream_t, kNumCommGroups> streams_{};
  std::array<cudaStream_t, 2> p2p_streams_{};
  cudaStream_t control_stream_ = nullptr;
  cudaEvent_t ordering_event_ = nullptr;
  std::array<DeviceBuffer<char>, 3> scratch_;
  std::vector<DeviceBuffer<char>> pending_sends_;  // staged copies until wait_sends
  std::array<GroupCounters, kNumCommGroups> device_counters_{};
  DeviceTrace* trace_ = nullptr;

  std::atomic<bool> aborted_{false}, stop_{false};
  std::atomic<double> wait_started_{0};  // steady seconds; 0 = not waiting
  std::mutex abort_mutex_;
  std::string abort_reason_;
  std::thread watchdog_;
};

}  // namespace trainplan::executor::cuda
