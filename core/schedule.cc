// Pipeline schedules; see schedule.h.
#include "core/schedule.h"

#include <algorithm>
#include <array>
#include <deque>
#include <limits>
#include <tuple>

#include "core/cost/collectives.h"
#include "core/cost/cost_model.h"
#include "core/rank_layout.h"
#include "core/status.h"

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
                                           std::int64_t v, bool all_forwards_at_pp) {
  // Megatron-LM (schedules.py): the k-th forward of this stage runs model chunk
  // (k mod (pp*v)) / pp on micro-batch (k / (pp*v)) * pp + k mod pp; backwards visit the
  // chunks in reverse. torch.distributed.pipelining's Interleaved1F1B orders them the same
  // (forward_stage_index, backward_stage_index) with the same warm-up, but without Megatron's
  // all-forwards case at m == pp (Plan::interleaved_warmup).
  const std::int64_t total = m * v;
  std::int64_t warmup =
      m == pp && all_forwards_at_pp ? total : (pp - stage - 1) * 2 + (v - 1) * pp;
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

// The ZB-V greedy (schedule.h): list scheduling of F, B and W passes with their costs, always
// placing next the pass that can start earliest (ties: the priority order below). The second
// chunk's backward runs first in the V, so "B1" is the backward of local chunk 1.
enum VKind { kB0, kB1, kF1, kF0, kVKinds, kW = kVKinds };

class VGreedy {
 public:
  // `reserve`: a first-chunk forward leaves room for the second-chunk forwards it owes.
  // `approved_wait`: how long a stage may wait for its next F or B before a pending W fills
  // the wait instead (the reference's approved bubble; 0: any wait).
  VGreedy(std::int64_t pp, std::int64_t m, const PassCosts& costs, bool reserve,
          double approved_wait = 0)
      : pp_(pp), m_(m), cap_(2 * pp), reserve_(reserve), approved_wait_(approved_wait),
        costs_(costs), next_(idx(pp)),
        done_(idx(kVKinds * pp * m), kNever), free_(idx(pp), 0.0), pending_w_(idx(pp)),
        held_(idx(pp), 0), out_(idx(pp)) {}

  // Every stage's order, or none when the greedy gets stuck.
  std::vector<std::vector<PipeStep>> run() {
    for (std::int64_t left = 6 * pp_ * m_; left > 0; --left) {
      Choice best;
      for (std::int64_t s = 0; s < pp_; ++s) {
        const Choice c = choose(s);
        if (c.stage >= 0 && (best.stage < 0 || std::tie(c.start, c.kind) < std::tie(best.start, best.kind)))
          best = c;
      }
      if (best.stage < 0) return {};  // stuck: every stage at its cap with nothing to free
      place(best);
    }
    return std::move(out_);
  }

 private:
  struct Choice {
    std::int64_t stage = -1;
    int kind = kW;
    double start = 0;
  };
  static constexpr double kNever = std::numeric_limits<double>::infinity();
  static std::size_t idx(std::int64_t i) { return static_cast<std::size_t>(i); }
  double& done(int k, std::int64_t s, std::int64_t mb) { return done_[idx((k * pp_ + s) * m_ + mb)]; }
  double cost(int k) const {
    return k == kF0 || k == kF1 ? costs_.forward : k == kW ? costs_.backward_weight
                                                           : costs_.backward_input;
  }

  // When pass kind k of stage s could start after its dependency in the V (chunk s forward on
  // stage s, then chunk 2pp-1-s back up; the backward the other way), or never yet. A
  // dependency on a neighbouring stage arrives a send later (PassCosts::communication).
  double ready_at(int k, std::int64_t s) {
    const double c = costs_.communication;
    const auto& n = next_[idx(s)];
    const std::int64_t j = n[static_cast<std::size_t>(k)];
    const bool last = s == pp_ - 1;
    if (j >= m_) return kNever;
    if ((k == kF0 || k == kF1) && held_[idx(s)] >= cap_) return kNever;
    if (k == kF0 && reserve_ && held_[idx(s)] + (n[kF0] - n[kF1]) + 1 > cap_) return kNever;
    switch (k) {
      case kF0: return s == 0 ? 0.0 : done(kF0, s - 1, j) + c;
      case kF1: return j >= n[kF0] ? kNever : last ? done(kF0, s, j) : done(kF1, s + 1, j) + c;
      case kB1: return j >= n[kF1] ? kNever : s == 0 ? done(kF1, s, j) : done(kB1, s - 1, j) + c;
      default: return j >= n[kB1] ? kNever : last ? done(kB1, s, j) : done(kB0, s + 1, j) + c;
    }
  }

  // Whether pass kind k on stage s sends its output to a neighbouring stage (not at the V's
  // turns: chunk 0's forward and chunk 1's backward on the last stage, the loss on stage 0).
  bool sends(int k, std::int64_t s) const {
    const bool last = s == pp_ - 1;
    return k == kF0 || k == kB1 ? !last : s > 0;
  }

  // Stage s's next pass: the earliest-starting F or B, by priority among those that start
  // within the approved wait of the earliest (a B that arrives a send after a local F can
  // start is worth that wait: it gates the stages behind it), or a pending W when the stage
  // would otherwise wait longer than approved.
  Choice choose(std::int64_t s) {
    const double now = free_[idx(s)];
    std::array<double, kVKinds> start{};
    double earliest = kNever;
    for (int k = kB0; k < kVKinds; ++k) {
      const double at = ready_at(k, s);
      start[static_cast<std::size_t>(k)] = at == kNever ? kNever : std::max(now, at);
      earliest = std::min(earliest, start[static_cast<std::size_t>(k)]);
    }
    Choice c;
    for (int k = kB0; k < kVKinds && c.stage < 0; ++k)
      if (earliest < kNever && start[static_cast<std::size_t>(k)] <= earliest + approved_wait_)
        c = {s, k, start[static_cast<std::size_t>(k)]};
    if (!pending_w_[idx(s)].empty() && (c.stage < 0 || c.start > now + approved_wait_))
      c = {s, kW, now};
    return c;
  }

  void place(const Choice& c) {
    const std::int64_t s = c.stage;
    std::vector<PipeStep>& out = out_[idx(s)];
    free_[idx(s)] = c.start + cost(c.kind);
    if (c.kind == kW) {
      out.push_back(pending_w_[idx(s)].front());
      pending_w_[idx(s)].pop_front();
      --held_[idx(s)];
      return;
    }
    const std::int64_t j = next_[idx(s)][static_cast<std::size_t>(c.kind)]++;
    done(c.kind, s, j) = free_[idx(s)];
    if (costs_.sender_waits && sends(c.kind, s)) free_[idx(s)] += costs_.communication;
    const std::int64_t chunk = c.kind == kF0 || c.kind == kB0 ? 0 : 1;
    if (c.kind == kF0 || c.kind == kF1) {
      out.push_back({true, BackwardPart::kWhole, j, chunk});
      ++held_[idx(s)];
    } else {
      out.push_back({false, BackwardPart::kInput, j, chunk});
      pending_w_[idx(s)].push_back({false, BackwardPart::kWeight, j, chunk});
    }
  }

  const std::int64_t pp_, m_, cap_;
  const bool reserve_;
  const double approved_wait_;
  const PassCosts costs_;
  std::vector<std::array<std::int64_t, kVKinds>> next_;  // next micro-batch per stage and kind
  std::vector<double> done_;                             // when each F and B pass ends
  std::vector<double> free_;                             // when each stage is next free
  std::vector<std::deque<PipeStep>> pending_w_;          // W passes owed, oldest first
  std::vector<std::int64_t> held_;                       // chunk activations held (F to W)
  std::vector<std::vector<PipeStep>> out_;
};

}  // namespace

