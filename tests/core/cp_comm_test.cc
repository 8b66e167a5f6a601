// Context parallelism's exchanges (Plan::cp_comm), as core/cost/tasks.cc builds them from each
// framework's code: the bytes each form moves against the all-gather's, the ring steps' shapes
// and masks, what each exchange runs beside (Task::beside), the attention FLOPs every form
// keeps, the buffers, and the plan field's round trip and refusals.
#include <algorithm>
#include <string>

#include <gtest/gtest.h>

#include "core/cost/attention_rates.h"
#include "core/cost/collectives.h"
#include "core/cost/compute_model.h"
#include "core/cost/cost_model.h"
#include "tests/core/test_util.h"

namespace trainplan {
namespace {

using testing::load_repo_model;

// Llama 3 8B (8 KV heads of 128), tp 2, cp 4, micro-batch 2, bf16.
constexpr std::int64_t kTp = 2, kCp = 4, kMbs = 2;
Plan cp_plan(CpComm form) {
  Plan p;
  p.tp = kTp;
  p.cp = kCp;
  p.micro_batch_size = kMbs;
  p.global_batch_size = 4 * kMbs;
  p.cp_comm = form;
  return p;
}
// The whole sequence's K and V on one TP rank, and one rank's share of it.
std::int64_t full_kv_bytes(const ModelSpec& m) {
  return 2 * kMbs * m.seq_len * m.kv_width() / kTp * 2;
}
std::int64_t local_kv_bytes(const ModelSpec& m) { return full_kv_bytes(m) / kCp; }

std::vector<Task> of(const std::vector<Task>& tasks, TaskKind kind) {
  std::vector<Task> out;
  for (const Task& t : tasks)
    if (t.kind == kind) out.push_back(t);
  return out;
}
std::vector<Task> named(const std::vector<Task>& tasks, std::string_view name) {
  std::vector<Task> out;
  for (const Task& t : tasks)
    if (t.name == name) out.push_back(t);
  return out;
}
double sum(const std::vector<Task>& tasks, double Task::*field) {
  double s = 0;
  for (const Task& t : tasks) s += t.*field;
  return s;
}
std::int64_t sent(const std::vector<Task>& tasks) {
  std::int64_t s = 0;
  for (const Task& t : tasks)
    if (t.kind == TaskKind::kComm && t.group == CommGroup::kCp) s += t.bytes_sent();
  return s;
}

TEST(CpComm, EveryFormKeepsTheLayersAttentionFlops) {
  const ModelSpec m = load_repo_model("llama3-8b.json");
  const Plan gather = cp_plan(CpComm::kAllGather);
  const std::vector<Task> base_f = of(layer_forward_tasks(m, gather), TaskKind::kAttention);
  const std::vector<Task> base_b = of(layer_backward_tasks(m, gather), TaskKind::kAttention);
  ASSERT_EQ(base_f.size(), 1u);
  for (CpComm form :
       {CpComm::kP2p, CpComm::kA2a, CpComm::kTorchAllGather, CpComm::kTorchAllToAll}) {
    const Plan p = cp_plan(form);
    const std::vector<Task> f = of(layer_forward_tasks(m, p), TaskKind::kAttention);
    const std::vector<Task> b = of(layer_backward_tasks(m, p), TaskKind::kAttention);
    const std::string what(to_string(form));
    EXPECT_NEAR(sum(f, &Task::executed_flops), base_f[0].executed_flops,
                1e-9 * base_f[0].executed_flops)
        << what;
    EXPECT_NEAR(sum(f, &Task::flops), base_f[0].flops, 1e-9 * base_f[0].flops) << what;
    EXPECT_NEAR(sum(b, &Task::executed_flops), base_b[0].executed_flops,
                1e-9 * base_b[0].executed_flops)
        << what;
    EXPECT_DOUBLE_EQ(step_flops(m, p).model, step_flops(m, gather).model) << what;
  }
}

TEST(CpComm, P2pPassesEachRanksKvAroundTheRingBesideEachStep) {
  // Transformer Engine's AttnFuncWithCP: cp - 1 send/recv of this rank's K and V in the forward,
  // each beside one step (the next step waits); step 0 causal on s x s, the others unmasked on
  // s x s/2 or s/2 x s. Per rank it sends what the all-gather sends.
  const ModelSpec m = load_repo_model("llama3-8b.json");
  const Plan p = cp_plan(CpComm::kP2p);
  const std::vector<Task> f = layer_forward_tasks(m, p);
  const std::vector<Task> ring = named(f, "cp_send_recv_kv");
  ASSERT_EQ(ring.size(), static_cast<std::size_t>(kCp - 1));
  for (std::size_t i = 0; i < ring.size(); ++i) {
    EXPECT_EQ(ring[i].collective, Collective::kSendRecv);
    EXPECT_EQ(ring[i].group, CommGroup::kCp);
    EXPECT_EQ(ring[i].group_size, kCp);
    EXPECT_EQ(ring[i].message_bytes, local_kv_bytes(m));
    EXPECT_EQ(ring[i].beside, i == 0 ? 1 : 2);  // the step's kernel (and its copy)
  }
  EXPECT_EQ(sent(f), sent(layer_forward_tasks(m, cp_plan(CpComm::kAllGather))));
  const std::vector<Task> steps = of(f, TaskKind::kAttention);
  ASSERT_EQ(steps.size(), static_cast<std::size_t>(kCp));
  const std::int64_t s = m.seq_len / kCp;
  EXPECT_TRUE(steps[0].causal);
  EXPECT_EQ(steps[0].m, s);
  EXPECT_EQ(steps[0].n, s);
  for (std::size_t i = 1; i < steps.size(); ++i) {
    EXPECT_FALSE(steps[i].causal) << i;
    EXPECT_EQ(steps[i].m * steps[i].n, s * s / 2) << i;
    EXPECT_DOUBLE_EQ(steps[i].flops, 2.0 * steps[i].executed_flops) << i;
  }
  // The average rank: half its later steps on all queries, half on the second query chunk.
  EXPECT_EQ(steps[1].n, s / 2);
  EXPECT_EQ(steps[kCp - 1].n, s);
  // Backward: K and V at the first step, the gradients alone at the last, both in between: what
  // the all-gather and the reduce-scatter send together.
  const std::vector<Task> b = layer_backward_tasks(m, p);
  const std::vector<Task> back = named(b, "cp_send_recv_kv_dkv");
  ASSERT_EQ(back.size(), static_cast<std::size_t>(kCp));
  EXPECT_EQ(back.front().message_bytes, local_kv_bytes(m));
  EXPECT_EQ(back.back().message_bytes, local_kv_bytes(m));
  for (std::size_t i = 1; i + 1 < back.size(); ++i)
    EXPECT_EQ(back[i].message_bytes, 2 * local_kv_bytes(m));
  EXPECT_EQ(sent(b), sent(layer_backward_tasks(m, cp_plan(CpComm::kAllGather))));
  EXPECT_EQ(comm_volume_on_stage(m, p, 0).cp_bytes,
            comm_volume_on_stage(m, cp_plan(CpComm::kAllGather), 0).cp_bytes);
  // The last backward step runs the rank's own chunks, causal.
  EXPECT_TRUE(of(b, TaskKind::kAttention).back().causal);
}

TEST(CpComm, TorchRingGathersOnceAndRotatesFp32Gradients) {
  // PyTorch's _templated_ring_attention with the all-gather rotater: one all-gather of the
  // whole K and V, waited for by the second step; the backward gathers again and rotates dK/dV
  // in fp32 (twice bf16's bytes) every step, the last rotation waited for at the end.
  const ModelSpec m = load_repo_model("llama3-8b.json");
  const Plan p = cp_plan(CpComm::kTorchAllGather);
  const std::vector<Task> f = layer_forward_tasks(m, p);
  const std::vector<Task> ag = named(f, "cp_all_gather_kv");
  ASSERT_EQ(ag.size(), 1u);
  EXPECT_EQ(ag[0].collective, Collective::kAllGather);
  EXPECT_EQ(ag[0].message_bytes, full_kv_bytes(m));
  EXPECT_EQ(ag[0].beside, 2);  // step 0's SDPA and its cast to fp32
  EXPECT_EQ(named(f, "cp_merge").size(), static_cast<std::size_t>(kCp));
  const std::vector<Task> b = layer_backward_tasks(m, p);
  EXPECT_EQ(named(b, "cp_all_gather_kv_bwd").size(), 1u);
  const std::vector<Task> rot = named(b, "cp_rotate_dkv");
  ASSERT_EQ(rot.size(), static_cast<std::size_t>(kCp));
  for (const Task& t : rot) {
    EXPECT_EQ(t.collective, Collective::kSendRecv);
    EXPECT_EQ(t.message_bytes, 2 * local_kv_bytes(m));
  }
  // After the last rotation: dQ's cast runs beside it, dK and dV's waits for it.
  const auto last =
      std::find_if(b.rbegin(), b.rend(), [](const Task& t) { return t.name == "cp_rotate_dkv"; });
  EXPECT_EQ(last->beside, 2);
  EXPECT_EQ((last - 1)->name, "cp_dq_update");  // (reverse iterator: later tasks)
  EXPECT_EQ((last - 2)->name, "cp_dq_cast");
  EXPECT_EQ((last - 3)->name, "cp_dkv_cast");
  // Eager (compile off): the unused send buffers are copied and each merge is ATen's kernels.
  Plan eager = p;
  eager.elementwise = Elementwise::kEager;
  const std::vector<Task> fe = layer_forward_tasks(m, eager);
  EXPECT_EQ(named(fe, "cp_kv_cat").size(), static_cast<std::size_t>(kCp - 1));
  EXPECT_EQ(named(f, "cp_kv_cat").size(), 1u);
  EXPECT_GT(sum(named(fe, "cp_merge"), &Task::bytes), sum(named(f, "cp_merge"), &Task::bytes));
  // The all-to-all rotater passes this rank's K and V each step instead.
  const std::vector<Task> a2a = layer_forward_tasks(m, cp_plan(CpComm::kTorchAllToAll));
  const std::vector<Task> rot_kv = named(a2a, "cp_rotate_kv");
  ASSERT_EQ(rot_kv.size(), static_cast<std::size_t>(kCp - 1));
  EXPECT_EQ(rot_kv[0].message_bytes, local_kv_bytes(m));
  EXPECT_EQ(sent(a2a), sent(f));
}

TEST(CpComm, UlyssesAllToAllsQkvAndTheOutputAroundOneWholeSequenceKernel) {
  const ModelSpec m = load_repo_model("llama3-8b.json");  // 32 heads, 8 KV heads: 16 and 4 per rank
  const Plan p = cp_plan(CpComm::kA2a);
  const std::vector<Task> f = layer_forward_tasks(m, p);
  const std::vector<Task> qkv = named(f, "cp_all_to_all_qkv");
  ASSERT_EQ(qkv.size(), 3u);
  const std::int64_t s = m.seq_len / kCp;
  EXPECT_EQ(qkv[0].message_bytes, kMbs * s * m.q_width() / kTp * 2);
  EXPECT_EQ(qkv[1].message_bytes, local_kv_bytes(m) / 2);  // K
  EXPECT_EQ(qkv[0].collective, Collective::kAllToAll);
  EXPECT_EQ(qkv[2].beside, 1);  // V's beside K's reorder; the attention waits for it
  EXPECT_EQ(named(f, "cp_all_to_all_out").size(), 1u);
  const std::vector<Task> att = of(f, TaskKind::kAttention);
  ASSERT_EQ(att.size(), 1u);
  EXPECT_EQ(att[0].m, m.seq_len);
  EXPECT_EQ(att[0].batch, kMbs * m.num_attention_heads / kTp / kCp);
  const std::vector<Task> b = layer_backward_tasks(m, p);
  EXPECT_EQ(named(b, "cp_all_to_all_out_grad").size(), 2u);
  EXPECT_EQ(named(b, "cp_all_to_all_qkv_grad").size(), 3u);
  // The heads must split over cp: 8 KV heads over tp 2 leave 4, which cp 8 does not divide.
  ModelSpec long_m = m;
  long_m.seq_len = long_m.max_position_embeddings = 16 * 8192;
  Plan eight = p;
  eight.cp = 8;
  const Status st = check_plan_fits_model(eight, long_m);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("cp_comm=a2a: cp=8 does not divide the num_kv_heads per TP rank"),
            std::string::npos)
      << st.message();
  eight.cp_comm = CpComm::kP2p;
  EXPECT_TRUE(check_plan_fits_model(eight, long_m).ok());
}

TEST(CpComm, RingStepsTakeTheUnmaskedRatesOfANamedKernel) {
  // FlashAttention-2 on an H100: the ring's unmasked steps run at Fig. 5's unmasked forward rate,
  // faster per executed FLOP than the causal kernel at the same length.
  const ModelSpec m = load_repo_model("llama3-8b.json");
  Plan p = cp_plan(CpComm::kP2p);
  p.attention_kernel = AttentionKernel::kFlash2;
  const auto rates = plan_rates(p, gpu_preset("H100-80GB").value(), std::nullopt);
  ASSERT_TRUE(rates.ok()) << rates.status().message();
  const std::vector<Task> steps = of(layer_forward_tasks(m, p), TaskKind::kAttention);
  const double causal = steps[0].executed_flops / task_time_s(steps[0], *rates);
  const double unmasked = steps[1].executed_flops / task_time_s(steps[1], *rates);
  EXPECT_GT(unmasked, causal);
  const auto published =
      attention_kernel_rate("hopper", AttentionKernel::kFlash2, false, false, steps[1].n);
  ASSERT_TRUE(published.has_value());
  const double rate =
      published->flops_per_s * rates->peak_flops_per_s / published->measured_peak_flops_per_s;
  EXPECT_NEAR(task_time_s(steps[1], *rates),
              steps[1].executed_flops / rate + rates->kernel_overhead_s, 1e-12);
}

TEST(CpComm, BuffersFollowEachFormsCode) {
  // A GPT with as many KV heads as heads, 32K tokens over cp 16, where the attention's buffers
  // outweigh the MLP's: the all-gather holds the whole sequence's K and V and their gradients,
  // 2 * cp * kv; the ring the larger of two send buffers of K, V and their gradients and the
  // forward's cp partial outputs, max(4 kv, cp * o); PyTorch's the gathered K and V and fp32 dQ,
  // dK, dV (the latter sent and received), cp kv + 2 (q + 3 kv) in bf16 elements.
  const ModelSpec m = testing::gpt_model(2, 4096, 32, 32768, 32000);
  Plan p;
  p.cp = 16;
  const double T = 32768.0 / 16, kv = 2.0 * 4096 * T, q = 4096 * T, o = q;
  auto cp_part = [&](CpComm form) {
    Plan with = p;
    with.cp_comm = form;
    return layer_backward_workspace_bytes(m, with);
  };
  const double gather = cp_part(CpComm::kAllGather), ring = cp_part(CpComm::kP2p),
               torch = cp_part(CpComm::kTorchAllGather);
  const double rest = gather - 2.0 * 2.0 * 16 * kv;  // bf16: 2 bytes per element
  EXPECT_DOUBLE_EQ(ring - rest, 2.0 * std::max(4.0 * kv, 16 * o));
  EXPECT_DOUBLE_EQ(torch - rest, 2.0 * (16 * kv + 2.0 * (q + 3.0 * kv)));
  EXPECT_LT(ring, gather);
  EXPECT_GT(torch, ring);
}

TEST(CpComm, PlanFieldRoundTripsAndIsRefusedWhereItCannotApply) {
  Plan p = cp_plan(CpComm::kTorchAllToAll);
  const Result<Plan> back = plan_from_json(plan_to_json(p), "round trip");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->cp_comm, CpComm::kTorchAllToAll);
  EXPECT_NE(describe(p).find(" cp-comm=torch-alltoall"), std::string::npos) << describe(p);
  // The default (all-gather) is not written; other values are.
  EXPECT_FALSE(plan_to_json(cp_plan(CpComm::kAllGather)).contains("cp_comm"));
  EXPECT_EQ(plan_to_json(cp_plan(CpComm::kP2p))["cp_comm"], "p2p");
  Json bad = plan_to_json(p);
  bad["cp_comm"] = "ring";
  const Result<Plan> refused = plan_from_json(bad, "bad");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("cp_comm"), std::string::npos);
  EXPECT_NE(refused.status().message().find("ring"), std::string::npos);
  Plan one = p;
  one.cp = 1;
  const Status st = validate_plan(one);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.message(),
            "cp_comm=torch-alltoall says how context parallelism moves keys and "
            "values; the plan has cp=1");
}

}  // namespace
}  // namespace trainplan
