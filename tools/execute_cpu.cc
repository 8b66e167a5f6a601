// execute --backend cpu (the default; main() is execute.cc): train a plan for real on CPUs
// (Eigen math, MPI between ranks) and write what was measured as a step report
// (core/step_report.h), comparable with `simulate`'s prediction.
//
//   mpirun -np 2 build/tools/execute --model models/tiny.json --plan PLAN.json --steps 20
//       --data data/kjv-genesis.txt --out measured.json [--trace trace.json]
//
// --trace FILE also writes a Chrome trace (https://ui.perfetto.dev, chrome://tracing) of the last
// measured step of every rank, laid out as `simulate --trace` (executor/trace.h): a process per
// rank, a track per stream (compute, tp, pp send next/prev, dp, ...), spans named after the cost
// model's tasks ("F mb0 L1 qkv", "B mb0 L1 tp_all_reduce_attn_grad"), with bytes sent. Times are
// microseconds from the step's start, which the ranks begin together. Rank 0 gathers the events
// of every rank and writes the file atomically; the other steps record nothing.
//
// --memory-report FILE writes every rank's memory account (executor/memory_account.h): its
// buffers one by one with what each lives for, at the end of the pass where the most was in
// use, beside its VmHWM; bench/scripts/memory_items.py puts it beside simulate's breakdown.
// --reference-calls N (default 5; 0: none): after every step, outside its time, every rank
// times the reference kernel (executor/cpu/reference_gemm.h, the GEMM calibrate also times) and
// the report gets each step's rate under cluster.reference_gemm, for compare's in-run reference
// gate (validation/reference_gate.h). Beside it, the memory-bound reference (ReferenceTriad,
// STREAM's triad over 3 arrays of 64 MiB, the same number of calls), its bytes/s under
// cluster.reference_triad: with --reference-triad ends (the default) before the first step and
// after the last, with every-step after every step as the GEMM, with off not at all. Not after
// every step by default: its 192 MiB per call evict the model from the caches, and the step after
// it ran some 2x slower on this VM (tiny.json, dp2: bench/results/cpu-triad-2026-12-03/NOTES.md).
// Its arrays are allocated before the trainer and stay resident to the end, so the reported peak
// memory (VmHWM) is given less their size.
// --cluster FILE (or --gpus N [--gpu NAME] [--gpus-per-node G]) and --hardware FILE: the machine
// `simulate` was given. zb-v's order depends on it (the pipeline send against a layer's
// forward; core/schedule.h's order_costs); with it the executor runs the order simulate plays,
// without it zb-v's send-blind order. The other schedules do not depend on it.
//
// Plans with offload (Plan::offload) keep the offloaded states apart from the executor's own
// buffers (executor/offload.h): offload_device nvme in a file per rank under --offload-dir DIR
// (created new, removed at exit; --offload-prefetch off reads each block's states only when
// it is updated). The report's cluster.offload_bytes_per_step gives each rank's bytes per
// measured step beside the cost model's.
//
// --scale-down runs a plan written for a zoo model (plan --emit-plan) on that model shrunk to
// a laptop's size, keeping the plan's layout (executor/scale_down.h); it prints each change,
// and --write-scaled PREFIX saves the model and plan that ran, for simulate and compare.
//
// Also starts under srun (SLURM_PROCID / SLURM_NTASKS) or with torchrun-style variables (RANK,
// WORLD_SIZE, LOCAL_RANK); MPI stays the transport, so those variables must agree with MPI's
// view, and a disagreement is reported as such. Every check that can fail on bad input runs
// before anything is allocated, and all ranks agree on the outcome, so a bad input never
// leaves ranks waiting for each other. A failure during the run (an exception, an MPI error)
// aborts the whole job naming the rank; a rank killed from outside is reported by mpirun.
// Tests: tests/executor/ (ctest -L executor).
#include <mpi.h>
#include <sched.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iomanip>
#include <iterator>
#include <iostream>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "executor/allocator.h"
#include "executor/cpu/comm_mpi.h"
#include "executor/data.h"
#include "executor/memory_account.h"
#include "executor/offload.h"
#include "executor/params.h"
#include "executor/scale_down.h"
#include "executor/tensor_file.h"
#include "executor/trace.h"
#include "executor/cpu/cpu_stage.h"
#include "executor/cpu/kernels.h"
#include "executor/cpu/moe.h"
#include "executor/cpu/reference_gemm.h"
#include "core/cost/cost_model.h"
#include "core/schedule.h"
#include "core/step_report.h"
#include "core/units.h"
#include "tools/backend.h"
#include "tools/cli.h"

using namespace trainplan;
using namespace trainplan::executor;

