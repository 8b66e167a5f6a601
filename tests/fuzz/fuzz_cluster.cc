// libFuzzer target: cluster JSON through cluster_from_json and the round trip.
// Corpus: tests/fuzz/corpus/fuzz_cluster.
#include "core/cluster_spec.h"
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace trainplan;
  auto cluster = fuzz::load_and_round_trip(data, size, cluster_from_json, cluster_to_json);
  if (!cluster.ok()) return 0;
  TRAINPLAN_CHECK(cluster->total_gpus() >= 1 && cluster->total_gpus() <= ClusterLimits::kMaxGpus);
  return 0;
}
