// The single-rank backend: every group has one member, so collectives are copies. It runs the
// reference (single-process) training in tests and needs no MPI. See comm.h.
#include <algorithm>

#include "executor/comm.h"

namespace trainplan::executor {

namespace {

class LocalComm final : public Comm {
 public:
  std::int64_t world_rank() const override { return 0; }
  std::int64_t world_size() const override { return 1; }
  std::int64_t group_size(CommGroup) const override { return 1; }
  std::int64_t group_rank(CommGroup) const override { return 0; }
  std::string backend_name() const override { return "local"; }

 protected:
  void do_all_reduce(CommGroup, float*, std::int64_t, ReduceOp) override {}
  void do_reduce_scatter(CommGroup, const float* in, float* out, std::int64_t n) override {
    if (in != out) std::copy(in, in + n, out);
  }
  void do_all_gather(CommGroup, const float* in, float* out, std::int64_t n) override {
    if (in != out) std::copy(in, in + n, out);
  }
  void do_all_to_all(CommGroup, const float* in, float* out, std::int64_t n) override {
    if (in != out) std::copy(in, in + n, out);
  }
  void do_all_to_all_v(CommGroup, const float* in, const std::vector<std::int64_t>& send_counts,
                       float* out, const std::vector<std::int64_t>&) override {
    if (in != out) std::copy(in, in + send_counts[0], out);
  }
  void do_all_gather_v(CommGroup, const float* in, float* out,
                       const std::vector<std::int64_t>& counts) override {
    if (in != out) std::copy(in, in + counts[0], out);
  }
  void do_reduce_scatter_v(CommGroup, const float* in, float* out,
                           const std::vector<std::int64_t>& counts) override {
    if (in != out) std::copy(in, in + counts[0], out);
  }
  void do_exchange_counts(CommGroup, const std::int64_t* in, std::int64_t* out,
                          std::int64_t per_member) override {
    std::copy(in, in + per_member, out);
  }
  void do_send(CommGroup g, const float*, std::int64_t, std::int64_t, int,
               std::string_view) override {
    throw CommError("local backend: send on group " + std::string(to_string(g)) +
                    " has no peer (a single rank)");
  }
  void do_recv(CommGroup g, float*, std::int64_t, std::int64_t, int, std::string_view) override {
    throw CommError("local backend: recv on group " + std::string(to_string(g)) +
                    " has no peer (a single rank)");
  }
  void do_wait_sends() override {}
  void do_barrier(CommGroup) override {}
  void do_control_all_reduce(double*, std::int64_t, ReduceOp) override {}
};

}  // namespace

std::unique_ptr<Comm> make_local_comm() { return std::make_unique<LocalComm>(); }

}  // namespace trainplan::executor
