// Byte and time counting, and the trace hook, shared by every communication backend; see comm.h.
#include "executor/comm.h"

#include <algorithm>

namespace trainplan::executor {

namespace {
double seconds_between(std::chrono::steady_clock::time_point a,
                       std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}
constexpr std::int64_t kFloatBytes = sizeof(float);
}  // namespace

void Comm::count(CommGroup g, Collective c, std::int64_t message_bytes, Clock::time_point t0,
                 std::string_view task) {
  count_sent(g, c, bytes_sent_per_rank(c, message_bytes, group_size(g)), t0, task);
}

void Comm::count_sent(CommGroup g, Collective c, std::int64_t bytes_sent, Clock::time_point t0,
                      std::string_view task) {
  const Clock::time_point t1 = Clock::now();
  GroupCounters& k = counters_[index(g)];
  k.bytes_sent += bytes_sent;
  k.time_s += seconds_between(t0, t1);
  ++k.calls;
  if (trace_ != nullptr && group_size(g) > 1)
    trace_->record(task.empty() ? to_string(c) : task, comm_track(g, c, task), t0, t1,
                   bytes_sent, g);
}

// Message sizes are nccl-tests' S (core/cost/collectives.h): the whole reduced or gathered buffer.
void Comm::all_reduce(CommGroup g, float* data, std::int64_t count_, ReduceOp op,
                      std::string_view task) {
  const Clock::time_point t0 = Clock::now();
  if (group_size(g) > 1) do_all_reduce(g, data, count_, op);
  count(g, Collective::kAllReduce, count_ * kFloatBytes, t0, task);
}

void Comm::reduce_scatter(CommGroup g, const float* in, float* out, std::int64_t count_,
                          std::string_view task) {
  const Clock::time_point t0 = Clock::now();
  do_reduce_scatter(g, in, out, count_);
  count(g, Collective::kReduceScatter, count_ * group_size(g) * kFloatBytes, t0, task);
}

void Comm::all_gather(CommGroup g, const float* in, float* out, std::int64_t count_,
                      std::string_view task) {
  const Clock::time_point t0 = Clock::now();
  do_all_gather(g, in, out, count_);
  count(g, Collective::kAllGather, count_ * group_size(g) * kFloatBytes, t0, task);
}

void Comm::all_to_all(CommGroup g, const float* in, float* out, std::int64_t count_,
                      std::string_view task) {
  const Clock::time_point t0 = Clock::now();
  do_all_to_all(g, in, out, count_);
  count(g, Collective::kAllToAll, count_ * group_size(g) * kFloatBytes, t0, task);
}

void Comm::all_to_all_v(CommGroup g, const float* in,
                        const std::vector<std::int64_t>& send_counts, float* out,
                        const std::vector<std::int64_t>& recv_counts, std::string_view task) {
  const auto n = static_cast<std::size_t>(group_size(g));
  if (send_counts.size() != n || recv_counts.size() != n)
    throw CommError("all_to_all_v on group " + std::string(to_string(g)) + ": " +
                    std::to_string(send_counts.size()) + " send and " +
                    std::to_string(recv_counts.size()) + " receive counts for " +
                    std::to_string(n) + " members");
  const Clock::time_point t0 = Clock::now();
  do_all_to_all_v(g, in, send_counts, out, recv_counts);
  std::int64_t total = 0;
  for (std::int64_t c : send_counts) total += c;
  count(g, Collective::kAllToAll, total * kFloatBytes, t0, task);
}

std::int64_t Comm::own_count(CommGroup g, const std::vector<std::int64_t>& counts,
                             std::string_view what) const {
  const std::int64_t n = group_size(g);
  if (static_cast<std::int64_t>(counts.size()) != n)
    throw CommError(std::string(what) + " on group " + std::string(to_string(g)) + ": " +
                    std::to_string(counts.size()) + " counts for " + std::to_string(n) +
                    " members");
  return counts[static_cast<std::size_t>(group_rank(g))];
}

void Comm::variable_collective(CommGroup g, Collective c, std::string_view what, VariableOp op,
                               const float* in, float* out,
                               const std::vector<std::int64_t>& counts, std::string_view task) {
  const std::int64_t mine = own_count(g, counts, what);
  const Clock::time_point t0 = Clock::now();
  if (group_size(g) > 1) {
    (this->*op)(g, in, out, counts);
  } else if (in != out) {
    std::copy_n(in, mine, out);
  }
  count_sent(g, c, (group_size(g) - 1) * mine * kFloatBytes, t0, task);
}

void Comm::all_gather_v(CommGroup g, const float* in, float* out,
                        const std::vector<std::int64_t>& counts, std::string_view task) {
  variable_collective(g, Collective::kAllGather, "all_gather_v", &Comm::do_all_gather_v, in, out,
                      counts, task);
}

void Comm::reduce_scatter_v(CommGroup g, const float* in, float* out,
                            const std::vector<std::int64_t>& counts, std::string_view task) {
  variable_collective(g, Collective::kReduceScatter, "reduce_scatter_v",
                      &Comm::do_reduce_scatter_v, in, out, counts, task);
}

void Comm::do_all_gather_v(CommGroup g, const float*, float*, const std::vector<std::int64_t>&) {
  throw CommError("the " + backend_name() + " backend has no variable all-gather (group " +
                  std::string(to_string(g)) + ")");
}

void Comm::do_reduce_scatter_v(CommGroup g, const float*, float*,
                               const std::vector<std::int64_t>&) {
  throw CommError("the " + backend_name() + " backend has no variable reduce-scatter (group " +
                  std::string(to_string(g)) + ")");
}

std::vector<std::int64_t> Comm::exchange_counts(CommGroup g,
                                                const std::vector<std::int64_t>& send) {
  std::vector<std::int64_t> out;
  exchange_counts(g, send, out);
  return out;
}

void Comm::exchange_counts(CommGroup g, const std::vector<std::int64_t>& send,
                           std::vector<std::int64_t>& out) {
  const std::int64_t n = group_size(g);
  const auto per = static_cast<std::int64_t>(send.size()) / n;
  if (per * n != static_cast<std::int64_t>(send.size()))
    throw CommError("exchange_counts on group " + std::string(to_string(g)) + ": " +
                    std::to_string(send.size()) + " values for " + std::to_string(n) +
                    " members");
  const Clock::time_point t0 = Clock::now();
  out.resize(send.size());
  do_exchange_counts(g, send.data(), out.data(), per);
  control_.bytes_sent += bytes_sent_per_rank(
      Collective::kAllToAll, static_cast<std::int64_t>(send.size() * sizeof(std::int64_t)), n);
  control_.time_s += seconds_between(t0, Clock::now());
  ++control_.calls;
}

void Comm::send(CommGroup g, const float* data, std::int64_t count_, std::int64_t peer, int tag,
                std::string_view task) {
  const Clock::time_point t0 = Clock::now();
  if (task.empty()) task = "send";
  do_send(g, data, count_, peer, tag, task);
  count(g, Collective::kSendRecv, count_ * kFloatBytes, t0, task);
}

void Comm::recv(CommGroup g, float* data, std::int64_t count_, std::int64_t peer, int tag,
                std::string_view task) {
  const Clock::time_point t0 = Clock::now();
  if (task.empty()) task = "recv";
  do_recv(g, data, count_, peer, tag, task);
  count(g, Collective::kSendRecv, 0, t0, task);  // a receive sends nothing
}

void Comm::wait_sends() { do_wait_sends(); }

void Comm::barrier(CommGroup g) {
  const Clock::time_point t0 = Clock::now();
  do_barrier(g);
  counters_[index(g)].time_s += seconds_between(t0, Clock::now());
}

void Comm::control_all_reduce(double* data, std::int64_t count_, ReduceOp op) {
  const Clock::time_point t0 = Clock::now();
  if (world_size() > 1) do_control_all_reduce(data, count_, op);
  control_.bytes_sent += bytes_sent_per_rank(Collective::kAllReduce,
                                             count_ * static_cast<std::int64_t>(sizeof(double)),
                                             world_size());
  control_.time_s += seconds_between(t0, Clock::now());
  ++control_.calls;
}

void Comm::reset_counters() {
  counters_ = {};
  control_ = {};
}

}  // namespace trainplan::executor
