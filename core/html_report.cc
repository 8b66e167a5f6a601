// Self-contained HTML pictures; see html_report.h.
#include "core/html_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>

namespace trainplan::html {

namespace {

// The drawing's geometry in SVG user units (pixels at 100% zoom).
constexpr double kWidth = 1200, kLeft = 190, kRight = 20, kLaneHeight = 16, kLaneGap = 4;
constexpr double kPlot = kWidth - kLeft - kRight;

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// Colours by kind (Okabe-Ito's colour-blind-safe palette, Okabe & Ito 2008).
const std::map<std::string, std::string>& colours() {
  static const std::map<std::string, std::string> c = {
      {"F", "#0072B2"},  {"B", "#009E73"},  {"R", "#E69F00"},  {"O", "#CC79A7"},
      {"other", "#999999"}, {"tp", "#D55E00"}, {"cp", "#56B4E9"}, {"pp", "#F0E442"},
      {"dp", "#000000"}, {"ep", "#882255"}, {"host", "#44AA99"}};
  return c;
}

std::string colour(const std::string& kind) {
  const auto it = colours().find(kind);
  return it == colours().end() ? "#999999" : it->second;
}

const char* kStyle =
    "<style>body{font-family:sans-serif;margin:16px;color:#222}h1{font-size:20px}"
    "h2{font-size:16px;margin-top:24px}p.l{margin:2px 0}svg{display:block}"
    "text{font-size:11px;font-family:sans-serif}rect,line{shape-rendering:crispEdges}.legend span{display:inline-block;"
    "margin-right:12px}.legend i{display:inline-block;width:12px;height:12px;"
    "margin-right:4px;vertical-align:middle}</style>";

std::string header(const std::string& title, const std::vector<std::string>& lines) {
  std::string out = "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>" +
                    escape(title) + "</title>" + kStyle + "</head><body>\n<h1>" +
                    escape(title) + "</h1>\n";
  for (const std::string& l : lines) out += "<p class=\"l\">" + escape(l) + "</p>\n";
  return out;
}

std::string legend(const std::vector<std::pair<std::string, std::string>>& items) {
  std::string out = "<p class=\"legend\">";
  for (const auto& [kind, label] : items)
    out += "<span><i style=\"background:" + colour(kind) + "\"></i>" + escape(label) + "</span>";
  return out + "</p>\n";
}

// Time axis ticks under a plot of `span_s` seconds at height y.
std::string time_axis(double span_s, double y) {
  std::ostringstream os;
  const double step = std::pow(10.0, std::floor(std::log10(std::max(span_s, 1e-12) / 5)));
  const double tick = span_s / step > 25 ? 5 * step : (span_s / step > 10 ? 2 * step : step);
  for (double t = 0; t <= span_s * 1.0001; t += tick) {
    const double x = kLeft + t / span_s * kPlot;
    os << "<line x1=\"" << num(x) << "\" y1=\"" << num(y) << "\" x2=\"" << num(x) << "\" y2=\""
       << num(y + 4) << "\" stroke=\"#555\"/><text x=\"" << num(x) << "\" y=\"" << num(y + 15)
       << "\" text-anchor=\"middle\">" << fmt("%.4g", t) << "</text>";
  }
  os << "<text x=\"" << num(kLeft + kPlot) << "\" y=\"" << num(y + 28)
     << "\" text-anchor=\"end\">seconds</text>";
  return os.str();
}

std::string timeline_svg(const StepPicture& p) {
  const double span = std::max(p.step_s, 1e-12);
  const double height = static_cast<double>(p.lanes.size()) * (kLaneHeight + kLaneGap) + 40;
  std::ostringstream os;
  os << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kWidth << "\" height=\""
     << num(height) << "\" viewBox=\"0 0 " << kWidth << " " << num(height) << "\">";
  double y = 4;
  for (const Lane& lane : p.lanes) {
    os << "<text x=\"" << num(kLeft - 6) << "\" y=\"" << num(y + 12)
       << "\" text-anchor=\"end\">" << escape(lane.label) << "</text><rect x=\"" << kLeft
       << "\" y=\"" << num(y) << "\" width=\"" << kPlot << "\" height=\"" << kLaneHeight
       << "\" fill=\"#f4f4f4\"/>";
    for (const Bar& b : lane.bars) {
      const double x = kLeft + b.begin_s / span * kPlot;
      const double w = std::max(0.5, (b.end_s - b.begin_s) / span * kPlot);
      os << "<rect x=\"" << num(x) << "\" y=\"" << num(y) << "\" width=\"" << num(w)
         << "\" height=\"" << kLaneHeight << "\" fill=\"" << colour(b.kind) << "\"><title>"
         << escape(b.title) << "</title></rect>";
    }
    y += kLaneHeight + kLaneGap;
  }
  os << time_axis(span, y) << "</svg>\n";
  return os.str();
}

std::string breakdown_svg(const StepPicture& p) {
  double total = 0;
  for (const Part& part : p.breakdown) total += part.seconds;
  if (total <= 0) return "";
  static const char* kShades[] = {"#0072B2", "#CC79A7", "#BBBBBB", "#E69F00",
                                  "#CC79A7", "#56B4E9", "#882255", "#999999"};
  std::ostringstream os;
  os << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kWidth
     << "\" height=\"60\" viewBox=\"0 0 " << kWidth << " 60\">";
  double x = kLeft;
  std::size_t i = 0;
  for (const Part& part : p.breakdown) {
    const double w = part.seconds / total * kPlot;
    const char* shade = kShades[i++ % std::size(kShades)];
    os << "<rect x=\"" << num(x) << "\" y=\"4\" width=\"" << num(w) << "\" height=\"20\" fill=\""
       << shade << "\"><title>" << escape(part.label) << ": " << fmt("%.4g", part.seconds)
       << " s</title></rect>";
    // A label only where it fits (about 6.5 px per character at 11 px).
    if (w > 6.5 * static_cast<double>(part.label.size() + 5))
      os << "<text x=\"" << num(x + 3) << "\" y=\"40\">" << escape(part.label) << " "
         << fmt("%.0f%%", part.seconds / total * 100) << "</text>";
    x += w;
  }
  os << "<text x=\"" << num(kLeft - 6) << "\" y=\"18\" text-anchor=\"end\">"
     << fmt("%.4g s", total) << "</text></svg>\n<p class=\"legend\">";
  // Every part named with its colour and time (narrow ones have no room for a label).
  i = 0;
  for (const Part& part : p.breakdown)
    os << "<span><i style=\"background:" << kShades[i++ % std::size(kShades)] << "\"></i>"
       << escape(part.label) << " " << fmt("%.4g s", part.seconds) << "</span>";
  os << "</p>\n";
  return os.str();
}

std::string memory_svg(const StepPicture& p) {
  double top = std::max(p.capacity_bytes, 1.0);
  for (const MemoryTrack& t : p.memory)
    for (const auto& pt : t.points) top = std::max(top, pt.second);
  top *= 1.05;
  const double h = 220, span = std::max(p.step_s, 1e-12);
  auto ypos = [&](double bytes) { return 10 + h - bytes / top * h; };
  std::ostringstream os;
  os << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kWidth << "\" height=\""
     << num(h + 50) << "\" viewBox=\"0 0 " << kWidth << " " << num(h + 50) << "\">";
  os << "<rect x=\"" << kLeft << "\" y=\"10\" width=\"" << kPlot << "\" height=\"" << h
     << "\" fill=\"#fafafa\" stroke=\"#ccc\"/>";
  for (const auto& [bytes, name, dash] :
       {std::tuple{p.capacity_bytes, "capacity", ""}, std::tuple{p.usable_bytes, "usable", "4 3"}}) {
    if (bytes <= 0) continue;
    os << "<line x1=\"" << kLeft << "\" x2=\"" << kLeft + kPlot << "\" y1=\"" << num(ypos(bytes))
       << "\" y2=\"" << num(ypos(bytes)) << "\" stroke=\"#c00\" stroke-dasharray=\"" << dash
       << "\"/><text x=\"" << num(kLeft - 6) << "\" y=\"" << num(ypos(bytes) + 4)
       << "\" text-anchor=\"end\">" << name << " " << fmt("%.1f GB", bytes / 1e9) << "</text>";
  }
  static const char* kLines[] = {"#0072B2", "#009E73", "#D55E00", "#CC79A7", "#E69F00", "#56B4E9"};
  std::size_t i = 0;
  for (const MemoryTrack& t : p.memory) {
    const char* c = kLines[i++ % std::size(kLines)];
    os << "<polyline fill=\"none\" stroke=\"" << c << "\" stroke-width=\"1.5\" points=\"";
    double last = t.points.empty() ? 0.0 : t.points.front().second;
    for (const auto& [s, bytes] : t.points) {
      // A step line: the level holds until the next change.
      os << num(kLeft + s / span * kPlot) << "," << num(ypos(last)) << " "
         << num(kLeft + s / span * kPlot) << "," << num(ypos(bytes)) << " ";
      last = bytes;
    }
    os << num(kLeft + kPlot) << "," << num(ypos(last)) << "\"><title>" << escape(t.label)
       << "</title></polyline>";
  }
  os << time_axis(span, 10 + h) << "</svg>\n";
  std::string names = "<p class=\"legend\">";
  i = 0;
  for (const MemoryTrack& t : p.memory)
    names += "<span><i style=\"background:" + std::string(kLines[i++ % std::size(kLines)]) +
             "\"></i>" + escape(t.label) + "</span>";
  return os.str() + names + "</p>\n";
}

std::string step_body(const StepPicture& p) {
  std::string out = "<h2>The step, broken down (seconds of the slowest rank)</h2>\n" +
                    breakdown_svg(p);
  if (!p.breakdown_note.empty()) out += "<p class=\"l\">" + escape(p.breakdown_note) + "</p>\n";
  out += "<h2>Timeline per rank: compute and communication</h2>\n";
  out += legend({{"F", "forward"}, {"B", "backward"}, {"R", "recompute"}, {"O", "optimizer"},
                 {"other", "other compute"}, {"tp", "TP"}, {"cp", "CP"}, {"pp", "pipeline send"},
                 {"dp", "data parallel"}, {"ep", "expert all-to-all"}, {"host", "host copies"}});
  out += "<p class=\"l\">Gaps on a compute lane are idle time: pipeline bubble or waiting for "
         "communication.</p>\n";
  out += timeline_svg(p);
  out += "<h2>Device memory over time, against capacity</h2>\n" + memory_svg(p);
  return out;
}

// The scatter's axes: step time across (logarithmic when the search spans over 3x, so that a
// search's slowest candidates, often ten times slower than its fastest, do not squeeze the ones
// that matter into the left edge), peak memory up.
struct ScatterScale {
  double t_lo = 0, t_hi = 0, m_hi = 0;
  bool log_time = false;
  static constexpr double kHeight = 360;
  double x(double t) const {
    const double f = log_time ? std::log(t / t_lo) / std::log(t_hi / t_lo)
                              : (t - t_lo) / (t_hi - t_lo);
    return kLeft + f * kPlot;
  }
  double y(double m) const { return 10 + kHeight - m / m_hi * kHeight; }
};

ScatterScale scatter_scale(const PlanPicture& p) {
  ScatterScale s;
  s.t_lo = s.t_hi = p.points.front().step_s;
  s.m_hi = p.capacity_bytes;
  for (const Point& pt : p.points) {
    s.t_lo = std::min(s.t_lo, pt.step_s);
    s.t_hi = std::max(s.t_hi, pt.step_s);
    s.m_hi = std::max(s.m_hi, pt.memory_bytes);
  }
  s.log_time = s.t_lo > 0 && s.t_hi / s.t_lo > 3;
  if (s.log_time) {
    s.t_lo /= 1.05;
    s.t_hi *= 1.05;
  } else {
    const double pad = std::max((s.t_hi - s.t_lo) * 0.08, s.t_hi * 0.01 + 1e-12);
    s.t_lo = std::max(0.0, s.t_lo - pad);
    s.t_hi += pad;
  }
  s.m_hi *= 1.08;
  return s;
}

// The whole search first, as small dots (one per pixel: a search finds thousands, many on the
// same spot), then the table's candidates, then the marked ones on top, the pick last.
void scatter_points(const PlanPicture& p, const ScatterScale& s, std::ostringstream& os) {
  std::set<std::pair<long, long>> dotted;
  for (const Point& pt : p.points) {
    if (pt.mark != "feasible") continue;
    const double x = s.x(pt.step_s), y = s.y(pt.memory_bytes);
    if (!dotted.emplace(std::lround(x), std::lround(y)).second) continue;
    os << "<circle cx=\"" << num(x) << "\" cy=\"" << num(y)
       << "\" r=\"2\" fill=\"#bbbbbb\" fill-opacity=\"0.6\"/>";
  }
  auto layer = [](const Point& pt) {
    return pt.mark.empty() ? 0 : pt.mark == "tie" ? 1 : pt.mark == "pick" ? 3 : 2;
  };
  for (int pass = 0; pass < 4; ++pass)
    for (const Point& pt : p.points) {
      if (pt.mark == "feasible" || layer(pt) != pass) continue;
      const std::string fill = pt.mark == "pick" ? "#D55E00" : pt.mark == "usual" ? "#0072B2"
                               : pt.mark == "baseline" ? "#009E73" : pt.mark == "tie" ? "#CC79A7"
                               : "#777777";
      const double r = pt.mark.empty() ? 4 : pt.mark == "tie" ? 6 : 7;
      os << "<circle cx=\"" << num(s.x(pt.step_s)) << "\" cy=\"" << num(s.y(pt.memory_bytes))
         << "\" r=\"" << r << "\" fill=\"" << fill << "\" fill-opacity=\"0.85\"><title>"
         << escape(pt.title) << "</title></circle>";
      if (!pt.mark.empty() && pt.mark != "tie")
        os << "<text x=\"" << num(s.x(pt.step_s) + 9) << "\" y=\""
           << num(s.y(pt.memory_bytes) - 6) << "\">" << escape(pt.mark) << "</text>";
    }
}

// The time axis's ticks: 1, 2, 3 and 5 times each power of ten on a logarithmic axis, round steps
// on a linear one.
void scatter_time_ticks(const ScatterScale& s, std::ostringstream& os) {
  const double h = ScatterScale::kHeight;
  auto tick_label = [&](double t) {
    os << "<text x=\"" << num(s.x(t)) << "\" y=\"" << num(h + 26)
       << "\" text-anchor=\"middle\">" << fmt("%.4g", t) << "</text>";
  };
  if (s.log_time) {
    for (double decade = std::pow(10.0, std::floor(std::log10(s.t_lo))); decade <= s.t_hi;
         decade *= 10)
      for (double m : {1.0, 2.0, 3.0, 5.0})
        if (m * decade >= s.t_lo && m * decade <= s.t_hi) tick_label(m * decade);
  } else {
    const double span = s.t_hi - s.t_lo;
    const double step = std::pow(10.0, std::floor(std::log10(span / 5)));
    const double tick = span / step > 25 ? 5 * step : (span / step > 10 ? 2 * step : step);
    for (double t = std::ceil(s.t_lo / tick) * tick; t <= s.t_hi; t += tick) tick_label(t);
  }
  os << "<text x=\"" << num(kLeft + kPlot) << "\" y=\"" << num(h + 42)
     << "\" text-anchor=\"end\">step time, seconds" << (s.log_time ? " (log scale)" : "")
     << "</text>";
}

std::string scatter_svg(const PlanPicture& p) {
  if (p.points.empty()) return "";
  const ScatterScale s = scatter_scale(p);
  const double h = ScatterScale::kHeight;
  std::ostringstream os;
  os << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kWidth << "\" height=\""
     << num(h + 50) << "\" viewBox=\"0 0 " << kWidth << " " << num(h + 50) << "\">";
  os << "<rect x=\"" << kLeft << "\" y=\"10\" width=\"" << kPlot << "\" height=\"" << h
     << "\" fill=\"#fafafa\" stroke=\"#ccc\"/>";
  if (p.capacity_bytes > 0)
    os << "<line x1=\"" << kLeft << "\" x2=\"" << kLeft + kPlot << "\" y1=\""
       << num(s.y(p.capacity_bytes)) << "\" y2=\"" << num(s.y(p.capacity_bytes))
       << "\" stroke=\"#c00\"/><text x=\"" << num(kLeft - 6) << "\" y=\""
       << num(s.y(p.capacity_bytes) + 4) << "\" text-anchor=\"end\">capacity "
       << fmt("%.0f GB", p.capacity_bytes / 1e9) << "</text>";
  for (double g = 0; g < s.m_hi; g += std::max(1.0, std::round(s.m_hi / 1e9 / 6)) * 1e9)
    os << "<text x=\"" << num(kLeft - 6) << "\" y=\"" << num(s.y(g) + 4)
       << "\" text-anchor=\"end\">" << fmt("%.0f", g / 1e9) << "</text>";
  os << "<text x=\"12\" y=\"" << num(10 + h / 2) << "\">peak GB</text>";
  scatter_points(p, s, os);
  scatter_time_ticks(s, os);
  os << "</svg>\n";
  return os.str();
}

}  // namespace

std::string escape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string step_page(const StepPicture& p) {
  return header(p.title, p.lines) + step_body(p) + "</body></html>\n";
}

std::string plan_page(const PlanPicture& p) {
  std::string out = header(p.title, p.lines);
  out += "<h2>Candidates: step time against peak memory per GPU</h2>\n";
  out += "<p class=\"legend\"><span><i style=\"background:#D55E00\"></i>recommendation</span>"
         "<span><i style=\"background:#CC79A7\"></i>tied with it</span>"
         "<span><i style=\"background:#0072B2\"></i>usual layout</span><span><i "
         "style=\"background:#009E73\"></i>your baseline</span><span><i "
         "style=\"background:#777777\"></i>the table's candidates</span><span><i "
         "style=\"background:#bbbbbb\"></i>every feasible candidate, estimated</span></p>\n";
  out += scatter_svg(p);
  if (p.pick) out += "<h2>The recommendation, simulated</h2>\n" + step_body(*p.pick);
  return out + "</body></html>\n";
}

}  // namespace trainplan::html
