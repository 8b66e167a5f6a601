// The offload tiers of the CPU executor (executor/offload.h) against the same plan without
// offload, under mpirun:
//   mpirun -np N offload_check dp=2 zero=3 offload=optimizer+params device=nvme prefetch=1
//       pp=1 mbs=2 gbs=8 steps=3 recompute=none
// and the other layouts: tp=2 sp=1 cp=2 ep=2 shard=2 (hybrid sharding) schedule=1f1b | zb-h1 |
// zb-v | dualpipe | interleaved | gpipe vs=2 untied=1 layers=N (the model's otherwise)
// model=tiny | tiny-moe
// (tests/executor/models/tiny-moe.json, 4 experts top-2, layer 0 dense).
// Every rank trains the plan with offload and the same plan without it (offload none), both
// with the MPI backend, in the same process, on the same random batches, then checks:
//  1. the loss of every step is bitwise the plan's without offload, and so is every parameter
//     element this rank holds after the last step (AdamW runs the same calls on the same values;
//     only where they live differs);
//  2. the bytes moved between the tiers in every step equal the cost model's
//     offload_traffic_on_stage for this rank's stage exactly (device to host, host to device,
//     NVMe read, NVMe write; the models' blocks need no padding over the shard groups, checked),
//     the second step's and after with the parameter shards' prefetch (optimizer+params on
//     nvme) among them;
//  3. the memory account (executor/memory_account.h, what execute --memory-report writes) holds
//     no AdamW moments on the device and counts the offloaded states off it (nvme: the file's
//     size, host: the rest), and its host and NVMe bytes equal the cost model's
//     (memory_on_stage: host_optimizer_bytes + host_param_bytes, nvme_bytes) exactly: the
//     moments, the fp32 parameters the host updates, the gradient shards, the read and staging
//     buffers;
//  4. nvme: the rank's file exists under the directory while the trainer lives, and is gone
//     after.
// Exit 0 when every rank passes; each rank prints one line.
#include <mpi.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "core/cost/cost_model.h"
#include "core/model_spec.h"
#include "executor/cpu/comm_mpi.h"
#include "executor/cpu/cpu_stage.h"
#include "executor/data.h"
#include "executor/offload.h"
#include "tests/executor/check_args.h"
#include "tests/executor/tiny_model.h"

using namespace trainplan;
using namespace trainplan::executor;

