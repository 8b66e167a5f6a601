// libFuzzer target: our model JSON (models/*.json) through model_from_json, the round trip, and
// the parameter and memory formulas of an accepted model. Corpus: tests/fuzz/corpus/fuzz_model.
#include <cmath>

#include "core/cost/cost_model.h"
#include "core/model_spec.h"
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace trainplan;
  auto model = fuzz::load_and_round_trip(data, size, model_from_json, model_to_json);
  if (!model.ok()) return 0;
  const double params = count_parameters(*model).total();
  TRAINPLAN_CHECK(std::isfinite(params) && params > 0) << params;
  const MemoryBreakdown mem = memory_on_stage(*model, Plan{}, 0);
  TRAINPLAN_CHECK(std::isfinite(mem.device_total()) && mem.device_total() > 0);
  return 0;
}
