// The event loop's radix heap (simulator/engine_queue.h) against a binary heap ordered by
// (time, sequence), the order it replaced: the same pushes must give the same pops.
#include "simulator/engine_queue.h"

#include <gtest/gtest.h>

#include <queue>
#include <random>
#include <vector>

namespace trainplan::sim {
namespace {

struct Later {
  bool operator()(const Event& a, const Event& b) const {
    return a.time != b.time ? a.time > b.time : a.seq > b.seq;
  }
};

// Pushes at or after the last time taken, with many ties (small gaps, a few far events) and
// times that cross high bits, popping in between; every pop is checked against the reference.
class EngineQueueKinds : public ::testing::TestWithParam<bool> {};

TEST_P(EngineQueueKinds, PopsInTheBinaryHeapsOrderOnARandomMonotoneWorkload) {
  std::mt19937_64 rng(24);
  EventQueue queue;
  queue.use_binary_heap(GetParam());
  std::priority_queue<Event, std::vector<Event>, Later> reference;
  std::uint64_t seq = 0;
  TimeNs now = 0;
  std::int64_t pops = 0;
  for (int round = 0; round < 200000; ++round) {
    const int pushes = static_cast<int>(rng() % 3);
    for (int k = 0; k < pushes; ++k) {
      const std::uint64_t kind = rng() % 10;
      const TimeNs gap = kind < 3   ? 0
                         : kind < 8 ? static_cast<TimeNs>(rng() % 16)
                         : kind < 9 ? static_cast<TimeNs>(rng() % 100000)
                                    : static_cast<TimeNs>(rng() % (TimeNs{1} << 40));
      const Event e{now + gap, seq++, static_cast<std::int32_t>(rng() % 1000), 0};
      queue.push(e);
      reference.push(e);
    }
    if (reference.empty() || rng() % 2 == 0) continue;
    const Event want = reference.top();
    reference.pop();
    ASSERT_FALSE(queue.empty());
    const Event got = queue.pop();
    ASSERT_EQ(got.time, want.time) << "pop " << pops;
    ASSERT_EQ(got.seq, want.seq) << "pop " << pops;
    ASSERT_EQ(got.id, want.id);
    ASSERT_EQ(queue.last_time(), got.time);
    now = got.time;
    ++pops;
  }
  while (!reference.empty()) {
    ASSERT_EQ(queue.pop().seq, reference.top().seq);
    reference.pop();
  }
  EXPECT_TRUE(queue.empty());
  EXPECT_GT(pops, 50000);
}

// Ties at the queue's time keep push order, also those pushed after the time was reached.
TEST_P(EngineQueueKinds, EventsAtOneTimeLeaveInPushOrder) {
  EventQueue queue;
  queue.use_binary_heap(GetParam());
  queue.push({50, 0, 0, 0});
  queue.push({7, 1, 1, 0});
  queue.push({50, 2, 2, 0});
  queue.push({7, 3, 3, 0});
  EXPECT_FALSE(queue.has_due_at_last_time());
  EXPECT_EQ(queue.pop().id, 1);
  EXPECT_TRUE(queue.has_due_at_last_time());
  queue.push({7, 4, 4, 0});
  EXPECT_EQ(queue.pop().id, 3);
  EXPECT_EQ(queue.pop().id, 4);
  EXPECT_FALSE(queue.has_due_at_last_time());
  EXPECT_EQ(queue.pop().id, 0);
  EXPECT_EQ(queue.pop().id, 2);
  EXPECT_TRUE(queue.empty());
}

INSTANTIATE_TEST_SUITE_P(RadixAndBinary, EngineQueueKinds, ::testing::Values(false, true));

// A queue made after another was dropped on the thread starts empty at time 0: only the
// storage is reused.
TEST(EngineQueue, AQueueAfterAnotherStartsEmptyAtTimeZero) {
  {
    EventQueue first;
    for (std::uint64_t i = 0; i < 1000; ++i)
      first.push({static_cast<TimeNs>(1000 + i * 7919 % 997), i, 0, 0});
    first.pop();
  }
  EventQueue second;
  EXPECT_TRUE(second.empty());
  EXPECT_EQ(second.last_time(), 0);
  EXPECT_FALSE(second.has_due_at_last_time());
  second.push({5, 0, 9, 0});
  EXPECT_EQ(second.pop().id, 9);
  EXPECT_TRUE(second.empty());
}

// Going back in time is a bug in the engine: the queue stops with the two times.
TEST(EngineQueueDeathTest, APushBeforeTheLastTimeTakenIsABrokenInvariant) {
  EventQueue queue;
  queue.push({100, 0, 0, 0});
  queue.pop();
  EXPECT_DEATH(queue.push({99, 1, 1, 0}), "event at 99 ns pushed after one at 100 ns");
}

TEST(EngineQueueDeathTest, TheKindIsChosenOnlyWhileEmpty) {
  EventQueue queue;
  queue.push({1, 0, 0, 0});
  EXPECT_DEATH(queue.use_binary_heap(true), "chosen while it is empty");
}

TEST(EngineQueueDeathTest, FrontOfAnEmptyQueueIsABrokenInvariant) {
  EventQueue queue;
  EXPECT_DEATH(queue.front(), "front\\(\\) of an empty event queue");
}

}  // namespace
}  // namespace trainplan::sim
