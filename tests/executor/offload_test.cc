// The offload tiers' error paths and file (executor/offload.h), on one rank: a missing or
// unusable --offload-dir, an existing file left alone, a reservation the file system refuses
// (the process's file-size limit standing in for a full device), the file removed afterwards;
// and a one-rank training run with each tier against the plan without offload. The MPI runs
// (dp 2, ZeRO 1-3) are tests/executor/offload_check.cc's.
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <string>

#include "core/cost/cost_model.h"
#include "executor/cpu/cpu_stage.h"
#include "executor/data.h"
#include "executor/offload.h"
#include "tests/executor/tiny_model.h"

namespace trainplan::executor {
namespace {

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

// A fresh directory under /tmp, removed (with what the test left) at the end.
class TempDir {
 public:
  TempDir() {
    char t[] = "/tmp/trainplan-offload-test.XXXXXX";
    const char* d = ::mkdtemp(t);
    EXPECT_NE(d, nullptr) << std::strerror(errno);
    path_ = d != nullptr ? d : "";
  }
  ~TempDir() {
    if (path_.empty()) return;
    ::chmod(path_.c_str(), 0700);
    for (int r = 0; r < 4; ++r) ::unlink(offload_file_path(path_, r).c_str());
    ::unlink((path_ + "/plain").c_str());
    ::rmdir(path_.c_str());
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

Plan tiny_plan(Offload offload, OffloadDevice device, int zero) {
  Plan p;
  p.micro_batch_size = 2;
  p.global_batch_size = 4;
  p.precision = Precision::kFp32;
  p.attention = AttentionImpl::kUnfused;
  p.zero_stage = zero;
  p.offload = offload;
  p.offload_device = device;
  return p;
}

TEST(OffloadFile, MissingDirectoryNamesTheFlagAndThePath) {
  auto f = OffloadFile::create("/tmp/no-such-trainplan-dir/x", 0, 1024);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("--offload-dir"), std::string::npos) << f.status().message();
  EXPECT_NE(f.status().message().find("/tmp/no-such-trainplan-dir/x"), std::string::npos);
  EXPECT_NE(f.status().code(), ExitCode::kOk);
}

TEST(OffloadFile, NotADirectoryAndEmpty) {
  TempDir d;
  const std::string plain = d.path() + "/plain";
  std::ofstream(plain) << "x";
  Status s = check_offload_dir(plain, "--offload-dir");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("is not a directory"), std::string::npos) << s.message();
  s = check_offload_dir("", "--offload-dir");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("--offload-dir is empty"), std::string::npos) << s.message();
}

TEST(OffloadFile, NotWritable) {
  if (::geteuid() == 0) GTEST_SKIP() << "root writes into a 0500 directory";
  TempDir d;
  ASSERT_EQ(::chmod(d.path().c_str(), 0500), 0);
  const Status s = check_offload_dir(d.path(), "--offload-dir");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("not writable"), std::string::npos) << s.message();
}

TEST(OffloadFile, NeverOverwritesAnExistingFile) {
  TempDir d;
  const std::string path = offload_file_path(d.path(), 1);
  std::ofstream(path) << "the user's";
  auto f = OffloadFile::create(d.path(), 1, 4096);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("already exists"), std::string::npos) << f.status().message();
  EXPECT_NE(f.status().message().find(path), std::string::npos);
  std::string content;
  std::getline(std::ifstream(path), content);
  EXPECT_EQ(content, "the user's");  // untouched, and not removed
}

TEST(OffloadFile, ReadsWhatItWroteAndIsRemoved) {
  TempDir d;
  std::string path;
  {
    auto f = OffloadFile::create(d.path(), 2, 4096);
    ASSERT_TRUE(f.ok()) << f.status().message();
    path = (*f)->path();
    EXPECT_TRUE(exists(path));
    struct stat st {};
    ASSERT_EQ(::stat(path.c_str(), &st), 0);
    EXPECT_EQ(st.st_size, 4096);  // reserved at once
    const float v[3] = {1.5f, -2.0f, 3.25f};
    ASSERT_TRUE((*f)->write(100, v, sizeof v).ok());
    float back[3] = {};
    ASSERT_TRUE((*f)->read(100, back, sizeof back).ok());
    EXPECT_EQ(std::memcmp(v, back, sizeof v), 0);
    // Past the end: an error naming the file, not a short read taken as data.
    const Status past = (*f)->read(4090, back, sizeof back * 4);
    EXPECT_FALSE(past.ok());
    EXPECT_NE(past.message().find(path), std::string::npos) << past.message();
  }
  EXPECT_FALSE(exists(path));
}

// A full device: posix_fallocate fails (here on the file-size limit, EFBIG, which a test can
// set without mounting a small file system); the error says so and the file is gone.
TEST(OffloadFile, ReservationRefusedIsAnErrorAndLeavesNoFile) {
  TempDir d;
  struct rlimit old {};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  auto* previous = ::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = old;
  small.rlim_cur = 1 << 16;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  auto f = OffloadFile::create(d.path(), 3, std::int64_t{1} << 24);
  ::setrlimit(RLIMIT_FSIZE, &old);
  ::signal(SIGXFSZ, previous);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("cannot reserve 16777216 bytes"), std::string::npos)
      << f.status().message();
  EXPECT_FALSE(exists(offload_file_path(d.path(), 3)));
}

TEST(OffloadTrainer, NvmeWithoutADirectoryIsAnError) {
  const ModelSpec m = testing::tiny_gpt("tiny");
  auto t = make_cpu_trainer(m, tiny_plan(Offload::kOptimizer, OffloadDevice::kNvme, 0),
                            TrainOptions{}, *make_local_comm());
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("--offload-dir"), std::string::npos) << t.status().message();
}

