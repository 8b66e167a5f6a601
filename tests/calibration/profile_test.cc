// /proc parsers, the profile and cluster JSON written by calibrate (they must load back with
// the loaders the simulator uses), and the executor probe: every compute task of a step timed,
// spans mapped to the cost model's tasks.
#include "calibration/profile.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include <unistd.h>

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "calibration/executor_probe.h"
#include "core/cost/step_tasks.h"
#include "executor/comm.h"

#include "core/cluster_spec.h"
#include "core/units.h"

namespace trainplan::calibration {
namespace {

TEST(ProcParsers, StatusCpuinfoMeminfo) {
  const ProcessMemory m = parse_proc_status(
      "Name:\tcalibrate\nVmPeak:\t  300000 kB\nVmHWM:\t    9000 kB\nVmRSS:\t    8000 kB\n");
  EXPECT_DOUBLE_EQ(m.rss_bytes, 8000 * kKiB);
  EXPECT_DOUBLE_EQ(m.hwm_bytes, 9000 * kKiB);
  EXPECT_EQ(parse_proc_status("nothing").rss_bytes, 0);
  EXPECT_EQ(parse_cpu_model("processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Processor\nflags: x\n"),
            "Intel(R) Xeon(R) Processor");
  EXPECT_DOUBLE_EQ(parse_mem_total_bytes("MemTotal:       24000000 kB\nMemFree: 1 kB\n"),
                   24000000 * kKiB);
}

ModelSpec small_model() {
  ModelSpec model;
  model.name = "t";
  model.num_layers = 2;
  model.hidden_size = 32;
  model.num_attention_heads = 2;
  model.num_kv_heads = 2;
  model.head_dim = 16;
  model.ffn_hidden_size = 128;
  model.vocab_size = 64;
  model.seq_len = 16;
  model.max_position_embeddings = 16;
  model.dropout = false;
  return model;
}

Plan one_rank_plan(std::int64_t micro_batch) {
  Plan p;
  p.micro_batch_size = micro_batch;
  p.global_batch_size = 2 * micro_batch;
  p.precision = Precision::kFp32;
  p.attention = AttentionImpl::kUnfused;
  return p;
}

Measurements tiny_measurements() {
  Measurements m;
  TimingOptions fast;
  fast.min_time_s = 0.001;
  for (GemmDirection d : {GemmDirection::kForward, GemmDirection::kInputGradient,
                          GemmDirection::kWeightGradient})
    for (const GemmShape& g : gemm_sweep_shapes({8, 32, 64}))
      m.tasks.push_back(time_gemm(g, fast, d));
  for (std::int64_t b : {1, 2}) {
    auto comm = executor::make_local_comm();
    auto samples = time_executor_tasks(small_model(), one_rank_plan(b), *comm, 1, 2);
    EXPECT_TRUE(samples.ok()) << samples.status().message();
    if (samples.ok()) m.tasks.insert(m.tasks.end(), samples->tasks.begin(), samples->tasks.end());
  }
  m.stream = time_stream(64 * kKiB, fast);
  for (std::int64_t bytes : {1024, 65536, 1 << 20}) {
    CollectiveSample s;
    s.collective = Collective::kAllReduce;
    s.group_size = 2;
    s.bytes = bytes;
    s.count = bytes / 4;
    s.time_s = 2e-6 + bytes / 5e9;
    m.collectives.push_back(s);
  }
  m.baseline = {20 * kMiB, 24 * kMiB};
  return m;
}

TEST(Profile, WritesJsonThatTheLoadersAccept) {
  const Measurements m = tiny_measurements();
  for (const TaskSample& s : m.tasks) EXPECT_GT(s.time_s, 0) << s.name;
  MachineIdentity id{"Test CPU", 2, 1, "2025-01-01T00:00:00Z"};
  auto cal = calibrate_from(m, id);
  ASSERT_TRUE(cal.ok()) << cal.status().message();
  const Json j = profile_json(*cal, m);
  ASSERT_TRUE(j.contains("measurements"));
  EXPECT_EQ(j["measurements"]["collectives"][0]["type"], "float");
  EXPECT_EQ(j["measurements"]["tasks"].size(), m.tasks.size());
  auto back = hardware_profile_from_json(j, "profile.json");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->device, "cpu: Test CPU (1 thread/rank, 2 ranks)");
  EXPECT_TRUE(back->has_links);
  EXPECT_NEAR(back->baseline_memory_bytes, 24 * kMiB, 1.0);
  EXPECT_NEAR(back->rates.peak_flops_per_s, cal->profile.rates.peak_flops_per_s,
              1e-9 * cal->profile.rates.peak_flops_per_s);
  // The alpha-beta data above are exact: the link fit returns them.
  EXPECT_NEAR(back->intra_node_bytes_per_s, 5e9, 5e9 * 1e-9);
  EXPECT_NEAR(back->intra_node_latency_s, 1e-6, 1e-6 * 1e-6);  // 2 us per all-reduce = 2 steps

