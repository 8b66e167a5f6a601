// Which backend a tool runs (`execute --backend cpu|cuda`, `calibrate --backend cpu|cuda`), and
// the backends' entry points. main() (execute.cc, calibrate.cc) reads --backend before anything
// else, because the backends start differently: the CPU backend always under MPI, the CUDA
// backend with MPI only when mpirun started it (or srun, torchrun-style variables).
// A backend is compiled in when its dependencies were found at configure time
// (trainplan_add_backend_tool in tools/CMakeLists.txt defines TRAINPLAN_TOOL_CPU_BACKEND,
// TRAINPLAN_TOOL_CUDA_BACKEND).
// Tested by tests/executor/execute_tests.cmake (executor_execute_backend_* tests).
#pragma once

namespace trainplan::tools {

// The backends' mains, null for those this build lacks. Each parses the whole command line
// (which holds --backend) itself.
struct BackendMains {
  int (*cpu)(int argc, char** argv) = nullptr;
  int (*cuda)(int argc, char** argv) = nullptr;
};

// Runs the main of the backend named by --backend ("--backend X" or "--backend=X"; default
// cpu). An unknown name, or a backend this build lacks, is a usage error naming it (exit 2,
// docs/errors.md), printed as "PROGRAM: error: ...".
int run_backend(const char* program, const BackendMains& mains, int argc, char** argv);

int execute_cpu_main(int argc, char** argv);
int execute_cuda_main(int argc, char** argv);
int calibrate_cpu_main(int argc, char** argv);
int calibrate_cuda_main(int argc, char** argv);

}  // namespace trainplan::tools
