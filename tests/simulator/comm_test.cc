// Communication bytes on the simulated timeline against the cost model's closed form
// (comm_volume_on_stage): every collective the simulator plays comes from the cost model's task
// lists, so the bytes per rank and group must match exactly, for every stage and many plans.
#include "core/cost/cost_model.h"
#include "tests/simulator/test_util.h"

namespace trainplan {
namespace {

struct Case {
  std::string name;
  ModelSpec model;
  Plan plan;
};

std::vector<Case> cases() {
  std::vector<Case> out;
  const ModelSpec gpt = testing::gpt_model(8, 1024, 16, 1024, 50257);
  auto plan = [](std::int64_t tp, std::int64_t pp, std::int64_t dp, std::int64_t mbs,
                 std::int64_t gbs, Schedule s = Schedule::k1F1B, std::int64_t v = 1) {
    return testing::make_plan(tp, pp, dp, mbs, gbs, s, v);
  };
  out.push_back({"tp2 pp2 dp2", gpt, plan(2, 2, 2, 2, 16)});
  Plan sp = plan(4, 2, 2, 1, 16);
  sp.sequence_parallel = true;
  out.push_back({"sequence parallel", gpt, sp});
  for (int z = 0; z <= 3; ++z) {
    Plan p = plan(2, 2, 4, 1, 16);
    p.zero_stage = z;
    out.push_back({"zero", gpt, p});
  }
  Plan z3r = plan(2, 1, 4, 1, 8);
  z3r.zero_stage = 3;
  z3r.recompute = Recompute::kFull;
  out.push_back({"zero3 full recompute", gpt, z3r});
  out.push_back({"interleaved", gpt, plan(2, 2, 2, 1, 8, Schedule::kInterleaved, 2)});
  out.push_back({"gpipe", gpt, plan(1, 4, 2, 1, 16, Schedule::kGpipe)});
  Plan moe = plan(2, 2, 4, 1, 16);
  moe.ep = 2;
  out.push_back({"moe ep2", testing::moe_model(), moe});
  Plan moe1 = moe;
  moe1.zero_stage = 1;
  moe1.sequence_parallel = true;
  out.push_back({"moe ep2 zero1 sp", testing::moe_model(), moe1});
  Plan off = plan(2, 2, 2, 1, 8);
  off.zero_stage = 2;
  off.offload = Offload::kOptimizer;
  out.push_back({"zero2 offload", gpt, off});
  Plan uneven = plan(1, 3, 2, 1, 12);
  uneven.layers_per_stage = {2, 4, 2};
  out.push_back({"uneven stages", gpt, uneven});
  // Context parallelism: K,V all-gathers and dK,dV reduce-scatters in the cp group, gradients
  // over dp x cp (ZeRO-3 and full recompute gather K,V once more), experts over dp/ep x cp.
  Plan cp = plan(2, 2, 2, 1, 8);
  cp.cp = 2;
  out.push_back({"cp2 tp2 pp2 dp2", gpt, cp});
  Plan cp_z3 = plan(1, 1, 2, 1, 4);
  cp_z3.cp = 4;
  cp_z3.zero_stage = 3;
  cp_z3.recompute = Recompute::kFull;
  cp_z3.sequence_parallel = false;
  out.push_back({"cp4 zero3 full recompute", gpt, cp_z3});
  Plan cp_moe = plan(2, 1, 4, 1, 8);
  cp_moe.cp = 2;
  cp_moe.ep = 2;
  cp_moe.zero_stage = 1;
  cp_moe.sequence_parallel = true;
  out.push_back({"cp2 moe ep2 zero1 sp", testing::moe_model(), cp_moe});
  // Megatron-LM's pipeline scatter/gather: 1/tp sends, a TP all-gather per message received;
  // none at the V's turn (zb-v's chunks 0 and 1 on one stage) or between chunks on one stage.
  for (const Plan& base : {plan(2, 2, 2, 1, 8, Schedule::kInterleaved, 2),
                           plan(4, 2, 1, 1, 8, Schedule::kZbV, 2), plan(2, 4, 1, 1, 8)}) {
    Plan sg = base;
    sg.sequence_parallel = false;
    sg.pipeline_scatter_gather = true;
    out.push_back({"pipeline scatter/gather " + std::string(to_string(sg.schedule)), gpt, sg});
  }
  return out;
}

TEST(Comm, BytesPerRankAndGroupMatchTheClosedForm) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const SimResult r = testing::simulate_ok(c.model, testing::cluster_for(c.plan), c.plan);
    ASSERT_EQ(r.report.ranks.size(), static_cast<std::size_t>(c.plan.pp)) << c.name;
    std::map<std::string, double> total;
    for (const RankStep& rank : r.report.ranks) {
      const CommVolume v = comm_volume_on_stage(c.model, c.plan, rank.stage);
      EXPECT_EQ(rank.comm.at("tp").bytes_sent, v.tp_bytes) << c.name << " stage " << rank.stage;
      EXPECT_EQ(rank.comm.at("pp").bytes_sent, v.pp_bytes) << c.name << " stage " << rank.stage;
      EXPECT_EQ(rank.comm.at("dp").bytes_sent, v.dp_bytes) << c.name << " stage " << rank.stage;
      EXPECT_EQ(rank.comm.at("ep").bytes_sent, v.ep_bytes) << c.name << " stage " << rank.stage;
      // cp is reported for plans that have it, and only for them.
      if (c.plan.cp > 1) {
        EXPECT_EQ(rank.comm.at("cp").bytes_sent, v.cp_bytes) << c.name << " stage " << rank.stage;
        EXPECT_GT(v.cp_bytes, 0.0) << c.name;
      } else {
        EXPECT_EQ(rank.comm.count("cp"), 0u) << c.name;
      }
      const double replicas = static_cast<double>(c.plan.tp * c.plan.cp * c.plan.dp);
      total["tp"] += v.tp_bytes * replicas;
      total["pp"] += v.pp_bytes * replicas;
      total["dp"] += v.dp_bytes * replicas;
      total["ep"] += v.ep_bytes * replicas;
      if (c.plan.cp > 1) total["cp"] += v.cp_bytes * replicas;
    }
    EXPECT_EQ(r.report.bytes_per_group.size(), total.size()) << c.name;
    for (const auto& [g, bytes] : total)
      EXPECT_EQ(r.report.bytes_per_group.at(g), bytes) << c.name << " group " << g;
  }
}

