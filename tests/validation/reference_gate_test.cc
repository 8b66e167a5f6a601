// The in-run reference gate (validation/reference_gate.h): which rates it accepts and refuses,
// what it reads from a profile and a measured report, and its errors.
#include "validation/reference_gate.h"

#include <gtest/gtest.h>

#include <cmath>

namespace trainplan::validation {
namespace {

CalibratedReference calibrated(double rate = 100e9, double spread = 1.0) {
  return {.m = 256, .n = 256, .k = 256, .flops_per_s = rate, .spread_pct = spread};
}

// Two ranks, one warm-up step (its rate, 1, is never looked at), then the measured steps.
InRunReference in_run(std::vector<double> rank0, std::vector<double> rank1) {
  InRunReference r{.m = 256, .n = 256, .k = 256, .warmup_steps = 1, .rank_step_flops_per_s = {}};
  rank0.insert(rank0.begin(), 1.0);
  rank1.insert(rank1.begin(), 1.0);
  r.rank_step_flops_per_s = {rank0, rank1};
  return r;
}

TEST(ReferenceGate, AcceptsRatesWithinTheTolerance) {
  auto g = gate_reference(calibrated(), in_run({98e9, 103e9, 101e9}, {97e9, 99e9, 104e9}), 5);
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_TRUE(g->steady) << g->reason;
  EXPECT_TRUE(g->reason.empty());
  ASSERT_EQ(g->rank_median_flops_per_s.size(), 2u);
  EXPECT_DOUBLE_EQ(g->rank_median_flops_per_s[0], 101e9);  // the warm-up step left out
  EXPECT_DOUBLE_EQ(g->rank_median_flops_per_s[1], 99e9);
  EXPECT_NEAR(std::abs(g->deviation_pct), 1.0, 1e-9);  // +1% and -1%
  EXPECT_NEAR(g->min_step_deviation_pct, -3.0, 1e-9);
  EXPECT_NEAR(g->max_step_deviation_pct, 4.0, 1e-9);
  EXPECT_NE(format_reference_gate(*g).find("reference kernel: steady"), std::string::npos);
  const Json j = reference_gate_to_json(*g);
  EXPECT_EQ(j["steady"], true);
  EXPECT_DOUBLE_EQ(j["tolerance_pct"].get<double>(), 5.0);
}

// The host in another speed state: 30% slower on one rank (the median, so one odd step does not
// decide it), or both faster.
TEST(ReferenceGate, RefusesARunAtAnotherSpeed) {
  auto g = gate_reference(calibrated(), in_run({100e9, 101e9, 99e9}, {70e9, 69e9, 140e9}), 5);
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_FALSE(g->steady);
  EXPECT_NEAR(g->deviation_pct, -30.0, 1e-9);
  EXPECT_NE(g->reason.find("-30.0% from the calibration's"), std::string::npos) << g->reason;
  EXPECT_NE(format_reference_gate(*g).find("UNSTEADY"), std::string::npos);

  g = gate_reference(calibrated(), in_run({106e9, 107e9, 105e9}, {100e9, 100e9, 100e9}), 5);
  ASSERT_TRUE(g.ok());
  EXPECT_FALSE(g->steady);
  EXPECT_NEAR(g->deviation_pct, 6.0, 1e-9);
  // One odd step on a rank does not decide it: the median does.
  g = gate_reference(calibrated(), in_run({100e9, 60e9, 101e9}, {100e9, 100e9, 100e9}), 5);
  ASSERT_TRUE(g.ok());
  EXPECT_TRUE(g->steady);
  EXPECT_NEAR(g->min_step_deviation_pct, -40.0, 1e-9);
  // Just inside the tolerance on both sides.
  g = gate_reference(calibrated(), in_run({95.5e9}, {104.5e9}), 5);
  ASSERT_TRUE(g.ok());
  EXPECT_TRUE(g->steady) << g->reason;
}

TEST(ReferenceGate, RefusesACalibrationThatChangedSpeedItself) {
  auto g = gate_reference(calibrated(100e9, 12.0), in_run({100e9}, {100e9}), 5);
  ASSERT_TRUE(g.ok());
  EXPECT_FALSE(g->steady);
  EXPECT_NE(g->reason.find("during calibrate"), std::string::npos) << g->reason;
}

TEST(ReferenceGate, Errors) {
  const InRunReference ok = in_run({100e9}, {100e9});
  for (double bad : {0.0, -1.0, 100.0, 250.0}) {
    auto g = gate_reference(calibrated(), ok, bad);
    EXPECT_FALSE(g.ok()) << bad;
    EXPECT_NE(g.status().message().find("expected a percentage in (0, 100)"), std::string::npos);
  }
  InRunReference other = ok;
  other.k = 128;
  auto g = gate_reference(calibrated(), other, 5);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("256x256x256, the run 256x256x128"), std::string::npos)
      << g.status().message();
  InRunReference warmup_only = ok;
  warmup_only.warmup_steps = 2;
  g = gate_reference(calibrated(), warmup_only, 5);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("none after the 2 warm-up step(s)"), std::string::npos);
  InRunReference negative = in_run({-1.0}, {100e9});
  EXPECT_FALSE(gate_reference(calibrated(), negative, 5).ok());
  EXPECT_FALSE(gate_reference(calibrated(0.0), ok, 5).ok());
  InRunReference empty = ok;
  empty.rank_step_flops_per_s.clear();
  EXPECT_FALSE(gate_reference(calibrated(), empty, 5).ok());
}

