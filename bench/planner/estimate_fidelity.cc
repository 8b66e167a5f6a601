// How far the planner's analytical estimate, which ranks every candidate, is from the event
// simulator, which refines only the best `simulate_top` (8 by default). For each scenario the
// top K candidates by estimate are all simulated; printed per scenario: the estimate's error
// on step time against the simulator (median, 90th percentile and largest of |error|, and the
// median signed: + means the estimate is faster), Spearman's rank correlation of the two
// orders, where the simulator's best candidate stood in the estimate's order (`plan` simulates
// the first 8, then goes on while an unsimulated estimate leads), and how much slower than that
// best, by the simulator, `plan`'s own recommendation is.
//   ./build/bench/planner/estimate_fidelity [K]   (K: candidates per scenario, default 40)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "planner/planner.h"
#include "planner/refine.h"
#include "planner/report.h"
#include "simulator/simulator.h"

namespace trainplan {
namespace {

ModelSpec load(const std::string& name) {
  std::ifstream in(std::string(TRAINPLAN_SOURCE_DIR) + "/models/" + name);
  std::stringstream ss;
  ss << in.rdbuf();
  auto m = model_from_json(*parse_json_text(ss.str(), name), name);
  if (!m.ok()) {
    std::fprintf(stderr, "%s\n", m.status().message().c_str());
    std::exit(1);
  }
  return *m;
}

struct Scenario {
  const char* model;
  const char* gpu;
  std::int64_t gpus;
};

// The value at fraction q of the sorted values (nearest rank).
double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const auto i = static_cast<std::size_t>(std::ceil(q * static_cast<double>(v.size()))) - 1;
  return v[std::min(i, v.size() - 1)];
}

// Ranks 0..n-1 of the values (ties share their mean rank).
std::vector<double> ranks(const std::vector<double>& v) {
  std::vector<std::size_t> order(v.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return v[a] < v[b]; });
  std::vector<double> r(v.size());
  for (std::size_t i = 0; i < order.size();) {
    std::size_t j = i;
    while (j + 1 < order.size() && v[order[j + 1]] == v[order[i]]) ++j;
    for (std::size_t k = i; k <= j; ++k) r[order[k]] = 0.5 * static_cast<double>(i + j);
    i = j + 1;
  }
  return r;
}

double spearman(const std::vector<double>& a, const std::vector<double>& b) {
  const std::vector<double> ra = ranks(a), rb = ranks(b);
  const double n = static_cast<double>(a.size());
  const double mean = (n - 1) / 2;
  double num = 0, da = 0, db = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    num += (ra[i] - mean) * (rb[i] - mean);
    da += (ra[i] - mean) * (ra[i] - mean);
    db += (rb[i] - mean) * (rb[i] - mean);
  }
  return da > 0 && db > 0 ? num / std::sqrt(da * db) : 1.0;
}

int run(std::int64_t k) {
  const Scenario scenarios[] = {
      {"gpt3.json", "H100-80GB", 64},        {"gpt3.json", "A100-80GB", 1024},
      {"llama3-8b.json", "H100-80GB", 128},  {"llama3-70b.json", "H100-80GB", 256},
      {"llama3-405b.json", "H100-80GB", 1024}, {"mixtral-8x7b.json", "H100-80GB", 64},
      {"gpt2-1.5b.json", "V100-32GB", 32},
  };
  std::printf("%-18s %-10s %6s %4s %9s %9s %9s %9s %8s %10s %10s\n", "model", "gpu", "gpus", "K",
              "med|err|", "p90|err|", "max|err|", "med err", "spearman", "sim best@",
              "plan loses");
  std::vector<double> all_errors;
  for (const Scenario& s : scenarios) {
    const ModelSpec m = load(s.model);
    auto node = preset_gpus_per_node(s.gpu);
    const ClusterSpec c = *make_cluster(s.gpu, s.gpus, std::min<std::int64_t>(*node, s.gpus));
    PlannerOptions opt;
    opt.top_k = k;
    opt.simulate_top = 0;
    if (c.gpu.peak_flops_per_s(Precision::kBf16) <= 0) opt.precision = Precision::kFp16;
    auto r = plan_training(m, c, opt);
    if (!r.ok()) {
      std::fprintf(stderr, "%s: %s\n", s.model, r.status().message().c_str());
      return 1;
    }
    const std::vector<Candidate>& cands =
        r->fits() ? r->search.ranked : r->offload_search->ranked;
    std::vector<double> est, sim, err;
    for (const Candidate& cand : cands) {
      auto step = simulate_step(m, c, cand.plan, SimOptions{});
      if (!step.ok()) {
        std::fprintf(stderr, "%s: %s\n", describe(cand.plan).c_str(),
                     step.status().message().c_str());
        return 1;
      }
      est.push_back(cand.estimate.step_time_s);
      sim.push_back(step->report.step_time_s);
      err.push_back((sim.back() - est.back()) / sim.back());  // + : the estimate is faster
    }
    std::vector<double> abs_err;
    for (double e : err) abs_err.push_back(std::abs(e));
    all_errors.insert(all_errors.end(), abs_err.begin(), abs_err.end());
    const auto best =
        static_cast<std::size_t>(std::min_element(sim.begin(), sim.end()) - sim.begin());
    // What `plan` recommends (its refinement, as the tool runs it), by the simulator, against
    // the best of the K simulated here.
    SimOptions sim_opt;
    sim_opt.extrapolate_above_micro_batches = 32;
    PlannerOptions plan_opt = opt;
    plan_opt.top_k = 10;
    plan_opt.simulate_top = 8;
    auto picked = plan_training(m, c, plan_opt, simulator_refine(m, c, sim_opt));
    if (!picked.ok()) {
      std::fprintf(stderr, "%s: %s\n", s.model, picked.status().message().c_str());
      return 1;
    }
    const Candidate* rec = recommended(*picked);
    auto rec_sim = simulate_step(m, c, rec->plan, SimOptions{});
    const double loss = rec_sim.ok() ? rec_sim->report.step_time_s / sim[best] - 1 : NAN;
    std::printf("%-18s %-10s %6lld %4zu %8.1f%% %8.1f%% %8.1f%% %+8.1f%% %8.3f %10zu %+9.1f%%%s\n",
                s.model, s.gpu, static_cast<long long>(s.gpus), cands.size(),
                100 * quantile(abs_err, 0.5), 100 * quantile(abs_err, 0.9),
                100 * quantile(abs_err, 1.0), 100 * quantile(err, 0.5), spearman(est, sim),
                best + 1, 100 * loss, r->fits() ? "" : "  (offload)");
    std::fflush(stdout);
  }
  std::printf("all %zu candidates: median |error| %.1f%%, 90th percentile %.1f%%\n",
              all_errors.size(), 100 * quantile(all_errors, 0.5), 100 * quantile(all_errors, 0.9));
  return 0;
}

}  // namespace
}  // namespace trainplan

int main(int argc, char** argv) {
  const long long k = argc > 1 ? std::atoll(argv[1]) : 40;
  if (k < 2 || k > 10000) {
    std::fprintf(stderr, "estimate_fidelity: K=%s must be in [2, 10000]\n", argv[1]);
    return 2;
  }
  return trainplan::run(k);
}
