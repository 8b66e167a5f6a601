// The planner's estimate against the event simulator where the two model one mechanism each
// their own way (the estimate in closed form, the simulator as events).
#include <gtest/gtest.h>

#include "planner/estimate.h"
#include "simulator/simulator.h"

namespace trainplan {
namespace {

// Plan::tp_comm_overlap: the step time each saves by overlapping the sequence-parallel
// collectives with their GEMMs agrees within 10% (a GPT layer of h=4096 at tp=8, where the
// collectives are a large share of the step).
TEST(EstimateVsSimulator, TpCommOverlapSavesTheSame) {
  ModelSpec m;
  m.name = "gpt";
  m.num_layers = 8;
  m.hidden_size = 4096;
  m.num_attention_heads = 32;
  m.num_kv_heads = 32;
  m.head_dim = 128;
  m.ffn_hidden_size = 4 * 4096;
  m.vocab_size = 50257;
  m.seq_len = 2048;
  m.max_position_embeddings = 2048;
  ASSERT_TRUE(validate_model(m, "gpt").ok());
  Plan p;
  p.tp = 8;
  p.dp = 2;
  p.micro_batch_size = 1;
  p.global_batch_size = 16;
  p.sequence_parallel = true;
  const ClusterSpec c = *make_cluster("H100-80GB", 16, 8);
  Estimator est(m, c, std::nullopt);
  auto step = [&](bool overlap) {
    Plan q = p;
    q.tp_comm_overlap = overlap;
    EXPECT_TRUE(validate_plan(q).ok());
    auto sim = simulate_step(m, c, q, SimOptions{});
    EXPECT_TRUE(sim.ok()) << sim.status().message();
    return std::make_pair(est.estimate(q).step_time_s, sim.ok() ? sim->report.step_time_s : 0.0);
  };
  const auto [est_plain, sim_plain] = step(false);
  const auto [est_overlap, sim_overlap] = step(true);
  const double est_saving = est_plain - est_overlap, sim_saving = sim_plain - sim_overlap;
  EXPECT_GT(sim_saving, 0.05 * sim_plain);
  EXPECT_NEAR(est_saving, sim_saving, 0.1 * sim_saving);
}

}  // namespace
}  // namespace trainplan
