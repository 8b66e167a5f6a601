// The expected error of a prediction, as text and JSON (core/error_band.h).
#include "core/error_band.h"

#include <cstdio>

namespace trainplan {
namespace {
std::string percent(double fraction) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%+.0f%%", 100 * fraction);
  return buf;
}
}  // namespace

Json error_band_to_json(const ErrorBand& band) {
  return {{"relative_low", band.relative_low},
          {"relative_high", band.relative_high},
          {"typical_abs", band.typical_abs},
          {"runs", band.runs},
          {"basis", band.basis},
          {"families", band.families},
          {"meaning", "measured step time expected within predicted * (1 + relative_low) and "
                      "predicted * (1 + relative_high): 10th-90th percentile of the "
                      "cross-validated errors of these families"}};
}

std::string describe(const ErrorBand& band) {
  if (!band.known())
    return "expected error: " +
           (band.basis.empty() ? std::string("unknown (no cross-validated runs)") : band.basis);
  char typical[16];
  std::snprintf(typical, sizeof typical, "%.0f%%", 100 * band.typical_abs);
  return "expected error: measured step time " + percent(band.relative_low) + " to " +
         percent(band.relative_high) + " of the prediction (typical " + typical +
         "; 10th-90th percentile of " + std::to_string(band.runs) + " " + band.basis + ")";
}

}  // namespace trainplan
