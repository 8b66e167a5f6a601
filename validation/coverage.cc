// The layouts the published runs measured (validation/coverage.h).
#include "validation/coverage.h"

#include <string>

#include "core/json_util.h"
#include "validation/error_band.h"

namespace trainplan {

// The corpus compiled in: validation/CMakeLists.txt writes it into a generated source.
std::string corpus_runs_json();

std::vector<MeasuredLayout> measured_layouts(const std::vector<const PublishedRun*>& runs) {
  std::vector<MeasuredLayout> out;
  for (const PublishedRun* r : runs)
    out.push_back({r->id, r->family.gpu_generation, r->plan.schedule, r->plan.pp});
  return out;
}

const std::vector<MeasuredLayout>& corpus_layouts() {
  static const std::vector<MeasuredLayout> layouts = [] {
    std::vector<MeasuredLayout> out;
    const Json json = Json::parse(corpus_runs_json(), nullptr, /*allow_exceptions=*/false);
    if (!json.is_array()) return out;
    std::vector<PublishedRun> runs;
    for (std::size_t i = 0; i < json.size(); ++i) {
      auto run = published_run_from_json(json[i], "validation/corpus/published_runs.json entry " +
                                                      std::to_string(i));
      if (run.ok()) runs.push_back(std::move(*run));
    }
    std::vector<const PublishedRun*> pointers;
    for (const PublishedRun& r : runs) pointers.push_back(&r);
    return measured_layouts(pointers);
  }();
  return layouts;
}

MeasuredLayouts measured_layouts_for(std::string_view gpu_name,
                                     const std::vector<MeasuredLayout>& layouts) {
  const std::string generation = gpu_generation_of(gpu_name);
  MeasuredLayouts out;
  for (const MeasuredLayout& m : layouts)
    if (m.gpu_generation == generation) out.runs.push_back(m);
  if (out.runs.size() >= kMinBandRuns) {
    out.basis = std::to_string(out.runs.size()) + " published runs on " + generation;
    return out;
  }
  out.runs = layouts;
  out.basis = std::to_string(layouts.size()) + " published runs on every GPU (fewer than " +
              std::to_string(kMinBandRuns) + " on " + generation + ")";
  return out;
}

}  // namespace trainplan
