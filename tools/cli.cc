// Command-line edge; see cli.h. Tested by tests/tools/cli_test.cc,
// tests/tools/ecosystem_cli_test.sh and the tools' end-to-end tests.
#include "tools/cli.h"

#include <CLI/CLI.hpp>

#include "core/build_info.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

namespace trainplan::cli {

namespace {

// The metavariable --help shows for an option that does not name its own: what the option's
// value is, by its name (every tool's options, tools/*.cc).
std::string metavar_for(const std::string& name) {
  static const std::map<std::string, std::string> kByName = {
      {"model", "FILE"},        {"plan", "FILE"},          {"cluster", "FILE"},
      {"hardware", "FILE"},     {"out", "FILE"},           {"trace", "FILE"},
      {"emit-plan", "FILE"},    {"published", "FILE"},     {"predicted", "FILE"},
      {"measured", "FILE"},     {"report", "FILE"},        {"cluster-out", "FILE"},
      {"data", "FILE"},         {"baseline-from", "FILE"}, {"params-out", "FILE"},
      {"models", "FILE,..."},   {"workdir", "DIR"},        {"gpu", "NAME"},
      {"backend", "NAME"},      {"family", "TEXT"},        {"rank-order", "AXES"},
      {"precision", "NAME"},    {"optimizer", "NAME"},     {"attention", "NAME"},
      {"grad-precision", "NAME"}, {"dp-algorithm", "NAME"}, {"inject-fault", "SPEC"},
      {"allocator", "NAME"},
      {"micro-batches", "N,..."}, {"tp", "N,..."},         {"memory-headroom", "X"},
      {"tokens", "X"},          {"lr", "X"},               {"peak-tflops", "X"},
  };
  const auto it = kByName.find(name);
  return it == kByName.end() ? "N" : it->second;
}

}  // namespace

Args::Args(std::string program, std::string summary, std::vector<Option> options)
    : program_(std::move(program)),
      summary_(std::move(summary)),
      options_(std::move(options)),
      app_(std::make_unique<CLI::App>(summary_, program_)) {
  // -h/--help and --version are answered before CLI11 parses, so that a tool's required
  // options are not needed to ask for help; they are listed here for the help text.
  app_->set_help_flag();
  for (const Option& o : options_) {
    const std::string flag = "--" + o.name;
    CLI::Option* opt = nullptr;
    if (o.takes_value) {
      opt = app_->add_option_function<std::string>(
          flag, [this, name = o.name](const std::string& v) { values_[name] = v; }, o.help);
      opt->type_name(o.metavar.empty() ? metavar_for(o.name) : o.metavar);
    } else {
      opt = app_->add_flag_callback(flag, [this, name = o.name] { values_[name] = "1"; }, o.help);
    }
    if (o.required) opt->description(o.help + " REQUIRED");
  }
  app_->add_flag_callback("-h,--help", [] {}, "this text");
  app_->add_flag_callback("--version", [] {},
                          "print the version, git commit and compiler, and exit");
}

Args::~Args() = default;

// The arguments are checked here first, with the messages the tools have always given
// (docs/errors.md); then CLI11 parses them, each as --name=value so that a value that looks
// like an option ("-", "-1") is never taken for one.
Status Args::parse(int argc, char** argv) {
  std::vector<std::string> normalized{program_};
  std::set<std::string> seen;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      help_ = true;
      continue;
    }
    if (a == "--version") {
      help_ = version_ = true;
      continue;
    }
    if (a.rfind("--", 0) != 0)
      return Status::Error("unexpected argument '" + a + "' (options start with --)",
                           ExitCode::kUsage);
    std::string name = a.substr(2), value;
    bool inline_value = false;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      inline_value = true;
    }
    const Option* opt = nullptr;
    for (const Option& o : options_)
      if (o.name == name) opt = &o;
    if (opt == nullptr)
      return Status::Error("unknown option '--" + name + "' (see --help)", ExitCode::kUsage);
    if (!seen.insert(name).second)
      return Status::Error("option '--" + name + "' given twice", ExitCode::kUsage);
    if (opt->takes_value && !inline_value) {
      if (i + 1 >= argc)
        return Status::Error("option '--" + name + "' needs a value", ExitCode::kUsage);
      value = argv[++i];
    } else if (!opt->takes_value && inline_value) {
      return Status::Error("option '--" + name + "' takes no value", ExitCode::kUsage);
    }
    normalized.push_back(opt->takes_value ? "--" + name + "=" + value : "--" + name);
  }
  if (help_) return Status::Ok();
  std::vector<char*> args;
  for (std::string& s : normalized) args.push_back(s.data());
  try {
    app_->parse(static_cast<int>(args.size()), args.data());
  } catch (const CLI::ParseError& e) {
    return Status::Error(std::string(e.what()) + " (see --help)", ExitCode::kUsage);
  }
  return Status::Ok();
}

