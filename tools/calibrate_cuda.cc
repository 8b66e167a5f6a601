// calibrate --backend cuda (main() is calibrate.cc): `calibrate` for the CUDA executor.
// Measures this GPU machine and writes a hardware profile (and a cluster file) for
// `simulate --hardware`, as calibrate does on CPU and with the same fits (calibration/fit.h):
//  - the CUDA executor's own kernels per cost-model task: traced training steps (device_trace.h:
//    CUDA events per task) of each --models at each --micro-batches, data parallel over every
//    rank so that all ranks compute at once, as the plans calibrated for; the fit then gives
//    the GEMM rate, its shape curve, per-kernel overhead, each memory-bound kind's bandwidth
//    and the fused attention's efficiency;
//  - device memory bandwidth: device-to-device copies (read + write counted, as STREAM copy);
//  - with 2+ ranks, the executor's collectives inside those steps and the ranks' skew
//    (combined over ranks as calibrate's, calibration/executor_probe.h), and NCCL all-reduce,
//    reduce-scatter and all-gather over all ranks against message size in nccl-tests' columns;
//    latency and bandwidth are fitted to the in-step collectives, as calibrate's are.
// One process per rank, started as execute --backend cuda is (mpirun, srun or torchrun-style
// variables; TRAINPLAN_CUDA_DEVICE=0 puts every rank on GPU 0 for tests).
//
//   calibrate --backend cuda --models models/tiny.json,models/gpt2-124m.json --out profile.json
//       [--cluster-out cluster.json] [--micro-batches 1,2,4] [--steps 5] [--warmup 3]
//       [--max-message BYTES] [--quick]
// Exit codes as core/status.h: 0 ok, 2 usage, 3 bad input, 5 runtime, 6 a file not read or
// written.
// Runs on a GPU only (bench/gpu/predicted_vs_measured.sh); built wherever nvcc is.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>
#include <sstream>

#include <cuda_runtime.h>

#include "calibration/collective_bench.h"
#include "calibration/executor_probe.h"
#include "calibration/profile.h"
#include "executor/cuda/bootstrap.h"
#include "executor/cuda/comm_nccl.h"
#include "executor/cuda/cuda_stage.h"
#include "executor/cuda/gpt_cuda.h"
#include "tools/backend.h"
#include "tools/cli.h"
#include "tools/cuda_tool.h"
#include "core/units.h"

#ifdef TRAINPLAN_HAVE_MPI
#include <mpi.h>
#endif

namespace tp = trainplan;
namespace cx = trainplan::executor::cuda;
namespace ct = trainplan::cuda_tool;
namespace cal = trainplan::calibration;

