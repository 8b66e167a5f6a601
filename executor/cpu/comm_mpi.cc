// The MPI backend; see comm_mpi.h. Tested under mpirun by tests/executor/parallel_check.cc.
#include "executor/cpu/comm_mpi.h"

#include <algorithm>
#include <array>
#include <list>
#include <string>
#include <vector>

#include "core/rank_layout.h"

namespace trainplan::executor {

namespace {

std::string mpi_error_string(int code) {
  std::array<char, MPI_MAX_ERROR_STRING> buf{};
  int len = 0;
  if (MPI_Error_string(code, buf.data(), &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(buf.data(), static_cast<std::size_t>(len));
}

int to_int(std::int64_t v) {
  if (v < 0 || v > 0x7fffffff)
    throw CommError("message of " + std::to_string(v) + " elements exceeds MPI's int count");
  return static_cast<int>(v);
}

MPI_Op to_mpi(ReduceOp op) { return op == ReduceOp::kMax ? MPI_MAX : MPI_SUM; }

// MPI's counts and displacements (ints) for blocks of `counts` floats laid end to end, into
// vectors the caller keeps from call to call (a step allocates nothing, issue 28).
void lay_out(const std::vector<std::int64_t>& counts, std::vector<int>& c, std::vector<int>& at) {
  c.clear();
  at.clear();
  std::int64_t next = 0;
  for (std::int64_t k : counts) {
    c.push_back(to_int(k));
    at.push_back(to_int(next));
    next += k;
  }
  static_cast<void>(to_int(next));  // the whole buffer must fit int displacements
}

class MpiComm final : public Comm {
 public:
  ~MpiComm() override {
    // Best effort: a destructor must not throw, and after a failure MPI may be unusable.
    for (MPI_Request& r : pending_) MPI_Request_free(&r);
    for (MPI_Comm& c : groups_)
      if (c != MPI_COMM_NULL) MPI_Comm_free(&c);
    if (world_ != MPI_COMM_NULL) MPI_Comm_free(&world_);
  }

  static Result<std::unique_ptr<Comm>> make(const Plan& plan, MPI_Comm world) {
    auto layout = RankLayout::make(plan);
    if (!layout.ok()) return layout.status();
    std::unique_ptr<MpiComm> c(new MpiComm());
    TRAINPLAN_MPI_CALL(MPI_Comm_dup(world, &c->world_));
    TRAINPLAN_MPI_CALL(MPI_Comm_set_errhandler(c->world_, MPI_ERRORS_RETURN));
    int rank = 0, size = 0;
    TRAINPLAN_MPI_CALL(MPI_Comm_rank(c->world_, &rank));
    TRAINPLAN_MPI_CALL(MPI_Comm_size(c->world_, &size));
    if (size != plan.world_size())
      return Status::Error("MPI world has " + std::to_string(size) + " ranks, the plan needs " +
                           std::to_string(plan.world_size()));
    c->rank_ = rank;
    c->size_ = size;
    const RankCoord me = layout->coord(rank);
    auto split = [&](CommGroup g, int color, int key) {
      MPI_Comm out = MPI_COMM_NULL;
      TRAINPLAN_MPI_CALL(MPI_Comm_split(c->world_, color, key, &out));
      if (out != MPI_COMM_NULL) {
        TRAINPLAN_MPI_CALL(MPI_Comm_set_errhandler(out, MPI_ERRORS_RETURN));
        int n = 0, r = 0;
        TRAINPLAN_MPI_CALL(MPI_Comm_size(out, &n));
        TRAINPLAN_MPI_CALL(MPI_Comm_rank(out, &r));
        c->sizes_[static_cast<std::size_t>(g)] = n;
        c->ranks_[static_cast<std::size_t>(g)] = r;
      }
      c->groups_[static_cast<std::size_t>(g)] = out;
    };
    split(CommGroup::kTp, static_cast<int>(layout->group_color(Axis::kTp, rank)),
          static_cast<int>(me.tp));
    // Context parallelism's group: the cp ranks that share each sequence (K,V all-gathers and
    // dK,dV reduce-scatters), in CP-rank order.
    split(CommGroup::kCp, static_cast<int>(layout->group_color(Axis::kCp, rank)),
          static_cast<int>(me.cp));
    // The dense weights' gradient group: dp replicas x cp context-parallel ranks, or with
    // hybrid sharding the run of them that shares one set of ZeRO shards; then the ranks
    // holding the same shard in every run.
    split(CommGroup::kDp, static_cast<int>(layout->group_color(Axis::kZeroShard, rank)),
          static_cast<int>(layout->index_in_group(Axis::kZeroShard, rank)));
    split(CommGroup::kDpReplica, static_cast<int>(layout->group_color(Axis::kZeroReplica, rank)),
          static_cast<int>(layout->index_in_group(Axis::kZeroReplica, rank)));
    // Expert parallelism, carved out of dp or folded over a stage's ranks (Plan::expert_layout,
    // core/rank_layout.h): the ranks that exchange tokens, and those that hold the same experts
    // and sum their gradients (the cost model's expert_dp_cp).
    split(CommGroup::kEp, static_cast<int>(layout->group_color(Axis::kEp, rank)),
          static_cast<int>(layout->index_in_group(Axis::kEp, rank)));
    // Folded with expert_tp > 1, the ranks that split each expert's MLP and gather the rows the
    // all-to-all brought them (Axis::kExpertTp; carved, the tp group, used with sequence
    // parallelism: Plan::moe_routes_own_rows).
    split(CommGroup::kExpertTp, static_cast<int>(layout->group_color(Axis::kExpertTp, rank)),
          static_cast<int>(layout->index_in_group(Axis::kExpertTp, rank)));
    split(CommGroup::kExpertDp, static_cast<int>(layout->group_color(Axis::kExpertDp, rank)),
          static_cast<int>(layout->index_in_group(Axis::kExpertDp, rank)));
    split(CommGroup::kPp, static_cast<int>(layout->group_color(Axis::kPp, rank)),
          static_cast<int>(me.pp));
    // Tied embeddings on two stages (splits_tied_embedding): the embedding's and the head's
    // stage of one (tp, cp, dp) coordinate (Megatron-LM's embedding group). DualPipe: every
    // stage s with its mirror pp-1-s, which holds the other copy of its two chunks (the cost
    // model's dualpipe_mirror_grad_all_reduce names this group).
    const int coordinate = static_cast<int>(me.tp + plan.tp * (me.cp + plan.cp * me.dp));
    const int pairs = static_cast<int>(plan.tp * plan.cp * plan.dp);
    int embedding_color = MPI_UNDEFINED;
    if (plan.schedule == Schedule::kDualPipe) {
      embedding_color = coordinate + pairs * static_cast<int>(std::min(me.pp, plan.pp - 1 - me.pp));
    } else if (splits_tied_embedding(plan) && (me.pp == 0 || me.pp == head_stage(plan))) {
      embedding_color = coordinate;
    }
    split(CommGroup::kEmbedding, embedding_color, static_cast<int>(me.pp));
    return std::unique_ptr<Comm>(std::move(c));
  }

  std::int64_t world_rank() const override { return rank_; }
  std::int64_t world_size() const override { return size_; }
  std::int64_t group_size(CommGroup g) const override { return sizes_[static_cast<std::size_t>(g)]; }
  std::int64_t group_rank(CommGroup g) const override { return ranks_[static_cast<std::size_t>(g)]; }
  std::string backend_name() const override {
    std::array<char, MPI_MAX_LIBRARY_VERSION_STRING> buf{};
    int len = 0;
    MPI_Get_library_version(buf.data(), &len);
    std::string v(buf.data(), static_cast<std::size_t>(len));
    if (auto cut = v.find(','); cut != std::string::npos) v.resize(cut);
    return "mpi (" + v + ")";
  }

 protected:
  void do_all_reduce(CommGroup g, float* data, std::int64_t n, ReduceOp op) override {
    TRAINPLAN_MPI_CALL(MPI_Allreduce(MPI_IN_PLACE, data, to_int(n), MPI_FLOAT, to_mpi(op), comm(g)));
  }
  void do_reduce_scatter(CommGroup g, const float* in, float* out, std::int64_t n) override {
    const std::int64_t at = group_rank(g) * n;
    if (out != in + at) {
      TRAINPLAN_MPI_CALL(
          MPI_Reduce_scatter_block(in, out, to_int(n), MPI_FLOAT, MPI_SUM, comm(g)));
      return;
    }
    // In place (comm.h). MPI's in-place form takes the input from the receive buffer, whose
    // first n elements then hold the result (MPI 3.1, sec. 5.10.1; checked with Open MPI
    // 4.1.4): move it to the shard's own position.
    float* whole = out - at;
    TRAINPLAN_MPI_CALL(
        MPI_Reduce_scatter_block(MPI_IN_PLACE, whole, to_int(n), MPI_FLOAT, MPI_SUM, comm(g)));
    if (at != 0) std::copy_n(whole, n, out);
  }
  void do_all_gather(CommGroup g, const float* in, float* out, std::int64_t n) override {
    if (in == out + group_rank(g) * n) {  // in place (comm.h)
      TRAINPLAN_MPI_CALL(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, out, to_int(n),
                                       MPI_FLOAT, comm(g)));
      return;
    }
    TRAINPLAN_MPI_CALL(MPI_Allgather(in, to_int(n), MPI_FLOAT, out, to_int(n), MPI_FLOAT, comm(g)));
  }
  void do_all_to_all(CommGroup g, const float* in, float* out, std::int64_t n) override {
    TRAINPLAN_MPI_CALL(MPI_Alltoall(in, to_int(n), MPI_FLOAT, out, to_int(n), MPI_FLOAT, comm(g)));
  }
  void do_all_to_all_v(CommGroup g, const float* in, const std::vector<std::int64_t>& send_counts,
                       float* out, const std::vector<std::int64_t>& recv_counts) override {
    // Members, kept from call to call (a step allocates nothing, issue 28).
    std::vector<int> &sc = a2a_send_counts_, &sd = a2a_send_at_, &rc = a2a_recv_counts_,
                     &rd = a2a_recv_at_;
    lay_out(send_counts, sc, sd);
    lay_out(recv_counts, rc, rd);
    TRAINPLAN_MPI_CALL(MPI_Alltoallv(in, sc.data(), sd.data(), MPI_FLOAT, out, rc.data(),
                                     rd.data(), MPI_FLOAT, comm(g)));
  }
  void do_all_gather_v(CommGroup g, const float* in, float* out,
                       const std::vector<std::int64_t>& counts) override {
    std::vector<int> &c = a2a_recv_counts_, &at = a2a_recv_at_;  // kept members, as above
    lay_out(counts, c, at);
    TRAINPLAN_MPI_CALL(MPI_Allgatherv(in, c[static_cast<std::size_t>(group_rank(g))], MPI_FLOAT,
                                      out, c.data(), at.data(), MPI_FLOAT, comm(g)));
  }
  void do_reduce_scatter_v(CommGroup g, const float* in, float* out,
                           const std::vector<std::int64_t>& counts) override {
    std::vector<int>& c = a2a_recv_counts_;
    c.clear();
    std::int64_t total = 0;
    for (std::int64_t k : counts) {
      c.push_back(to_int(k));
      total += k;
    }
    static_cast<void>(to_int(total));
    TRAINPLAN_MPI_CALL(MPI_Reduce_scatter(in, out, c.data(), MPI_FLOAT, MPI_SUM, comm(g)));
  }
  void do_exchange_counts(CommGroup g, const std::int64_t* in, std::int64_t* out,
                          std::int64_t per_member) override {
    TRAINPLAN_MPI_CALL(MPI_Alltoall(in, to_int(per_member), MPI_INT64_T, out,
                                    to_int(per_member), MPI_INT64_T, comm(g)));
  }
  void do_send(CommGroup g, const float* data, std::int64_t n, std::int64_t peer, int tag,
               std::string_view) override {
    // Non-blocking with its own copy, so that two stages sending to each other at once (1F1B's
    // steady state) cannot deadlock in rendezvous.
    // The buffers are kept from step to step (a step allocates nothing, issue 28): the next
    // free one is refilled, a new one added only past the most sends ever outstanding.
    if (next_free_ == buffers_.end()) next_free_ = buffers_.emplace(buffers_.end());
    std::vector<float>& buffer = *next_free_++;
    buffer.assign(data, data + n);
    pending_.push_back(MPI_REQUEST_NULL);
    TRAINPLAN_MPI_CALL(MPI_Isend(buffer.data(), to_int(n), MPI_FLOAT, static_cast<int>(peer),
                       kTagBase + tag, comm(g), &pending_.back()));
  }
  void do_recv(CommGroup g, float* data, std::int64_t n, std::int64_t peer, int tag,
               std::string_view) override {
    TRAINPLAN_MPI_CALL(MPI_Recv(data, to_int(n), MPI_FLOAT, static_cast<int>(peer), kTagBase + tag, comm(g),
                      MPI_STATUS_IGNORE));
  }
  void do_wait_sends() override {
    if (pending_.empty()) return;
    TRAINPLAN_MPI_CALL(MPI_Waitall(static_cast<int>(pending_.size()), pending_.data(),
                         MPI_STATUSES_IGNORE));
    pending_.clear();
    next_free_ = buffers_.begin();
  }
  void do_barrier(CommGroup g) override { TRAINPLAN_MPI_CALL(MPI_Barrier(comm(g))); }
  void do_control_all_reduce(double* data, std::int64_t n, ReduceOp op) override {
    TRAINPLAN_MPI_CALL(MPI_Allreduce(MPI_IN_PLACE, data, to_int(n), MPI_DOUBLE, to_mpi(op), world_));
  }

 private:
  static constexpr int kTagBase = 17;
  MpiComm() { groups_.fill(MPI_COMM_NULL); sizes_.fill(1); ranks_.fill(0); }
  MPI_Comm comm(CommGroup g) const {
    MPI_Comm c = groups_[static_cast<std::size_t>(g)];
    if (c == MPI_COMM_NULL)
      throw CommError("rank " + std::to_string(rank_) + " is not in a " +
                      std::string(to_string(g)) + " group");
    return c;
  }

  MPI_Comm world_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  std::array<MPI_Comm, kNumCommGroups> groups_{};
  std::array<std::int64_t, kNumCommGroups> sizes_{}, ranks_{};
  std::vector<MPI_Request> pending_;
  std::list<std::vector<float>> buffers_;  // a list: growing it never moves a posted buffer
  std::list<std::vector<float>>::iterator next_free_ = buffers_.end();  // the first not posted
  std::vector<int> a2a_send_counts_, a2a_send_at_, a2a_recv_counts_, a2a_recv_at_;  // Alltoallv
};

}  // namespace

void check_mpi(int code, const char* call, const char* file, int line) {
  if (code == MPI_SUCCESS) return;
  int rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  throw CommError(std::string(call) + " failed at " + file + ":" + std::to_string(line) +
                  " on rank " + std::to_string(rank) + ": " + mpi_error_string(code));
}

Result<std::unique_ptr<Comm>> make_mpi_comm(const Plan& plan, MPI_Comm world) {
  return MpiComm::make(plan, world);
}

}  // namespace trainplan::executor
