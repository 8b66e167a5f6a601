// Which backend a tool runs (`execute --backend cpu|cuda`, `calibrate --backend cpu|cuda`), and
// the backends' entry points. main() (execute.cc, calibrate.cc) reads --backend before anything
// else, because the backends start differently: the CPU backend always under MPI, the CUDA
// backend with MPI only when mpirun started it (or srun, torchrun-style variables).
// A backend is compiled in when its dependencies were found at configure time:
// TRAINPLAN_TOOL_CPU_BACKEND (Eigen + MPI), TRAINPLAN_TOOL_CUDA_BACKEND (nvcc + NCCL).
// Tested by tests/executor/execute_tests.cmake (executor_execute_backend_* tests).
#pragma once

#include <string>

#include "core/status.h"

namespace trainplan::tools {

enum class Backend { kCpu, kCuda };

// The value of --backend (as "--backend X" or "--backend=X"; default cpu). An unknown name,
// or a backend this build lacks, is a usage error naming it (exit 2, docs/errors.md).
Result<Backend> backend_from_args(int argc, char** argv, const std::string& program);

// The backends' mains: each parses the whole command line (which holds --backend) itself.
int execute_cpu_main(int argc, char** argv);
int execute_cuda_main(int argc, char** argv);
int calibrate_cpu_main(int argc, char** argv);
int calibrate_cuda_main(int argc, char** argv);

}  // namespace trainplan::tools