namespace {

// One greedy order. With a W much cheaper than F the greedy can fill a stage's cap with
// first-chunk forwards whose second-chunk forwards then have no room (pp 2, M 8, W/F = 0.08);
// it is built again with room reserved for them, which never gets stuck (at a slightly longer
// step with equal costs, so only then).
std::vector<std::vector<PipeStep>> zb_v_greedy(std::int64_t pp, std::int64_t m,
                                               const PassCosts& costs, double approved_wait) {
  std::vector<std::vector<PipeStep>> out = VGreedy(pp, m, costs, false, approved_wait).run();
  if (out.empty()) out = VGreedy(pp, m, costs, true, approved_wait).run();
  TRAINPLAN_CHECK(!out.empty()) << "zb-v greedy stuck (pp " << pp << ", M " << m << ")";
  return out;
}

// When pass `st` of stage s can start in zb_v_step_length's replay: its dependency's end (a
// send later across stages), or a negative time while that has not run yet.
double zb_v_ready(const PipeStep& st, std::int64_t s, std::int64_t pp, std::int64_t m,
                  const std::vector<double>& done, double c) {
  const auto at = [&](int kind, std::int64_t stage, std::int64_t chunk) {
    return done[static_cast<std::size_t>(((kind * pp + stage) * 2 + chunk) * m + st.micro_batch)];
  };
  const auto sent = [&](double t) { return t < 0 ? t : t + c; };
  const bool last = s == pp - 1;
  const std::int64_t ch = st.virtual_chunk;
  if (st.forward) {
    if (ch == 0) return s == 0 ? 0.0 : sent(at(0, s - 1, 0));
    return last ? at(0, s, 0) : sent(at(0, s + 1, 1));
  }
  if (st.part == BackwardPart::kWeight) return 0.0;  // after its B, earlier on the stage
  if (ch == 1) return s == 0 ? at(0, s, 1) : sent(at(1, s - 1, 1));
  return last ? at(1, s, 1) : sent(at(1, s + 1, 0));
}

}  // namespace

