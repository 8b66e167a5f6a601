// The edge of the program: argument parsing, file reading and atomic writing, and the common
// --model / cluster options. Only programs link this (tools/, and executor/cuda's two
// programs); libraries do no file I/O.
#pragma once

#include <cstdint>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/cluster_spec.h"
#include "core/cost/compute_model.h"
#include "core/cost/cost_model.h"
#include "core/json_util.h"
#include "core/model_spec.h"
#include "core/plan.h"
#include "core/status.h"

namespace CLI {
class App;
}  // namespace CLI

namespace trainplan::cli {

// A strict command-line parser over CLI11 (Debian libcli11-dev): --name value, --name=value,
// and boolean --flag. Unknown options, missing values and repeated options are errors that
// name the option, worded as before the port (docs/errors.md); CLI11 holds the options and
// formats --help, with each option's metavariable (FILE, N, X, ...) and REQUIRED marks.
class Args {
 public:
  struct Option {
    std::string name;   // without the leading dashes
    bool takes_value;
    std::string help;
    std::string metavar = "";  // shown in --help; "" = from the option's name (FILE, N, ...)
    bool required = false;     // marked in --help; the tool checks it, with its own message
  };
  Args(std::string program, std::string summary, std::vector<Option> options);
  ~Args();
  Args(const Args&) = delete;  // CLI11's callbacks point at this object
  Args& operator=(const Args&) = delete;
  Status parse(int argc, char** argv);
  bool has(const std::string& name) const { return values_.count(name) > 0; }
  std::string get(const std::string& name, const std::string& fallback = "") const;
  Result<std::int64_t> get_int(const std::string& name, std::int64_t fallback, std::int64_t min,
                               std::int64_t max) const;
  Result<double> get_double(const std::string& name, double fallback, double min,
                            double max) const;
  // "a,b,c" of integers in [min, max] (fallback: the text when the option is absent).
  Result<std::vector<std::int64_t>> get_int_list(const std::string& name,
                                                 const std::string& fallback, std::int64_t min,
                                                 std::int64_t max) const;
  std::string usage() const;
  // --help or --version was given: the tool prints usage() and exits 0. After --version,
  // usage() is the version line (core/build_info.h), so every tool answers it unchanged.
  bool help_requested() const { return help_; }

 private:
  std::string program_, summary_;
  std::vector<Option> options_;
  std::unique_ptr<CLI::App> app_;
  std::map<std::string, std::string> values_;
  bool help_ = false;
  bool version_ = false;
};

Result<std::string> read_text_file(const std::string& path);
// Writes `content` to PATH so that a reader never sees a half-written file, and a crash leaves
// the old file or the new one: a temporary file in PATH's directory, fsync, rename over PATH,
// fsync of the directory. "-" is standard output. A symlink is written through (the link
// stays, its target is replaced); a device, FIFO, socket or directory is refused, never
// replaced. Errors name the path and carry strerror.
Status write_file_atomic(const std::string& path, const std::string& content);
// Writes to standard output and flushes; an error (a full disk, /dev/full) carries strerror.
Status write_stdout(std::string_view content);
Result<Json> read_json_file(const std::string& path);
// The streaming form of write_file_atomic, with its rules (a symlink written through; a device,
// FIFO, socket or directory refused; "-" is standard output): chunks go to a temporary file
// beside the target as they come, commit() fsyncs and renames it over the target and syncs the
// directory; a writer destroyed uncommitted removes its temporary file, so PATH is either
// untouched or whole.
class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(std::string path);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;
  Status open();
  void write(std::string_view chunk);
  Status commit();

 private:
  std::string path_, target_, tmp_;
  int fd_ = -1;
  int error_ = 0;  // the first write's errno; reported by commit()
  bool committed_ = false;
};

// "a,b,c" -> {"a", "b", "c"} (empty items dropped).
std::vector<std::string> split_list(const std::string& text);
// A model file: our JSON or a Hugging Face config.json.
Result<ModelSpec> load_model_file(const std::string& path);
// --model FILE [--seq-len N]
Result<ModelSpec> load_model(const Args& args);
// --plan FILE
Result<Plan> load_plan(const std::string& path);
// --cluster FILE, or --gpus N [--gpu NAME] [--gpus-per-node G] (default: H100-80GB, 8 per node),
// then --hardware FILE replaces link figures with measured ones.
Result<ClusterSpec> load_cluster(const Args& args);
// --hardware FILE (optional).
Result<std::optional<HardwareProfile>> load_hardware(const Args& args);
// --allocator NAME (kDeviceAllocatorKeys; default pytorch-caching): the allocator whose reserve
// the device-memory estimate adds over the allocated peak (core/cost reserved_bytes).
Result<DeviceAllocator> load_allocator(const Args& args);
// The --allocator option, for Args' option list.
Args::Option allocator_option();

// The options every model/cluster tool shares, for Args' option list.
std::vector<Args::Option> model_cluster_options();

// Progress of a long phase on standard error: "PROGRAM: PHASE 12/40, 3 s elapsed, about 3 s
// left", rewritten in place on a terminal and a line at a time elsewhere, twice a second at
// most. By default (kAuto) only on a terminal and once the phase has run a second; --progress
// (kAlways) from the first update; --quiet (kOff) never. Calls must be serialized
// (parallel_for_index does).
enum class ProgressMode { kOff, kAuto, kAlways };
class Progress {
 public:
  Progress(std::string program, std::string phase, ProgressMode mode);
  void update(std::int64_t done, std::int64_t total);
  // Ends the line (when one was printed).
  void finish();

 private:
  std::string program_, phase_;
  ProgressMode mode_;
  bool tty_, printed_ = false;
  double start_s_, last_s_ = 0;
};
// --quiet: kOff; --progress: kAlways; else kAuto. The tool must list both options
// (progress_options()); given together, --quiet wins.
ProgressMode progress_mode(const Args& args);
std::vector<Args::Option> progress_options();

// Prints "PROGRAM: error: MESSAGE" to stderr and returns the exit code for the status.
int fail(const std::string& program, const Status& status);
// Writes `line` (with its newline) to standard error in one write, after flushing standard
// output, so that lines from other processes (ranks, mpirun) cannot land inside it.
void print_error_line(const std::string& line);

}  // namespace trainplan::cli
