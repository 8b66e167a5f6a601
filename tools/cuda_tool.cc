// See cuda_tool.h.
#include "tools/cuda_tool.h"

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <random>

#include "executor/cuda/comm_nccl.h"
#include "executor/cuda/device.h"

#ifdef TRAINPLAN_HAVE_MPI
#include <mpi.h>
#endif

namespace trainplan::cuda_tool {

std::vector<std::int32_t> random_tokens(std::uint64_t seed, std::int64_t n, std::int64_t vocab) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::int32_t> tok(0, static_cast<std::int32_t>(vocab - 1));
  std::vector<std::int32_t> out(static_cast<std::size_t>(n));
  for (std::int32_t& t : out) t = tok(rng);
  return out;
}

DeviceInfo current_device_info() {
  cudaDeviceProp prop{};
  int dev = 0;
  DeviceInfo d;
  TP_CUDA(cudaGetDevice(&dev));
  TP_CUDA(cudaGetDeviceProperties(&prop, dev));
  TP_CUDA(cudaDriverGetVersion(&d.driver_version));
  TP_CUDA(cudaRuntimeGetVersion(&d.runtime_version));
  TP_NCCL(ncclGetVersion(&d.nccl_version));
  d.name = prop.name;
  d.compute_capability = std::to_string(prop.major) + "." + std::to_string(prop.minor);
  d.sm_count = prop.multiProcessorCount;
  d.memory_bytes = static_cast<double>(prop.totalGlobalMem);
  return d;
}

int fail(const Status& status, int rank) {
  if (rank >= 0) std::cerr << "rank " << rank << ": ";
  std::cerr << status.message() << "\n";
  return static_cast<int>(status.code());
}

int tool_main(int argc, char** argv, const char* program, int (*run)(int, char**)) {
#ifdef TRAINPLAN_HAVE_MPI
  const bool under_mpi =
      std::getenv("OMPI_COMM_WORLD_RANK") != nullptr || std::getenv("PMI_RANK") != nullptr;
  if (under_mpi) MPI_Init(&argc, &argv);
#endif
  int rc = 0;
  try {
    rc = run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << program << ": " << e.what() << "\n";
    rc = static_cast<int>(ExitCode::kRuntime);
  }
#ifdef TRAINPLAN_HAVE_MPI
  if (under_mpi) MPI_Finalize();
#endif
  return rc;
}

}  // namespace trainplan::cuda_tool