double zb_v_step_length(const std::vector<std::vector<PipeStep>>& order, std::int64_t m,
                        const PassCosts& costs) {
  const auto u = [](std::int64_t i) { return static_cast<std::size_t>(i); };
  const auto pp = static_cast<std::int64_t>(order.size());
  const double c = costs.communication;
  std::vector<double> done(u(2 * pp * 2 * m), -1.0);  // [kind][stage][chunk][mb]: F or B end
  std::vector<std::size_t> pos(u(pp), 0);
  std::vector<double> free(u(pp), 0.0);
  for (bool moved = true; moved;) {
    moved = false;
    for (std::int64_t s = 0; s < pp; ++s) {
      for (; pos[u(s)] < order[u(s)].size(); ++pos[u(s)], moved = true) {
        const PipeStep& st = order[u(s)][pos[u(s)]];
        const double ready = zb_v_ready(st, s, pp, m, done, c);
        if (ready < 0) break;
        const double t = st.forward ? costs.forward
                         : st.part == BackwardPart::kInput ? costs.backward_input
                                                           : costs.backward_weight;
        free[u(s)] = std::max(free[u(s)], ready) + t;
        if (st.part == BackwardPart::kWeight) continue;
        const int kind = st.forward ? 0 : 1;
        done[u(((kind * pp + s) * 2 + st.virtual_chunk) * m + st.micro_batch)] = free[u(s)];
        const bool last = s == pp - 1;
        const bool sends = (st.forward == (st.virtual_chunk == 0)) ? !last : s > 0;
        if (costs.sender_waits && sends) free[u(s)] += c;
      }
    }
  }
  for (std::int64_t s = 0; s < pp; ++s)
    TRAINPLAN_CHECK(pos[u(s)] == order[u(s)].size()) << "zb-v order deadlocks on stage " << s;
  return *std::max_element(free.begin(), free.end());
}