Json profile_with(const Json& reference) {
  return Json{{"device", "cpu"}, {"measurements", {{"reference_gemm", reference}}}};
}

TEST(ReferenceGate, ReadsTheProfile) {
  auto none = calibrated_reference_from_profile(Json{{"device", "cpu"}}, "p.json");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  none = calibrated_reference_from_profile(profile_with(nullptr), "p.json");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());

  Json r = {{"kernel", "linear_forward"}, {"m", 256}, {"n", 256}, {"k", 256}, {"calls", 5},
            {"flops", 33554432.0}, {"samples_flops_per_s", {99e9, 100e9, 101e9}},
            {"flops_per_s", 100e9}, {"spread_pct", 2.0}};
  auto c = calibrated_reference_from_profile(profile_with(r), "p.json");
  ASSERT_TRUE(c.ok()) << c.status().message();
  ASSERT_TRUE(c->has_value());
  EXPECT_DOUBLE_EQ((*c)->flops_per_s, 100e9);
  EXPECT_DOUBLE_EQ((*c)->spread_pct, 2.0);

  Json bad = r;
  bad["flops_per_s"] = -3;
  c = calibrated_reference_from_profile(profile_with(bad), "p.json");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("p.json"), std::string::npos) << c.status().message();
  EXPECT_NE(c.status().message().find("flops_per_s"), std::string::npos) << c.status().message();
  bad = r;
  bad.erase("m");
  EXPECT_FALSE(calibrated_reference_from_profile(profile_with(bad), "p.json").ok());
  bad = r;
  bad["speed"] = 1;
  c = calibrated_reference_from_profile(profile_with(bad), "p.json");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("speed"), std::string::npos) << c.status().message();
}

TEST(ReferenceGate, ReadsTheMeasuredReport) {
  StepReport m;
  m.kind = "measured";
  m.cluster = Json{{"device", "cpu"}};
  auto none = in_run_reference_from_report(m, "m.json");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());

  m.cluster["reference_gemm"] = {
      {"kernel", "linear_forward"}, {"m", 256}, {"n", 256}, {"k", 256}, {"calls", 5},
      {"flops", 33554432.0}, {"warmup_steps", 1}, {"note", "..."},
      {"per_rank", {{{"rank", 0}, {"flops_per_s", {1e9, 100e9, 102e9}}},
                    {{"rank", 1}, {"flops_per_s", {1e9, 98e9, 99e9}}}}}};
  auto in = in_run_reference_from_report(m, "m.json");
  ASSERT_TRUE(in.ok()) << in.status().message();
  ASSERT_TRUE(in->has_value());
  EXPECT_EQ((*in)->warmup_steps, 1);
  ASSERT_EQ((*in)->rank_step_flops_per_s.size(), 2u);
  EXPECT_EQ((*in)->rank_step_flops_per_s[1].size(), 3u);
  auto g = gate_reference(calibrated(), **in, 5);
  ASSERT_TRUE(g.ok());
  EXPECT_TRUE(g->steady);

  StepReport bad = m;
  bad.cluster["reference_gemm"]["per_rank"][1]["flops_per_s"][2] = "fast";
  in = in_run_reference_from_report(bad, "m.json");
  ASSERT_FALSE(in.ok());
  EXPECT_NE(in.status().message().find("m.json' cluster.reference_gemm.per_rank[1].flops_per_s[2]"),
            std::string::npos)
      << in.status().message();
  bad = m;
  bad.cluster["reference_gemm"]["per_rank"] = Json::array();
  EXPECT_FALSE(in_run_reference_from_report(bad, "m.json").ok());
  bad = m;
  bad.cluster["reference_gemm"].erase("warmup_steps");
  in = in_run_reference_from_report(bad, "m.json");
  ASSERT_FALSE(in.ok());
  EXPECT_NE(in.status().message().find("warmup_steps"), std::string::npos);
}

