// The layouts the published runs measured (validation/coverage.h): the compiled-in corpus gives
// one per entry the reader accepts, the same as reading the file; the GPU generation's layouts
// are chosen as the error band is, with the fallback to every run.
#include "validation/coverage.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "validation/error_band.h"

namespace trainplan {
namespace {

std::vector<MeasuredLayout> layouts_from_file() {
  std::ifstream in(std::string(TRAINPLAN_SOURCE_DIR) + "/validation/corpus/published_runs.json");
  std::stringstream text;
  text << in.rdbuf();
  const Json json = Json::parse(text.str());
  std::vector<PublishedRun> runs;
  for (std::size_t i = 0; i < json.size(); ++i) {
    auto run = published_run_from_json(json[i], "test");
    if (run.ok()) runs.push_back(std::move(*run));
  }
  std::vector<const PublishedRun*> pointers;
  for (const PublishedRun& r : runs) pointers.push_back(&r);
  return measured_layouts(pointers);
}

TEST(Coverage, TheCompiledInCorpusIsTheFile) {
  const std::vector<MeasuredLayout> file = layouts_from_file();
  const std::vector<MeasuredLayout>& compiled = corpus_layouts();
  ASSERT_GT(file.size(), 100u);
  ASSERT_EQ(compiled.size(), file.size());
  for (std::size_t i = 0; i < file.size(); ++i) {
    EXPECT_EQ(compiled[i].id, file[i].id);
    EXPECT_EQ(compiled[i].gpu_generation, file[i].gpu_generation);
    EXPECT_EQ(compiled[i].schedule, file[i].schedule);
    EXPECT_EQ(compiled[i].pp, file[i].pp);
  }
}

TEST(Coverage, TheGenerationsLayoutsOrEveryRun) {
  const std::vector<MeasuredLayout> all = {{"a", "A100", Schedule::k1F1B, 8},
                                           {"b", "H100", Schedule::kDualPipe, 16}};
  std::vector<MeasuredLayout> many(kMinBandRuns, all[0]);
  many.push_back(all[1]);
  const MeasuredLayouts a100 = measured_layouts_for("A100-80GB", many);
  EXPECT_EQ(a100.runs.size(), kMinBandRuns);
  EXPECT_EQ(a100.basis, std::to_string(kMinBandRuns) + " published runs on A100");
  // One H100 run is too few: every run, and the basis says why.
  const MeasuredLayouts h100 = measured_layouts_for("H100-80GB", many);
  EXPECT_EQ(h100.runs.size(), many.size());
  EXPECT_EQ(h100.basis, std::to_string(many.size()) +
                            " published runs on every GPU (fewer than " +
                            std::to_string(kMinBandRuns) + " on H100)");
}

TEST(Coverage, TheCorpusHasNoDualPipeRunOnA100OrH100) {
  // What the README's recommendations rest on (bench/results/recommendations-2026-12-02/):
  // DeepSeek-V3's DualPipe run is the corpus's only one, on H800.
  for (const char* gpu : {"A100-80GB", "H100-80GB"}) {
    const MeasuredLayouts m = measured_layouts_for(gpu, corpus_layouts());
    Plan p;
    p.pp = 16;
    p.schedule = Schedule::kDualPipe;
    EXPECT_EQ(measured_runs(p, m), 0u) << gpu;
    p.schedule = Schedule::kInterleaved;
    EXPECT_GT(measured_runs(p, m), 0u) << gpu;
  }
}

}  // namespace
}  // namespace trainplan