// One rank, every tier: losses and weights bitwise the plan's without offload, the bytes per
// step the cost model's.
TEST(OffloadTrainer, EveryTierMatchesThePlanWithoutOffloadBitwise) {
  const ModelSpec m = testing::tiny_gpt("tiny");
  struct Case {
    Offload offload;
    OffloadDevice device;
    int zero;
    bool prefetch;
  };
  for (const Case& c : {Case{Offload::kOptimizer, OffloadDevice::kCpu, 0, true},
                        Case{Offload::kOptimizer, OffloadDevice::kNvme, 0, true},
                        Case{Offload::kOptimizer, OffloadDevice::kNvme, 0, false},
                        Case{Offload::kOptimizer, OffloadDevice::kNvme, 2, true},
                        Case{Offload::kOptimizerParams, OffloadDevice::kCpu, 3, true},
                        Case{Offload::kOptimizerParams, OffloadDevice::kNvme, 3, true},
                        Case{Offload::kOptimizerParams, OffloadDevice::kNvme, 3, false}}) {
    TempDir d;
    const Plan p = tiny_plan(c.offload, c.device, c.zero);
    Plan base = p;
    base.offload = Offload::kNone;
    base.offload_device = OffloadDevice::kCpu;
    TrainOptions o;
    o.offload.dir = d.path();
    o.offload.prefetch = c.prefetch;
    auto comm_a = make_local_comm();
    auto comm_b = make_local_comm();
    auto a = make_cpu_trainer(m, p, o, *comm_a);
    auto b = make_cpu_trainer(m, base, TrainOptions{}, *comm_b);
    ASSERT_TRUE(a.ok()) << a.status().message();
    ASSERT_TRUE(b.ok()) << b.status().message();
    const std::string what = describe(p) + (c.prefetch ? "" : " (no prefetch)");
    const OffloadTraffic want = offload_traffic_on_stage(m, p, 0);
    for (std::int64_t k = 0; k < 3; ++k) {
      const auto batch = random_batch(7, k, p.global_batch_size, m.seq_len, m.vocab_size);
      auto ra = (*a)->step(batch);
      auto rb = (*b)->step(batch);
      ASSERT_TRUE(ra.ok()) << what << ": " << ra.status().message();
      ASSERT_TRUE(rb.ok()) << rb.status().message();
      EXPECT_EQ(std::memcmp(&ra->loss, &rb->loss, sizeof(double)), 0)
          << what << " step " << k + 1 << ": " << ra->loss << " vs " << rb->loss;
      EXPECT_EQ(ra->offload.device_to_host, want.device_to_host_bytes) << what;
      EXPECT_EQ(ra->offload.host_to_device, want.host_to_device_bytes) << what;
      EXPECT_EQ(ra->offload.nvme_read, want.nvme_read_bytes) << what;
      EXPECT_EQ(ra->offload.nvme_write, want.nvme_write_bytes) << what;
      EXPECT_GT(ra->offload.device_to_host, 0) << what;
      // Read ahead: nothing without the prefetch; with it, on nvme, the optimizer states (the
      // moments and the fp32 parameters) of every block but the first, and from the second
      // step (along the first step's gathers) the shard of every gather but the step's first.
      if (!c.prefetch || c.device != OffloadDevice::kNvme) {
        EXPECT_EQ(ra->offload.nvme_prefetched, 0) << what;
        continue;
      }
      double moments = 0, first_moments = -1, shards = 0, first_shard = 0;
      for (const BlockLayout& l : (*a)->backend_stage().layouts()) {
        const double block = static_cast<double>(l.size) * 4.0;
        if (first_moments < 0) first_moments = 3 * block;
        moments += 3 * block;
      }
      if (c.offload == Offload::kOptimizerParams && k > 0) {
        shards = want.nvme_param_read_bytes;
        first_shard = first_moments / 3;  // the embedding's, gathered first
      }
      EXPECT_EQ(ra->offload.nvme_prefetched, moments - first_moments + shards - first_shard)
          << what << " step " << k + 1;
    }
    std::vector<float> wa, wb;
    (*a)->for_each_param([&](const TensorSlice&, std::int64_t, std::int64_t, float v) { wa.push_back(v); });
    (*b)->for_each_param([&](const TensorSlice&, std::int64_t, std::int64_t, float v) { wb.push_back(v); });
    ASSERT_EQ(wa.size(), wb.size()) << what;
    EXPECT_EQ(std::memcmp(wa.data(), wb.data(), wa.size() * sizeof(float)), 0) << what;
    const MemoryAccount acc = (*a)->memory_account();
    EXPECT_EQ(acc.bytes_of(MemoryUse::kOptimizer), 0) << what;
    EXPECT_GT(acc.off_device_bytes(), 0) << what;
    EXPECT_EQ(acc.bytes_of(MemoryUse::kOffloadNvme) > 0, c.device == OffloadDevice::kNvme) << what;
    const Json j = memory_account_to_json(acc);
    EXPECT_EQ(j["off_device_bytes"]["nvme"].get<double>(), acc.bytes_of(MemoryUse::kOffloadNvme));
    EXPECT_EQ(exists(offload_file_path(d.path(), 0)), c.device == OffloadDevice::kNvme) << what;
    a->reset();
    EXPECT_FALSE(exists(offload_file_path(d.path(), 0))) << what << ": file left behind";
  }
}

}  // namespace
}  // namespace trainplan::executor
