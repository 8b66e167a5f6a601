// execute: train a plan for real and write what was measured as a step report
// (core/step_report.h), comparable with `simulate`'s prediction. Two backends, one program:
//
//   --backend cpu (default): Eigen float32, MPI between ranks (execute_cpu.cc)
//       mpirun -np 2 build/tools/execute --model models/tiny.json --plan PLAN.json --steps 20
//           --data data/kjv-genesis.txt --out measured.json [--trace trace.json]
//   --backend cuda: bf16 on GPUs, NCCL between ranks (execute_cuda.cc; bench/gpu/run_all.sh)
//       build/tools/execute --backend cuda --model models/gpt2-124m.json --plan plan.json
//           --steps 10 --warmup 3 --out result.json [--report measured.json] [--trace trace.json]
//
// Each backend parses its own options (execute --backend B --help lists them). A backend this
// build lacks is a usage error (exit 2). Tests: tests/executor/ (ctest -L executor).
#include "tools/backend.h"

namespace {

namespace tools = trainplan::tools;

constexpr tools::BackendMains kMains = {
#ifdef TRAINPLAN_TOOL_CPU_BACKEND
    .cpu = tools::execute_cpu_main,
#endif
#ifdef TRAINPLAN_TOOL_CUDA_BACKEND
    .cuda = tools::execute_cuda_main,
#endif
};

}  // namespace

int main(int argc, char** argv) { return tools::run_backend("execute", kMains, argc, argv); }
