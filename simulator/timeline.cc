// Per-rank figures and the Chrome trace of a played program; see timeline.h.
#include "simulator/timeline.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <functional>
#include <string>
#include <tuple>
#include <utility>

#include "core/chrome_trace.h"
#include "simulator/parallel.h"

namespace trainplan::sim {

namespace {

double sec(TimeNs ns) { return static_cast<double>(ns) / kNsPerS; }

// The ops of slot s: a range of op ids (a slot's program is built whole before the next's).
std::pair<std::int32_t, std::int32_t> slot_range(const Program& p, std::size_t s) {
  const std::int32_t last = s + 1 < p.slots.size() ? p.slots[s + 1].first_op
                                                   : static_cast<std::int32_t>(p.engine.num_ops());
  return {p.slots[s].first_op, last};
}

// For every op, what it waited for: of its dependencies and the op before it on its stream,
// the one that ended last, the lowest id among equals (-1: none). Offered from every op's
// successors, the ops of up to `threads` slots at once: the pick is a maximum over a total
// order, so it does not depend on the order of the offers.
std::vector<std::int32_t> last_predecessors(const Program& p, unsigned threads) {
  const Engine& e = p.engine;
  std::vector<std::int32_t> out(static_cast<std::size_t>(e.num_ops()), -1);
  auto offer = [&](std::int32_t before, std::int32_t after) {
    std::atomic_ref<std::int32_t> o(out[static_cast<std::size_t>(after)]);
    std::int32_t seen = o.load(std::memory_order_relaxed);
    auto better = [&](std::int32_t c) {
      return c < 0 || e.op(before).end > e.op(c).end ||
             (e.op(before).end == e.op(c).end && before < c);
    };
    while (better(seen) && !o.compare_exchange_weak(seen, before, std::memory_order_relaxed)) {
    }
  };
  parallel_for_index(p.slots.size(), threads, [&](std::size_t s) {
    const auto [first, last] = slot_range(p, s);
    for (std::int32_t i = first; i < last; ++i) {
      for (std::int32_t succ : e.successors(i)) offer(i, succ);
      if (e.op(i).next_in_stream >= 0) offer(i, e.op(i).next_in_stream);
    }
  });
  return out;
}

// Whether compute op `id` of `slot`, started after an idle gap, waited on the pipeline: a send
// or receive between stages, another rank's compute, or nothing (the step's start). Otherwise it
// waited on its own rank's collectives (TP, CP, EP, data-parallel) or copies, which is
// communication exposed, not bubble. A zero-time op before it on the compute stream (a
// receive) passes on what it waited for.
bool waits_on_pipeline(const Program& p, std::int32_t slot, const std::vector<std::int32_t>& cause,
                       std::int32_t id) {
  const std::int32_t compute_stream = p.slots[static_cast<std::size_t>(slot)].first_stream +
                                      static_cast<std::int32_t>(StreamKind::kCompute);
  std::int32_t c = cause[static_cast<std::size_t>(id)];
  while (c >= 0 && p.slot_of(c) == slot &&
         p.engine.op(c).collective < 0 && p.engine.op(c).stream == compute_stream)
    c = cause[static_cast<std::size_t>(c)];
  if (c < 0) return true;
  if (p.slot_of(c) != slot) return true;
  return p.engine.op(c).collective >= 0 && p.meta(c).group == ReportGroup::kPp;
}

}  // namespace

TimeNs pipeline_end(const Program& p, unsigned threads) {
  std::vector<TimeNs> per_slot(p.slots.size(), 0);
  parallel_for_index(p.slots.size(), threads, [&](std::size_t s) {
    const auto [first, last] = slot_range(p, s);
    for (std::int32_t i = first; i < last; ++i)
      if (p.meta(i).pipeline) per_slot[s] = std::max(per_slot[s], p.engine.op(i).end);
  });
  return per_slot.empty() ? 0 : *std::max_element(per_slot.begin(), per_slot.end());
}

namespace {

// One slot's ops, sorted out for its figures.
struct SlotOps {
  std::vector<std::int32_t> compute;               // compute-stream ops, by start time
  std::vector<std::pair<TimeNs, TimeNs>> busy;     // their non-empty intervals, by start time
  std::vector<std::int32_t> comm;                  // collective ops, in issue order
  TimeNs compute_ns = 0, optimizer_ns = 0, pipeline_ns = 0;
};

// The ops of slot s, from its own range of op ids (a slot's ops are contiguous), so that only
// the slots being worked on hold these lists at once.
SlotOps slot_ops(const Program& p, std::size_t s) {
  SlotOps out;
  const auto [first, last] = slot_range(p, s);
  const std::int32_t compute_stream =
      p.slots[s].first_stream + static_cast<std::int32_t>(StreamKind::kCompute);
  for (std::int32_t i = first; i < last; ++i) {
    const Op& op = p.engine.op(i);
    if (op.collective >= 0) {
      out.comm.push_back(i);
      continue;
    }
    if (op.stream != compute_stream) continue;
    const OpMeta& m = p.meta(i);
    const TimeNs dur = op.end - op.start;
    out.compute.push_back(i);
    out.compute_ns += dur;
    if (m.optimizer) out.optimizer_ns += dur;
    if (m.pipeline) out.pipeline_ns += dur;
    if (dur > 0) out.busy.emplace_back(op.start, op.end);
  }
  // covered_ns wants the busy intervals by start time; op ids follow issue order, which a
  // merged pass pair (Plan::ep_overlap) reorders on the stream.
  std::sort(out.busy.begin(), out.busy.end());
  std::sort(out.compute.begin(), out.compute.end(), [&](std::int32_t a, std::int32_t b) {
    return std::make_pair(p.engine.op(a).start, a) < std::make_pair(p.engine.op(b).start, b);
  });
  return out;
}

}  // namespace

std::vector<SlotTimeline> slot_timelines(const Program& p, TimeNs step_end, unsigned threads) {
  const std::size_t n = p.slots.size();
  const std::vector<std::int32_t> cause = last_predecessors(p, threads);
  const TimeNs pipe_end = pipeline_end(p, threads);
  std::vector<SlotTimeline> out(n);
  // Each slot's figures from its own ops only: the slots in parallel.
  parallel_for_index(n, threads, [&](std::size_t s) {
    const SlotOps ops = slot_ops(p, s);
    SlotTimeline& t = out[s];
    const SlotInfo& si = p.slots[s];
    t.step.rank = si.rank;
    t.step.stage = si.coord.pp;
    t.step.compute_s = sec(ops.compute_ns);
    t.step.optimizer_s = sec(ops.optimizer_ns);
    t.step.idle_s = sec(step_end - ops.compute_ns);
    t.pipeline_busy_ns = ops.pipeline_ns;
    // Idle gaps of the compute stream before the pipeline's end that its next op spent waiting
    // for this rank's own communication (attributed by what it waited for).
    TimeNs idle_until = 0, waited = 0;
    for (std::int32_t id : ops.compute) {
      const Op& op = p.engine.op(id);
      const TimeNs gap = std::min(op.start, pipe_end) - idle_until;
      if (gap > 0 && !waits_on_pipeline(p, static_cast<std::int32_t>(s), cause, id))
        waited += gap;
      idle_until = std::max(idle_until, op.end);
    }
    t.comm_waited_ns = waited;
    std::array<GroupComm, static_cast<std::size_t>(ReportGroup::kCount)> groups{};
    // Per report group, its collectives' intervals in flight: the exposed time is the part of
    // their union that no compute covers (a group's collectives on different streams, e.g. the
    // pipeline sends both ways and the tied-embedding sum, in flight at once are exposed once).
    using Intervals = std::vector<std::pair<TimeNs, TimeNs>>;
    std::array<Intervals, static_cast<std::size_t>(ReportGroup::kCount)> flying;
    for (std::int32_t id : ops.comm) {
      const OpMeta& m = p.meta(id);
      const Op& op = p.engine.op(id);
      const TimeNs began = p.engine.began(id);
      if (m.group == ReportGroup::kNone) continue;
      // In flight from the moment every member had arrived (waiting for a peer is idle time,
      // not communication).
      GroupComm& g = groups[static_cast<std::size_t>(m.group)];
      g.bytes_sent += static_cast<double>(m.bytes_sent);
      // A run's collective (Task::repeat) adds its rounds one by one when they took the same
      // time, as its steps' collectives add up when played one after another.
      const TimeNs flying_ns = op.end - began;
      if (m.repeat > 1 && flying_ns % m.repeat == 0)
        for (std::int32_t k = 0; k < m.repeat; ++k) g.time_s += sec(flying_ns / m.repeat);
      else
        g.time_s += sec(flying_ns);
      if (op.end > began) flying[static_cast<std::size_t>(m.group)].emplace_back(began, op.end);
    }
    for (std::size_t g = 0; g < groups.size(); ++g) {
      Intervals& v = flying[g];
      std::sort(v.begin(), v.end());
      TimeNs exposed = 0, from = 0, to = -1;
      for (const auto& [a, b] : v) {
        if (a > to) {
          if (to > from) exposed += to - from - covered_ns(ops.busy, from, to);
          from = a;
          to = b;
        } else {
          to = std::max(to, b);
        }
      }
      if (to > from) exposed += to - from - covered_ns(ops.busy, from, to);
      groups[g].exposed_s = sec(exposed);
    }
    for (std::size_t g = 0; g < groups.size(); ++g) {
      if (static_cast<ReportGroup>(g) == ReportGroup::kCp && !p.context_parallel) continue;
      t.step.comm[std::string(to_string(static_cast<ReportGroup>(g)))] = groups[g];
    }

    // Memory over time: frees before allocations at the same instant.
    struct Change {
      TimeNs time;
      int order;
      std::size_t seq;
      MemKind kind;
      double bytes;
    };
    std::vector<Change> changes;
    changes.reserve(si.mem.size());
    for (std::size_t k = 0; k < si.mem.size(); ++k) {
      const MemEvent& e = si.mem[k];
      const Op& op = p.engine.op(e.op);
      changes.push_back({e.at_end ? op.end : op.start, e.bytes < 0 ? 0 : 1, k, e.kind, e.bytes});
    }
    std::sort(changes.begin(), changes.end(), [](const Change& a, const Change& b) {
      return std::tie(a.time, a.order, a.seq) < std::tie(b.time, b.order, b.seq);
    });
    double act = 0, buf = 0, peak = 0, peak_act = 0, peak_buf = 0, in_flight = 0;
    for (const Change& c : changes) {
      if (c.kind == MemKind::kInFlight) {
        in_flight += c.bytes;
        t.peak_in_flight = std::max(t.peak_in_flight, static_cast<std::int64_t>(in_flight + 0.5));
        continue;
      }
      (c.kind == MemKind::kActivations ? act : buf) += c.bytes;
      if (act + buf > peak) {
        peak = act + buf;
        peak_act = act;
        peak_buf = buf;
      }
      if (!t.memory.empty() && t.memory.back().time == c.time) {
        t.memory.back().activations_bytes = act;
        t.memory.back().buffers_bytes = buf;
      } else {
        t.memory.push_back({c.time, act, buf});
      }
    }
    t.step.memory = si.static_memory;
    t.step.memory.activations_bytes = peak_act;
    t.step.memory.buffers_bytes = peak_buf;
    t.step.peak_memory_bytes = t.step.memory.device_total();
  });
  return out;
}

namespace {

// Appends, slot by slot in order, the events `format` writes for each slot, formatting a batch of
// slots at once on up to `threads` threads. Each slot's events go to their own writer, whose
// body is appended whole, so the document is the one a single writer would write; a batch
// bounds what is held at once (GPT-3 on 512 ranks: about 10 MB of events per slot).
void write_slot_bodies(std::size_t n, unsigned threads, ChromeTraceWriter& w,
                       const std::function<void(std::size_t, ChromeTraceWriter&)>& format) {
  constexpr std::size_t kBatchSlots = 16;
  std::vector<std::string> bodies;
  for (std::size_t from = 0; from < n; from += kBatchSlots) {
    bodies.assign(std::min(kBatchSlots, n - from), std::string());
    parallel_for_index(bodies.size(), threads, [&](std::size_t k) {
      ChromeTraceWriter local;
      format(from + k, local);
      bodies[k] = local.take();
    });
    for (const std::string& body : bodies) w.body(body);
  }
}

// An op's task name, with the steps a run's op stands for (Task::repeat): "attention_step x8".
std::string op_label(const OpMeta& m) {
  std::string name(m.name);
  if (m.repeat != 1) name += " x" + std::to_string(m.repeat);
  return name;
}

// Slot s's complete events, in op order.
void write_slot_ops(const Program& p, std::size_t s, ChromeTraceWriter& w) {
  const SlotInfo& si = p.slots[s];
  const auto [first, last] = slot_range(p, s);
  for (std::int32_t i = first; i < last; ++i) {
    const OpMeta& m = p.meta(i);
    const Op& op = p.engine.op(i);
    if (op.end <= op.start && op.collective < 0) continue;
    w.complete(chrome_trace_event_name(m.pass, m.micro_batch, m.layer, op_label(m)), si.rank,
               op.stream - si.first_stream, op.start, op.end - op.start, m.micro_batch, m.layer,
               m.bytes_sent);
  }
}

// Calls arrow(send, recv) for each pipeline send of slot s, in op order, and the receive it
// completes on the neighbour (the send's successor named recv_*; a zero-time op, so the arrow
// lands on the compute after it).
template <typename Arrow>
void for_each_flow(const Program& p, std::size_t s, Arrow&& arrow) {
  const auto [first, last] = slot_range(p, s);
  for (std::int32_t i = first; i < last; ++i) {
    const OpMeta& m = p.meta(i);
    if (m.group != ReportGroup::kPp || m.name.rfind("send_", 0) != 0) continue;
    for (std::int32_t r : p.engine.successors(i))
      if (p.meta(r).name.rfind("recv_", 0) == 0 && p.slot_of(r) != static_cast<std::int32_t>(s))
        arrow(i, r);
  }
}

// The flow arrows of slot s, numbered from first_id on.
void write_slot_flows(const Program& p, std::size_t s, std::int64_t first_id,
                      ChromeTraceWriter& w) {
  std::int64_t id = first_id;
  for_each_flow(p, s, [&](std::int32_t i, std::int32_t r) {
    const SlotInfo& from = p.slots[s];
    const SlotInfo& to = p.slots[static_cast<std::size_t>(p.slot_of(r))];
    const Op& send = p.engine.op(i);
    const Op& recv = p.engine.op(r);
    w.flow(p.meta(i).name, id++, from.rank, send.stream - from.first_stream, send.start, to.rank,
           recv.stream - to.first_stream, recv.start);
  });
}

// Slot s's memory counter samples.
void write_slot_memory(const Program& p, const SlotTimeline& t, std::size_t s,
                       ChromeTraceWriter& w) {
  const SlotInfo& si = p.slots[s];
  const double fixed = si.static_memory.weights_bytes + si.static_memory.gradients_bytes +
                       si.static_memory.optimizer_bytes;
  char buf[512];
  for (const MemorySample& m : t.memory) {
    std::snprintf(buf, sizeof buf,
                  "{\"name\":\"memory GB\",\"ph\":\"C\",\"pid\":%lld,\"ts\":%.3f,\"args\":{"
                  "\"model states\":%.6f,\"activations\":%.6f,\"buffers\":%.6f}}",
                  static_cast<long long>(si.rank), static_cast<double>(m.time) / 1e3,
                  fixed / kGB, m.activations_bytes / kGB, m.buffers_bytes / kGB);
    w.object(buf);
  }
}

// The document's sections, in order: the ranks' names, every op (by id), the pipeline arrows,
// the memory counters. Each section is formatted per slot in parallel.
void write_chrome_trace(const Program& p, const std::vector<SlotTimeline>& timelines,
                        ChromeTraceWriter& w, unsigned threads) {
  std::vector<std::string_view> streams;
  for (std::int32_t k = 0; k < kStreamsPerRank; ++k)
    if (static_cast<StreamKind>(k) != StreamKind::kCp || p.context_parallel)
      streams.push_back(to_string(static_cast<StreamKind>(k)));
  for (const SlotInfo& si : p.slots) w.rank(si.rank, si.coord.pp, streams);
  const std::size_t n = p.slots.size();
  write_slot_bodies(n, threads, w,
                    [&](std::size_t s, ChromeTraceWriter& local) { write_slot_ops(p, s, local); });
  // Arrow ids run on over the slots: count each slot's first, then number from the sum before.
  std::vector<std::int64_t> first_id(n + 1, 0);
  parallel_for_index(n, threads, [&](std::size_t s) {
    for_each_flow(p, s, [&](std::int32_t, std::int32_t) { ++first_id[s + 1]; });
  });
  for (std::size_t s = 0; s < n; ++s) first_id[s + 1] += first_id[s];
  write_slot_bodies(n, threads, w, [&](std::size_t s, ChromeTraceWriter& local) {
    write_slot_flows(p, s, first_id[s], local);
  });
  write_slot_bodies(timelines.size(), threads, w, [&](std::size_t s, ChromeTraceWriter& local) {
    write_slot_memory(p, timelines[s], s, local);
  });
}

}  // namespace

std::string chrome_trace(const Program& p, const std::vector<SlotTimeline>& timelines,
                         unsigned threads) {
  ChromeTraceWriter w;
  write_chrome_trace(p, timelines, w, threads);
  return chrome_trace_document({w.take()});
}

void stream_chrome_trace(const Program& p, const std::vector<SlotTimeline>& timelines,
                         const ChromeTraceWriter::Sink& sink, unsigned threads) {
  ChromeTraceWriter w(sink);
  write_chrome_trace(p, timelines, w, threads);
  w.finish();
}

}  // namespace trainplan::sim