// The memory-bound reference (the STREAM triad, bytes/s): the same gate, its messages naming it.
CalibratedReference calibrated_triad(double rate = 20e9, double spread = 1.0) {
  return {.m = 1 << 24, .n = 1, .k = 1, .flops_per_s = rate, .spread_pct = spread,
          .kernel = ReferenceKernel::kTriad};
}

InRunReference in_run_triad(std::vector<double> rank0) {
  rank0.insert(rank0.begin(), 1.0);  // the warm-up step
  return {.m = 1 << 24, .n = 1, .k = 1, .warmup_steps = 1, .rank_step_flops_per_s = {rank0},
          .kernel = ReferenceKernel::kTriad};
}

TEST(ReferenceGate, GatesTheTriadAndNamesIt) {
  auto g = gate_reference(calibrated_triad(), in_run_triad({20.2e9, 19.9e9, 20.1e9}), 5);
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_TRUE(g->steady) << g->reason;
  EXPECT_EQ(g->kernel, ReferenceKernel::kTriad);
  const Json j = reference_gate_to_json(*g);
  EXPECT_EQ(j["kernel"], "triad");
  EXPECT_DOUBLE_EQ(j["calibrated_bytes_per_s"].get<double>(), 20e9);
  EXPECT_FALSE(j.contains("calibrated_flops_per_s"));
  EXPECT_NE(format_reference_gate(*g).find("20.00 GB/s"), std::string::npos)
      << format_reference_gate(*g);

  g = gate_reference(calibrated_triad(), in_run_triad({14e9, 14e9, 14e9}), 5);
  ASSERT_TRUE(g.ok());
  EXPECT_FALSE(g->steady);
  EXPECT_NEAR(g->deviation_pct, -30.0, 1e-9);
  EXPECT_NE(g->reason.find("-30.0% from the calibration's (triad, tolerance 5.0%)"),
            std::string::npos)
      << g->reason;
  g = gate_reference(calibrated_triad(20e9, 9.0), in_run_triad({20e9}), 5);
  ASSERT_TRUE(g.ok());
  EXPECT_FALSE(g->steady);
  EXPECT_NE(g->reason.find("(over 5.0%, triad): the host changed speed during calibrate"),
            std::string::npos)
      << g->reason;
  // The GEMM's reasons name it too.
  g = gate_reference(calibrated(), in_run({70e9}, {70e9}), 5);
  ASSERT_TRUE(g.ok());
  EXPECT_NE(g->reason.find("(GEMM, tolerance 5.0%)"), std::string::npos) << g->reason;
}

TEST(ReferenceGate, TriadErrors) {
  // A kernel against the other, different array sizes, a non-positive rate.
  auto g = gate_reference(calibrated(), in_run_triad({20e9}), 5);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("the calibration's is the GEMM, the run's the triad"),
            std::string::npos)
      << g.status().message();
  InRunReference smaller = in_run_triad({20e9});
  smaller.m = 1024;
  g = gate_reference(calibrated_triad(), smaller, 5);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("16777216 elements, the run 1024 elements"),
            std::string::npos)
      << g.status().message();
  g = gate_reference(calibrated_triad(0.0), in_run_triad({20e9}), 5);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("reference triad rate 0"), std::string::npos)
      << g.status().message();
  g = gate_reference(calibrated_triad(), in_run_triad({-5.0}), 5);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("rank 0: reference triad rate -5"), std::string::npos)
      << g.status().message();
}

