// The planner's estimate against the event simulator where the two model one mechanism each
// their own way (the estimate in closed form, the simulator as events).
#include <gtest/gtest.h>

#include <cmath>

#include "planner/estimate.h"
#include "simulator/simulator.h"
#include "tests/simulator/test_util.h"

namespace trainplan {
namespace {

// Plan::tp_comm_overlap: the step time each saves by overlapping the sequence-parallel
// collectives with their GEMMs agrees within 10% (a GPT layer of h=4096 at tp=8, where the
// collectives are a large share of the step).
TEST(EstimateVsSimulator, TpCommOverlapSavesTheSame) {
  const ModelSpec m = testing::gpt_model(8, 4096, 32, 2048, 50257);
  Plan p = testing::make_plan(8, 1, 2, 1, 16);
  p.sequence_parallel = true;
  const ClusterSpec c = *make_cluster("H100-80GB", 16, 8);
  Estimator est(m, c, std::nullopt);
  auto step = [&](bool overlap, TpOverlapImpl impl) {
    Plan q = p;
    q.tp_comm_overlap = overlap;
    if (overlap) q.tp_comm_overlap_impl = impl;
    EXPECT_TRUE(validate_plan(q).ok());
    auto sim = simulate_step(m, c, q, SimOptions{});
    EXPECT_TRUE(sim.ok()) << sim.status().message();
    return std::make_pair(est.estimate(q).step_time_s, sim.ok() ? sim->report.step_time_s : 0.0);
  };
  const auto [est_plain, sim_plain] = step(false, TpOverlapImpl::kTeUserbuffers);
  // At micro-batches of one sequence torch's 256-row chunks lose more than they hide (each
  // fills a fraction of one wave); the comparison of the two is at 8 sequences below.
  const auto [est_overlap, sim_overlap] = step(true, TpOverlapImpl::kTeUserbuffers);
  const double est_saving = est_plain - est_overlap, sim_saving = sim_plain - sim_overlap;
  EXPECT_GT(sim_saving, 0.05 * sim_plain);
  EXPECT_NEAR(est_saving, sim_saving, 0.1 * sim_saving);
  // Transformer Engine's userbuffers and PyTorch's async TP (Plan::tp_comm_overlap_impl) at
  // micro-batches of 8 sequences: the two agree on each saving, torch's the smaller.
  p.micro_batch_size = 8;
  p.global_batch_size = 128;
  const auto [est_plain8, sim_plain8] = step(false, TpOverlapImpl::kTeUserbuffers);
  double last_saving = 0;
  for (TpOverlapImpl impl : {TpOverlapImpl::kTeUserbuffers, TpOverlapImpl::kTorchAsync}) {
    SCOPED_TRACE(std::string(to_string(impl)));
    const auto [est_o, sim_o] = step(true, impl);
    const double est_s = est_plain8 - est_o, sim_s = sim_plain8 - sim_o;
    EXPECT_GT(sim_s, 0.02 * sim_plain8);
    EXPECT_NEAR(est_s, sim_s, 0.1 * sim_s);
    if (impl == TpOverlapImpl::kTorchAsync) {
      EXPECT_LT(sim_s, last_saving);
    }
    last_saving = sim_s;
  }
}

// Plan::defer_embedding_wgrad: with a large vocabulary the last stage bounds the pipeline, and
// deferring its head weight gradients to the flush saves about the drain both ways; the estimate
// and the simulator agree on the saving within 25%, and on the memory it costs within 10%.
TEST(EstimateVsSimulator, DeferredHeadWeightGradientsSaveTheSame) {
  const ModelSpec m = testing::gpt_model(8, 2048, 16, 2048, 256000);
  Plan p = testing::make_plan(2, 4, 1, 1, 16);
  p.sequence_parallel = true;
  const ClusterSpec c = *make_cluster("H100-80GB", 8, 8);
  Estimator est(m, c, std::nullopt);
  struct Step { double est_s, sim_s, est_mem, sim_mem; };
  auto step = [&](bool defer) {
    Plan q = p;
    q.defer_embedding_wgrad = defer;
    q.wgrad_deferral_limit = defer ? 4 : 0;
    EXPECT_TRUE(validate_plan(q).ok());
    auto sim = simulate_step(m, c, q, SimOptions{});
    EXPECT_TRUE(sim.ok()) << sim.status().message();
    const Estimate e = est.estimate(q);
    return Step{e.step_time_s, sim.ok() ? sim->report.step_time_s : 0.0, e.peak_memory_bytes,
                sim.ok() ? sim->report.ranks.back().peak_memory_bytes : 0.0};
  };
  const Step plain = step(false), deferred = step(true);
  const double est_saving = plain.est_s - deferred.est_s, sim_saving = plain.sim_s - deferred.sim_s;
  EXPECT_GT(sim_saving, 0.0);
  EXPECT_NEAR(est_saving, sim_saving, 0.25 * sim_saving)
      << "estimate " << plain.est_s << " -> " << deferred.est_s << ", simulator " << plain.sim_s
      << " -> " << deferred.sim_s;
  const double est_mem = deferred.est_mem - plain.est_mem, sim_mem = deferred.sim_mem - plain.sim_mem;
  EXPECT_NEAR(est_mem, sim_mem, 0.1 * sim_mem) << est_mem << " vs " << sim_mem;
}

// Plan::zero_shard_size: ZeRO-3 over one node's 8 ranks instead of all 512 puts the per-layer
// gathers and reduce-scatters on 8-rank rings inside the node (7 steps of NVLink latency, not
// 511 across nodes) and adds one all-reduce across 64 nodes per step. A model small enough
// for ring latency to dominate its collectives (24 layers of h=1024): the estimate and the
// simulator agree on the step time hybrid sharding saves, and on the memory it costs.
TEST(EstimateVsSimulator, HybridShardingSavesTheSame) {
  const ModelSpec m = testing::gpt_model(24, 1024, 16, 2048, 50257);
  Plan p = testing::make_plan(1, 1, 512, 1, 1024);
  p.zero_stage = 3;
  const ClusterSpec c = *make_cluster("H100-80GB", 512, 8);
  Estimator est(m, c, std::nullopt);
  struct Step { double est_s, sim_s, est_mem, sim_mem; };
  auto step = [&](std::int64_t shard) {
    Plan q = p;
    q.zero_shard_size = shard;
    EXPECT_TRUE(validate_plan(q).ok());
    auto sim = simulate_step(m, c, q, SimOptions{});
    EXPECT_TRUE(sim.ok()) << sim.status().message();
    const Estimate e = est.estimate(q);
    return Step{e.step_time_s, sim.ok() ? sim->report.step_time_s : 0.0, e.peak_memory_bytes,
                sim.ok() ? sim->report.ranks.front().peak_memory_bytes : 0.0};
  };
  const Step plain = step(0), node = step(8);
  const double est_saving = plain.est_s - node.est_s, sim_saving = plain.sim_s - node.sim_s;
  std::printf("step: estimate %.4f -> %.4f s, simulator %.4f -> %.4f s\n", plain.est_s,
              node.est_s, plain.sim_s, node.sim_s);
  std::printf("memory: estimate %.3f -> %.3f GB, simulator %.3f -> %.3f GB\n",
              plain.est_mem / 1e9, node.est_mem / 1e9, plain.sim_mem / 1e9, node.sim_mem / 1e9);
  EXPECT_GT(sim_saving, 0.1 * plain.sim_s);
  EXPECT_NEAR(est_saving, sim_saving, 0.25 * sim_saving);
  EXPECT_NEAR(node.est_mem - plain.est_mem, node.sim_mem - plain.sim_mem,
              0.05 * (node.sim_mem - plain.sim_mem));
}

// MoE parallel folding (Plan::expert_layout folded) at TP 4, EP 8 on 32 H100s: the estimate places
// the expert groups as the simulator does (carved: the ep replicas stride tp*cp, across the 4
// nodes; folded with expert_tp 1: 8 consecutive ranks, one node; expert_tp 4: stride 4, with the
// expert tensor-parallel gather and scatter inside a node), so the two agree within 10% on each
// layout's step and on the time folding saves.
TEST(EstimateVsSimulator, FoldedExpertGroupsArePlacedAlike) {
  const ModelSpec m = testing::moe_model();
  Plan p = testing::make_plan(4, 1, 8, 1, 256);  // 32 micro-batches: the all-to-alls dominate
  p.sequence_parallel = true;
  p.zero_stage = 1;
  p.ep = 8;
  const ClusterSpec c = *make_cluster("H100-80GB", 32, 8);
  Estimator est(m, c, std::nullopt);
  auto step = [&](ExpertLayout layout, std::int64_t expert_tp) {
    Plan q = p;
    q.expert_layout = layout;
    q.expert_tp = expert_tp;
    EXPECT_TRUE(validate_plan(q).ok()) << validate_plan(q).message();
    auto sim = simulate_step(m, c, q, SimOptions{});
    EXPECT_TRUE(sim.ok()) << sim.status().message();
    return std::make_pair(est.estimate(q).step_time_s, sim.ok() ? sim->report.step_time_s : 0.0);
  };
  const auto [est_carved, sim_carved] = step(ExpertLayout::kCarved, 0);
  const auto [est_folded, sim_folded] = step(ExpertLayout::kFolded, 1);
  const auto [est_etp, sim_etp] = step(ExpertLayout::kFolded, 4);
  std::printf("carved: estimate %.4f s, simulator %.4f s; folded etp 1: %.4f, %.4f; etp 4: "
              "%.4f, %.4f\n", est_carved, sim_carved, est_folded, sim_folded, est_etp, sim_etp);
  EXPECT_NEAR(est_carved, sim_carved, 0.1 * sim_carved);
  EXPECT_NEAR(est_folded, sim_folded, 0.1 * sim_folded);
  EXPECT_NEAR(est_etp, sim_etp, 0.1 * sim_etp);
  EXPECT_LT(sim_folded, sim_carved);
  EXPECT_NEAR(est_carved - est_folded, sim_carved - sim_folded, 0.1 * (sim_carved - sim_folded));
}

// Interleaved 1F1B with layers that do not divide over pp * v chunks (30 layers over 4 stages):
// each chunk position takes as long as its largest chunk. The estimate stays within 5% of the
// simulator for every v, and orders them as the simulator does (it used to favour the v whose
// chunks were most unequal: Llama 3 405B on 1024 GPUs, +7.6% median error before).
TEST(EstimateVsSimulator, InterleavingWithUnequalChunks) {
  const ModelSpec m = testing::gpt_model(30, 2048, 16, 2048, 50257);
  const ClusterSpec c = *make_cluster("H100-80GB", 4, 4);
  Estimator est(m, c, std::nullopt);
  std::vector<double> est_s, sim_s;
  for (std::int64_t v : {2, 3, 5, 7}) {
    Plan p = testing::make_plan(1, 4, 1, 1, 16, Schedule::kInterleaved);
    p.virtual_stages = v;
    p.layers_per_stage = balanced_chunk_layers(m.num_layers, p.num_chunks());
    ASSERT_TRUE(validate_plan(p).ok()) << validate_plan(p).message();
    auto sim = simulate_step(m, c, p, SimOptions{});
    ASSERT_TRUE(sim.ok()) << sim.status().message();
    est_s.push_back(est.estimate(p).step_time_s);
    sim_s.push_back(sim->report.step_time_s);
    std::printf("v=%lld: estimate %.4f s, simulator %.4f s\n", static_cast<long long>(v),
                est_s.back(), sim_s.back());
    EXPECT_NEAR(est_s.back(), sim_s.back(), 0.05 * sim_s.back()) << "v=" << v;
  }
  // Where the simulator tells two apart by more than 3%, the estimate orders them the same way
  // (v=2 against v=3, 5 and 7 here).
  int compared = 0;
  for (std::size_t i = 0; i < est_s.size(); ++i) {
    for (std::size_t j = 0; j < est_s.size(); ++j) {
      if (sim_s[i] >= 0.97 * sim_s[j]) continue;
      ++compared;
      EXPECT_LT(est_s[i], est_s[j]) << i << " vs " << j;
    }
  }
  EXPECT_GT(compared, 0);
}

// zb-h1 (Qi et al. 2023): the estimate's closed form, fill and drain (pp-1)(T_F+T_B-T_W)
// instead of 1F1B's (pp-1)(T_F+T_B+T_W), against the simulator's played B and W steps, with few
// micro-batches (M = pp) so that the fill and drain are a large share of the step.
TEST(EstimateVsSimulator, ZbH1SavesWhatTheSimulatorSaves) {
  const ModelSpec m = testing::gpt_model(16, 2048, 16, 2048, 50257);
  const ClusterSpec c = *make_cluster("H100-80GB", 4, 4);
  Estimator est(m, c, std::nullopt);
  auto step = [&](Schedule s) {
    const Plan p = testing::make_plan(1, 4, 1, 1, 4, s);
    EXPECT_TRUE(validate_plan(p).ok());
    auto sim = simulate_step(m, c, p, SimOptions{});
    EXPECT_TRUE(sim.ok()) << sim.status().message();
    return std::make_pair(est.estimate(p).step_time_s, sim.ok() ? sim->report.step_time_s : 0.0);
  };
  const auto [est_1f1b, sim_1f1b] = step(Schedule::k1F1B);
  const auto [est_zb, sim_zb] = step(Schedule::kZbH1);
  std::printf("1f1b: estimate %.4f s, simulator %.4f s; zb-h1: estimate %.4f s, simulator %.4f s\n",
              est_1f1b, sim_1f1b, est_zb, sim_zb);
  // Measured here: 1f1b estimate 0.0563 s against 0.0524 simulated (+7%, the estimate's error
  // on this small model whatever the schedule), zb-h1 0.0493 against 0.0431 (+14%): the closed
  // form gives back only the fill and drain, while the simulator's W steps also fill the waits
  // for pipeline sends. The bounds hold those figures with a little room.
  EXPECT_GT(sim_1f1b - sim_zb, 0.05 * sim_1f1b);
  EXPECT_LT(est_zb, est_1f1b);
  EXPECT_NEAR(est_zb, sim_zb, 0.2 * sim_zb);
  EXPECT_NEAR(est_1f1b - est_zb, sim_1f1b - sim_zb, 0.4 * (sim_1f1b - sim_zb));
}

// zb-v (Qi et al. 2024): the estimate's closed form (the larger of the V's bound and zb-h1's;
// planner/estimate.cc), against the simulator
// playing core/schedule.cc's V order with real costs, pp = 4 and M = 8 (ZB-V fills its
// pipeline from M = 2pp on).
TEST(EstimateVsSimulator, ZbVStepIsWhatTheSimulatorPlays) {
  const ModelSpec m = testing::gpt_model(16, 2048, 16, 2048, 50257);
  const ClusterSpec c = *make_cluster("H100-80GB", 4, 4);
  Estimator est(m, c, std::nullopt);
  auto step = [&](Schedule s) {
    const Plan p = testing::make_plan(1, 4, 1, 1, 8, s, s == Schedule::kZbV ? 2 : 1);
    EXPECT_TRUE(validate_plan(p).ok());
    auto sim = simulate_step(m, c, p, SimOptions{});
    EXPECT_TRUE(sim.ok()) << sim.status().message();
    return std::make_pair(est.estimate(p).step_time_s, sim.ok() ? sim->report.step_time_s : 0.0);
  };
  const auto [est_h1, sim_h1] = step(Schedule::kZbH1);
  const auto [est_v, sim_v] = step(Schedule::kZbV);
  std::printf("zb-h1: estimate %.4f s, simulator %.4f s; zb-v: estimate %.4f s, simulator %.4f s\n",
              est_h1, sim_h1, est_v, sim_v);
  // The simulator's zb-v gains little on zb-h1 with M = 2pp: its W passes are shorter than B
  // (the equal-time bound assumes them equal) and it sends twice the pipeline messages; the
  // estimate, which takes zb-h1's closed form when it is the larger, stays within 20%. Measured
  // here: zb-h1 0.0807 s estimated / 0.0745 simulated, zb-v 0.0767 / 0.0734.
  EXPECT_LT(sim_v, sim_h1);
  EXPECT_NEAR(est_v, sim_v, 0.2 * sim_v);
}

// DualPipe (DeepSeek-V3 Table 2): the estimate halves each stage's per-micro-batch times (a
// micro-batch passes one of the stage's two chunks) and adds what core/schedule's order idles
// (below Table 2's bound); held against the simulator, and both below 1F1B.
TEST(EstimateVsSimulator, DualPipeStepIsWhatTheSimulatorPlays) {
  const ModelSpec m = testing::gpt_model(16, 2048, 16, 2048, 50257);
  const ClusterSpec c = *make_cluster("H100-80GB", 4, 4);
  Estimator est(m, c, std::nullopt);
  auto step = [&](Schedule s) {
    const Plan p = testing::make_plan(1, 4, 1, 1, 8, s, s == Schedule::kDualPipe ? 2 : 1);
    EXPECT_TRUE(validate_plan(p).ok());
    auto sim = simulate_step(m, c, p, SimOptions{});
    EXPECT_TRUE(sim.ok()) << sim.status().message();
    return std::make_pair(est.estimate(p).step_time_s, sim.ok() ? sim->report.step_time_s : 0.0);
  };
  const auto [est_1f1b, sim_1f1b] = step(Schedule::k1F1B);
  const auto [est_dual, sim_dual] = step(Schedule::kDualPipe);
  std::printf("1f1b: estimate %.4f s, simulator %.4f s; dualpipe: estimate %.4f s, simulator "
              "%.4f s\n",
              est_1f1b, sim_1f1b, est_dual, sim_dual);
  // Measured here: 1f1b 0.1007 s estimated / 0.0968 simulated, dualpipe 0.0726 / 0.0741 (the
  // busiest stage pair idles only what the lighter stages leave; dualpipe_pipeline_s). A first
  // estimate costed the mirror gradient sum as crossing nodes: the pair shares a node here.
  EXPECT_LT(sim_dual, sim_1f1b);
  EXPECT_LT(est_dual, est_1f1b);
  EXPECT_NEAR(est_dual, sim_dual, 0.2 * sim_dual);
}

// DualPipe's F&B pair in closed form (DeepSeek-V3 sec. 3.2.1; planner/estimate.cc): beside
// all-to-alls shorter than what the compute can cover at 1/s of its rate, the pair takes its
// compute plus A (1 - 1/s); beside longer ones, the all-to-alls and the forward's send.
TEST(EstimateVsSimulator, DualPipePairClosedForm) {
  const double s = 132.0 / 112.0;
  EXPECT_NEAR(dualpipe_fb_pair_s(10.0, 3.0, 0.5, s), 10.0 + 3.0 * 20.0 / 132.0, 1e-12);
  EXPECT_NEAR(dualpipe_fb_pair_s(1.0, 3.0, 0.5, s), 3.5, 1e-12);
  EXPECT_DOUBLE_EQ(dualpipe_fb_pair_s(10.0, 0.0, 0.5, 1.0), 10.0);  // dense: the send hidden
  EXPECT_DOUBLE_EQ(dualpipe_fb_pair_s(0.2, 0.0, 0.5, 1.0), 0.5);
}

// DualPipe on pp 4 and 8 with few to many micro-batches (M = 2pp, 3pp, 4pp): the MoE test model
// (F&B pairs hide the all-to-alls; ep 2 in a node, ep 8 over nodes) and a dense one. The
// estimate credits each pair what the simulator's fb_pair plays, and idles the busiest stage
// pair (the end stages, with embedding and head) only what the lighter stages leave
// (planner/estimate.cc, dualpipe_pipeline_s). Measured here: MoE -1.6% to -4.6% (pp 8 ep 8
// M 16: 24.59 ms estimated, 25.77 simulated), dense -1.7% to -2.2%; held within 6%. Before
// (each stage's own idle, (pp/2 - 1) times its unit with embedding and head in it): pp 8 ep 2
// M 16 +8.1% (32.88 / 30.41 ms), ranking 1F1B (32.43 ms estimated, 32.66 simulated) ahead.
// The ranking against 1F1B is the simulator's wherever the two simulated steps are more than
// 2% apart.
TEST(EstimateVsSimulator, DualPipeStepOnPp4And8WithFewToManyMicroBatches) {
  struct Case {
    bool moe;
    std::int64_t pp, ep;
  };
  for (const Case k : {Case{true, 4, 2}, Case{true, 4, 8}, Case{true, 8, 2}, Case{true, 8, 8},
                       Case{false, 4, 1}, Case{false, 8, 1}}) {
    const ModelSpec m =
        k.moe ? testing::moe_model() : testing::gpt_model(8, 2048, 16, 2048, 50257);
    for (std::int64_t M : {2 * k.pp, 3 * k.pp, 4 * k.pp}) {
      SCOPED_TRACE((k.moe ? "moe pp " : "dense pp ") + std::to_string(k.pp) + " ep " +
                   std::to_string(k.ep) + " M " + std::to_string(M));
      auto run = [&](Schedule sched, std::int64_t v) {
        Plan p = testing::make_plan(1, k.pp, k.ep, 1, M * k.ep, sched, v);
        p.ep = k.moe ? k.ep : 1;
        EXPECT_TRUE(validate_plan(p).ok());
        const ClusterSpec c = testing::cluster_for(p);
        Estimator est(m, c, std::nullopt);
        const SimResult r = testing::simulate_ok(m, c, p);
        return std::make_pair(est.estimate(p).step_time_s, r.report.step_time_s);
      };
      const auto [est_dual, sim_dual] = run(Schedule::kDualPipe, 2);
      const auto [est_1f1b, sim_1f1b] = run(Schedule::k1F1B, 1);
      std::printf("%s pp %lld ep %lld M %lld: dualpipe estimate %.2f ms, simulator %.2f ms "
                  "(%+.1f%%); 1f1b %.2f / %.2f ms\n",
                  k.moe ? "moe" : "dense", static_cast<long long>(k.pp),
                  static_cast<long long>(k.ep), static_cast<long long>(M), 1e3 * est_dual,
                  1e3 * sim_dual, 100.0 * (est_dual / sim_dual - 1.0), 1e3 * est_1f1b,
                  1e3 * sim_1f1b);
      EXPECT_NEAR(est_dual, sim_dual, 0.06 * sim_dual);
      if (std::abs(sim_dual - sim_1f1b) > 0.02 * sim_1f1b) {
        EXPECT_EQ(est_dual < est_1f1b, sim_dual < sim_1f1b);
      }
    }
  }
}

// ZeRO-Infinity's tiers: the estimate's offload (prefetched shard streams hidden behind
// compute, the host step and NVMe state I/O exposed) against the simulator's host-stream ops.
TEST(EstimateVsSimulator, OffloadTiersCostWhatTheSimulatorPlays) {
  const ModelSpec m = testing::gpt_model(8, 2048, 16, 2048, 50257);
  const ClusterSpec c = *make_cluster("H100-80GB", 8, 8);
  Estimator est(m, c, std::nullopt);
  for (OffloadDevice device : {OffloadDevice::kCpu, OffloadDevice::kNvme}) {
    Plan p = testing::make_plan(1, 1, 8, 1, 32);
    p.zero_stage = 3;
    p.offload = Offload::kOptimizerParams;
    p.offload_device = device;
    ASSERT_TRUE(validate_plan(p).ok()) << validate_plan(p).message();
    auto sim = simulate_step(m, c, p, SimOptions{});
    ASSERT_TRUE(sim.ok()) << sim.status().message();
    const double e = est.estimate(p).step_time_s, s = sim->report.step_time_s;
    std::printf("%s: estimate %.4f s, simulator %.4f s\n",
                std::string(to_string(device)).c_str(), e, s);
    // Measured: cpu 0.0974 s estimated against 0.1185 simulated (-18%: the estimate hides the
    // whole parameter stream behind the step's compute, the simulator prefetches one block
    // ahead, so some transfers stall a block); nvme 0.8098 against 0.7743 (+5%).
    EXPECT_NEAR(e, s, 0.25 * s) << to_string(device);
  }
}

}  // namespace
}  // namespace trainplan
