// What the CUDA backends of the tools (`execute --backend cuda`: execute_cuda.cc, `calibrate
// --backend cuda`: calibrate_cuda.cc) share beyond tools/cli.h (options, files): the seeded
// random batch, the device's description, and the run's frame (MPI started when launched by
// mpirun, exceptions become exit 5). Built only with the CUDA backend; runs only on a GPU
// (bench/gpu/run_all.sh).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/model_spec.h"
#include "core/status.h"

namespace trainplan::cuda_tool {

// n tokens uniform in [0, vocab), seeded: the same on every rank.
std::vector<std::int32_t> random_tokens(std::uint64_t seed, std::int64_t n, std::int64_t vocab);
// The current CUDA device and the libraries, for reports and profiles.
struct DeviceInfo {
  std::string name;
  std::string compute_capability;  // "9.0"
  int sm_count = 0;
  double memory_bytes = 0;
  int driver_version = 0, runtime_version = 0, nccl_version = 0;
};
DeviceInfo current_device_info();
// Prints the status (with the rank when given) and returns its exit code.
int fail(const Status& status, int rank = -1);
// Starts MPI when launched by mpirun (for the NCCL id's exchange), runs `run`, turns an
// escaping exception into a message and exit code 5 (kRuntime), ends MPI.
int tool_main(int argc, char** argv, const char* program, int (*run)(int, char**));

}  // namespace trainplan::cuda_tool
