// libFuzzer target: a published run's entry through published_run_from_json (validation/
// published_run.h). An accepted entry must give a valid model and plan whose world size is the
// cluster's; a refused one must say why and name its source. Corpus:
// tests/fuzz/corpus/fuzz_published_run (entries of the dev set and variations).
#include "validation/published_run.h"
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace trainplan;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto parsed = parse_json_text(text, fuzz::kSource);
  if (!parsed.ok()) return 0;
  auto run = published_run_from_json(*parsed, fuzz::kSource);
  if (!run.ok()) {
    TRAINPLAN_CHECK(run.status().code() == ExitCode::kInvalidInput ||
                    run.status().code() == ExitCode::kInfeasible)
        << run.status().message();
    TRAINPLAN_CHECK(run.status().message().find(fuzz::kSource) != std::string::npos)
        << "message does not name the source: " << run.status().message();
    return 0;
  }
  TRAINPLAN_CHECK(validate_model(run->model, "fuzz").ok());
  TRAINPLAN_CHECK(validate_plan(run->plan).ok());
  TRAINPLAN_CHECK(check_plan_fits_model(run->plan, run->model).ok());
  TRAINPLAN_CHECK(check_plan_world_size(run->plan, run->cluster.total_gpus()).ok());
  StepReport predicted;
  predicted.ranks.resize(1);
  for (const PublishedMetric& m : compare_published_run(*run, predicted))
    TRAINPLAN_CHECK(m.measured > 0) << m.name;
  return 0;
}
