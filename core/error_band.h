// The expected error of a prediction: how far measured step times of published runs fell from
// this project's predictions of them, when each run's family was left out of every constant
// chosen (validation/accuracy.h). `plan` and `simulate` print it beside their figures, and
// `plan` calls candidates tied when their predicted step times differ by less than the typical
// error. Computed by validation/error_band.h from the cross-validated residuals of the corpus;
// tested by tests/validation/error_band_test.cc. core/error_band.cc formats it.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "core/json_util.h"

namespace trainplan {

struct ErrorBand {
  // The measured step time is expected within predicted * (1 + relative_low) and
  // predicted * (1 + relative_high): the 10th and 90th percentiles of the held-out signed
  // errors (measured / predicted step time - 1) of the runs the band is taken from.
  double relative_low = 0;
  double relative_high = 0;
  // The median |error| of those runs: differences between candidates smaller than this are
  // ties (the model cannot rank them with confidence).
  double typical_abs = 0;
  std::size_t runs = 0;                // held-out runs the band is taken from
  std::vector<std::string> families;   // their families (source / framework / GPU generation)
  std::string basis;                   // one line: which runs, and why those
  bool known() const { return runs > 0; }
};

Json error_band_to_json(const ErrorBand& band);
// One line for the text outputs, e.g. "expected error: measured step time -8% to +31% of the
// prediction (typical 12%; 10th-90th percentile of 61 held-out runs on H100)".
std::string describe(const ErrorBand& band);

}  // namespace trainplan
