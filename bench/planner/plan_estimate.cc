// The planner's analytical estimate of one plan, as JSON (step_time_s, bubble_fraction,
// pipeline_s), for studies that set it beside `simulate --json` (bench/scripts/
// schedules_zbv_dualpipe_estimate.py). Not a test: it prints figures.
//   ./build/bench/planner/plan_estimate MODEL.json PLAN.json GPUS [GPU]   (GPU: H100-80GB)
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "planner/estimate.h"

namespace trainplan {
namespace {

Result<Json> read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::Error("cannot read '" + path + "'", ExitCode::kUsage);
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_json_text(ss.str(), path);
}

int fail(const Status& st) {
  std::fprintf(stderr, "plan_estimate: %s\n", st.message().c_str());
  return 2;
}

int run(int argc, char** argv) {
  if (argc < 4 || argc > 5) {
    std::fprintf(stderr, "usage: plan_estimate MODEL.json PLAN.json GPUS [GPU]\n");
    return 2;
  }
  auto mj = read_json(argv[1]);
  if (!mj.ok()) return fail(mj.status());
  auto model = model_from_json(*mj, argv[1]);
  if (!model.ok()) return fail(model.status());
  auto pj = read_json(argv[2]);
  if (!pj.ok()) return fail(pj.status());
  auto plan = plan_from_json(*pj, argv[2]);
  if (!plan.ok()) return fail(plan.status());
  // The preset's GPUs per node, as `simulate --gpus N --gpu GPU` takes them.
  const std::string gpu = argc == 5 ? argv[4] : "H100-80GB";
  auto per_node = preset_gpus_per_node(gpu);
  if (!per_node.ok()) return fail(per_node.status());
  auto cluster = make_cluster(gpu, std::atoll(argv[3]), *per_node);
  if (!cluster.ok()) return fail(cluster.status());
  if (Status st = validate_plan(*plan); !st.ok()) return fail(st);
  if (Status st = check_plan_fits_model(*plan, *model); !st.ok()) return fail(st);
  Estimator est(*model, *cluster, std::nullopt);
  const Estimate e = est.estimate(*plan);
  std::printf("{\"step_time_s\": %.9g, \"bubble_fraction\": %.9g, \"pipeline_s\": %.9g}\n",
              e.step_time_s, e.bubble_fraction, e.pipeline_s);
  return 0;
}

}  // namespace
}  // namespace trainplan

int main(int argc, char** argv) { return trainplan::run(argc, argv); }
