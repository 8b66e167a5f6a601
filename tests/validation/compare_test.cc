// compare_reports on hand-made reports: error percentages, bytes exactness, symmetric ranks,
// and the errors that name the report and the field.
#include "validation/compare.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace trainplan::validation {
namespace {

StepReport report(const char* kind, double step, double compute, double mem, double dp_bytes) {
  StepReport r;
  r.kind = kind;
  r.plan = {{"dp", 2}};
  r.step_time_s = step;
  for (std::int64_t rank : {0, 1}) {
    RankStep s;
    s.rank = rank;
    s.compute_s = compute;
    s.optimizer_s = compute / 10;
    s.idle_s = 0;
    s.peak_memory_bytes = mem;
    s.comm["dp"] = {dp_bytes, 0.002, 0.001};
    r.ranks.push_back(s);
  }
  r.bytes_per_group["dp"] = 2 * dp_bytes;
  return r;
}

const CompareRow* find(const Comparison& c, const std::string& q, std::int64_t rank,
                       const std::string& group = "") {
  for (const CompareRow& r : c.rows)
    if (r.quantity == q && r.rank == rank && r.group == group) return &r;
  return nullptr;
}

TEST(Compare, ErrorPercentages) {
  auto c = compare_reports(report("predicted", 0.11, 0.09, 1.1e8, 1000), "p.json",
                           report("measured", 0.10, 0.10, 1.0e8, 1000), "m.json");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_NEAR(c->step_time_error_pct, 10.0, 1e-9);
  EXPECT_NEAR(*find(*c, "compute", 1)->error_pct, -10.0, 1e-9);
  EXPECT_NEAR(*find(*c, "peak_memory", 0)->error_pct, 10.0, 1e-9);
  EXPECT_NEAR(c->max_abs_memory_error_pct, 10.0, 1e-9);
  EXPECT_EQ(*find(*c, "bytes_sent", 0, "dp")->error_pct, 0.0);
  EXPECT_EQ(*find(*c, "idle", 0)->error_pct, 0.0);  // both zero
  EXPECT_TRUE(c->bytes_exact);
  const Json j = comparison_to_json(*c);
  EXPECT_EQ(j["schema"], "trainplan.compare/1");
  EXPECT_EQ(j["bytes_exact"], true);
  EXPECT_NE(format_comparison_table(*c).find("step_time"), std::string::npos);
}

TEST(Compare, BytesDifferAndZeroMeasured) {
  StepReport m = report("measured", 0.1, 0.1, 1e8, 1000);
  m.ranks[0].comm["dp"].exposed_s = 0;
  auto c = compare_reports(report("predicted", 0.1, 0.1, 1e8, 1004), "p.json", m, "m.json");
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(c->bytes_exact);
  EXPECT_NEAR(*find(*c, "bytes_total", -1, "dp")->error_pct, 0.4, 1e-9);
  EXPECT_FALSE(find(*c, "comm_exposed", 0, "dp")->error_pct.has_value());
  EXPECT_TRUE(comparison_to_json(*c)["rows"][0].contains("error_pct"));
}

TEST(Compare, SymmetricRankTakenFromItsStage) {
  StepReport p = report("predicted", 0.1, 0.1, 1e8, 1000);
  p.ranks.pop_back();  // only rank 0 simulated; rank 1 is its DP replica (same stage)
  auto c = compare_reports(p, "p.json", report("measured", 0.1, 0.1, 1e8, 1000), "m.json");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(find(*c, "compute", 1)->predicted_from_rank, 0);
  EXPECT_EQ(find(*c, "compute", 0)->predicted_from_rank, -1);
}

// Four ranks, two ep groups of two ({0, 1} and {2, 3}), each rank sending `ep_bytes[rank]` in
// the expert all-to-alls and 1000 bytes in dp.
StepReport ep_report(const char* kind, const std::vector<double>& ep_bytes, bool with_plan = true) {
  StepReport r = report(kind, 0.1, 0.1, 1e8, 1000);
  r.ranks.clear();
  if (with_plan)
    r.plan = {{"tp", 1}, {"pp", 1}, {"dp", 4}, {"ep", 2}, {"micro_batch_size", 1},
              {"global_batch_size", 4}};
  else
    r.plan = nullptr;
  double total = 0;
  for (std::int64_t rank = 0; rank < 4; ++rank) {
    RankStep s;
    s.rank = rank;
    s.compute_s = 0.1;
    s.peak_memory_bytes = 1e8;
    s.comm["dp"] = {1000, 0.002, 0.001};
    s.comm["ep"] = {ep_bytes[static_cast<std::size_t>(rank)], 0.003, 0.002};
    total += ep_bytes[static_cast<std::size_t>(rank)];
    r.ranks.push_back(s);
  }
  r.bytes_per_group["dp"] = 4000;
  r.bytes_per_group["ep"] = total;
  return r;
}

// The router decides each rank's share of its ep group's all-to-alls: per rank it is shown as
// information (+-2.4%, as routing gave in the CPU matrix), and the group's sum is checked.
TEST(Compare, EpBytesCheckedAsTheGroupsSumPerRankSplitIsInformation) {
  const StepReport p = ep_report("predicted", {1000, 1000, 1000, 1000});
  auto c = compare_reports(p, "p.json", ep_report("measured", {1024, 976, 990, 1010}), "m.json");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_TRUE(c->bytes_exact);
  const CompareRow* rank0 = find(*c, "bytes_sent", 0, "ep");
  ASSERT_NE(rank0, nullptr);
  EXPECT_TRUE(rank0->informational);
  EXPECT_NEAR(*rank0->error_pct, -100.0 * 24 / 1024, 1e-9);
  EXPECT_FALSE(find(*c, "bytes_sent", 0, "dp")->informational);  // dp: checked per rank
  for (std::int64_t first : {0, 2}) {
    const CompareRow* sum = find(*c, "bytes_group_sum", first, "ep");
    ASSERT_NE(sum, nullptr) << "ep group from rank " << first;
    EXPECT_EQ(sum->predicted, 2000);
    EXPECT_EQ(sum->measured, 2000);
    EXPECT_FALSE(sum->informational);
  }
  EXPECT_EQ(find(*c, "bytes_group_sum", 1, "ep"), nullptr);  // one row per group
  const Json j = comparison_to_json(*c);
  EXPECT_EQ(j["bytes_exact"], true);
  bool informational_in_json = false;
  for (const Json& row : j["rows"])
    if (row.value("quantity", "") == "bytes_sent" && row.value("group", "") == "ep")
      informational_in_json = row.value("informational", false);
  EXPECT_TRUE(informational_in_json);
  const std::string table = format_comparison_table(*c);
  EXPECT_NE(table.find("(i)"), std::string::npos) << table;
  EXPECT_NE(table.find("bytes_group_sum"), std::string::npos) << table;
  EXPECT_NE(table.find("bytes per group exact"), std::string::npos) << table;
}

// A group's sum that differs fails, even when the sum over all ranks agrees: the groups are
// the plan's ep groups, not the whole world.
TEST(Compare, EpGroupSumThatDiffersIsNotExact) {
  const StepReport p = ep_report("predicted", {1000, 1000, 1000, 1000});
  auto c = compare_reports(p, "p.json", ep_report("measured", {1010, 1010, 990, 990}), "m.json");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_FALSE(c->bytes_exact);
  EXPECT_NEAR(*find(*c, "bytes_group_sum", 0, "ep")->error_pct, -100.0 * 20 / 2020, 1e-9);
  EXPECT_NEAR(*find(*c, "bytes_group_sum", 2, "ep")->error_pct, 100.0 * 20 / 1980, 1e-9);
  EXPECT_EQ(*find(*c, "bytes_total", -1, "ep")->error_pct, 0.0);
}

// Reports without a plan cannot place ranks in ep groups: the sum runs over every rank.
TEST(Compare, EpWithoutAPlanSumsOverEveryRank) {
  auto c = compare_reports(ep_report("predicted", {1000, 1000, 1000, 1000}, false), "p.json",
                           ep_report("measured", {1010, 1010, 990, 990}, false), "m.json");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_TRUE(c->bytes_exact);
  const CompareRow* sum = find(*c, "bytes_group_sum", 0, "ep");
  ASSERT_NE(sum, nullptr);
  EXPECT_EQ(sum->measured, 4000);
  EXPECT_EQ(find(*c, "bytes_group_sum", 2, "ep"), nullptr);
}

TEST(Compare, ErrorsNameTheReportAndField) {
  const StepReport p = report("predicted", 0.1, 0.1, 1e8, 1000);
  const StepReport m = report("measured", 0.1, 0.1, 1e8, 1000);
  auto wrong_kind = compare_reports(m, "a.json", m, "b.json");
  ASSERT_FALSE(wrong_kind.ok());
  EXPECT_NE(wrong_kind.status().message().find("'a.json': field 'kind'"), std::string::npos);
  StepReport other = m;
  other.plan = {{"dp", 1}};
  auto plans = compare_reports(p, "a.json", other, "b.json");
  ASSERT_FALSE(plans.ok());
  EXPECT_NE(plans.status().message().find("'b.json': field 'plan'"), std::string::npos);
  StepReport zero = m;
  zero.step_time_s = 0;
  auto z = compare_reports(p, "a.json", zero, "b.json");
  ASSERT_FALSE(z.ok());
  EXPECT_NE(z.status().message().find("field 'step_time_s'"), std::string::npos);
  StepReport stage = p;
  for (RankStep& r : stage.ranks) r.stage = 1;
  StepReport m2 = m;
  m2.ranks[0].rank = 7;
  auto missing = compare_reports(stage, "a.json", m2, "b.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("no rank 7"), std::string::npos);
}

}  // namespace
}  // namespace trainplan::validation
