// execute --backend cuda (main() is execute.cc): runs a plan on GPUs with the CUDA executor and
// writes what it measured (JSON), for bench/gpu/run_all.sh. One process per rank: start it
// under mpirun / srun or with torchrun-style variables (RANK, WORLD_SIZE, LOCAL_RANK,
// MASTER_ADDR, MASTER_PORT); with TRAINPLAN_CUDA_DEVICE=0 every rank shares GPU 0 (tests).
//
//   execute --backend cuda --model models/gpt2-124m.json --plan plan.json --steps 10
//       --warmup 3 --out result.json [--report measured.json] [--trace trace.json]
//       [--params-out prefix] [--seed 1234] [--peak-tflops 989]
//
// Tokens are random (seeded, the same global batch on every rank and for every layout), so
// layouts can be compared step by step. --out writes this run's summary (throughput, MFU,
// memory against the cost model). --report writes the measured step report in the schema of
// the prediction (core/step_report.h), for `compare --predicted P --measured M`; --trace a
// Chrome trace of one step of every rank laid out as `simulate --trace` (per cost-model task,
// device times from CUDA events: device_trace.h). Both come from one extra traced step after
// the measured ones, so the events cost the measured steps nothing. The ranks' trace parts
// travel as files next to --trace (FILE.rank<R>.part; rank 0 joins and removes them), so every
// rank must see that folder. --params-out writes each rank's float32 master weights as
// "name row col value" lines to prefix.rank<R>.txt.
// Exit codes as core/status.h: 0 ok, 2 usage, 3 bad input, 5 runtime (a rank failed),
// 6 a file not read or written.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <random>
#include <sstream>

#include <cuda_runtime.h>

#include "executor/cuda/bootstrap.h"
#include "executor/cuda/comm_nccl.h"
#include "tools/backend.h"
#include "tools/cli.h"
#include "tools/cuda_tool.h"
#include "executor/cuda/cuda_stage.h"
#include "core/cost/cost_model.h"
#include "core/json_util.h"
#include "core/model_spec.h"
#include "core/plan.h"
#include "core/units.h"
#include "core/step_report.h"

namespace tp = trainplan;
namespace cx = trainplan::executor::cuda;
namespace ct = trainplan::cuda_tool;

