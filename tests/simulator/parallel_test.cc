// Parallel per-rank passes and streamed traces (issue 24): parallel_for_index covers every item
// once and reports progress in order; simulating every rank on one thread and on many gives
// byte-identical reports, traces and pictures, also over more ranks than the trace formats at
// once, with the trace's sections in the serial writer's order; the ranks of a stage share one
// sequence of op
// metadata; a streamed trace is the in-memory one byte for byte; a trace estimated over the
// limit is refused with its size before the step is played.
#include "simulator/parallel.h"

#include <atomic>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/html_report.h"
#include "core/rank_layout.h"
#include "simulator/program.h"
#include "simulator/simulator.h"
#include "simulator/topology.h"
#include "tests/simulator/test_util.h"

namespace trainplan {
namespace {

TEST(ParallelForIndex, EveryItemOnceAndProgressCountsUp) {
  for (unsigned threads : {1u, 2u, 0u}) {
    std::vector<int> hits(1000, 0);
    std::vector<std::size_t> progress;
    parallel_for_index(
        hits.size(), threads, [&](std::size_t i) { ++hits[i]; },
        [&](std::size_t done) { progress.push_back(done); });
    for (int h : hits) EXPECT_EQ(h, 1);
    ASSERT_EQ(progress.size(), hits.size());
    for (std::size_t k = 0; k < progress.size(); ++k) EXPECT_EQ(progress[k], k + 1);
  }
  parallel_for_index(0, 0, [](std::size_t) { FAIL() << "no items"; });
}

TEST(ParallelForIndex, RethrowsAnItemsException) {
  EXPECT_THROW(parallel_for_index(8, 0,
                                  [](std::size_t i) {
                                    if (i == 5) throw std::runtime_error("item 5");
                                  }),
               std::runtime_error);
}

// An interleaved 2 x 2 x 2 plan with ZeRO-1 and sequence parallelism: every rank differs a
// little (stages, DP groups), and every stream is used.
struct Case {
  ModelSpec model = testing::gpt_model(8, 1024, 16);
  Plan plan = [] {
    Plan p = testing::make_plan(2, 2, 2, 1, 16, Schedule::kInterleaved, 2);
    p.zero_stage = 1;
    p.sequence_parallel = true;
    return p;
  }();
  ClusterSpec cluster = testing::cluster_for(plan, "H100-80GB", 4);
};

// 40 ranks (tp 2, pp 2, dp 10), more than the trace formats at once (16 slots): its batches,
// the arrow ids counted over slots and the joins between bodies are exercised.
Case wide_case() {
  Case c;
  c.plan = testing::make_plan(2, 2, 10, 1, 40, Schedule::k1F1B);
  c.plan.zero_stage = 1;
  c.cluster = testing::cluster_for(c.plan, "H100-80GB", 4);
  return c;
}

SimResult simulate(const Case& c, unsigned threads, bool stream, std::string* streamed = nullptr) {
  SimOptions o;
  o.all_ranks = true;
  o.collect_trace = true;
  o.collect_picture = true;
  o.threads = threads;
  if (stream) o.trace_sink = [streamed](std::string_view chunk) { streamed->append(chunk); };
  auto r = simulate_step(c.model, c.cluster, c.plan, o);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return *r;
}

TEST(AllRanks, OneThreadAndManyGiveByteIdenticalOutput) {
  const Case c;
  const SimResult serial = simulate(c, 1, false);
  const SimResult parallel = simulate(c, 0, false);
  EXPECT_EQ(serial.simulated_ranks, 8);
  EXPECT_EQ(step_report_to_json(serial.report).dump(), step_report_to_json(parallel.report).dump());
  EXPECT_EQ(serial.trace_json, parallel.trace_json);
  ASSERT_TRUE(serial.picture && parallel.picture);
  EXPECT_EQ(html::step_page(*serial.picture), html::step_page(*parallel.picture));
}

TEST(AllRanks, ManyRanksGiveByteIdenticalOutputOnOneTwoAndEveryThread) {
  const Case c = wide_case();
  const SimResult serial = simulate(c, 1, false);
  EXPECT_EQ(serial.simulated_ranks, 40);
  for (unsigned threads : {2u, 0u}) {
    const SimResult parallel = simulate(c, threads, false);
    EXPECT_EQ(step_report_to_json(serial.report).dump(),
              step_report_to_json(parallel.report).dump());
    EXPECT_EQ(serial.trace_json, parallel.trace_json) << threads << " threads";
    ASSERT_TRUE(serial.picture && parallel.picture);
    EXPECT_EQ(html::step_page(*serial.picture), html::step_page(*parallel.picture));
    std::string streamed;
    simulate(c, threads, true, &streamed);
    EXPECT_EQ(streamed, serial.trace_json) << threads << " threads, streamed";
  }
}

// The trace formatted per slot keeps the serial writer's order: the ranks' names, then every
// op's event rank by rank, then the arrows numbered 0, 1, ... in the senders' rank order, then
// the memory counters rank by rank; one JSON document.
TEST(Trace, SectionsKeepTheSerialOrderOverManyRanks) {
  const Case c = wide_case();
  const Json j = Json::parse(simulate(c, 0, false).trace_json);
  const std::string order = "MXsfC";  // section of each phase; s and f share one
  std::size_t section = 0;
  std::int64_t last_pid = -1, next_flow = 0, events = 0;
  for (const Json& e : j.at("traceEvents")) {
    const std::string ph = e.at("ph").get<std::string>();
    const std::size_t at = ph == "f" ? order.find('s') : order.find(ph);
    ASSERT_NE(at, std::string::npos) << ph;
    ASSERT_GE(at, section) << "a '" << ph << "' event after the next section began";
    if (at > section) last_pid = -1;
    section = at;
    const std::int64_t pid = e.at("pid").get<std::int64_t>();
    if (ph == "X" || ph == "C") {
      EXPECT_GE(pid, last_pid) << "ranks out of order in section " << ph;
      last_pid = pid;
    }
    if (ph == "s") {
      EXPECT_EQ(e.at("id").get<std::int64_t>(), next_flow++);
      EXPECT_GE(pid, last_pid);
      last_pid = pid;
    }
    ++events;
  }
  EXPECT_EQ(section, order.find('C'));
  EXPECT_GT(next_flow, 40);
  EXPECT_GT(events, 1000);
}

// The program of every rank keeps each distinct sequence of op metadata once: the 4 ranks of
// each of the 2 stages share their stage's, each slot's ops are contiguous and read their
// metadata through it, and an op record stays 48 bytes (GPT-3 on 512 ranks holds 28M of them).
TEST(AllRanks, RanksOfAStageShareOneMetadataSequence) {
  const Case c;
  static_assert(sizeof(sim::Op) == 48);
  SimOptions o;
  o.all_ranks = true;
  auto rates = plan_rates(c.plan, c.cluster.gpu, std::nullopt);
  ASSERT_TRUE(rates.ok());
  auto layout = RankLayout::make(c.plan, o.rank_order);
  ASSERT_TRUE(layout.ok());
  const sim::Topology topology(c.cluster);
  sim::Program program(topology.num_links());
  sim::build_program(c.model, c.cluster, c.plan, o, *rates, *layout, topology, program);
  ASSERT_EQ(program.slots.size(), 8u);
  ASSERT_EQ(program.meta_programs.size(), 2u);
  std::map<std::int64_t, std::int32_t> program_of_stage;
  std::int64_t ops = 0;
  for (std::size_t s = 0; s < program.slots.size(); ++s) {
    const sim::SlotInfo& si = program.slots[s];
    const std::int32_t shared = program_of_stage.emplace(si.coord.pp, si.meta_program).first->second;
    EXPECT_EQ(shared, si.meta_program) << "slot " << s;
    EXPECT_EQ(si.first_op, ops);
    const auto& meta = program.meta_programs[static_cast<std::size_t>(si.meta_program)];
    for (std::size_t k = 0; k < meta.size(); ++k) {
      const auto op = static_cast<std::int32_t>(ops + static_cast<std::int64_t>(k));
      EXPECT_EQ(program.slot_of(op), static_cast<std::int32_t>(s));
      EXPECT_EQ(&program.meta(op), &meta[k]);
    }
    ops += static_cast<std::int64_t>(meta.size());
  }
  EXPECT_EQ(ops, program.engine.num_ops());
  EXPECT_NE(program_of_stage.at(0), program_of_stage.at(1));
}

TEST(Trace, StreamedIsTheInMemoryDocumentByteForByte) {
  const Case c;
  const SimResult whole = simulate(c, 0, false);
  std::string streamed;
  const SimResult s = simulate(c, 0, true, &streamed);
  EXPECT_TRUE(s.trace_json.empty());
  EXPECT_FALSE(streamed.empty());
  EXPECT_EQ(streamed, whole.trace_json);
  // The size estimate from the operations alone (the memory samples add to it) is within a
  // factor of two of the real size.
  const double estimate = estimate_trace_bytes(whole.ops, 0);
  EXPECT_GT(estimate, 0.5 * static_cast<double>(whole.trace_json.size()));
  EXPECT_LT(estimate, 2.0 * static_cast<double>(whole.trace_json.size()));
}

TEST(Trace, FlowArrowsGoFromEachPipelineSendToTheNeighboursReceive) {
  const Case c;
  const Json j = Json::parse(simulate(c, 0, false).trace_json);
  std::map<std::int64_t, std::pair<std::int64_t, std::int64_t>> ends;  // id -> (from, to) pid
  std::map<std::int64_t, int> count;
  for (const Json& e : j.at("traceEvents")) {
    const std::string ph = e.at("ph").get<std::string>();
    if (ph != "s" && ph != "f") continue;
    const std::int64_t id = e.at("id").get<std::int64_t>();
    ++count[id];
    (ph == "s" ? ends[id].first : ends[id].second) = e.at("pid").get<std::int64_t>();
  }
  // 2 stages x 2 virtual stages, 8 micro-batches per replica: forward and backward sends.
  EXPECT_GE(count.size(), 16u);
  for (const auto& [id, n] : count) {
    EXPECT_EQ(n, 2) << "flow " << id;
    EXPECT_NE(ends[id].first, ends[id].second) << "flow " << id << " stays on one rank";
  }
}

TEST(Trace, OverTheLimitIsRefusedWithItsSize) {
  const Case c;
  SimOptions o;
  o.all_ranks = true;
  o.collect_trace = true;
  o.trace_limit_bytes = 1000;
  bool wrote = false;
  o.trace_sink = [&](std::string_view) { wrote = true; };
  auto r = simulate_step(c.model, c.cluster, c.plan, o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("the Chrome trace would be about"), std::string::npos);
  EXPECT_NE(r.status().message().find("--trace-limit-gb"), std::string::npos);
  EXPECT_FALSE(wrote);
}

}  // namespace
}  // namespace trainplan
