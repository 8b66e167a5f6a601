// libFuzzer target: the planner given a fuzzed model and cluster, {"model": {...}, "cluster":
// {...}, "global_batch_size": N}. Whatever loads must plan without a crash, within a bounded
// number of evaluations, and every ranked candidate must be a valid plan that fits the model,
// the GPU count and the device memory, with finite figures. Corpus: tests/fuzz/corpus/fuzz_planner.
#include <cmath>

#include "core/cluster_spec.h"
#include "core/model_spec.h"
#include "planner/planner.h"
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace trainplan;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto parsed = parse_json_text(text, fuzz::kSource);
  if (!parsed.ok() || !parsed->is_object()) return 0;
  const Json& j = *parsed;
  if (!j.contains("model") || !j.contains("cluster")) return 0;
  auto model = model_from_json(j["model"], fuzz::kSource);
  if (!model.ok()) {
    fuzz::check_refusal(model.status());
    return 0;
  }
  auto cluster = cluster_from_json(j["cluster"], fuzz::kSource);
  if (!cluster.ok()) {
    fuzz::check_refusal(cluster.status());
    return 0;
  }
  PlannerOptions opt;
  opt.max_evaluations = 20'000;
  opt.top_k = 5;
  if (auto it = j.find("global_batch_size"); it != j.end() && it->is_number_integer() &&
                                               it->get<std::int64_t>() >= 1 &&
                                               it->get<std::int64_t>() <= PlanLimits::kMaxBatch)
    opt.global_batch_size = it->get<std::int64_t>();
  Estimator est(*model, *cluster, std::nullopt);
  const PlanSearch s = search_plans(est, opt, cluster->total_gpus(), /*offload=*/false);
  // Bounded: the search stops at the bound (give or take one innermost loop).
  TRAINPLAN_CHECK(s.evaluated <= opt.max_evaluations + 4096) << s.evaluated;
  TRAINPLAN_CHECK(s.feasible + s.rejections.total() == s.evaluated || s.truncated);
  for (const Candidate& c : s.ranked) {
    TRAINPLAN_CHECK(validate_plan(c.plan).ok()) << describe(c.plan);
    TRAINPLAN_CHECK(check_plan_fits_model(c.plan, *model).ok()) << describe(c.plan);
    TRAINPLAN_CHECK(c.plan.world_size() == cluster->total_gpus());
    TRAINPLAN_CHECK(c.estimate.peak_memory_bytes <= cluster->gpu.hbm_bytes);
    TRAINPLAN_CHECK(std::isfinite(c.estimate.step_time_s) && c.estimate.step_time_s > 0)
        << c.estimate.step_time_s;
  }
  return 0;
}
