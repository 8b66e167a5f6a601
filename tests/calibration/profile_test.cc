// /proc parsers, the profile and cluster JSON written by calibrate (they must load back with
// the loaders the simulator uses), and the measured kernels' basic sanity.
#include "calibration/profile.h"

#include <gtest/gtest.h>

#include "models/cluster_spec.h"
#include "models/units.h"

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

Measurements tiny_measurements() {
  Measurements m;
  TimingOptions fast;
  fast.min_time_s = 0.001;
  for (const GemmShape& g : gemm_sweep_shapes({8, 32, 64})) m.gemms.push_back(time_gemm(g, fast));
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
  for (const MemoryTask& t : cost_model_memory_tasks({model}, {1, 2}, {1}))
    m.memory.push_back(time_memory_task(t, fast));
  m.attention.push_back(time_attention(16, 16, 2, fast));
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
  for (const GemmSample& g : m.gemms) EXPECT_GT(g.time_s, 0);
  for (const MemorySample& s : m.memory) EXPECT_GT(s.time_s, 0) << s.task;
  MachineIdentity id{"Test CPU", 2, 1, "2025-01-01T00:00:00Z"};
  auto cal = calibrate_from(m, id);
  ASSERT_TRUE(cal.ok()) << cal.status().message();
  const Json j = profile_json(*cal, m);
  ASSERT_TRUE(j.contains("measurements"));
  EXPECT_EQ(j["measurements"]["collectives"][0]["type"], "float");
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
  EXPECT_FALSE(format_fit_summary(*cal).empty());
  EXPECT_NE(format_collective_table(m.collectives).find("busbw"), std::string::npos);
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

TEST(Kernels, CostModelShapesCoverTheLayer) {
  ModelSpec model;
  model.name = "t";
  model.num_layers = 2;
  model.hidden_size = 64;
  model.num_attention_heads = 4;
  model.num_kv_heads = 4;
  model.head_dim = 16;
  model.ffn_hidden_size = 256;
  model.vocab_size = 256;
  model.seq_len = 64;
  model.max_position_embeddings = 64;
  const auto shapes = cost_model_gemm_shapes({model}, {1, 2}, {1, 2});
  bool fc1 = false;
  for (const GemmShape& g : shapes) fc1 = fc1 || (g.name == "fc1" && g.m == 64 && g.n == 256);
  EXPECT_TRUE(fc1);
  EXPECT_GT(shapes.size(), 10u);
}

}  // namespace
}  // namespace trainplan::calibration