namespace {

struct Args {  // the defaults are parse()'s
  std::vector<std::string> models;
  std::vector<std::int64_t> micro_batches;
  std::string out, cluster_out;
  std::int64_t steps = 0, warmup = 0, max_message = 0;
  bool quick = false;
  bool help = false;  // --help: the usage was printed
};

tp::Result<Args> parse(int argc, char** argv) {
  tp::cli::Args cli(
      "calibrate",
      "Measure this GPU machine with the CUDA executor; write a profile for simulate --hardware.",
      {{"backend", true, "cuda (this one) or cpu (see --backend cpu --help)"},
       {"models", true, "comma-separated model JSONs whose steps to time"},
       {"out", true, "the hardware profile (JSON)"},
       {"cluster-out", true, "a cluster file of this machine (JSON)"},
       {"micro-batches", true, "micro-batch sizes to time (default 1,2,4)"},
       {"steps", true, "traced steps per probe (default 5; --quick 3)"},
       {"warmup", true, "steps before them (default 3)"},
       {"max-message", true, "largest NCCL message, bytes (default 2^28 = 268 MB; --quick 2^24 = 16.8 MB)"},
       {"quick", false, "fewer steps and messages"}});
  TRAINPLAN_RETURN_IF_ERROR(cli.parse(argc, argv));
  Args a;
  if (cli.help_requested()) {
    std::cout << cli.usage();
    a.help = true;
    return a;
  }
  a.quick = cli.has("quick");
  a.models = tp::cli::split_list(cli.get("models"));
  a.out = cli.get("out");
  a.cluster_out = cli.get("cluster-out");
  auto mbs = cli.get_int_list("micro-batches", "1,2,4", 1, 4096);
  auto steps = cli.get_int("steps", a.quick ? 3 : 5, 1, 1000);
  auto warmup = cli.get_int("warmup", 3, 0, 1000);
  auto max_message = cli.get_int("max-message", (a.quick ? std::int64_t{16} : 256) << 20, 8,
                                 std::int64_t{1} << 32);
  for (const tp::Status& st : {mbs.status(), steps.status(), warmup.status(), max_message.status()})
    TRAINPLAN_RETURN_IF_ERROR(st);
  a.micro_batches = *mbs;
  a.steps = *steps;
  a.warmup = *warmup;
  a.max_message = *max_message;
  if (a.models.empty() || a.out.empty())
    return tp::Status::Error("--models and --out are required\n" + cli.usage(),
                             tp::ExitCode::kUsage);
  return a;
}

// The samples of the plan's traced steps, combined over ranks as the CPU calibration's
// (calibration/executor_probe.h: task times the mean over ranks, a collective's the shortest,
// the ranks' skew); the ranks run the same tasks in the same order (data parallel replicas).
tp::Result<cal::ProbeSamples> time_tasks(const tp::ModelSpec& model, const tp::Plan& plan,
                                         cx::NcclComm* comm, const Args& a) {
  TRAINPLAN_RETURN_IF_ERROR(cx::check_cuda_executor_supports(model, plan));
  auto trainer = cx::make_cuda_trainer(model, plan, {}, comm);
  if (!trainer.ok()) return trainer.status();
  const std::vector<std::int32_t> batch =
      ct::random_tokens(1234, plan.global_batch_size * (model.seq_len + 1), model.vocab_size);
  for (std::int64_t s = 0; s < a.warmup; ++s)
    if (auto r = (*trainer)->step(batch); !r.ok()) return r.status();
  cx::DeviceTrace trace;
  std::vector<std::vector<tp::executor::TraceEvent>> steps;
  for (std::int64_t s = 0; s < a.steps; ++s) {
    if (auto r = (*trainer)->step(batch, &trace); !r.ok()) return r.status();
    steps.push_back(trace.events());
  }
  const std::string probe = cal::cuda_probe_name(model, plan);
  std::unique_ptr<tp::executor::Comm> local;
  if (comm == nullptr) local = tp::executor::make_local_comm();
  return cal::probe_samples_across_ranks(std::move(steps), model, plan, (*trainer)->stage(),
                                         comm != nullptr ? *comm : *local, probe);
}

// Device-to-device copies of `bytes`, timed with events: STREAM's copy (2 * bytes moved).
cal::StreamSample time_device_copy(double bytes, int reps) {
  cx::DeviceBuffer<char> a(static_cast<std::int64_t>(bytes)), b(static_cast<std::int64_t>(bytes));
  TP_CUDA(cudaMemset(a.data(), 1, static_cast<std::size_t>(bytes)));
  cudaEvent_t start = nullptr, stop = nullptr;
  TP_CUDA(cudaEventCreate(&start));
  TP_CUDA(cudaEventCreate(&stop));
  std::vector<double> times;
  for (int r = 0; r < reps + 1; ++r) {  // the first is a warm-up
    TP_CUDA(cudaEventRecord(start));
    TP_CUDA(cudaMemcpyAsync(b.data(), a.data(), static_cast<std::size_t>(bytes),
                            cudaMemcpyDeviceToDevice));
    TP_CUDA(cudaEventRecord(stop));
    TP_CUDA(cudaEventSynchronize(stop));
    float ms = 0;
    TP_CUDA(cudaEventElapsedTime(&ms, start, stop));
    if (r > 0) times.push_back(ms * 1e-3);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(times.begin(), times.end());
  cal::StreamSample s;
  s.kernel = "copy";
  s.array_bytes = bytes;
  s.bytes_moved = 2 * bytes;
  s.time_s = times[times.size() / 2];
  return s;
}

// NCCL's collectives over all ranks (the dp group of a dp = world plan), message sizes
// doubling from 8 bytes, float32, as nccl-tests times them: warm-up calls, then the mean of
// a run of calls; the median of five runs, the slowest rank's.
std::vector<cal::CollectiveSample> bench_nccl(cx::NcclComm& comm, std::int64_t max_bytes,
                                              bool quick) {
  const std::int64_t n = comm.world_size();
  cudaStream_t stream = nullptr;
  TP_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cx::DeviceBuffer<float> send(max_bytes / 4 + n), recv(max_bytes / 4 + n);
  std::vector<cal::CollectiveSample> out;
  for (tp::Collective c : {tp::Collective::kAllReduce, tp::Collective::kReduceScatter,
                           tp::Collective::kAllGather}) {
    for (std::int64_t bytes = 8; bytes <= max_bytes; bytes *= 2) {
      const std::int64_t unit = 4 * (c == tp::Collective::kAllReduce ? 1 : n);
      const std::int64_t size = std::max(unit, bytes / unit * unit);
      auto call = [&] {
        const std::int64_t count = size / 4;
        switch (c) {
          case tp::Collective::kAllReduce:
            comm.all_reduce_device(tp::CommGroup::kDp, recv.data(), count, cx::DType::kF32,
                                   tp::executor::ReduceOp::kSum, stream);
            break;
          case tp::Collective::kReduceScatter:
            comm.reduce_scatter_device(tp::CommGroup::kDp, send.data(), recv.data(), count / n,
                                       cx::DType::kF32, stream);
            break;
          default:
            comm.all_gather_device(tp::CommGroup::kDp, send.data(), recv.data(), count / n,
                                   cx::DType::kF32, stream);
            break;
        }
      };
      auto timed = [&](int calls) {
        comm.synchronize();
        TP_CUDA(cudaStreamSynchronize(stream));
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < calls; ++i) call();
        comm.synchronize();
        TP_CUDA(cudaStreamSynchronize(stream));
        double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() /
                   calls;
        comm.control_all_reduce(&t, 1, tp::executor::ReduceOp::kMax);
        return t;
      };
      timed(quick ? 2 : 5);  // warm-up
      const int calls = quick ? 5 : 20;
      std::vector<double> runs;
      for (int r = 0; r < 5; ++r) runs.push_back(timed(calls));
      std::sort(runs.begin(), runs.end());
      cal::CollectiveSample s;
      s.collective = c;
      s.group_size = n;
      s.bytes = size;
      s.count = size / 4;
      s.time_s = runs[2];
      out.push_back(s);
    }
  }
  cudaStreamDestroy(stream);
  return out;
}

int run(int argc, char** argv) {
  auto args = parse(argc, argv);
  if (!args.ok()) return ct::fail(args.status());
  if (args->help) return 0;
  std::vector<tp::ModelSpec> models;
  for (const std::string& path : args->models) {
    auto m = tp::cli::load_model_file(path);
    if (!m.ok()) return ct::fail(m.status());
    models.push_back(*m);
  }
  auto info = cx::launch_info_from_env();
  if (!info.ok()) return ct::fail(info.status());
  const std::int64_t world = info->size;
  std::unique_ptr<cx::NcclComm> comm;
  if (world > 1) {
    cx::NcclOptions opt;
    opt.hard_exit_after_s = 30;
    auto c = cx::NcclComm::make(cal::cuda_probe_plan(world, 1), *info, opt);
    if (!c.ok()) return ct::fail(c.status(), info->rank);
    comm = std::move(*c);
  } else {
    auto dev = cx::select_device(*info);
    if (!dev.ok()) return ct::fail(dev.status());
    TP_CUDA(cudaSetDevice(*dev));
  }
  const bool root = info->rank == 0;
  auto log = [&](const std::string& what) {
    if (root) std::cerr << "calibrate: " << what << std::endl;
  };
  cal::Measurements m;
  for (const tp::ModelSpec& model : models)
    for (std::int64_t b : args->micro_batches) {
      log("timing the executor's tasks: " + model.name + ", micro-batch " + std::to_string(b));
      auto samples = time_tasks(model, cal::cuda_probe_plan(world, b), comm.get(), *args);
      if (!samples.ok()) return ct::fail(samples.status(), info->rank);
      m.tasks.insert(m.tasks.end(), samples->tasks.begin(), samples->tasks.end());
      m.step_collectives.insert(m.step_collectives.end(), samples->collectives.begin(),
                                samples->collectives.end());
      m.skew.insert(m.skew.end(), samples->skew.begin(), samples->skew.end());
      cal::add_rank_compute(m, samples->rank_compute_s);
    }
  log("device memory bandwidth (device-to-device copies)");
  for (double bytes : {64 * tp::kMiB, 256 * tp::kMiB, 1024 * tp::kMiB})
    m.stream.push_back(time_device_copy(bytes, args->quick ? 3 : 10));
  if (comm) {
    log("NCCL collectives over " + std::to_string(world) + " ranks");
    m.collectives = bench_nccl(*comm, args->max_message, args->quick);
  }
  if (!root) return 0;

  const ct::DeviceInfo device = ct::current_device_info();
  cal::MachineIdentity id;
  id.kind = "gpu";
  id.cpu_model = device.name;
  id.ranks = world;
  id.date = cal::iso8601_utc_now();
  auto calib = cal::calibrate_from(m, id, cal::gpu_fit_options(device.sm_count));
  if (!calib.ok()) return ct::fail(calib.status());
  // The executor's own device memory is what the pool allocates (its report's peak): no
  // baseline beside the model's memory.
  calib->profile.baseline_memory_bytes = 0;
  std::cout << cal::format_task_table(m.tasks, calib->compute.rates) << "\n"
            << cal::format_stream_table(m.stream);
  if (!m.collectives.empty()) std::cout << cal::format_collective_table(m.collectives);
  std::cout << "\n" << cal::format_fit_summary(*calib);
  // Each file must load back with the function that will read it.
  auto write_checked = [](const std::string& path, const tp::Json& json, const char* what,
                          const tp::Status& loads_back) {
    if (!loads_back.ok())
      return ct::fail(tp::Status::Error(std::string("internal: the ") + what +
                                            " does not load back: " + loads_back.message(),
                                        tp::ExitCode::kInternal));
    if (tp::Status w = tp::cli::write_file_atomic(path, json.dump(2) + "\n"); !w.ok())
      return ct::fail(w);
    std::cout << "wrote " << path << "\n";
    return 0;
  };
  const tp::Json profile = cal::profile_json(*calib, m);
  if (int rc = write_checked(args->out, profile, "profile",
                             tp::hardware_profile_from_json(profile, args->out).status());
      rc != 0)
    return rc;
  if (args->cluster_out.empty()) return 0;
  const tp::Json cluster =
      cal::cpu_cluster_json(*calib, world, device.memory_bytes, device.name);
  return write_checked(args->cluster_out, cluster, "cluster",
                       tp::cluster_from_json(cluster, args->cluster_out).status());
}

}  // namespace

int trainplan::tools::calibrate_cuda_main(int argc, char** argv) {
  return ct::tool_main(argc, argv, "calibrate", run);
}