// Steady only when both kernels are; the reason names the one that moved; without a triad the
// line says it was not gated on it.
TEST(ReferenceGate, CombinesTheGemmAndTheTriad) {
  const auto gemm_ok = gate_reference(calibrated(), in_run({100e9}, {100e9}), 5);
  const auto gemm_slow = gate_reference(calibrated(), in_run({70e9}, {70e9}), 5);
  const auto triad_ok = gate_reference(calibrated_triad(), in_run_triad({20e9}), 5);
  const auto triad_slow = gate_reference(calibrated_triad(), in_run_triad({15e9}), 5);
  ASSERT_TRUE(gemm_ok.ok() && gemm_slow.ok() && triad_ok.ok() && triad_slow.ok());

  ReferenceGates both = combine_reference_gates(*gemm_ok, *triad_ok);
  EXPECT_TRUE(both.steady);
  EXPECT_EQ(format_reference_gates(both).rfind("reference kernel: steady (GEMM: run", 0), 0u)
      << format_reference_gates(both);
  EXPECT_NE(format_reference_gates(both).find("; triad +0.0% from the calibration's 20.00 GB/s"),
            std::string::npos)
      << format_reference_gates(both);

  ReferenceGates memory_moved = combine_reference_gates(*gemm_ok, *triad_slow);
  EXPECT_FALSE(memory_moved.steady);
  EXPECT_NE(memory_moved.reason.find("-25.0% from the calibration's (triad"), std::string::npos)
      << memory_moved.reason;
  EXPECT_EQ(memory_moved.reason.find("GEMM"), std::string::npos) << memory_moved.reason;
  EXPECT_EQ(format_reference_gates(memory_moved).rfind("reference kernel: UNSTEADY: ", 0), 0u);
  Json j = reference_gates_to_json(memory_moved);
  EXPECT_EQ(j["steady"], false);
  EXPECT_EQ(j["gemm_steady"], true);
  EXPECT_EQ(j["triad"]["steady"], false);
  EXPECT_NEAR(j["triad"]["deviation_pct"].get<double>(), -25.0, 1e-9);

  ReferenceGates both_moved = combine_reference_gates(*gemm_slow, *triad_slow);
  EXPECT_FALSE(both_moved.steady);
  EXPECT_NE(both_moved.reason.find("(GEMM, tolerance 5.0%)"), std::string::npos);
  EXPECT_NE(both_moved.reason.find("; the run's reference rate is -25.0% from the calibration's "
                                   "(triad"),
            std::string::npos)
      << both_moved.reason;

  ReferenceGates compute_moved = combine_reference_gates(*gemm_slow, *triad_ok);
  EXPECT_FALSE(compute_moved.steady);
  EXPECT_EQ(compute_moved.reason.find("triad"), std::string::npos) << compute_moved.reason;

  // An old profile or report: the GEMM alone decides, and the output says the triad was not gated.
  ReferenceGates old = combine_reference_gates(*gemm_ok, std::nullopt, "the profile has none");
  EXPECT_TRUE(old.steady);
  EXPECT_NE(format_reference_gates(old).find("triad not gated: the profile has none"),
            std::string::npos)
      << format_reference_gates(old);
  j = reference_gates_to_json(old);
  EXPECT_TRUE(j["triad"].is_null());
  EXPECT_EQ(j["triad_note"], "the profile has none");
  EXPECT_FALSE(combine_reference_gates(*gemm_slow, std::nullopt, "none").steady);
}

Json triad_profile_json() {
  return {{"kernel", "STREAM triad"}, {"elements", 1 << 24}, {"calls", 5},
          {"bytes", 3.0 * 4 * (1 << 24)}, {"samples_bytes_per_s", {19e9, 20e9, 21e9}},
          {"bytes_per_s", 20e9}, {"spread_pct", 10.0}};
}

TEST(ReferenceGate, ReadsTheTriadFromTheProfile) {
  // A profile from before the triad: none, not an error.
  Json profile = profile_with(Json{{"m", 256}, {"n", 256}, {"k", 256}, {"flops_per_s", 1e9},
                                   {"spread_pct", 0.0}});
  auto none = calibrated_reference_from_profile(profile, "p.json", ReferenceKernel::kTriad);
  ASSERT_TRUE(none.ok()) << none.status().message();
  EXPECT_FALSE(none->has_value());

  profile["measurements"]["reference_triad"] = triad_profile_json();
  auto c = calibrated_reference_from_profile(profile, "p.json", ReferenceKernel::kTriad);
  ASSERT_TRUE(c.ok()) << c.status().message();
  ASSERT_TRUE(c->has_value());
  EXPECT_EQ((*c)->kernel, ReferenceKernel::kTriad);
  EXPECT_EQ((*c)->m, 1 << 24);
  EXPECT_DOUBLE_EQ((*c)->flops_per_s, 20e9);
  EXPECT_DOUBLE_EQ((*c)->spread_pct, 10.0);

  Json bad = profile;
  bad["measurements"]["reference_triad"]["bytes_per_s"] = 0;  // a non-positive rate
  c = calibrated_reference_from_profile(bad, "p.json", ReferenceKernel::kTriad);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("profile 'p.json' measurements.reference_triad"),
            std::string::npos)
      << c.status().message();
  EXPECT_NE(c.status().message().find("bytes_per_s"), std::string::npos) << c.status().message();
  bad = profile;
  bad["measurements"]["reference_triad"]["bytes_per_s"] = "fast";  // malformed
  c = calibrated_reference_from_profile(bad, "p.json", ReferenceKernel::kTriad);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("bytes_per_s"), std::string::npos) << c.status().message();
  bad = profile;
  bad["measurements"]["reference_triad"].erase("elements");
  c = calibrated_reference_from_profile(bad, "p.json", ReferenceKernel::kTriad);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("elements"), std::string::npos) << c.status().message();
  bad = profile;
  bad["measurements"]["reference_triad"]["flops_per_s"] = 1e9;  // the GEMM's key: unknown here
  c = calibrated_reference_from_profile(bad, "p.json", ReferenceKernel::kTriad);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("flops_per_s"), std::string::npos) << c.status().message();
  // The GEMM's reader is not disturbed by the triad beside it.
  auto gemm = calibrated_reference_from_profile(profile, "p.json");
  ASSERT_TRUE(gemm.ok()) << gemm.status().message();
  EXPECT_EQ((*gemm)->kernel, ReferenceKernel::kGemm);
}