namespace {

constexpr const char* kProgram = "execute";
// --threads' upper bound: a sanity limit, well above the core count of today's CPU nodes (a
// typo such as 80000 is refused rather than started); not a tuning choice.
constexpr std::int64_t kMaxThreads = 1024;

// All ranks learn whether any rank failed, and which (the lowest failing rank), so that they
// stop together. Returns the failing rank or -1.
int agree(const Status& local) {
  int mine[2] = {local.ok() ? 0 : static_cast<int>(local.code()), 0};
  MPI_Comm_rank(MPI_COMM_WORLD, &mine[1]);
  int codes[2] = {0, 0};
  MPI_Allreduce(&mine, &codes, 1, MPI_2INT, MPI_MAXLOC, MPI_COMM_WORLD);
  return codes[0] == 0 ? -1 : codes[1];
}

// The launcher's view of this process (srun or torchrun variables) against MPI's.
Status check_launcher(int mpi_rank, int mpi_size) {
  auto env = [](const char* name) -> std::optional<long> {
    const char* v = std::getenv(name);
    if (v == nullptr || *v == '\0') return std::nullopt;
    char* end = nullptr;
    const long x = std::strtol(v, &end, 10);
    if (*end != '\0') return -1;
    return x;
  };
  struct Pair { const char* rank; const char* size; const char* launcher; };
  for (const Pair& p : {Pair{"SLURM_PROCID", "SLURM_NTASKS", "srun"},
                        Pair{"RANK", "WORLD_SIZE", "torchrun-style"}}) {
    const auto r = env(p.rank), n = env(p.size);
    if (!r && !n) continue;
    if (n && *n != mpi_size) {
      std::string hint = mpi_size == 1
          ? " (MPI started this process alone: the executor's transport is MPI, so start it "
            "with mpirun, or with srun through MPI's PMI, e.g. srun --mpi=pmix; starting "
            "without MPI is not supported by the CPU backend)"
          : "";
      return Status::Error(std::string(p.launcher) + " says " + p.size + "=" +
                               std::to_string(*n) + " but MPI's world has " +
                               std::to_string(mpi_size) + " ranks" + hint,
                           ExitCode::kUsage);
    }
    if (r && *r != mpi_rank)
      return Status::Error(std::string(p.launcher) + " says " + p.rank + "=" +
                               std::to_string(*r) + " but this process is MPI rank " +
                               std::to_string(mpi_rank) +
                               " (the launcher's and MPI's rank orders disagree)",
                           ExitCode::kUsage);
  }
  return Status::Ok();
}

// --threads N: the math threads of this rank (executor/cpu/kernels.h). mpirun binds each rank to
// one core by default (OpenMPI binds to core for up to 2 ranks), and N threads on one core wait on
// each other in every matrix product, so say so when the affinity mask is smaller than N.
void set_threads(int threads, int rank) {
  set_math_threads(threads);
  cpu_set_t allowed;
  if (threads <= 1 || sched_getaffinity(0, sizeof(allowed), &allowed) != 0) return;
  const int cpus = CPU_COUNT(&allowed);
  if (cpus < threads)
    std::cerr << kProgram << ": note: rank " << rank << " runs --threads " << threads
              << " on " << cpus << " CPU(s) (its affinity); start mpirun with --bind-to none "
              << "or --map-by slot:PE=" << threads << std::endl;
}

// Process high-water mark of resident memory (VmHWM), bytes: the CPU analogue of a device's
// peak allocation (it also counts the MPI library's buffers and the binary).
double peak_memory_bytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) * 1024.0;
  return 0;
}

struct Setup {
  ModelSpec model;
  Plan plan;
  std::int64_t steps = 0, warmup = 0;
  std::uint64_t seed = 0;
  double lr = 0;
  std::int64_t lr_warmup = 0;
  int threads = 1;     // --threads: per rank, for the matrix products
  // --reference-calls: timed calls of the reference kernel after every step; 0: none.
  int reference_calls = ReferenceGemm::kDefaultCalls;
  // --reference-triad: when the triad reference is timed (with reference_calls > 0).
  enum class TriadWhen { kEnds, kEveryStep, kOff } triad_when = TriadWhen::kEnds;
  std::string corpus;  // empty: random tokens
  std::string out;
  std::string trace;   // empty: no trace
  std::string memory_report;  // --memory-report FILE; empty: none
  std::string inject;  // "RANK:STEP": throw on that rank at that step (fault tests)
  std::string dump;    // --dump-reference prefix; empty: none
  OffloadOptions offload;  // --offload-dir, --offload-prefetch
  sim::OrderInputs order;  // --cluster / --gpus, --hardware: the machine simulate was given
};

// --cluster FILE or --gpus N [--gpu NAME] [--gpus-per-node G], and --hardware FILE: the machine
// `simulate` is given, so that zb-v runs the order the simulator plays there
// (core/schedule.h's order_costs); without them zb-v runs its send-blind order. Checked here,
// before anything is allocated, so every rank agrees.
Status parse_order_machine(const cli::Args& args, Setup& s) {
  if (!args.has("cluster") && !args.has("gpus")) {
    for (const char* o : {"hardware", "gpu", "gpus-per-node"})
      if (args.has(o))
        return Status::Error(std::string("--") + o + " needs --cluster FILE or --gpus N (the "
                             "machine simulate was given)", ExitCode::kUsage);
    return Status::Ok();
  }
  auto cluster = cli::load_cluster(args);
  if (!cluster.ok()) return cluster.status();
  auto hardware = cli::load_hardware(args);
  if (!hardware.ok()) return hardware.status();
  s.order.cluster = *cluster;
  s.order.hardware = *hardware;
  return sim::order_costs(s.model, s.plan, s.order).status();
}

// --scale-down: the model and plan shrunk to a laptop's size (executor/scale_down.h), each
// change said on stderr by rank 0; --write-scaled PREFIX: rank 0 writes what runs, for simulate
// and compare.
Status apply_scale_down(const cli::Args& args, Setup& s, int mpi_rank) {
  if (!args.has("scale-down")) {
    if (args.has("write-scaled"))
      return Status::Error("--write-scaled needs --scale-down", ExitCode::kUsage);
    return Status::Ok();
  }
  Result<ScaledRun> scaled = scale_down(s.model, s.plan);
  if (!scaled.ok()) return scaled.status();
  s.model = scaled->model;
  s.plan = scaled->plan;
  if (mpi_rank != 0) return Status::Ok();
  for (const std::string& line : scaled->changes)
    std::cerr << kProgram << ": scale-down: " << line << "\n";
  if (!args.has("write-scaled")) return Status::Ok();
  const std::string prefix = args.get("write-scaled");
  TRAINPLAN_RETURN_IF_ERROR(cli::write_file_atomic(prefix + ".model.json",
                                                   model_to_json(s.model).dump(2) + "\n"));
  TRAINPLAN_RETURN_IF_ERROR(
      cli::write_file_atomic(prefix + ".plan.json", plan_to_json(s.plan).dump(2) + "\n"));
  std::cerr << kProgram << ": scale-down: wrote " << prefix << ".model.json and " << prefix
            << ".plan.json\n";
  return Status::Ok();
}

