// Collective bandwidth and latency against message size and group size, reported in
// nccl-tests' columns (doc/PERFORMANCE.md): size, count, type, time, algbw = size / time,
// busbw = algbw * bus_bandwidth_factor (core/cost/collectives.h). The samples and their table;
// the MPI loop is collective_bench_mpi.h, the NCCL one tools/calibrate_cuda.cc.
// No file I/O. Tested through calibrate (tests/calibration/tools_test.cc, mpirun -np 2).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/cost/collectives.h"
#include "core/status.h"

namespace trainplan::calibration {

struct CollectiveBenchOptions {
  std::int64_t min_bytes = 8;
  std::int64_t max_bytes = std::int64_t{64} << 20;  // 64 MiB
  int warmup_iters = 2;
  // Iterations per size: as many as fit in target_time_s, between min_iters and max_iters.
  int min_iters = 3;
  int max_iters = 200;
  double target_time_s = 0.02;
  std::vector<Collective> collectives = {Collective::kAllReduce, Collective::kReduceScatter,
                                         Collective::kAllGather, Collective::kAllToAll,
                                         Collective::kSendRecv};
};

struct CollectiveSample {
  Collective collective = Collective::kAllReduce;
  std::int64_t group_size = 0;
  std::int64_t bytes = 0;   // nccl-tests' size S (collectives.h conventions)
  std::int64_t count = 0;   // elements of S (float32 unless `type` says otherwise)
  double time_s = 0;        // time per call, slowest rank (median of 5 timed runs)
  std::string type = "float";  // nccl-tests' type column
  double algbw_bytes_per_s() const { return time_s > 0 ? static_cast<double>(bytes) / time_s : 0; }
  double busbw_bytes_per_s() const {
    return algbw_bytes_per_s() * bus_bandwidth_factor(collective, group_size);
  }
};

// nccl-tests style table: one block per collective and group size.
std::string format_collective_table(const std::vector<CollectiveSample>& samples);

}  // namespace trainplan::calibration
