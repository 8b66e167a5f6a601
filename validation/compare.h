// Predicted against measured: two StepReports (core/step_report.h) side by side. Step time,
// time per phase (compute, optimizer, idle) and per group (communication time, exposed) per
// rank, peak memory per rank, bytes per group per rank and in total; error in percent as
// (predicted - measured) / measured. No file I/O: the `compare` tool reads the files.
//
// Expert parallelism: the router decides how many tokens each rank of an ep group sends in
// its dispatch and combine all-to-alls, so a rank's "ep" bytes differ from the balanced
// prediction (by +-2.4% in the CPU matrix's ep plans) while the group's sum does not. The
// per-rank "ep" rows are then information (CompareRow::informational), and one
// "bytes_group_sum" row per ep group (RankLayout's kEp groups of the measured plan) is what
// must be exact. The expert-data-parallel gradient reduction is reported under "dp" (its
// bytes are the experts' parameters, which routing does not change), so it stays exact per
// rank.
// Tested by tests/validation/compare_test.cc.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/json_util.h"
#include "core/status.h"
#include "core/step_report.h"

namespace trainplan::validation {

struct CompareRow {
  std::string quantity;   // "step_time", "compute", "optimizer", "idle", "comm_time",
                          // "comm_exposed", "peak_memory", "bytes_sent", "bytes_total",
                          // "bytes_group_sum" (an ep group's ranks summed; rank: its first)
  std::string unit;       // "s" or "bytes"
  std::int64_t rank = -1; // -1: whole step
  std::string group;      // for comm rows
  double predicted = 0, measured = 0;
  // (predicted - measured) / measured * 100; absent when measured is 0 and predicted is not.
  std::optional<double> error_pct;
  // The predicted rank this row took its figure from when the prediction simulated one rank
  // per symmetric set (the rank of the same stage); -1 when it is the rank itself.
  std::int64_t predicted_from_rank = -1;
  // Shown, not checked: a rank's share of a routed all-to-all (the ep group's sum is checked).
  bool informational = false;
};

struct Comparison {
  std::string predicted_source, measured_source;  // file names
  std::vector<CompareRow> rows;
  double step_time_error_pct = 0;
  bool bytes_exact = true;            // every bytes row equal, informational rows aside
  double max_abs_memory_error_pct = 0;
};

// Names: the files (or other sources) the reports came from, used in messages. Errors: a
// report of the wrong kind, reports of different plans or models, a measured rank that the
// prediction does not cover.
Result<Comparison> compare_reports(const StepReport& predicted, std::string_view predicted_name,
                                   const StepReport& measured, std::string_view measured_name);

std::string format_comparison_table(const Comparison& c);
// Schema "trainplan.compare/1".
Json comparison_to_json(const Comparison& c);

}  // namespace trainplan::validation