// --offload-dir DIR: where offload_device nvme keeps each rank's file (executor/offload.h); a
// plan without it has nothing to put there. --offload-prefetch on|off: whether the next block's
// states are read while one is updated.
Status parse_offload(const cli::Args& args, Setup& s) {
  const bool nvme = s.plan.offload != Offload::kNone && s.plan.offload_device == OffloadDevice::kNvme;
  if (args.has("offload-dir") && !nvme)
    return Status::Error("--offload-dir is for plans with offload_device nvme; this plan has "
                         "offload " + std::string(to_string(s.plan.offload)) +
                             (s.plan.offload == Offload::kNone
                                  ? std::string()
                                  : " on " + std::string(to_string(s.plan.offload_device))),
                         ExitCode::kUsage);
  if (nvme && !args.has("offload-dir"))
    return Status::Error("the plan offloads to nvme (offload " +
                             std::string(to_string(s.plan.offload)) +
                             "): give --offload-dir DIR, a directory on the drive for the "
                             "per-rank state files",
                         ExitCode::kUsage);
  if (nvme) {
    s.offload.dir = args.get("offload-dir");
    TRAINPLAN_RETURN_IF_ERROR(check_offload_dir(s.offload.dir, "--offload-dir"));
  }
  const std::string prefetch = args.has("offload-prefetch") ? args.get("offload-prefetch") : "on";
  if (prefetch != "on" && prefetch != "off")
    return Status::Error("--offload-prefetch '" + prefetch + "': use on or off", ExitCode::kUsage);
  s.offload.prefetch = prefetch == "on";
  return Status::Ok();
}

Result<Setup> parse(cli::Args& args, int argc, char** argv, int mpi_rank, int mpi_size) {
  TRAINPLAN_RETURN_IF_ERROR(args.parse(argc, argv));
  if (args.help_requested()) return Status::Ok();
  TRAINPLAN_RETURN_IF_ERROR(check_launcher(mpi_rank, mpi_size));
  Setup s;
  auto model = cli::load_model(args);
  if (!model.ok()) return model.status();
  s.model = *model;
  if (!args.has("plan")) return Status::Error("missing --plan FILE", ExitCode::kUsage);
  auto plan = cli::load_plan(args.get("plan"));
  if (!plan.ok()) return plan.status();
  s.plan = *plan;
  TRAINPLAN_RETURN_IF_ERROR(apply_scale_down(args, s, mpi_rank));
  if (!args.has("out")) return Status::Error("missing --out FILE", ExitCode::kUsage);
  s.out = args.get("out");
  s.trace = args.get("trace");
  s.memory_report = args.get("memory-report");
  auto steps = args.get_int("steps", 10, 1, 1 << 24);
  if (!steps.ok()) return steps.status();
  auto warmup = args.get_int("warmup", std::min<std::int64_t>(2, *steps - 1), 0, 1 << 24);
  if (!warmup.ok()) return warmup.status();
  if (*warmup >= *steps)
    return Status::Error("--warmup " + std::to_string(*warmup) + " leaves no measured step of --steps " +
                             std::to_string(*steps),
                         ExitCode::kUsage);
  s.steps = *steps;
  s.warmup = *warmup;
  auto seed = args.get_int("seed", 1234, 0, std::int64_t{1} << 62);
  if (!seed.ok()) return seed.status();
  s.seed = static_cast<std::uint64_t>(*seed);
  auto lr = args.get_double("lr", 1e-3, 0, 1);
  if (!lr.ok()) return lr.status();
  s.lr = *lr;
  auto lr_warmup = args.get_int("lr-warmup", 0, 0, 1 << 24);
  if (!lr_warmup.ok()) return lr_warmup.status();
  s.lr_warmup = *lr_warmup;
  auto threads = args.get_int("threads", 1, 1, kMaxThreads);
  if (!threads.ok()) return threads.status();
  s.threads = static_cast<int>(*threads);
  auto reference_calls = args.get_int("reference-calls", ReferenceGemm::kDefaultCalls, 0,
                                      ReferenceGemm::kMaxCalls);
  if (!reference_calls.ok()) return reference_calls.status();
  s.reference_calls = static_cast<int>(*reference_calls);
  const std::string triad_when = args.get("reference-triad", "ends");
  if (triad_when == "ends") s.triad_when = Setup::TriadWhen::kEnds;
  else if (triad_when == "every-step") s.triad_when = Setup::TriadWhen::kEveryStep;
  else if (triad_when == "off") s.triad_when = Setup::TriadWhen::kOff;
  else
    return Status::Error("--reference-triad '" + triad_when + "': expected ends, every-step or off",
                         ExitCode::kUsage);
  s.inject = args.get("inject-fault");
  s.dump = args.get("dump-reference");
  if (!s.dump.empty() && (mpi_size != 1 || s.plan.zero_stage >= 2))
    return Status::Error("--dump-reference needs the single-rank run with full gradients; the plan "
                         "has " + std::to_string(mpi_size) + " ranks and zero_stage=" +
                             std::to_string(s.plan.zero_stage) + " (use 1 rank, zero_stage 0 or 1)",
                         ExitCode::kUsage);
  // The plan against the world and the model, before anything is allocated.
  // What the executor cannot run (context parallelism, MoE, ...) first: a cp plan's world size
  // counts its cp ranks, and its reason says more than a rank-count mismatch.
  TRAINPLAN_RETURN_IF_ERROR(validate_plan(s.plan));
  TRAINPLAN_RETURN_IF_ERROR(check_executor_supports(s.model, s.plan));
  TRAINPLAN_RETURN_IF_ERROR(check_plan_world_size(s.plan, mpi_size));
  TRAINPLAN_RETURN_IF_ERROR(check_plan_fits_model(s.plan, s.model));
  TRAINPLAN_RETURN_IF_ERROR(parse_order_machine(args, s));
  TRAINPLAN_RETURN_IF_ERROR(parse_offload(args, s));
  if (args.has("data") == args.has("random-tokens"))
    return Status::Error("give exactly one of --data FILE and --random-tokens", ExitCode::kUsage);
  if (args.has("data")) {
    auto text = cli::read_text_file(args.get("data"));
    if (!text.ok()) return text.status();
    s.corpus = std::move(*text);
    if (static_cast<std::int64_t>(s.corpus.size()) <= s.model.seq_len + 1)
      return Status::Error("data file '" + args.get("data") + "' has " +
                               std::to_string(s.corpus.size()) + " bytes, fewer than one sequence of " +
                               std::to_string(s.model.seq_len + 1) + " tokens",
                           ExitCode::kInvalidInput);
    if (s.model.vocab_size < 256)
      return Status::Error("--data uses byte-level tokens (vocabulary 256); the model's vocabulary "
                           "is " + std::to_string(s.model.vocab_size),
                           ExitCode::kInvalidInput);
  }
  return s;
}

