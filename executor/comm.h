// The executor's communication contract: the few collectives a training step needs, on the
// process groups of core/cost/cost_model.h (tp, cp, pp, dp, embedding). One backend per file:
// comm_local.cc (a single rank, no MPI: every group has one member), comm_mpi.cc (OpenMPI);
// the CUDA backend (issue 5) adds comm_nccl.cc behind the same interface.
//
// The public calls are non-virtual: they count the bytes this rank sends per group with
// bytes_sent_per_rank (core/cost/collectives.h, the one place for that math) and the time the
// call was in flight, then hand the work to the backend's do_* hook. A backend implements
// only the hooks and the group sizes. Each call takes the name of its cost-model task
// ("tp_all_reduce_attn"); with a TraceRecorder set (trace.h), a call over a group of more than
// one rank is also recorded as a span of that name with the bytes counted (a group of one
// moves nothing and the cost model lists no task for it).
//
// Failures (a peer died, an MPI error) are not recoverable inside a step: the hooks throw
// CommError naming the call and file:line, and main() turns it into an exit code.
//
// Tested by tests/executor/trainer_test.cc and tests/executor/trace_test.cc (local), and
// tests/executor/parallel_check.cc (MPI).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "executor/trace.h"
#include "core/cost/cost_model.h"

namespace trainplan::executor {

class CommError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class ReduceOp { kSum, kMax };

// What one rank did in one group during a run (reset with Comm::reset_counters).
struct GroupCounters {
  std::int64_t bytes_sent = 0;  // collectives.h convention (ring algorithm, payload bytes)
  double time_s = 0;            // wall time inside this group's calls, waits included
  std::int64_t calls = 0;
};

inline constexpr std::size_t kNumCommGroups = kCommGroupCount;  // CommGroup's enumerators

class Comm {
 public:
  virtual ~Comm() = default;
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  virtual std::int64_t world_rank() const = 0;
  virtual std::int64_t world_size() const = 0;
  // Members of this rank's group (1 when the rank is in no such group).
  virtual std::int64_t group_size(CommGroup g) const = 0;
  virtual std::int64_t group_rank(CommGroup g) const = 0;
  // A short description for reports ("mpi (Open MPI v4.1.4)", "local").
  virtual std::string backend_name() const = 0;

  // `task`: the cost-model task this call is, for the trace (empty: the collective's name).
  // In place over the group: data (count) becomes the element-wise sum (or max).
  void all_reduce(CommGroup g, float* data, std::int64_t count, ReduceOp op = ReduceOp::kSum,
                  std::string_view task = {});
  // in (n * count), out (count): out = shard group_rank of the element-wise sum. In place
  // when out == in + group_rank * count (NCCL's convention): the shard stays where it was, and
  // the rest of `in` is left undefined.
  void reduce_scatter(CommGroup g, const float* in, float* out, std::int64_t count,
                      std::string_view task = {});
  // in (count), out (n * count): out holds every member's `in`, in group-rank order. In place
  // when in == out + group_rank * count.
  void all_gather(CommGroup g, const float* in, float* out, std::int64_t count,
                  std::string_view task = {});
  // in, out (n * count): block j of `in` goes to member j, block i of `out` came from member i.
  void all_to_all(CommGroup g, const float* in, float* out, std::int64_t count,
                  std::string_view task = {});
  // Variable all-to-all (MPI_Alltoallv), as an MoE layer's token dispatch and combine: member j
  // gets the next send_counts[j] elements of `in` (in member order), and `out` receives
  // recv_counts[i] elements from member i (in member order). Counted as an all-to-all whose
  // message (nccl-tests' S) is this rank's whole send buffer: the cost model's ep_dispatch and
  // ep_combine (core/cost/tasks.cc) assume balanced routing, so a rank's count matches it when
  // it sends T * k rows (dispatch, combine's backward) and the ep group's sum matches always.
  void all_to_all_v(CommGroup g, const float* in, const std::vector<std::int64_t>& send_counts,
                    float* out, const std::vector<std::int64_t>& recv_counts,
                    std::string_view task = {});
  // Variable all-gather (MPI_Allgatherv), as the folded MoE layer's gather of the routed rows
  // over the expert tensor-parallel group: `in` holds counts[group_rank] elements, `out` every
  // member's in group-rank order (counts[i] from member i). Variable reduce-scatter
  // (MPI_Reduce_scatter), its partner after the experts: `in` holds the counts' sum, `out`
  // receives counts[group_rank] elements, the element-wise sum over the members of that block.
  // Both counted by blocks: each member's block crosses n-1 links (to or from its n-1 peers),
  // charged to its member, (n-1) * counts[group_rank] floats. With equal blocks that is the ring
  // figure ((n-1)/n of the gathered buffer), and the group's sum is (n-1) times the buffer
  // always, what the cost model's expert_tp_all_gather and expert_tp_reduce_scatter predict for
  // balanced routing (core/cost/tasks.cc).
  void all_gather_v(CommGroup g, const float* in, float* out,
                    const std::vector<std::int64_t>& counts, std::string_view task = {});
  void reduce_scatter_v(CommGroup g, const float* in, float* out,
                        const std::vector<std::int64_t>& counts, std::string_view task = {});
  // The counts an all_to_all_v needs: `send` holds per_member values for each member in turn;
  // returns the values each member sent this rank, in member order. Bookkeeping, not payload
  // (the cost model lists no task for it, nor does Megatron-Core's token dispatcher count its
  // own): counted as control traffic, not under g.
  std::vector<std::int64_t> exchange_counts(CommGroup g, const std::vector<std::int64_t>& send);
  // The same into `out` (resized to send's size: no allocation once it has that capacity).
  void exchange_counts(CommGroup g, const std::vector<std::int64_t>& send,
                       std::vector<std::int64_t>& out);
  // Point-to-point by group rank. send returns at once (the data is copied); wait_sends()
  // completes every outstanding send. recv blocks until the data has arrived. Messages with
  // the same peer and tag arrive in the order they were sent. Traced pipeline sends are named
  // send_forward / send_backward and receives recv_forward / recv_backward (trace.h places them).
  void send(CommGroup g, const float* data, std::int64_t count, std::int64_t peer, int tag = 0,
            std::string_view task = {});
  void recv(CommGroup g, float* data, std::int64_t count, std::int64_t peer, int tag = 0,
            std::string_view task = {});
  void wait_sends();
  void barrier(CommGroup g);

