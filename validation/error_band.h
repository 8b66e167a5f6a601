// Cross-validation over the published runs, the held-out residuals it leaves per family, and the
// expected error band (core/error_band.h) that `plan` and `simulate` print.
//
// The residuals of the corpus are kept in validation/corpus/error_residuals.json, written by
//   simulate --published validation/corpus/published_runs.json --cross-validate
//            --write-residuals validation/corpus/error_residuals.json
// and compiled into this library, so the tools need no data file at run time.
// tests/validation/cross_validation_test.cc recomputes them and fails when the committed file
// is stale, or when the cross-validated median rises above its ratchet.
// Tested by tests/validation/error_band_test.cc. No file I/O.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/error_band.h"
#include "core/json_util.h"
#include "core/status.h"
#include "validation/accuracy.h"
#include "validation/published_run.h"

namespace trainplan {

// Leave-one-family-out over published runs: each run simulated at every point of
// default_efficiency_grid() (the run's GEMM efficiency set to the point's share of its part's
// achievable matmul rate, its memory_efficiency to the point's) and at the presets' constants,
// over `threads` threads.
CrossValidation cross_validate_published(const std::vector<const PublishedRun*>& runs,
                                         unsigned threads);

// One family's held-out throughput errors (= measured / predicted step time - 1).
struct FamilyResiduals {
  std::string family;  // PublishedFamily::key()
  std::string framework;
  std::string gpu_generation;
  std::vector<double> errors;
};
// `cv` must come from cross_validate_published(runs, ...).
std::vector<FamilyResiduals> residuals_by_family(const std::vector<const PublishedRun*>& runs,
                                                 const CrossValidation& cv);
Json residuals_to_json(const std::vector<FamilyResiduals>& residuals, std::string_view command);
Result<std::vector<FamilyResiduals>> residuals_from_json(const Json& json,
                                                         std::string_view source);
// The residuals committed with the corpus (compiled in; see above).
const std::vector<FamilyResiduals>& corpus_residuals();

// "A100-80GB" -> "A100": the preset's name up to its first '-' (the corpus's gpu_generation).
std::string gpu_generation_of(std::string_view gpu_name);
// The band for a run on `gpu_name`: from the families of its GPU generation when they hold at
// least kMinBandRuns runs, else from every family (and `basis` says so).
inline constexpr std::size_t kMinBandRuns = 10;
ErrorBand expected_error_band(std::string_view gpu_name,
                              const std::vector<FamilyResiduals>& residuals);

}  // namespace trainplan
