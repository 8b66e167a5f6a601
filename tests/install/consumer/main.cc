// A consumer of the installed trainplan package: reads a model file, plans it on 8 H100s and
// prints the recommended split and the build it linked. Built by tests/install/install_test.sh.
#include <fstream>
#include <iostream>
#include <sstream>

#include "core/build_info.h"
#include "core/cluster_spec.h"
#include "core/model_spec.h"
#include "planner/planner.h"
#include "planner/refine.h"
#include "planner/report.h"

int main(int argc, char** argv) {
  using namespace trainplan;
  if (argc != 2) {
    std::cerr << "usage: consumer MODEL.json\n";
    return 2;
  }
  std::ifstream in(argv[1]);
  std::stringstream text;
  text << in.rdbuf();
  auto json = parse_json_text(text.str(), argv[1]);
  if (!json.ok()) return std::cerr << json.status().message() << "\n", 3;
  auto model = model_from_json(*json, argv[1]);
  if (!model.ok()) return std::cerr << model.status().message() << "\n", 3;
  auto cluster = make_cluster("H100-80GB", 8, 8);
  if (!cluster.ok()) return std::cerr << cluster.status().message() << "\n", 3;
  PlannerOptions options;
  auto result = plan_training(*model, *cluster, options,
                              simulator_refine(*model, *cluster, SimOptions{}));
  if (!result.ok()) return std::cerr << result.status().message() << "\n", 4;
  const Candidate* best = recommended(*result);
  if (best == nullptr) return std::cerr << "nothing fits\n", 4;
  std::cout << "recommended tp=" << best->plan.tp << " pp=" << best->plan.pp
            << " dp=" << best->plan.dp << "\n"
            << version_line("consumer");
  return 0;
}