std::vector<std::vector<PipeStep>> schedule_zb_v(std::int64_t pp, std::int64_t m,
                                                 const PassCosts& costs) {
  PassCosts blind = costs;
  blind.communication = 0;
  std::vector<std::vector<PipeStep>> best = zb_v_greedy(pp, m, blind, 0.0);
  const double c = costs.communication;
  if (c <= 0) return best;
  // With sends, the send-aware greedy lost to the send-blind one (GPT-3 on 32 H100s, bubble
  // 0.015 -> 0.144 simulated; notes/issue-26-zbplan.md): a B that arrives a send after a local
  // F could start lost its priority to that F on the last stage (F1 before B1), and the B chain
  // back to stage 0 slipped a pass at every turn. choose() now keeps the priority among passes
  // that start within the approved wait. The reference
  // builds its V for several approved bubbles and keeps the shortest (zbv.py,
  // get_v_schedule); here: waits of 0, one and two sends approved, each order replayed with
  // the sends. The replay costs passes by FLOPs and sends alone (no tensor-parallel
  // collectives, no data-parallel traffic on the same links), so a send-aware order replaces
  // the send-blind one only where it replays at least kMinGain shorter: GPT-3 on 32 H100s
  // replayed 0.02% shorter and simulated 0.7% longer.
  constexpr double kMinGain = 0.01;
  double best_s = (1.0 - kMinGain) * zb_v_step_length(best, m, costs);
  for (double approved : {0.0, c, 2.0 * c}) {
    std::vector<std::vector<PipeStep>> order = zb_v_greedy(pp, m, costs, approved);
    const double len = zb_v_step_length(order, m, costs);
    if (len < best_s) {
      best_s = len;
      best = std::move(order);
    }
  }
  return best;
}

namespace {

// One stage's DualPipe order, in the eight phases of deepseek-ai/DualPipe's DualPipe.step (read
// there; the phase lengths below are its step_1 .. step_8). A phase names the direction as the
// stage sees it: on the first half of the stages phase 0 is direction 0 (fed at stage 0), on
// the second half the two are swapped, so every stage starts with the micro-batches that reach
// it first.
class DualPipeOrder {
 public:
  DualPipeOrder(std::int64_t pp, std::int64_t stage, std::int64_t m)
      : half_pp_(pp / 2), h_(std::min(stage, pp - 1 - stage)), half_m_(m / 2),
        swap_(stage >= pp / 2 ? 1 : 0) {}

  std::vector<PipeStep> run() {
    warm_up();
    steady();
    cool_down();
    TRAINPLAN_CHECK(weights_.empty()) << "dualpipe order left W passes behind";
    return std::move(out_);
  }

 private:
  // Steps 1-3: forwards of the own direction, then both, then the other direction's B (split,
  // W run at once) between its forwards.
  void warm_up() {
    for (std::int64_t i = 0; i < 2 * (half_pp_ - h_ - 1); ++i) forward(0);
    for (std::int64_t i = 0; i <= h_; ++i) {
      forward(0);
      forward(1);
    }
    for (std::int64_t i = 0; i < half_pp_ - h_ - 1; ++i) {
      backward(1, true);
      weight();
      forward(1);
    }
  }
  // Steps 4-5: forward-backward pairs of opposite directions (each F directly followed by
  // the B it overlaps with, F&B), whole backwards. The two middle stages run their first pair
  // one after the other, not overlapped (the reference's "to further reduce bubble size").
  void steady() {
    const std::int64_t pairs = half_m_ - 2 * half_pp_ + h_ + 1;
    const bool middle = h_ == half_pp_ - 1;
    for (std::int64_t i = 0; i < pairs; ++i) {
      forward(0, !(i == 0 && middle));
      backward(1, false);
      forward(1, true);
      backward(0, false);
    }
    for (std::int64_t i = 0; i < half_pp_ - h_ - 1; ++i) {
      backward(1, false);
      forward(1, true);
      backward(0, false);
    }
  }
  // Steps 6-8: the remaining backwards, split into B and W from the middle of step 6 on (which
  // direction switches first alternates with the stage's parity), and the owed W passes.
  void cool_down() {
    const std::int64_t n6 = h_ + 1;
    bool split = false;
    for (std::int64_t i = 0; i < n6; ++i) {
      if (i == n6 / 2 && h_ % 2 == 1) split = true;
      backward(1, split);
      if (i == n6 / 2 && h_ % 2 == 0) split = true;
      backward(0, split);
    }
    for (std::int64_t i = 0; i < half_pp_ - h_ - 1; ++i) {
      weight();
      backward(0, true);
    }
    for (std::int64_t i = 0; i <= h_; ++i) weight();
  }

  std::int64_t direction(int phase) const { return phase ^ swap_; }
  static std::size_t idx(std::int64_t i) { return static_cast<std::size_t>(i); }
  // Direction 0 carries micro-batches 0 .. M/2-1, direction 1 the rest.
  std::int64_t micro_batch(std::int64_t dir, std::int64_t j) const { return dir * half_m_ + j; }