  auto cluster = cluster_from_json(cpu_cluster_json(*cal, 2, 8 * kGiB), "cpu_cluster.json");
  ASSERT_TRUE(cluster.ok()) << cluster.status().message();
  EXPECT_EQ(cluster->gpus_per_node, 2);
  EXPECT_EQ(cluster->gpu.sm_count, 1);
  EXPECT_NEAR(cluster->intra_node_bytes_per_s, 5e9, 5e9 * 1e-6);
  // The offload tiers on CPU ranks: copies at the elementwise rate, the host AdamW at the
  // optimizer kernel's, per rank times the ranks; capacity the ranks'.
  const DeviceRates& fitted = cal->profile.rates;
  EXPECT_NEAR(cluster->pcie_bytes_per_s,
              fitted.hbm_bytes_per_s * memory_efficiency_of(fitted, MemoryKernel::kElementwise),
              1e-6 * cluster->pcie_bytes_per_s);
  EXPECT_NEAR(cluster->host_memory_bytes_per_s_per_node,
              2 * fitted.hbm_bytes_per_s * memory_efficiency_of(fitted, MemoryKernel::kOptimizer),
              1e-6 * cluster->host_memory_bytes_per_s_per_node);
  EXPECT_NEAR(cluster->host_memory_bytes_per_node, 2 * 8 * kGiB, 1e3);
  EXPECT_FALSE(format_fit_summary(*cal).empty());
  EXPECT_NE(format_task_table(m.tasks, cal->profile.rates).find("fc1_wgrad"), std::string::npos);
  // The backward products were timed (sweep and probe): the profile has their efficiencies,
  // and the tables name each sweep's direction.
  EXPECT_GT(back->rates.gemm_input_gradient_efficiency, 0);
  EXPECT_GT(back->rates.gemm_weight_gradient_efficiency, 0);
  EXPECT_LE(back->rates.gemm_weight_gradient_efficiency, 1.0);
  EXPECT_TRUE(j.contains("gemm_weight_gradient_efficiency"));
  EXPECT_NE(format_task_table(m.tasks, cal->profile.rates).find("64x64x64 weight_gradient"),
            std::string::npos);
  EXPECT_NE(format_fit_summary(*cal).find("gemm efficiency by direction"), std::string::npos);
  EXPECT_NE(format_collective_table(m.collectives).find("busbw"), std::string::npos);
  // The probes' own task times ride along (not the sweep's): a plan's fc1 at the micro-batch 1
  // probe's shape takes that probe's measured time, where the fit alone gives its roofline.
  ASSERT_TRUE(j.contains("measured_tasks"));
  ASSERT_TRUE(back->rates.measured_tasks);
  for (const MeasuredTaskTime& t : *back->rates.measured_tasks) EXPECT_NE(t.name, "sweep");
  const std::vector<Task> layer = layer_forward_tasks(small_model(), one_rank_plan(1));
  const auto fc1 =
      std::find_if(layer.begin(), layer.end(), [](const Task& t) { return t.name == "fc1"; });
  ASSERT_NE(fc1, layer.end());
  const auto probed = std::find_if(m.tasks.begin(), m.tasks.end(), [&](const TaskSample& s) {
    return s.name == "fc1" && s.tasks.size() == 1 && same_task(measured_task(s.tasks[0], 0), *fc1);
  });
  ASSERT_NE(probed, m.tasks.end());
  EXPECT_NEAR(task_time_s(*fc1, back->rates), probed->time_s, 1e-9 * probed->time_s);
  EXPECT_DOUBLE_EQ(task_time_s(*fc1, cal->compute.rates),
                   sample_time_s(*probed, cal->compute.rates));
}

// Each sweep direction times its own product of the executor (the output m x n, reduction k)
// and names it so that gemm_direction reads it back.
TEST(Profile, GemmSweepTimesEachDirection) {
  TimingOptions fast;
  fast.min_time_s = 0.001;
  const GemmShape shape{48, 24, 40};
  for (GemmDirection d : {GemmDirection::kForward, GemmDirection::kInputGradient,
                          GemmDirection::kWeightGradient}) {
    const TaskSample s = time_gemm(shape, fast, d);
    ASSERT_EQ(s.tasks.size(), 1u);
    EXPECT_EQ(gemm_direction(s.tasks[0]), d) << s.name;
    EXPECT_EQ(s.probe, "sweep");
    EXPECT_EQ(s.tasks[0].m, 48);
    EXPECT_EQ(s.tasks[0].k, 40);
    EXPECT_DOUBLE_EQ(s.flops(), 2.0 * 48 * 24 * 40);
    EXPECT_GT(s.time_s, 0) << s.name;
    EXPECT_GE(s.calls, fast.min_calls) << s.name;
  }
}

TEST(Profile, AGpuMachineIsNamedAsOneAndItsClusterCarriesTheGpusName) {
  const Measurements m = tiny_measurements();
  MachineIdentity id{"NVIDIA H100 80GB HBM3", 1, 1, "2026-11-22T00:00:00Z", "gpu"};
  auto cal = calibrate_from(m, id);
  ASSERT_TRUE(cal.ok()) << cal.status().message();
  EXPECT_EQ(cal->profile.device, "gpu: NVIDIA H100 80GB HBM3 (1 rank)");
  const Json cluster = cpu_cluster_json(*cal, 1, 80 * kGiB, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(cluster["gpu"]["name"], "NVIDIA H100 80GB HBM3");
  EXPECT_NE(cluster["notes"].get<std::string>().find("calibrate --backend cuda"),
            std::string::npos);
  auto back = cluster_from_json(cluster, "gpu_cluster.json");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->gpus_per_node, 1);
}

TEST(Profile, TheRankSkewBecomesTheProfilesComputeSpread) {
  Measurements m = tiny_measurements();
  // Three steps of two ranks: the slowest rank's excess over the mean is 5%, 9% and 6% of the
  // mean compute between waits; the median is 6%, and E[max of 2] = 1/sqrt(pi).
  m.skew = {{"p", 2, 100e-6, 5e-6}, {"p", 2, 100e-6, 9e-6}, {"p", 2, 100e-6, 6e-6}};
  auto cal = calibrate_from(m, {"Test CPU", 2, 1, "2025-01-01T00:00:00Z"});
  ASSERT_TRUE(cal.ok()) << cal.status().message();
  EXPECT_NEAR(cal->profile.rank_compute_spread, 0.06 * std::sqrt(std::numbers::pi), 1e-12);
  const Json j = profile_json(*cal, m);
  EXPECT_EQ(j["measurements"]["rank_skew"].size(), 3u);
  EXPECT_NEAR(j["measurements"]["rank_skew"][1]["slowest_excess_us"].get<double>(), 9.0, 1e-9);
  auto back = hardware_profile_from_json(j, "profile.json");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_NEAR(back->rank_compute_spread, cal->profile.rank_compute_spread, 1e-12);
  EXPECT_NE(format_fit_summary(*cal).find("rank compute spread 10.6%"), std::string::npos)
      << format_fit_summary(*cal);
  // Out of range in a profile file: the error names the key and the value.
  Json bad = j;
  bad["rank_compute_spread"] = -0.1;
  auto err = hardware_profile_from_json(bad, "profile.json");
  ASSERT_FALSE(err.ok());
  EXPECT_NE(err.status().message().find("rank_compute_spread"), std::string::npos)
      << err.status().message();
  EXPECT_NE(err.status().message().find("-0.1"), std::string::npos) << err.status().message();
}

// Ranks sharing their cores with other processes can measure a spread above the profile's
// bound of 1 (111% at load 14 on 2 cores): it is held at 1, the profile loads back, and the
// summary says what was measured.
TEST(Profile, ASpreadAboveOneIsHeldAtOneAndReported) {
  Measurements m = tiny_measurements();
  m.skew = {{"p", 2, 100e-6, 90e-6}, {"p", 2, 100e-6, 80e-6}, {"p", 2, 100e-6, 70e-6}};
  auto cal = calibrate_from(m, {"Test CPU", 2, 1, "2025-01-01T00:00:00Z"});
  ASSERT_TRUE(cal.ok()) << cal.status().message();
  EXPECT_NEAR(cal->measured_rank_compute_spread, 0.8 * std::sqrt(std::numbers::pi), 1e-12);
  EXPECT_EQ(cal->profile.rank_compute_spread, 1.0);
  auto back = hardware_profile_from_json(profile_json(*cal, m), "profile.json");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->rank_compute_spread, 1.0);
  EXPECT_NE(format_fit_summary(*cal).find("spread measured 141.8%, held at 100%"),
            std::string::npos)
      << format_fit_summary(*cal);
}

