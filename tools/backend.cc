// See backend.h.
#include "tools/backend.h"

#include <cstring>
#include <string>

#include "tools/cli.h"

namespace trainplan::tools {

namespace {

std::string backend_name(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--backend") == 0) return i + 1 < argc ? argv[i + 1] : "";
    if (std::strncmp(argv[i], "--backend=", 10) == 0) return argv[i] + 10;
  }
  return "cpu";
}

// Why a build lacks the backend, and how to get it.
const char* missing_because(const std::string& name) {
  return name == "cuda" ? "no CUDA compiler or NCCL at configure time; reconfigure where nvcc "
                          "and NCCL are found, or set TRAINPLAN_NCCL_ROOT"
                        : "no MPI at configure time; reconfigure with TRAINPLAN_WITH_MPI=ON "
                          "and MPI installed";
}

}  // namespace

int run_backend(const char* program, const BackendMains& mains, int argc, char** argv) {
  const std::string name = backend_name(argc, argv);
  int (*backend_main)(int, char**) = nullptr;
  if (name == "cpu") {
    backend_main = mains.cpu;
  } else if (name == "cuda") {
    backend_main = mains.cuda;
  } else {
    return cli::fail(program, Status::Error("--backend '" + name +
                                                "' is not a backend (cpu or cuda)",
                                            ExitCode::kUsage));
  }
  if (backend_main == nullptr)
    return cli::fail(program, Status::Error("--backend " + name + ": this " + program +
                                                " was built without the " + name + " backend (" +
                                                missing_because(name) + ")",
                                            ExitCode::kUsage));
  return backend_main(argc, argv);
}

}  // namespace trainplan::tools
