// The planner's estimate against the event simulator where the two model one mechanism each
// their own way (the estimate in closed form, the simulator as events).
#include <gtest/gtest.h>

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
