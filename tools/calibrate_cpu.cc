// calibrate --backend cpu (the default; main() is calibrate.cc): measure this machine and write
// a hardware profile for `simulate --hardware`.
//
//   mpirun -np 2 build/tools/calibrate --out profile.json [--cluster-out cpu_cluster.json] [--quick]
//       [--active-ranks 1]
//
// Every rank measures at once (one thread per rank, as the executor runs); rank 0 fits and
// writes. The executor's own code per cost-model task (traced training steps of the --models
// at each --micro-batches and --tp; an MoE model with ep over the dp ranks and SP with tp > 1;
// calibration/executor_probe.h), its GEMM over an m,n,k sweep,
// STREAM bandwidth, and (with 2+ ranks) MPI collectives in nccl-tests' columns; then
// least-squares fits (calibration/fit.h). With -np 1 the profile has no links.
// Tested by tests/calibration/tools_test.cc.
#include <mpi.h>

#include <sys/statvfs.h>
#include <time.h>  // nanosleep

#include <memory>
#include <iostream>

#include "calibration/collective_bench_mpi.h"
#include "calibration/executor_probe.h"
#include "calibration/kernels.h"
#include "calibration/profile.h"
#include "core/units.h"
#include "executor/allocator.h"
#include "executor/cpu/comm_mpi.h"
#include "executor/cpu/reference_gemm.h"
#include "executor/offload.h"
#include "tools/backend.h"
#include "tools/cli.h"

namespace {

using namespace trainplan;
using namespace trainplan::calibration;

constexpr const char* kProgram = "calibrate";

// The small GPTs whose task shapes are measured when no --models are given: models/tiny.json
// and a model twice as wide with twice the sequence length.
constexpr const char* kDefaultModels[] = {
    R"({"name": "tiny GPT", "num_layers": 4, "hidden_size": 64, "num_attention_heads": 4,
        "ffn_hidden_size": 256, "vocab_size": 256, "seq_len": 64, "tie_word_embeddings": true,
        "activation": "gelu", "norm": "layernorm", "position_embedding": "learned",
        "bias": true, "dropout": false})",
    R"({"name": "small GPT", "num_layers": 4, "hidden_size": 128, "num_attention_heads": 4,
        "ffn_hidden_size": 512, "vocab_size": 256, "seq_len": 128, "tie_word_embeddings": true,
        "activation": "gelu", "norm": "layernorm", "position_embedding": "learned",
        "bias": true, "dropout": false})",
};

Result<std::vector<ModelSpec>> load_models(const cli::Args& args) {
  std::vector<ModelSpec> models;
  if (!args.has("models")) {
    for (const char* text : kDefaultModels) {
      auto j = parse_json_text(text, "built-in model");
      if (!j.ok()) return j.status();
      auto m = model_from_json(*j, "built-in model");
      if (!m.ok()) return m.status();
      models.push_back(*m);
    }
    return models;
  }
  for (const std::string& path : cli::split_list(args.get("models"))) {
    auto m = cli::load_model_file(path);
    if (!m.ok()) return m.status();
    models.push_back(*m);
  }
  return models;
}

struct Setup {
  std::vector<ModelSpec> models;
  std::vector<std::int64_t> micro_batches, tps;
  // Attention implementations to probe: unfused (the default: scores, softmax and values as
  // three tasks) and/or fused (one "attention" task, what a plan with cp > 1 must use; its
  // samples give the profile's attention_efficiency, calibration/fit.h).
  std::vector<AttentionImpl> attentions = {AttentionImpl::kUnfused};
  bool quick = false;
  // Ranks that compute at once: all (the plans that use every rank of the node) or 1 (rank 0
  // alone while the others sleep: what a one-rank plan sees; on a CPU the ranks share caches
  // and memory bandwidth, so the two differ).
  bool one_active = false;
  // --offload-dir: where to time the NVMe offload tier's file I/O (time_offload_file); empty:
  // not timed.
  std::string offload_dir;
};

