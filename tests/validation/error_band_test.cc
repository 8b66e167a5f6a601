// The expected error band (validation/error_band.h, core/error_band.h): the residuals file's
// reader and its errors, the band's percentiles and where it falls back to every family, and
// the text and JSON that plan and simulate print.
#include "validation/error_band.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

namespace trainplan {
namespace {

Json residuals_json(const std::string& families) {
  return Json::parse(R"({"schema": "trainplan.error_residuals/1", "families": )" + families + "}");
}

TEST(ErrorBand, ReadsResidualsAndRefusesMalformedOnes) {
  auto ok = residuals_from_json(
      residuals_json(R"([{"family": "a / megatron / H100", "framework": "megatron",
                          "gpu_generation": "H100", "errors": [0.1, -0.2]}])"),
      "test");
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  ASSERT_EQ(ok->size(), 1u);
  EXPECT_EQ((*ok)[0].gpu_generation, "H100");
  EXPECT_EQ((*ok)[0].errors, (std::vector<double>{0.1, -0.2}));

  struct Bad {
    std::string json, message;
  };
  const std::vector<Bad> bad = {
      {R"({"schema": "other", "families": []})", "trainplan.error_residuals/1"},
      {R"({"schema": "trainplan.error_residuals/1", "families": 3})", "\"families\" must be a list"},
      {R"({"schema": "trainplan.error_residuals/1", "families": [3]})", "families[0] must be an object"},
      {R"({"schema": "trainplan.error_residuals/1", "families": [{"family": "f", "framework": 1,
          "gpu_generation": "A100", "errors": []}]})", "families[0].framework must be a string"},
      {R"({"schema": "trainplan.error_residuals/1", "families": [{"family": "f", "framework": "x",
          "gpu_generation": "A100", "errors": "no"}]})", "families[0].errors must be a list"},
      {R"({"schema": "trainplan.error_residuals/1", "families": [{"family": "f", "framework": "x",
          "gpu_generation": "A100", "errors": [0.1, -1.5]}]})", "-1.5 is not an error above -1"},
  };
  for (const Bad& b : bad) {
    auto r = residuals_from_json(Json::parse(b.json), "residuals.json");
    ASSERT_FALSE(r.ok()) << b.json;
    EXPECT_NE(r.status().message().find("residuals.json"), std::string::npos);
    EXPECT_NE(r.status().message().find(b.message), std::string::npos) << r.status().message();
  }
}

TEST(ErrorBand, GenerationIsThePresetNamesPrefix) {
  EXPECT_EQ(gpu_generation_of("H100-80GB"), "H100");
  EXPECT_EQ(gpu_generation_of("a100-40GB"), "A100");
  EXPECT_EQ(gpu_generation_of("B200-192GB"), "B200");
  EXPECT_EQ(gpu_generation_of("cpu"), "CPU");
}

std::vector<FamilyResiduals> sample() {
  // Ten runs on H100 with errors -0.05 .. +0.40 and two on A100.
  FamilyResiduals h1{"s1 / megatron / H100", "megatron", "H100", {-0.05, 0.0, 0.05, 0.10, 0.15}};
  FamilyResiduals h2{"s2 / nemo / H100", "nemo", "H100", {0.20, 0.25, 0.30, 0.35, 0.40}};
  FamilyResiduals a{"s3 / megatron / A100", "megatron", "A100", {-0.5, 0.5}};
  return {h1, h2, a};
}

TEST(ErrorBand, PercentilesOfTheSameGeneration) {
  const ErrorBand band = expected_error_band("H100-80GB", sample());
  EXPECT_EQ(band.runs, 10u);
  // Nearest rank: the 10th percentile of 10 values is the first, the 90th the ninth.
  EXPECT_DOUBLE_EQ(band.relative_low, -0.05);
  EXPECT_DOUBLE_EQ(band.relative_high, 0.35);
  // |errors| sorted: 0, .05, .05, .10, .15, .20, .25, .30, .35, .40: median (.15 + .20) / 2.
  EXPECT_DOUBLE_EQ(band.typical_abs, 0.175);
  EXPECT_EQ(band.families, (std::vector<std::string>{"s1 / megatron / H100", "s2 / nemo / H100"}));
  EXPECT_EQ(band.basis, "held-out runs on H100");
  EXPECT_EQ(describe(band),
            "expected error: measured step time -5% to +35% of the prediction (typical 18%; "
            "10th-90th percentile of 10 held-out runs on H100)");
  const Json j = error_band_to_json(band);
  EXPECT_DOUBLE_EQ(j.at("relative_low").get<double>(), -0.05);
  EXPECT_DOUBLE_EQ(j.at("relative_high").get<double>(), 0.35);
  EXPECT_EQ(j.at("runs"), 10);
  EXPECT_EQ(j.at("families").size(), 2u);
}

TEST(ErrorBand, FewRunsOfAGenerationFallBackToEveryFamily) {
  const ErrorBand a100 = expected_error_band("A100-80GB", sample());
  EXPECT_EQ(a100.runs, 12u);
  EXPECT_EQ(a100.families.size(), 3u);
  EXPECT_NE(a100.basis.find("2 published on A100, fewer than 10"), std::string::npos) << a100.basis;
  const ErrorBand v100 = expected_error_band("V100-32GB", sample());
  EXPECT_EQ(v100.runs, 12u);
  EXPECT_NE(v100.basis.find("none published on V100"), std::string::npos) << v100.basis;
  EXPECT_FALSE(expected_error_band("H100-80GB", {}).known());
  EXPECT_EQ(describe(ErrorBand{}), "expected error: unknown (no cross-validated runs)");
}

TEST(ErrorBand, TheCorpusResidualsAreCompiledIn) {
  std::ifstream in(std::string(TRAINPLAN_SOURCE_DIR) + "/validation/corpus/error_residuals.json");
  ASSERT_TRUE(in.good());
  std::stringstream text;
  text << in.rdbuf();
  auto from_file = residuals_from_json(Json::parse(text.str()), "error_residuals.json");
  ASSERT_TRUE(from_file.ok()) << from_file.status().message();
  const std::vector<FamilyResiduals>& compiled = corpus_residuals();
  ASSERT_EQ(compiled.size(), from_file->size());
  ASSERT_FALSE(compiled.empty());
  for (std::size_t i = 0; i < compiled.size(); ++i) {
    EXPECT_EQ(compiled[i].family, (*from_file)[i].family);
    EXPECT_EQ(compiled[i].errors, (*from_file)[i].errors);
  }
  EXPECT_TRUE(expected_error_band("H100-80GB", compiled).known());
}

}  // namespace
}  // namespace trainplan
