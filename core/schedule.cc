// Pipeline schedules; see schedule.h.
#include "core/schedule.h"

#include <algorithm>
#include <array>
#include <deque>
#include <limits>

namespace trainplan::sim {

std::vector<PipeStep> schedule_gpipe(std::int64_t m) {
  std::vector<PipeStep> out;
  for (std::int64_t i = 0; i < m; ++i) out.push_back({true, BackwardPart::kWhole, i, 0});
  for (std::int64_t i = 0; i < m; ++i) out.push_back({false, BackwardPart::kWhole, i, 0});
  return out;
}

std::vector<PipeStep> schedule_1f1b(std::int64_t pp, std::int64_t stage, std::int64_t m) {
  std::vector<PipeStep> out;
  const std::int64_t warmup = std::min(pp - stage - 1, m);
  std::int64_t f = 0, b = 0;
  for (; f < warmup; ++f) out.push_back({true, BackwardPart::kWhole, f, 0});
  while (f < m) {
    out.push_back({true, BackwardPart::kWhole, f++, 0});
    out.push_back({false, BackwardPart::kWhole, b++, 0});
  }
  while (b < m) out.push_back({false, BackwardPart::kWhole, b++, 0});
  return out;
}

std::vector<PipeStep> schedule_interleaved(std::int64_t pp, std::int64_t stage, std::int64_t m,
                                           std::int64_t v) {
  // Megatron-LM (schedules.py): the k-th forward of this stage runs model chunk
  // (k mod (pp*v)) / pp on micro-batch (k / (pp*v)) * pp + k mod pp; backwards visit the
  // chunks in reverse.
  const std::int64_t total = m * v;
  std::int64_t warmup = m == pp ? total : (pp - stage - 1) * 2 + (v - 1) * pp;
  warmup = std::min(warmup, total);
  auto step = [&](std::int64_t k, bool forward) {
    const std::int64_t in_group = k % (pp * v);
    std::int64_t chunk = in_group / pp;
    if (!forward) chunk = v - chunk - 1;
    return PipeStep{forward, BackwardPart::kWhole, (k / (pp * v)) * pp + k % pp, chunk};
  };
  std::vector<PipeStep> out;
  for (std::int64_t k = 0; k < warmup; ++k) out.push_back(step(k, true));
  for (std::int64_t k = 0; k < total - warmup; ++k) {
    out.push_back(step(k + warmup, true));
    out.push_back(step(k, false));
  }
  for (std::int64_t k = total - warmup; k < total; ++k) out.push_back(step(k, false));
  return out;
}

std::vector<PipeStep> schedule_zb_h1(std::int64_t pp, std::int64_t stage, std::int64_t m) {
  // Qi et al. 2023, sec. 2.1 and fig. 3 (top): 1F1B's warm-up of pp - stage - 1 forwards and
  // its alternation of F and B; W of micro-batch j runs after B of micro-batch j + stage, so a
  // later stage, which starts its backwards sooner, keeps its W passes for the cool-down.
  const std::int64_t warmup = std::min(pp - stage - 1, m);
  const std::int64_t lag = stage;
  std::vector<PipeStep> out;
  std::int64_t f = 0, b = 0, w = 0;
  auto input = [&] {
    out.push_back({false, BackwardPart::kInput, b++, 0});
    if (b - w > lag) out.push_back({false, BackwardPart::kWeight, w++, 0});
  };
  for (; f < warmup; ++f) out.push_back({true, BackwardPart::kWhole, f, 0});
  while (f < m) {
    out.push_back({true, BackwardPart::kWhole, f++, 0});
    input();
  }
  while (b < m) input();
  while (w < m) out.push_back({false, BackwardPart::kWeight, w++, 0});
  return out;
}

namespace {

// The ZB-V greedy (schedule.h): unit-time passes, every stage picking its next pass each tick.
// Pass kinds in priority order; the second chunk's backward runs first in the V, so "B1" is
// the backward of local chunk 1.
enum VKind { kB0, kB1, kF1, kF0, kVKinds };

class VGreedy {
 public:
  VGreedy(std::int64_t pp, std::int64_t m)
      : pp_(pp), m_(m), cap_(2 * pp), next_(static_cast<std::size_t>(pp)),
        done_(static_cast<std::size_t>(kVKinds * pp * m), kNever),
        pending_w_(static_cast<std::size_t>(pp)), held_(static_cast<std::size_t>(pp), 0),
        out_(static_cast<std::size_t>(pp)) {}

  std::vector<std::vector<PipeStep>> run() {
    const std::int64_t total = 6 * pp_ * m_;
    std::int64_t placed = 0;
    for (std::int64_t t = 0; placed < total; ++t) {
      std::vector<std::pair<std::int64_t, int>> picks;  // (stage, kind or -1 for W)
      for (std::int64_t s = 0; s < pp_; ++s) {
        const int k = pick(s, t);
        if (k >= 0 || !pending_w_[idx(s)].empty()) picks.emplace_back(s, k);
      }
      for (auto [s, k] : picks) place(s, k, t + 1);
      placed += static_cast<std::int64_t>(picks.size());
    }
    return std::move(out_);
  }

