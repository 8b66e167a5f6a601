// See backend.h.
#include "tools/backend.h"

#include <cstring>

namespace trainplan::tools {

namespace {

std::string backend_value(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--backend") == 0) return i + 1 < argc ? argv[i + 1] : "";
    if (std::strncmp(argv[i], "--backend=", 10) == 0) return argv[i] + 10;
  }
  return "cpu";
}

bool built(Backend b) {
#ifdef TRAINPLAN_TOOL_CPU_BACKEND
  if (b == Backend::kCpu) return true;
#endif
#ifdef TRAINPLAN_TOOL_CUDA_BACKEND
  if (b == Backend::kCuda) return true;
#endif
  (void)b;
  return false;
}

}  // namespace

Result<Backend> backend_from_args(int argc, char** argv, const std::string& program) {
  const std::string name = backend_value(argc, argv);
  Backend b;
  if (name == "cpu") {
    b = Backend::kCpu;
  } else if (name == "cuda") {
    b = Backend::kCuda;
  } else {
    return Status::Error("--backend '" + name + "' is not a backend (cpu or cuda)",
                         ExitCode::kUsage);
  }
  if (!built(b))
    return Status::Error(
        "--backend " + name + ": this " + program + " was built without the " + name +
            " backend (" +
            (b == Backend::kCuda
                 ? "no CUDA compiler or NCCL at configure time; reconfigure where nvcc and "
                   "NCCL are found, or set TRAINPLAN_NCCL_ROOT"
                 : "no MPI at configure time; reconfigure with TRAINPLAN_WITH_MPI=ON and MPI "
                   "installed") +
            ")",
        ExitCode::kUsage);
  return b;
}

}  // namespace trainplan::tools