TEST(Profile, OneRankHasNoLinks) {
  Measurements m = tiny_measurements();
  m.collectives.clear();
  auto cal = calibrate_from(m, {"Test CPU", 1, 1, "2025-01-01T00:00:00Z"});
  ASSERT_TRUE(cal.ok());
  auto back = hardware_profile_from_json(profile_json(*cal, m), "p");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_FALSE(back->has_links);
}

// Every compute task of a layer's forward and backward, the embedding, the head and the
// optimizer is timed in the executor's step, alone or inside a composite span.
// The NVMe tier's file I/O through the executor's own file (executor/offload.h): both
// directions timed, the file removed; a directory that does not exist is an error naming it.
TEST(Kernels, OffloadFileIoIsTimedThroughTheExecutorsFile) {
  std::string name = "trainplan-fileio-";
  name += std::to_string(::getpid());
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / name;
  std::filesystem::create_directories(dir);
  TimingOptions fast;
  fast.min_time_s = 0.001;
  auto io = time_offload_file(dir.string(), 0, 1 << 20, fast);
  ASSERT_TRUE(io.ok()) << io.status().message();
  EXPECT_EQ(io->bytes, 1 << 20);
  EXPECT_GT(io->write_s, 0);
  EXPECT_GT(io->read_s, 0);
  EXPECT_NEAR(io->bytes_per_s(), 2.0 * io->bytes / (io->write_s + io->read_s),
              1e-9 * io->bytes_per_s());
  EXPECT_TRUE(std::filesystem::is_empty(dir));
  auto missing = time_offload_file((dir / "missing").string(), 0, 1 << 20, fast);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("missing"), std::string::npos)
      << missing.status().message();
  std::filesystem::remove_all(dir);
}