std::string Args::get(const std::string& name, const std::string& fallback) const {
  auto it = values_.find(name);
  return it == values_.end() ? fallback : it->second;
}

Result<std::int64_t> Args::get_int(const std::string& name, std::int64_t fallback,
                                   std::int64_t min, std::int64_t max) const {
  if (!has(name)) return fallback;
  const std::string s = get(name);
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || errno == ERANGE)
    return Status::Error("--" + name + ": '" + s + "' is not an integer", ExitCode::kUsage);
  if (v < min || v > max)
    return Status::Error("--" + name + ": value " + s + " is out of range [" +
                             std::to_string(min) + ", " + std::to_string(max) + "]",
                         ExitCode::kUsage);
  return static_cast<std::int64_t>(v);
}

Result<double> Args::get_double(const std::string& name, double fallback, double min,
                                double max) const {
  if (!has(name)) return fallback;
  const std::string s = get(name);
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (s.empty() || *end != '\0' || errno == ERANGE || !(v >= min && v <= max)) {
    std::ostringstream os;
    os << "--" << name << ": '" << s << "' is not a number in [" << min << ", " << max << "]";
    return Status::Error(os.str(), ExitCode::kUsage);
  }
  return v;
}

Result<std::vector<std::int64_t>> Args::get_int_list(const std::string& name,
                                                     const std::string& fallback,
                                                     std::int64_t min, std::int64_t max) const {
  std::vector<std::int64_t> out;
  std::stringstream ss(has(name) ? get(name) : fallback);
  std::string item;
  while (std::getline(ss, item, ',')) {
    errno = 0;
    char* end = nullptr;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || errno == ERANGE || v < min || v > max)
      return Status::Error("--" + name + ": '" + item + "' is not an integer in [" +
                               std::to_string(min) + ", " + std::to_string(max) + "]",
                           ExitCode::kUsage);
    out.push_back(v);
  }
  if (out.empty()) return Status::Error("--" + name + ": empty list", ExitCode::kUsage);
  return out;
}

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

std::string Args::usage() const {
  if (version_) return version_line(program_);
  return app_->help();
}

namespace {
// Reads at most max_bytes; a longer input (or an endless one: /dev/zero, a FIFO) is an error.
Result<std::string> read_text_limited(const std::string& path, std::size_t max_bytes) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    return Status::Error("cannot read '" + path + "': it is a directory", ExitCode::kIo);
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return Status::Error("cannot read '" + path + "': " + std::strerror(errno), ExitCode::kIo);
  std::string out;
  char buf[1 << 16];
  while (in) {
    in.read(buf, sizeof buf);
    out.append(buf, static_cast<std::size_t>(in.gcount()));
    if (out.size() > max_bytes)
      return Status::Error("cannot read '" + path + "': larger than " +
                               std::to_string(max_bytes / 1'000'000) + " MB",
                           ExitCode::kIo);
  }
  if (in.bad()) return Status::Error("error reading '" + path + "'", ExitCode::kIo);
  return out;
}
// Model, cluster, plan, profile and report files are kilobytes to a few megabytes.
constexpr std::size_t kMaxJsonFileBytes = std::size_t{256} << 20;
}  // namespace

Result<std::string> read_text_file(const std::string& path) {
  return read_text_limited(path, static_cast<std::size_t>(-1));
}

