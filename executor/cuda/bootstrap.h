// Start-up of a multi-process CUDA run: who this process is (rank, world size, local rank)
// from the launcher's variables, which GPU it uses, and the exchange of the NCCL unique id.
//
// Launchers, in this order: Open MPI's mpirun (OMPI_COMM_WORLD_*), MPICH/PMI (PMI_RANK,
// PMI_SIZE, MPI_LOCALRANKID), Slurm's srun (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID),
// torchrun-style (RANK, WORLD_SIZE, LOCAL_RANK), else a single process. The id travels over
// MPI when the library was built with MPI and MPI is running (mpirun / srun --mpi), else over
// a small TCP rendezvous at MASTER_ADDR:MASTER_PORT (rank 0 listens).
//
// Device: TRAINPLAN_CUDA_DEVICE = "local" (default: the local rank), an integer (every rank on
// that device: several ranks sharing one GPU for tests), or "shared" (local rank modulo the
// device count). Sharing one GPU needs NCCL >= 2.30 with NCCL_MULTI_RANK_GPU_ENABLE=1, or on
// older NCCL a distinct NCCL_HOSTID per rank and NCCL_SOCKET_IFNAME=lo;
// prepare_shared_gpu_env() sets those before NCCL starts.
//
// Tested by tests/executor/cuda/comm_nccl_test.cc (bootstrap parts run without a GPU).
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"

namespace trainplan::executor::cuda {

struct LaunchInfo {
  int rank = 0, size = 1, local_rank = 0;
  std::string launcher = "single";  // "mpirun", "pmi", "srun", "torchrun", "single"
};

// Reads the launcher's variables; an error names the variable that is missing or malformed.
Result<LaunchInfo> launch_info_from_env();

// The CUDA device this rank uses (see above), checked against the device count.
Result<int> select_device(const LaunchInfo& info);

// Whether several ranks of this node map onto one device (TRAINPLAN_CUDA_DEVICE not "local").
bool sharing_one_gpu();
// Sets NCCL's variables for several ranks on one GPU (see above) unless the user set them.
// Returns a line describing what it set, for the run's log.
std::string prepare_shared_gpu_env(const LaunchInfo& info, int nccl_version_code);

// Rank 0's `bytes` bytes of `data` reach every rank (MPI or TCP, see above). Gives up after
// timeout_s with an error naming the address and the ranks still missing.
Status broadcast_bytes(const LaunchInfo& info, void* data, std::size_t bytes, double timeout_s);

}  // namespace trainplan::executor::cuda
