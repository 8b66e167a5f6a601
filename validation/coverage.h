// The layouts the published runs measured (core/measured_layouts.h): which pipeline schedule at
// which depth on which GPU generation. The corpus is compiled into this library
// (validation/CMakeLists.txt), so `plan` needs no data file at run time.
// Tested by tests/validation/coverage_test.cc. No file I/O.
#pragma once

#include <string_view>
#include <vector>

#include "core/measured_layouts.h"
#include "validation/published_run.h"

namespace trainplan {

// One entry per run, from the plan the published-run reader gives it.
std::vector<MeasuredLayout> measured_layouts(const std::vector<const PublishedRun*>& runs);
// The runs of validation/corpus/published_runs.json that the reader accepts (compiled in).
const std::vector<MeasuredLayout>& corpus_layouts();
// The layouts of gpu_name's generation when the corpus holds at least kMinBandRuns of them
// (validation/error_band.h, as the error band is chosen), else every layout; `basis` says which.
MeasuredLayouts measured_layouts_for(std::string_view gpu_name,
                                     const std::vector<MeasuredLayout>& layouts);

}  // namespace trainplan
