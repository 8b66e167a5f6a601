// calibrate: measure this machine and write a hardware profile for `simulate --hardware`. Two
// backends, one program, the same fits (calibration/fit.h):
//
//   --backend cpu (default): the CPU executor's tasks, GEMM, STREAM, MPI collectives
//       mpirun -np 2 build/tools/calibrate --out profile.json [--cluster-out cpu_cluster.json]
//   --backend cuda: the CUDA executor's kernels, device copies, NCCL collectives
//       build/tools/calibrate --backend cuda --models models/tiny.json --out profile.json
//
// Each backend parses its own options (calibrate --backend B --help lists them). A backend
// this build lacks is a usage error (exit 2). Tested by tests/calibration/calibrate_test.cc.
#include "tools/backend.h"
#include "tools/cli.h"

int main(int argc, char** argv) {
  using trainplan::tools::Backend;
  const auto backend = trainplan::tools::backend_from_args(argc, argv, "calibrate");
  if (!backend.ok()) return trainplan::cli::fail("calibrate", backend.status());
#ifdef TRAINPLAN_TOOL_CUDA_BACKEND
  if (*backend == Backend::kCuda) return trainplan::tools::calibrate_cuda_main(argc, argv);
#endif
#ifdef TRAINPLAN_TOOL_CPU_BACKEND
  if (*backend == Backend::kCpu) return trainplan::tools::calibrate_cpu_main(argc, argv);
#endif
  // backend_from_args accepts only the backends built.
  return static_cast<int>(trainplan::ExitCode::kInternal);
}