  // Run control outside the model's communication (loss, non-finite flags): a sum or max over
  // every rank, counted under "control", never under a model group.
  void control_all_reduce(double* data, std::int64_t count, ReduceOp op);

  const GroupCounters& counters(CommGroup g) const { return counters_[index(g)]; }
  const GroupCounters& control_counters() const { return control_; }
  void reset_counters();

  // Records the model groups' calls into `trace` from now on (null: stop). Barriers and the
  // control all-reduce are not model traffic and are not recorded.
  void set_trace(TraceRecorder* trace) { trace_ = trace; }
  TraceRecorder* trace() const { return trace_; }

 protected:
  Comm() = default;
  virtual void do_all_reduce(CommGroup g, float* data, std::int64_t count, ReduceOp op) = 0;
  virtual void do_reduce_scatter(CommGroup g, const float* in, float* out,
                                 std::int64_t count) = 0;
  virtual void do_all_gather(CommGroup g, const float* in, float* out, std::int64_t count) = 0;
  virtual void do_all_to_all(CommGroup g, const float* in, float* out, std::int64_t count) = 0;
  virtual void do_all_to_all_v(CommGroup g, const float* in,
                               const std::vector<std::int64_t>& send_counts, float* out,
                               const std::vector<std::int64_t>& recv_counts) = 0;
  // The variable all-gather and reduce-scatter: a backend without them (NCCL's: MoE runs on the
  // CPU executor) keeps these, which throw CommError.
  virtual void do_all_gather_v(CommGroup g, const float* in, float* out,
                               const std::vector<std::int64_t>& counts);
  virtual void do_reduce_scatter_v(CommGroup g, const float* in, float* out,
                                   const std::vector<std::int64_t>& counts);
  // in and out: per_member values for each member of g.
  virtual void do_exchange_counts(CommGroup g, const std::int64_t* in, std::int64_t* out,
                                  std::int64_t per_member) = 0;
  // `task`: the traced name (send_forward, ...), for a backend that traces on its own (NCCL's
  // device trace).
  virtual void do_send(CommGroup g, const float* data, std::int64_t count, std::int64_t peer,
                       int tag, std::string_view task) = 0;
  virtual void do_recv(CommGroup g, float* data, std::int64_t count, std::int64_t peer,
                       int tag, std::string_view task) = 0;
  virtual void do_wait_sends() = 0;
  virtual void do_barrier(CommGroup g) = 0;
  virtual void do_control_all_reduce(double* data, std::int64_t count, ReduceOp op) = 0;

 private:
  using Clock = TraceRecorder::Clock;
  static std::size_t index(CommGroup g) { return static_cast<std::size_t>(g); }
  // Counts a call that began at t0 and ends now: the bytes this rank sent for a message of
  // `message_bytes` (nccl-tests' S), time, and the trace span.
  void count(CommGroup g, Collective c, std::int64_t message_bytes, Clock::time_point t0,
             std::string_view task);
  // The same with the bytes this rank sent already known.
  void count_sent(CommGroup g, Collective c, std::int64_t bytes_sent, Clock::time_point t0,
                  std::string_view task);
  // all_gather_v and reduce_scatter_v: checks the counts, runs `op` across the group (a copy on
  // one member), counts this member's block as sent (n-1 times).
  using VariableOp = void (Comm::*)(CommGroup, const float*, float*,
                                    const std::vector<std::int64_t>&);
  void variable_collective(CommGroup g, Collective c, std::string_view what, VariableOp op,
                           const float* in, float* out, const std::vector<std::int64_t>& counts,
                           std::string_view task);
  // Checks a variable collective's counts (one per member) and returns this member's.
  std::int64_t own_count(CommGroup g, const std::vector<std::int64_t>& counts,
                         std::string_view what) const;

  std::array<GroupCounters, kNumCommGroups> counters_{};
  GroupCounters control_;
  TraceRecorder* trace_ = nullptr;
};

// A single rank: every group has one member, collectives copy, send/recv are errors.
std::unique_ptr<Comm> make_local_comm();

}  // namespace trainplan::executor
