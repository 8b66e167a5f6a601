// The step trace (executor/trace.h) of a single-process trainer step on models/tiny.json: the
// Chrome JSON parses and has the simulator's layout, the compute track holds one span at a time,
// every cost-model compute task of a layer appears once per (pass, micro-batch, layer), the
// collectives' bytes equal the Comm's counters, the recorder is used for the asked step only,
// and the set of span names and tracks equals the simulator's trace of the same plan.
// Under mpirun, parallel_check.cc checks the bytes of traced collectives for every parallel
// layout and trace_tool_test.cc runs `execute --trace`.
// Run: ctest -R ExecutorTrace
#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "executor/comm.h"
#include "executor/data.h"
#include "executor/trace.h"
#include "executor/cpu/cpu_stage.h"
#include "core/cluster_spec.h"
#include "core/json_util.h"
#include "core/model_spec.h"
#include "simulator/simulator.h"

namespace trainplan::executor {
namespace {

ModelSpec tiny_model() {
  std::ifstream in(std::string(TRAINPLAN_SOURCE_DIR) + "/models/tiny.json");
  std::stringstream text;
  text << in.rdbuf();
  auto m = model_from_json(Json::parse(text.str()), "tiny.json");
  EXPECT_TRUE(m.ok()) << m.status().message();
  return *m;
}

Plan one_rank(AttentionImpl attention, Recompute recompute) {
  Plan p;
  p.micro_batch_size = 2;
  p.global_batch_size = 4;
  p.precision = Precision::kFp32;
  p.attention = attention;
  p.recompute = recompute;
  return p;
}

std::vector<std::string> split_tasks(const std::string& joined) {
  std::vector<std::string> out;
  std::stringstream in(joined);
  for (std::string t; std::getline(in, t, '+');) out.push_back(t);
  return out;
}

// Compute task names of a cost-model list, in order (collectives left out).
std::vector<std::string> compute_names(const std::vector<Task>& tasks) {
  std::vector<std::string> out;
  for (const Task& t : tasks)
    if (t.kind != TaskKind::kComm) out.emplace_back(t.name);
  return out;
}

struct TracedStep {
  ModelSpec model;
  Plan plan;
  TraceRecorder recorder;
  std::int64_t stage = 0;
  std::map<CommGroup, std::int64_t> step_bytes;  // the Comm's counters over the traced step
};

// Steps 1 and 3 untraced, step 2 traced.
void run(TracedStep& s) {
  auto comm = make_local_comm();
  auto t = make_cpu_trainer(s.model, s.plan, {}, *comm);
  ASSERT_TRUE(t.ok()) << t.status().message();
  const std::int64_t gbs = s.plan.global_batch_size;
  ASSERT_TRUE((*t)->step(random_batch(1, 0, gbs, s.model.seq_len, s.model.vocab_size)).ok());
  comm->reset_counters();
  ASSERT_TRUE((*t)->step(random_batch(1, 1, gbs, s.model.seq_len, s.model.vocab_size),
                         &s.recorder).ok());
  for (CommGroup g : {CommGroup::kTp, CommGroup::kPp, CommGroup::kDp, CommGroup::kEmbedding})
    s.step_bytes[g] = comm->counters(g).bytes_sent;
  const std::size_t recorded = s.recorder.events().size();
  ASSERT_TRUE((*t)->step(random_batch(1, 2, gbs, s.model.seq_len, s.model.vocab_size)).ok());
  EXPECT_EQ(s.recorder.events().size(), recorded) << "an untraced step recorded events";
  EXPECT_EQ(comm->trace(), nullptr) << "the recorder stayed installed after its step";
  s.stage = (*t)->stage();
}

class ExecutorTrace : public ::testing::TestWithParam<std::tuple<AttentionImpl, Recompute>> {};

TEST_P(ExecutorTrace, SingleRankStepOnTinyModel) {
  TracedStep s{tiny_model(), one_rank(std::get<0>(GetParam()), std::get<1>(GetParam())), {}, 0,
               {}};
  run(s);
  if (HasFatalFailure()) return;
  const std::vector<TraceEvent>& events = s.recorder.events();
  ASSERT_FALSE(events.empty());

  // The JSON: parses; metadata names the rank and the simulator's tracks; every complete event
  // has ph, ts, dur, pid, tid and the simulator's args.
  const Json doc =
      Json::parse(chrome_trace_json({chrome_trace_rank_events(0, s.stage, events)}));
  ASSERT_TRUE(doc.contains("traceEvents"));
  std::map<int, std::string> threads;
  std::string process;
  std::int64_t complete = 0;
  std::vector<std::pair<std::int64_t, std::int64_t>> compute;  // (begin, end) in ns
  for (const Json& e : doc["traceEvents"]) {
    ASSERT_TRUE(e.contains("ph") && e.contains("pid") && e.contains("name")) << e.dump();
    EXPECT_EQ(e["pid"], 0);
    if (e["ph"] == "M") {
      if (e["name"] == "process_name") process = e["args"]["name"];
      if (e["name"] == "thread_name") threads[e["tid"].get<int>()] = e["args"]["name"];
      continue;
    }
    ASSERT_EQ(e["ph"], "X") << e.dump();
    for (const char* key : {"ts", "dur", "tid", "args"}) ASSERT_TRUE(e.contains(key)) << e.dump();
    for (const char* key : {"micro_batch", "layer", "bytes_sent"})
      ASSERT_TRUE(e["args"].contains(key)) << e.dump();
    EXPECT_GE(e["ts"].get<double>(), 0.0);
    EXPECT_GE(e["dur"].get<double>(), 0.0);
    ++complete;
    if (e["tid"] == 0) {
      // ts and dur are printed with 3 decimals of a microsecond: whole nanoseconds.
      const auto b = std::llround(e["ts"].get<double>() * 1e3);
      compute.emplace_back(b, b + std::llround(e["dur"].get<double>() * 1e3));
    }
  }
  EXPECT_EQ(complete, static_cast<std::int64_t>(events.size()));
  EXPECT_EQ(process, "rank 0 (stage 0)");
  const std::map<int, std::string> want_threads = {{0, "compute"},      {1, "tp"},
                                                   {2, "pp send next"}, {3, "pp send prev"},
                                                   {4, "dp"},           {5, "ep"},
                                                   {6, "host"}};
  EXPECT_EQ(threads, want_threads);

  // One thread: the compute track never runs two spans at once.
  std::sort(compute.begin(), compute.end());
  for (std::size_t i = 1; i < compute.size(); ++i)
    EXPECT_LE(compute[i - 1].second, compute[i].first) << "compute spans " << i - 1 << " and " << i
                                                       << " overlap";

  // Each cost-model compute task of a layer, once per (pass, micro-batch, layer); the
  // embedding's and head's tasks (split around collectives) at least once per micro-batch.
  std::map<std::tuple<char, int, int>, std::vector<std::string>> by_key;
  for (const TraceEvent& e : events) {
    if (e.track != TraceTrack::kCompute) continue;
    for (const std::string& t : split_tasks(e.task))
      by_key[{e.context.pass, e.context.micro_batch, e.context.layer}].push_back(t);
  }
  auto sorted = [](std::vector<std::string> v) {
    std::sort(v.begin(), v.end());
    return v;
  };
  const auto fwd = sorted(compute_names(layer_forward_tasks(s.model, s.plan)));
  const auto bwd = sorted(compute_names(layer_backward_tasks(s.model, s.plan)));
  auto rec = sorted(compute_names(layer_recompute_tasks(s.model, s.plan)));
  if (s.plan.recompute == Recompute::kSelective && rec.empty())
    rec = {"attention"};  // a fused plan: the cost model's kernel recomputes inside its backward,
                          // the executor's kernel keeps no such trick and recomputes here
  auto edge_set = [&](std::vector<Task> a, const std::vector<Task>& b) {
    a.insert(a.end(), b.begin(), b.end());
    const auto n = compute_names(a);
    return std::set<std::string>(n.begin(), n.end());
  };
  const auto edge_fwd = edge_set(embedding_forward_tasks(s.model, s.plan),
                                 head_forward_tasks(s.model, s.plan));
  const auto edge_bwd = edge_set(embedding_backward_tasks(s.model, s.plan),
                                 head_backward_tasks(s.model, s.plan));
  const int M = static_cast<int>(s.plan.num_micro_batches());
  for (int mb = 0; mb < M; ++mb) {
    for (int layer = 0; layer < s.model.num_layers; ++layer) {
      EXPECT_EQ(sorted(by_key[{'F', mb, layer}]), fwd) << "mb " << mb << " layer " << layer;
      EXPECT_EQ(sorted(by_key[{'B', mb, layer}]), bwd) << "mb " << mb << " layer " << layer;
      EXPECT_EQ(sorted(by_key[{'R', mb, layer}]), rec) << "mb " << mb << " layer " << layer;
    }
    const auto& ef = by_key[{'F', mb, -1}];
    const auto& eb = by_key[{'B', mb, -1}];
    EXPECT_EQ(std::set<std::string>(ef.begin(), ef.end()), edge_fwd) << "mb " << mb;
    EXPECT_EQ(std::set<std::string>(eb.begin(), eb.end()), edge_bwd) << "mb " << mb;
  }
  const std::vector<std::string>& optimizer = by_key[{'O', -1, -1}];
  EXPECT_FALSE(optimizer.empty());
  for (const std::string& t : optimizer) EXPECT_EQ(t, "optimizer");

  // Bytes: per group, the traced collectives' bytes are the Comm's counters over the step (one
  // rank: every group has one member, nothing is sent and no collective is traced).
  std::map<CommGroup, std::int64_t> traced;
  for (const TraceEvent& e : events)
    if (e.group) traced[*e.group] += e.bytes_sent;
  for (auto [g, bytes] : s.step_bytes) EXPECT_EQ(traced[g], bytes) << to_string(g);
  for (const TraceEvent& e : events) EXPECT_FALSE(e.group) << e.task << ": a group of one";
}

INSTANTIATE_TEST_SUITE_P(
    Plans, ExecutorTrace,
    ::testing::Values(std::tuple{AttentionImpl::kFused, Recompute::kNone},
                      std::tuple{AttentionImpl::kUnfused, Recompute::kNone},
                      std::tuple{AttentionImpl::kUnfused, Recompute::kSelective},
                      std::tuple{AttentionImpl::kFused, Recompute::kSelective},
                      std::tuple{AttentionImpl::kFused, Recompute::kFull}),
    [](const auto& p) {
      return std::string(to_string(std::get<0>(p.param))) + "_recompute_" +
             std::string(to_string(std::get<1>(p.param)));
    });

// The executor's (track, name) pairs equal the simulator's for the same plan, once a span that
// covers several tasks ("attn_scores+softmax+attn_values") is read as those tasks.
TEST(ExecutorTraceLayout, SameNamesAndTracksAsTheSimulator) {
  for (AttentionImpl attention : {AttentionImpl::kFused, AttentionImpl::kUnfused}) {
    TracedStep s{tiny_model(), one_rank(attention, Recompute::kNone), {}, 0, {}};
    run(s);
    if (HasFatalFailure()) return;
    std::set<std::pair<int, std::string>> ours, theirs;
    for (const TraceEvent& e : s.recorder.events()) {
      for (const std::string& t : split_tasks(e.task)) {
        TraceEvent one = e;
        one.task = t;
        ours.emplace(static_cast<int>(e.track), trace_event_name(one));
      }
    }
    auto cluster = make_cluster("H100-80GB", 1, 8);
    ASSERT_TRUE(cluster.ok()) << cluster.status().message();
    SimOptions opt;
    opt.collect_trace = true;
    auto sim = simulate_step(s.model, *cluster, s.plan, opt);
    ASSERT_TRUE(sim.ok()) << sim.status().message();
    const Json doc = Json::parse(sim->trace_json);
    for (const Json& e : doc["traceEvents"])
      if (e["ph"] == "X") theirs.emplace(e["tid"].get<int>(), e["name"].get<std::string>());
    EXPECT_EQ(ours, theirs) << (attention == AttentionImpl::kFused ? "fused" : "unfused");
  }
}

// Names as simulator/timeline.cc builds them, tracks as its streams, and the JSON shape.
TEST(ExecutorTraceFormat, NamesTracksAndJson) {
  TraceRecorder r;
  const auto t0 = TraceRecorder::Clock::now();
  r.start_step(t0);
  {
    TraceScope f(&r, {.pass = 'F', .micro_batch = 0, .layer = 3});
    r.record("qkv", TraceTrack::kCompute, t0 + std::chrono::nanoseconds(1500),
             t0 + std::chrono::nanoseconds(4000));
  }
  {
    TraceScope m(&r, {.micro_batch = 2});
    r.record("send_forward", comm_track(CommGroup::kPp, Collective::kSendRecv, "send_forward"), t0,
             t0, 4096, CommGroup::kPp);
  }
  {
    TraceScope d(&r, {.layer = 3});
    r.record("dp_grad_all_reduce", comm_track(CommGroup::kDp, Collective::kAllReduce, ""), t0, t0);
  }
  {
    TraceScope o(&r, {.pass = 'O'});
    r.record("optimizer", TraceTrack::kCompute, t0, t0);
  }
  ASSERT_EQ(r.events().size(), 4u);
  EXPECT_EQ(trace_event_name(r.events()[0]), "F mb0 L3 qkv");
  EXPECT_EQ(trace_event_name(r.events()[1]), "mb2 send_forward");
  EXPECT_EQ(trace_event_name(r.events()[2]), " L3 dp_grad_all_reduce");
  EXPECT_EQ(trace_event_name(r.events()[3]), "O optimizer");
  EXPECT_EQ(r.context().pass, ' ');  // scopes restore the context
  EXPECT_EQ(r.context().layer, -1);

  EXPECT_EQ(comm_track(CommGroup::kTp, Collective::kAllReduce, ""), TraceTrack::kTp);
  EXPECT_EQ(comm_track(CommGroup::kEmbedding, Collective::kAllReduce, ""), TraceTrack::kDp);
  EXPECT_EQ(comm_track(CommGroup::kPp, Collective::kSendRecv, "send_backward"),
            TraceTrack::kPpSendPrev);
  EXPECT_EQ(comm_track(CommGroup::kPp, Collective::kSendRecv, "recv_forward"),
            TraceTrack::kCompute);

  const std::string two = chrome_trace_json(
      {chrome_trace_rank_events(0, 0, {r.events()[0]}), chrome_trace_rank_events(1, 1, {})});
  const Json j = Json::parse(two);
  const Json& first = j["traceEvents"][0];
  EXPECT_EQ(first["args"]["name"], "rank 0 (stage 0)");
  std::set<int> pids;
  for (const Json& e : j["traceEvents"]) pids.insert(e["pid"].get<int>());
  EXPECT_EQ(pids, (std::set<int>{0, 1}));
  EXPECT_NE(two.find("\"name\":\"F mb0 L3 qkv\",\"ph\":\"X\",\"pid\":0,\"tid\":0,\"ts\":1.500,"
                     "\"dur\":2.500,\"args\":{\"micro_batch\":0,\"layer\":3,\"bytes_sent\":0}"),
            std::string::npos)
      << two;
}

// Without a recorder the span and scope helpers do nothing.
TEST(ExecutorTraceFormat, NullRecorderIsANoOp) {
  TraceScope scope(nullptr, {.pass = 'F'});
  TraceSpan span(nullptr);
  span.begin("qkv");
  span.end();
  auto comm = make_local_comm();
  EXPECT_EQ(comm->trace(), nullptr);
  float x = 1;
  comm->all_reduce(CommGroup::kTp, &x, 1, ReduceOp::kSum, "tp_all_reduce_attn");
  EXPECT_EQ(x, 1.0f);
}

}  // namespace
}  // namespace trainplan::executor