// Measured file I/O gives the CPU cluster its NVMe tier: the median rate times the ranks, and the
// directory's free space; the measurements keep the samples.
TEST(Profile, FileIoGivesTheClusterItsNvmeTier) {
  Measurements m = tiny_measurements();
  auto without = calibrate_from(m, {"Test CPU", 2, 1, "2025-01-01T00:00:00Z"});
  ASSERT_TRUE(without.ok()) << without.status().message();
  EXPECT_FALSE(cpu_cluster_json(*without, 2, 8 * kGiB).contains("nvme_GBps_per_node"));
  for (double t : {1e-3, 3e-3, 2e-3}) m.file_io.push_back({4e6, t, t});
  m.file_io_free_bytes = 5e11;
  auto cal = calibrate_from(m, {"Test CPU", 2, 1, "2025-01-01T00:00:00Z"});
  ASSERT_TRUE(cal.ok()) << cal.status().message();
  EXPECT_DOUBLE_EQ(cal->file_io_bytes_per_s, 2e9);  // median: 8e6 bytes over 4 ms
  auto cluster = cluster_from_json(cpu_cluster_json(*cal, 2, 8 * kGiB), "cluster.json");
  ASSERT_TRUE(cluster.ok()) << cluster.status().message();
  EXPECT_NEAR(cluster->nvme_bytes_per_s_per_node, 4e9, 1e-3);
  EXPECT_NEAR(cluster->nvme_bytes_per_node, 5e11, 1e-3);
  const Json j = profile_json(*cal, m);
  EXPECT_EQ(j["measurements"]["file_io"]["samples"].size(), 3u);
}

TEST(ExecutorProbe, EveryComputeTaskOfTheStepIsTimed) {
  const ModelSpec model = small_model();
  const Plan plan = one_rank_plan(2);
  auto comm = executor::make_local_comm();
  auto probe = time_executor_tasks(model, plan, *comm, 1, 2);
  ASSERT_TRUE(probe.ok()) << probe.status().message();
  EXPECT_TRUE(probe->collectives.empty());  // one rank: no collective runs
  const std::vector<TaskSample>* samples = &probe->tasks;
  std::set<std::string> timed;
  for (const TaskSample& s : *samples) {
    EXPECT_GT(s.time_s, 0) << s.name;
    EXPECT_EQ(s.probe, "t, tp 1, micro-batch 2");
    for (const Task& t : s.tasks) timed.insert(std::string(t.name));
  }
  std::vector<Task> tasks = layer_forward_tasks(model, plan);
  for (auto* more : {&layer_backward_tasks, &embedding_forward_tasks, &embedding_backward_tasks,
                     &head_forward_tasks, &head_backward_tasks}) {
    const std::vector<Task> t = (*more)(model, plan);
    tasks.insert(tasks.end(), t.begin(), t.end());
  }
  for (const Task& t : tasks)
    if (t.kind != TaskKind::kComm) {
      EXPECT_TRUE(timed.count(std::string(t.name))) << t.name;
    }
  EXPECT_TRUE(timed.count("optimizer"));
  // Each layer task occurs 2 layers x 2 micro-batches x 2 steps times.
  for (const TaskSample& s : *samples)
    if (s.name == "fc1") {
      EXPECT_EQ(s.calls, 8);
    }
}

// An MoE model with a dense first layer, 4 experts top-2 and a shared expert: the layer kinds
// calibrate has to tell apart (the dense layer's "fc1", the expert layers' router and experts).
ModelSpec small_moe_model() {
  ModelSpec model = small_model();
  model.num_layers = 3;
  model.num_experts = 4;
  model.experts_per_token = 2;
  model.ffn_hidden_size = 32;
  model.shared_expert_ffn_size = 16;
  model.dense_layers = {0};
  model.dense_ffn_hidden_size = 64;
  return model;
}