TEST(Comm, FreeCommunicationMovesTheSameBytesInNoTime) {
  const Case c = cases().front();
  SimOptions free;
  free.free_communication = true;
  const SimResult a = testing::simulate_ok(c.model, testing::cluster_for(c.plan), c.plan);
  const SimResult b = testing::simulate_ok(c.model, testing::cluster_for(c.plan), c.plan, free);
  EXPECT_EQ(a.report.bytes_per_group, b.report.bytes_per_group);
  EXPECT_LT(b.report.step_time_s, a.report.step_time_s);
  for (const RankStep& r : b.report.ranks)
    for (const auto& [g, comm] : r.comm) EXPECT_EQ(comm.time_s, 0.0) << g;
}

TEST(Comm, GatherBroadcastIsSlowerThanRingForDataParallel) {
  const ModelSpec m = testing::gpt_model(8, 2048, 16, 1024, 50257);
  const Plan p = testing::make_plan(1, 1, 8, 1, 8);
  SimOptions gb;
  gb.dp_algorithm = DpAlgorithm::kGatherBroadcast;
  const SimResult ring = testing::simulate_ok(m, testing::cluster_for(p), p);
  const SimResult gather = testing::simulate_ok(m, testing::cluster_for(p), p, gb);
  EXPECT_EQ(ring.report.bytes_per_group, gather.report.bytes_per_group);
  EXPECT_GT(gather.report.ranks[0].comm.at("dp").time_s,
            2.0 * ring.report.ranks[0].comm.at("dp").time_s);
}

}  // namespace
}  // namespace trainplan
