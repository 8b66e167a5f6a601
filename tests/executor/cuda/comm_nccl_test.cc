// The NCCL backend's start-up and a single-rank communicator. The launcher parsing and the TCP
// rendezvous need no GPU and always run; the communicator tests skip without one. Several
// ranks (DP 2, TP 2, PP 2, ZeRO) run from bench/gpu/run_all.sh, which starts processes.
// Run: build-cuda/tests/executor/cuda/executor_cuda_comm_test
#include <gtest/gtest.h>

#include <cstdlib>
#include <thread>

#include "executor/cuda/bootstrap.h"
#include "executor/cuda/comm_nccl.h"
#include "gpu_test_util.h"

namespace trainplan::executor::cuda {
namespace {

using testing::ScopedEnv;

void clear_launchers(ScopedEnv& env) {
  for (const char* v : {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                        "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "SLURM_PROCID", "SLURM_NTASKS",
                        "SLURM_LOCALID", "RANK", "WORLD_SIZE", "LOCAL_RANK"})
    env.set(v, nullptr);
}

TEST(CudaBootstrap, ReadsTorchrunVariables) {
  ScopedEnv env;
  clear_launchers(env);
  env.set("RANK", "3");
  env.set("WORLD_SIZE", "4");
  env.set("LOCAL_RANK", "1");
  auto info = launch_info_from_env();
  ASSERT_TRUE(info.ok()) << info.status().message();
  EXPECT_EQ(info->rank, 3);
  EXPECT_EQ(info->size, 4);
  EXPECT_EQ(info->local_rank, 1);
  EXPECT_EQ(info->launcher, "torchrun");
}

TEST(CudaBootstrap, PrefersMpirunAndRejectsBadValues) {
  ScopedEnv env;
  clear_launchers(env);
  env.set("OMPI_COMM_WORLD_RANK", "0");
  env.set("OMPI_COMM_WORLD_SIZE", "2");
  env.set("RANK", "1");
  env.set("WORLD_SIZE", "2");
  auto info = launch_info_from_env();
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->launcher, "mpirun");
  EXPECT_EQ(info->rank, 0);
  env.set("OMPI_COMM_WORLD_RANK", "two");
  auto bad = launch_info_from_env();
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("OMPI_COMM_WORLD_RANK"), std::string::npos);
}

TEST(CudaBootstrap, SingleProcessWithoutLauncher) {
  ScopedEnv env;
  clear_launchers(env);
  auto info = launch_info_from_env();
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->size, 1);
  EXPECT_EQ(info->launcher, "single");
}

TEST(CudaBootstrap, TcpRendezvousBroadcastsRankZerosBytes) {
  ScopedEnv env;
  env.set("MASTER_ADDR", "127.0.0.1");
  env.set("MASTER_PORT", "29731");
  constexpr int kRanks = 3;
  std::array<std::array<char, 128>, kRanks> ids{};
  for (std::size_t i = 0; i < 128; ++i) ids[0][i] = static_cast<char>(i * 7 + 1);
  std::array<Status, kRanks> results;
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r)
    threads.emplace_back([&, r] {
      LaunchInfo info;
      info.rank = r;
      info.size = kRanks;
      info.launcher = "torchrun";
      results[r] = broadcast_bytes(info, ids[r].data(), 128, 20.0);
    });
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r].message();
    EXPECT_EQ(ids[r], ids[0]) << "rank " << r;
  }
}

TEST(CudaBootstrap, RendezvousTimesOutWithAClearMessage) {
  ScopedEnv env;
  env.set("MASTER_ADDR", "127.0.0.1");
  env.set("MASTER_PORT", "29732");
  LaunchInfo info;
  info.rank = 0;
  info.size = 2;
  info.launcher = "torchrun";
  char id[8] = {};
  const Status s = broadcast_bytes(info, id, sizeof(id), 0.5);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("0 of 1 other ranks"), std::string::npos) << s.message();
}

TEST(CudaBootstrap, SharedGpuEnvironmentFollowsTheNcclVersion) {
  ScopedEnv env;
  env.set("TRAINPLAN_CUDA_DEVICE", "0");
  env.set("NCCL_MULTI_RANK_GPU_ENABLE", nullptr);
  env.set("NCCL_HOSTID", nullptr);
  env.set("NCCL_SOCKET_IFNAME", nullptr);
  LaunchInfo info;
  info.rank = 1;
  EXPECT_NE(prepare_shared_gpu_env(info, 22809).find("NCCL_HOSTID=trainplan-rank-1"),
            std::string::npos);
  EXPECT_STREQ(std::getenv("NCCL_SOCKET_IFNAME"), "lo");
  env.set("NCCL_HOSTID", nullptr);
  EXPECT_NE(prepare_shared_gpu_env(info, 23000).find("NCCL_MULTI_RANK_GPU_ENABLE=1"),
            std::string::npos);
}

TEST(NcclComm, SingleRankCollectivesAndCounters) {
  TRAINPLAN_REQUIRE_GPU();
  ScopedEnv env;
  clear_launchers(env);
  Plan plan;
  plan.precision = Precision::kBf16;
  LaunchInfo info;
  auto comm = NcclComm::make(plan, info, NcclOptions{});
  ASSERT_TRUE(comm.ok()) << comm.status().message();
  NcclComm& c = **comm;
  EXPECT_EQ(c.world_size(), 1);
  EXPECT_EQ(c.group_size(CommGroup::kTp), 1);
  // Host pointers through the comm.h hooks.
  std::vector<float> in{1, 2, 3, 4}, out(4);
  c.all_gather(CommGroup::kDp, in.data(), out.data(), 4);
  EXPECT_EQ(out, in);
  double loss = 2.5;
  c.control_all_reduce(&loss, 1, ReduceOp::kSum);
  EXPECT_EQ(loss, 2.5);
  // Device pointers through the device collectives; a group of one moves no bytes.
  auto d = testing::upload_bf16({1, 2, 3, 4});
  c.all_reduce_device(CommGroup::kTp, d.data(), 4, DType::kBF16, ReduceOp::kSum, nullptr);
  TP_CUDA(cudaDeviceSynchronize());
  EXPECT_EQ(testing::download(d), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(c.group_counters(CommGroup::kTp).bytes_sent, 0);
  EXPECT_EQ(c.group_counters(CommGroup::kTp).calls, 1);
  EXPECT_NE(c.backend_name().find("nccl"), std::string::npos);
}

TEST(NcclComm, SelectDeviceExplainsAMissingGpu) {
  std::string why;
  if (device_count(&why) > 0) GTEST_SKIP() << "this machine has a GPU; the no-GPU path is for CI";
  LaunchInfo info;
  auto dev = select_device(info);
  ASSERT_FALSE(dev.ok());
  EXPECT_NE(dev.status().message().find("no CUDA device"), std::string::npos)
      << dev.status().message();
}

}  // namespace
}  // namespace trainplan::executor::cuda
