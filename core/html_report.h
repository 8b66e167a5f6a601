// Pictures that open anywhere: one self-contained HTML file (inline SVG and CSS, no script, no
// network, no external URL) for a simulated step (`simulate --html`) and for the planner's
// candidates (`plan --html`). Pure string building; the tools write the file. The simulator
// fills StepPicture from its played program (simulator/timeline.cc). Tested by
// tests/core/html_report_test.cc and, in a real browser, scripts/html_screenshot_test.sh.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace trainplan::html {

// A span of time on a lane. kind picks the colour: "F" forward, "B" backward, "R" recompute,
// "O" optimizer, "other" compute, or a communication group ("tp", "cp", "pp", "dp", "ep",
// "host").
struct Bar {
  double begin_s = 0, end_s = 0;
  std::string kind;
  std::string title;  // the tooltip
};

// One row of the timeline: a rank's compute stream or its communication.
struct Lane {
  std::string label;
  std::vector<Bar> bars;
};

// A rank's device memory over time: (seconds, bytes) after each change.
struct MemoryTrack {
  std::string label;
  std::vector<std::pair<double, double>> points;
};

// One part of the step's time ("compute", "exposed tp", "bubble and waiting", ...).
struct Part {
  std::string label;
  double seconds = 0;
};

struct StepPicture {
  std::string title;
  std::vector<std::string> lines;  // summary under the title
  double step_s = 0;
  std::vector<Lane> lanes;
  std::vector<Part> breakdown;
  std::string breakdown_note;  // said under the breakdown
  std::vector<MemoryTrack> memory;
  double capacity_bytes = 0, usable_bytes = 0;
};

// A candidate of the planner. mark: "" (a ranked candidate), "pick", "tie" (tied with the pick
// within the expected error), "usual", "baseline", or "feasible" (any candidate the search
// found feasible, drawn as a small dot, at most one per pixel, without its title).
struct Point {
  double step_s = 0, memory_bytes = 0;
  std::string mark;
  std::string title;
};

struct PlanPicture {
  std::string title;
  std::vector<std::string> lines;
  std::vector<Point> points;
  double capacity_bytes = 0, usable_bytes = 0;
  std::optional<StepPicture> pick;  // the recommendation's simulated step
};

// A whole HTML document.
std::string step_page(const StepPicture& picture);
std::string plan_page(const PlanPicture& picture);

// Text made safe inside HTML and SVG (&, <, >, ").
std::string escape(const std::string& text);

}  // namespace trainplan::html
