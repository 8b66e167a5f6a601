// Collective math; see collectives.h. Tested by tests/core/collectives_test.cc.
#include "core/cost/collectives.h"

#include <algorithm>
#include <cmath>

namespace trainplan {

std::string_view to_string(Collective c) {
  switch (c) {
    case Collective::kAllReduce: return "all_reduce";
    case Collective::kReduceScatter: return "reduce_scatter";
    case Collective::kAllGather: return "all_gather";
    case Collective::kAllToAll: return "all_to_all";
    case Collective::kSendRecv: return "send_recv";
    case Collective::kBroadcast: return "broadcast";
    case Collective::kReduce: return "reduce";
    case Collective::kGather: return "gather";
  }
  return "?";
}

double bus_bandwidth_factor(Collective c, std::int64_t n) {
  if (n <= 1) return c == Collective::kSendRecv ? 1.0 : 0.0;
  const double dn = static_cast<double>(n);
  switch (c) {
    case Collective::kAllReduce: return 2.0 * (dn - 1.0) / dn;
    case Collective::kReduceScatter:
    case Collective::kAllGather:
    case Collective::kAllToAll:
    case Collective::kGather: return (dn - 1.0) / dn;
    case Collective::kSendRecv:
    case Collective::kBroadcast:
    case Collective::kReduce: return 1.0;
  }
  return 1.0;
}

std::int64_t bytes_sent_per_rank(Collective c, std::int64_t message_bytes, std::int64_t n) {
  if (n <= 1 && c != Collective::kSendRecv) return 0;
  switch (c) {
    case Collective::kAllReduce:
      // Each rank sends (n-1) chunks in reduce-scatter and (n-1) in all-gather.
      if (message_bytes % n == 0) return 2 * (n - 1) * (message_bytes / n);
      break;
    case Collective::kReduceScatter:
    case Collective::kAllGather:
    case Collective::kAllToAll:
    case Collective::kGather:
      if (message_bytes % n == 0) return (n - 1) * (message_bytes / n);
      break;
    case Collective::kSendRecv:
    case Collective::kBroadcast:
    case Collective::kReduce:
      return message_bytes;
  }
  return std::llround(static_cast<double>(message_bytes) * bus_bandwidth_factor(c, n));
}

std::int64_t ring_steps(Collective c, std::int64_t n) {
  if (n <= 1) return c == Collective::kSendRecv ? 1 : 0;
  switch (c) {
    case Collective::kAllReduce: return 2 * (n - 1);
    case Collective::kSendRecv: return 1;
    default: return n - 1;
  }
}

double ring_collective_time_s(Collective c, std::int64_t message_bytes, std::int64_t n,
                              double link_bytes_per_s, double latency_s) {
  if (n <= 1 && c != Collective::kSendRecv) return 0.0;
  return static_cast<double>(ring_steps(c, n)) * latency_s +
         static_cast<double>(bytes_sent_per_rank(c, message_bytes, n)) / link_bytes_per_s;
}

std::int64_t per_step_message_bytes(Collective c, std::int64_t message_bytes, std::int64_t n) {
  if (c == Collective::kSendRecv) return message_bytes;
  const std::int64_t steps = ring_steps(c, n);
  return steps > 0 ? bytes_sent_per_rank(c, message_bytes, n) / steps : 0;
}

double rendezvous_time_s(Collective c, std::int64_t message_bytes, std::int64_t n,
                         std::int64_t eager_limit_bytes, double rendezvous_latency_s) {
  if (eager_limit_bytes <= 0 || rendezvous_latency_s <= 0) return 0.0;
  return per_step_message_bytes(c, message_bytes, n) > eager_limit_bytes
             ? static_cast<double>(ring_steps(c, n)) * rendezvous_latency_s
             : 0.0;
}

double hierarchical_all_reduce_time_s(std::int64_t message_bytes, std::int64_t nodes,
                                      std::int64_t per_node, double intra_bytes_per_s,
                                      double intra_latency_s, double inter_bytes_per_s,
                                      double inter_latency_s) {
  if (nodes <= 1)
    return ring_collective_time_s(Collective::kAllReduce, message_bytes, per_node,
                                  intra_bytes_per_s, intra_latency_s);
  const std::int64_t shard = (message_bytes + per_node - 1) / per_node;
  return ring_collective_time_s(Collective::kReduceScatter, message_bytes, per_node,
                                intra_bytes_per_s, intra_latency_s) +
         ring_collective_time_s(Collective::kAllReduce, shard, nodes, inter_bytes_per_s,
                                inter_latency_s) +
         ring_collective_time_s(Collective::kAllGather, message_bytes, per_node,
                                intra_bytes_per_s, intra_latency_s);
}

namespace {
// C(total - excluded, chosen) / C(total, chosen): the chance that `chosen` of `total` equally
// likely parts all avoid `excluded` given ones.
double chance_all_avoid(std::int64_t total, std::int64_t excluded, std::int64_t chosen) {
  double p = 1.0;
  for (std::int64_t i = 0; i < chosen; ++i)
    p *= std::max(0.0, static_cast<double>(total - excluded - i)) /
         static_cast<double>(total - i);
  return p;
}
}  // namespace

double all_to_all_inter_node_share(const RoutedSpread& spread, std::int64_t nodes,
                                   std::int64_t per_node) {
  const double n = static_cast<double>(nodes * per_node);
  const double uniform = (n - static_cast<double>(per_node)) / n;
  const RoutedSpread& s = spread;
  if (s.copies <= 0 || nodes <= 1 || s.groups < 1 || s.experts % s.groups != 0 ||
      s.group_topk < 1 || s.group_topk > s.groups)
    return uniform;
  double distinct = 0;
  if (s.groups % nodes == 0) {
    distinct = static_cast<double>(nodes) *
               (1.0 - chance_all_avoid(s.groups, s.groups / nodes, s.group_topk));
  } else if (nodes % s.groups == 0 && s.experts % nodes == 0) {
    const std::int64_t pool = s.group_topk * (s.experts / s.groups);
    if (s.copies > pool) return uniform;
    distinct = static_cast<double>(s.group_topk * (nodes / s.groups)) *
               (1.0 - chance_all_avoid(pool, s.experts / nodes, s.copies));
  } else {
    return uniform;
  }
  const double other_nodes = distinct * static_cast<double>(nodes - 1) / static_cast<double>(nodes);
  return std::min(uniform, other_nodes / static_cast<double>(s.copies));
}

double group_collective_time_s(Collective c, std::int64_t message_bytes, std::int64_t nodes,
                               std::int64_t per_node, double intra_bytes_per_s,
                               double intra_latency_s, double inter_bytes_per_s,
                               double inter_latency_s, const RoutedSpread& spread) {
  if (nodes <= 1)
    return ring_collective_time_s(c, message_bytes, per_node, intra_bytes_per_s, intra_latency_s);
  if (per_node <= 1)
    return ring_collective_time_s(c, message_bytes, nodes, inter_bytes_per_s, inter_latency_s);
  const std::int64_t shard = (message_bytes + per_node - 1) / per_node;
  switch (c) {
    case Collective::kAllReduce:
      return hierarchical_all_reduce_time_s(message_bytes, nodes, per_node, intra_bytes_per_s,
                                            intra_latency_s, inter_bytes_per_s, inter_latency_s);
    case Collective::kReduceScatter:
    case Collective::kAllGather:
      return ring_collective_time_s(c, message_bytes, per_node, intra_bytes_per_s,
                                    intra_latency_s) +
             ring_collective_time_s(c, shard, nodes, inter_bytes_per_s, inter_latency_s);
    case Collective::kAllToAll: {
      const double n = static_cast<double>(nodes * per_node), bytes = static_cast<double>(message_bytes);
      const double inter =
          bytes * all_to_all_inter_node_share(spread, nodes, per_node) / inter_bytes_per_s;
      const double intra = bytes * (static_cast<double>(per_node) - 1.0) / n / intra_bytes_per_s;
      return static_cast<double>(nodes * per_node - 1) * inter_latency_s + std::max(inter, intra);
    }
    default:
      return ring_collective_time_s(c, message_bytes, nodes * per_node, inter_bytes_per_s,
                                    inter_latency_s);
  }
}

double gather_broadcast_time_s(std::int64_t message_bytes, std::int64_t n,
                               double link_bytes_per_s, double latency_s) {
  if (n <= 1) return 0.0;
  const double root_bytes = static_cast<double>(n - 1) * static_cast<double>(message_bytes);
  return 2.0 * (latency_s + root_bytes / link_bytes_per_s);
}

namespace {
// NCCL's tuning tables (src/graph/tuning.cc, 2.19-2.2x; "Latencies in us"), by protocol LL,
// LL128, Simple. Base latency of a call, and per-hop latency over NVLink and over the network.
constexpr double kRingBaseUs[3] = {6.6, 14.0, 8.4};
constexpr double kTreeBaseUs[3] = {6.8, 14.0, 8.4};
constexpr double kRingNvlinkUs[3] = {0.6, 1.9, 3.4};
constexpr double kTreeNvlinkUs[3] = {0.6, 1.25, 4.0};
constexpr double kRingNetUs[3] = {2.7, 4.0, 14.0};
constexpr double kTreeNetUs[3] = {5.0, 8.5, 14.0};
// ncclTopoTuneModel's bandwidth refinements: ring LL at half the bus bandwidth, ring LL128 at
// 0.92; the tree's all-reduce at 0.92, LL a further 1/3.8, LL128 across nodes 120/128.
constexpr double kRingShare[3] = {0.5, 0.92, 1.0};
constexpr double kTreeShare[3] = {0.92 / 3.8, 0.92 * 120.0 / 128.0, 0.92};
// treeCorrectionFactor: the tree's bandwidth at medium sizes, by log2(bytes / 64), 64 B to
// 256 MB; 1 above.
constexpr double kTreeCorrection[3][23] = {
    {1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0},
    {1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0},
    {.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9}};
// ncclTopoGetAlgoTime's ring plateau applies once every channel carries at least 64 bytes a
// rank; NCCL's channel count is at most 32 (MAXCHANNELS), taken here.
constexpr double kPlateauChannels = 32;

// NCCL's log2i: the floor of log2, 0 for 0 and 1.
int floor_log2(std::int64_t v) {
  int r = 0;
  while (v >>= 1) ++r;
  return r;
}
}  // namespace

bool nccl_tuned(Collective c) {
  return c == Collective::kAllReduce || c == Collective::kReduceScatter ||
         c == Collective::kAllGather;
}

NcclChoice nccl_choice(Collective c, std::int64_t message_bytes, std::int64_t nodes,
                       std::int64_t per_node, double transfer_s, double intra_hop_s,
                       double inter_hop_s, bool pre_ampere) {
  NcclChoice best;
  nodes = std::max<std::int64_t>(1, nodes);
  per_node = std::max<std::int64_t>(1, per_node);
  const std::int64_t n = nodes * per_node;
  if (n <= 1) return best;
  constexpr double kUs = 1e-6;
  const double intra_scale = intra_hop_s / (kRingNvlinkUs[2] * kUs);
  const double inter_scale = inter_hop_s / (kRingNetUs[2] * kUs);
  const bool all_reduce = c == Collective::kAllReduce;
  const std::int64_t steps = all_reduce ? 2 * (n - 1) : n - 1;
  const std::int64_t inter_steps = nodes == 1 ? 0 : all_reduce ? 2 * (nodes - 1) : nodes - 1;
  const int log_size = floor_log2(message_bytes >> 6);
  bool first = true;
  auto consider = [&](NcclAlgorithm a, int p, double latency_us, double share) {
    if (share <= 0) return;
    const double latency_s = latency_us * kUs;
    const double t = latency_s + transfer_s / share;
    if (first || t < best.time_s) {
      best = {a, static_cast<NcclProtocol>(p), latency_s, t};
      first = false;
    }
  };
  for (int p = 0; p < 3; ++p) {
    double ring = kRingBaseUs[p] +
                  static_cast<double>(steps - inter_steps) * kRingNvlinkUs[p] * intra_scale +
                  static_cast<double>(inter_steps) * kRingNetUs[p] * inter_scale;
    if (p == 2 && all_reduce && nodes > 1 &&
        static_cast<double>(message_bytes) / (kPlateauChannels * static_cast<double>(n)) >= 64)
      ring *= pre_ampere ? 1.9 : 1.4;  // "Plateau effect of ring"
    consider(NcclAlgorithm::kRing, p, ring, kRingShare[p]);
    if (all_reduce && nodes > 1) {
      const double tree =
          kTreeBaseUs[p] +
          2.0 * (static_cast<double>(per_node - 1) * kTreeNvlinkUs[p] * intra_scale +
                 static_cast<double>(floor_log2(nodes)) * kTreeNetUs[p] * inter_scale);
      // NCCL's tree algbw is busbw x 0.5; the ring's busbw x n / 2(n-1), as transfer_s.
      double share = kTreeShare[p] * static_cast<double>(n - 1) / static_cast<double>(n);
      if (log_size < 23) share *= kTreeCorrection[p][log_size];
      consider(NcclAlgorithm::kTree, p, tree, share);
    }
  }
  return best;
}

bool RoutedSpread::operator==(const RoutedSpread&) const = default;

}  // namespace trainplan
