// trainplan_cuda_bench: runs a plan on GPUs with the CUDA executor and writes what it measured
// (JSON), for bench/gpu/run_all.sh. One process per rank: start it under mpirun / srun or with
// torchrun-style variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT); with
// TRAINPLAN_CUDA_DEVICE=0 every rank shares GPU 0 (tests).
//
//   trainplan_cuda_bench --model models/gpt2-124m.json --plan plan.json --steps 10
//       --warmup 3 --out result.json [--params-out prefix] [--trace prefix] [--seed 1234]
//       [--peak-tflops 989]
//
// Tokens are random (seeded, the same global batch on every rank and for every layout), so
// layouts can be compared step by step. --params-out writes each rank's float32 master
// weights as "name row col value" lines to prefix.rank<R>.txt; --trace a Chrome trace of the
// last step's phases (CUDA events) to prefix.rank<R>.json.
// Exit codes as models/status.h: 0 ok, 2 usage, 3 bad input, 5 runtime (a rank failed).
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <random>
#include <sstream>

#include <cuda_runtime.h>

#include "executor/cuda/bootstrap.h"
#include "executor/cuda/comm_nccl.h"
#include "executor/cuda/trainer_cuda.h"
#include "models/cost_model.h"
#include "models/json_util.h"
#include "models/model_spec.h"
#include "models/plan.h"

#ifdef TRAINPLAN_HAVE_MPI
#include <mpi.h>
#endif

namespace tp = trainplan;
namespace cx = trainplan::executor::cuda;

namespace {

struct Args {
  std::string model, plan, out, params_out, trace;
  std::int64_t steps = 10, warmup = 3;
  std::uint64_t seed = 1234;
  double peak_tflops = 0;  // 0: from the device name
};

tp::Result<tp::Json> read_json(const std::string& path) {
  std::ifstream f(path);
  if (!f) return tp::Status::Error("cannot read " + path, tp::ExitCode::kIo);
  std::stringstream ss;
  ss << f.rdbuf();
  return tp::parse_json_text(ss.str(), path);
}

tp::Result<Args> parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (i + 1 >= argc) return tp::Status::Error("missing value after " + k, tp::ExitCode::kUsage);
    const std::string v = argv[++i];
    if (k == "--model") a.model = v;
    else if (k == "--plan") a.plan = v;
    else if (k == "--out") a.out = v;
    else if (k == "--params-out") a.params_out = v;
    else if (k == "--trace") a.trace = v;
    else if (k == "--steps") a.steps = std::stoll(v);
    else if (k == "--warmup") a.warmup = std::stoll(v);
    else if (k == "--seed") a.seed = std::stoull(v);
    else if (k == "--peak-tflops") a.peak_tflops = std::stod(v);
    else return tp::Status::Error("unknown option " + k, tp::ExitCode::kUsage);
  }
  if (a.model.empty() || a.plan.empty() || a.out.empty())
    return tp::Status::Error("usage: trainplan_cuda_bench --model M --plan P --out FILE "
                             "[--steps N] [--warmup W] [--params-out PREFIX] [--seed S]",
                             tp::ExitCode::kUsage);
  if (a.steps <= a.warmup)
    return tp::Status::Error("--steps must exceed --warmup", tp::ExitCode::kUsage);
  return a;
}

// Dense bf16 tensor-core peak by device name (datasheets: H100/H200 SXM 989.4 TFLOP/s,
// H100 PCIe 756, A100 312), 0 when unknown.
double peak_bf16_flops(const std::string& name) {
  if (name.find("H100") != std::string::npos && name.find("PCIe") != std::string::npos) return 756e12;
  if (name.find("H100") != std::string::npos || name.find("H200") != std::string::npos) return 989.4e12;
  if (name.find("A100") != std::string::npos) return 312e12;
  return 0;
}

// Every rank's value, in rank order, at every rank (a sum of one-hot vectors).
std::vector<double> gather_all(cx::NcclComm* comm, double mine) {
  if (comm == nullptr) return {mine};
  std::vector<double> v(static_cast<std::size_t>(comm->world_size()), 0.0);
  v[static_cast<std::size_t>(comm->world_rank())] = mine;
  comm->control_all_reduce(v.data(), static_cast<std::int64_t>(v.size()), tp::executor::ReduceOp::kSum);
  return v;
}