namespace trainplan::sim {

namespace {

// The slots drawn: the first of each stage, then others, up to 16 lanes pairs.
std::vector<std::size_t> drawn_slots(const Program& p) {
  constexpr std::size_t kMaxDrawn = 16;
  std::vector<std::size_t> first, rest;
  std::vector<bool> seen;
  for (std::size_t s = 0; s < p.slots.size(); ++s) {
    const auto stage = static_cast<std::size_t>(p.slots[s].coord.pp);
    if (stage >= seen.size()) seen.resize(stage + 1, false);
    (seen[stage] ? rest : first).push_back(s);
    seen[stage] = true;
  }
  first.insert(first.end(), rest.begin(), rest.end());
  if (first.size() > kMaxDrawn) first.resize(kMaxDrawn);
  return first;
}

// Adds a bar, merged into the lane's last one when it continues it (the same kind and
// title, starting within `join_ns` of its end): per-layer ops become one bar per micro-batch
// pass, which keeps the picture's size bounded by the schedule, not the layer count.
void add_bar(html::Lane& lane, TimeNs start, TimeNs end, const std::string& kind,
             const std::string& title, TimeNs join_ns) {
  const double b = static_cast<double>(start) / kNsPerS, e = static_cast<double>(end) / kNsPerS;
  if (!lane.bars.empty()) {
    html::Bar& last = lane.bars.back();
    if (last.kind == kind && last.title == title &&
        b - last.end_s <= static_cast<double>(join_ns) / kNsPerS) {
      last.end_s = std::max(last.end_s, e);
      return;
    }
  }
  lane.bars.push_back({b, e, kind, title});
}

std::string compute_title(const OpMeta& m) {
  switch (m.pass) {
    case 'F': return "forward mb" + std::to_string(m.micro_batch);
    case 'B': return "backward mb" + std::to_string(m.micro_batch);
    case 'R': return "recompute mb" + std::to_string(m.micro_batch);
    case 'O': return "optimizer step";
    default: return std::string(m.name);
  }
}

// The critical rank's step: compute, optimizer, and the rest, idle (pipeline bubble, or waiting
// for communication that nothing hides); the exposed time per group is said beside it, not
// stacked, since the groups' exposed spans may overlap each other.
std::vector<html::Part> breakdown(const SlotTimeline& t, TimeNs step_end) {
  const RankStep& k = t.step;
  return {{"compute", k.compute_s - k.optimizer_s},
          {"optimizer", k.optimizer_s},
          {"idle: bubble and exposed communication",
           std::max(0.0, static_cast<double>(step_end) / kNsPerS - k.compute_s)}};
}

std::string exposed_line(const SlotTimeline& t) {
  std::string out = "Exposed communication on that rank, per group (spans may overlap):";
  char buf[64];
  for (const auto& [g, c] : t.step.comm) {
    std::snprintf(buf, sizeof buf, " %s %.4g s,", g.c_str(), c.exposed_s);
    out += buf;
  }
  out.back() = '.';
  return out;
}

}  // namespace

html::StepPicture step_picture(const Program& p, const std::vector<SlotTimeline>& timelines,
                               TimeNs step_end, double capacity_bytes, double usable_bytes) {
  html::StepPicture pic;
  pic.step_s = static_cast<double>(step_end) / kNsPerS;
  pic.capacity_bytes = capacity_bytes;
  pic.usable_bytes = usable_bytes;
  const TimeNs join_ns = std::max<TimeNs>(1, step_end / 4000);
  const std::vector<std::size_t> drawn = drawn_slots(p);
  std::vector<std::ptrdiff_t> lane_of(p.slots.size(), -1);
  for (std::size_t s : drawn) {
    const SlotInfo& si = p.slots[s];
    const std::string who = "rank " + std::to_string(si.rank) + " (stage " +
                            std::to_string(si.coord.pp) + ")";
    lane_of[s] = static_cast<std::ptrdiff_t>(pic.lanes.size());
    pic.lanes.push_back({who + " compute", {}});
    pic.lanes.push_back({who + " comm", {}});
    html::MemoryTrack track{who, {}};
    const double fixed = si.static_memory.weights_bytes + si.static_memory.gradients_bytes +
                         si.static_memory.optimizer_bytes + si.static_memory.runtime_bytes;
    for (const MemorySample& m : timelines[s].memory)
      track.points.emplace_back(static_cast<double>(m.time) / kNsPerS,
                                fixed + m.activations_bytes + m.buffers_bytes);
    if (track.points.empty()) track.points.emplace_back(0.0, fixed);
    pic.memory.push_back(std::move(track));
  }
  // The drawn slots' ops in start order (op ids follow issue order, which may differ), ties in
  // id order: only their ranges are sorted, not the whole program's (28M ops with --all-ranks).
  std::vector<std::size_t> by_id = drawn;
  std::sort(by_id.begin(), by_id.end());
  std::vector<std::int32_t> order;
  for (std::size_t s : by_id)
    for (auto [i, last] = slot_range(p, s); i < last; ++i) order.push_back(i);
  std::stable_sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) {
    return p.engine.op(a).start < p.engine.op(b).start;
  });
  for (std::int32_t id : order) {
    const OpMeta& m = p.meta(id);
    const Op& op = p.engine.op(id);
    const auto slot = static_cast<std::size_t>(p.slot_of(id));
    const std::ptrdiff_t lane = lane_of[slot];
    if (lane < 0 || op.end <= op.start) continue;
    const SlotInfo& si = p.slots[slot];
    if (op.collective >= 0) {
      if (m.group == ReportGroup::kNone) continue;
      const std::string g(to_string(m.group));
      add_bar(pic.lanes[static_cast<std::size_t>(lane + 1)], std::max(p.engine.began(id), op.start), op.end,
              g, g + " " + op_label(m), join_ns);
    } else if (op.stream == si.first_stream + static_cast<std::int32_t>(StreamKind::kCompute)) {
      const bool known = m.pass == 'F' || m.pass == 'B' || m.pass == 'R' || m.pass == 'O';
      add_bar(pic.lanes[static_cast<std::size_t>(lane)], op.start, op.end,
              known ? std::string(1, m.pass) : "other", compute_title(m), join_ns);
    }
  }
  // The slowest rank's breakdown: the one with the least idle time is the critical one.
  std::size_t critical = 0;
  for (std::size_t s = 1; s < timelines.size(); ++s)
    if (timelines[s].step.idle_s < timelines[critical].step.idle_s) critical = s;
  if (!timelines.empty()) {
    pic.breakdown = breakdown(timelines[critical], step_end);
    pic.breakdown_note = exposed_line(timelines[critical]);
  }
  return pic;
}

}  // namespace trainplan::sim
