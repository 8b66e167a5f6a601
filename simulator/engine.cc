// The event loop; see engine.h. Tested through tests/simulator/.
//
// Link sharing is a fluid model: while k flows cross one directed link, each gets 1/k of it, and
// a flow moves at the share of its most crowded link. Whenever a flow starts or ends, the flows
// that share a link with it are re-rated and their completion events re-issued (older events
// are recognised by their version and dropped).
#include "simulator/engine.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "core/status.h"
#include "core/cost/straggler.h"

namespace trainplan::sim {

namespace {
TimeNs ceil_ns(double seconds) {
  return static_cast<TimeNs>(std::ceil(seconds * kNsPerS - 1e-6));
}
}  // namespace

std::int32_t Engine::add_stream(std::int32_t lane, bool compute) {
  Stream st;
  st.lane = lane;
  st.compute = compute;
  streams_.push_back(st);
  if (lane >= static_cast<std::int32_t>(lanes_.size()))
    lanes_.resize(static_cast<std::size_t>(lane) + 1);
  const auto id = static_cast<std::int32_t>(streams_.size() - 1);
  if (compute && lane >= 0 && lanes_[static_cast<std::size_t>(lane)].compute_stream < 0)
    lanes_[static_cast<std::size_t>(lane)].compute_stream = id;
  return id;
}

std::int32_t Engine::add_op(std::int32_t stream, TimeNs duration) {
  Op op;
  op.stream = stream;
  op.duration = duration;
  ops_.push_back(op);
  const auto id = static_cast<std::int32_t>(ops_.size() - 1);
  Stream& st = streams_[static_cast<std::size_t>(stream)];
  if (st.tail >= 0) ops_[static_cast<std::size_t>(st.tail)].next_in_stream = id;
  else st.head = id;
  st.tail = id;
  return id;
}

std::int32_t Engine::stream_tail(std::int32_t stream) const {
  return streams_[static_cast<std::size_t>(stream)].tail;
}

void Engine::reorder_tail(std::int32_t stream, std::int32_t after,
                          const std::vector<std::int32_t>& order) {
  Stream& st = streams_[static_cast<std::size_t>(stream)];
  std::size_t count = 0;
  const std::int32_t first =
      after >= 0 ? ops_[static_cast<std::size_t>(after)].next_in_stream : st.head;
  for (std::int32_t id = first; id >= 0; id = ops_[static_cast<std::size_t>(id)].next_in_stream)
    ++count;
  TRAINPLAN_CHECK(count == order.size()) << "reorder_tail: " << order.size() << " ops for "
                                         << count << " on the stream";
  if (order.empty()) return;
  if (after >= 0) ops_[static_cast<std::size_t>(after)].next_in_stream = order.front();
  else st.head = order.front();
  for (std::size_t i = 0; i + 1 < order.size(); ++i)
    ops_[static_cast<std::size_t>(order[i])].next_in_stream = order[i + 1];
  ops_[static_cast<std::size_t>(order.back())].next_in_stream = -1;
  st.tail = order.back();
}

void Engine::add_dep(std::int32_t before, std::int32_t after) {
  if (before < 0 || before == after) return;
  edges_.emplace_back(before, after);
}

std::int32_t Engine::add_net(NetDemand demand) {
  nets_.push_back(std::move(demand));
  return static_cast<std::int32_t>(nets_.size() - 1);
}

std::int32_t Engine::add_collective(std::int32_t net, std::int32_t participants,
                                   std::int32_t ranks) {
  Collective c;
  c.net = net;
  c.participants = participants;
  c.ranks = std::max(ranks, participants);
  collectives_.push_back(std::move(c));
  return static_cast<std::int32_t>(collectives_.size() - 1);
}

void Engine::join(std::int32_t op, std::int32_t collective) {
  ops_[static_cast<std::size_t>(op)].collective = collective;
  joins_.emplace_back(collective, op);
}

void Engine::append(const Engine& part, std::int32_t first_stream,
                    std::span<const std::int32_t> collective_of) {
  const auto offset = static_cast<std::int32_t>(ops_.size());
  TRAINPLAN_CHECK(first_stream >= 0 &&
                  static_cast<std::size_t>(first_stream) + part.streams_.size() <= streams_.size())
      << "append: streams " << first_stream << "+" << part.streams_.size() << " of "
      << streams_.size();
  auto shifted = [offset](std::int32_t id) { return id < 0 ? id : id + offset; };
  for (std::size_t k = 0; k < part.streams_.size(); ++k) {
    Stream& st = streams_[static_cast<std::size_t>(first_stream) + k];
    TRAINPLAN_CHECK(st.head < 0) << "append: stream " << first_stream + k << " is not empty";
    st.head = shifted(part.streams_[k].head);
    st.tail = shifted(part.streams_[k].tail);
  }
  for (Op op : part.ops_) {
    op.stream += first_stream;
    if (op.collective >= 0) op.collective = collective_of[static_cast<std::size_t>(op.collective)];
    op.next_in_stream = shifted(op.next_in_stream);
    ops_.push_back(op);
  }
  for (const auto& [before, after] : part.edges_) edges_.emplace_back(before + offset, after + offset);
  for (const auto& [c, op] : part.joins_)
    joins_.emplace_back(collective_of[static_cast<std::size_t>(c)], op + offset);
}

void Engine::clear_program() {
  ops_.clear();
  streams_.clear();
  lanes_.clear();
  nets_.clear();
  collectives_.clear();
  edges_.clear();
  joins_.clear();
}

void Engine::push(TimeNs t, std::int32_t id, std::int32_t version) {
  if (t == now_) {
    due_now_.push_back(Event{t, seq_++, id, version});
    return;
  }
  queue_.push(Event{t, seq_++, id, version});
}

void Engine::try_start(std::int32_t s) {
  Stream& st = streams_[static_cast<std::size_t>(s)];
  if (st.busy || st.head < 0) return;
  const std::int32_t id = st.head;
  Op& op = ops_[static_cast<std::size_t>(id)];
  if (op.pending > 0) return;
  st.busy = true;
  op.start = now_;
  // A program with --all-ranks holds tens of millions of ops (GPT-3 on 512 ranks: 1.3 GB), and
  // the first read of a stream's next op, when its predecessor ended, missed the cache on
  // almost every op (perf: 93% of try_start's samples on that one load). What finish_op will
  // read is known now, and thousands of events pass before the op ends: fetch it while it runs.
  if (op.next_in_stream >= 0)
    __builtin_prefetch(&ops_[static_cast<std::size_t>(op.next_in_stream)]);
  if (op.succ_count > 0) __builtin_prefetch(&succ_[static_cast<std::size_t>(op.succ_begin)]);
  if (op.collective < 0) {
    if (contention_ && st.compute && st.lane >= 0) start_compute(id);
    else push(now_ + op.duration, id, 0);
  } else {
    if (!ready_.empty() && ready_[static_cast<std::size_t>(id)].ready < 0) note_ready(id);
    arrive(op.collective);
  }
}

double Engine::share_of(const Collective& c) const {
  double share = 1.0;
  for (std::int32_t l : nets_[static_cast<std::size_t>(c.net)].links)
    share = std::min(share, 1.0 / static_cast<double>(link_count_[static_cast<std::size_t>(l)]));
  return share;
}

void Engine::affected_flows(const Collective& c, std::vector<std::int32_t>& out) {
  out.clear();
  for (std::int32_t l : nets_[static_cast<std::size_t>(c.net)].links)
    for (std::int32_t f : link_flows_[static_cast<std::size_t>(l)]) out.push_back(f);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
}

// Brings a flow's progress up to now and re-issues its completion at its current share.
void Engine::rerate(std::int32_t ci) {
  Collective& c = collectives_[static_cast<std::size_t>(ci)];
  const TimeNs from = std::max(c.last_update, c.transfer_from);
  if (now_ > from)
    c.remaining_s = std::max(0.0, c.remaining_s - static_cast<double>(now_ - from) / kNsPerS * c.rate);
  c.last_update = now_;
  c.rate = share_of(c);
  ++c.version;
  const TimeNs begin = std::max(now_, c.transfer_from);
  push(begin + ceil_ns(c.remaining_s / c.rate), ~ci, c.version);
}

void Engine::start_compute(std::int32_t id) {
  const Op& op = ops_[static_cast<std::size_t>(id)];
  Stream& st = streams_[static_cast<std::size_t>(op.stream)];
  const Lane& l = lanes_[static_cast<std::size_t>(st.lane)];
  const double ratio = l.holding > 0 ? contention_(id, l.held) : 1.0;
  const double ns = static_cast<double>(op.duration) * ratio;
  st.left = 1.0;
  st.since = now_;
  st.rate = ns > 0 ? 1.0 / ns : 0.0;
  ++st.version;
  push(now_ + static_cast<TimeNs>(std::llround(ns)), id, st.version);
}

void Engine::rerate_lane(std::int32_t lane) {
  const Lane& l = lanes_[static_cast<std::size_t>(lane)];
  if (l.compute_stream < 0) return;
  Stream& st = streams_[static_cast<std::size_t>(l.compute_stream)];
  if (!st.busy || st.head < 0) return;
  const std::int32_t id = st.head;
  const Op& op = ops_[static_cast<std::size_t>(id)];
  if (op.collective >= 0 || op.duration <= 0) return;
  st.left = std::max(0.0, st.left - static_cast<double>(now_ - st.since) * st.rate);
  st.since = now_;
  const double ratio = l.holding > 0 ? contention_(id, l.held) : 1.0;
  const double ns = static_cast<double>(op.duration) * ratio;
  st.rate = 1.0 / ns;
  ++st.version;
  push(now_ + static_cast<TimeNs>(std::llround(st.left * ns)), id, st.version);
}

void Engine::hold_lanes(const Collective& c, double sign) {
  const CommHold& h = nets_[static_cast<std::size_t>(c.net)].hold;
  for (std::int32_t k = 0; k < c.ops_count; ++k) {
    const auto op = static_cast<std::size_t>(coll_ops_[static_cast<std::size_t>(c.ops_begin + k)]);
    const std::int32_t lane = streams_[static_cast<std::size_t>(ops_[op].stream)].lane;
    if (lane < 0) continue;
    Lane& l = lanes_[static_cast<std::size_t>(lane)];
    if (sign > 0) {
      l.held += h;
      ++l.holding;
    } else {
      l.held -= h;
      if (--l.holding == 0) l.held = CommHold{};
    }
    rerate_lane(lane);
  }
}

void Engine::note_ready(std::int32_t id) {
  if (ready_.empty()) return;  // no rank skew: nobody reads it
  Arrival& a = ready_[static_cast<std::size_t>(id)];
  a.ready = now_;
  const std::int32_t lane =
      streams_[static_cast<std::size_t>(ops_[static_cast<std::size_t>(id)].stream)].lane;
  if (lane >= 0) a.lane_work = lanes_[static_cast<std::size_t>(lane)].work;
}

TimeNs Engine::straggler_wait(const Collective& c) {
  std::vector<ArrivalSpread>& members = arrivals_;
  members.clear();
  const double copies = static_cast<double>(c.ranks) / static_cast<double>(c.participants);
  for (std::int32_t k = 0; k < c.ops_count; ++k) {
    const auto member = static_cast<std::size_t>(c.ops_begin + k);
    const auto id = static_cast<std::size_t>(coll_ops_[member]);
    const Arrival& arrival = ready_[id];
    const std::int32_t lane = streams_[static_cast<std::size_t>(ops_[id].stream)].lane;
    const TimeNs since =
        lane < 0 ? 0 : arrival.lane_work - lanes_[static_cast<std::size_t>(lane)].synced;
    // Spread from when it was ready. A rank's skew is its accumulated lateness, the same one
    // at each collective it meets until its compute waits: one queued behind another on its
    // stream (ended on every member together, now) waits only for what is left of it, not for
    // a fresh draw.
    members.push_back({static_cast<double>(arrival.ready),
                       compute_spread_ * static_cast<double>(std::max<TimeNs>(since, 0)), copies});
  }
  const double latest = expected_latest_arrival(members);
  return std::max<TimeNs>(0, static_cast<TimeNs>(std::llround(latest)) - now_);
}

void Engine::arrive(std::int32_t ci) {
  Collective& c = collectives_[static_cast<std::size_t>(ci)];
  if (++c.arrived < c.participants) return;
  // The members' waits for a straggler (rank skew): inside the collective, as a rank measures
  // its collective from its call to its return.
  const TimeNs wait = compute_spread_ > 0 && c.ranks > 1 ? straggler_wait(c) : 0;
  c.began = now_;
  const NetDemand& net = nets_[static_cast<std::size_t>(c.net)];
  if (contention_ && !net.hold.empty()) hold_lanes(c, +1.0);
  if (net.transfer_s <= 0.0 || net.links.empty()) {
    push(now_ + wait + net.rounds * ceil_ns(net.latency_s + net.transfer_s), ~ci, c.version);
    return;
  }
  c.active = true;
  c.rounds_left = net.rounds - 1;
  c.remaining_s = net.transfer_s;
  c.transfer_from = now_ + wait + ceil_ns(net.latency_s);
  c.last_update = now_;
  for (std::int32_t l : net.links) {
    ++link_count_[static_cast<std::size_t>(l)];
    link_flows_[static_cast<std::size_t>(l)].push_back(ci);
  }
  affected_flows(c, scratch_);
  for (std::int32_t f : scratch_) rerate(f);  // rerate() leaves scratch_ alone
}

void Engine::finish_op(std::int32_t id) {
  Op& op = ops_[static_cast<std::size_t>(id)];
  op.end = now_;
  // The successors' records are read below, one after another: ask for all of them at once.
  for (std::int32_t k = 0; k < op.succ_count; ++k) {
    const std::int32_t s = succ_[static_cast<std::size_t>(op.succ_begin + k)];
    __builtin_prefetch(&ops_[static_cast<std::size_t>(s)]);
  }
  if (progress_ && (++finished_ & 0xFFFF) == 0)
    progress_(finished_, static_cast<std::int64_t>(ops_.size()));
  Stream& st = streams_[static_cast<std::size_t>(op.stream)];
  bool syncs_lane = false;  // a collective the lane's compute waits for
  if (st.lane >= 0) {
    if (op.collective < 0) {
      if (st.compute) lanes_[static_cast<std::size_t>(st.lane)].work += op.duration;
    } else {
      syncs_lane = st.compute;
      for (std::int32_t k = 0; k < op.succ_count && !syncs_lane; ++k) {
        const std::int32_t after = succ_[static_cast<std::size_t>(op.succ_begin + k)];
        const Stream& next =
            streams_[static_cast<std::size_t>(ops_[static_cast<std::size_t>(after)].stream)];
        syncs_lane = next.compute && next.lane == st.lane;
      }
    }
  }
  // Members whose compute waited for the collective go on together: their skew starts again.
  if (syncs_lane) {
    Lane& l = lanes_[static_cast<std::size_t>(st.lane)];
    l.synced = l.work;
  }
  st.busy = false;
  st.head = op.next_in_stream;
  for (std::int32_t k = 0; k < op.succ_count; ++k) {
    const std::int32_t s = succ_[static_cast<std::size_t>(op.succ_begin + k)];
    Op& next = ops_[static_cast<std::size_t>(s)];
    if (--next.pending == 0) {
      if (next.collective >= 0) note_ready(s);
      try_start(next.stream);
    }
  }
  try_start(op.stream);
}

std::int64_t Engine::run() {
  // Successor lists in one flat array (counting sort of the edges by their source).
  for (const auto& [before, after] : edges_) {
    ++ops_[static_cast<std::size_t>(before)].succ_count;
    ++ops_[static_cast<std::size_t>(after)].pending;
  }
  std::int32_t offset = 0;
  for (Op& op : ops_) {
    op.succ_begin = offset;
    offset += op.succ_count;
    op.succ_count = 0;
  }
  succ_.assign(static_cast<std::size_t>(offset), 0);
  for (const auto& [before, after] : edges_) {
    Op& op = ops_[static_cast<std::size_t>(before)];
    succ_[static_cast<std::size_t>(op.succ_begin + op.succ_count++)] = after;
  }
  edges_.clear();
  edges_.shrink_to_fit();
  // Participants of each collective, the same way.
  for (const auto& [c, op] : joins_) ++collectives_[static_cast<std::size_t>(c)].ops_count;
  offset = 0;
  for (Collective& c : collectives_) {
    c.ops_begin = offset;
    offset += c.ops_count;
    c.ops_count = 0;
  }
  coll_ops_.assign(static_cast<std::size_t>(offset), 0);
  for (const auto& [ci, op] : joins_) {
    Collective& c = collectives_[static_cast<std::size_t>(ci)];
    coll_ops_[static_cast<std::size_t>(c.ops_begin + c.ops_count++)] = op;
  }
  joins_.clear();
  joins_.shrink_to_fit();
  link_count_.assign(link_flows_.size(), 0);
  if (compute_spread_ > 0) ready_.assign(ops_.size(), Arrival{});

  // The queue holds about one event per busy stream: a radix heap pays off with many
  // (--all-ranks on hundreds of ranks), a binary heap with few (one rank per stage).
  constexpr std::size_t kRadixStreams = 64 * 8;  // 64 simulated ranks
  queue_.use_binary_heap(streams_.size() < kRadixStreams);
  for (std::int32_t s = 0; s < static_cast<std::int32_t>(streams_.size()); ++s) try_start(s);
  for (;;) {
    Event ev;
    // The queue's time is now_ (it moves only when the loop takes from it), so what it holds
    // due now comes first only with a lower sequence number; the rest of it is later.
    if (due_head_ < due_now_.size() &&
        (!queue_.has_due_at_last_time() || queue_.front().seq > due_now_[due_head_].seq)) {
      ev = due_now_[due_head_++];
      if (due_head_ == due_now_.size()) {
        due_now_.clear();
        due_head_ = 0;
      }
    } else if (!queue_.empty()) {
      ev = queue_.pop();
    } else {
      break;
    }
    now_ = ev.time;
    ++events_;
    if (ev.id >= 0) {
      // A compute op re-rated by contention ends at its latest event only.
      if (contention_) {
        const Stream& st = streams_[static_cast<std::size_t>(ops_[static_cast<std::size_t>(ev.id)].stream)];
        if (st.compute && st.lane >= 0 && ev.version != st.version) continue;
      }
      finish_op(ev.id);
      continue;
    }
    const std::int32_t ci = ~ev.id;
    Collective& c = collectives_[static_cast<std::size_t>(ci)];
    if (ev.version != c.version) continue;  // superseded by a re-rating
    if (c.active && c.rounds_left > 0) {
      // A run's next exchange: its latency, then its transfer, still on the same links.
      const NetDemand& net = nets_[static_cast<std::size_t>(c.net)];
      --c.rounds_left;
      c.remaining_s = net.transfer_s;
      c.transfer_from = now_ + ceil_ns(net.latency_s);
      c.last_update = now_;
      rerate(ci);
      continue;
    }
    if (contention_ && !nets_[static_cast<std::size_t>(c.net)].hold.empty()) hold_lanes(c, -1.0);
    if (c.active) {
      c.active = false;
      for (std::int32_t l : nets_[static_cast<std::size_t>(c.net)].links) {
        --link_count_[static_cast<std::size_t>(l)];
        auto& flows = link_flows_[static_cast<std::size_t>(l)];
        flows.erase(std::find(flows.begin(), flows.end(), ci));
      }
      affected_flows(c, scratch_);
      for (std::int32_t f : scratch_) rerate(f);
    }
    ++c.version;
    // collectives_ does not grow during run(), so `c` stays valid while members finish.
    for (std::int32_t k = 0; k < c.ops_count; ++k)
      finish_op(coll_ops_[static_cast<std::size_t>(c.ops_begin + k)]);
  }
  std::ostringstream stuck;
  for (std::size_t i = 0; i < streams_.size(); ++i) {
    const Stream& st = streams_[i];
    if (st.head < 0) continue;
    const Op& op = ops_[static_cast<std::size_t>(st.head)];
    stuck << " [stream " << i << " at op " << st.head << ", " << op.pending
          << " predecessors pending, collective " << op.collective << "]";
  }
  TRAINPLAN_CHECK(stuck.str().empty()) << "simulated program deadlocked:" << stuck.str();
  return events_;
}

}  // namespace trainplan::sim
