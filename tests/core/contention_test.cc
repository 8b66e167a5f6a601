// core/cost/contention.h: NCCL's channel counts from its code, what a collective holds, and the
// slowdown of the compute beside it, in closed form and against the published measurements the
// header cites.
#include "core/cost/contention.h"

#include <gtest/gtest.h>

#include "core/units.h"
#include "tests/core/test_util.h"

namespace trainplan {
namespace {

// A node of the preset's GPUs with its DGX/HGX links (one NIC per GPU).
ClusterSpec gpu(const char* name) {
  auto g = gpu_preset(name);
  EXPECT_TRUE(g.ok()) << name;
  auto node = preset_gpus_per_node(name);
  auto c = make_cluster(name, 64 * *node, *node);
  EXPECT_TRUE(c.ok()) << name;
  return *c;
}

TEST(Contention, NcclChannelsFollowTheRingSearch) {
  constexpr std::int64_t kBig = std::int64_t{1} << 30;
  // One node: NVLink total / the first speed, doubled twice. The logs agree: 24 coll channels on
  // 8 H100s (NCCL 2.27), 16 on 8 H800s (nccl issue 892).
  EXPECT_EQ(nccl_channels(gpu("H100-80GB"), 1, 8, kBig), 24);
  EXPECT_EQ(nccl_channels(gpu("H200-141GB"), 1, 8, kBig), 24);
  EXPECT_EQ(nccl_channels(gpu("A100-80GB"), 1, 8, kBig), 24);
  EXPECT_EQ(nccl_channels(gpu("H800-80GB"), 1, 8, kBig), 16);
  EXPECT_EQ(nccl_channels(gpu("B200-192GB"), 1, 8, kBig), 32);
  EXPECT_EQ(nccl_channels(gpu("V100-32GB"), 1, 16, kBig), 12);
  // Any group size inside an NVSwitch node searches the same links.
  EXPECT_EQ(nccl_channels(gpu("H100-80GB"), 1, 2, kBig), 24);
  // Across nodes: one search channel per NIC of the group's GPUs in a node, doubled after the
  // search (and on Hopper once more below 16). A100 with 8 NICs: 16 (nccl issue 689); one GPU per
  // node: "a PCI system with a single NIC ... it should just launch 2 SMs".
  EXPECT_EQ(nccl_channels(gpu("A100-80GB"), 64, 8, kBig), 16);
  EXPECT_EQ(nccl_channels(gpu("A100-80GB"), 64, 1, kBig), 2);
  EXPECT_EQ(nccl_channels(gpu("A100-80GB"), 64, 4, kBig), 8);
  EXPECT_EQ(nccl_channels(gpu("H100-80GB"), 64, 8, kBig), 16);
  EXPECT_EQ(nccl_channels(gpu("H100-80GB"), 64, 4, kBig), 16);
  EXPECT_EQ(nccl_channels(gpu("H100-80GB"), 64, 2, kBig), 8);
  EXPECT_EQ(nccl_channels(gpu("H100-80GB"), 64, 1, kBig), 4);
  // Small messages: "while (nBytes < nc * nt * threadThreshold) nc--", 512 threads x 64.
  EXPECT_EQ(nccl_channels(gpu("H100-80GB"), 1, 8, 24 * 32768), 24);
  EXPECT_EQ(nccl_channels(gpu("H100-80GB"), 1, 8, 24 * 32768 - 1), 23);
  EXPECT_EQ(nccl_channels(gpu("H100-80GB"), 1, 8, 100000), 3);
  EXPECT_EQ(nccl_channels(gpu("H100-80GB"), 1, 8, 8), 1);
  EXPECT_EQ(nccl_channels(gpu("H100-80GB"), 1, 1, kBig), 0);  // no collective
}

// Across nodes NCCL runs a search channel per NIC the group's GPUs reach, at the speed the
// GPU-to-NIC path carries: a node of 8 A100s sharing 4 x 100 Gb/s NICs (fms-fsdp's reading)
// searches 4 channels at 12 GB/s, not duplicated below 25: 8.
TEST(Contention, NcclChannelsFollowTheNodesNics) {
  constexpr std::int64_t kBig = std::int64_t{1} << 30;
  ClusterSpec c = gpu("A100-80GB");
  c.nics_per_node = 4;
  c.inter_node_bytes_per_s = shared_nic_bytes_per_s(4, 100, 8);
  EXPECT_EQ(nccl_channels(c, 16, 8, kBig), 8);
  EXPECT_EQ(nccl_channels(c, 16, 2, kBig), 4);
  EXPECT_EQ(nccl_channels(c, 1, 8, kBig), 24);  // inside a node the NICs do not matter
  // H100s with 4 x 400 Gb/s NICs per 8: 4 channels at 48, doubled twice: 16.
  ClusterSpec h = gpu("H100-80GB");
  h.nics_per_node = 4;
  h.inter_node_bytes_per_s = shared_nic_bytes_per_s(4, 400, 8);
  EXPECT_EQ(nccl_channels(h, 16, 8, kBig), 16);
  // The presets' one NIC per GPU, said explicitly, changes nothing.
  ClusterSpec same = gpu("H100-80GB");
  same.nics_per_node = 8;
  EXPECT_EQ(nccl_channels(same, 16, 8, kBig), nccl_channels(gpu("H100-80GB"), 16, 8, kBig));
}

TEST(Contention, NcclP2pChannels) {
  constexpr std::int64_t kBig = std::int64_t{1} << 30;
  // p2p channels: the collective channels rounded up to a power of two (the logs' "32 p2p
  // channels" on 8 H100s, "16 p2p channels, 2 p2p channels per peer" across A800 nodes).
  EXPECT_EQ(nccl_p2p_channels(gpu("H100-80GB"), Collective::kAllToAll, 1, 8, kBig), 32);
  EXPECT_EQ(nccl_p2p_channels(gpu("A100-80GB"), Collective::kAllToAll, 8, 8, kBig), 16);
  // A send across nodes: 2 per NIC peer.
  EXPECT_EQ(nccl_p2p_channels(gpu("H100-80GB"), Collective::kSendRecv, 2, 1, 64 << 20), 2);
  // Inside a node: half the 32 per peer, doubled once chunks exceed 32 x 128 KiB.
  EXPECT_EQ(nccl_p2p_channels(gpu("H100-80GB"), Collective::kSendRecv, 1, 2, 1 << 20), 16);
  EXPECT_EQ(nccl_p2p_channels(gpu("H100-80GB"), Collective::kSendRecv, 1, 2, 64 << 20), 16);
  EXPECT_EQ(nccl_p2p_channels(gpu("H100-80GB"), Collective::kSendRecv, 1, 2, 65 << 20), 32);
}

TEST(Contention, HoldByKernels) {
  const ClusterSpec h100 = gpu("H100-80GB");
  const std::int64_t S = 256 << 20;  // a 256 MiB all-gather over 8 ranks in 1 ms
  const CommHold nccl = comm_hold(h100, CommKernels::kNccl, Collective::kAllGather, S, 1, 8, 1e-3);
  EXPECT_EQ(nccl.sms, 24);
  // Three times the bytes it sends per second: 7/8 S in 1 ms.
  EXPECT_NEAR(nccl.hbm_bytes_per_s, 3.0 * (7.0 / 8.0 * static_cast<double>(S)) / 1e-3, 1.0);
  EXPECT_EQ(comm_hold(h100, CommKernels::kUserbuffersSm, Collective::kReduceScatter, S, 1, 8, 1e-3).sms, 16);
  EXPECT_EQ(comm_hold(h100, CommKernels::kCopyEngine, Collective::kAllGather, S, 1, 8, 1e-3).sms, 0);
  EXPECT_GT(comm_hold(h100, CommKernels::kCopyEngine, Collective::kAllGather, S, 1, 8, 1e-3).hbm_bytes_per_s, 0);
  EXPECT_EQ(comm_hold(h100, CommKernels::kExpertDispatch, Collective::kAllToAll, S, 1, 8, 1e-3).sms, 20);
  EXPECT_TRUE(comm_hold(h100, CommKernels::kNccl, Collective::kAllReduce, S, 1, 1, 1e-3).empty());
  ClusterSpec custom = h100;
  custom.gpu.sm_count = 0;  // unknown: no SM held
  EXPECT_EQ(comm_hold(custom, CommKernels::kNccl, Collective::kAllGather, S, 1, 8, 1e-3).sms, 0);
}

TEST(Contention, ClosedFormSlowdown) {
  // The NVIDIA forum thread ("... Tail Effect"): a 132-block GEMM on an H100 beside NCCL's
  // 24-block all-gather "nearly doubles": one wave on 132 SMs, two on 108.
  WorkShape gemm{.compute_s = 1.0, .memory_s = 0.1, .overhead_s = 0, .tiles = 132};
  CommHold ag{.sms = 24, .hbm_bytes_per_s = 0};
  EXPECT_DOUBLE_EQ(contended_ratio(gemm, 132, 3.35e12, ag), 2.0);
  // A large GEMM: ceil(T / 108) / ceil(T / 132), close to 132 / 108.
  gemm.tiles = 3072;  // (8192 x 6144) in 128 x 128 tiles
  EXPECT_DOUBLE_EQ(contended_ratio(gemm, 132, 3.35e12, ag), 29.0 / 24.0);
  // An untiled compute term: sm_count / (sm_count - held).
  gemm.tiles = 0;
  EXPECT_DOUBLE_EQ(contended_ratio(gemm, 132, 3.35e12, ag), 132.0 / 108.0);
  // A memory-bound kernel: hbm / (hbm - held), the launch overhead unchanged.
  const WorkShape mem{.compute_s = 0, .memory_s = 1.0, .overhead_s = 0.5, .tiles = 0};
  const CommHold bw{.sms = 24, .hbm_bytes_per_s = 1e12};
  EXPECT_DOUBLE_EQ(contended_ratio(mem, 132, 4e12, bw), (4.0 / 3.0 + 0.5) / 1.5);
  // The held bandwidth is capped at 0.9 of the device's.
  EXPECT_DOUBLE_EQ(contended_ratio(mem, 132, 1e12, CommHold{0, 5e12}), (10.0 + 0.5) / 1.5);
  // Nothing held, or no SM count: 1.
  EXPECT_DOUBLE_EQ(contended_ratio(mem, 132, 4e12, CommHold{}), 1.0);
  EXPECT_DOUBLE_EQ(contended_ratio(WorkShape{1, 0, 0, 132}, 0, 0, ag), 1.0);
  // The roofline keeps the larger term: a GEMM whose memory term is slowed past its compute.
  const WorkShape both{.compute_s = 1.0, .memory_s = 0.9, .overhead_s = 0, .tiles = 1320};
  EXPECT_DOUBLE_EQ(contended_ratio(both, 132, 4e12, CommHold{24, 2e12}), 1.8);
}

TEST(Contention, WorkShapeIsTheRooflineOfTaskTime) {
  auto g = gpu_preset("H100-80GB");
  ASSERT_TRUE(g.ok());
  const DeviceRates r = device_rates(*g, Precision::kBf16);
  Task t = testing::gemm_task("qkv", 8192, 6144, 4096);
  t.bytes = 2.0 * (8192.0 * 4096 + 4096.0 * 6144 + 8192.0 * 6144);
  const WorkShape w = work_shape(t, r);
  EXPECT_DOUBLE_EQ(std::max(w.compute_s, w.memory_s) + w.overhead_s, task_time_s(t, r));
  EXPECT_DOUBLE_EQ(w.tiles, 64.0 * 48.0);
  Task m;
  m.kind = TaskKind::kMemory;
  m.bytes = 1e9;
  const WorkShape wm = work_shape(m, r);
  EXPECT_EQ(wm.tiles, 0);
  EXPECT_DOUBLE_EQ(wm.memory_s + wm.overhead_s, task_time_s(m, r));
}

}  // namespace
}  // namespace trainplan