namespace {

Status io_error(const std::string& what, const std::string& path, int err) {
  return Status::Error(what + " '" + path + "': " + std::strerror(err), ExitCode::kIo);
}

// What a path is, in words, for the refusal of anything but a regular file.
std::string file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

// Writes all of `content` to `fd`, retrying short writes and EINTR; 0 or the errno.
int write_all(int fd, std::string_view content) {
  while (!content.empty()) {
    const ssize_t n = ::write(fd, content.data(), content.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    content.remove_prefix(static_cast<std::size_t>(n));
  }
  return 0;
}

// The file a write to `path` lands in: a symlink is followed (the link stays, its target is
// replaced), so that a link into a results folder keeps working. Then only a regular file or
// nothing may be there: a device, FIFO, socket or directory is refused, never replaced.
Result<std::string> write_target(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path target = path;
  // Follow the chain by hand: a dangling link's target does not exist yet, which
  // fs::canonical refuses. 40 hops is Linux's own limit (path_resolution(7)).
  for (int hops = 0; fs::is_symlink(target, ec); ++hops) {
    if (hops == 40) return io_error("cannot resolve the symlink", path, ELOOP);
    const fs::path next = fs::read_symlink(target, ec);
    if (ec) return io_error("cannot resolve the symlink", path, ec.value());
    target = next.is_absolute() ? next : target.parent_path() / next;
  }
  struct stat st {};
  if (::stat(target.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
    return Status::Error("refusing to write '" + path + "': " +
                             (target == path ? std::string()
                                             : "it links to '" + target.string() + "', ") +
                             "it is " + file_kind(st.st_mode) +
                             ", not a regular file (it would be replaced); give a file path, "
                             "or - for standard output",
                         ExitCode::kIo);
  return target.string();
}

// Creates the temporary file next to `target` (same file system, so the rename is atomic),
// with the mode the file has or a new file would get (0666 less the umask).
Result<int> open_temp_beside(const std::string& target, std::string& tmp) {
  const std::filesystem::path p(target);
  const std::string dir = p.has_parent_path() ? p.parent_path().string() : ".";
  tmp = dir + "/." + p.filename().string() + ".tmp.XXXXXX";
  const int fd = ::mkstemp(tmp.data());
  if (fd < 0)
    return Status::Error(std::string(std::strerror(errno)) + " (creating the temporary file " +
                             tmp + ")",
                         ExitCode::kIo);
  struct stat st {};
  mode_t mode = 0;
  if (::stat(target.c_str(), &st) == 0) {
    mode = st.st_mode & 07777;
  } else {
    const mode_t mask = ::umask(0);
    ::umask(mask);
    mode = 0666 & ~mask;
  }
  if (::fchmod(fd, mode) != 0) {
    const int err = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    return Status::Error(std::string(std::strerror(err)) + " (setting the mode of " + tmp + ")",
                         ExitCode::kIo);
  }
  return fd;
}

// fsync of the directory holding `target`, so that the rename itself survives a crash
// (fsync(2): syncing a file does not sync the directory entry naming it).
int sync_directory_of(const std::string& target) {
  const std::filesystem::path p(target);
  const std::string dir = p.has_parent_path() ? p.parent_path().string() : ".";
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return errno;
  const int err = ::fsync(fd) == 0 ? 0 : errno;
  ::close(fd);
  return err;
}

}  // namespace

Status write_stdout(std::string_view content) {
  std::cout.flush();
  if (std::fwrite(content.data(), 1, content.size(), stdout) != content.size() ||
      std::fflush(stdout) != 0)
    return Status::Error(std::string("cannot write standard output: ") + std::strerror(errno),
                         ExitCode::kIo);
  return Status::Ok();
}

Status write_file_atomic(const std::string& path, const std::string& content) {
  if (path == "-") return write_stdout(content);
  auto target = write_target(path);
  if (!target.ok()) return target.status();
  std::string tmp;
  auto fd = open_temp_beside(*target, tmp);
  if (!fd.ok())
    return Status::Error("cannot write '" + path + "': " + fd.status().message(), ExitCode::kIo);
  int err = write_all(*fd, content);
  if (err == 0 && ::fsync(*fd) != 0) err = errno;
  if (::close(*fd) != 0 && err == 0) err = errno;
  if (err == 0 && ::rename(tmp.c_str(), target->c_str()) != 0) err = errno;
  if (err != 0) {
    ::unlink(tmp.c_str());
    return io_error("cannot write", path, err);
  }
  if (int dir_err = sync_directory_of(*target); dir_err != 0)
    return io_error("wrote, but cannot sync the directory of", path, dir_err);
  return Status::Ok();
}

namespace {
// At exit, standard output and error must have taken everything written to them: a tool whose
// output went nowhere (a full disk, /dev/full) must not exit 0. Registered once by any program
// linking this file, so no tool has to remember it.
void check_standard_streams_at_exit() {
  std::cout.flush();
  errno = 0;
  const bool out_failed = !std::cout || std::fflush(stdout) != 0 || std::ferror(stdout) != 0;
  int out_errno = errno;
  // The failed write may have been an earlier flush, its errno since overwritten: a write of
  // zero bytes asks the descriptor again without writing anything (/dev/full answers ENOSPC).
  if (out_failed && out_errno == 0 && ::write(STDOUT_FILENO, "", 0) < 0) out_errno = errno;
  std::cerr.flush();
  const bool err_failed = !std::cerr || std::fflush(stderr) != 0 || std::ferror(stderr) != 0;
  if (out_failed) {
    const std::string line = std::string(program_invocation_short_name) +
                             ": error: cannot write standard output: " +
                             (out_errno != 0 ? std::strerror(out_errno) : "write error") + "\n";
    std::fwrite(line.data(), 1, line.size(), stderr);
    std::fflush(stderr);
  }
  if (out_failed || err_failed) ::_exit(static_cast<int>(ExitCode::kIo));
}
const bool g_streams_checked_at_exit = std::atexit(check_standard_streams_at_exit) == 0;
}  // namespace

AtomicFileWriter::AtomicFileWriter(std::string path) : path_(std::move(path)) {}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_ && !tmp_.empty()) ::unlink(tmp_.c_str());
}

Status AtomicFileWriter::open() {
  if (path_ == "-") return Status::Ok();  // chunks go straight to standard output
  auto target = write_target(path_);
  if (!target.ok()) return target.status();
  target_ = *target;
  auto fd = open_temp_beside(target_, tmp_);
  if (!fd.ok())
    return Status::Error("cannot write '" + path_ + "': " + fd.status().message(), ExitCode::kIo);
  fd_ = *fd;
  return Status::Ok();
}

void AtomicFileWriter::write(std::string_view chunk) {
  if (error_ != 0) return;
  if (path_ == "-") {
    if (std::fwrite(chunk.data(), 1, chunk.size(), stdout) != chunk.size()) error_ = errno ? errno : EIO;
    return;
  }
  error_ = write_all(fd_, chunk);
}

Status AtomicFileWriter::commit() {
  if (path_ == "-") {
    if (error_ == 0 && std::fflush(stdout) != 0) error_ = errno;
    return error_ == 0 ? Status::Ok() : io_error("cannot write", "standard output", error_);
  }
  int err = error_;
  if (err == 0 && ::fsync(fd_) != 0) err = errno;
  if (::close(fd_) != 0 && err == 0) err = errno;
  fd_ = -1;
  if (err == 0 && ::rename(tmp_.c_str(), target_.c_str()) != 0) err = errno;
  if (err != 0) return io_error("cannot write", path_, err);  // the destructor removes tmp_
  committed_ = true;
  if (int dir_err = sync_directory_of(target_); dir_err != 0)
    return io_error("wrote, but cannot sync the directory of", path_, dir_err);
  return Status::Ok();
}

Result<Json> read_json_file(const std::string& path) {
  auto text = read_text_limited(path, kMaxJsonFileBytes);
  if (!text.ok()) return text.status();
  return parse_json_text(*text, path);
}

Result<ModelSpec> load_model_file(const std::string& path) {
  auto json = read_json_file(path);
  if (!json.ok()) return json.status();
  return model_from_json(*json, path);
}

Result<ModelSpec> load_model(const Args& args) {
  if (!args.has("model"))
    return Status::Error("missing --model FILE (e.g. models/gpt3.json)", ExitCode::kUsage);
  auto json = read_json_file(args.get("model"));
  if (!json.ok()) return json.status();
  // --allow-unknown-model-type: a Hugging Face model_type outside the allow-list is read with
  // the Llama layout, and each assumption is printed, so that the user can check them.
  std::vector<std::string> assumptions;
  HfReadOptions hf;
  hf.allow_unknown_model_type = args.has("allow-unknown-model-type");
  hf.assumptions = &assumptions;
  auto model = model_from_json_with(*json, args.get("model"), hf);
  if (!model.ok()) return model;
  const bool unknown = std::any_of(assumptions.begin(), assumptions.end(), [](const auto& a) {
    return a.find("not on the allow-list") != std::string::npos;
  });
  if (unknown)
    for (const std::string& a : assumptions)
      std::cerr << "note: " << args.get("model") << ": assumed: " << a << "\n";
  if (args.has("seq-len")) {
    auto s = args.get_int("seq-len", 0, 1, ModelLimits::kMaxSeq);
    if (!s.ok()) return s.status();
    return with_seq_len(*model, *s);
  }
  // A Hugging Face config gives no training length: its max_position_embeddings stands in,
  // which for long-context models is far beyond what pre-training runs. Said, not changed.
  if (model->seq_len > 32768 && model->seq_len == model->max_position_embeddings)
    std::cerr << "note: training sequence length " << model->seq_len
              << " is the model's max_position_embeddings; pre-training usually runs shorter "
                 "sequences (pass --seq-len, e.g. 4096 or 8192)\n";
  return model;
}

Result<Plan> load_plan(const std::string& path) {
  auto json = read_json_file(path);
  if (!json.ok()) return json.status();
  return plan_from_json(*json, path);
}

Result<ClusterSpec> load_cluster(const Args& args) {
  Result<ClusterSpec> cluster = Status::Error("no cluster");
  if (args.has("cluster")) {
    for (const char* other : {"gpus", "gpu", "gpus-per-node"})
      if (args.has(other))
        return Status::Error(std::string("--cluster and --") + other + " cannot be combined",
                             ExitCode::kUsage);
    auto json = read_json_file(args.get("cluster"));
    if (!json.ok()) return json.status();
    cluster = cluster_from_json(*json, args.get("cluster"));
  } else {
    if (!args.has("gpus"))
      return Status::Error("missing --gpus N (or --cluster FILE)", ExitCode::kUsage);
    auto gpus = args.get_int("gpus", 8, 1, ClusterLimits::kMaxGpus);
    if (!gpus.ok()) return gpus.status();
    const std::string gpu = args.get("gpu", "H100-80GB");
    auto node = preset_gpus_per_node(gpu);
    if (!node.ok()) return node.status();
    auto per_node = args.get_int("gpus-per-node", *node, 1, ClusterLimits::kMaxGpusPerNode);
    if (!per_node.ok()) return per_node.status();
    cluster = make_cluster(gpu, *gpus, *per_node);
  }
  if (!cluster.ok()) return cluster;
  if (args.has("power-limit-w")) {
    auto watts = args.get_double("power-limit-w", 0, 1, 1e5);
    if (!watts.ok()) return watts.status();
    auto gpu = at_power_limit(cluster->gpu, *watts);
    if (!gpu.ok())
      return Status::Error("--power-limit-w: " + gpu.status().message(), ExitCode::kUsage);
    cluster->gpu = *gpu;
  }
  auto hw = load_hardware(args);
  if (!hw.ok()) return hw.status();
  if (hw->has_value()) apply_profile_links(**hw, *cluster);
  return cluster;
}

Result<std::optional<HardwareProfile>> load_hardware(const Args& args) {
  if (!args.has("hardware")) return std::optional<HardwareProfile>{};
  auto json = read_json_file(args.get("hardware"));
  if (!json.ok()) return json.status();
  auto p = hardware_profile_from_json(*json, args.get("hardware"));
  if (!p.ok()) return p.status();
  return std::optional<HardwareProfile>(*p);
}

Result<DeviceAllocator> load_allocator(const Args& args) {
  if (!args.has("allocator")) return DeviceAllocator::kPyTorchCaching;
  std::string allowed;
  for (int i = 0; i < static_cast<int>(std::size(kDeviceAllocatorKeys)); ++i) {
    if (args.get("allocator") == kDeviceAllocatorKeys[i]) return static_cast<DeviceAllocator>(i);
    allowed += (i > 0 ? ", " : "") + std::string(kDeviceAllocatorKeys[i]);
  }
  return Status::Error("--allocator: unknown value '" + args.get("allocator") +
                           "' (expected one of: " + allowed + ")",
                       ExitCode::kUsage);
}

Args::Option allocator_option() {
  return {"allocator", true,
          "the allocator whose reserve the device-memory estimate adds: pytorch-caching (default; "
          "GMLake's 15% fragmentation), pytorch-expandable-segments or paddle-auto-growth (no "
          "published figure: no reserve added)"};
}

std::vector<Args::Option> model_cluster_options() {
  return {
      {"model", true, "model JSON (ours or a Hugging Face config.json)", "FILE", true},
      {"seq-len", true, "training sequence length (default: the model's)"},
      {"cluster", true, "cluster JSON (instead of --gpus/--gpu/--gpus-per-node)"},
      {"gpus", true, "number of GPUs (default cluster: H100-80GB, 8 per node)"},
      {"gpu", true,
       "GPU preset: A100-40GB, A100-80GB, H100-80GB, H800-80GB, H100-96GB, H200-141GB, "
       "B200-192GB, GB200-186GB, GB300-288GB, B300-270GB, V100-16GB, V100-32GB"},
      {"gpus-per-node", true,
       "GPUs per node (default: the preset's node: 72 for GB200-186GB and GB300-288GB, an NVL72 "
       "rack's NVLink domain; 16 for V100-32GB; else 8)"},
      {"power-limit-w", true,
       "board power limit of every GPU (nvidia-smi -pl); scales the clock-bound peaks by the "
       "die's published peaks at that power (docs/inputs.md)"},
      {"hardware", true, "measured hardware profile from `calibrate`"},
      {"allow-unknown-model-type", false,
       "read a Hugging Face model_type outside the allow-list (docs/inputs.md) with the Llama "
       "layout, printing every assumption"},
  };
}

namespace {
double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

Progress::Progress(std::string program, std::string phase, ProgressMode mode)
    : program_(std::move(program)), phase_(std::move(phase)), mode_(mode),
      tty_(::isatty(2) != 0), start_s_(now_s()) {
  if (mode_ == ProgressMode::kAuto && !tty_) mode_ = ProgressMode::kOff;
}

void Progress::update(std::int64_t done, std::int64_t total) {
  if (mode_ == ProgressMode::kOff || total <= 0) return;
  const double t = now_s(), elapsed = t - start_s_;
  if (mode_ == ProgressMode::kAuto && elapsed < 1.0) return;
  if (printed_ && t - last_s_ < 0.5 && done < total) return;
  last_s_ = t;
  char buf[200];
  const double left = done > 0 ? elapsed * static_cast<double>(total - done) / static_cast<double>(done) : 0;
  std::snprintf(buf, sizeof buf, "%s: %s %lld/%lld, %.0f s elapsed, about %.0f s left", program_.c_str(),
                phase_.c_str(), static_cast<long long>(done), static_cast<long long>(total), elapsed,
                left);
  std::fprintf(stderr, tty_ ? "\r%s\033[K" : "%s\n", buf);
  std::fflush(stderr);
  printed_ = true;
}

void Progress::finish() {
  if (printed_ && tty_) std::fputc('\n', stderr);
  printed_ = false;
}

ProgressMode progress_mode(const Args& args) {
  if (args.has("quiet")) return ProgressMode::kOff;
  return args.has("progress") ? ProgressMode::kAlways : ProgressMode::kAuto;
}

std::vector<Args::Option> progress_options() {
  return {{"progress", false, "show progress of long phases on stderr (default: when a terminal)"},
          {"quiet", false, "no progress on stderr"}};
}

void print_error_line(const std::string& line) {
  std::cout.flush();
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

int fail(const std::string& program, const Status& status) {
  print_error_line(program + ": error: " + status.message() + "\n");
  return static_cast<int>(status.code());
}

}  // namespace trainplan::cli