// Every rank's `mine` to rank 0, in rank order (empty on the other ranks). MPI errors here
// abort the job through main()'s handler, naming the call and file:line.
std::vector<std::string> gather_text(const std::string& mine, int rank, int size) {
  int n = static_cast<int>(mine.size());
  std::vector<int> sizes(static_cast<std::size_t>(size)), offsets(sizes.size());
  TRAINPLAN_MPI_CALL(MPI_Gather(&n, 1, MPI_INT, sizes.data(), 1, MPI_INT, 0, MPI_COMM_WORLD));
  std::string all;
  if (rank == 0) {
    for (std::size_t r = 1; r < sizes.size(); ++r) offsets[r] = offsets[r - 1] + sizes[r - 1];
    all.resize(static_cast<std::size_t>(offsets.back() + sizes.back()));
  }
  TRAINPLAN_MPI_CALL(MPI_Gatherv(mine.data(), n, MPI_CHAR, all.data(), sizes.data(),
                                 offsets.data(), MPI_CHAR, 0, MPI_COMM_WORLD));
  std::vector<std::string> parts;
  if (rank == 0)
    for (std::size_t r = 0; r < sizes.size(); ++r)
      parts.push_back(all.substr(static_cast<std::size_t>(offsets[r]),
                                 static_cast<std::size_t>(sizes[r])));
  return parts;
}

// One rank's part of --memory-report: its account at the pass with the most in use (the
// Trainer's peak), the account at the end of the run, and its VmHWM.
Json memory_report_of_rank(const Trainer& t, int rank, double vmhwm_bytes) {
  return Json{{"rank", rank},
              {"stage", t.stage()},
              {"vmhwm_bytes", vmhwm_bytes},
              {"at_peak", memory_account_to_json(t.peak_memory_account())},
              {"at_end", memory_account_to_json(t.memory_account())}};
}

Status write_memory_report(const Setup& s, const std::vector<std::string>& parts) {
  Json ranks = Json::array();
  for (const std::string& part : parts) ranks.push_back(Json::parse(part));
  const Json report{
      {"what", "execute's memory account per rank (executor/memory_account.h): the buffers the "
               "executor owns, by what they live for, at the end of the pass with the most in "
               "use; vmhwm_bytes adds the process's fixed memory (binary, MPI) and the C "
               "library's"},
      {"model", s.model.name},
      {"plan", describe(s.plan)},
      {"ranks", ranks}};
  return cli::write_file_atomic(s.memory_report, report.dump(2) + "\n");
}

// The full tensors of a single-rank trainer, by name in first-seen order, from a for_each_param
// or for_each_grad walk. Row vectors (norms, biases) keep the shape (cols).
class TensorCollector {
 public:
  explicit TensorCollector(std::string prefix) : prefix_(std::move(prefix)) {}
  void operator()(const TensorSlice& t, std::int64_t row, std::int64_t col, float value) {
    const std::string name = prefix_ + t.name;
    auto [it, fresh] = index_.try_emplace(name, tensors_.size());
    if (fresh) {
      NamedTensor& n = tensors_.emplace_back();
      n.name = name;
      n.shape = t.full_rows == 1 ? std::vector<std::int64_t>{t.full_cols}
                                 : std::vector<std::int64_t>{t.full_rows, t.full_cols};
      n.data.assign(static_cast<std::size_t>(t.full_rows * t.full_cols), 0.0f);
    }
    tensors_[it->second].data[static_cast<std::size_t>(row * t.full_cols + col)] = value;
  }
  std::vector<NamedTensor>& tensors() { return tensors_; }

 private:
  std::string prefix_;
  std::map<std::string, std::size_t> index_;
  std::vector<NamedTensor> tensors_;
};

// What --dump-reference writes: PREFIX.init.tpt (the initial weights) before the first step, and
// PREFIX.step1.tpt (the first batch's tokens, the logits of each micro-batch, every gradient of
// the first step) after it. Single rank only (checked in parse).
Json dump_meta(const Setup& s) {
  Json meta{{"seed", s.seed}, {"lr", s.lr}, {"lr_warmup", s.lr_warmup}, {"global_batch_size", s.plan.global_batch_size},
            {"micro_batch_size", s.plan.micro_batch_size}, {"seq_len", s.model.seq_len},
            {"vocab_size", s.model.vocab_size}, {"num_layers", s.model.num_layers},
            {"hidden_size", s.model.hidden_size}, {"num_heads", s.model.num_attention_heads},
            {"ffn_hidden_size", s.model.ffn_hidden_size},
            {"tie_word_embeddings", s.model.tie_word_embeddings},
            {"experts_per_token", s.model.experts_per_token},
            {"router_aux_loss_coef",
             s.model.router_aux_loss_coef.value_or(executor::kDefaultMoeAuxLossCoeff)}};
  // Absent: dropless (the reference drops nothing either).
  if (s.model.moe_capacity_factor) meta["moe_capacity_factor"] = *s.model.moe_capacity_factor;
  return meta;
}

Status write_initial_weights(const Setup& s, const Trainer& t) {
  TensorCollector weights("");
  t.for_each_param(std::ref(weights));
  return cli::write_file_atomic(s.dump + ".init.tpt", encode_tensors(weights.tensors(), dump_meta(s)));
}

Status write_first_step(const Setup& s, const std::vector<std::int32_t>& batch,
                        std::vector<float> logits, std::vector<NamedTensor> grads, double loss) {
  std::vector<NamedTensor> out;
  const std::int64_t vocab_cols =
      static_cast<std::int64_t>(logits.size()) / (s.plan.global_batch_size * s.model.seq_len);
  out.push_back({"tokens", {s.plan.global_batch_size, s.model.seq_len + 1},
                 std::vector<float>(batch.begin(), batch.end())});
  out.push_back({"logits", {s.plan.global_batch_size * s.model.seq_len, vocab_cols},
                 std::move(logits)});
  for (NamedTensor& g : grads) out.push_back(std::move(g));
  Json meta = dump_meta(s);
  meta["loss"] = loss;
  return cli::write_file_atomic(s.dump + ".step1.tpt", encode_tensors(out, meta));
}

