// Cross-validation over published runs and the expected error band (validation/error_band.h).
#include "validation/error_band.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <map>

#include "core/step_report.h"

namespace trainplan {

// The residuals file compiled in: validation/CMakeLists.txt writes it into a generated source.
extern const char* const kCorpusResidualsJson;

namespace {

// The q-quantile (0 < q < 1) by nearest rank: the smallest value with at least q of the values
// at or below it.
double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto rank = static_cast<std::size_t>(std::ceil(q * static_cast<double>(v.size())));
  return v[std::clamp<std::size_t>(rank, 1, v.size()) - 1];
}

ErrorBand band_of(const std::vector<const FamilyResiduals*>& families, std::string basis) {
  ErrorBand band;
  std::vector<double> errors, abs_errors;
  for (const FamilyResiduals* f : families) {
    band.families.push_back(f->family);
    for (double e : f->errors) {
      errors.push_back(e);
      abs_errors.push_back(std::fabs(e));
    }
  }
  band.runs = errors.size();
  band.relative_low = quantile(errors, 0.1);
  band.relative_high = quantile(errors, 0.9);
  band.typical_abs = median(abs_errors);
  band.basis = std::move(basis);
  return band;
}

}  // namespace

CrossValidation cross_validate_published(const std::vector<const PublishedRun*>& runs,
                                         unsigned threads) {
  std::vector<std::string> families;
  for (const PublishedRun* r : runs) families.push_back(r->family.key());
  auto evaluate = [&](std::size_t i, const EfficiencyPoint& point) {
    PublishedRun run = *runs[i];
    run.cluster.gpu.gemm_efficiency = in_step_gemm_efficiency(run.cluster.gpu, point.gemm_share);
    run.cluster.gpu.memory_efficiency = point.memory_efficiency;
    auto sim = simulate_step(run.model, run.cluster, run.plan, run.options);
    return sim.ok() ? run_errors(compare_published_run(run, sim->report)) : RunErrors{};
  };
  const EfficiencyPoint presets;
  return cross_validate(families, default_efficiency_grid(), presets, evaluate, threads);
}

std::vector<FamilyResiduals> residuals_by_family(const std::vector<const PublishedRun*>& runs,
                                                 const CrossValidation& cv) {
  std::vector<FamilyResiduals> out;
  std::map<std::string, std::size_t> index;
  for (std::size_t i = 0; i < runs.size() && i < cv.held_out.size(); ++i) {
    const PublishedFamily& f = runs[i]->family;
    auto [it, added] = index.emplace(f.key(), out.size());
    if (added) out.push_back({f.key(), f.framework, f.gpu_generation, {}});
    if (cv.held_out[i].throughput) out[it->second].errors.push_back(*cv.held_out[i].throughput);
  }
  return out;
}

Json residuals_to_json(const std::vector<FamilyResiduals>& residuals, std::string_view command) {
  Json families = Json::array();
  for (const FamilyResiduals& f : residuals)
    families.push_back({{"family", f.family}, {"framework", f.framework},
                        {"gpu_generation", f.gpu_generation}, {"errors", f.errors}});
  return {{"schema", "trainplan.error_residuals/1"},
          {"what", "held-out throughput errors per family (leave-one-family-out; + = predicted "
                   "faster; = measured / predicted step time - 1)"},
          {"command", std::string(command)},
          {"families", families}};
}

Result<std::vector<FamilyResiduals>> residuals_from_json(const Json& json,
                                                         std::string_view source) {
  const std::string where(source);
  if (!json.is_object() || json.value("schema", "") != "trainplan.error_residuals/1")
    return Status::Error(where + ": expected schema \"trainplan.error_residuals/1\"");
  const auto families = json.find("families");
  if (families == json.end() || !families->is_array())
    return Status::Error(where + ": \"families\" must be a list");
  std::vector<FamilyResiduals> out;
  for (std::size_t i = 0; i < families->size(); ++i) {
    const Json& f = (*families)[i];
    const std::string at = where + ": families[" + std::to_string(i) + "]";
    if (!f.is_object())
      return Status::Error(at + " must be an object");
    FamilyResiduals r;
    for (auto [key, field] : {std::pair{"family", &r.family}, {"framework", &r.framework},
                              {"gpu_generation", &r.gpu_generation}}) {
      const auto v = f.find(key);
      if (v == f.end() || !v->is_string())
        return Status::Error(at + "." + key + " must be a string");
      *field = v->get<std::string>();
    }
    const auto errors = f.find("errors");
    if (errors == f.end() || !errors->is_array())
      return Status::Error(at + ".errors must be a list of numbers");
    for (const Json& e : *errors) {
      if (!e.is_number() || !std::isfinite(e.get<double>()) || e.get<double>() <= -1)
        return Status::Error(at + ".errors: " + e.dump() + " is not an error above -1");
      r.errors.push_back(e.get<double>());
    }
    out.push_back(std::move(r));
  }
  return out;
}

const std::vector<FamilyResiduals>& corpus_residuals() {
  static const std::vector<FamilyResiduals> residuals = [] {
    auto parsed = residuals_from_json(Json::parse(kCorpusResidualsJson),
                                      "validation/corpus/error_residuals.json");
    return parsed.ok() ? *parsed : std::vector<FamilyResiduals>{};
  }();
  return residuals;
}

std::string gpu_generation_of(std::string_view gpu_name) {
  std::string g(gpu_name.substr(0, gpu_name.find('-')));
  for (char& c : g) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return g;
}

ErrorBand expected_error_band(std::string_view gpu_name,
                              const std::vector<FamilyResiduals>& residuals) {
  const std::string generation = gpu_generation_of(gpu_name);
  std::vector<const FamilyResiduals*> same, all;
  std::size_t same_runs = 0;
  for (const FamilyResiduals& f : residuals) {
    all.push_back(&f);
    if (f.gpu_generation == generation) {
      same.push_back(&f);
      same_runs += f.errors.size();
    }
  }
  if (same_runs >= kMinBandRuns)
    return band_of(same, "held-out runs on " + generation);
  return band_of(all, "held-out runs on every GPU: " +
                          (same_runs == 0 ? "none" : std::to_string(same_runs)) +
                          " published on " + generation + ", fewer than " +
                          std::to_string(kMinBandRuns));
}

}  // namespace trainplan
