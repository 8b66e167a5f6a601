// Command-line edge; see cli.h. Tested by tests/tools/cli_test.cc and the tools' end-to-end tests.
#include "tools/cli.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

namespace trainplan::cli {

Args::Args(std::string program, std::string summary, std::vector<Option> options)
    : program_(std::move(program)), summary_(std::move(summary)), options_(std::move(options)) {}

Status Args::parse(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      help_ = true;
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
    if (values_.count(name))
      return Status::Error("option '--" + name + "' given twice", ExitCode::kUsage);
    if (opt->takes_value && !inline_value) {
      if (i + 1 >= argc)
        return Status::Error("option '--" + name + "' needs a value", ExitCode::kUsage);
      value = argv[++i];
    } else if (!opt->takes_value && inline_value) {
      return Status::Error("option '--" + name + "' takes no value", ExitCode::kUsage);
    }
    values_[name] = opt->takes_value ? value : "1";
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
  std::ostringstream os;
  os << "usage: " << program_ << " [options]\n" << summary_ << "\n\noptions:\n";
  for (const Option& o : options_) {
    std::string flag = "--" + o.name + (o.takes_value ? " VALUE" : "");
    os << "  " << flag << std::string(flag.size() < 26 ? 26 - flag.size() : 1, ' ') << o.help
       << "\n";
  }
  os << "  -h, --help                 this text\n";
  return os.str();
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
                               std::to_string(max_bytes >> 20) + " MiB",
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

Status write_file_atomic(const std::string& path, const std::string& content) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out)
      return Status::Error("cannot write '" + path + "': " + std::strerror(errno), ExitCode::kIo);
    out << content;
    out.flush();
    if (!out) {
      std::remove(tmp.c_str());
      return Status::Error("error writing '" + path + "'", ExitCode::kIo);
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(tmp.c_str());
    return Status::Error("cannot write '" + path + "': " + why, ExitCode::kIo);
  }
  return Status::Ok();
}

AtomicFileWriter::AtomicFileWriter(std::string path)
    : path_(std::move(path)), tmp_(path_ + ".tmp." + std::to_string(::getpid())) {}

AtomicFileWriter::~AtomicFileWriter() {
  if (committed_) return;
  out_.close();
  std::remove(tmp_.c_str());
}

Status AtomicFileWriter::open() {
  out_.open(tmp_, std::ios::binary | std::ios::trunc);
  if (!out_)
    return Status::Error("cannot write '" + path_ + "': " + std::strerror(errno), ExitCode::kIo);
  return Status::Ok();
}

void AtomicFileWriter::write(std::string_view chunk) {
  out_.write(chunk.data(), static_cast<std::streamsize>(chunk.size()));
}

Status AtomicFileWriter::commit() {
  out_.flush();
  const bool good = static_cast<bool>(out_);
  out_.close();
  if (!good) return Status::Error("error writing '" + path_ + "'", ExitCode::kIo);
  if (std::rename(tmp_.c_str(), path_.c_str()) != 0)
    return Status::Error("cannot write '" + path_ + "': " + std::strerror(errno), ExitCode::kIo);
  committed_ = true;
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
  auto model = load_model_file(args.get("model"));
  if (!model.ok()) return model;
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

std::vector<Args::Option> model_cluster_options() {
  return {
      {"model", true, "model JSON (ours or a Hugging Face config.json)"},
      {"seq-len", true, "training sequence length (default: the model's)"},
      {"cluster", true, "cluster JSON (instead of --gpus/--gpu/--gpus-per-node)"},
      {"gpus", true, "number of GPUs (default cluster: H100-80GB, 8 per node)"},
      {"gpu", true,
       "GPU preset: A100-40GB, A100-80GB, H100-80GB, H800-80GB, H100-96GB, H200-141GB, "
       "B200-192GB, V100-16GB, V100-32GB"},
      {"gpus-per-node", true,
       "GPUs per node (default: the preset's node, 16 for V100-32GB, else 8)"},
      {"hardware", true, "measured hardware profile from `calibrate`"},
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