namespace {

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<float> params_of(const Trainer& t) {
  std::vector<float> out;
  t.for_each_param([&](const TensorSlice&, std::int64_t, std::int64_t, float v) { out.push_back(v); });
  return out;
}

int check(std::map<std::string, std::string> kv, int rank) {
  ModelSpec model = testing::tiny_gpt("tiny");
  if (kv["model"] == "tiny-moe") {
    const std::string path = std::string(TRAINPLAN_SOURCE_DIR) + "/tests/executor/models/tiny-moe.json";
    auto loaded = model_from_json(Json::parse(read_file(path)), path);
    if (!loaded.ok()) {
      std::cout << "rank " << rank << ": FAIL model: " << loaded.status().message() << std::endl;
      return 1;
    }
    model = *loaded;
  } else if (kv["model"] != "tiny") {
    std::cout << "rank " << rank << ": FAIL model '" << kv["model"] << "' (tiny or tiny-moe)"
              << std::endl;
    return 1;
  }
  if (kv["untied"] == "1") model.tie_word_embeddings = false;
  if (kv["layers"] != "0") model.num_layers = std::stoll(kv["layers"]);
  Plan plan;
  testing::set_layout_from_args(kv, plan);
  plan.recompute = kv["recompute"] == "full" ? Recompute::kFull : Recompute::kNone;
  plan.offload = kv["offload"] == "optimizer+params" ? Offload::kOptimizerParams
                                                     : Offload::kOptimizer;
  plan.offload_device = kv["device"] == "nvme" ? OffloadDevice::kNvme : OffloadDevice::kCpu;
  Plan base = plan;
  base.offload = Offload::kNone;
  base.offload_device = OffloadDevice::kCpu;
  const std::int64_t steps = std::stoll(kv["steps"]);
  std::ostringstream fail;

  char dir_template[] = "/tmp/trainplan-offload-check.XXXXXX";
  const char* dir = ::mkdtemp(dir_template);
  if (dir == nullptr) {
    std::cout << "rank " << rank << ": FAIL mkdtemp: " << std::strerror(errno) << std::endl;
    return 1;
  }
  auto comm_a = make_mpi_comm(plan, MPI_COMM_WORLD);
  auto comm_b = make_mpi_comm(base, MPI_COMM_WORLD);
  if (!comm_a.ok() || !comm_b.ok()) {
    std::cout << "rank " << rank << ": FAIL comm" << std::endl;
    return 1;
  }
  TrainOptions options;
  options.offload.dir = dir;
  options.offload.prefetch = kv["prefetch"] == "1";
  const std::string file = offload_file_path(dir, (*comm_a)->world_rank());
  {
    auto with = make_cpu_trainer(model, plan, options, **comm_a);
    auto without = make_cpu_trainer(model, base, TrainOptions{}, **comm_b);
    if (!with.ok() || !without.ok()) {
      std::cout << "rank " << rank << ": FAIL make: "
                << (with.ok() ? without.status().message() : with.status().message()) << std::endl;
      return 1;
    }
    Trainer& a = **with;
    Trainer& b = **without;
    const bool nvme = plan.offload_device == OffloadDevice::kNvme;
    if (exists(file) != nvme) fail << " file " << file << (nvme ? " missing" : " made without nvme");
    // No padding: the cost model's shard is the stage's parameters over the shard group (an MoE
    // layer's experts over the expert data-parallel ranks), the executor's the padded blocks'.
    for (const BlockLayout& l : a.backend_stage().layouts()) {
      const std::int64_t dense = l.expert_offset >= 0 ? l.expert_offset : l.size;
      if (dense % plan.zero_shard_ranks() != 0) fail << " block of " << l.size << " padded";
      if (l.expert_offset >= 0 && l.expert_size % expert_dp_cp(plan) != 0)
        fail << " experts of " << l.expert_size << " padded";
    }
    const OffloadTraffic want = offload_traffic_on_stage(model, plan, a.stage());
    double first_prefetched = 0;
    for (std::int64_t k = 0; k < steps; ++k) {
      const auto batch = random_batch(1234, k, plan.global_batch_size, model.seq_len,
                                      model.vocab_size);
      auto ra = a.step(batch);
      auto rb = b.step(batch);
      if (!ra.ok() || !rb.ok()) {
        std::cout << "rank " << rank << ": FAIL step " << k + 1 << ": "
                  << (ra.ok() ? rb.status().message() : ra.status().message()) << std::endl;
        return 1;
      }
      if (std::memcmp(&ra->loss, &rb->loss, sizeof(double)) != 0)
        fail << " step " << k + 1 << " loss " << ra->loss << " != " << rb->loss;
      const OffloadBytes& got = ra->offload;
      auto same = [&](const char* what, double g, double w) {
        if (g != w) fail << " step " << k + 1 << " " << what << " " << g << " bytes, cost model " << w;
      };
      same("device_to_host", got.device_to_host, want.device_to_host_bytes);
      same("host_to_device", got.host_to_device, want.host_to_device_bytes);
      same("nvme_read", got.nvme_read, want.nvme_read_bytes);
      same("nvme_write", got.nvme_write, want.nvme_write_bytes);
      // The prefetch reads ahead (the moments from the first step; with optimizer+params the
      // shards from the second, along the first step's gathers), or nothing without it.
      if (!options.offload.prefetch || !nvme) {
        if (got.nvme_prefetched != 0) fail << " step " << k + 1 << " prefetched without prefetch";
      } else if (got.nvme_prefetched > got.nvme_read) {
        fail << " step " << k + 1 << " prefetched " << got.nvme_prefetched << " of "
             << got.nvme_read << " bytes read";
      } else if (plan.offload == Offload::kOptimizerParams && k > 0 &&
                 got.nvme_prefetched <= first_prefetched) {
        fail << " step " << k + 1 << " read no shard ahead (" << got.nvme_prefetched
             << " bytes prefetched, " << first_prefetched << " in step 1)";
      }
      if (k == 0) first_prefetched = got.nvme_prefetched;
      if (k == 0 && rank == 0)
        std::cout << "rank 0: per step d2h " << got.device_to_host << " h2d " << got.host_to_device
                  << " nvme read " << got.nvme_read << " write " << got.nvme_write << std::endl;
      if (k == steps - 1 && rank == 0 && nvme)
        std::cout << "rank 0: step " << k + 1 << " read ahead " << got.nvme_prefetched << " of "
                  << got.nvme_read << " nvme bytes" << std::endl;
    }
    const std::vector<float> pa = params_of(a), pb = params_of(b);
    if (pa.size() != pb.size() ||
        std::memcmp(pa.data(), pb.data(), pa.size() * sizeof(float)) != 0) {
      std::size_t diff = 0;
      for (std::size_t i = 0; i < std::min(pa.size(), pb.size()); ++i) diff += pa[i] != pb[i];
      fail << " weights differ (" << pa.size() << " vs " << pb.size() << " elements, " << diff
           << " different)";
    }
    const MemoryAccount m = a.memory_account();
    if (m.bytes_of(MemoryUse::kOptimizer) != 0)
      fail << " " << m.bytes_of(MemoryUse::kOptimizer) << " bytes of moments on the device";
    if (m.bytes_of(MemoryUse::kOffloadHost) <= 0) fail << " nothing counted in host memory";
    if (nvme) {
      struct stat st {};
      ::stat(file.c_str(), &st);
      if (m.bytes_of(MemoryUse::kOffloadNvme) != static_cast<double>(st.st_size))
        fail << " nvme account " << m.bytes_of(MemoryUse::kOffloadNvme) << " != file size "
             << st.st_size;
    }
    if (m.total_bytes() + m.off_device_bytes() <= m.total_bytes())
      fail << " off-device bytes not apart";
    const MemoryBreakdown mem = memory_on_stage(model, plan, a.stage());
    const double host = mem.host_optimizer_bytes + mem.host_param_bytes + mem.host_activation_bytes;
    if (m.bytes_of(MemoryUse::kOffloadHost) != host)
      fail << " host memory " << m.bytes_of(MemoryUse::kOffloadHost) << " bytes, cost model "
           << host;
    if (m.bytes_of(MemoryUse::kOffloadNvme) != mem.nvme_bytes)
      fail << " nvme " << m.bytes_of(MemoryUse::kOffloadNvme) << " bytes, cost model "
           << mem.nvme_bytes;
    if (rank == 0)
      std::cout << "rank 0: host " << m.bytes_of(MemoryUse::kOffloadHost) << " bytes, nvme "
                << m.bytes_of(MemoryUse::kOffloadNvme) << " bytes (cost model " << host << ", "
                << mem.nvme_bytes << ")" << std::endl;
    if (Status io = a.backend_stage().offload_status(); !io.ok())
      fail << " offload I/O: " << io.message();
  }
  if (exists(file)) fail << " " << file << " left behind";
  ::rmdir(dir);
  const std::string f = fail.str();
  std::cout << "rank " << rank << ": " << (f.empty() ? "ok" : "FAIL" + f) << std::endl;
  return f.empty() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::map<std::string, std::string> kv = {{"dp", "1"},      {"pp", "1"},     {"zero", "0"},
                                           {"mbs", "2"},     {"gbs", "8"},    {"steps", "3"},
                                           {"offload", "optimizer"}, {"device", "cpu"},
                                           {"prefetch", "1"}, {"recompute", "none"},
                                           {"tp", "1"},      {"cp", "1"},     {"ep", "1"},
                                           {"fold", "0"},    {"etp", "0"},
                                           {"sp", "0"},      {"shard", "0"},  {"schedule", "1f1b"},
                                           {"vs", "1"},      {"untied", "0"}, {"model", "tiny"},
                                           {"layers", "0"}};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto eq = a.find('=');
    if (eq == std::string::npos || kv.count(a.substr(0, eq)) == 0) {
      if (rank == 0) std::cerr << "offload_check: unknown argument '" << a << "'\n";
      MPI_Finalize();
      return 2;
    }
    kv[a.substr(0, eq)] = a.substr(eq + 1);
  }
  int bad = check(kv, rank);
  int any = 0;
  MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return any;
}
