// Pipeline schedules; see schedule.h.
#include "core/schedule.h"

#include <algorithm>

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

bool splits_backward(const Plan& p) { return p.schedule == Schedule::kZbH1; }

std::vector<PipeStep> stage_schedule(const Plan& p, std::int64_t stage) {
  const std::int64_t m = p.num_micro_batches();
  switch (p.schedule) {
    case Schedule::kNaive:
    case Schedule::kGpipe: return schedule_gpipe(m);
    case Schedule::k1F1B: return schedule_1f1b(p.pp, stage, m);
    case Schedule::kInterleaved: return schedule_interleaved(p.pp, stage, m, p.virtual_stages);
    case Schedule::kZbH1: return schedule_zb_h1(p.pp, stage, m);
  }
  return {};
}

}  // namespace trainplan::sim
