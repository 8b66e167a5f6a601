// The collective benchmark over MPI; see collective_bench_mpi.h.
#include "calibration/collective_bench_mpi.h"

#include <algorithm>
#include <string>

namespace trainplan::calibration {

namespace {

// Every MPI call is checked; the message names the call and the line.
#define CAL_MPI(call)                                                                    \
  do {                                                                                   \
    const int _rc = (call);                                                              \
    if (_rc != MPI_SUCCESS) {                                                            \
      char _msg[MPI_MAX_ERROR_STRING];                                                   \
      int _len = 0;                                                                      \
      MPI_Error_string(_rc, _msg, &_len);                                                \
      return Status::Error(std::string(#call) + " failed at " __FILE__ ":" +             \
                               std::to_string(__LINE__) + ": " + std::string(_msg, _len), \
                           ExitCode::kRuntime);                                          \
    }                                                                                    \
  } while (0)

// One call of the collective on a message of `bytes` (nccl-tests' S) over `comm` of n ranks.
Status run_once(Collective c, MPI_Comm comm, int n, int rank, std::int64_t bytes,
                std::vector<float>& send, std::vector<float>& recv) {
  const auto count = static_cast<int>(bytes / 4);
  const int chunk = count / n;
  switch (c) {
    case Collective::kAllReduce:
      CAL_MPI(MPI_Allreduce(send.data(), recv.data(), count, MPI_FLOAT, MPI_SUM, comm));
      break;
    case Collective::kReduceScatter:
      CAL_MPI(MPI_Reduce_scatter_block(send.data(), recv.data(), chunk, MPI_FLOAT, MPI_SUM, comm));
      break;
    case Collective::kAllGather:
      CAL_MPI(MPI_Allgather(send.data(), chunk, MPI_FLOAT, recv.data(), chunk, MPI_FLOAT, comm));
      break;
    case Collective::kAllToAll:
      CAL_MPI(MPI_Alltoall(send.data(), chunk, MPI_FLOAT, recv.data(), chunk, MPI_FLOAT, comm));
      break;
    case Collective::kSendRecv: {
      // nccl-tests sendrecv: each rank sends to the next and receives from the previous.
      const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
      CAL_MPI(MPI_Sendrecv(send.data(), count, MPI_FLOAT, next, 7, recv.data(), count, MPI_FLOAT,
                           prev, 7, comm, MPI_STATUS_IGNORE));
      break;
    }
    default:
      return Status::Error("collective " + std::string(to_string(c)) + " is not benchmarked",
                           ExitCode::kInternal);
  }
  return Status::Ok();
}

Result<double> time_collective(Collective c, MPI_Comm comm, std::int64_t bytes,
                               const CollectiveBenchOptions& o, std::vector<float>& send,
                               std::vector<float>& recv) {
  int n = 0, rank = 0;
  CAL_MPI(MPI_Comm_size(comm, &n));
  CAL_MPI(MPI_Comm_rank(comm, &rank));
  for (int i = 0; i < o.warmup_iters; ++i)
    TRAINPLAN_RETURN_IF_ERROR(run_once(c, comm, n, rank, bytes, send, recv));
  // Agree on the iteration count from one timed call (the slowest rank's).
  CAL_MPI(MPI_Barrier(comm));
  double t0 = MPI_Wtime();
  TRAINPLAN_RETURN_IF_ERROR(run_once(c, comm, n, rank, bytes, send, recv));
  double one = MPI_Wtime() - t0, one_max = 0;
  CAL_MPI(MPI_Allreduce(&one, &one_max, 1, MPI_DOUBLE, MPI_MAX, comm));
  const int iters = std::clamp(static_cast<int>(o.target_time_s / std::max(one_max, 1e-9)),
                               o.min_iters, o.max_iters);
  // Median of kReps timed runs of iters/kReps calls each: robust to a neighbouring process
  // taking the core for a moment (nccl-tests' plain mean is not, on a shared 2-core machine).
  constexpr int kReps = 5;
  const int per_rep = std::max(1, iters / kReps);
  std::vector<double> reps;
  for (int rep = 0; rep < kReps; ++rep) {
    CAL_MPI(MPI_Barrier(comm));
    t0 = MPI_Wtime();
    for (int i = 0; i < per_rep; ++i)
      TRAINPLAN_RETURN_IF_ERROR(run_once(c, comm, n, rank, bytes, send, recv));
    double mean = (MPI_Wtime() - t0) / per_rep, mean_max = 0;
    CAL_MPI(MPI_Allreduce(&mean, &mean_max, 1, MPI_DOUBLE, MPI_MAX, comm));
    reps.push_back(mean_max);
  }
  std::sort(reps.begin(), reps.end());
  const double mean_max = reps[kReps / 2];
  return mean_max;
}

}  // namespace

Result<std::vector<CollectiveSample>> bench_collectives(MPI_Comm comm,
                                                        const CollectiveBenchOptions& o) {
  int world = 0, rank = 0;
  CAL_MPI(MPI_Comm_size(comm, &world));
  CAL_MPI(MPI_Comm_rank(comm, &rank));
  std::vector<int> group_sizes;
  for (int g = 2; g < world; g *= 2)
    if (world % g == 0) group_sizes.push_back(g);
  if (world >= 2) group_sizes.push_back(world);
  std::vector<CollectiveSample> out;
  // Buffers large enough for the biggest case (all-gather receives S; all-to-all sends S).
  const auto max_count = static_cast<std::size_t>(o.max_bytes / 4 + world);
  std::vector<float> send(max_count, 1.0f), recv(max_count, 0.0f);
  for (int g : group_sizes) {
    MPI_Comm sub = MPI_COMM_NULL;
    CAL_MPI(MPI_Comm_split(comm, rank / g, rank, &sub));
    for (Collective c : o.collectives) {
      for (std::int64_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= 2) {
        // S must split into whole float32 chunks per rank (nccl-tests rounds the same way).
        const std::int64_t unit = 4 * (c == Collective::kSendRecv || c == Collective::kAllReduce
                                           ? 1
                                           : g);
        const std::int64_t s = std::max(unit, bytes / unit * unit);
        auto t = time_collective(c, sub, s, o, send, recv);
        if (!t.ok()) return t.status();
        CollectiveSample x;
        x.collective = c;
        x.group_size = g;
        x.bytes = s;
        x.count = s / 4;
        x.time_s = *t;
        out.push_back(x);
      }
    }
    CAL_MPI(MPI_Comm_free(&sub));
  }
  // Groups run one after another only when g == world; with several groups of size g at once,
  // every group's own slowest rank was reported. Agree on the slowest across the world.
  for (CollectiveSample& x : out) {
    double t = x.time_s;
    CAL_MPI(MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, comm));
    x.time_s = t;
  }
  return out;
}

}  // namespace trainplan::calibration