TEST(ReferenceGate, ReadsTheTriadFromTheMeasuredReport) {
  StepReport m;
  m.kind = "measured";
  m.cluster = Json{{"device", "cpu"}};
  auto none = in_run_reference_from_report(m, "m.json", ReferenceKernel::kTriad);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());

  m.cluster["reference_triad"] = {
      {"kernel", "STREAM triad"}, {"elements", 1 << 24}, {"calls", 5},
      {"bytes", 3.0 * 4 * (1 << 24)}, {"warmup_steps", 1}, {"note", "..."},
      {"per_rank", {{{"rank", 0}, {"bytes_per_s", {1e9, 20e9, 21e9}}}}}};
  auto in = in_run_reference_from_report(m, "m.json", ReferenceKernel::kTriad);
  ASSERT_TRUE(in.ok()) << in.status().message();
  ASSERT_TRUE(in->has_value());
  EXPECT_EQ((*in)->kernel, ReferenceKernel::kTriad);
  EXPECT_EQ((*in)->m, 1 << 24);
  auto g = gate_reference(calibrated_triad(), **in, 5);
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_TRUE(g->steady) << g->reason;
  EXPECT_DOUBLE_EQ(g->rank_median_flops_per_s[0], 20.5e9);

  StepReport bad = m;
  bad.cluster["reference_triad"]["per_rank"][0]["bytes_per_s"][1] = "fast";
  in = in_run_reference_from_report(bad, "m.json", ReferenceKernel::kTriad);
  ASSERT_FALSE(in.ok());
  EXPECT_NE(in.status().message().find("m.json' cluster.reference_triad.per_rank[0].bytes_per_s[1]"),
            std::string::npos)
      << in.status().message();
  bad = m;
  bad.cluster["reference_triad"]["per_rank"][0]["bytes_per_s"][2] = -1;
  in = in_run_reference_from_report(bad, "m.json", ReferenceKernel::kTriad);
  ASSERT_FALSE(in.ok());
  EXPECT_NE(in.status().message().find("bytes_per_s[2]: -1 is not a positive rate"),
            std::string::npos)
      << in.status().message();
  bad = m;
  bad.cluster["reference_triad"]["per_rank"][0].erase("bytes_per_s");
  bad.cluster["reference_triad"]["per_rank"][0]["flops_per_s"] = {1e9};
  in = in_run_reference_from_report(bad, "m.json", ReferenceKernel::kTriad);
  ASSERT_FALSE(in.ok());
  EXPECT_NE(in.status().message().find("per_rank[0]: field 'bytes_per_s'"), std::string::npos)
      << in.status().message();
  bad = m;
  bad.cluster["reference_triad"]["elements"] = 0;
  in = in_run_reference_from_report(bad, "m.json", ReferenceKernel::kTriad);
  ASSERT_FALSE(in.ok());
  EXPECT_NE(in.status().message().find("cluster.reference_triad"), std::string::npos);
  EXPECT_NE(in.status().message().find("elements"), std::string::npos) << in.status().message();
  bad = m;
  bad.cluster["reference_triad"]["per_rank"] = Json::array();
  in = in_run_reference_from_report(bad, "m.json", ReferenceKernel::kTriad);
  ASSERT_FALSE(in.ok());
  EXPECT_NE(in.status().message().find("\"bytes_per_s\": [per step]"), std::string::npos)
      << in.status().message();
}

}  // namespace
}  // namespace trainplan::validation