  void forward(int phase, bool overlap_next = false) {
    const std::int64_t dir = direction(phase);
    out_.push_back({true, BackwardPart::kWhole, micro_batch(dir, forwards_[idx(dir)]++), dir,
                    overlap_next});
  }
  void backward(int phase, bool split) {
    const std::int64_t dir = direction(phase);
    const std::int64_t mb = micro_batch(dir, backwards_[idx(dir)]++);
    if (!split) {
      out_.push_back({false, BackwardPart::kWhole, mb, dir});
      return;
    }
    out_.push_back({false, BackwardPart::kInput, mb, dir});
    weights_.push_back({false, BackwardPart::kWeight, mb, dir});
  }
  // The reference's WeightGradStore runs the oldest owed W first.
  void weight() {
    TRAINPLAN_CHECK(!weights_.empty()) << "dualpipe order runs a W nobody owes";
    out_.push_back(weights_.front());
    weights_.pop_front();
  }

  const std::int64_t half_pp_, h_, half_m_;
  const int swap_;
  std::array<std::int64_t, 2> forwards_{0, 0}, backwards_{0, 0};
  std::deque<PipeStep> weights_;
  std::vector<PipeStep> out_;
};

}  // namespace

std::vector<PipeStep> schedule_dualpipe(std::int64_t pp, std::int64_t stage, std::int64_t m) {
  return DualPipeOrder(pp, stage, m).run();
}

std::int64_t dualpipe_overlapped_pairs(std::int64_t pp, std::int64_t stage, std::int64_t m) {
  // DualPipeOrder::steady: step 4 runs m/2 - pp + h + 1 iterations, step 5 pp/2 - h - 1.
  const std::int64_t h = std::min(stage, pp - 1 - stage);
  const std::int64_t step4 = m / 2 - pp + h + 1, step5 = pp / 2 - h - 1;
  const bool middle = h == pp / 2 - 1;
  return 2 * step4 + step5 - (middle && step4 > 0 ? 1 : 0);
}

PassCosts zb_v_pass_costs(const ModelSpec& model, const Plan& plan) {
  auto flops = [](const std::vector<Task>& tasks) {
    double sum = 0;
    for (const Task& t : expand_repeats(tasks)) sum += t.flops;  // a run's steps one by one
    return sum;
  };
  const std::vector<Task> backward = layer_backward_tasks(model, plan);
  PassCosts c{flops(layer_forward_tasks(model, plan)), flops(backward_input_tasks(backward)),
              flops(backward_weight_tasks(backward))};
  if (c.forward <= 0 || c.backward_input <= 0 || c.backward_weight <= 0) return PassCosts{};
  return c;
}

PassCosts with_send_time(PassCosts costs, double send_s, double forward_s) {
  if (send_s > 0 && forward_s > 0) costs.communication = costs.forward * send_s / forward_s;
  return costs;
}

namespace {

// One pipeline send between the first ranks of stages 0 and 1 (every neighbour pair shares
// that link under the default rank order), as the simulator's topology times it, and what its
// receiver runs before reading it (pipeline_receive_tasks: a TP collective, over the node's
// links when the TP group fits in a node, as rank_layout.h places it).
Result<double> pipeline_send_s(const ModelSpec& model, const Plan& plan, const ClusterSpec& cluster,
                               const std::string& rank_order) {
  auto layout = RankLayout::make(plan, rank_order);
  if (!layout.ok()) return layout.status();
  const std::int64_t per_node = std::max<std::int64_t>(1, cluster.gpus_per_node);
  const bool same_node = layout->rank({0, 0, 0}) / per_node == layout->rank({0, 0, 1}) / per_node;
  double s = ring_collective_time_s(
      Collective::kSendRecv, pipeline_message_bytes(model, plan), 2,
      same_node ? cluster.intra_node_bytes_per_s : cluster.inter_node_bytes_per_s,
      same_node ? cluster.intra_node_latency_s : cluster.inter_node_latency_s);
  const bool tp_in_node = plan.tp <= per_node;
  for (const Task& t : pipeline_receive_tasks(model, plan))
    s += ring_collective_time_s(
        t.collective, t.message_bytes, t.group_size,
        tp_in_node ? cluster.intra_node_bytes_per_s : cluster.inter_node_bytes_per_s,
        tp_in_node ? cluster.intra_node_latency_s : cluster.inter_node_latency_s);
  return s;
}

// A model chunk's forward at the plan's rates: its layers' compute tasks (the send is timed
// apart).
Result<double> chunk_forward_s(const ModelSpec& model, const Plan& plan, const ClusterSpec& cluster,
                               const std::optional<HardwareProfile>& hardware) {
  auto rates = plan_rates(plan, cluster.gpu, hardware);
  if (!rates.ok()) return rates.status();
  double layer_s = 0;
  for (const Task& t : expand_repeats(layer_forward_tasks(model, plan)))  // a run's steps one by one
    if (t.kind != TaskKind::kComm) layer_s += task_time_s(t, *rates);
  return layer_s * static_cast<double>(model.num_layers) /
         static_cast<double>(chunk_layers(plan, model).size());
}

}  // namespace

