// The MPI backend of executor/comm.h (OpenMPI from Debian). Groups follow the simulator's rank
// placement (RankLayout, "tp,cp,dp,pp": tp innermost) and are split with
// MPI_Comm_split(color = RankLayout::group_color); the cp group is the ranks that share each
// sequence (context parallelism); the data-parallel group is the dp x cp ranks
// that hold the same weights; the embedding group pairs the first and last pipeline stage of
// the same (tp, cp, dp) coordinate (dualpipe: every stage s with its mirror pp-1-s). Every MPI
// call is checked: a failure throws CommError with the call, file:line and MPI's error string.
#pragma once

#include <mpi.h>

#include <memory>

#include "executor/comm.h"
#include "core/plan.h"
#include "core/status.h"

namespace trainplan::executor {

// `world` must hold exactly plan.world_size() ranks (check_plan_world_size first); it is
// duplicated, so the caller keeps ownership. MPI must be initialised.
Result<std::unique_ptr<Comm>> make_mpi_comm(const Plan& plan, MPI_Comm world);

// Throws CommError naming the call, file:line, the rank and MPI's error string unless `code` is
// MPI_SUCCESS. Use through TRAINPLAN_MPI_CALL(MPI_Xxx(...)).
void check_mpi(int code, const char* call, const char* file, int line);
#define TRAINPLAN_MPI_CALL(call) ::trainplan::executor::check_mpi((call), #call, __FILE__, __LINE__)

}  // namespace trainplan::executor