// Both layer kinds of an MoE model with dense layers are timed in one step: the dense MLP's
// GEMMs (once per micro-batch: one dense layer) and the router, the experts and the shared
// expert (twice: two expert layers), each under its own cost-model task.
TEST(ExecutorProbe, AnMoeModelWithDenseLayersHasBothKindsTimed) {
  const ModelSpec model = small_moe_model();
  const Plan plan = one_rank_plan(2);
  auto comm = executor::make_local_comm();
  auto probe = time_executor_tasks(model, plan, *comm, 1, 2);
  ASSERT_TRUE(probe.ok()) << probe.status().message();
  std::map<std::string, std::int64_t> calls;
  for (const TaskSample& s : probe->tasks)
    for (const Task& t : s.tasks) calls[std::string(t.name)] += s.calls;
  for (LayerKind kind : {LayerKind::kDense, LayerKind::kMoe}) {
    const ModelSpec lm = layer_model(model, kind);
    for (auto* list : {&layer_forward_tasks, &layer_backward_tasks})
      for (const Task& t : (*list)(lm, plan))
        // The CPU executor's MoE layer does its token permutations and regroupings, and adds its
        // experts' biases, inside its router and expert spans (executor/cpu/moe.cc), so the cost
        // model's moe_permute, moe_regroup, moe_expert_bias and their inverses have no span of
        // their own and are not sampled: the fit sees their time in the router's and the
        // experts' samples.
        if (t.kind != TaskKind::kComm && !std::string(t.name).starts_with("moe_")) {
          EXPECT_TRUE(calls.count(std::string(t.name))) << t.name;
        }
  }
  // 2 micro-batches x 2 steps: the dense layer once per micro-batch, the expert layers twice.
  EXPECT_EQ(calls["fc1"], 4);
  EXPECT_EQ(calls["router"], 8);
  EXPECT_EQ(calls["expert_fc1"], 8);
  EXPECT_EQ(calls["shared_fc1"], 8);
}

executor::TraceEvent event(std::string task, char pass, std::int64_t begin_ns,
                           std::int64_t end_ns) {
  executor::TraceEvent e;
  e.task = std::move(task);
  e.context.pass = pass;
  e.begin_ns = begin_ns;
  e.end_ns = end_ns;
  return e;
}

TEST(ExecutorProbe, SpansOfOneContextAreOneOccurrence) {
  const ModelSpec model = small_model();
  const Plan plan = one_rank_plan(1);
  // The optimizer cut in two by a ZeRO all-gather, and a composite attention span.
  const std::vector<std::vector<executor::TraceEvent>> steps = {
      {event("optimizer", 'O', 0, 1000), event("optimizer", 'O', 2000, 2500),
       event("attn_scores+softmax+attn_values", 'F', 3000, 3300)}};
  auto samples = task_samples_from_events(steps, model, plan, 0, "unit");
  ASSERT_TRUE(samples.ok()) << samples.status().message();
  ASSERT_EQ(samples->size(), 2u);
  const TaskSample& attention = (*samples)[0];
  EXPECT_EQ(attention.tasks.size(), 3u);
  EXPECT_DOUBLE_EQ(attention.time_s, 300e-9);
  const TaskSample& optimizer = (*samples)[1];
  EXPECT_EQ(optimizer.calls, 1);
  EXPECT_DOUBLE_EQ(optimizer.time_s, 1500e-9);
  EXPECT_EQ(optimizer.tasks.at(0).memory_kernel, MemoryKernel::kOptimizer);
}

TEST(ExecutorProbe, AnOccurrenceTakesTheMedianOverStepsOfTheStepsMean) {
  // fc1 in 2 layers x 2 micro-batches per step. Step 1 has one slow occurrence (mean 2 us),
  // step 2 none (1 us), step 3 is disturbed throughout (50 us). A step's sum is its mean times
  // 4, so 2 us is the typical step's share; the median over all 12 occurrences would be 1 us.
  auto fc1 = [](std::int32_t layer, std::int32_t micro_batch, std::int64_t us) {
    executor::TraceEvent e = event("fc1", 'F', 0, us * 1000);
    e.context.layer = layer;
    e.context.micro_batch = micro_batch;
    return e;
  };
  auto step = [&](std::int64_t a, std::int64_t b, std::int64_t c, std::int64_t d) {
    return std::vector<executor::TraceEvent>{fc1(0, 0, a), fc1(1, 0, b), fc1(0, 1, c),
                                             fc1(1, 1, d)};
  };
  const std::vector<std::vector<executor::TraceEvent>> steps = {
      step(1, 1, 1, 5), step(1, 1, 1, 1), step(50, 50, 50, 50)};
  auto samples = task_samples_from_events(steps, small_model(), one_rank_plan(2), 0, "unit");
  ASSERT_TRUE(samples.ok()) << samples.status().message();
  ASSERT_EQ(samples->size(), 1u);
  EXPECT_EQ((*samples)[0].calls, 12);
  EXPECT_DOUBLE_EQ((*samples)[0].time_s, 2000e-9);
}