// With --dump-reference on an MoE model, PREFIX.routing.tpt: every step's routing, as the
// reference check compares it (bench/scripts/reference_check.py --routing): the router's
// probabilities, shape (steps, micro-batches, MoE layers, tokens, experts), and the chosen
// experts, best first (steps, micro-batches, MoE layers, tokens, k), as floats.
Status write_routing(const Setup& s, std::int64_t steps, RoutingCapture routing) {
  std::int64_t moe_layers = 0;
  for (std::int64_t l = 0; l < s.model.num_layers; ++l) moe_layers += s.model.layer_is_moe(l);
  const std::int64_t micro_batches = s.plan.global_batch_size / s.plan.micro_batch_size,
                     tokens = s.plan.micro_batch_size * s.model.seq_len,
                     forwards = steps * micro_batches * moe_layers;
  TRAINPLAN_CHECK(static_cast<std::int64_t>(routing.probs.size()) ==
                  forwards * tokens * s.model.num_experts)
      << "routing captured: " << routing.probs.size() << " probabilities for " << forwards
      << " layer forwards of " << tokens << " tokens";
  const std::vector<std::int64_t> shape = {steps, micro_batches, moe_layers, tokens};
  std::vector<NamedTensor> out(2);
  out[0] = {"probs", shape, std::move(routing.probs)};
  out[0].shape.push_back(s.model.num_experts);
  out[1] = {"experts", shape, std::vector<float>(routing.experts.begin(), routing.experts.end())};
  out[1].shape.push_back(s.model.experts_per_token);
  return cli::write_file_atomic(s.dump + ".routing.tpt", encode_tensors(out, dump_meta(s)));
}

// Per-rank figures gathered to rank 0, in this order.
enum Field {
  kStage, kPeakMemory, kCompute, kOptimizer,
  kOffloadD2H, kOffloadH2D, kNvmeRead, kNvmeWrite, kNvmePrefetched,  // OffloadBytes per measured step
  kFirstGroup
};
constexpr CommGroup kGroups[] = {CommGroup::kTp,        CommGroup::kPp,
                                 CommGroup::kDp,        CommGroup::kEmbedding,
                                 CommGroup::kDpReplica, CommGroup::kCp,
                                 CommGroup::kEp,        CommGroup::kExpertDp,
                                 CommGroup::kExpertTp};
constexpr int kNumGroups = static_cast<int>(std::size(kGroups));
constexpr int kFields = kFirstGroup + 2 * kNumGroups;

