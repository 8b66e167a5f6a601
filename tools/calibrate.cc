// calibrate: measure this machine and write a hardware profile for `simulate --hardware`. Two
// backends, one program, the same fits (calibration/fit.h):
//
//   --backend cpu (default): the CPU executor's tasks, GEMM, STREAM, MPI collectives
//       mpirun -np 2 build/tools/calibrate --out profile.json [--cluster-out cpu_cluster.json]
//   --backend cuda: the CUDA executor's kernels, device copies, NCCL collectives
//       build/tools/calibrate --backend cuda --models models/tiny.json --out profile.json
//
// Each backend parses its own options (calibrate --backend B --help lists them). A backend
// this build lacks is a usage error (exit 2). Tested by tests/calibration/tools_test.cc.
#include "tools/backend.h"

namespace {

namespace tools = trainplan::tools;

constexpr tools::BackendMains kMains = {
#ifdef TRAINPLAN_TOOL_CPU_BACKEND
    .cpu = tools::calibrate_cpu_main,
#endif
#ifdef TRAINPLAN_TOOL_CUDA_BACKEND
    .cuda = tools::calibrate_cuda_main,
#endif
};

}  // namespace

int main(int argc, char** argv) { return tools::run_backend("calibrate", kMains, argc, argv); }
