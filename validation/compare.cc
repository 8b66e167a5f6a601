// Predicted against measured; see compare.h.
#include "validation/compare.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>

#include "core/plan.h"
#include "core/rank_layout.h"
#include "core/units.h"

namespace trainplan::validation {

namespace {

std::optional<double> error_pct(double predicted, double measured) {
  if (measured == 0) return predicted == 0 ? std::optional<double>(0.0) : std::nullopt;
  return 100.0 * (predicted - measured) / measured;
}

CompareRow row(std::string quantity, std::string unit, std::int64_t rank, std::string group,
               double predicted, double measured) {
  CompareRow r;
  r.quantity = std::move(quantity);
  r.unit = std::move(unit);
  r.rank = rank;
  r.group = std::move(group);
  r.predicted = predicted;
  r.measured = measured;
  r.error_pct = error_pct(predicted, measured);
  return r;
}

// The predicted rank for a measured one: itself, or the simulated rank of the same stage.
const RankStep* predicted_rank_for(const StepReport& p, const RankStep& m) {
  for (const RankStep& r : p.ranks)
    if (r.rank == m.rank) return &r;
  for (const RankStep& r : p.ranks)
    if (r.stage == m.stage) return &r;
  return nullptr;
}

std::string human(double v, const std::string& unit) {
  char buf[64];
  if (unit == "s") {
    if (std::abs(v) >= 1.0) std::snprintf(buf, sizeof buf, "%.3f s", v);
    else if (std::abs(v) >= 1e-3) std::snprintf(buf, sizeof buf, "%.3f ms", v * 1e3);
    else std::snprintf(buf, sizeof buf, "%.1f us", v * 1e6);
  } else if (std::abs(v) >= kGB) {
    std::snprintf(buf, sizeof buf, "%.2f GB", v / kGB);
  } else if (std::abs(v) >= kMB) {
    std::snprintf(buf, sizeof buf, "%.2f MB", v / kMB);
  } else {
    std::snprintf(buf, sizeof buf, "%.0f B", v);
  }
  return buf;
}

// The report group of the MoE dispatch and combine all-to-alls, whose per-rank bytes the
// router decides.
constexpr std::string_view kRoutedGroup = "ep";

// Bytes sent in the routed group per measured rank: predicted (from the rank's predicted
// figure) and measured.
struct RoutedBytes {
  double predicted = 0, measured = 0;
};

// The ep groups of the measured plan, as lists of ranks; one group of every measured rank
// when the report has no plan to place its ranks with.
std::vector<std::vector<std::int64_t>> ep_groups(const StepReport& m,
                                                 const std::map<std::int64_t, RoutedBytes>& by_rank) {
  std::vector<std::vector<std::int64_t>> groups;
  std::optional<RankLayout> layout;
  if (!m.plan.is_null())
    if (auto plan = plan_from_json(m.plan, "measured plan"); plan.ok())
      if (auto l = RankLayout::make(*plan); l.ok()) layout = *l;
  std::set<std::int64_t> seen;
  for (const auto& [rank, _] : by_rank) {
    if (seen.count(rank)) continue;
    std::vector<std::int64_t> g;
    if (layout && rank < layout->world_size()) g = layout->group(Axis::kEp, rank);
    else
      for (const auto& [r, __] : by_rank) g.push_back(r);
    for (std::int64_t r : g) seen.insert(r);
    groups.push_back(std::move(g));
  }
  return groups;
}

// One "bytes_group_sum" row per ep group: the sum over its measured ranks, which routing does
// not change.
void add_routed_group_sums(const StepReport& m, const std::map<std::int64_t, RoutedBytes>& by_rank,
                           Comparison& c) {
  for (const std::vector<std::int64_t>& g : ep_groups(m, by_rank)) {
    double pb = 0, mb = 0;
    for (std::int64_t r : g)
      if (auto it = by_rank.find(r); it != by_rank.end()) {
        pb += it->second.predicted;
        mb += it->second.measured;
      }
    c.rows.push_back(row("bytes_group_sum", "bytes", g.front(), std::string(kRoutedGroup), pb, mb));
    if (pb != mb) c.bytes_exact = false;
  }
}

}  // namespace

Result<Comparison> compare_reports(const StepReport& p, std::string_view pname,
                                   const StepReport& m, std::string_view mname) {
  const std::string pw = "step report '" + std::string(pname) + "'";
  const std::string mw = "step report '" + std::string(mname) + "'";
  if (p.kind != "predicted")
    return Status::Error(pw + ": field 'kind': expected \"predicted\", got \"" + p.kind + "\"");
  if (m.kind != "measured")
    return Status::Error(mw + ": field 'kind': expected \"measured\", got \"" + m.kind + "\"");
  if (!p.plan.is_null() && !m.plan.is_null() && p.plan != m.plan)
    return Status::Error(mw + ": field 'plan': differs from the plan in " + pw + " (" +
                         json_value_for_message(m.plan) + " vs " + json_value_for_message(p.plan) +
                         ")");
  if (!p.model.is_null() && !m.model.is_null() && p.model != m.model)
    return Status::Error(mw + ": field 'model': differs from the model in " + pw);
  if (!(m.step_time_s > 0))
    return Status::Error(mw + ": field 'step_time_s': must be positive to compare against");
  if (m.ranks.empty()) return Status::Error(mw + ": field 'ranks': no ranks to compare");

  Comparison c;
  c.predicted_source = std::string(pname);
  c.measured_source = std::string(mname);
  c.rows.push_back(row("step_time", "s", -1, "", p.step_time_s, m.step_time_s));
  c.step_time_error_pct = *c.rows.back().error_pct;

  std::map<std::int64_t, RoutedBytes> routed;
  std::vector<RankStep> measured_ranks = m.ranks;
  std::sort(measured_ranks.begin(), measured_ranks.end(),
            [](const RankStep& a, const RankStep& b) { return a.rank < b.rank; });
  for (const RankStep& mr : measured_ranks) {
    const RankStep* pr = predicted_rank_for(p, mr);
    if (pr == nullptr)
      return Status::Error(pw + ": field 'ranks': no rank " + std::to_string(mr.rank) +
                           " and no rank of its stage " + std::to_string(mr.stage) +
                           " (measured in " + std::string(mname) + ")");
    const std::int64_t from = pr->rank == mr.rank ? -1 : pr->rank;
    auto add = [&](CompareRow r) {
      r.predicted_from_rank = from;
      c.rows.push_back(std::move(r));
    };
    add(row("compute", "s", mr.rank, "", pr->compute_s, mr.compute_s));
    add(row("optimizer", "s", mr.rank, "", pr->optimizer_s, mr.optimizer_s));
    add(row("idle", "s", mr.rank, "", pr->idle_s, mr.idle_s));
    add(row("peak_memory", "bytes", mr.rank, "", pr->peak_memory_bytes, mr.peak_memory_bytes));
    if (auto e = c.rows.back().error_pct)
      c.max_abs_memory_error_pct = std::max(c.max_abs_memory_error_pct, std::abs(*e));
    std::set<std::string> groups;
    for (const auto& [g, _] : pr->comm) groups.insert(g);
    for (const auto& [g, _] : mr.comm) groups.insert(g);
    for (const std::string& g : groups) {
      const GroupComm pg = pr->comm.count(g) ? pr->comm.at(g) : GroupComm{};
      const GroupComm mg = mr.comm.count(g) ? mr.comm.at(g) : GroupComm{};
      add(row("comm_time", "s", mr.rank, g, pg.time_s, mg.time_s));
      add(row("comm_exposed", "s", mr.rank, g, pg.exposed_s, mg.exposed_s));
      CompareRow bytes = row("bytes_sent", "bytes", mr.rank, g, pg.bytes_sent, mg.bytes_sent);
      if (g == kRoutedGroup) {
        bytes.informational = true;
        routed[mr.rank] = {pg.bytes_sent, mg.bytes_sent};
      } else if (pg.bytes_sent != mg.bytes_sent) {
        c.bytes_exact = false;
      }
      add(std::move(bytes));
    }
  }
  if (!routed.empty()) add_routed_group_sums(m, routed, c);
  std::set<std::string> groups;
  for (const auto& [g, _] : p.bytes_per_group) groups.insert(g);
  for (const auto& [g, _] : m.bytes_per_group) groups.insert(g);
  for (const std::string& g : groups) {
    const double pb = p.bytes_per_group.count(g) ? p.bytes_per_group.at(g) : 0.0;
    const double mb = m.bytes_per_group.count(g) ? m.bytes_per_group.at(g) : 0.0;
    c.rows.push_back(row("bytes_total", "bytes", -1, g, pb, mb));
    if (pb != mb) c.bytes_exact = false;
  }
  return c;
}

std::string format_comparison_table(const Comparison& c) {
  std::ostringstream os;
  char line[256];
  os << "# predicted: " << c.predicted_source << "\n# measured:  " << c.measured_source << "\n";
  std::snprintf(line, sizeof line, "# %-15s %5s %-10s %16s %16s %9s\n", "quantity", "rank",
                "group", "predicted", "measured", "error%");
  os << line;
  for (const CompareRow& r : c.rows) {
    const std::string rank = r.rank < 0 ? "all" : std::to_string(r.rank) +
                                                      (r.predicted_from_rank >= 0 ? "*" : "");
    char err[32];
    if (r.error_pct) std::snprintf(err, sizeof err, "%+9.1f", *r.error_pct);
    else std::snprintf(err, sizeof err, "%9s", "n/a");
    std::snprintf(line, sizeof line, "  %-15s %5s %-10s %16s %16s %s%s\n", r.quantity.c_str(),
                  rank.c_str(), r.group.empty() ? "-" : r.group.c_str(),
                  human(r.predicted, r.unit).c_str(), human(r.measured, r.unit).c_str(), err,
                  r.informational ? "  (i)" : "");
    os << line;
  }
  std::snprintf(line, sizeof line,
                "# step time error %+.1f%%; bytes per group %s; peak memory max |error| %.1f%%\n",
                c.step_time_error_pct, c.bytes_exact ? "exact" : "DIFFER",
                c.max_abs_memory_error_pct);
  os << line;
  if (std::any_of(c.rows.begin(), c.rows.end(),
                  [](const CompareRow& r) { return r.predicted_from_rank >= 0; }))
    os << "# *: predicted figure taken from the simulated rank of the same stage\n";
  if (std::any_of(c.rows.begin(), c.rows.end(),
                  [](const CompareRow& r) { return r.informational; }))
    os << "# (i): information, not checked: the router decides each rank's share of the ep "
          "all-to-alls; bytes_group_sum (the ep group's ranks, from the first) is checked\n";
  return os.str();
}

Json comparison_to_json(const Comparison& c) {
  Json j;
  j["schema"] = "trainplan.compare/1";
  j["predicted"] = c.predicted_source;
  j["measured"] = c.measured_source;
  j["step_time_error_pct"] = c.step_time_error_pct;
  j["bytes_exact"] = c.bytes_exact;
  j["max_abs_memory_error_pct"] = c.max_abs_memory_error_pct;
  Json rows = Json::array();
  for (const CompareRow& r : c.rows) {
    Json rj = {{"quantity", r.quantity},
               {"unit", r.unit},
               {"predicted", r.predicted},
               {"measured", r.measured},
               {"error_pct", r.error_pct ? Json(*r.error_pct) : Json(nullptr)}};
    if (r.rank >= 0) rj["rank"] = r.rank;
    if (!r.group.empty()) rj["group"] = r.group;
    if (r.predicted_from_rank >= 0) rj["predicted_from_rank"] = r.predicted_from_rank;
    if (r.informational) rj["informational"] = true;
    rows.push_back(rj);
  }
  j["rows"] = rows;
  return j;
}

}  // namespace trainplan::validation