Result<PassCosts> order_costs(const ModelSpec& model, const Plan& plan, const OrderInputs& in) {
  if (plan.schedule != Schedule::kZbV || in.uniform_compute) return PassCosts{};
  const PassCosts flops = zb_v_pass_costs(model, plan);
  if (!in.cluster || !in.send_aware) return flops;
  ClusterSpec cluster = *in.cluster;
  if (cluster.total_gpus() != plan.world_size())
    return Status::Error("zb-v's order: the cluster '" + cluster.name + "' has " +
                             std::to_string(cluster.total_gpus()) + " GPUs but the plan runs on " +
                             std::to_string(plan.world_size()) +
                             " ranks (give the cluster the plan was simulated on)",
                         ExitCode::kInvalidInput);
  if (in.hardware) apply_profile_links(*in.hardware, cluster);
  auto forward_s = chunk_forward_s(model, plan, cluster, in.hardware);
  if (!forward_s.ok()) return forward_s.status();
  double send_s = 0;
  if (!in.free_communication && plan.pp > 1) {
    auto s = pipeline_send_s(model, plan, cluster, in.rank_order);
    if (!s.ok()) return s.status();
    send_s = *s;
  }
  PassCosts costs = with_send_time(flops, send_s, *forward_s);
  costs.sender_waits = !in.overlap_p2p;
  return costs;
}

bool splits_backward(const Plan& p) {
  return p.schedule == Schedule::kZbH1 || p.schedule == Schedule::kZbV ||
         p.schedule == Schedule::kDualPipe;
}

std::vector<PipeStep> stage_schedule(const Plan& p, std::int64_t stage, const PassCosts& costs) {
  const std::int64_t m = p.num_micro_batches();
  switch (p.schedule) {
    case Schedule::kNaive:
    case Schedule::kGpipe: return schedule_gpipe(m);
    case Schedule::k1F1B: return schedule_1f1b(p.pp, stage, m);
    case Schedule::kInterleaved:
      return schedule_interleaved(p.pp, stage, m, p.virtual_stages,
                                  p.interleaved_warmup == InterleavedWarmup::kMegatron);
    case Schedule::kZbH1: return schedule_zb_h1(p.pp, stage, m);
    case Schedule::kDualPipe: return schedule_dualpipe(p.pp, stage, m);
    case Schedule::kZbV: {
      // One greedy builds every stage's order; the simulator asks for each stage in turn.
      thread_local std::tuple<std::int64_t, std::int64_t, double, double, double, double, bool>
          key{-1, -1, 0, 0, 0, 0, false};
      thread_local std::vector<std::vector<PipeStep>> all;
      const auto now = std::make_tuple(p.pp, m, costs.forward, costs.backward_input,
                                       costs.backward_weight, costs.communication,
                                       costs.sender_waits);
      if (key != now) {
        all = schedule_zb_v(p.pp, m, costs);
        key = now;
      }
      return all[static_cast<std::size_t>(stage)];
    }
  }
  return {};
}

}  // namespace trainplan::sim
