// The discrete-event core of the simulator: operations on in-order streams, dependencies between
// them, collectives that start when every participant has reached them, and network flows that
// share link bandwidth while they are in flight. The clock is an integer number of nanoseconds.
//
// Rank skew (core/cost/straggler.h): with a compute spread set, a collective's transfer begins at
// the expected latest arrival of its members, each member's arrival spread by the spread times
// the compute its lane (rank) has done since its compute last waited for a collective (then
// the members go on together). A collective that compute does not wait for (an overlapped
// gradient bucket) leaves the skew to grow.
//
// Contention (set_contention; core/cost/contention.h): while a collective is in flight (from
// when its last member arrived to its end) each member's lane holds what the collective's
// kernels take (NetDemand::hold: SMs, device-memory bandwidth), and the op running on the lane's
// compute stream progresses at 1 / ratio(op, what the lane holds) of its rate: a fluid model,
// like the links', re-rated whenever a collective on the lane begins or ends.
//
// Knows nothing about transformers: simulator.cc builds the program, engine.cc plays it.
// Tested through tests/simulator/ (schedules, collectives, link sharing).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "core/cost/contention.h"
#include "core/cost/straggler.h"
#include "core/units.h"
#include "simulator/engine_queue.h"

namespace trainplan::sim {

// The network demand of one collective, from the collectives.h alpha-beta formulas.
struct NetDemand {
  double latency_s = 0;   // the latency term (not slowed by link sharing)
  double transfer_s = 0;  // the bandwidth term at the uncontended bandwidth
  std::vector<std::int32_t> links;  // directed links the collective's traffic crosses (deduplicated)
  // A run's collective (Task::repeat): `rounds` exchanges back to back, each its latency then its
  // transfer, on the links throughout; uncontended, rounds times one exchange's nanoseconds. Not
  // replayed per round: rank skew's straggler wait (only with a compute spread) is waited for
  // once, at the first.
  std::int32_t rounds = 1;
  CommHold hold;  // what its kernels hold on each member while in flight (none: a host copy)
};

// One operation, 48 bytes: a program holds tens of millions of them with --all-ranks (GPT-3
// on 512 ranks: 28M), so what only some ops need lives elsewhere: when a collective began is
// its instance's (Engine::began), and a member's arrival for rank skew is kept only when a
// compute spread is set.
struct Op {
  TimeNs duration = 0;          // compute ops; a collective's time comes from its flow
  TimeNs start = -1, end = -1;  // filled by run(): reached the head of its stream, ended
  std::int32_t stream = 0;
  std::int32_t collective = -1;  // comm ops: the collective instance they take part in
  std::int32_t pending = 0;      // unfinished predecessors (run-time)
  std::int32_t succ_begin = 0, succ_count = 0;
  std::int32_t next_in_stream = -1;  // the op after this one on its stream
};

class Engine {
 public:
  explicit Engine(std::int32_t num_links) : link_flows_(static_cast<std::size_t>(num_links)) {}

  // Capacity hints for a program of about `ops` operations.
  void reserve(std::size_t ops) {
    ops_.reserve(ops);
    edges_.reserve(ops + ops / 2);
    joins_.reserve(ops / 2);
    collectives_.reserve(ops / 2);
  }
  // A stream of `lane` (a rank; -1: none). The durations of a compute stream's ops are the
  // lane's compute; a collective op on any stream of the lane is spread by that compute since
  // the lane's compute last waited for a collective.
  std::int32_t add_stream(std::int32_t lane = -1, bool compute = false);
  // Rank skew: the relative standard deviation of a lane's compute between two waits for
  // others (core/cost/straggler.h). 0 (the default): members arrive when their programs say.
  void set_compute_spread(double fraction) { compute_spread_ = fraction; }
  // Contention: `ratio(op, held)` (>= 1) is how much longer compute op `op` takes while its
  // lane holds `held`. Empty (the default): collectives take nothing from compute.
  using ContentionRatio = std::function<double(std::int32_t op, const CommHold& held)>;
  void set_contention(ContentionRatio ratio) { contention_ = std::move(ratio); }
  // Appends an op to the stream's program order.
  std::int32_t add_op(std::int32_t stream, TimeNs duration);
  std::int32_t stream_of(std::int32_t op) const {
    return ops_[static_cast<std::size_t>(op)].stream;
  }
  // The stream's last op so far (-1: none).
  std::int32_t stream_tail(std::int32_t stream) const;
  // Rewrites the program order of the ops added to `stream` after `after` (-1: all of them):
  // `order` must hold exactly those ops, in the order they are to run (before run()).
  void reorder_tail(std::int32_t stream, std::int32_t after,
                    const std::vector<std::int32_t>& order);
  // `after` cannot start before `before` has ended.
  void add_dep(std::int32_t before, std::int32_t after);
  std::int32_t add_net(NetDemand demand);
  // A collective instance on a network demand, joined by `participants` ops, among `ranks`
  // members (0: one per participant; a symmetric simulation's op stands for
  // ranks / participants members that arrive alike, and the straggler among them is waited for).
  std::int32_t add_collective(std::int32_t net, std::int32_t participants,
                              std::int32_t ranks = 0);
  void join(std::int32_t op, std::int32_t collective);

  // The parallel program build (program.cc): each rank's ops are added to an engine of their
  // own, then appended here in rank order, as if they had been added here in that order.
  // Appends `part`'s ops, dependencies and joins after this engine's ops: part's stream k is
  // this engine's stream first_stream + k (still empty), its collective c this engine's
  // collective_of[c]. Its nets and collectives are not copied (the builder matches them).
  void append(const Engine& part, std::int32_t first_stream,
              std::span<const std::int32_t> collective_of);
  // Empties the program, keeping the storage (an engine reused for the next rank's part).
  void clear_program();

