// The event loop's queue of future events (engine.cc): a monotone radix heap for programs of
// many ranks, a binary heap for small ones (use_binary_heap). Tested by
// tests/simulator/engine_queue_test.cc (against a binary heap on the same pushes and pops) and,
// through the engine, by every simulator test and the zoo's golden outputs.
//
// Why not a binary heap: with --all-ranks the loop holds a few thousand events and pops one per
// finished op (GPT-3 on 512 ranks: 28M pops); perf put about half of Engine::run's own time in
// std::pop_heap's sift-down, whose comparisons the branch predictor cannot guess. The loop's
// keys never go back in time (an event is due at the current time or later), which is what a
// radix heap needs (Ahuja, Mehlhorn, Orlin and Tarjan 1990, "Faster algorithms for the shortest
// path problem", J. ACM 37(2), section 2): bucket b > 0 holds the keys whose highest bit that
// differs from the last key taken is bit b - 1, bucket 0 those equal to it. A push is an
// append; a pop takes from bucket 0, and when that is empty, moves the lowest non-empty bucket
// down, where each key lands in a lower bucket (at most 64 moves per key, few in practice).
//
// The order is exact and total: by time, then by sequence number (the order of the pushes), as
// the binary heap it replaces. Bucket 0's keys share one time; they are sorted by sequence
// number when it is refilled, and later pushes there carry larger numbers, so it stays sorted.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/status.h"
#include "core/units.h"

namespace trainplan::sim {

struct Event {
  TimeNs time;
  std::uint64_t seq;     // the order of the pushes: breaks ties of time
  std::int32_t id;       // >= 0: op completes; < 0: collective ~id completes
  std::int32_t version;  // a collective's completion: dropped if re-rated since
};

class EventQueue {
 public:
  // The buckets' storage is reused from the last queue this thread dropped: `plan` plays
  // hundreds of programs one after another on each thread, and fresh buckets, grown anew each
  // time, cost 3 times the page faults of the binary heap (318K against 74K on GPT-3's
  // `--simulate-top 200`). Only the capacity is reused, never an event.
  EventQueue() { buckets_.swap(spare()); }
  ~EventQueue() {
    std::array<std::vector<Event>, kBuckets>& keep = spare();
    for (std::size_t b = 0; b < kBuckets; ++b) {
      buckets_[b].clear();
      if (buckets_[b].capacity() > keep[b].capacity() && buckets_[b].capacity() <= kKeepEvents)
        buckets_[b].swap(keep[b]);
    }
  }
  EventQueue(const EventQueue&) = delete;
  EventQueue& operator=(const EventQueue&) = delete;

  bool empty() const { return size_ == 0; }
  std::size_t size() const { return size_; }
  // The time of the last event taken (0 before the first): no push may be earlier.
  TimeNs last_time() const { return last_; }

  // A queue of a small program keeps a binary heap instead (in the last bucket): with a few
  // dozen events it is cheaper than moving each event down the buckets (bench/results/
  // parallel-2026-11-25-simspeed: `plan`'s symmetric programs were 12% slower with the radix
  // heap). Both give the same order. Only on an empty queue.
  void use_binary_heap(bool binary) {
    TRAINPLAN_CHECK(size_ == 0) << "the event queue's kind is chosen while it is empty";
    binary_ = binary;
  }

  void push(const Event& e) {
    TRAINPLAN_CHECK(e.time >= last_) << "event at " << e.time << " ns pushed after one at "
                                     << last_ << " ns was taken";
    ++size_;
    if (binary_) {
      heap().push_back(e);
      std::push_heap(heap().begin(), heap().end(), Later{});
      return;
    }
    buckets_[bucket_of(e.time)].push_back(e);
  }
  // The events due at last_time(), in sequence order, are taken before any other; this says
  // whether one is waiting (then front() is it, without moving the queue forward in time).
  bool has_due_at_last_time() const {
    if (binary_) return !heap().empty() && heap().front().time == last_;
    return head_ < buckets_[0].size();
  }
  // The earliest event, moving the queue's time forward to it. Not on an empty queue.
  const Event& front() {
    TRAINPLAN_CHECK(size_ > 0) << "front() of an empty event queue";
    if (binary_) {
      last_ = heap().front().time;
      return heap().front();
    }
    if (!has_due_at_last_time()) refill();
    return buckets_[0][head_];
  }
  Event pop() {
    const Event e = front();
    if (binary_) {
      std::pop_heap(heap().begin(), heap().end(), Later{});
      heap().pop_back();
      --size_;
      return e;
    }
    ++head_;
    --size_;
    if (head_ == buckets_[0].size()) {
      buckets_[0].clear();
      head_ = 0;
    }
    return e;
  }

 private:
  static constexpr std::size_t kBuckets = 65;  // bucket 0, then one per bit of a 64-bit key
  // A bucket larger than this (events) is freed, not kept: 1.5 MiB.
  static constexpr std::size_t kKeepEvents = std::size_t{1} << 16;

  struct Later {
    bool operator()(const Event& a, const Event& b) const {
      return a.time != b.time ? a.time > b.time : a.seq > b.seq;
    }
  };
  std::vector<Event>& heap() { return buckets_[kBuckets - 1]; }
  const std::vector<Event>& heap() const { return buckets_[kBuckets - 1]; }

  static std::array<std::vector<Event>, kBuckets>& spare() {
    thread_local std::array<std::vector<Event>, kBuckets> buckets;
    return buckets;
  }

  std::size_t bucket_of(TimeNs t) const {
    const auto diff = static_cast<std::uint64_t>(t) ^ static_cast<std::uint64_t>(last_);
    return diff == 0 ? 0 : static_cast<std::size_t>(64 - std::countl_zero(diff));
  }
  // Bucket 0 is empty: the lowest non-empty bucket holds the earliest time; make it the queue's
  // time and spread that bucket over the lower ones.
  void refill() {
    std::size_t b = 1;
    while (buckets_[b].empty()) ++b;
    std::vector<Event>& from = buckets_[b];
    last_ = std::min_element(from.begin(), from.end(), [](const Event& x, const Event& y) {
              return x.time < y.time;
            })->time;
    for (const Event& e : from) buckets_[bucket_of(e.time)].push_back(e);
    from.clear();
    std::sort(buckets_[0].begin(), buckets_[0].end(),
              [](const Event& x, const Event& y) { return x.seq < y.seq; });
  }

  std::array<std::vector<Event>, kBuckets> buckets_;
  std::size_t head_ = 0;  // bucket 0's events before head_ have been taken
  std::size_t size_ = 0;
  TimeNs last_ = 0;
  bool binary_ = false;
};

}  // namespace trainplan::sim