 private:
  static constexpr std::int64_t kNever = std::numeric_limits<std::int64_t>::max();
  static std::size_t idx(std::int64_t i) { return static_cast<std::size_t>(i); }
  std::int64_t& done(int k, std::int64_t s, std::int64_t mb) {
    return done_[idx((k * pp_ + s) * m_ + mb)];
  }
  bool finished(int k, std::int64_t s, std::int64_t mb, std::int64_t t) {
    return done(k, s, mb) <= t;
  }

  // The first pass kind of stage s ready at tick t, or -1.
  int pick(std::int64_t s, std::int64_t t) {
    for (int k = kB0; k < kVKinds; ++k)
      if (ready(k, s, t)) return k;
    return -1;
  }

  // Dependencies of the V (chunk s forward on stage s, then chunk 2pp-1-s back up; backward
  // the other way) and the memory cap (a forward holds one chunk activation until its W).
  bool ready(int k, std::int64_t s, std::int64_t t) {
    const std::int64_t j = next_[idx(s)][static_cast<std::size_t>(k)];
    if (j >= m_) return false;
    const auto& n = next_[idx(s)];
    const bool last = s == pp_ - 1;
    switch (k) {
      case kF0:
        return held_[idx(s)] < cap_ && (s == 0 || finished(kF0, s - 1, j, t));
      case kF1:
        return j < n[kF0] && held_[idx(s)] < cap_ &&
               (last ? finished(kF0, s, j, t) : finished(kF1, s + 1, j, t));
      case kB1:
        return j < n[kF1] && (s == 0 ? finished(kF1, s, j, t) : finished(kB1, s - 1, j, t));
      default:  // kB0
        return j < n[kB1] && (last ? finished(kB1, s, j, t) : finished(kB0, s + 1, j, t));
    }
  }

  // Runs pass kind k (-1: the oldest pending W) on stage s, ending at tick `end`.
  void place(std::int64_t s, int k, std::int64_t end) {
    std::vector<PipeStep>& out = out_[idx(s)];
    if (k < 0) {
      out.push_back(pending_w_[idx(s)].front());
      pending_w_[idx(s)].pop_front();
      --held_[idx(s)];
      return;
    }
    const std::int64_t j = next_[idx(s)][static_cast<std::size_t>(k)]++;
    done(k, s, j) = end;
    const std::int64_t chunk = k == kF0 || k == kB0 ? 0 : 1;
    if (k == kF0 || k == kF1) {
      out.push_back({true, BackwardPart::kWhole, j, chunk});
      ++held_[idx(s)];
    } else {
      out.push_back({false, BackwardPart::kInput, j, chunk});
      pending_w_[idx(s)].push_back({false, BackwardPart::kWeight, j, chunk});
    }
  }

  const std::int64_t pp_, m_, cap_;
  std::vector<std::array<std::int64_t, kVKinds>> next_;  // next micro-batch per stage and kind
  std::vector<std::int64_t> done_;                       // tick each pass ended
  std::vector<std::deque<PipeStep>> pending_w_;          // W passes owed, oldest first
  std::vector<std::int64_t> held_;                       // chunk activations held (F to W)
  std::vector<std::vector<PipeStep>> out_;
};

}  // namespace

std::vector<std::vector<PipeStep>> schedule_zb_v(std::int64_t pp, std::int64_t m) {
  return VGreedy(pp, m).run();
}

bool splits_backward(const Plan& p) {
  return p.schedule == Schedule::kZbH1 || p.schedule == Schedule::kZbV;
}

std::vector<PipeStep> stage_schedule(const Plan& p, std::int64_t stage) {
  const std::int64_t m = p.num_micro_batches();
  switch (p.schedule) {
    case Schedule::kNaive:
    case Schedule::kGpipe: return schedule_gpipe(m);
    case Schedule::k1F1B: return schedule_1f1b(p.pp, stage, m);
    case Schedule::kInterleaved: return schedule_interleaved(p.pp, stage, m, p.virtual_stages);
    case Schedule::kZbH1: return schedule_zb_h1(p.pp, stage, m);
    case Schedule::kZbV: {
      // One greedy builds every stage's order; the simulator asks for each stage in turn.
      thread_local std::pair<std::int64_t, std::int64_t> key{-1, -1};
      thread_local std::vector<std::vector<PipeStep>> all;
      if (key != std::pair{p.pp, m}) {
        all = schedule_zb_v(p.pp, m);
        key = {p.pp, m};
      }
      return all[static_cast<std::size_t>(stage)];
    }
  }
  return {};
}

}  // namespace trainplan::sim