int run(int argc, char** argv, bool freed_memory_kept_mapped) {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  cli::Args args(kProgram,
                 "Train a plan on CPUs (Eigen + MPI) and write the measured step report.\n"
                 "Start with mpirun -np N (N = tp*cp*pp*dp of the plan).",
                 {{"backend", true, "cpu (this one, the default) or cuda"},
                  {"model", true, "model JSON (ours or a Hugging Face config.json)", "FILE", true},
                  {"seq-len", true, "training sequence length (default: the model's)"},
                  {"plan", true, "plan JSON (precision must be fp32)", "FILE", true},
                  {"steps", true, "optimizer steps (default 10)"},
                  {"warmup", true, "steps left out of the step time (default min(2, steps-1))"},
                  {"data", true, "text file, byte-level tokens (e.g. data/kjv-genesis.txt)"},
                  {"random-tokens", false, "uniform random tokens instead of --data (timing)"},
                  {"seed", true, "initialisation and sampling seed (default 1234)"},
                  {"reference-triad", true,
                   "when the STREAM triad reference (3 arrays of 64 MiB) is timed: ends (before "
                   "the first step and after the last; default), every-step, or off",
                   "ends|every-step|off"},
                  {"reference-calls", true,
                   "timed calls of the reference kernel (a 256^3 GEMM, as calibrate times it) "
                   "after every step, outside the step's time, every rank at once; each step's "
                   "median rate goes to the report for compare's reference gate (default 5; "
                   "0: none)"},
                  {"lr", true, "AdamW learning rate (default 1e-3)"},
                  {"lr-warmup", true, "linear learning-rate warm-up over this many steps "
                                      "(default 0: none)"},
                  {"threads", true, "threads per rank for the matrix products (default 1; "
                                    "Eigen over OpenMP, element-wise kernels stay on one)"},
                  {"out", true, "measured step report (written atomically by rank 0)", "FILE", true},
                  {"trace", true, "Chrome trace (Perfetto) of the last measured step of every "
                                  "rank, as simulate --trace lays it out (written by rank 0)"},
                  {"memory-report", true, "every rank's memory account, buffer by buffer, at "
                                          "its peak in use, as JSON (written by rank 0)"},
                  {"dump-reference", true,
                   "PREFIX: write PREFIX.init.tpt (initial weights) and PREFIX.step1.tpt (tokens, "
                   "logits, gradients of step 1), and for an MoE model PREFIX.routing.tpt (every "
                   "step's router probabilities and chosen experts), for the PyTorch reference "
                   "check (1 rank; executor/tensor_file.h)"},
                  {"scale-down", false,
                   "run the plan's layout on a model shrunk to a laptop's size (widths, "
                   "vocabulary 256, sequence, layers, batch; bf16 -> fp32 and what else the CPU "
                   "executor needs); each change is printed"},
                  {"write-scaled", true,
                   "PREFIX, with --scale-down: write PREFIX.model.json and PREFIX.plan.json "
                   "(what ran; for simulate and compare)"},
                  {"cluster", true, "the cluster simulate was given: zb-v then runs the order "
                                    "simulate plays (default: zb-v's send-blind order)", "FILE"},
                  {"gpus", true, "instead of --cluster: a preset cluster of N GPUs, as simulate's"},
                  {"gpu", true, "with --gpus: the GPU preset (default H100-80GB)"},
                  {"gpus-per-node", true, "with --gpus: GPUs per node (default: the preset's)"},
                  {"hardware", true, "the measured profile simulate was given (calibrate's)",
                   "FILE"},
                  {"offload-dir", true, "plans with offload_device nvme: the directory of each "
                                        "rank's offloaded-state file (created new, removed at "
                                        "exit)", "DIR"},
                  {"offload-prefetch", true, "on (default) or off: read the next block's "
                                             "offloaded states while one is updated (nvme)", "on|off"},
                  {"inject-fault", true, "RANK:STEP, tests only: that rank throws at that step"}});
  Result<Setup> setup = parse(args, argc, argv, rank, size);
  if (const int bad = agree(setup.status()); bad >= 0) {
    if (rank == bad) return cli::fail(kProgram, setup.status());
    return setup.ok() ? static_cast<int>(ExitCode::kUsage) : static_cast<int>(setup.status().code());
  }
  if (args.help_requested()) {
    if (rank == 0) std::cout << args.usage();
    return 0;
  }
  Setup& s = *setup;

  set_threads(s.threads, rank);
  // The memory-bound reference (executor/cpu/reference_gemm.h), allocated and touched before
  // anything model-sized, so that its arrays are resident through every peak of the run and the
  // peak memory less their size is the run's own.
  std::optional<ReferenceTriad> triad;
  if (s.reference_calls > 0 && s.triad_when != Setup::TriadWhen::kOff)
    triad.emplace(s.reference_calls);
  auto comm = make_mpi_comm(s.plan, MPI_COMM_WORLD);
  if (!comm.ok()) return cli::fail(kProgram, comm.status());
  TrainOptions options;
  options.seed = s.seed;
  options.adamw.lr = static_cast<float>(s.lr);
  options.lr_warmup_steps = s.lr_warmup;
  options.order = s.order;
  options.offload = s.offload;
  std::vector<NamedTensor> first_grads;  // --dump-reference: step 1's gradients
  if (!s.dump.empty())
    options.before_optimizer = [&first_grads](const Trainer& tr) {
      if (tr.steps_done() != 0) return;
      TensorCollector grads("grad.");
      TRAINPLAN_CHECK(tr.for_each_grad(std::ref(grads)).ok()) << "zero_stage checked in parse";
      first_grads = std::move(grads.tensors());
    };
  auto trainer = make_cpu_trainer(s.model, s.plan, options, **comm);
  if (const int bad = agree(trainer.status()); bad >= 0)
    return rank == bad ? cli::fail(kProgram, trainer.status()) : static_cast<int>(ExitCode::kRuntime);
  Trainer& t = **trainer;
  Comm& c = **comm;

  if (!s.memory_report.empty()) t.track_memory_peak(true);
  std::vector<float> first_logits;
  RoutingCapture routing;  // --dump-reference on an MoE model: every step's
  const bool dump_routing = !s.dump.empty() && s.model.is_moe();
  if (!s.dump.empty()) {
    if (const Status w = write_initial_weights(s, t); !w.ok()) return cli::fail(kProgram, w);
    TRAINPLAN_CHECK(t.capture_logits(&first_logits).ok()) << "the CPU backend captures logits";
  }
  if (dump_routing) {
    TRAINPLAN_CHECK(t.capture_routing(&routing).ok()) << "the CPU backend captures routing";
  }

  long fault_rank = -1, fault_step = -1;
  if (!s.inject.empty()) std::sscanf(s.inject.c_str(), "%ld:%ld", &fault_rank, &fault_step);

  const double tokens_per_step =
      static_cast<double>(s.plan.global_batch_size * s.model.seq_len);
  if (rank == 0)
    std::cout << kProgram << ": " << describe(s.plan) << ", " << s.model.name << ", " << size
              << " ranks (" << c.backend_name() << "), " << s.steps << " steps, "
              << (s.corpus.empty() ? "random tokens" : "corpus of " + std::to_string(s.corpus.size()) + " bytes")
              << std::endl;
  std::vector<double> losses, times, aux_losses;
  double optimizer_s = 0;
  OffloadBytes offloaded;  // over the measured steps
  TraceRecorder recorder;  // the last step's, with --trace
  // The reference kernel (executor/cpu/reference_gemm.h), timed after every step, outside the
  // step's timed region: its operands and the rates are allocated here, before the first step.
  std::optional<ReferenceGemm> reference;
  std::vector<double> reference_rates, triad_rates;
  if (s.reference_calls > 0) {
    reference.emplace(s.reference_calls);
    reference_rates.reserve(static_cast<std::size_t>(s.steps));
    triad_rates.reserve(static_cast<std::size_t>(s.steps));
  }
  const bool triad_every_step = triad && s.triad_when == Setup::TriadWhen::kEveryStep;
  // Every rank at once, as calibrate times it.
  auto time_triad = [&] {
    MPI_Barrier(MPI_COMM_WORLD);
    triad_rates.push_back(triad->bytes_per_s());
  };
  if (triad && !triad_every_step) time_triad();  // before the first step
  for (std::int64_t k = 0; k < s.steps; ++k) {
    if (k == s.warmup) c.reset_counters();
    if (rank == fault_rank && k == fault_step)
      throw std::runtime_error("injected fault at step " + std::to_string(k + 1));
    const auto batch = s.corpus.empty()
        ? random_batch(s.seed, k, s.plan.global_batch_size, s.model.seq_len, s.model.vocab_size)
        : corpus_batch(s.corpus, s.seed, k, s.plan.global_batch_size, s.model.seq_len);
    const bool traced = !s.trace.empty() && k == s.steps - 1;
    auto r = t.step(batch, traced ? &recorder : nullptr);
    if (!r.ok()) {
      // Every rank got the same status (the trainer agrees on non-finite losses).
      if (rank == 0) return cli::fail(kProgram, r.status());
      return static_cast<int>(r.status().code());
    }
    if (reference) {
      // Every rank at once, as calibrate times it (all ranks computing, or one rank alone).
      MPI_Barrier(MPI_COMM_WORLD);
      reference_rates.push_back(reference->flops_per_s());
      if (triad_every_step) time_triad();
    }
    losses.push_back(r->loss);
    times.push_back(r->seconds);
    if (s.model.is_moe()) aux_losses.push_back(r->aux_loss);
    if (!s.dump.empty() && k == 0) {
      TRAINPLAN_CHECK(t.capture_logits(nullptr).ok()) << "the CPU backend captures logits";
      const Status w = write_first_step(s, batch, std::move(first_logits), std::move(first_grads), r->loss);
      if (!w.ok()) return cli::fail(kProgram, w);
    }
    if (k >= s.warmup) {
      optimizer_s += r->optimizer_seconds;
      offloaded.device_to_host += r->offload.device_to_host;
      offloaded.host_to_device += r->offload.host_to_device;
      offloaded.nvme_read += r->offload.nvme_read;
      offloaded.nvme_write += r->offload.nvme_write;
      offloaded.nvme_prefetched += r->offload.nvme_prefetched;
    }
    if (rank == 0)
      std::cout << "step " << std::setw(4) << k + 1 << "/" << s.steps << "  loss "
                << std::fixed << std::setprecision(4) << r->loss
                << (s.model.is_moe() ? "  aux " + std::to_string(r->aux_loss) : std::string())
                << "  time "
                << std::setprecision(4) << r->seconds << " s  "
                << std::setprecision(0) << tokens_per_step / r->seconds << " tokens/s"
                << std::defaultfloat << std::setprecision(6) << std::endl;
  }
  if (dump_routing) {
    TRAINPLAN_CHECK(t.capture_routing(nullptr).ok()) << "the CPU backend captures routing";
    if (const Status w = write_routing(s, s.steps, std::move(routing)); !w.ok())
      return cli::fail(kProgram, w);
  }
  if (triad && !triad_every_step) time_triad();  // after the last step

  // Per-rank figures, per measured step.
  const double measured = static_cast<double>(s.steps - s.warmup);
  double step_sum = 0;
  for (std::size_t k = static_cast<std::size_t>(s.warmup); k < times.size(); ++k) step_sum += times[k];
  double mine[kFields] = {};
  mine[kStage] = static_cast<double>(t.stage());
  mine[kPeakMemory] = peak_memory_bytes() - (triad ? triad->footprint_bytes() : 0.0);
  double comm_s = 0;
  for (int g = 0; g < kNumGroups; ++g) {
    const GroupCounters& k = c.counters(kGroups[g]);
    mine[kFirstGroup + 2 * g] = static_cast<double>(k.bytes_sent) / measured;
    mine[kFirstGroup + 2 * g + 1] = k.time_s / measured;
    comm_s += k.time_s;
  }
  mine[kCompute] = (step_sum - comm_s) / measured;  // one thread: busy unless in a call
  mine[kOptimizer] = optimizer_s / measured;
  mine[kOffloadD2H] = offloaded.device_to_host / measured;
  mine[kOffloadH2D] = offloaded.host_to_device / measured;
  mine[kNvmeRead] = offloaded.nvme_read / measured;
  mine[kNvmeWrite] = offloaded.nvme_write / measured;
  mine[kNvmePrefetched] = offloaded.nvme_prefetched / measured;
  std::vector<double> all(static_cast<std::size_t>(kFields * size));
  MPI_Gather(mine, kFields, MPI_DOUBLE, all.data(), kFields, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  std::vector<double> all_reference, all_triad;  // [rank][sample], on rank 0
  for (auto [mine_rates, all_rates] : {std::pair{&reference_rates, &all_reference},
                                       std::pair{&triad_rates, &all_triad}}) {
    if (mine_rates->empty()) continue;  // the same on every rank
    const int n = static_cast<int>(mine_rates->size());
    all_rates->resize(static_cast<std::size_t>(n * size));
    MPI_Gather(mine_rates->data(), n, MPI_DOUBLE, all_rates->data(), n, MPI_DOUBLE, 0,
               MPI_COMM_WORLD);
  }
  std::vector<std::string> memory_parts;
  if (!s.memory_report.empty())
    memory_parts = gather_text(memory_report_of_rank(t, rank, mine[kPeakMemory]).dump(), rank,
                               size);
  std::vector<std::string> trace_parts;
  if (!s.trace.empty())
    trace_parts = gather_text(chrome_trace_rank_events(rank, t.stage(), recorder.events()), rank,
                              size);

  if (rank == 0) {
    StepReport rep;
    set_measured_steps(rep, s.model, s.plan, times, losses, s.warmup, size, 0.0);
    rep.aux_loss = aux_losses;
    rep.source = "execute cpu (" + c.backend_name() + ", Eigen float32, " +
                 std::to_string(s.threads) + " thread(s) per rank)";
    rep.cluster = Json{{"device", "cpu"},
                       {"ranks", size},
                       {"threads_per_rank", s.threads},
                       {"backend", c.backend_name()},
                       {"peak_memory", triad ? "process VmHWM (resident high-water mark) less "
                                               "the reference triad's arrays"
                                             : "process VmHWM (resident high-water mark)"},
                       {"freed_memory_kept_mapped", freed_memory_kept_mapped},
                       {"control_bytes_per_step",
                        static_cast<double>(c.control_counters().bytes_sent) / measured}};
    // validation/reference_gate.h reads them; every sample's rate, the warm-up's included.
    auto per_rank_rates = [&](const std::vector<double>& all_rates, const char* key) {
      const std::ptrdiff_t n = static_cast<std::ptrdiff_t>(all_rates.size()) / size;
      Json per_rank = Json::array();
      for (int r = 0; r < size; ++r) {
        const auto first = all_rates.begin() + static_cast<std::ptrdiff_t>(r) * n;
        per_rank.push_back({{"rank", r}, {key, std::vector<double>(first, first + n)}});
      }
      return per_rank;
    };
    if (reference) {
      const Json per_rank = per_rank_rates(all_reference, "flops_per_s");
      const GemmOperands& g = reference->operands();
      rep.cluster["reference_gemm"] = Json{
          {"kernel", "linear_forward (executor/cpu/reference_gemm.h)"},
          {"m", g.m()}, {"n", g.n()}, {"k", g.k()},
          {"calls", reference->calls()},
          {"flops", g.flops()},
          {"warmup_steps", s.warmup},
          {"note", "after every step, outside its time, every rank at once: the median of "
                   "`calls` calls after one warm-up call"},
          {"per_rank", per_rank}};
    }
    if (triad) {
      rep.cluster["reference_triad"] = Json{
          {"kernel", "STREAM triad a = b + s c, float32 (executor/cpu/reference_gemm.h)"},
          {"elements", triad->elements()},
          {"calls", triad->calls()},
          {"bytes", triad->bytes()},
          // ends: two samples, none of them a warm-up's.
          {"warmup_steps", triad_every_step ? s.warmup : 0},
          {"when", triad_every_step ? "every-step" : "ends"},
          {"note", triad_every_step
                       ? "after every step and the reference GEMM, outside the step's time, "
                         "every rank at once: the median of `calls` calls after one warm-up "
                         "call; bytes as STREAM counts them (3 x 4 per element)"
                       : "before the first step and after the last, every rank at once: the "
                         "median of `calls` calls after one warm-up call; bytes as STREAM "
                         "counts them (3 x 4 per element)"},
          {"per_rank", per_rank_rates(all_triad, "bytes_per_s")}};
    }
    if (s.plan.offload != Offload::kNone) {
      // Per rank and measured step (executor/offload.h; the cost model's
      // offload_traffic_on_stage).
      Json per_rank = Json::array();
      for (int r = 0; r < size; ++r) {
        const double* f = all.data() + static_cast<std::ptrdiff_t>(r) * kFields;
        const OffloadTraffic want =
            offload_traffic_on_stage(s.model, s.plan, static_cast<std::int64_t>(f[kStage]));
        per_rank.push_back({{"rank", r},
                            {"device_to_host_bytes", f[kOffloadD2H]},
                            {"host_to_device_bytes", f[kOffloadH2D]},
                            {"nvme_read_bytes", f[kNvmeRead]},
                            {"nvme_write_bytes", f[kNvmeWrite]},
                            {"nvme_prefetched_bytes", f[kNvmePrefetched]},
                            {"cost_model",
                             {{"device_to_host_bytes", want.device_to_host_bytes},
                              {"host_to_device_bytes", want.host_to_device_bytes},
                              {"nvme_read_bytes", want.nvme_read_bytes},
                              {"nvme_write_bytes", want.nvme_write_bytes}}}});
      }
      rep.cluster["offload_bytes_per_step"] = per_rank;
      rep.cluster["offload"] =
          "offloaded states in host buffers apart from the executor's own (offload_device cpu: "
          "the PCIe transfers are host copies) or in a file per rank under --offload-dir (nvme: "
          "pread / pwrite); executor/offload.h";
    }
    for (int r = 0; r < size; ++r) {
      const double* f = all.data() + static_cast<std::ptrdiff_t>(r) * kFields;
      RankStep rs;
      rs.rank = r;
      rs.stage = static_cast<std::int64_t>(f[kStage]);
      rs.peak_memory_bytes = f[kPeakMemory];
      rs.compute_s = f[kCompute];
      rs.optimizer_s = f[kOptimizer];
      for (int g = 0; g < kNumGroups; ++g) {
        const double bytes = f[kFirstGroup + 2 * g], time = f[kFirstGroup + 2 * g + 1];
        // CPU: communication is not overlapped, all of it is exposed.
        add_group_comm(rep, rs, kGroups[g], {.bytes_sent = bytes, .time_s = time, .exposed_s = time});
      }
      rep.ranks.push_back(rs);
    }
    const Status w = cli::write_file_atomic(s.out, step_report_to_json(rep).dump(2) + "\n");
    if (!w.ok()) return cli::fail(kProgram, w);
    std::cout << kProgram << ": step time " << rep.step_time_s << " s (median of "
              << times.size() - static_cast<std::size_t>(s.warmup) << "), " << std::setprecision(0) << std::fixed
              << rep.tokens_per_s << " tokens/s; loss " << std::setprecision(4) << losses.front()
              << " -> " << losses.back() << "; wrote " << s.out << std::endl;
    if (reference) {
      std::vector<double> r0(reference_rates.begin() + static_cast<std::ptrdiff_t>(s.warmup),
                             reference_rates.end());
      std::cout << kProgram << ": reference kernel " << reference->operands().m() << "x"
                << reference->operands().n() << "x" << reference->operands().k() << ": rank 0 "
                << std::setprecision(2) << median(r0) / 1e9
                << " GFLOP/s (median of the measured steps)" << std::endl;
    }
    if (triad) {
      std::vector<double> t0(
          triad_rates.begin() + static_cast<std::ptrdiff_t>(triad_every_step ? s.warmup : 0),
          triad_rates.end());
      std::cout << kProgram << ": reference triad " << triad->elements() << " elements: rank 0 "
                << std::setprecision(2) << median(t0) / 1e9
                << (triad_every_step ? " GB/s (median of the measured steps)"
                                     : " GB/s (median of before the first step and after the "
                                       "last)")
                << std::endl;
    }
    if (!s.memory_report.empty()) {
      const Status wm = write_memory_report(s, memory_parts);
      if (!wm.ok()) return cli::fail(kProgram, wm);
      std::cout << kProgram << ": wrote the memory account of " << size << " rank(s) to "
                << s.memory_report << std::endl;
    }
    if (!s.trace.empty()) {
      const Status wt = cli::write_file_atomic(s.trace, chrome_trace_json(trace_parts));
      if (!wt.ok()) return cli::fail(kProgram, wt);
      std::cout << kProgram << ": wrote the trace of step " << s.steps << " to " << s.trace
                << std::endl;
    }
  }
  return 0;
}

}  // namespace

int trainplan::tools::execute_cpu_main(int argc, char** argv) {
  // Before anything is allocated.
  const bool kept_mapped = trainplan::executor::keep_freed_memory_mapped();
  // FUNNELED: with --threads > 1 the process has OpenMP threads, and only this one calls MPI.
  int thread_level = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &thread_level);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (!kept_mapped && rank == 0)
    std::cerr << kProgram << ": note: the C library did not take the keep-freed-memory policy "
              << "(not glibc, or a sanitizer): every micro-batch faults its activations in again, "
              << "and the step times include that" << std::endl;
  int code = 0;
  try {
    code = run(argc, argv, kept_mapped);
  } catch (const std::exception& e) {
    // One rank cannot finish the step: stop every rank now rather than let them wait on it.
    // In one write, so that mpirun's abort notice cannot land inside the line.
    cli::print_error_line(std::string(kProgram) + ": rank " + std::to_string(rank) + " failed: " +
                          e.what() + "; aborting all ranks\n");
    MPI_Abort(MPI_COMM_WORLD, static_cast<int>(ExitCode::kRuntime));
  }
  MPI_Finalize();
  return code;
}