TEST(ExecutorProbe, CollectivesBecomeSamplesOfTheirCostModelTask) {
  Plan plan = one_rank_plan(1);
  plan.tp = 2;
  // tp_all_reduce_attn: all-reduce of T x h float32 = 16 x 32 x 4 bytes; a ring over 2 ranks
  // sends S (core/cost/collectives.h), so bytes_sent identifies the task.
  auto ar = [](std::int64_t begin_ns, std::int64_t end_ns) {
    executor::TraceEvent e = event("tp_all_reduce_attn", 'F', begin_ns, end_ns);
    e.track = executor::TraceTrack::kTp;
    e.group = CommGroup::kTp;
    e.bytes_sent = 2048;
    return e;
  };
  const std::vector<std::vector<executor::TraceEvent>> steps = {
      {ar(0, 1000), ar(5000, 8000)}, {ar(0, 2000)}};
  auto samples = collective_samples_from_events(steps, small_model(), plan, 0, "unit");
  ASSERT_TRUE(samples.ok()) << samples.status().message();
  ASSERT_EQ(samples->size(), 1u);
  EXPECT_EQ((*samples)[0].collective, Collective::kAllReduce);
  EXPECT_EQ((*samples)[0].group_size, 2);
  EXPECT_EQ((*samples)[0].bytes, 2048);
  // Per step the mean call (2 us in both), then the median over steps.
  EXPECT_DOUBLE_EQ((*samples)[0].time_s, 2000e-9);

  std::vector<std::vector<executor::TraceEvent>> wrong = steps;
  wrong[0][0].bytes_sent = 7;
  auto bad = collective_samples_from_events(wrong, small_model(), plan, 0, "unit");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'tp_all_reduce_attn' of 7 bytes"), std::string::npos);
}

// An expert all-to-all sends what the router chose, not the balanced T*k rows the cost model
// costs: a dispatch or combine of any size is a sample of its task, at the task's size. Other
// collectives still need their exact size.
TEST(ExecutorProbe, ExpertAllToAllsAreSamplesAtTheirTasksSize) {
  const ModelSpec model = small_moe_model();
  Plan plan = one_rank_plan(1);
  plan.dp = 2;
  plan.ep = 2;
  plan.global_batch_size = 2;
  std::vector<Task> tasks = layer_forward_tasks(layer_model(model, LayerKind::kMoe), plan);
  const auto combine = std::find_if(tasks.begin(), tasks.end(),
                                    [](const Task& t) { return t.name == "ep_combine"; });
  ASSERT_NE(combine, tasks.end());
  auto a2a = [](std::int64_t bytes_sent, std::int64_t begin_ns, std::int64_t end_ns) {
    executor::TraceEvent e = event("ep_combine", 'F', begin_ns, end_ns);
    e.track = executor::TraceTrack::kEp;
    e.group = CommGroup::kEp;
    e.bytes_sent = bytes_sent;
    return e;
  };
  // Two expert layers per step, each rank's combine 10% off the balanced size either way.
  const std::int64_t balanced = combine->bytes_sent();
  const std::vector<std::vector<executor::TraceEvent>> steps = {
      {a2a(balanced * 9 / 10, 0, 1000), a2a(balanced * 11 / 10, 2000, 5000)},
      {a2a(balanced, 0, 2000), a2a(balanced, 3000, 5000)}};
  auto samples = collective_samples_from_events(steps, model, plan, 0, "unit");
  ASSERT_TRUE(samples.ok()) << samples.status().message();
  ASSERT_EQ(samples->size(), 1u);
  EXPECT_EQ((*samples)[0].collective, Collective::kAllToAll);
  EXPECT_EQ((*samples)[0].group_size, 2);
  EXPECT_EQ((*samples)[0].bytes, combine->message_bytes);
  EXPECT_DOUBLE_EQ((*samples)[0].time_s, 2000e-9);

  // A collective that is no task of the plan is still an error naming it.
  std::vector<std::vector<executor::TraceEvent>> wrong = steps;
  wrong[0][0].task = "ep_mystery";
  auto bad = collective_samples_from_events(wrong, model, plan, 0, "unit");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'ep_mystery'"), std::string::npos);
}

