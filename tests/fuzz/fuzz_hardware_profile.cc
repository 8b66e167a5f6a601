// libFuzzer target: a hardware profile (calibrate's output) through hardware_profile_from_json
// and the round trip. Corpus: tests/fuzz/corpus/fuzz_hardware_profile.
#include "core/cost/compute_model.h"
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace trainplan;
  (void)fuzz::load_and_round_trip(data, size, hardware_profile_from_json,
                                  hardware_profile_to_json);
  return 0;
}
