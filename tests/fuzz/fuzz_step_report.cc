// libFuzzer target: a step report (measured.json from execute, or a prediction) through
// step_report_from_json and the round trip. Corpus: tests/fuzz/corpus/fuzz_step_report.
#include "core/step_report.h"
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace trainplan;
  (void)fuzz::load_and_round_trip(data, size, step_report_from_json, step_report_to_json);
  return 0;
}