// The trainer sums all of a stage's sequence-parallel norm gradients in one all-reduce where the
// cost model lists one per block: the call is one sample of the blocks' summed size; a call of
// any other size is still an error.
TEST(ExecutorProbe, OneCallForSeveralBlocksIsOneSampleOfTheirSummedSize) {
  const ModelSpec model = small_moe_model();
  Plan plan = one_rank_plan(1);
  plan.tp = 2;
  plan.sequence_parallel = true;
  const StepTasks st = step_tasks(model, plan, 0);
  std::int64_t message = 0, sent = 0, blocks = 0;
  for (std::size_t b = 0; b < st.blocks.size(); ++b)
    for (const Task& t : st.dp(b, DpPoint::kAfterLastBackward))
      if (t.name == "tp_sp_norm_grad_all_reduce") {
        message += t.message_bytes;
        sent += t.bytes_sent();
        ++blocks;
      }
  ASSERT_GT(blocks, 1);
  executor::TraceEvent e = event("tp_sp_norm_grad_all_reduce", 'O', 0, 4000);
  e.track = executor::TraceTrack::kTp;
  e.group = CommGroup::kTp;
  e.bytes_sent = sent;
  auto samples = collective_samples_from_events({{e}}, model, plan, 0, "unit");
  ASSERT_TRUE(samples.ok()) << samples.status().message();
  ASSERT_EQ(samples->size(), 1u);
  EXPECT_EQ((*samples)[0].collective, Collective::kAllReduce);
  EXPECT_EQ((*samples)[0].bytes, message);
  EXPECT_DOUBLE_EQ((*samples)[0].time_s, 4000e-9);
  e.bytes_sent = sent + 4;
  auto bad = collective_samples_from_events({{e}}, model, plan, 0, "unit");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'tp_sp_norm_grad_all_reduce' of"), std::string::npos);
}

// A rank waits at collectives and receives; a send returns at once; compute after the last
// wait is not an interval (nobody waits for it within the step).
TEST(ExecutorProbe, ComputeBetweenWaitsEndsAtCollectivesAndReceives) {
  auto comm = [](std::string task, CommGroup g, std::int64_t begin_ns, std::int64_t end_ns) {
    executor::TraceEvent e = event(std::move(task), 'F', begin_ns, end_ns);
    e.group = g;
    return e;
  };
  // Recorded out of order (a span is recorded when it ends): sorted by begin.
  const std::vector<std::vector<executor::TraceEvent>> steps = {
      {event("qkv", 'F', 0, 1000), comm("tp_all_reduce_attn", CommGroup::kTp, 1000, 1500),
       event("fc1", 'F', 1500, 3500), comm("send_forward", CommGroup::kPp, 3500, 3600),
       event("fc2", 'F', 3600, 4600), comm("recv_backward", CommGroup::kPp, 4600, 9000),
       event("optimizer", 'O', 9000, 9700)},
      {comm("dp_grad_all_reduce", CommGroup::kDp, 0, 10), event("head", 'F', 10, 20)}};
  const auto intervals = compute_between_waits_s(steps);
  ASSERT_EQ(intervals.size(), 2u);
  ASSERT_EQ(intervals[0].size(), 2u);
  EXPECT_NEAR(intervals[0][0], 1000e-9, 1e-18);
  EXPECT_NEAR(intervals[0][1], 3000e-9, 1e-18);  // fc1 and fc2: the send is no wait
  ASSERT_EQ(intervals[1].size(), 1u);
  EXPECT_EQ(intervals[1][0], 0.0);
}

TEST(ExecutorProbe, SkewIsTheSlowestRanksExcessOverTheMean) {
  // Two intervals on 2 ranks: (1.0, 1.4) ms and (2.0, 2.0) ms.
  const SkewSample s = skew_of_step({2.4e-3, 4.0e-3}, {1.4e-3, 2.0e-3}, 2, "p");
  EXPECT_NEAR(s.mean_s, 3.2e-3, 1e-15);
  EXPECT_NEAR(s.excess_s, 0.2e-3, 1e-15);
  EXPECT_NEAR(rank_compute_spread({s}), 0.2 / 3.2 * std::sqrt(std::numbers::pi), 1e-12);
  // One rank, or no compute between waits, says nothing about skew.
  EXPECT_EQ(rank_compute_spread({skew_of_step({1e-3}, {1e-3}, 1, "p")}), 0.0);
  EXPECT_EQ(rank_compute_spread({skew_of_step({0.0}, {0.0}, 2, "p")}), 0.0);
  EXPECT_EQ(rank_compute_spread({}), 0.0);
}

