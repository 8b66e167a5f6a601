// The cluster as a graph (Boost.Graph): a vertex per GPU, one NVSwitch per node, one host per
// node, and the InfiniBand fabric; directed edges are links with a bandwidth and a latency.
// Every GPU has six links: to and from its node's NVSwitch (the per-GPU NVLink ring bandwidth),
// to and from the fabric through its own NIC (GPUDirect RDMA), and to and from the host (PCIe).
// The fabric is non-blocking (a fat tree): only the GPU-side links limit bandwidth.
//
// collective_demand() turns a collective over a group of GPUs into the alpha-beta time of
// collectives.h and the links its traffic crosses. Tested by tests/simulator/topology_test.cc.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include <boost/graph/adjacency_list.hpp>

#include "core/cluster_spec.h"
#include "core/cost/collectives.h"
#include "simulator/engine.h"

namespace trainplan::sim {

enum class LinkKind : std::int32_t {
  kNvlinkOut = 0, kNvlinkIn, kNicOut, kNicIn, kPcieToHost, kPcieFromHost, kCount
};
inline constexpr std::int32_t kLinksPerGpu = static_cast<std::int32_t>(LinkKind::kCount);

struct LinkProps {
  double bytes_per_s = 0;
  double latency_s = 0;
  std::int32_t id = 0;  // gpu * kLinksPerGpu + kind
};

// How a data-parallel sum is done (simulator.h's DpAlgorithm, restated to keep this header
// free of the public one).
enum class SumAlgorithm { kRing, kGatherBroadcast };

class Topology {
 public:
  using Graph = boost::adjacency_list<boost::vecS, boost::vecS, boost::directedS,
                                      boost::no_property, LinkProps>;

  explicit Topology(const ClusterSpec& cluster);

  std::int64_t num_gpus() const { return num_gpus_; }
  std::int32_t num_links() const { return static_cast<std::int32_t>(num_gpus_ * kLinksPerGpu); }
  std::int64_t node_of(std::int64_t gpu) const { return gpu / gpus_per_node_; }
  const Graph& graph() const { return graph_; }
  std::int64_t gpu_vertex(std::int64_t gpu) const { return gpu; }
  std::int64_t switch_vertex(std::int64_t node) const { return num_gpus_ + node; }
  std::int64_t fabric_vertex() const { return num_gpus_ + num_nodes_; }
  std::int64_t host_vertex(std::int64_t node) const { return num_gpus_ + num_nodes_ + 1 + node; }

  // Directed links from GPU a to GPU b, appended to `out`; returns the path latency.
  double route(std::int64_t a, std::int64_t b, std::vector<std::int32_t>& out) const;
  const LinkProps& link(std::int32_t id) const { return links_[static_cast<std::size_t>(id)]; }

  // The network demand of collective `c` of `message_bytes` over the GPUs `group` (in ring
  // order). `canonical` maps a link to the link that stands for it (symmetric simulation maps
  // a replica's links to its representative's; identity otherwise).
  // `spread`: an MoE all-to-all's spread over nodes (collectives.h; empty for the rest).
  NetDemand collective_demand(Collective c, std::int64_t message_bytes,
                              const std::vector<std::int64_t>& group, SumAlgorithm algorithm,
                              const std::function<std::int32_t(std::int32_t)>& canonical,
                              const RoutedSpread& spread = {}) const;
  // Host <-> device transfer of one GPU over PCIe.
  NetDemand host_transfer_demand(std::int64_t gpu, double bytes, bool to_host,
                                 const std::function<std::int32_t(std::int32_t)>& canonical) const;

 private:
  std::int64_t num_gpus_ = 0, num_nodes_ = 0, gpus_per_node_ = 1;
  double intra_bytes_per_s_ = 0, intra_latency_s_ = 0, inter_bytes_per_s_ = 0,
         inter_latency_s_ = 0;
  CollectiveModel model_ = CollectiveModel::kAlphaBeta;
  std::int64_t eager_limit_bytes_ = 0;  // ClusterSpec's rendezvous protocol
  double rendezvous_latency_s_ = 0;
  bool pre_ampere_ = false;  // NCCL's ring plateau is larger before sm80 (collectives.h)
  Graph graph_;
  std::vector<LinkProps> links_;  // by link id, a copy of the edge properties
};

}  // namespace trainplan::sim