int run(int argc, char** argv) {
  auto args = parse(argc, argv);
  if (!args.ok()) {
    std::cerr << args.status().message() << "\n";
    return static_cast<int>(args.status().code());
  }
  auto mj = read_json(args->model);
  auto pj = read_json(args->plan);
  if (!mj.ok() || !pj.ok()) {
    std::cerr << (mj.ok() ? pj.status() : mj.status()).message() << "\n";
    return static_cast<int>(tp::ExitCode::kIo);
  }
  auto model = tp::model_from_json(*mj, args->model);
  auto plan = tp::plan_from_json(*pj, args->plan);
  if (!model.ok() || !plan.ok()) {
    std::cerr << (model.ok() ? plan.status() : model.status()).message() << "\n";
    return static_cast<int>(tp::ExitCode::kInvalidInput);
  }
  auto info = cx::launch_info_from_env();
  if (!info.ok()) {
    std::cerr << info.status().message() << "\n";
    return static_cast<int>(info.status().code());
  }
  std::unique_ptr<cx::NcclComm> comm;
  if (info->size > 1) {
    cx::NcclOptions opt;
    opt.hard_exit_after_s = 30;  // a tool may end the process; the library never does
    if (const char* t = std::getenv("TRAINPLAN_NCCL_TIMEOUT_S")) opt.timeout_s = std::atof(t);
    auto c = cx::NcclComm::make(*plan, *info, opt);
    if (!c.ok()) {
      std::cerr << "rank " << info->rank << ": " << c.status().message() << "\n";
      return static_cast<int>(c.status().code());
    }
    comm = std::move(*c);
  } else {
    auto dev = cx::select_device(*info);
    if (!dev.ok()) {
      std::cerr << dev.status().message() << "\n";
      return static_cast<int>(dev.status().code());
    }
    TP_CUDA(cudaSetDevice(*dev));
  }
  cx::CudaTrainOptions options;
  options.seed = args->seed;
  auto trainer = cx::CudaTrainer::make(*model, *plan, options, comm.get());
  if (!trainer.ok()) {
    std::cerr << trainer.status().message() << "\n";
    return static_cast<int>(trainer.status().code());
  }
  const bool root = info->rank == 0;
  const std::int64_t per_step = plan->global_batch_size * (model->seq_len + 1);
  std::mt19937_64 rng(args->seed);
  std::uniform_int_distribution<std::int32_t> tok(0, static_cast<std::int32_t>(model->vocab_size - 1));
  std::vector<std::int32_t> batch(static_cast<std::size_t>(per_step));
  std::vector<double> losses, seconds;
  std::map<std::string, double> phases;
  std::vector<cx::PhaseTimer::SpanTime> spans;
  std::map<std::string, std::int64_t> bytes_step;
  for (std::int64_t s = 0; s < args->steps; ++s) {
    for (std::int32_t& t : batch) t = tok(rng);
    if (s == args->warmup) cx::reset_peak_memory();
    if (comm) comm->reset_all_counters();
    auto r = (*trainer)->step(batch);
    if (!r.ok()) {
      std::cerr << "rank " << info->rank << ": " << r.status().message() << "\n";
      return static_cast<int>(r.status().code());
    }
    losses.push_back(r->loss);
    if (s >= args->warmup) {
      seconds.push_back(r->seconds);
      phases = r->phase_s;
      spans = r->spans;
    }
    if (comm)
      for (tp::CommGroup g : {tp::CommGroup::kTp, tp::CommGroup::kPp, tp::CommGroup::kDp,
                              tp::CommGroup::kEmbedding})
        bytes_step[std::string(tp::to_string(g))] = comm->group_counters(g).bytes_sent;
    if (root)
      std::cerr << "step " << s + 1 << "/" << args->steps << " loss " << std::fixed
                << std::setprecision(4) << r->loss << " time " << std::setprecision(3)
                << r->seconds * 1e3 << " ms\n";
  }
  std::vector<double> sorted = seconds;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted[sorted.size() / 2];
  const cx::DeviceMemoryStats mem = cx::device_memory_stats();
  const std::int64_t stage = (*trainer)->stage();
  const tp::MemoryBreakdown predicted = tp::memory_on_stage(*model, *plan, stage);
  const tp::CommVolume volume = tp::comm_volume_on_stage(*model, *plan, stage);
  // Per-rank figures, collected at every rank.
  const auto peak = gather_all(comm.get(), static_cast<double>(mem.peak_bytes));
  const auto used = gather_all(comm.get(), static_cast<double>(mem.device_used_bytes));
  const auto pred = gather_all(comm.get(), predicted.device_total());
  std::map<std::string, std::vector<double>> bytes_by_group;
  for (auto& [g, b] : bytes_step) bytes_by_group[g] = gather_all(comm.get(), static_cast<double>(b));
  std::map<std::string, std::vector<double>> predicted_bytes{
      {"tp", gather_all(comm.get(), volume.tp_bytes)},
      {"pp", gather_all(comm.get(), volume.pp_bytes)},
      {"dp", gather_all(comm.get(), volume.dp_bytes)}};

  if (!args->params_out.empty()) {
    std::ofstream f(args->params_out + ".rank" + std::to_string(info->rank) + ".txt");
    f << std::setprecision(9);
    (*trainer)->for_each_param([&](const tp::executor::TensorSlice& t, std::int64_t r,
                                   std::int64_t c, float v) {
      if (r < t.valid_rows) f << t.name << ' ' << r << ' ' << c << ' ' << v << '\n';
    });
  }
  if (!args->trace.empty()) {
    // Chrome trace (chrome://tracing, Perfetto) of the last measured step: one row per rank.
    tp::Json events = tp::Json::array();
    for (const auto& sp : spans)
      events.push_back({{"name", sp.phase}, {"ph", "X"}, {"pid", info->rank}, {"tid", 0},
                        {"ts", sp.start_s * 1e6}, {"dur", sp.duration_s * 1e6}});
    std::ofstream f(args->trace + ".rank" + std::to_string(info->rank) + ".json");
    f << tp::Json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump() << "\n";
  }
  if (!root) return 0;
  cudaDeviceProp prop{};
  int dev = 0, driver = 0, runtime = 0, nccl = 0;
  TP_CUDA(cudaGetDevice(&dev));
  TP_CUDA(cudaGetDeviceProperties(&prop, dev));
  TP_CUDA(cudaDriverGetVersion(&driver));
  TP_CUDA(cudaRuntimeGetVersion(&runtime));
  ncclGetVersion(&nccl);
  const double peak_flops = args->peak_tflops > 0 ? args->peak_tflops * 1e12 : peak_bf16_flops(prop.name);
  const double flops = tp::step_flops(*model, *plan).model;
  const double tokens = static_cast<double>(plan->global_batch_size * model->seq_len);
  tp::Json j;
  j["device"] = prop.name;
  j["compute_capability"] = std::to_string(prop.major) + "." + std::to_string(prop.minor);
  j["cuda_driver_version"] = driver;
  j["cuda_runtime_version"] = runtime;
  j["nccl_version"] = nccl;
  j["model"] = model->name;
  j["plan"] = tp::describe(*plan);
  j["world_size"] = info->size;
  j["launcher"] = info->launcher;
  j["loss_per_step"] = losses;
  j["step_seconds_measured"] = seconds;
  j["median_step_s"] = median;
  j["tokens_per_s"] = tokens / median;
  j["model_flops_per_step"] = flops;
  j["peak_bf16_flops_per_s_per_gpu"] = peak_flops;
  j["mfu"] = peak_flops > 0 ? flops / (median * peak_flops * static_cast<double>(info->size)) : 0.0;
  j["phase_s_last_step_rank0"] = phases;
  j["peak_allocated_bytes_per_rank"] = peak;
  j["device_used_bytes_per_rank"] = used;
  j["predicted_device_bytes_per_rank"] = pred;
  j["bytes_sent_per_group_per_rank_last_step"] = bytes_by_group;
  j["predicted_bytes_per_group_per_rank"] = predicted_bytes;
  const std::string tmp = args->out + ".tmp";
  {
    std::ofstream f(tmp);
    f << j.dump(2) << "\n";
    if (!f) {
      std::cerr << "cannot write " << tmp << "\n";
      return static_cast<int>(tp::ExitCode::kIo);
    }
  }
  std::rename(tmp.c_str(), args->out.c_str());  // atomic: no half-written result
  std::cout << prop.name << "  " << tp::describe(*plan) << "  " << std::fixed
            << std::setprecision(0) << tokens / median << " tokens/s  MFU "
            << std::setprecision(3) << j["mfu"].get<double>() << "  peak "
            << std::setprecision(2) << peak[0] / (1 << 30) << " GiB (predicted "
            << pred[0] / (1 << 30) << ")\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
#ifdef TRAINPLAN_HAVE_MPI
  const bool under_mpi = std::getenv("OMPI_COMM_WORLD_RANK") != nullptr || std::getenv("PMI_RANK") != nullptr;
  if (under_mpi) MPI_Init(&argc, &argv);
#endif
  int rc = 0;
  try {
    rc = run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "trainplan_cuda_bench: " << e.what() << "\n";
    rc = static_cast<int>(tp::ExitCode::kRuntime);
  }
#ifdef TRAINPLAN_HAVE_MPI
  if (under_mpi) MPI_Finalize();
#endif
  return rc;
}
