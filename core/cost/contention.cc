// What a communication kernel takes from the compute beside it; see contention.h. Tested by
// tests/core/contention_test.cc.
#include "core/cost/contention.h"

#include <algorithm>
#include <cmath>
#include <span>

#include "core/units.h"

namespace trainplan {

namespace {

// NCCL's per-channel speeds (GB/s) its ring search tries, fastest first (src/graph/search.cc:
// speedArrayIntra/Inter at v2.21.5 lines 850-851, sm90SpeedArrayIntra/Inter 855-856; the sm100
// arrays of v2.27.3 lines 912-913).
constexpr float kIntra[] = {40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0};
constexpr float kIntraSm90[] = {60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0};
constexpr float kIntraSm100[] = {90.0, 80.0, 70.0, 60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 19.0, 18.0};

// What the search needs of a GPU generation.
struct NcclArch {
  int cc = 80;                      // compute capability x 10 (ccMin in search.cc)
  double line_GBps_per_link = 25;   // NVLink line rate per link and direction
  double nccl_GBps_per_link = 20;   // SMxx_NVLINK_BW (src/graph/topo.h)
  std::span<const float> intra, inter;
  double pcie_GBps = 24;            // NCCL's PCI bandwidth of the GPU's x16 link (gen3 12, gen4 24, gen5 48)
  int max_channels = 32;            // MAXCHANNELS (src/include/device.h): 64 from 2.25
};

constexpr float kInter[] = {48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0,
                            7.0,  6.0,  5.0,  4.0,  3.0,  2.4,  1.2,  0.24, 0.12};
constexpr float kInterSm90[] = {48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5,
                                15.0, 12.0, 6.0,  3.0,  2.4,  1.2,  0.24, 0.12};
constexpr float kInterSm100[] = {47.9, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5,
                                 15.0, 12.0, 6.0,  3.0,  2.4,  1.2,  0.24, 0.12};

NcclArch arch_of(const GpuSpec& gpu) {
  NcclArch a;
  a.intra = kIntra;
  a.inter = kInter;
  if (gpu.architecture == "volta") {
    a.cc = 70;
    a.pcie_GBps = 12;
  } else if (gpu.architecture == "hopper") {
    a.cc = 90;
    a.nccl_GBps_per_link = 20.6;
    a.intra = kIntraSm90;
    a.inter = kInterSm90;
    a.pcie_GBps = 48;
  } else if (gpu.architecture == "blackwell" || gpu.architecture == "blackwell-ultra") {
    // Blackwell Ultra (sm_103) shares the row: NCCL tunes compute capability >= 100 as one
    // (src/graph/tuning.cc, compCapIndex).
    a.cc = 100;
    a.line_GBps_per_link = 50;
    a.nccl_GBps_per_link = 40;
    a.intra = kIntraSm100;
    a.inter = kInterSm100;
    a.pcie_GBps = 48;
    a.max_channels = 64;
  }
  return a;
}

std::int64_t next_pow2(std::int64_t v) {
  std::int64_t p = 1;
  while (p < v) p <<= 1;
  return p;
}

// The search inside one node: the most channels x speed the GPU's NVLink total holds.
void search_intra(const NcclArch& a, double total_GBps, std::int64_t& n, double& speed) {
  const std::int64_t max_search = a.max_channels / 2;  // ringGraph->maxChannels (src/init.cc)
  n = 0;
  speed = 0;
  std::size_t i = 0;
  while (i + 1 < a.intra.size() && a.intra[i] > total_GBps) ++i;
  for (;; ++i) {
    const double s = a.intra[i];
    const std::int64_t c =
        std::min<std::int64_t>(max_search, static_cast<std::int64_t>(std::floor(total_GBps / s + 1e-9)));
    if (static_cast<double>(c) * s > static_cast<double>(n) * speed) {
      n = c;
      speed = s;
    }
    if (static_cast<double>(n) * speed >= total_GBps - 1e-9) return;
    if (i + 1 >= a.intra.size()) return;
    if (n > 0 && a.intra[i + 1] / speed <= 0.49) return;
  }
}

// The collective channels of a communicator (before the small-message reduction).
std::int64_t comm_channels(const ClusterSpec& cluster, std::int64_t nodes, std::int64_t per_node) {
  const GpuSpec& gpu = cluster.gpu;
  const NcclArch a = arch_of(gpu);
  std::int64_t n = 0;
  double speed = 0;
  if (nodes <= 1) {
    const double links = std::max(1.0, std::round(gpu.nvlink_bytes_per_s / kGB / a.line_GBps_per_link));
    search_intra(a, links * a.nccl_GBps_per_link, n, speed);
  } else {
    // One channel per NIC at the fastest speed the path from a GPU to its NIC carries.
    const std::int64_t g = std::max<std::int64_t>(1, cluster.gpus_per_node);
    const std::int64_t nics = cluster.nics_per_node > 0 ? cluster.nics_per_node : g;
    const double nic_GBps = cluster.inter_node_bytes_per_s / kGB * static_cast<double>(g) /
                            static_cast<double>(nics) / kNicAchievableFraction;
    const double path = std::min(a.pcie_GBps, nic_GBps);
    std::size_t i = 0;
    while (i + 1 < a.inter.size() && a.inter[i] > path + 1e-9) ++i;
    speed = a.inter[i];
    n = std::min<std::int64_t>({per_node, nics, a.max_channels / 2});
  }
  if (n <= 0) return 1;
  // ncclTopoDupChannels.
  if (speed >= 25.0 && !(a.cc > 80 && speed < 50.0 && n > 4)) {
    const std::int64_t dup = std::min<std::int64_t>(2 * n, a.max_channels / 2);
    speed /= static_cast<double>((dup + n - 1) / n);
    n = dup;
  }
  // ncclTopoPostset.
  n = std::min<std::int64_t>(a.max_channels, 2 * n);
  if (a.cc >= 90 && nodes > 1 && speed > 45.0 && n < 16) n *= 2;
  return n;
}

}  // namespace

std::int64_t nccl_channels(const ClusterSpec& cluster, std::int64_t nodes, std::int64_t per_node,
                           std::int64_t message_bytes) {
  if (nodes * per_node <= 1) return 0;
  std::int64_t nc = comm_channels(cluster, nodes, per_node);
  constexpr std::int64_t kThreads = 512, kThreshold = 64;  // NCCL_SIMPLE_MAX_NTHREADS, ..._THRESHOLD
  while (nc > 1 && message_bytes < nc * kThreads * kThreshold) --nc;
  return nc;
}

std::int64_t nccl_p2p_channels(const ClusterSpec& cluster, Collective c, std::int64_t nodes,
                               std::int64_t per_node, std::int64_t message_bytes) {
  if (nodes * per_node <= 1 && c != Collective::kSendRecv) return 0;
  const GpuSpec& gpu = cluster.gpu;
  const NcclArch a = arch_of(gpu);
  const std::int64_t p2p = next_pow2(std::min<std::int64_t>(comm_channels(cluster, nodes, per_node),
                                                            a.max_channels));
  if (c == Collective::kAllToAll) return p2p;
  const double links = std::max(1.0, std::round(gpu.nvlink_bytes_per_s / kGB / a.line_GBps_per_link));
  const bool across = nodes > 1;
  const std::int64_t per_peer =
      next_pow2(std::min<std::int64_t>(p2p, across ? 2 : 2 * static_cast<std::int64_t>(links)));
  // A pair: at least per_peer / 2 when two ranks would overflow the p2p channels.
  std::int64_t channels = per_peer;
  while (channels * 2 > p2p && channels > 1) channels /= 2;
  const std::int64_t step = 128 * 1024;  // p2pChunkSize
  const std::int64_t max_chunk = across ? step : 32 * step;
  auto chunk = [&](std::int64_t n) { return (message_bytes + n - 1) / n; };
  while (chunk(channels) > max_chunk && channels <= per_peer / 2) channels *= 2;
  return channels;
}

CommHold comm_hold(const ClusterSpec& cluster, CommKernels kernels, Collective c,
                   std::int64_t message_bytes, std::int64_t nodes, std::int64_t per_node,
                   double seconds) {
  const GpuSpec& gpu = cluster.gpu;
  CommHold h;
  const std::int64_t ranks = nodes * per_node;
  if (ranks <= 1 && c != Collective::kSendRecv) return h;
  switch (kernels) {
    case CommKernels::kNccl:
      h.sms = static_cast<double>(c == Collective::kAllToAll || c == Collective::kSendRecv
                                      ? nccl_p2p_channels(cluster, c, nodes, per_node, message_bytes)
                                      : nccl_channels(cluster, nodes, per_node, message_bytes));
      break;
    case CommKernels::kUserbuffersSm: h.sms = kUserbufferSms; break;
    case CommKernels::kUserbuffersMargin: h.sms = 0; break;
    case CommKernels::kCopyEngine: h.sms = 0; break;
    case CommKernels::kExpertDispatch: h.sms = 20; break;
  }
  if (gpu.sm_count <= 0) h.sms = 0;
  const double sent = static_cast<double>(bytes_sent_per_rank(c, message_bytes, std::max<std::int64_t>(ranks, 2)));
  if (seconds > 0) h.hbm_bytes_per_s = 3.0 * sent / seconds;
  return h;
}

double contended_ratio(const WorkShape& w, std::int64_t sm_count, double hbm_bytes_per_s,
                       const CommHold& held) {
  const double alone = std::max(w.compute_s, w.memory_s) + w.overhead_s;
  if (alone <= 0 || held.empty()) return 1.0;
  double sm_factor = 1.0;
  if (sm_count > 0 && held.sms > 0 && w.compute_s > 0) {
    const double all = static_cast<double>(sm_count);
    const double left = std::max(1.0, all - held.sms);
    sm_factor = w.tiles > 0 ? std::ceil(w.tiles / left) / std::ceil(w.tiles / all) : all / left;
  }
  double hbm_factor = 1.0;
  if (hbm_bytes_per_s > 0 && held.hbm_bytes_per_s > 0 && w.memory_s > 0)
    hbm_factor = hbm_bytes_per_s /
                 (hbm_bytes_per_s - std::min(held.hbm_bytes_per_s, 0.9 * hbm_bytes_per_s));
  return (std::max(w.compute_s * sm_factor, w.memory_s * hbm_factor) + w.overhead_s) / alone;
}

}  // namespace trainplan
