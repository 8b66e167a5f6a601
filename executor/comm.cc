// Byte and time counting shared by every communication backend; see comm.h.
#include "executor/comm.h"

#include <chrono>

namespace trainplan::executor {

namespace {
double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
constexpr std::int64_t kFloatBytes = sizeof(float);
}  // namespace

void Comm::count(CommGroup g, Collective c, std::int64_t message_bytes, double seconds) {
  GroupCounters& k = counters_[index(g)];
  k.bytes_sent += bytes_sent_per_rank(c, message_bytes, group_size(g));
  k.time_s += seconds;
  ++k.calls;
}

void Comm::all_reduce(CommGroup g, float* data, std::int64_t count_, ReduceOp op) {
  const double t0 = now_s();
  if (group_size(g) > 1) do_all_reduce(g, data, count_, op);
  count(g, Collective::kAllReduce, count_ * kFloatBytes, now_s() - t0);
}

void Comm::reduce_scatter(CommGroup g, const float* in, float* out, std::int64_t count_) {
  const double t0 = now_s();
  do_reduce_scatter(g, in, out, count_);
  count(g, Collective::kReduceScatter, count_ * group_size(g) * kFloatBytes, now_s() - t0);
}

void Comm::all_gather(CommGroup g, const float* in, float* out, std::int64_t count_) {
  const double t0 = now_s();
  do_all_gather(g, in, out, count_);
  count(g, Collective::kAllGather, count_ * group_size(g) * kFloatBytes, now_s() - t0);
}

void Comm::all_to_all(CommGroup g, const float* in, float* out, std::int64_t count_) {
  const double t0 = now_s();
  do_all_to_all(g, in, out, count_);
  count(g, Collective::kAllToAll, count_ * group_size(g) * kFloatBytes, now_s() - t0);
}

void Comm::send(CommGroup g, const float* data, std::int64_t count_, std::int64_t peer,
                int tag) {
  const double t0 = now_s();
  do_send(g, data, count_, peer, tag);
  count(g, Collective::kSendRecv, count_ * kFloatBytes, now_s() - t0);
}

void Comm::recv(CommGroup g, float* data, std::int64_t count_, std::int64_t peer, int tag) {
  const double t0 = now_s();
  do_recv(g, data, count_, peer, tag);
  GroupCounters& k = counters_[index(g)];  // a receive sends nothing
  k.time_s += now_s() - t0;
  ++k.calls;
}

void Comm::wait_sends() { do_wait_sends(); }

void Comm::barrier(CommGroup g) {
  const double t0 = now_s();
  do_barrier(g);
  counters_[index(g)].time_s += now_s() - t0;
}

void Comm::control_all_reduce(double* data, std::int64_t count_, ReduceOp op) {
  const double t0 = now_s();
  if (world_size() > 1) do_control_all_reduce(data, count_, op);
  control_.bytes_sent += bytes_sent_per_rank(Collective::kAllReduce,
                                             count_ * static_cast<std::int64_t>(sizeof(double)),
                                             world_size());
  control_.time_s += now_s() - t0;
  ++control_.calls;
}

void Comm::reset_counters() {
  counters_ = {};
  control_ = {};
}

}  // namespace trainplan::executor
