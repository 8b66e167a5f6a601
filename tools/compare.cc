// compare: predicted against measured, side by side, with the error in percent.
//
//   compare --predicted predicted.json --measured measured.json [--json] [--out FILE]
//           [--hardware PROFILE [--reference-tolerance-pct P]]
//   compare --model M --plan P --hardware H [--cluster F] --np N [--steps S] [--warmup W]
//           [--workdir DIR] [--json] [--out FILE]
//
// The second form runs `simulate` and `mpirun -np N execute` (found next to this program),
// keeps their reports (and simulate's Chrome trace) in --workdir, and compares them; without
// --workdir they go to a temporary directory that is removed on exit. execute runs on this
// machine's CPU ranks, so the prediction must be for this machine: the one-go form needs
// --cluster or --hardware (calibrate's --cluster-out / --out), and refuses a prediction for a
// preset GPU (H100-80GB, ...) against a CPU run. Given two files, such a pair gets a warning.
// With --hardware (the profile calibrate wrote; in both forms), the in-run reference gate
// (validation/reference_gate.h): the reference kernel's rate `execute` timed between its steps
// against the rate calibrate timed, within --reference-tolerance-pct (default
// kDefaultReferenceTolerancePct), printed and written as the JSON's "reference_gate". Without
// an explicit tolerance, a profile or report that lacks the figures only gets a note; with
// one, that is an error. Since 2026-12-03 the gate also compares the memory-bound reference (the
// STREAM triad, measurements.reference_triad against cluster.reference_triad): steady only when
// both kernels are, the reason naming the one that moved; files without the triad are gated on
// the GEMM alone, with a note and the line saying so.
// It is a gate, not a correction: the comparison is the same either way.
// Exit codes: 0 compared; 2 usage; 3 a report is malformed (the message names file and field);
// 5 simulate or execute failed; 6 a file could not be read or written.
// Tested by tests/calibration/tools_test.cc (CompareTool).
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <optional>

#include "validation/compare.h"
#include "validation/reference_gate.h"
#include "tools/cli.h"