// Per-rank compute speed from synthetic traces with known per-rank times: rank 1 runs every
// task 30% longer than rank 0. Its factor over the mean is 1.3 / 1.15, rank 0's 1 / 1.15; with
// each rank's compute between waits divided by its factor, the systematic 30% is no skew left.
TEST(ExecutorProbe, EachRanksComputeOverTheMeanIsItsTimeFactor) {
  auto rank_steps = [](double scale) {
    auto ns = [scale](double t) { return static_cast<std::int64_t>(std::llround(t * scale)); };
    executor::TraceEvent ar = event("dp_grad_all_reduce", 'B', ns(3000), ns(3000) + 500);
    ar.group = CommGroup::kDp;
    executor::TraceEvent recv = event("recv_forward", 'F', 0, 800);  // no compute
    recv.group = CommGroup::kPp;
    return std::vector<std::vector<executor::TraceEvent>>{
        {recv, event("qkv", 'F', ns(1000), ns(2000)), event("fc1", 'F', ns(2000), ns(3000)), ar,
         event("optimizer", 'O', ns(4000), ns(5000))},
        {event("qkv", 'F', 0, ns(1000)), ar}};
  };
  const auto r0 = rank_steps(1.0), r1 = rank_steps(1.3);
  EXPECT_NEAR(traced_compute_s(r0), 4000e-9, 1e-15);  // the receive and the all-reduce left out
  EXPECT_NEAR(traced_compute_s(r1), 5200e-9, 1e-15);
  const std::vector<double> f = rank_compute_time_factors({traced_compute_s(r0), traced_compute_s(r1)});
  ASSERT_EQ(f.size(), 2u);
  EXPECT_NEAR(f[0], 1.0 / 1.15, 1e-9);
  EXPECT_NEAR(f[1], 1.3 / 1.15, 1e-9);
  EXPECT_NEAR((f[0] + f[1]) / 2, 1.0, 1e-12);
  // One rank, or a rank with no compute: no factors.
  EXPECT_TRUE(rank_compute_time_factors({4e-6}).empty());
  EXPECT_TRUE(rank_compute_time_factors({4e-6, 0.0}).empty());
  EXPECT_TRUE(rank_compute_time_factors({}).empty());
  // The skew: raw, rank 1's intervals are 30% longer (a large spread); at the mean speed the
  // two ranks' intervals agree and the spread is 0.
  const auto i0 = compute_between_waits_s(r0), i1 = compute_between_waits_s(r1);
  auto spread = [](const std::vector<std::vector<double>>& a,
                   const std::vector<std::vector<double>>& b) {
    std::vector<SkewSample> samples;
    for (std::size_t k = 0; k < a.size(); ++k) {
      std::vector<double> sum, slowest;
      for (std::size_t j = 0; j < a[k].size(); ++j) {
        sum.push_back(a[k][j] + b[k][j]);
        slowest.push_back(std::max(a[k][j], b[k][j]));
      }
      samples.push_back(skew_of_step(sum, slowest, 2, "p"));
    }
    return rank_compute_spread(samples);
  };
  EXPECT_GT(spread(i0, i1), 0.2);
  EXPECT_NEAR(spread(at_mean_speed(i0, f[0]), at_mean_speed(i1, f[1])), 0.0, 1e-9);
  // Summed over probes into the measurements, they become the profile's factors.
  Measurements m = tiny_measurements();
  add_rank_compute(m, {traced_compute_s(r0), traced_compute_s(r1)});
  add_rank_compute(m, {traced_compute_s(r0), traced_compute_s(r1)});
  add_rank_compute(m, {1.0, 2.0, 3.0});  // another world: left out
  ASSERT_EQ(m.rank_compute_s.size(), 2u);
  EXPECT_NEAR(m.rank_compute_s[1], 2 * 5200e-9, 1e-15);
  auto cal = calibrate_from(m, {"Test CPU", 2, 1, "2025-01-01T00:00:00Z"});
  ASSERT_TRUE(cal.ok()) << cal.status().message();
  ASSERT_EQ(cal->profile.rank_compute_time_factor.size(), 2u);
  EXPECT_NEAR(cal->profile.rank_compute_time_factor[1], 1.3 / 1.15, 1e-9);
  const Json j = profile_json(*cal, m);
  EXPECT_NEAR(j["measurements"]["rank_compute_us"][1].get<double>(), 2 * 5.2, 1e-9);
  auto back = hardware_profile_from_json(j, "profile.json");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->rank_compute_time_factor.size(), 2u);
  EXPECT_NEAR(back->rank_compute_time_factor[0], 1.0 / 1.15, 1e-12);
  EXPECT_NE(format_fit_summary(*cal).find("rank compute time factor 0.870 1.130"),
            std::string::npos)
      << format_fit_summary(*cal);
  // One rank measured: no field in the profile.
  auto one = calibrate_from(tiny_measurements(), {"Test CPU", 1, 1, "2025-01-01T00:00:00Z"});
  ASSERT_TRUE(one.ok()) << one.status().message();
  EXPECT_FALSE(profile_json(*one, tiny_measurements()).contains("rank_compute_time_factor"));
}

TEST(ExecutorProbe, ASpanThatIsNoTaskIsAnErrorNamingIt) {
  const std::vector<std::vector<executor::TraceEvent>> steps = {
      {event("qkv+mystery_kernel", 'F', 0, 10)}};
  auto samples = task_samples_from_events(steps, small_model(), one_rank_plan(1), 0, "unit");
  ASSERT_FALSE(samples.ok());
  EXPECT_NE(samples.status().message().find("'mystery_kernel'"), std::string::npos);
}

}  // namespace
}  // namespace trainplan::calibration