// Waits for rank 0's signal without spinning, so that a waiting rank takes nothing from rank 0
// (MPI's blocking calls poll; a poll on a sibling hardware thread slows the measured one).
void idle_until_rank0_done() {
  MPI_Request request;
  MPI_Ibarrier(MPI_COMM_WORLD, &request);
  int done = 0;
  while (MPI_Test(&request, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && !done) {
    const timespec pause{0, 2'000'000};  // 2 ms
    nanosleep(&pause, nullptr);
  }
}

// An MoE model's experts over as many of the dp ranks as divide its experts, so that the probe
// times the dispatch and combine all-to-alls (ep 1 has none) as well as the router and experts.
std::int64_t probe_expert_parallel(const ModelSpec& model, std::int64_t dp) {
  if (!model.is_moe()) return 1;
  std::int64_t ep = dp;
  while (ep > 1 && (dp % ep != 0 || model.num_experts % ep != 0)) --ep;
  return ep;
}

// The plans whose steps the executor runs to time its tasks: each model, micro-batch size and
// tensor-parallel degree that divides the world (data parallel over the rest, so that every
// rank computes at once, as in the plans calibrated for), one micro-batch per step. An MoE
// model's probe has expert parallelism (probe_expert_parallel) and, with tp > 1, sequence
// parallelism, which the executor requires for MoE with tp > 1 as Megatron-LM does
// (validate_args: "When using MoE and tensor parallelism, sequence parallelism must be used").
Plan probe_plan(const ModelSpec& model, std::int64_t world, std::int64_t tp,
                std::int64_t micro_batch, AttentionImpl attention) {
  Plan p;
  p.tp = tp;
  p.dp = world / tp;
  p.ep = probe_expert_parallel(model, p.dp);
  p.sequence_parallel = model.is_moe() && tp > 1;
  p.micro_batch_size = micro_batch;
  p.global_batch_size = micro_batch * p.dp;
  p.precision = Precision::kFp32;
  p.attention = attention;
  p.schedule = Schedule::k1F1B;
  return p;
}

std::vector<Plan> probe_plans(const Setup& s, const ModelSpec& model, int world) {
  std::vector<Plan> plans;
  for (std::int64_t tp : s.tps) {
    if (world % tp != 0) continue;
    for (std::int64_t b : s.micro_batches)
      for (AttentionImpl attention : s.attentions) {
        const Plan p = probe_plan(model, world, tp, b, attention);
        if (validate_plan(p).ok() && check_plan_fits_model(p, model).ok()) plans.push_back(p);
      }
  }
  return plans;
}

Result<Measurements> measure_compute(const Setup& s, int rank, int world) {
  Measurements m;
  TimingOptions t;
  t.min_time_s = s.quick ? 0.01 : 0.05;
  auto log = [&](const std::string& what) {
    if (rank == 0) std::cerr << kProgram << ": measuring " << what << "\n";
  };
  if (s.one_active && rank != 0) {
    idle_until_rank0_done();
    return m;
  }
  // The reference kernel (executor/cpu/reference_gemm.h) before the steps, after them and
  // after the GEMM sweep, every rank at once as the steps run (or rank 0 alone): the rate
  // `execute` compares its own between steps with (compare's reference gate).
  executor::ReferenceGemm reference;
  m.reference.m = reference.operands().m();
  m.reference.n = reference.operands().n();
  m.reference.k = reference.operands().k();
  m.reference.calls = reference.calls();
  // And the memory-bound one (STREAM's triad), after the GEMM at each point.
  executor::ReferenceTriad triad;
  m.triad_reference.elements = triad.elements();
  m.triad_reference.calls = triad.calls();
  auto sample_references = [&] {
    m.reference.seconds.push_back(reference.median_seconds());
    m.triad_reference.seconds.push_back(triad.median_seconds());
  };
  sample_references();
  log("the executor's tasks in traced training steps");
  // Odd, so that the median over steps is one step's.
  const int steps = s.quick ? 3 : 5;
  // Three warm-up steps: after one, the forward kernels that write freshly allocated
  // activations still ran 1.5-2x slower than in `execute`'s steady state (GELU forward
  // 107-137 us against 59 us in this machine's traces).
  constexpr int kWarmupSteps = 3;
  for (const ModelSpec& model : s.models) {
    for (const Plan& plan : probe_plans(s, model, s.one_active ? 1 : world)) {
      auto comm = s.one_active ? Result<std::unique_ptr<executor::Comm>>(executor::make_local_comm())
                               : executor::make_mpi_comm(plan, MPI_COMM_WORLD);
      if (!comm.ok()) return comm.status();
      auto samples = time_executor_tasks(model, plan, **comm, kWarmupSteps, steps);
      if (!samples.ok()) return samples.status();
      m.tasks.insert(m.tasks.end(), samples->tasks.begin(), samples->tasks.end());
      m.step_collectives.insert(m.step_collectives.end(), samples->collectives.begin(),
                                samples->collectives.end());
      m.skew.insert(m.skew.end(), samples->skew.begin(), samples->skew.end());
      add_rank_compute(m, samples->rank_compute_s);
    }
  }
  sample_references();
  log("the executor's GEMMs (forward, input and weight gradient) over a sweep of shapes");
  const std::vector<std::int64_t> sweep =
      s.quick ? std::vector<std::int64_t>{16, 64, 256}
              : std::vector<std::int64_t>{16, 64, 128, 256, 512, 1024};
  // The three products a linear layer runs (forward, input gradient, weight gradient): their
  // transposed operands run at different rates, and the profile keeps each direction's.
  for (GemmDirection d : {GemmDirection::kForward, GemmDirection::kInputGradient,
                          GemmDirection::kWeightGradient})
    for (const GemmShape& g : gemm_sweep_shapes(sweep)) m.tasks.push_back(time_gemm(g, t, d));
  sample_references();
  log("STREAM bandwidth");
  const std::vector<double> arrays =
      s.quick ? std::vector<double>{256 * kKiB, 32 * kMiB, 128 * kMiB}
              : std::vector<double>{256 * kKiB, 2 * kMiB, 32 * kMiB, 512 * kMiB};
  TimingOptions st = t;
  st.min_time_s = s.quick ? 0.05 : 0.2;
  for (double bytes : arrays)
    for (const StreamSample& x : time_stream(bytes, st)) m.stream.push_back(x);
  if (!s.offload_dir.empty()) {
    log("the NVMe offload tier's file I/O under " + s.offload_dir);
    const std::vector<double> sizes = s.quick ? std::vector<double>{4 * kMiB, 16 * kMiB}
                                              : std::vector<double>{4 * kMiB, 16 * kMiB, 64 * kMiB};
    for (double bytes : sizes) {
      auto io = time_offload_file(s.offload_dir, rank, bytes, st);
      if (!io.ok()) return io.status();
      m.file_io.push_back(*io);
    }
    struct statvfs fs {};
    if (statvfs(s.offload_dir.c_str(), &fs) == 0)
      m.file_io_free_bytes = static_cast<double>(fs.f_bavail) * static_cast<double>(fs.f_frsize);
  }
  if (s.one_active) {  // rank 0: release the others
    MPI_Request request;
    MPI_Ibarrier(MPI_COMM_WORLD, &request);
    MPI_Wait(&request, MPI_STATUS_IGNORE);
  }
  return m;
}

struct Config {
  Setup setup;
  std::string out, cluster_out;
  std::int64_t ranks_per_node = 1;
  std::int64_t max_message = 0;
};

Status configure(const cli::Args& args, int world, Config& c) {
  if (!args.has("out")) return Status::Error("missing --out FILE", ExitCode::kUsage);
  c.out = args.get("out");
  c.cluster_out = args.get("cluster-out");
  c.setup.quick = args.has("quick");
  auto active = args.get_int("active-ranks", world, 1, world);
  if (!active.ok()) return active.status();
  if (*active != 1 && *active != world)
    return Status::Error("--active-ranks: " + std::to_string(*active) + " is neither 1 nor the " +
                             "number of ranks (" + std::to_string(world) + ")",
                         ExitCode::kUsage);
  c.setup.one_active = *active == 1 && world > 1;
  auto models = load_models(args);
  if (!models.ok()) return models.status();
  c.setup.models = *models;
  auto mbs = args.get_int_list("micro-batches", "1,2,4", 1, 4096);
  if (!mbs.ok()) return mbs.status();
  c.setup.micro_batches = *mbs;
  if (args.has("attention")) {
    c.setup.attentions.clear();
    for (const std::string& a : cli::split_list(args.get("attention"))) {
      if (a != "fused" && a != "unfused")
        return Status::Error("--attention: '" + a + "' is neither fused nor unfused",
                             ExitCode::kUsage);
      c.setup.attentions.push_back(a == "fused" ? AttentionImpl::kFused : AttentionImpl::kUnfused);
    }
  }
  if (args.has("offload-dir")) {
    c.setup.offload_dir = args.get("offload-dir");
    if (Status st = executor::check_offload_dir(c.setup.offload_dir, "--offload-dir"); !st.ok())
      return st;
  }
  auto tps = args.get_int_list("tp", "1,2", 1, 4096);
  if (!tps.ok()) return tps.status();
  c.setup.tps = *tps;
  auto ranks_per_node = args.get_int("ranks-per-node", world, 1, 1024);
  if (!ranks_per_node.ok()) return ranks_per_node.status();
  c.ranks_per_node = *ranks_per_node;
  auto max_message = args.get_int("max-message", c.setup.quick ? (4 << 20) : (64 << 20), 8,
                                  std::int64_t{1} << 30);
  if (!max_message.ok()) return max_message.status();
  c.max_message = *max_message;
  return Status::Ok();
}

// Every rank checks its own setup; all agree before the first collective so that one rank's
// bad input cannot leave the others waiting. Rank 0 reports, or the first failing rank.
int agree(const Status& st, int rank) {
  const int code = st.ok() ? 0 : static_cast<int>(st.code());
  int failing = st.ok() ? 1 << 30 : rank;
  MPI_Allreduce(MPI_IN_PLACE, &failing, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  int worst = code;
  MPI_Allreduce(MPI_IN_PLACE, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (!st.ok() && failing == rank) cli::fail(kProgram, st);
  return worst;
}

int run(int argc, char** argv, int rank, int world) {
  cli::Args args(kProgram,
                 "Measure this machine (GEMM, memory, kernels, MPI collectives) and write a "
                 "hardware profile fitted by least squares.",
                 {{"backend", true, "cpu (this one, the default) or cuda"},
                  {"out", true, "hardware profile JSON to write", "FILE", true},
                  {"cluster-out", true, "also write a cluster JSON describing this machine"},
                  {"quick", false, "fewer and shorter measurements (about 20 s; for CI)"},
                  {"active-ranks", true,
                   "ranks computing at once while the compute is timed: "
                   "the number of ranks (default) or 1 (for one-rank "
                   "plans; the other ranks sleep)"},
                  {"models", true, "comma-separated model JSONs whose shapes to measure"},
                  {"micro-batches", true, "micro-batch sizes to measure (default 1,2,4)"},
                  {"tp", true, "tensor-parallel degrees to measure (default 1,2)"},
                  {"attention", true,
                   "attention implementations to measure: unfused (the "
                   "default), fused, or both (plans with cp > 1 need fused)"},
                  {"ranks-per-node", true, "ranks in the cluster file (default: -np)"},
                  {"max-message", true,
                   "largest collective message in bytes (default 2^26 = "
                   "67.1 MB; 2^22 = 4.2 MB with --quick)"},
                  {"offload-dir", true,
                   "also time the NVMe offload tier's file I/O in this "
                   "directory (execute --offload-dir's; the cluster file "
                   "then has nvme_GBps_per_node)"},
                  {"baseline-from", true,
                   "measured report of `execute` on models/probe.json: "
                   "the executor's fixed memory (default: this process's)"}});
  // Read /proc first: the baseline must come before any model-sized allocation.
  ProcessMemory baseline;
  if (auto s = cli::read_text_file("/proc/self/status"); s.ok()) baseline = parse_proc_status(*s);
  Status st = args.parse(argc, argv);
  Config config;
  if (st.ok() && !args.help_requested()) st = configure(args, world, config);
  if (int code = agree(st, rank); code != 0) return code;
  if (args.help_requested()) {
    if (rank == 0) std::cout << args.usage();
    return 0;
  }
  const Setup& setup = config.setup;

  MPI_Barrier(MPI_COMM_WORLD);
  // The executor's steps run on every rank together; a failure there (it would be the same on
  // every rank: the plans are the same) ends the run.
  auto measured = measure_compute(setup, rank, world);
  if (int code = agree(measured.status(), rank); code != 0) return code;
  Measurements& m = *measured;
  double hwm = baseline.hwm_bytes, rss = baseline.rss_bytes;
  MPI_Allreduce(&baseline.hwm_bytes, &hwm, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  MPI_Allreduce(&baseline.rss_bytes, &rss, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  m.baseline = {rss, hwm};
  if (world >= 2) {
    if (rank == 0) std::cerr << kProgram << ": measuring MPI collectives\n";
    CollectiveBenchOptions co;
    co.max_bytes = config.max_message;
    if (setup.quick) {
      co.target_time_s = 0.004;
      co.max_iters = 50;
    }
    auto samples = bench_collectives(MPI_COMM_WORLD, co);
    if (!samples.ok()) return cli::fail(kProgram, samples.status());
    m.collectives = *samples;
  }
  if (rank != 0) return 0;

  MachineIdentity id;
  if (auto s = cli::read_text_file("/proc/cpuinfo"); s.ok()) id.cpu_model = parse_cpu_model(*s);
  id.ranks = setup.one_active ? 1 : world;  // ranks computing at once
  id.threads_per_rank = 1;
  id.date = iso8601_utc_now();
  auto cal = calibrate_from(m, id);
  if (!cal.ok()) return cli::fail(kProgram, cal.status());
  if (args.has("baseline-from")) {
    auto json = cli::read_json_file(args.get("baseline-from"));
    if (!json.ok()) return cli::fail(kProgram, json.status());
    auto probe = step_report_from_json(*json, args.get("baseline-from"));
    if (!probe.ok()) return cli::fail(kProgram, probe.status());
    auto base = executor_baseline_bytes(*probe, args.get("baseline-from"));
    if (!base.ok()) return cli::fail(kProgram, base.status());
    cal->profile.baseline_memory_bytes = *base;
  }

  std::cout << format_task_table(m.tasks, cal->compute.rates) << "\n"
            << format_stream_table(m.stream);
  if (!m.collectives.empty()) std::cout << format_collective_table(m.collectives);
  if (!m.step_collectives.empty())
    std::cout << "\n# the executor's collectives inside its steps (per call: median over steps "
                 "of the step's mean, shortest over ranks)\n"
              << format_collective_table(m.step_collectives);
  std::cout << "\n" << format_fit_summary(*cal);

  const Json profile = profile_json(*cal, m);
  // The file must load back: the simulator reads it with this function.
  if (auto back = hardware_profile_from_json(profile, args.get("out")); !back.ok())
    return cli::fail(kProgram, Status::Error("internal: the profile does not load back: " +
                                                 back.status().message(),
                                             ExitCode::kInternal));
  if (Status w = cli::write_file_atomic(config.out, profile.dump(2) + "\n"); !w.ok())
    return cli::fail(kProgram, w);
  std::cout << "wrote " << config.out << "\n";
  if (!config.cluster_out.empty()) {
    double mem_total = 0;
    if (auto s = cli::read_text_file("/proc/meminfo"); s.ok()) mem_total = parse_mem_total_bytes(*s);
    const Json cluster =
        cpu_cluster_json(*cal, config.ranks_per_node,
                         mem_total / static_cast<double>(config.ranks_per_node));
    if (auto back = cluster_from_json(cluster, args.get("cluster-out")); !back.ok())
      return cli::fail(kProgram, Status::Error("internal: the cluster does not load back: " +
                                                   back.status().message(),
                                               ExitCode::kInternal));
    if (Status w = cli::write_file_atomic(config.cluster_out, cluster.dump(2) + "\n"); !w.ok())
      return cli::fail(kProgram, w);
    std::cout << "wrote " << args.get("cluster-out") << "\n";
  }
  return 0;
}

}  // namespace

int trainplan::tools::calibrate_cpu_main(int argc, char** argv) {
  // Before anything is allocated.
  const bool kept_mapped = trainplan::executor::keep_freed_memory_mapped();
  MPI_Init(&argc, &argv);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  if (!kept_mapped && rank == 0)
    std::cerr << kProgram << ": note: the C library did not take the keep-freed-memory policy "
              << "(not glibc, or a sanitizer): the executor's tasks are timed with their page "
              << "faults, as `execute` under the same library runs them" << std::endl;
  const int code = run(argc, argv, rank, world);
  // Only rank 0 fits and writes; its exit code is the job's.
  int job = code;
  MPI_Bcast(&job, 1, MPI_INT, 0, MPI_COMM_WORLD);
  MPI_Finalize();
  return job;
}
