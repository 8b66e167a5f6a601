// The parallel program build (simulator/program.cc, build_in_parallel): every rank's program built
// alone on 2 and 4 threads (1 thread: the serial build) and merged gives the serial build's program op for op (durations,
// streams, stream order, collectives, dependencies, memory events, metadata), and so the same
// report, Chrome trace and event count, on every schedule and parallelism the builder has a
// path for (1F1B, interleaved, zb-v, dualpipe with and without its F&B pairs, ZeRO-3 with
// offload, expert parallelism with and without the merged pairs, context parallelism, TP
// overlap, offloaded checkpoints), every rank simulated and one per stage.
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "core/cost/compute_model.h"
#include "core/rank_layout.h"
#include "core/step_report.h"
#include "simulator/program.h"
#include "simulator/simulator.h"
#include "simulator/topology.h"
#include "tests/simulator/test_util.h"

namespace trainplan {
namespace {

// The serial build: no program is this large.
constexpr std::int64_t kSerial = std::int64_t{1} << 40;

struct BuildCase {
  std::string name;
  ModelSpec model;
  Plan plan;
};

std::vector<BuildCase> build_cases() {
  const ModelSpec gpt = testing::gpt_model(8, 1024, 16, 1024, 50257);
  std::vector<BuildCase> out;
  Plan p1 = testing::make_plan(2, 2, 2, 1, 8);
  p1.zero_stage = 1;
  out.push_back({"1f1b zero1", gpt, p1});
  Plan il = testing::make_plan(2, 2, 2, 1, 8, Schedule::kInterleaved, 2);
  il.sequence_parallel = true;
  out.push_back({"interleaved sp", gpt, il});
  out.push_back({"zb-v", gpt, testing::make_plan(1, 4, 2, 1, 16, Schedule::kZbV, 2)});
  Plan dual = testing::make_plan(2, 4, 2, 1, 16, Schedule::kDualPipe, 2);
  dual.zero_stage = 1;
  out.push_back({"dualpipe", gpt, dual});
  Plan dual_ep = testing::make_plan(1, 4, 2, 1, 16, Schedule::kDualPipe, 2);
  dual_ep.ep = 2;
  out.push_back({"dualpipe ep, F&B pairs", testing::moe_model(), dual_ep});
  Plan z3 = testing::make_plan(1, 2, 4, 1, 8);
  z3.zero_stage = 3;
  z3.recompute = Recompute::kFull;
  z3.offload = Offload::kOptimizerParams;
  out.push_back({"zero3 offload", gpt, z3});
  Plan fsdp2 = testing::make_plan(1, 2, 4, 1, 8, Schedule::kInterleaved, 2);
  fsdp2.zero_stage = 3;
  fsdp2.recompute = Recompute::kFull;
  fsdp2.zero3_recompute_gather = ZeroRecomputeGather::kKept;
  fsdp2.zero3_backward_prefetch = ZeroBackwardPrefetch::kBeforeReduce;
  out.push_back({"zero3, FSDP2's backward prefetch", gpt, fsdp2});
  fsdp2.zero3_copies = ZeroCopies::kPerParam;
  out.push_back({"zero3, FSDP2's prefetch and copies", gpt, fsdp2});
  Plan fsdp1 = testing::make_plan(1, 1, 8, 1, 8);
  fsdp1.zero_stage = 3;
  fsdp1.zero3_backward_prefetch = ZeroBackwardPrefetch::kBeforeReduce;
  fsdp1.zero3_copies = ZeroCopies::kFlatParam;
  out.push_back({"zero3, FSDP1's copies", gpt, fsdp1});
  Plan ep = testing::make_plan(1, 2, 4, 1, 16, Schedule::kInterleaved, 2);
  ep.ep = 4;
  ep.ep_overlap = true;
  out.push_back({"ep overlap", testing::deepseek_like_model(), ep});
  Plan cp = testing::make_plan(2, 2, 2, 1, 8);
  cp.cp = 2;
  out.push_back({"cp", gpt, cp});
  Plan tpo = testing::make_plan(4, 2, 2, 1, 8);
  tpo.sequence_parallel = true;
  tpo.recompute = Recompute::kFull;
  tpo.tp_comm_overlap = true;
  tpo.offload_checkpoints = true;
  out.push_back({"tp overlap, offloaded checkpoints", gpt, tpo});
  return out;
}

SimOptions options(bool all_ranks, unsigned threads, std::int64_t min_slots) {
  SimOptions o;
  o.all_ranks = all_ranks;
  o.threads = threads;
  o.parallel_build_min_slots = min_slots;
  return o;
}

// The program of `c` as build_program leaves it (not played).
void build(const BuildCase& c, const SimOptions& o, sim::Program& program) {
  const ClusterSpec cluster = testing::cluster_for(c.plan, "H100-80GB", 4);
  auto rates = plan_rates(c.plan, cluster.gpu, std::nullopt);
  ASSERT_TRUE(rates.ok()) << rates.status().message();
  auto layout = RankLayout::make(c.plan, o.rank_order);
  ASSERT_TRUE(layout.ok()) << layout.status().message();
  const sim::Topology topology(cluster);
  sim::build_program(c.model, cluster, c.plan, o, *rates, *layout, topology, program);
}

void expect_same_program(const sim::Program& a, const sim::Program& b, const std::string& what) {
  ASSERT_EQ(a.engine.num_ops(), b.engine.num_ops()) << what;
  for (std::int32_t i = 0; i < a.engine.num_ops(); ++i) {
    const sim::Op& x = a.engine.op(i);
    const sim::Op& y = b.engine.op(i);
    ASSERT_EQ(std::tie(x.duration, x.stream, x.collective, x.next_in_stream),
              std::tie(y.duration, y.stream, y.collective, y.next_in_stream))
        << what << ", op " << i;
    ASSERT_EQ(a.meta(i), b.meta(i)) << what << ", op " << i;
  }
  ASSERT_EQ(a.slots.size(), b.slots.size()) << what;
  for (std::size_t s = 0; s < a.slots.size(); ++s) {
    EXPECT_EQ(a.slots[s].first_op, b.slots[s].first_op) << what << ", slot " << s;
    ASSERT_EQ(a.slots[s].mem.size(), b.slots[s].mem.size()) << what << ", slot " << s;
    for (std::size_t k = 0; k < a.slots[s].mem.size(); ++k) {
      const sim::MemEvent& x = a.slots[s].mem[k];
      const sim::MemEvent& y = b.slots[s].mem[k];
      EXPECT_TRUE(x.op == y.op && x.at_end == y.at_end && x.kind == y.kind && x.bytes == y.bytes)
          << what << ", slot " << s << ", memory event " << k;
    }
  }
  EXPECT_EQ(a.meta_programs.size(), b.meta_programs.size()) << what;
}

TEST(ProgramBuild, ParallelBuildIsTheSerialProgramOpForOp) {
  for (const BuildCase& c : build_cases()) {
    for (bool all : {true, false}) {
      const std::string what = c.name + (all ? ", all ranks" : ", one rank per stage");
      sim::Program serial(0);  // not played: no link state needed
      build(c, options(all, 1, kSerial), serial);
      for (unsigned threads : {2u, 4u}) {
        sim::Program parallel(0);
        build(c, options(all, threads, 1), parallel);
        expect_same_program(serial, parallel, what + ", " + std::to_string(threads) + " threads");
      }
    }
  }
}

TEST(ProgramBuild, ParallelBuildGivesTheSerialReportTraceAndEvents) {
  for (const BuildCase& c : build_cases()) {
    const ClusterSpec cluster = testing::cluster_for(c.plan, "H100-80GB", 4);
    for (bool all : {true, false}) {
      const std::string what = c.name + (all ? ", all ranks" : ", one rank per stage");
      SimOptions o = options(all, 1, kSerial);
      o.collect_trace = true;
      const SimResult serial = testing::simulate_ok(c.model, cluster, c.plan, o);
      ASSERT_GT(serial.events, 0) << what;
      for (unsigned threads : {2u, 4u}) {
        o.threads = threads;
        o.parallel_build_min_slots = 1;
        const SimResult parallel = testing::simulate_ok(c.model, cluster, c.plan, o);
        EXPECT_EQ(step_report_to_json(serial.report).dump(),
                  step_report_to_json(parallel.report).dump())
            << what << ", " << threads << " threads";
        EXPECT_EQ(serial.trace_json, parallel.trace_json) << what << ", " << threads << " threads";
        EXPECT_EQ(serial.events, parallel.events) << what << ", " << threads << " threads";
      }
    }
  }
}

// More ranks than one batch of the parallel build (16): the batches' merges chain the ids.
TEST(ProgramBuild, ManyRanksOverSeveralBatches) {
  BuildCase c{"tp2 pp2 dp10", testing::gpt_model(8, 1024, 16, 1024, 50257),
              testing::make_plan(2, 2, 10, 1, 40, Schedule::kInterleaved, 2)};
  c.plan.zero_stage = 1;
  sim::Program serial(0);
  build(c, options(true, 1, kSerial), serial);
  ASSERT_EQ(serial.slots.size(), 40u);
  for (unsigned threads : {2u, 4u}) {
    sim::Program parallel(0);
    build(c, options(true, threads, 1), parallel);
    expect_same_program(serial, parallel, std::to_string(threads) + " threads");
  }
}

}  // namespace
}  // namespace trainplan
