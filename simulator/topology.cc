// The cluster graph and collective demands; see topology.h.
#include "simulator/topology.h"

#include <algorithm>
#include <map>

#include "core/status.h"

namespace trainplan::sim {

Topology::Topology(const ClusterSpec& c)
    : num_gpus_(c.total_gpus()),
      num_nodes_(c.num_nodes),
      gpus_per_node_(std::max<std::int64_t>(1, c.gpus_per_node)),
      intra_bytes_per_s_(c.intra_node_bytes_per_s),
      intra_latency_s_(c.intra_node_latency_s),
      inter_bytes_per_s_(c.inter_node_bytes_per_s),
      inter_latency_s_(c.inter_node_latency_s),
      model_(c.collective_model),
      eager_limit_bytes_(c.eager_limit_bytes),
      rendezvous_latency_s_(c.rendezvous_latency_s),
      pre_ampere_(c.gpu.architecture == "volta"),
      graph_(static_cast<std::size_t>(num_gpus_ + 2 * num_nodes_ + 1)) {
  links_.resize(static_cast<std::size_t>(num_links()));
  // A path inside a node crosses two NVLink edges and one ring step's latency; a path across
  // nodes two NIC edges and one inter-node step's latency: each edge carries half.
  auto add = [&](std::int64_t u, std::int64_t v, std::int64_t gpu, LinkKind kind, double bw,
                 double latency) {
    LinkProps p{bw, latency, static_cast<std::int32_t>(gpu * kLinksPerGpu +
                                                       static_cast<std::int32_t>(kind))};
    boost::add_edge(static_cast<std::size_t>(u), static_cast<std::size_t>(v), p, graph_);
    links_[static_cast<std::size_t>(p.id)] = p;
  };
  for (std::int64_t g = 0; g < num_gpus_; ++g) {
    const std::int64_t node = node_of(g);
    add(gpu_vertex(g), switch_vertex(node), g, LinkKind::kNvlinkOut, intra_bytes_per_s_,
        intra_latency_s_ / 2);
    add(switch_vertex(node), gpu_vertex(g), g, LinkKind::kNvlinkIn, intra_bytes_per_s_,
        intra_latency_s_ / 2);
    add(gpu_vertex(g), fabric_vertex(), g, LinkKind::kNicOut, inter_bytes_per_s_,
        inter_latency_s_ / 2);
    add(fabric_vertex(), gpu_vertex(g), g, LinkKind::kNicIn, inter_bytes_per_s_,
        inter_latency_s_ / 2);
    add(gpu_vertex(g), host_vertex(node), g, LinkKind::kPcieToHost, c.pcie_bytes_per_s, 0.0);
    add(host_vertex(node), gpu_vertex(g), g, LinkKind::kPcieFromHost, c.pcie_bytes_per_s, 0.0);
  }
}

double Topology::route(std::int64_t a, std::int64_t b, std::vector<std::int32_t>& out) const {
  // The shortest path in this graph is structural: through the node's NVSwitch when both GPUs
  // share a node, through the two NICs otherwise (tests/simulator/topology_test.cc checks it
  // against a breadth-first search of the graph).
  auto id = [](std::int64_t gpu, LinkKind k) {
    return static_cast<std::int32_t>(gpu * kLinksPerGpu + static_cast<std::int32_t>(k));
  };
  const bool same_node = node_of(a) == node_of(b);
  const std::int32_t up = id(a, same_node ? LinkKind::kNvlinkOut : LinkKind::kNicOut);
  const std::int32_t down = id(b, same_node ? LinkKind::kNvlinkIn : LinkKind::kNicIn);
  out.push_back(up);
  out.push_back(down);
  return link(up).latency_s + link(down).latency_s;
}

namespace {
void canonicalise(std::vector<std::int32_t>& links,
                  const std::function<std::int32_t(std::int32_t)>& canonical) {
  for (std::int32_t& l : links) l = canonical(l);
  std::sort(links.begin(), links.end());
  links.erase(std::unique(links.begin(), links.end()), links.end());
}
}  // namespace

NetDemand Topology::collective_demand(
    Collective c, std::int64_t message_bytes, const std::vector<std::int64_t>& group,
    SumAlgorithm algorithm, const std::function<std::int32_t(std::int32_t)>& canonical,
    const RoutedSpread& spread) const {
  NetDemand d;
  const auto n = static_cast<std::int64_t>(group.size());
  if (n <= 1 && c != Collective::kSendRecv) return d;
  double bw = 0, latency = 0;
  auto hop = [&](std::int64_t a, std::int64_t b) {
    const std::size_t first = d.links.size();
    latency = std::max(latency, route(a, b, d.links));
    for (std::size_t i = first; i < d.links.size(); ++i) {
      const double lb = link(d.links[i]).bytes_per_s;
      bw = bw == 0 ? lb : std::min(bw, lb);
    }
  };
  auto split = [&](auto time_fn) {
    const double with_latency = time_fn(true);
    d.transfer_s = time_fn(false);
    d.latency_s = std::max(0.0, with_latency - d.transfer_s);
  };

  if (c == Collective::kSendRecv) {
    // Two ranks: one send. More: nccl-tests' sendrecv, a ring's one step, every member sending S
    // to the next and receiving from the one before (context parallelism's K/V exchange): each
    // hop's links, the slowest hop's time.
    hop(group[0], group[1]);
    for (std::int64_t i = 1; n > 2 && i < n; ++i)
      hop(group[static_cast<std::size_t>(i)], group[static_cast<std::size_t>((i + 1) % n)]);
    split([&](bool lat) {
      return ring_collective_time_s(c, message_bytes, 2, bw, lat ? latency : 0.0);
    });
  } else if (algorithm == SumAlgorithm::kGatherBroadcast && c == Collective::kAllReduce) {
    // torch.nn.DataParallel: every replica sends to the root, the root sends back to each.
    for (std::int64_t i = 1; i < n; ++i) {
      hop(group[static_cast<std::size_t>(i)], group[0]);
      hop(group[0], group[static_cast<std::size_t>(i)]);
    }
    split([&](bool lat) {
      return gather_broadcast_time_s(message_bytes, n, bw, lat ? latency : 0.0);
    });
  } else {
    for (std::int64_t i = 0; i < n; ++i)
      hop(group[static_cast<std::size_t>(i)], group[static_cast<std::size_t>((i + 1) % n)]);
    std::map<std::int64_t, std::int64_t> per_node;
    for (std::int64_t g : group) ++per_node[node_of(g)];
    const auto nodes = static_cast<std::int64_t>(per_node.size());
    const std::int64_t local = n / nodes;
    const bool even = std::all_of(per_node.begin(), per_node.end(),
                                  [&](const auto& kv) { return kv.second == local; });
    // A group with several ranks in each of several nodes moves its inter-node share through
    // all of those ranks' NICs at once (NCCL's rings or trees, one channel per NIC): the
    // two-level decomposition of group_collective_time_s, as the planner's estimate uses. A
    // flat ring at one NIC's bandwidth would leave the node's other NICs idle (nccl-tests
    // busbw across DGX nodes is about the node's NIC total, not one NIC's rate).
    auto alpha_beta = [&](bool lat) {
      if (nodes > 1 && local > 1 && even)
        return group_collective_time_s(c, message_bytes, nodes, local, intra_bytes_per_s_,
                                       lat ? intra_latency_s_ : 0.0, inter_bytes_per_s_,
                                       lat ? inter_latency_s_ : 0.0, spread);
      return ring_collective_time_s(c, message_bytes, n, bw, lat ? latency : 0.0);
    };
    if (model_ == CollectiveModel::kNccl && nccl_tuned(c)) {
      // NCCL's algorithm and protocol (collectives.h): the transfer stays the network's (it
      // contends for the links); the rest of the chosen pair's time, its latency and a slower
      // protocol's or the tree's bandwidth share, does not.
      d.transfer_s = alpha_beta(false);
      const NcclChoice choice = nccl_choice(c, message_bytes, nodes, (n + nodes - 1) / nodes,
                                            d.transfer_s, intra_latency_s_, inter_latency_s_,
                                            pre_ampere_);
      d.latency_s = std::max(0.0, choice.time_s - d.transfer_s);
    } else {
      split(alpha_beta);
    }
  }
  // An MPI library's handshake for messages over its eager limit (a measured profile's).
  d.latency_s += rendezvous_time_s(c, message_bytes, c == Collective::kSendRecv ? 2 : n,
                                   eager_limit_bytes_, rendezvous_latency_s_);
  if (c != Collective::kSendRecv) {
    // NCCL runs a collective over several rings (channels) in different orders, so every
    // member's links of a class carry the same share: the collective loads, on every member,
    // each link class (NVLink, NIC) its ring crosses. This keeps DP replicas symmetric.
    bool intra = false, inter = false;
    for (std::int32_t l : d.links) {
      const auto kind = static_cast<LinkKind>(l % kLinksPerGpu);
      intra = intra || kind == LinkKind::kNvlinkOut || kind == LinkKind::kNvlinkIn;
      inter = inter || kind == LinkKind::kNicOut || kind == LinkKind::kNicIn;
    }
    d.links.clear();
    auto id = [](std::int64_t gpu, LinkKind k) {
      return static_cast<std::int32_t>(gpu * kLinksPerGpu + static_cast<std::int32_t>(k));
    };
    for (std::int64_t g : group) {
      if (intra) {
        d.links.push_back(id(g, LinkKind::kNvlinkOut));
        d.links.push_back(id(g, LinkKind::kNvlinkIn));
      }
      if (inter) {
        d.links.push_back(id(g, LinkKind::kNicOut));
        d.links.push_back(id(g, LinkKind::kNicIn));
      }
    }
  }
  canonicalise(d.links, canonical);
  return d;
}

NetDemand Topology::host_transfer_demand(
    std::int64_t gpu, double bytes, bool to_host,
    const std::function<std::int32_t(std::int32_t)>& canonical) const {
  NetDemand d;
  const auto id = static_cast<std::int32_t>(
      gpu * kLinksPerGpu +
      static_cast<std::int32_t>(to_host ? LinkKind::kPcieToHost : LinkKind::kPcieFromHost));
  const LinkProps& l = link(id);
  TRAINPLAN_CHECK(l.bytes_per_s > 0) << "PCIe bandwidth must be positive for offload";
  d.transfer_s = bytes / l.bytes_per_s;
  d.links.push_back(canonical(id));
  return d;
}

}  // namespace trainplan::sim