namespace {

using namespace trainplan;
using namespace trainplan::validation;

constexpr const char* kProgram = "compare";

Result<StepReport> load_report(const std::string& path) {
  auto json = cli::read_json_file(path);
  if (!json.ok()) return json.status();
  return step_report_from_json(*json, path);
}

// Why the two reports describe different machines ("" when they may be the same): a
// prediction for a preset GPU (cluster.gpu.name H100-80GB, ...) against a run of the CPU
// executor (cluster.device "cpu"). Comparing them measures the gap between machines, not the
// model's error (an H100 prediction against a CPU run reads about -94%).
std::string machine_mismatch(const StepReport& predicted, const StepReport& measured) {
  const Json& pc = predicted.cluster;
  const Json& mc = measured.cluster;
  if (!mc.is_object() || !mc.contains("device") || mc["device"] != "cpu") return "";
  if (!pc.is_object() || !pc.contains("gpu") || !pc["gpu"].is_object() ||
      !pc["gpu"].contains("name") || !pc["gpu"]["name"].is_string())
    return "";
  const std::string gpu = pc["gpu"]["name"].get<std::string>();
  if (!preset_gpus_per_node(gpu).ok()) return "";
  return "the prediction is for " + gpu + " GPUs but the measurement ran on CPU ranks "
         "(execute cpu): the difference would be between machines, not the model's error; "
         "predict for this machine with simulate --cluster (calibrate --cluster-out) and "
         "--hardware (calibrate --out)";
}

// The reference gates for --hardware (the GEMM's and, where both files have it, the triad's),
// or nullopt (with a note on stderr) when the profile or the report lacks the GEMM's figures
// and no tolerance was asked for. A missing triad (files from before 2026-12-03) is never an
// error: the gate is the GEMM's alone and its line says so.
Result<std::optional<ReferenceGates>> reference_gate(const cli::Args& args,
                                                     const StepReport& measured,
                                                     const std::string& measured_path) {
  const bool asked = args.has("reference-tolerance-pct");
  if (!args.has("hardware")) {
    if (asked)
      return Status::Error("--reference-tolerance-pct needs --hardware PROFILE (the profile "
                           "calibrate wrote, whose measurements.reference_gemm it compares with)",
                           ExitCode::kUsage);
    return std::optional<ReferenceGates>();
  }
  auto tolerance = args.get_double("reference-tolerance-pct", kDefaultReferenceTolerancePct, 0, 100);
  if (!tolerance.ok()) return tolerance.status();
  if (!(*tolerance > 0 && *tolerance < 100))
    return Status::Error("--reference-tolerance-pct " + args.get("reference-tolerance-pct") +
                             ": expected a percentage above 0 and below 100",
                         ExitCode::kUsage);
  const std::string profile_path = args.get("hardware");
  auto profile = cli::read_json_file(profile_path);
  if (!profile.ok()) return profile.status();
  std::optional<ReferenceGate> gates[2];
  std::string missing[2];
  const ReferenceKernel kernels[2] = {ReferenceKernel::kGemm, ReferenceKernel::kTriad};
  for (int i = 0; i < 2; ++i) {
    const std::string field = reference_kernel_field(kernels[i]);
    auto calibrated = calibrated_reference_from_profile(*profile, profile_path, kernels[i]);
    if (!calibrated.ok()) return calibrated.status();
    auto in_run = in_run_reference_from_report(measured, measured_path, kernels[i]);
    if (!in_run.ok()) return in_run.status();
    if (!*calibrated)
      missing[i] = "the profile '" + profile_path + "' has no measurements." + field +
                   (i == 0 ? " (calibrate before 2026-12-02, or another backend's)"
                           : " (calibrate before 2026-12-03, or another backend's)");
    else if (!*in_run)
      missing[i] = "the measured report '" + measured_path + "' has no cluster." + field +
                   (i == 0 ? " (execute --reference-calls 0, or another backend's)"
                           : " (execute before 2026-12-03, --reference-triad off, "
                             "--reference-calls 0, or another backend's)");
    if (!missing[i].empty()) continue;
    auto gate = gate_reference(**calibrated, **in_run, *tolerance);
    if (!gate.ok()) return gate.status();
    gates[i] = *gate;
  }
  if (!missing[0].empty()) {
    if (asked) return Status::Error("no reference gate: " + missing[0], ExitCode::kInvalidInput);
    cli::print_error_line(std::string(kProgram) + ": note: no reference gate: " + missing[0] + "\n");
    return std::optional<ReferenceGates>();
  }
  if (!missing[1].empty())
    cli::print_error_line(std::string(kProgram) + ": note: the reference gate is the GEMM's "
                          "alone, not gated on memory bandwidth: " + missing[1] + "\n");
  return std::optional<ReferenceGates>(combine_reference_gates(*gates[0], gates[1], missing[1]));
}

// Removes the one-go form's temporary directory however compare ends.
struct TempDirGuard {
  std::string path;
  ~TempDirGuard() {
    if (path.empty()) return;
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::filesystem::path own_directory(const char* argv0) {
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) exe = std::filesystem::absolute(argv0, ec);
  return exe.parent_path();
}

Status run_command(const std::string& what, const std::string& command) {
  std::cerr << kProgram << ": running " << command << "\n";
  const int rc = std::system(command.c_str());
  if (rc != 0)
    return Status::Error(what + " failed (exit status " +
                             std::to_string(WIFEXITED(rc) ? WEXITSTATUS(rc) : rc) + "): " + command,
                         ExitCode::kRuntime);
  return Status::Ok();
}

// Runs simulate and execute for --model/--plan; returns the two report paths.
// `temp_dir` receives the temporary directory made when --workdir is not given.
Result<std::pair<std::string, std::string>> run_both(const cli::Args& args, const char* argv0,
                                                     std::string& temp_dir) {
  for (const char* need : {"model", "plan", "np"})
    if (!args.has(need))
      return Status::Error(std::string("missing --") + need +
                               " (or give --predicted and --measured)",
                           ExitCode::kUsage);
  if (!args.has("cluster") && !args.has("hardware"))
    return Status::Error(
        "in one go, execute runs on this machine's CPU ranks, so the prediction must be for "
        "this machine: give --cluster FILE and/or --hardware FILE (calibrate --cluster-out / "
        "--out); without them simulate would predict H100-80GB GPUs",
        ExitCode::kUsage);
  auto np = args.get_int("np", 1, 1, 4096);
  if (!np.ok()) return np.status();
  auto steps = args.get_int("steps", 5, 1, 1000000);
  if (!steps.ok()) return steps.status();
  auto warmup = args.get_int("warmup", 1, 0, 1000000);
  if (!warmup.ok()) return warmup.status();
  const std::filesystem::path simulate = own_directory(argv0) / "simulate";
  const std::filesystem::path execute = own_directory(argv0) / "execute";
  for (const auto& tool : {simulate, execute})
    if (!std::filesystem::exists(tool))
      return Status::Error("cannot find " + tool.string() +
                               " (compare runs the simulate and execute next to it)",
                           ExitCode::kIo);
  std::string dir = args.get("workdir");
  if (dir.empty()) {
    std::error_code ec;
    std::string templ =
        (std::filesystem::temp_directory_path(ec) / "trainplan-compare-XXXXXX").string();
    if (ec || ::mkdtemp(templ.data()) == nullptr)
      return Status::Error(std::string("cannot create a temporary directory: ") +
                               (ec ? ec.message() : std::strerror(errno)),
                           ExitCode::kIo);
    dir = templ;
    temp_dir = dir;
  } else {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) return Status::Error("cannot create --workdir " + dir + ": " + ec.message(), ExitCode::kIo);
  }
  const std::string predicted = dir + "/predicted.json", measured = dir + "/measured.json";
  std::string sim = shell_quote(simulate.string()) + " --model " + shell_quote(args.get("model")) +
                    " --plan " + shell_quote(args.get("plan")) + " --json --out " +
                    shell_quote(predicted) + " --trace " + shell_quote(dir + "/predicted_trace.json");
  if (args.has("hardware")) sim += " --hardware " + shell_quote(args.get("hardware"));
  if (args.has("cluster")) sim += " --cluster " + shell_quote(args.get("cluster"));
  else sim += " --gpus " + std::to_string(*np);
  sim += " > /dev/null";
  TRAINPLAN_RETURN_IF_ERROR(run_command("simulate", sim));
  std::string exec = "mpirun --oversubscribe";
  if (::geteuid() == 0) exec += " --allow-run-as-root";
  exec += " -np " + std::to_string(*np) + " " + shell_quote(execute.string()) + " --model " +
          shell_quote(args.get("model")) + " --plan " + shell_quote(args.get("plan")) +
          " --steps " + std::to_string(*steps) + " --warmup " + std::to_string(*warmup) +
          " --random-tokens --out " + shell_quote(measured);
  TRAINPLAN_RETURN_IF_ERROR(run_command("execute", exec));
  return std::make_pair(predicted, measured);
}

int run(int argc, char** argv) {
  cli::Args args(kProgram,
                 "Put a predicted and a measured step report side by side: step time, phases, "
                 "communication per group, peak memory, bytes; error in percent.",
                 {{"predicted", true, "StepReport JSON from simulate (kind \"predicted\")"},
                  {"measured", true, "StepReport JSON from execute (kind \"measured\")"},
                  {"json", false, "print JSON (schema trainplan.compare/1) instead of a table"},
                  {"out", true, "also write the JSON comparison to FILE"},
                  {"model", true, "in one go: model JSON"},
                  {"plan", true, "in one go: plan JSON"},
                  {"hardware", true, "calibrate's profile: in one go, for simulate; in both "
                                     "forms, the in-run reference gate's calibration rate"},
                  {"reference-tolerance-pct", true,
                   "with --hardware: how far (percent) the run's reference-kernel rate may be "
                   "from the calibration's for the run to count as steady (default 5)"},
                  {"cluster", true, "in one go: cluster JSON for simulate (default --gpus NP)"},
                  {"np", true, "in one go: ranks for mpirun -np"},
                  {"steps", true, "in one go: steps to execute (default 5)"},
                  {"warmup", true, "in one go: warm-up steps excluded (default 1)"},
                  {"workdir", true, "in one go: where to keep the reports (default: a temp dir)"}});
  if (Status st = args.parse(argc, argv); !st.ok()) return cli::fail(kProgram, st);
  if (args.help_requested()) {
    std::cout << args.usage();
    return 0;
  }
  std::string ppath = args.get("predicted"), mpath = args.get("measured");
  TempDirGuard temp_dir;
  const bool file_mode = args.has("predicted") || args.has("measured");
  if (file_mode) {
    if (!args.has("predicted") || !args.has("measured"))
      return cli::fail(kProgram, Status::Error("give both --predicted FILE and --measured FILE",
                                               ExitCode::kUsage));
    for (const char* other : {"model", "plan", "np", "steps", "warmup", "workdir"})
      if (args.has(other))
        return cli::fail(kProgram, Status::Error(std::string("--") + other +
                                                     " is for the one-go form; it cannot be "
                                                     "combined with --predicted/--measured",
                                                 ExitCode::kUsage));
  } else {
    auto paths = run_both(args, argv[0], temp_dir.path);
    if (!paths.ok()) return cli::fail(kProgram, paths.status());
    ppath = paths->first;
    mpath = paths->second;
  }
  auto predicted = load_report(ppath);
  if (!predicted.ok()) return cli::fail(kProgram, predicted.status());
  auto measured = load_report(mpath);
  if (!measured.ok()) return cli::fail(kProgram, measured.status());
  if (const std::string why = machine_mismatch(*predicted, *measured); !why.empty()) {
    if (!file_mode) return cli::fail(kProgram, Status::Error(why, ExitCode::kInvalidInput));
    cli::print_error_line(std::string(kProgram) + ": warning: " + why + "\n");
  }
  auto cmp = compare_reports(*predicted, ppath, *measured, mpath);
  if (!cmp.ok()) return cli::fail(kProgram, cmp.status());
  auto gate = reference_gate(args, *measured, mpath);
  if (!gate.ok()) return cli::fail(kProgram, gate.status());
  Json j = comparison_to_json(*cmp);
  if (*gate) j["reference_gate"] = reference_gates_to_json(**gate);
  if (args.has("json")) std::cout << j.dump(2) << "\n";
  else std::cout << format_comparison_table(*cmp) << (*gate ? format_reference_gates(**gate) + "\n" : "");
  if (args.has("out"))
    if (Status st = cli::write_file_atomic(args.get("out"), j.dump(2) + "\n"); !st.ok())
      return cli::fail(kProgram, st);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    return cli::fail(kProgram, Status::Error(std::string("internal error: ") + e.what(),
                                             ExitCode::kInternal));
  }
}
