// The cluster graph (Boost.Graph), collective demands against collectives.h, and the engine's
// link sharing. Run: ctest -R simulator_test.
#include <boost/graph/breadth_first_search.hpp>
#include <boost/graph/visitors.hpp>

#include "core/cost/collectives.h"
#include "simulator/engine.h"
#include "simulator/topology.h"
#include "tests/simulator/test_util.h"

namespace trainplan {
namespace {

using sim::Topology;

std::int32_t identity(std::int32_t l) { return l; }

TEST(Topology, RoutesAreShortestPathsOfTheGraph) {
  const ClusterSpec c = *make_cluster("H100-80GB", 16, 8);
  const Topology t(c);
  const auto& g = t.graph();
  std::vector<int> dist(boost::num_vertices(g), 0);
  boost::breadth_first_search(
      g, boost::vertex(0, g),
      boost::visitor(boost::make_bfs_visitor(
          boost::record_distances(dist.data(), boost::on_tree_edge()))));
  for (std::int64_t b = 1; b < 16; ++b) {
    std::vector<std::int32_t> links;
    t.route(0, b, links);
    EXPECT_EQ(static_cast<int>(links.size()), dist[static_cast<std::size_t>(b)]) << b;
    const double bw = t.link(links[0]).bytes_per_s;
    EXPECT_EQ(bw, b < 8 ? c.intra_node_bytes_per_s : c.inter_node_bytes_per_s) << b;
  }
  // Every link id is an edge of the graph with the same properties.
  std::size_t edges = 0;
  for (auto [e, end] = boost::edges(g); e != end; ++e, ++edges)
    EXPECT_EQ(g[*e].bytes_per_s, t.link(g[*e].id).bytes_per_s);
  EXPECT_EQ(edges, static_cast<std::size_t>(t.num_links()));
}

TEST(Topology, CollectiveTimesComeFromCollectivesH) {
  ClusterSpec c = *make_cluster("H100-80GB", 32, 8);
  c.collective_model = CollectiveModel::kAlphaBeta;  // the plain line; NCCL's choice below
  const Topology t(c);
  const std::int64_t bytes = 64 << 20;
  auto total = [](const sim::NetDemand& d) { return d.latency_s + d.transfer_s; };
  // Inside a node: a ring over NVLink.
  const std::vector<std::int64_t> node = {0, 1, 2, 3, 4, 5, 6, 7};
  EXPECT_NEAR(total(t.collective_demand(Collective::kAllReduce, bytes, node,
                                        sim::SumAlgorithm::kRing, identity)),
              ring_collective_time_s(Collective::kAllReduce, bytes, 8, c.intra_node_bytes_per_s,
                                     c.intra_node_latency_s),
              1e-12);
  // One GPU per node: a ring over InfiniBand.
  const std::vector<std::int64_t> spread = {0, 8, 16, 24};
  EXPECT_NEAR(total(t.collective_demand(Collective::kReduceScatter, bytes, spread,
                                        sim::SumAlgorithm::kRing, identity)),
              ring_collective_time_s(Collective::kReduceScatter, bytes, 4,
                                     c.inter_node_bytes_per_s, c.inter_node_latency_s),
              1e-12);
  // Several GPUs on several nodes: hierarchical all-reduce.
  const std::vector<std::int64_t> both = {0, 1, 8, 9};
  EXPECT_NEAR(total(t.collective_demand(Collective::kAllReduce, bytes, both,
                                        sim::SumAlgorithm::kRing, identity)),
              hierarchical_all_reduce_time_s(bytes, 2, 2, c.intra_node_bytes_per_s,
                                             c.intra_node_latency_s, c.inter_node_bytes_per_s,
                                             c.inter_node_latency_s),
              1e-12);
  // DataParallel's gather and broadcast.
  EXPECT_NEAR(total(t.collective_demand(Collective::kAllReduce, bytes, node,
                                        sim::SumAlgorithm::kGatherBroadcast, identity)),
              gather_broadcast_time_s(bytes, 8, c.intra_node_bytes_per_s, c.intra_node_latency_s),
              1e-12);
  // Point to point across nodes.
  const sim::NetDemand p2p = t.collective_demand(Collective::kSendRecv, bytes, {3, 11},
                                                 sim::SumAlgorithm::kRing, identity);
  EXPECT_NEAR(total(p2p), ring_collective_time_s(Collective::kSendRecv, bytes, 2,
                                                 c.inter_node_bytes_per_s,
                                                 c.inter_node_latency_s),
              1e-12);
  EXPECT_EQ(p2p.links.size(), 2u);
}

// A measured profile's MPI rendezvous protocol: each ring step whose message is over the eager
// limit pays the handshake on top of the line; below it, the line alone.
TEST(Topology, RendezvousStepsOverTheEagerLimitPayTheHandshake) {
  ClusterSpec c = *make_cluster("H100-80GB", 8, 8);
  c.collective_model = CollectiveModel::kAlphaBeta;
  const ClusterSpec plain = c;
  c.eager_limit_bytes = 4096;
  c.rendezvous_latency_s = 5e-6;
  const Topology t(c), p(plain);
  auto total = [](const sim::NetDemand& d) { return d.latency_s + d.transfer_s; };
  const std::vector<std::int64_t> two = {0, 1};
  for (const auto& [bytes, extra] : {std::pair<std::int64_t, double>{8192, 0.0},
                                     {8194, 2 * 5e-6}, {1 << 20, 2 * 5e-6}}) {
    // All-reduce over two ranks: two steps of half the message each.
    const double with = total(t.collective_demand(Collective::kAllReduce, bytes, two,
                                                  sim::SumAlgorithm::kRing, identity));
    const double without = total(p.collective_demand(Collective::kAllReduce, bytes, two,
                                                     sim::SumAlgorithm::kRing, identity));
    EXPECT_NEAR(with - without, extra, 1e-15) << bytes;
  }
  // A pipeline send: one step of the whole message.
  const auto send = [&](const Topology& topo, std::int64_t bytes) {
    return total(topo.collective_demand(Collective::kSendRecv, bytes, two,
                                        sim::SumAlgorithm::kRing, identity));
  };
  EXPECT_NEAR(send(t, 4096) - send(p, 4096), 0.0, 1e-15);
  EXPECT_NEAR(send(t, 4097) - send(p, 4097), 5e-6, 1e-15);
}

// The GPU presets' model: NCCL's algorithm and protocol (collectives.h) on top of the
// network's own transfer, which stays the part that contends for links.
TEST(Topology, NcclModelAddsTheChosenPairsLatencyToTheTransfer) {
  const ClusterSpec c = *make_cluster("H100-80GB", 32, 8);
  ASSERT_EQ(c.collective_model, CollectiveModel::kNccl);
  ClusterSpec plain = c;
  plain.collective_model = CollectiveModel::kAlphaBeta;
  const Topology t(c), p(plain);
  std::vector<std::int64_t> all;
  for (std::int64_t g = 0; g < 32; ++g) all.push_back(g);
  for (std::int64_t bytes : {std::int64_t{4096}, std::int64_t{1} << 20, std::int64_t{1} << 30}) {
    const sim::NetDemand n =
        t.collective_demand(Collective::kAllReduce, bytes, all, sim::SumAlgorithm::kRing, identity);
    const sim::NetDemand a =
        p.collective_demand(Collective::kAllReduce, bytes, all, sim::SumAlgorithm::kRing, identity);
    EXPECT_DOUBLE_EQ(n.transfer_s, a.transfer_s) << bytes;
    const NcclChoice want = nccl_choice(Collective::kAllReduce, bytes, 4, 8, a.transfer_s,
                                        c.intra_node_latency_s, c.inter_node_latency_s, false);
    EXPECT_NEAR(n.latency_s + n.transfer_s, want.time_s, 1e-15) << bytes;
    EXPECT_EQ(n.links, a.links) << bytes;
  }
  // Point-to-point is outside NCCL's tuner: the same line in both models.
  const auto s2 = [&](const Topology& topo) {
    const sim::NetDemand d = topo.collective_demand(Collective::kSendRecv, 1 << 20, {3, 11},
                                                    sim::SumAlgorithm::kRing, identity);
    return d.latency_s + d.transfer_s;
  };
  EXPECT_DOUBLE_EQ(s2(t), s2(p));
}

TEST(Engine, FlowsOnTheSameLinkShareItsBandwidth) {
  sim::Engine e(4);
  const std::int32_t s0 = e.add_stream(), s1 = e.add_stream(), s2 = e.add_stream();
  auto flow = [&](std::int32_t stream, std::vector<std::int32_t> links) {
    sim::NetDemand d;
    d.transfer_s = 1.0;
    d.links = std::move(links);
    const std::int32_t op = e.add_op(stream, 0);
    e.join(op, e.add_collective(e.add_net(d), 1));
    return op;
  };
  const std::int32_t a = flow(s0, {0});
  const std::int32_t b = flow(s1, {0, 1});
  const std::int32_t c = flow(s2, {2});
  e.run();
  // a and b share link 0 at half speed; c has link 2 alone.
  EXPECT_EQ(e.op(a).end, 2'000'000'000);
  EXPECT_EQ(e.op(b).end, 2'000'000'000);
  EXPECT_EQ(e.op(c).end, 1'000'000'000);
}

TEST(Engine, ALateFlowSlowsTheRestOfAnEarlyOne) {
  sim::Engine e(1);
  const std::int32_t s0 = e.add_stream(), s1 = e.add_stream();
  sim::NetDemand d;
  d.transfer_s = 1.0;
  d.links = {0};
  const std::int32_t a = e.add_op(s0, 0);
  e.join(a, e.add_collective(e.add_net(d), 1));
  const std::int32_t wait = e.add_op(s1, 500'000'000);  // 0.5 s of compute
  const std::int32_t b = e.add_op(s1, 0);
  e.join(b, e.add_collective(e.add_net(d), 1));
  (void)wait;
  e.run();
  // a: 0.5 s alone, then shares: its last 0.5 s of work takes 1 s -> ends at 1.5 s.
  EXPECT_EQ(e.op(a).end, 1'500'000'000);
  // b: starts at 0.5 s, 0.5 s of work at half speed (1 s), then 0.5 s alone -> 2.0 s.
  EXPECT_EQ(e.op(b).end, 2'000'000'000);
}

// Contention (engine.h): compute on a lane slows by ratio(op, held) only while a collective
// holding something is in flight on that lane. Closed form: W of compute beside a collective of
// C < W r: the compute runs C at 1/r, then W - C/r alone, ending at W + C (1 - 1/r).
TEST(Engine, ComputeSlowsOnlyWhileACollectiveIsInFlightOnItsLane) {
  for (const bool hold : {false, true}) {
    sim::Engine e(1);
    const std::int32_t compute = e.add_stream(0, true), comm = e.add_stream(0);
    const std::int32_t other = e.add_stream(1, true);
    sim::NetDemand d;
    d.transfer_s = 4e-6;  // C = 4 us
    d.links = {0};
    if (hold) d.hold.sms = 24;
    const std::int32_t coll = e.add_op(comm, 0);
    e.join(coll, e.add_collective(e.add_net(d), 1));
    const std::int32_t work = e.add_op(compute, 10'000);  // W = 10 us
    const std::int32_t after = e.add_op(compute, 1'000);  // starts once the collective ended
    const std::int32_t elsewhere = e.add_op(other, 10'000);  // another lane: never held
    const double r = 1.5;
    e.set_contention([&](std::int32_t op, const CommHold& held) {
      EXPECT_TRUE(op == work);
      EXPECT_EQ(held.sms, 24);
      return r;
    });
    e.run();
    EXPECT_EQ(e.op(coll).end, 4'000);
    const TimeNs w = hold ? static_cast<TimeNs>(std::llround(10'000 + 4'000 * (1 - 1 / r))) : 10'000;
    EXPECT_EQ(e.op(work).end, w);
    EXPECT_EQ(e.op(after).end, w + 1'000);
    EXPECT_EQ(e.op(elsewhere).end, 10'000);
  }
}

// Two collectives in flight on a lane hold the sum; a compute op that starts inside one runs at
// the contended rate from its start. C >= W r: the compute ends at W r.
TEST(Engine, HoldsAddUpAndComputeStartingInsideACollectiveIsSlowedFromItsStart) {
  sim::Engine e(2);
  const std::int32_t compute = e.add_stream(0, true), c1 = e.add_stream(0), c2 = e.add_stream(0);
  auto flow = [&](std::int32_t stream, std::int32_t link, double s, double sms) {
    sim::NetDemand d;
    d.transfer_s = s;
    d.links = {link};
    d.hold.sms = sms;
    const std::int32_t op = e.add_op(stream, 0);
    e.join(op, e.add_collective(e.add_net(d), 1));
    return op;
  };
  flow(c1, 0, 20e-6, 8);
  flow(c2, 1, 20e-6, 16);
  const std::int32_t gap = e.add_op(compute, 1'000);
  const std::int32_t work = e.add_op(compute, 5'000);
  std::vector<double> seen;
  e.set_contention([&](std::int32_t op, const CommHold& held) {
    seen.push_back(held.sms);
    return op == work ? 2.0 : 1.0;
  });
  e.run();
  // Both are in flight from 0: the gap is rated at 24 SMs held (ratio 1), the work at 2.
  EXPECT_EQ(e.op(gap).end, 1'000);
  EXPECT_EQ(e.op(work).end, 1'000 + 10'000);
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen.back(), 24);
}

TEST(Engine, CollectiveStartsWhenEveryParticipantArrives) {
  sim::Engine e(1);
  const std::int32_t s0 = e.add_stream(), s1 = e.add_stream();
  sim::NetDemand d;
  d.latency_s = 1e-6;
  const std::int32_t net = e.add_net(d);
  const std::int32_t coll = e.add_collective(net, 2);
  const std::int32_t a = e.add_op(s0, 0);
  e.add_op(s1, 1000);
  const std::int32_t b = e.add_op(s1, 0);
  e.join(a, coll);
  e.join(b, coll);
  e.run();
  EXPECT_EQ(e.op(a).start, 0);
  EXPECT_EQ(e.began(a), 1000);
  EXPECT_EQ(e.op(a).end, 2000);
  EXPECT_EQ(e.op(b).end, 2000);
}

// One rank of a rank-skew test: its compute stream and a communication stream on its lane.
struct SkewLane {
  SkewLane(sim::Engine& engine, std::int32_t lane)
      : e(engine), compute(engine.add_stream(lane, true)), comm(engine.add_stream(lane)) {}
  // `ns` of compute, then the lane's op in `collective` on the communication stream after it.
  // Returns {compute op, collective op}.
  std::pair<std::int32_t, std::int32_t> compute_then_join(TimeNs ns, std::int32_t collective) {
    const std::int32_t work = e.add_op(compute, ns);
    const std::int32_t op = e.add_op(comm, 0);
    e.add_dep(work, op);
    e.join(op, collective);
    return {work, op};
  }
  sim::Engine& e;
  std::int32_t compute, comm;
};

// Rank skew: two lanes compute 1000 ns each and meet; with a spread of 0.1 each arrival has an sd
// of 100 ns, and the expected later of two is 100 / sqrt(pi) = 56.4 ns after the mean.
TEST(Engine, ACollectiveWaitsForTheExpectedStraggler) {
  sim::Engine e(1);
  e.set_compute_spread(0.1);
  sim::NetDemand d;
  d.latency_s = 1e-6;
  const std::int32_t coll = e.add_collective(e.add_net(d), 2);
  SkewLane r0(e, 0), r1(e, 1);
  const std::int32_t a = r0.compute_then_join(1000, coll).second;
  const std::int32_t b = r1.compute_then_join(1000, coll).second;
  e.run();
  EXPECT_EQ(e.began(a), 1000);  // every member had arrived
  EXPECT_EQ(e.op(a).end, 1000 + 56 + 1000);
  EXPECT_EQ(e.op(b).end, 1000 + 56 + 1000);
}

// Symmetric simulation: one op standing for 4 members that arrive alike waits for the expected
// latest of 4 (1.02938 sd); a one-member collective waits for nobody.
TEST(Engine, OneOpStandingForSeveralRanksWaitsForTheirStraggler) {
  sim::Engine e(1);
  e.set_compute_spread(0.1);
  const std::int32_t net = e.add_net({});
  SkewLane r(e, 0);
  const std::int32_t four = r.compute_then_join(1000, e.add_collective(net, 1, 4)).second;
  const auto [more, alone] = r.compute_then_join(1000, e.add_collective(net, 1));
  e.add_dep(four, more);
  e.run();
  EXPECT_EQ(e.op(four).end, 1000 + 103);
  EXPECT_EQ(e.op(alone).end, e.op(more).end);
}

// The skew starts again after a collective the compute waited for, and keeps growing past one
// it did not wait for (an overlapped gradient bucket).
TEST(Engine, SkewGrowsUntilComputeWaitsForACollective) {
  auto second_wait = [](bool compute_waits) {
    sim::Engine e(1);
    e.set_compute_spread(0.1);
    const std::int32_t net = e.add_net({});
    SkewLane r(e, 0);
    const std::int32_t first = r.compute_then_join(1000, e.add_collective(net, 1, 2)).second;
    const auto [w2, second] = r.compute_then_join(1000, e.add_collective(net, 1, 2));
    if (compute_waits) e.add_dep(first, w2);
    e.run();
    return e.op(second).end - e.op(w2).end;
  };
  EXPECT_EQ(second_wait(true), 56);    // 1000 ns since the wait: 100 / sqrt(pi)
  EXPECT_EQ(second_wait(false), 113);  // 2000 ns of skew
}

// Without a spread nothing waits beyond the last arrival (the default, the GPU presets).
TEST(Engine, WithoutSpreadACollectiveBeginsAtTheLastArrival) {
  sim::Engine e(1);
  SkewLane r(e, 0);
  const std::int32_t coll =
      r.compute_then_join(1000, e.add_collective(e.add_net({}), 1, 64)).second;
  e.run();
  EXPECT_EQ(e.op(coll).end, 1000);
}

// Gradient buckets queued on one stream: the second was ready (its compute done) long before
// the first ended, so it waits for no straggler again; its skew is absorbed by the queue.
TEST(Engine, ACollectiveQueuedBehindAnotherWaitsForNoStragglerAgain) {
  sim::Engine e(1);
  e.set_compute_spread(0.1);
  sim::NetDemand slow, quick;
  slow.latency_s = 1e-5;   // 10 000 ns
  quick.latency_s = 1e-7;  // 100 ns
  SkewLane r(e, 0);
  const std::int32_t first =
      r.compute_then_join(1000, e.add_collective(e.add_net(slow), 1, 2)).second;
  const std::int32_t second =
      r.compute_then_join(1000, e.add_collective(e.add_net(quick), 1, 2)).second;
  e.run();
  EXPECT_EQ(e.op(first).end, 1000 + 56 + 10'000);
  EXPECT_EQ(e.op(second).start, e.op(first).end);
  EXPECT_EQ(e.op(second).end, e.op(first).end + 100);
}

}  // namespace
}  // namespace trainplan
