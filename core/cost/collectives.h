// Collective math, written once and shared by the simulator, the planner, the calibrator and the
// executor's byte counters (STYLE.md, "Collective math in one place").
//
// Conventions follow nccl-tests (doc/PERFORMANCE.md): for a collective over n ranks on a
// message of S bytes, algbw = S / t and busbw = algbw * factor, where factor is 2(n-1)/n for
// all-reduce, (n-1)/n for reduce-scatter and all-gather (S = the full, gathered size), 1 for
// send/recv and broadcast. The bytes each rank sends in the ring algorithm equal S * factor.
#pragma once

#include <cstdint>
#include <string_view>

namespace trainplan {

enum class Collective {
  kAllReduce,
  kReduceScatter,  // S = size of the full (unscattered) buffer
  kAllGather,      // S = size of the full (gathered) buffer
  kAllToAll,       // S = size of each rank's whole send buffer
  kSendRecv,       // S = bytes sent; over n > 2 ranks, each sends S to the next (a ring's step)
  kBroadcast,
  kReduce,
  kGather,         // to one root (the single-process DataParallel pattern)
};

std::string_view to_string(Collective c);

// nccl-tests bus-bandwidth factor.
double bus_bandwidth_factor(Collective c, std::int64_t n);

// Bytes one rank sends for a collective of `message_bytes` over `n` ranks (ring algorithm;
// all-to-all sends (n-1)/n of its buffer). Exact in integers when message_bytes is divisible
// by n, which the executor and simulator arrange; otherwise rounded to the nearest byte.
std::int64_t bytes_sent_per_rank(Collective c, std::int64_t message_bytes, std::int64_t n);

// Sequential steps of the ring algorithm (each pays one link latency): 2(n-1) for all-reduce,
// n-1 for reduce-scatter, all-gather and all-to-all (pairwise), 1 for send/recv, n-1 for a
// pipelined ring broadcast/reduce.
std::int64_t ring_steps(Collective c, std::int64_t n);

// Alpha-beta time of a ring collective whose slowest link has bandwidth `link_bytes_per_s` and
// per-step latency `latency_s`: steps * latency + bytes_sent_per_rank / bandwidth.
double ring_collective_time_s(Collective c, std::int64_t message_bytes, std::int64_t n,
                              double link_bytes_per_s, double latency_s);

// The message one ring step sends: bytes_sent_per_rank / ring_steps; the whole message for
// send/recv; 0 over one rank.
std::int64_t per_step_message_bytes(Collective c, std::int64_t message_bytes, std::int64_t n);

// An MPI library's rendezvous handshake: each ring step whose message (per_step_message_bytes)
// exceeds `eager_limit_bytes` is sent only after
// the receiver has answered a request, one more round trip per step. Open MPI's shared-memory
// transport sends messages up to its eager limit at once and larger ones by this protocol
// (Open MPI 4.1 `ompi_info --param btl vader --level 9`: btl_vader_eager_limit, 4 KiB by
// default). Returns steps x `rendezvous_latency_s` for a collective over that limit, else 0;
// 0 with no limit (eager_limit_bytes <= 0) or over one rank.
double rendezvous_time_s(Collective c, std::int64_t message_bytes, std::int64_t n,
                         std::int64_t eager_limit_bytes, double rendezvous_latency_s);

// Two-level (hierarchical) all-reduce for a group spanning `nodes` nodes with `per_node`
// ranks in each: reduce-scatter inside the node, all-reduce of 1/per_node of the data across
// nodes (all per_node NICs in parallel), all-gather inside the node. (NCCL's tree/ring mix and
// Horovod's hierarchical all-reduce follow this pattern.)
double hierarchical_all_reduce_time_s(std::int64_t message_bytes, std::int64_t nodes,
                                      std::int64_t per_node, double intra_bytes_per_s,
                                      double intra_latency_s, double inter_bytes_per_s,
                                      double inter_latency_s);

// How an MoE all-to-all's buffer spreads over nodes when the dispatcher sends each token once
// per destination node and forwards it inside the node over NVLink (DeepSeek-V3, arXiv:
// 2412.19437 sec. 3.2.2: tokens go by IB to the GPU with the same in-node index on each target
// node, then by NVLink, and node-limited routing sends each token to at most M nodes; DeepEP
// and Megatron-Core's flex dispatcher implement it). The model's experts form `groups` equal
// router groups, of which each token chooses `group_topk`, and its `copies` (top-k) experts
// among theirs, each equally likely. copies == 0: every copy travels on its own (NCCL's
// all-to-all, Megatron-Core's alltoall dispatcher).
struct RoutedSpread {
  std::int64_t experts = 0;
  std::int64_t groups = 0;
  std::int64_t group_topk = 0;
  std::int64_t copies = 0;
  bool operator==(const RoutedSpread&) const;  // defaulted in collectives.cc (nvcc reads this header as C++17)
};

// The share of an all-to-all buffer that leaves the node, for a group of `nodes` x `per_node`
// ranks holding the experts in order: (n - per_node)/n when each copy travels alone. With a
// node-deduplicating dispatcher, the expected number of other nodes a token reaches over its
// copies: (nodes - 1)/nodes of the expected distinct nodes, which is, with C(a, b) the number of
// b-subsets (the chance that a node holds none of the chosen parts is a ratio of two):
//   nodes holding whole groups: nodes * (1 - C(groups - groups/nodes, group_topk) /
//                                             C(groups, group_topk));
//   groups spanning q = nodes/groups nodes: group_topk * q * (1 - C(pool - experts/nodes,
//                                             copies) / C(pool, copies)), pool = the chosen
//                                             groups' experts.
// Other layouts fall back to the first form.
double all_to_all_inter_node_share(const RoutedSpread& spread, std::int64_t nodes,
                                   std::int64_t per_node);

// Any collective over a group of `nodes` x `per_node` ranks (per_node consecutive ranks in each
// node): one level when the group fits in a node; otherwise the two-level decomposition
// (all-reduce as above; reduce-scatter/all-gather: intra-node step on the full message, then the
// inter-node step on 1/per_node of it; all-to-all: the share of each buffer that leaves the node
// (all_to_all_inter_node_share) crosses the NICs, the rest NVLink, in parallel).
double group_collective_time_s(Collective c, std::int64_t message_bytes, std::int64_t nodes,
                               std::int64_t per_node, double intra_bytes_per_s,
                               double intra_latency_s, double inter_bytes_per_s,
                               double inter_latency_s, const RoutedSpread& spread = {});

// NCCL's own choice of algorithm and protocol for an all-reduce, reduce-scatter or all-gather
// over `nodes` x `per_node` ranks (NVIDIA NCCL src/graph/tuning.cc, ncclTopoTuneModel and
// ncclTopoGetAlgoTime, the 2.19-2.2x line; validation/corpus/NOTES.md, fourteenth pass): the
// least, over the ring and (an all-reduce spanning nodes) the tree, and over the LL, LL128 and
// Simple protocols, of NCCL's predicted latency plus the transfer at that protocol's share of the
// bandwidth. `transfer_s`: the group's bandwidth time at the Simple protocol (what
// group_collective_time_s gives with zero latencies, or the simulator's network with
// contention). `intra_hop_s`, `inter_hop_s`: the ring Simple protocol's per-hop latency over
// NVLink and over the network (NCCL: 3.4 and 14.0 us); the other protocols' and the tree's hops
// are NCCL's, scaled by the same ratio. `pre_ampere`: NCCL's larger ring plateau before sm80.
// Not modelled: LL's and LL128's bandwidth caps, the network overhead floor, NVLS, CollNet, PAT.
enum class NcclAlgorithm { kRing, kTree };
enum class NcclProtocol { kLL, kLL128, kSimple };
struct NcclChoice {
  NcclAlgorithm algorithm = NcclAlgorithm::kRing;
  NcclProtocol protocol = NcclProtocol::kSimple;
  double latency_s = 0;  // the chosen pair's latency (plateau included)
  double time_s = 0;     // latency + transfer at the pair's bandwidth
};
// Whether NCCL's tuner times collective c (the others run as point-to-point sends).
bool nccl_tuned(Collective c);
NcclChoice nccl_choice(Collective c, std::int64_t message_bytes, std::int64_t nodes,
                       std::int64_t per_node, double transfer_s, double intra_hop_s,
                       double inter_hop_s, bool pre_ampere);

// Single-process DataParallel (torch.nn.DataParallel): gather every gradient to one device and
// broadcast the result back; the root's link carries (n-1) * S each way.
double gather_broadcast_time_s(std::int64_t message_bytes, std::int64_t n,
                               double link_bytes_per_s, double latency_s);

}  // namespace trainplan
