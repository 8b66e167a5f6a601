// The offline pictures (core/html_report.h): one self-contained document (no script, no
// external URL), every bar and point drawn with its tooltip, text escaped, capacity drawn.
// scripts/html_screenshot_test.sh renders real ones in headless Chromium.
#include "core/html_report.h"

#include <string>

#include <gtest/gtest.h>

namespace trainplan::html {
namespace {

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// Nothing that would reach the network or run code: no script, no link, no URL but the SVG
// namespace name (an identifier, never fetched).
void expect_self_contained(const std::string& page) {
  EXPECT_EQ(page.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_EQ(count(page, "<script"), 0u);
  EXPECT_EQ(count(page, "<link"), 0u);
  EXPECT_EQ(count(page, "src="), 0u);
  EXPECT_EQ(count(page, "http"), count(page, "xmlns=\"http://www.w3.org/2000/svg\""));
  EXPECT_NE(page.find("</html>"), std::string::npos);
}

StepPicture step() {
  StepPicture p;
  p.title = "step <1>";
  p.lines = {"plan: tp=2 & pp=2"};
  p.step_s = 2.0;
  p.lanes = {{"rank 0 compute", {{0.0, 0.5, "F", "forward mb0"}, {0.5, 1.5, "B", "backward mb0"}}},
             {"rank 0 comm", {{1.5, 1.8, "dp", "dp reduce_scatter"}}}};
  p.breakdown = {{"compute", 1.5}, {"exposed dp", 0.3}, {"bubble and waiting", 0.2}};
  p.memory = {{"rank 0", {{0.0, 10e9}, {0.5, 30e9}, {1.5, 10e9}}}};
  p.capacity_bytes = 80e9;
  p.usable_bytes = 72e9;
  return p;
}

TEST(HtmlReport, StepPageDrawsEveryBarWithItsTooltip) {
  const std::string page = step_page(step());
  expect_self_contained(page);
  EXPECT_NE(page.find("<title>forward mb0</title>"), std::string::npos);
  EXPECT_NE(page.find("<title>backward mb0</title>"), std::string::npos);
  EXPECT_NE(page.find("<title>dp reduce_scatter</title>"), std::string::npos);
  EXPECT_NE(page.find("capacity 80.0 GB"), std::string::npos);
  EXPECT_NE(page.find("usable 72.0 GB"), std::string::npos);
  EXPECT_NE(page.find("compute 75%"), std::string::npos);  // 1.5 of 2.0 s, labelled on its bar
  EXPECT_EQ(count(page, "<polyline"), 1u);
  // Escaped text: the title's "<1>" and the line's "&".
  EXPECT_NE(page.find("step &lt;1&gt;"), std::string::npos);
  EXPECT_NE(page.find("tp=2 &amp; pp=2"), std::string::npos);
  EXPECT_EQ(page.find("step <1>"), std::string::npos);
}

TEST(HtmlReport, PlanPageMarksThePickAndTheReferences) {
  PlanPicture p;
  p.title = "plan";
  p.capacity_bytes = 80e9;
  p.points = {{1.0, 60e9, "pick", "tp=8 pp=2"}, {1.1, 50e9, "", "tp=4 pp=4"},
              {1.3, 70e9, "usual", "tp=8 pp=1"}, {1.2, 40e9, "baseline", "yours"}};
  p.pick = step();
  const std::string page = plan_page(p);
  expect_self_contained(page);
  EXPECT_EQ(count(page, "<circle"), 4u);
  for (const char* mark : {">pick</text>", ">usual</text>", ">baseline</text>"})
    EXPECT_NE(page.find(mark), std::string::npos) << mark;
  EXPECT_NE(page.find("The recommendation, simulated"), std::string::npos);
  EXPECT_NE(page.find("capacity 80 GB"), std::string::npos);
}

// The whole search as dots, one per pixel: 1,000 candidates on two spots draw two dots; ties
// are marked in their own colour without a label; the pick is drawn last, on top.
TEST(HtmlReport, PlanPageDrawsEveryFeasibleCandidateOncePerPixelAndMarksTheTies) {
  PlanPicture p;
  p.capacity_bytes = 80e9;
  for (int i = 0; i < 1000; ++i)
    p.points.push_back({i % 2 == 0 ? 1.0 : 2.0, 50e9, "feasible", ""});
  p.points.push_back({1.05, 60e9, "tie", "tp=4 pp=2"});
  p.points.push_back({1.0, 61e9, "pick", "tp=8 pp=2"});
  const std::string page = plan_page(p);
  expect_self_contained(page);
  EXPECT_EQ(count(page, "<circle"), 4u);
  EXPECT_EQ(count(page, "r=\"2\""), 2u);
  EXPECT_EQ(count(page, "fill=\"#CC79A7\""), 1u);
  EXPECT_EQ(page.find(">tie</text>"), std::string::npos);
  EXPECT_NE(page.find("tied with it"), std::string::npos);
  EXPECT_NE(page.find("every feasible candidate"), std::string::npos);
  EXPECT_GT(page.find(">pick</text>"), page.find("tp=4 pp=2"));
}

// A search whose slowest candidate is over 3x its fastest gets a logarithmic time axis with
// ticks at 1, 2, 3 and 5 times the powers of ten; a narrow one keeps the linear axis.
TEST(HtmlReport, PlanPageTimeAxisTurnsLogarithmicPastThreeTimesTheFastest) {
  PlanPicture wide;
  wide.points = {{1.0, 50e9, "pick", "fast"}, {120.0, 20e9, "feasible", ""}};
  const std::string page = plan_page(wide);
  EXPECT_NE(page.find("step time, seconds (log scale)"), std::string::npos);
  for (const char* tick :
       {">1</text>", ">2</text>", ">3</text>", ">5</text>", ">10</text>", ">100</text>"})
    EXPECT_NE(page.find(tick), std::string::npos) << tick;
  PlanPicture narrow;
  narrow.points = {{1.0, 50e9, "pick", "fast"}, {2.5, 20e9, "feasible", ""}};
  EXPECT_EQ(plan_page(narrow).find("(log scale)"), std::string::npos);
}

TEST(HtmlReport, EmptyPicturesStillMakeADocument) {
  expect_self_contained(step_page(StepPicture{}));
  expect_self_contained(plan_page(PlanPicture{}));
}

}  // namespace
}  // namespace trainplan::html
