// Tests of the planner: enumeration, pruning with reasons, ranking, the nothing-fits path with
// ZeRO-Offload, determinism, and the analytical estimate's consistency with the cost model.
#include "planner/planner.h"

#include <gtest/gtest.h>

#include "planner/report.h"
#include "tests/models/test_util.h"

namespace trainplan {
namespace {

using testing::load_repo_model;

ClusterSpec cluster(const char* gpu, std::int64_t gpus) {
  auto c = make_cluster(gpu, gpus, 8);
  EXPECT_TRUE(c.ok()) << c.status().message();
  return *c;
}

TEST(Planner, Gpt3On32H100sNeedsOffloadAndSaysHowManyGpusWouldFit) {
  const ModelSpec m = load_repo_model("gpt3.json");
  const ClusterSpec c = cluster("H100-80GB", 32);
  PlannerOptions opt;
  auto r = plan_training(m, c, opt);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_FALSE(r->fits());
  EXPECT_NEAR(r->min_state_bytes_per_gpu / 1e9, 87.3, 0.1);
  ASSERT_TRUE(r->min_gpus_without_offload.has_value());
  EXPECT_GT(*r->min_gpus_without_offload, 32);
  EXPECT_EQ(*r->min_gpus_without_offload % 8, 0);
  // The smallest count really fits, and the one below it does not.
  PlannerOptions quick = opt;
  quick.stop_at_first_feasible = true;
  const std::int64_t n = *r->min_gpus_without_offload;
  ClusterSpec big = cluster("H100-80GB", n);
  Estimator est_big(m, big, std::nullopt);
  EXPECT_FALSE(search_plans(est_big, quick, n, false).ranked.empty());
  ClusterSpec smaller = cluster("H100-80GB", n - 8);
  Estimator est_small(m, smaller, std::nullopt);
  EXPECT_TRUE(search_plans(est_small, quick, n - 8, false).ranked.empty());
  // The recommendation offloads optimizer states and says what that costs.
  ASSERT_TRUE(r->offload_search.has_value());
  const Candidate* best = recommended(*r);
  ASSERT_NE(best, nullptr);
  EXPECT_EQ(best->plan.offload, Offload::kOptimizer);
  EXPECT_GT(best->estimate.offload_s, 0.0);
  EXPECT_LE(best->estimate.peak_memory_bytes, c.gpu.hbm_bytes * 0.9);
  EXPECT_GT(r->search.rejections.count.at("memory"), 0);
}

TEST(Planner, RankedPlansAreValidFitAndSorted) {
  const ModelSpec m = load_repo_model("llama3-8b.json");
  const ClusterSpec c = cluster("H100-80GB", 16);
  PlannerOptions opt;
  opt.top_k = 20;
  auto r = plan_training(m, c, opt);
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(r->fits());
  EXPECT_EQ(r->search.feasible + r->search.rejections.total(), r->search.evaluated);
  double last = 0;
  for (const Candidate& cand : r->search.ranked) {
    EXPECT_TRUE(validate_plan(cand.plan).ok()) << describe(cand.plan);
    EXPECT_TRUE(check_plan_fits_model(cand.plan, m).ok());
    EXPECT_EQ(cand.plan.world_size(), 16);
    EXPECT_LE(cand.estimate.peak_memory_bytes, c.gpu.hbm_bytes * 0.9);
    EXPECT_GE(cand.estimate.step_time_s, last);
    last = cand.estimate.step_time_s;
    EXPECT_GT(cand.estimate.mfu, 0.0);
    EXPECT_LT(cand.estimate.mfu, 1.0);
  }
}

TEST(Planner, RejectsWithStatedReasons) {
  // tiny: 4 heads, so tp = 8 cannot split attention; 8 GPUs per node.
  const ModelSpec m = load_repo_model("tiny.json");
  const ClusterSpec c = cluster("A100-80GB", 16);
  PlannerOptions opt;
  opt.global_batch_size = 6;  // not divisible by dp = 4, 16
  auto r = plan_training(m, c, opt);
  ASSERT_TRUE(r.ok());
  const Rejections& rej = r->search.rejections;
  ASSERT_TRUE(rej.count.count("tp vs heads"));
  EXPECT_NE(rej.example.at("tp vs heads").find("num_attention_heads=4"), std::string::npos);
  ASSERT_TRUE(rej.count.count("batch not divisible"));
  EXPECT_NE(rej.example.at("batch not divisible").find("global_batch_size=6"), std::string::npos);
  ASSERT_TRUE(rej.count.count("tp larger than a node"));
  ASSERT_TRUE(rej.count.count("layers across stages"));
}

TEST(Planner, JsonIsByteIdenticalAcrossRuns) {
  const ModelSpec m = load_repo_model("gpt2-350m.json");
  const ClusterSpec c = cluster("A100-40GB", 8);
  PlannerOptions opt;
  ReportContext ctx{&m, &c, &opt, 1e10};
  auto a = plan_training(m, c, opt);
  auto b = plan_training(m, c, opt);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(plan_report_to_json(*a, ctx).dump(), plan_report_to_json(*b, ctx).dump());
  EXPECT_EQ(format_plan_report(*a, ctx), format_plan_report(*b, ctx));
}

TEST(Planner, ExplanationNamesTheRunnerUp) {
  const ModelSpec m = load_repo_model("llama3-70b.json");
  const ClusterSpec c = cluster("H100-80GB", 64);
  PlannerOptions opt;
  auto r = plan_training(m, c, opt);
  ASSERT_TRUE(r.ok() && r->fits() && r->search.ranked.size() > 1);
  const std::string why = explain_choice(r->search.ranked[0], r->search.ranked[1]);
  EXPECT_NE(why.find(describe(r->search.ranked[1].plan)), std::string::npos) << why;
  EXPECT_NE(why.find("% in step time"), std::string::npos);
}

TEST(Planner, RefinementReranksByTheRefinedStepTime) {
  const ModelSpec m = load_repo_model("gpt2-774m.json");
  const ClusterSpec c = cluster("H100-80GB", 8);
  PlannerOptions opt;
  opt.simulate_top = 4;
  // A refinement that penalises pipeline parallelism reorders the refined head of the list.
  RefineFn refine = [&](const Plan& p) -> Result<Estimate> {
    Estimator est(m, c, std::nullopt);
    Estimate e = est.estimate(p);
    e.step_time_s *= 1.0 + static_cast<double>(p.tp);
    return e;
  };
  auto r = plan_training(m, c, opt, refine);
  ASSERT_TRUE(r.ok());
  int refined = 0;
  for (std::size_t i = 0; i < r->search.ranked.size(); ++i) {
    refined += r->search.ranked[i].simulated ? 1 : 0;
    if (i + 1 < r->search.ranked.size()) {
      EXPECT_LE(r->search.ranked[i].estimate.step_time_s,
                r->search.ranked[i + 1].estimate.step_time_s);
    }
  }
  EXPECT_EQ(refined, 4);
}

TEST(Planner, BadOptionsAreErrors) {
  const ModelSpec m = load_repo_model("tiny.json");
  const ClusterSpec c = cluster("H100-80GB", 8);
  PlannerOptions opt;
  opt.memory_headroom = 1.0;
  EXPECT_FALSE(plan_training(m, c, opt).ok());
  opt.memory_headroom = 0.1;
  opt.top_k = 0;
  EXPECT_FALSE(plan_training(m, c, opt).ok());
}

TEST(Planner, SearchIsBoundedAndSaysSo) {
  const ModelSpec m = load_repo_model("llama3-8b.json");
  const ClusterSpec c = cluster("H100-80GB", 64);
  PlannerOptions opt;
  opt.max_evaluations = 100;
  Estimator est(m, c, std::nullopt);
  const PlanSearch s = search_plans(est, opt, 64, false);
  EXPECT_TRUE(s.truncated);
  EXPECT_LE(s.evaluated, 100 + 64);  // stops within one inner batch of the bound
}

TEST(Estimate, PeakMemoryIsTheWorstStage) {
  const ModelSpec m = load_repo_model("llama3-70b.json");
  const ClusterSpec c = cluster("H100-80GB", 64);
  Estimator est(m, c, std::nullopt);
  for (Schedule s : {Schedule::kGpipe, Schedule::k1F1B}) {
    Plan p;
    p.tp = 4;
    p.pp = 8;
    p.dp = 2;
    p.micro_batch_size = 1;
    p.global_batch_size = 32;
    p.schedule = s;
    std::int64_t stage = -1;
    const double peak = est.peak_memory_bytes(p, &stage);
    double worst = 0;
    for (std::int64_t k = 0; k < p.pp; ++k)
      worst = std::max(worst, memory_on_stage(m, p, k).device_total());
    EXPECT_DOUBLE_EQ(peak, worst);
  }
}

TEST(Estimate, GpipeBubbleOfUniformStages) {
  // Without embedding/head costs dominating (a deep model), GPipe's idle share on stage 0 is
  // close to (K-1)/(K+M-1).
  const ModelSpec m = load_repo_model("gpt3.json");
  const ClusterSpec c = cluster("H100-80GB", 64);
  Estimator est(m, c, std::nullopt);
  Plan p;
  p.tp = 8;
  p.pp = 8;
  p.dp = 1;
  p.micro_batch_size = 1;
  p.global_batch_size = 16;
  p.schedule = Schedule::kGpipe;
  p.recompute = Recompute::kFull;
  const Estimate e = est.estimate(p);
  EXPECT_NEAR(e.bubble_fraction, 7.0 / 23.0, 0.02);
}

}  // namespace
}  // namespace trainplan