  // Plays the program to the end. Returns the number of events processed. Every op has run
  // unless the program deadlocks (a broken invariant of the program builder).
  std::int64_t run();
  // Called during run() about every 65,536 finished ops with (finished, total): progress of a
  // long play (simulate --all-ranks). May be empty.
  void set_progress(std::function<void(std::int64_t, std::int64_t)> progress) {
    progress_ = std::move(progress);
  }

  const std::vector<Op>& ops() const { return ops_; }
  // The ops that could not start before `op` ended (after run()).
  std::span<const std::int32_t> successors(std::int32_t op) const {
    const Op& o = ops_[static_cast<std::size_t>(op)];
    return {succ_.data() + o.succ_begin, static_cast<std::size_t>(o.succ_count)};
  }
  const Op& op(std::int32_t i) const { return ops_[static_cast<std::size_t>(i)]; }
  // Collective ops: when every participant had arrived and the transfer began (after run());
  // -1 for other ops.
  TimeNs began(std::int32_t i) const {
    const std::int32_t c = ops_[static_cast<std::size_t>(i)].collective;
    return c < 0 ? -1 : collectives_[static_cast<std::size_t>(c)].began;
  }
  std::int64_t num_ops() const { return static_cast<std::int64_t>(ops_.size()); }

 private:
  struct Stream {
    std::int32_t head = -1;  // next op to run (-1: done)
    std::int32_t tail = -1;  // last op added
    std::int32_t lane = -1;
    bool compute = false;
    bool busy = false;
    // Contention, on a compute stream: the running op's share of its work left as of `since`,
    // its progress per ns, and the version its completion event must carry.
    std::int32_t version = 0;
    double left = 0, rate = 0;
    TimeNs since = 0;
  };
  struct Lane {
    TimeNs work = 0;    // compute ended so far
    TimeNs synced = 0;  // `work` when the lane's compute last waited for a collective
    std::int32_t compute_stream = -1;
    CommHold held;      // what the collectives in flight on the lane hold (contention)
    std::int32_t holding = 0;  // how many of them
  };
  struct Collective {
    std::int32_t net = 0;
    std::int32_t participants = 0;
    std::int32_t ranks = 0;
    std::int32_t arrived = 0;
    std::int32_t ops_begin = 0, ops_count = 0;  // into coll_ops_ (built by run())
    TimeNs began = -1;  // every participant had arrived and the transfer began
    // Flow state while in flight.
    double remaining_s = 0;  // transfer seconds left at full bandwidth
    double rate = 1;         // fraction of the full bandwidth it gets now
    TimeNs transfer_from = 0, last_update = 0;
    std::int32_t version = 0;
    std::int32_t rounds_left = 0;  // NetDemand::rounds still to transfer after this one
    bool active = false;
  };
  // Rank skew, per collective op (run-time): when its predecessors had all ended (-1: not
  // yet), and the lane's compute done by then. A member's arrival is spread from that moment;
  // a collective begins at the later of the last arrival and the expected latest spread
  // arrival.
  struct Arrival {
    TimeNs ready = -1;
    TimeNs lane_work = 0;
  };
  void push(TimeNs t, std::int32_t id, std::int32_t version);
  void try_start(std::int32_t stream);
  void arrive(std::int32_t collective);
  void note_ready(std::int32_t op);
  // Rank skew: how long after the last arrival (now) the slowest member is expected.
  TimeNs straggler_wait(const Collective& c);
  void finish_op(std::int32_t op);
  void rerate(std::int32_t collective);
  // Contention: starts compute op `id` on its stream at the lane's current rate, or brings the
  // lane's running compute op up to now and re-issues its end at the lane's new rate.
  void start_compute(std::int32_t id);
  void rerate_lane(std::int32_t lane);
  // A collective's members take (sign +1) or give back (-1) its hold on their lanes.
  void hold_lanes(const Collective& c, double sign);
  double share_of(const Collective& c) const;
  void affected_flows(const Collective& c, std::vector<std::int32_t>& out);

  std::vector<Op> ops_;
  std::vector<Stream> streams_;
  std::vector<Lane> lanes_;
  std::vector<ArrivalSpread> arrivals_;  // straggler_wait's scratch
  std::vector<Arrival> ready_;  // by op, only with a compute spread (else empty)
  double compute_spread_ = 0;
  ContentionRatio contention_;
  std::vector<NetDemand> nets_;
  std::vector<Collective> collectives_;
  std::vector<std::pair<std::int32_t, std::int32_t>> edges_;  // (before, after)
  std::vector<std::pair<std::int32_t, std::int32_t>> joins_;  // (collective, op)
  std::vector<std::int32_t> coll_ops_;
  std::vector<std::int32_t> succ_;
  std::vector<std::int32_t> link_count_;
  std::vector<std::vector<std::int32_t>> link_flows_;  // active collectives per link
  EventQueue queue_;  // future events (engine_queue.h)
  // Events due now (zero-length ops), in order: they skip the queue. Every entry has time now_
  // and a larger sequence number than any queued event it is taken before.
  std::vector<Event> due_now_;
  std::size_t due_head_ = 0;
  std::vector<std::int32_t> scratch_;
  std::uint64_t seq_ = 0;
  TimeNs now_ = 0;
  std::int64_t events_ = 0;
  std::int64_t finished_ = 0;
  std::function<void(std::int64_t, std::int64_t)> progress_;
};

}  // namespace trainplan::sim
