// The collective benchmark over MPI (collective_bench.h's samples): every collective, message
// size and group size the world allows. Tested through calibrate under mpirun -np 2
// (tests/calibration/tools_test.cc).
#pragma once

#include <mpi.h>

#include <vector>

#include "calibration/collective_bench.h"

namespace trainplan::calibration {

// Runs every collective over every size (doubling from min_bytes) in groups of every size
// 2, 4, ... that divides the world (and the world itself), consecutive ranks per group. Every
// rank of `comm` must call it; all return the same samples. MPI errors become a Status.
Result<std::vector<CollectiveSample>> bench_collectives(MPI_Comm comm,
                                                        const CollectiveBenchOptions& options);

}  // namespace trainplan::calibration