namespace {

struct Args {  // the defaults are parse()'s
  std::string model, plan, out, params_out, trace, report;
  std::int64_t steps = 0, warmup = 0;
  std::uint64_t seed = 0;
  double peak_tflops = 0;  // 0: from the device name
  bool help = false;       // --help: the usage was printed
};

tp::Result<Args> parse(int argc, char** argv) {
  tp::cli::Args cli("execute", "Run a plan with the CUDA executor and time it.",
                    {{"backend", true, "cuda (this one) or cpu (see --backend cpu --help)"},
                     {"model", true, "model JSON"},
                     {"plan", true, "plan JSON"},
                     {"out", true, "the run's summary (JSON)"},
                     {"report", true, "the measured step report, for compare (JSON)"},
                     {"trace", true, "a Chrome trace of one step of every rank"},
                     {"params-out", true, "PREFIX: each rank's master weights as text"},
                     {"steps", true, "steps (default 10)"},
                     {"warmup", true, "steps left out of the timing (default 3)"},
                     {"seed", true, "token seed (default 1234)"},
                     {"peak-tflops", true, "peak bf16 TFLOP/s for MFU (default: by device name)"},
                     {"dump-reference", true, "CPU backend only (the PyTorch reference check)"}});
  TRAINPLAN_RETURN_IF_ERROR(cli.parse(argc, argv));
  Args a;
  if (cli.help_requested()) {
    std::cout << cli.usage();
    a.help = true;
    return a;
  }
  // The reference dump reads float32 gradients and logits back (executor/stage.h); this
  // backend keeps bf16 activations and its gradients on the device.
  if (!cli.get("dump-reference").empty())
    return tp::Status::Error("--dump-reference is CPU-only: the CUDA backend does not read its "
                             "gradients and logits back; run it with --backend cpu",
                             tp::ExitCode::kUsage);
  a.model = cli.get("model");
  a.plan = cli.get("plan");
  a.out = cli.get("out");
  a.report = cli.get("report");
  a.trace = cli.get("trace");
  a.params_out = cli.get("params-out");
  auto steps = cli.get_int("steps", 10, 1, 1 << 24);
  auto warmup = cli.get_int("warmup", 3, 0, 1 << 24);
  auto seed = cli.get_int("seed", 1234, 0, std::int64_t{1} << 62);
  auto peak = cli.get_double("peak-tflops", 0, 0, 1e6);
  for (const tp::Status& st : {steps.status(), warmup.status(), seed.status(), peak.status()})
    TRAINPLAN_RETURN_IF_ERROR(st);
  a.steps = *steps;
  a.warmup = *warmup;
  a.seed = static_cast<std::uint64_t>(*seed);
  a.peak_tflops = *peak;
  if (a.model.empty() || a.plan.empty() || a.out.empty())
    return tp::Status::Error("--model, --plan and --out are required\n" + cli.usage(),
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

double peak_flops_of(const std::string& device, double peak_tflops_option) {
  return peak_tflops_option > 0 ? peak_tflops_option * 1e12 : peak_bf16_flops(device);
}

// The measured step report (core/step_report.h), as `execute` writes it on CPU: step time
// over the measured steps; per rank its peak device allocation, and from the traced step its
// compute (the compute stream's spans), optimizer, and per group its collectives' time and
// the part of it the compute stream spent idle (exposed). Collective; every rank calls it,
// rank 0's result is the one to write.
tp::StepReport measured_report(const tp::ModelSpec& model, const tp::Plan& plan,
                               const cx::LaunchInfo& info, cx::NcclComm* comm, std::int64_t stage,
                               const std::vector<tp::executor::TraceEvent>& events,
                               const std::vector<double>& step_seconds,
                               const std::vector<double>& losses, std::int64_t warmup,
                               double peak_bytes,
                               const std::map<std::string, std::int64_t>& bytes_step,
                               double peak_tflops_option) {
  using tp::executor::TraceTrack;
  std::vector<std::pair<tp::TimeNs, tp::TimeNs>> compute;  // in order: one stream
  double compute_s = 0, optimizer_s = 0;
  for (const auto& e : events)
    if (e.track == TraceTrack::kCompute && !e.group.has_value()) {  // not a pipeline receive
      compute.emplace_back(e.begin_ns, e.end_ns);
      const double d = static_cast<double>(e.end_ns - e.begin_ns) * 1e-9;
      compute_s += d;
      if (e.task == "optimizer") optimizer_s += d;
    }
  tp::StepReport rep;
  constexpr tp::CommGroup kGroups[] = {tp::CommGroup::kTp, tp::CommGroup::kPp,
                                       tp::CommGroup::kDp, tp::CommGroup::kEmbedding};
  std::map<tp::CommGroup, std::vector<double>> bytes, time, exposed;
  for (tp::CommGroup g : kGroups) {
    double t = 0, idle = 0;
    for (const auto& e : events)
      if (e.group == g) {
        const tp::TimeNs d = e.end_ns - e.begin_ns;
        t += static_cast<double>(d) * 1e-9;
        idle += static_cast<double>(d - tp::covered_ns(compute, e.begin_ns, e.end_ns)) * 1e-9;
      }
    const auto it = bytes_step.find(std::string(tp::to_string(g)));
    bytes[g] = gather_all(comm, it == bytes_step.end() ? 0.0 : static_cast<double>(it->second));
    time[g] = gather_all(comm, t);
    exposed[g] = gather_all(comm, idle);
  }
  const auto stages = gather_all(comm, static_cast<double>(stage));
  const auto peaks = gather_all(comm, peak_bytes);
  const auto computes = gather_all(comm, compute_s);
  const auto optimizers = gather_all(comm, optimizer_s);

  const ct::DeviceInfo device = ct::current_device_info();
  const double peak_flops = peak_flops_of(device.name, peak_tflops_option);
  tp::set_measured_steps(rep, model, plan, step_seconds, losses, warmup, info.size, peak_flops);
  rep.source = "execute --backend cuda (CUDA executor: cuBLASLt bf16, NCCL " +
               std::to_string(device.nccl_version) + ")";
  rep.cluster = tp::Json{{"device", device.name},
                         {"gpus", info.size},
                         {"launcher", info.launcher},
                         {"sm_count", device.sm_count},
                         {"peak_bf16_flops_per_s", peak_flops},
                         {"cuda_driver_version", device.driver_version},
                         {"cuda_runtime_version", device.runtime_version},
                         {"nccl_version", device.nccl_version},
                         {"peak_memory", "the executor's device pool high-water mark (not the "
                                         "CUDA context, cuBLAS workspace or NCCL buffers)"},
                         {"timed", "step time: host clock, device synchronized; compute and "
                                   "collectives: CUDA events of one traced step"}};
  for (int r = 0; r < info.size; ++r) {
    const auto i = static_cast<std::size_t>(r);
    tp::RankStep rs;
    rs.rank = r;
    rs.stage = static_cast<std::int64_t>(stages[i]);
    rs.peak_memory_bytes = peaks[i];
    rs.compute_s = computes[i];
    rs.optimizer_s = optimizers[i];
    rs.idle_s = std::max(0.0, rep.step_time_s - computes[i]);
    for (tp::CommGroup g : kGroups)
      tp::add_group_comm(rep, rs, g,
                         {.bytes_sent = bytes[g][i], .time_s = time[g][i], .exposed_s = exposed[g][i]});
    rep.ranks.push_back(rs);
  }
  return rep;
}

// The communicator of a multi-rank run (null for one rank, which only selects its device).
// Returns 0, or the exit code after printing why.
int connect(const tp::Plan& plan, const cx::LaunchInfo& info,
            std::unique_ptr<cx::NcclComm>& comm) {
  if (info.size > 1) {
    cx::NcclOptions opt;
    opt.hard_exit_after_s = 30;  // a tool may end the process; the library never does
    if (const char* t = std::getenv("TRAINPLAN_NCCL_TIMEOUT_S")) opt.timeout_s = std::atof(t);
    auto c = cx::NcclComm::make(plan, info, opt);
    if (!c.ok()) {
      std::cerr << "rank " << info.rank << ": " << c.status().message() << "\n";
      return static_cast<int>(c.status().code());
    }
    comm = std::move(*c);
    return 0;
  }
  auto dev = cx::select_device(info);
  if (!dev.ok()) {
    std::cerr << dev.status().message() << "\n";
    return static_cast<int>(dev.status().code());
  }
  TP_CUDA(cudaSetDevice(*dev));
  return 0;
}

// --params-out: this rank's master weights as "name row col value" lines.
void write_params(const tp::executor::Trainer& trainer, const std::string& prefix, int rank) {
  std::ofstream f(prefix + ".rank" + std::to_string(rank) + ".txt");
  f << std::setprecision(9);
  trainer.for_each_param([&](const tp::executor::TensorSlice& t, std::int64_t r, std::int64_t c,
                             float v) {
    if (r < t.valid_rows) f << t.name << ' ' << r << ' ' << c << ' ' << v << '\n';
  });
}

// --trace: each rank's part as a file beside the trace; rank 0 joins them once all are
// written. Collective. Returns 0, or (rank 0) the exit code after printing why.
int write_trace(const std::string& path, const cx::LaunchInfo& info, cx::NcclComm* comm,
                std::int64_t stage, const std::vector<tp::executor::TraceEvent>& events) {
  const std::string part = path + ".rank" + std::to_string(info.rank) + ".part";
  {
    std::ofstream f(part);
    f << tp::executor::chrome_trace_rank_events(info.rank, stage, events);
  }
  gather_all(comm, 0.0);  // a barrier: every part is written
  if (info.rank != 0) return 0;
  std::vector<std::string> parts;
  for (int r = 0; r < info.size; ++r) {
    const std::string name = path + ".rank" + std::to_string(r) + ".part";
    auto text = tp::cli::read_text_file(name);
    if (!text.ok()) return ct::fail(text.status());
    parts.push_back(std::move(*text));
    std::remove(name.c_str());
  }
  if (tp::Status w = tp::cli::write_file_atomic(path, tp::executor::chrome_trace_json(parts));
      !w.ok())
    return ct::fail(w);
  return 0;
}

int run(int argc, char** argv) {
  auto args = parse(argc, argv);
  if (!args.ok()) {
    std::cerr << args.status().message() << "\n";
    return static_cast<int>(args.status().code());
  }
  if (args->help) return 0;
  auto model = tp::cli::load_model_file(args->model);
  if (!model.ok()) return ct::fail(model.status());
  auto plan = tp::cli::load_plan(args->plan);
  if (!plan.ok()) return ct::fail(plan.status());
  auto info = cx::launch_info_from_env();
  if (!info.ok()) {
    std::cerr << info.status().message() << "\n";
    return static_cast<int>(info.status().code());
  }
  std::unique_ptr<cx::NcclComm> comm;
  if (const int rc = connect(*plan, *info, comm); rc != 0) return rc;
  tp::executor::TrainOptions options;
  options.seed = args->seed;
  auto trainer = cx::make_cuda_trainer(*model, *plan, options, comm.get());
  if (!trainer.ok()) {
    std::cerr << trainer.status().message() << "\n";
    return static_cast<int>(trainer.status().code());
  }
  const bool root = info->rank == 0;
  const std::int64_t per_step = plan->global_batch_size * (model->seq_len + 1);
  std::mt19937_64 rng(args->seed);
  std::uniform_int_distribution<std::int32_t> tok(0, static_cast<std::int32_t>(model->vocab_size - 1));
  std::vector<std::int32_t> batch(static_cast<std::size_t>(per_step));
  std::vector<double> losses, seconds, all_seconds;
  std::map<std::string, double> phases;
  std::vector<tp::executor::PhaseSpan> spans;
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
    all_seconds.push_back(r->seconds);
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
  // One more step, traced, for the report and the trace (not in the step time).
  cx::DeviceTrace trace;
  std::vector<tp::executor::TraceEvent> events;
  if (!args->report.empty() || !args->trace.empty()) {
    for (std::int32_t& t : batch) t = tok(rng);
    auto r = (*trainer)->step(batch, &trace);
    if (!r.ok()) {
      std::cerr << "rank " << info->rank << ": " << r.status().message() << "\n";
      return static_cast<int>(r.status().code());
    }
    events = trace.events();
  }
  const double median = tp::median(seconds);
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

  if (!args->params_out.empty()) write_params(**trainer, args->params_out, info->rank);
  int report_rc = 0;
  if (!args->report.empty()) {
    const tp::StepReport rep = measured_report(*model, *plan, *info, comm.get(), stage, events,
                                               all_seconds, losses, args->warmup,
                                               static_cast<double>(mem.peak_bytes), bytes_step,
                                               args->peak_tflops);
    // A failed write returns after the trace's barrier, which every rank must reach.
    if (root)
      if (tp::Status w = tp::cli::write_file_atomic(args->report,
                                                   tp::step_report_to_json(rep).dump(2) + "\n");
          !w.ok())
        report_rc = ct::fail(w);
  }
  // The trace last among the collective steps: its join may fail on rank 0 alone, and no rank
  // must then be left waiting in a collective.
  if (!args->trace.empty())
    if (const int rc = write_trace(args->trace, *info, comm.get(), stage, events); rc != 0)
      return rc;
  if (!root || report_rc != 0) return report_rc;
  const ct::DeviceInfo device = ct::current_device_info();
  const double peak_flops = peak_flops_of(device.name, args->peak_tflops);
  const double flops = tp::step_flops(*model, *plan).model;
  const double tokens = static_cast<double>(plan->global_batch_size * model->seq_len);
  tp::Json j;
  j["device"] = device.name;
  j["compute_capability"] = device.compute_capability;
  j["cuda_driver_version"] = device.driver_version;
  j["cuda_runtime_version"] = device.runtime_version;
  j["nccl_version"] = device.nccl_version;
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
  if (tp::Status w = tp::cli::write_file_atomic(args->out, j.dump(2) + "\n"); !w.ok())
    return ct::fail(w);
  std::cout << device.name << "  " << tp::describe(*plan) << "  " << std::fixed
            << std::setprecision(0) << tokens / median << " tokens/s  MFU "
            << std::setprecision(3) << j["mfu"].get<double>() << "  peak "
            << std::setprecision(2) << peak[0] / tp::kGB << " GB (predicted "
            << pred[0] / tp::kGB << ")\n";
  return 0;
}

}  // namespace

int trainplan::tools::execute_cuda_main(int argc, char** argv) {
  return ct::tool_main(argc, argv, "execute", run);
}
