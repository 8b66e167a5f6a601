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
#include "tests/core/plan_file_test_util.h"
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

// A layer's tasks step by step: the ring's runs of identical steps (Task::repeat) written out,
// one task per step, as the frameworks issue them.
std::vector<Task> forward_steps(const ModelSpec& m, const Plan& p) {
  return expand_repeats(layer_forward_tasks(m, p));
}
std::vector<Task> backward_steps(const ModelSpec& m, const Plan& p) {
  return expand_repeats(layer_backward_tasks(m, p));
}

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
  const std::vector<Task> base_f = of(forward_steps(m, gather), TaskKind::kAttention);
  const std::vector<Task> base_b = of(backward_steps(m, gather), TaskKind::kAttention);
  ASSERT_EQ(base_f.size(), 1u);
  for (CpComm form :
       {CpComm::kP2p, CpComm::kA2a, CpComm::kTorchAllGather, CpComm::kTorchAllToAll}) {
    const Plan p = cp_plan(form);
    const std::vector<Task> f = of(forward_steps(m, p), TaskKind::kAttention);
    const std::vector<Task> b = of(backward_steps(m, p), TaskKind::kAttention);
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
  const std::vector<Task> f = forward_steps(m, p);
  const std::vector<Task> ring = named(f, "cp_send_recv_kv");
  ASSERT_EQ(ring.size(), static_cast<std::size_t>(kCp - 1));
  for (std::size_t i = 0; i < ring.size(); ++i) {
    EXPECT_EQ(ring[i].collective, Collective::kSendRecv);
    EXPECT_EQ(ring[i].group, CommGroup::kCp);
    EXPECT_EQ(ring[i].group_size, kCp);
    EXPECT_EQ(ring[i].message_bytes, local_kv_bytes(m));
    EXPECT_EQ(ring[i].beside, i == 0 ? 1 : 2);  // the step's kernel (and its copy)
  }
  EXPECT_EQ(sent(f), sent(forward_steps(m, cp_plan(CpComm::kAllGather))));
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
  const std::vector<Task> b = backward_steps(m, p);
  const std::vector<Task> back = named(b, "cp_send_recv_kv_dkv");
  ASSERT_EQ(back.size(), static_cast<std::size_t>(kCp));
  EXPECT_EQ(back.front().message_bytes, local_kv_bytes(m));
  EXPECT_EQ(back.back().message_bytes, local_kv_bytes(m));
  for (std::size_t i = 1; i + 1 < back.size(); ++i)
    EXPECT_EQ(back[i].message_bytes, 2 * local_kv_bytes(m));
  EXPECT_EQ(sent(b), sent(backward_steps(m, cp_plan(CpComm::kAllGather))));
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
  const std::vector<Task> f = forward_steps(m, p);
  const std::vector<Task> ag = named(f, "cp_all_gather_kv");
  ASSERT_EQ(ag.size(), 1u);
  EXPECT_EQ(ag[0].collective, Collective::kAllGather);
  EXPECT_EQ(ag[0].message_bytes, full_kv_bytes(m));
  EXPECT_EQ(ag[0].beside, 2);  // step 0's SDPA and its cast to fp32
  EXPECT_EQ(named(f, "cp_merge").size(), static_cast<std::size_t>(kCp));
  const std::vector<Task> b = backward_steps(m, p);
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
  const std::vector<Task> fe = forward_steps(m, eager);
  EXPECT_EQ(named(fe, "cp_kv_cat").size(), static_cast<std::size_t>(kCp - 1));
  EXPECT_EQ(named(f, "cp_kv_cat").size(), 1u);
  EXPECT_GT(sum(named(fe, "cp_merge"), &Task::bytes), sum(named(f, "cp_merge"), &Task::bytes));
  // The all-to-all rotater passes this rank's K and V each step instead.
  const std::vector<Task> a2a = forward_steps(m, cp_plan(CpComm::kTorchAllToAll));
  const std::vector<Task> rot_kv = named(a2a, "cp_rotate_kv");
  ASSERT_EQ(rot_kv.size(), static_cast<std::size_t>(kCp - 1));
  EXPECT_EQ(rot_kv[0].message_bytes, local_kv_bytes(m));
  EXPECT_EQ(sent(a2a), sent(f));
}

TEST(CpComm, UlyssesAllToAllsQkvAndTheOutputAroundOneWholeSequenceKernel) {
  const ModelSpec m = load_repo_model("llama3-8b.json");  // 32 heads, 8 KV heads: 16 and 4 per rank
  const Plan p = cp_plan(CpComm::kA2a);
  const std::vector<Task> f = forward_steps(m, p);
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
  const std::vector<Task> b = backward_steps(m, p);
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
  const std::vector<Task> steps = of(forward_steps(m, p), TaskKind::kAttention);
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

TEST(CpComm, RingStepsOfOneShapeAreHeldAsRunsThatCountEveryStep) {
  // Transformer Engine's ring at cp 16 (Llama 3 8B's 8,192 tokens in chunks of 256): after step
  // 0, the forward's steps 1-8 (all queries against half the keys) and 9-14 (half the queries,
  // against all of them), each with its send, are two runs of identical steps held as one task
  // each, repeat 8 and 6; step 15, without a send, stays alone. What is summed counts every step.
  const ModelSpec m = load_repo_model("llama3-8b.json");
  Plan p = cp_plan(CpComm::kP2p);
  p.cp = 16;
  const std::vector<Task> f = layer_forward_tasks(m, p);
  const std::vector<Task> steps = expand_repeats(f);
  auto repeats = [](const std::vector<Task>& tasks) {
    std::vector<std::int32_t> r;
    for (const Task& t : tasks) r.push_back(t.repeat);
    return r;
  };
  EXPECT_EQ(repeats(named(f, "attention_step")), (std::vector<std::int32_t>{8, 6, 1}));
  const std::vector<Task> sends = named(f, "cp_send_recv_kv");
  EXPECT_EQ(repeats(sends), (std::vector<std::int32_t>{1, 8, 6}));
  EXPECT_TRUE(sends[1].repeat_first);  // a run's step begins with its send
  EXPECT_FALSE(named(f, "attention_step")[0].repeat_first);
  EXPECT_EQ(named(steps, "attention_step").size(), 15u);
  EXPECT_EQ(named(steps, "cp_send_recv_kv").size(), 15u);
  EXPECT_LT(f.size() + 30, steps.size());
  // The run is the steps: compacting the steps gives it back, task for task.
  std::vector<Task> again = steps;
  compact_repeats(again);
  EXPECT_EQ(again, f);
  // Bytes sent, FLOPs and time count every step.
  EXPECT_EQ(sent(f), sent(steps));
  EXPECT_EQ(sends[1].bytes_sent(), 8 * bytes_sent_per_rank(Collective::kSendRecv,
                                                           sends[1].message_bytes, p.cp));
  const auto rates = plan_rates(p, gpu_preset("H100-80GB").value(), std::nullopt);
  ASSERT_TRUE(rates.ok()) << rates.status().message();
  const Task run = named(f, "attention_step")[0];  // a copy: named() returns by value
  EXPECT_DOUBLE_EQ(task_time_s(run, *rates), 8.0 * task_copy_time_s(run, *rates));
  double run_s = 0, steps_s = 0;
  for (const Task& t : f) run_s += task_time_s(t, *rates);
  for (const Task& t : steps) steps_s += task_time_s(t, *rates);
  EXPECT_NEAR(run_s, steps_s, 1e-12 * steps_s);
  EXPECT_DOUBLE_EQ(step_flops(m, p).model, step_flops(m, cp_plan(CpComm::kAllGather)).model);
  Plan gather = p;
  gather.cp_comm = CpComm::kAllGather;
  EXPECT_EQ(sent(f), sent(layer_forward_tasks(m, gather)));
  EXPECT_EQ(comm_volume_on_stage(m, p, 0).cp_bytes, comm_volume_on_stage(m, gather, 0).cp_bytes);
  // Backward: step 1 (K and V alone) and step 0 (the gradients alone, causal) stay alone;
  // steps 2-8 and 9-15 are runs of 7.
  const std::vector<Task> b = layer_backward_tasks(m, p);
  EXPECT_EQ(repeats(named(b, "cp_send_recv_kv_dkv")), (std::vector<std::int32_t>{1, 7, 7, 1}));
}

TEST(CpComm, EveryRingFormsRunsAreItsStepsAtEveryCp) {
  // For each ring form, compiled and eager, at cp 2 to 16, forward and backward: the runs
  // written out and compacted again are the runs, and the steps the frameworks issue are there
  // one by one: TE's cp kernels, PyTorch's cp SDPAs and rotations.
  ModelSpec m = load_repo_model("llama3-8b.json");
  for (CpComm form : {CpComm::kP2p, CpComm::kTorchAllGather, CpComm::kTorchAllToAll})
    for (Elementwise e : {Elementwise::kFused, Elementwise::kEager})
      for (std::int64_t cp : {2, 4, 8, 16}) {
        Plan p = cp_plan(form);
        p.cp = cp;
        p.elementwise = e;
        const std::string what =
            std::string(to_string(form)) + " cp " + std::to_string(cp) +
            (e == Elementwise::kEager ? " eager" : "");
        for (const std::vector<Task>& runs : {layer_forward_tasks(m, p), layer_backward_tasks(m, p)}) {
          std::vector<Task> again = expand_repeats(runs);
          EXPECT_EQ(of(again, TaskKind::kAttention).size(), static_cast<std::size_t>(cp)) << what;
          compact_repeats(again);
          EXPECT_EQ(again, runs) << what;
          for (const Task& t : runs) EXPECT_GE(t.repeat, 1) << what;
        }
      }
  // PyTorch's backward rotates dK/dV beside the next step's kernel: its runs begin after a
  // step's kernel (dK/dV added, then rotated beside dQ's update and the next kernel).
  Plan torch = cp_plan(CpComm::kTorchAllGather);
  torch.cp = 16;
  const std::vector<Task> b = layer_backward_tasks(m, torch);
  const auto first = std::find_if(b.begin(), b.end(), [](const Task& t) { return t.repeat_first; });
  ASSERT_NE(first, b.end());
  EXPECT_EQ(first->name, "cp_dkv_update");
  EXPECT_LT(b.size(), expand_repeats(b).size());
}

TEST(CpComm, RunsAreOnlyStepsThatEndBeforeTheNextBegins) {
  // compact_repeats on small lists: k a kernel, c1 / c2 a ring exchange beside the next one or
  // two kernels.
  Task k;
  k.name = "k";
  k.kind = TaskKind::kMemory;
  k.bytes = 1;
  Task c1;
  c1.name = "c";
  c1.kind = TaskKind::kComm;
  c1.collective = Collective::kSendRecv;
  c1.group = CommGroup::kCp;
  c1.group_size = 4;
  c1.message_bytes = 64;
  c1.beside = 1;
  Task c2 = c1;
  c2.beside = 2;
  auto with = [](Task t, std::int32_t repeat, bool first) {
    t.repeat = repeat;
    t.repeat_first = first;
    return t;
  };
  // Each exchange beside its step's kernel: three steps, one run.
  std::vector<Task> v{c1, k, c1, k, c1, k};
  compact_repeats(v);
  EXPECT_EQ(v, (std::vector<Task>{with(c1, 3, true), with(k, 3, false)}));
  EXPECT_EQ(expand_repeats(v), (std::vector<Task>{c1, k, c1, k, c1, k}));
  // Each exchange beside this step's kernel and the next one's: no step ends before the next.
  v = {c2, k, c2, k, c2, k};
  compact_repeats(v);
  EXPECT_EQ(v, (std::vector<Task>{c2, k, c2, k, c2, k}));
  // A window still open: the kernels beside the exchange are not part of a run.
  v = {c2, k, k, k, k};
  compact_repeats(v);
  EXPECT_EQ(v, (std::vector<Task>{c2, k, k, with(k, 2, true)}));
  // Two runs of the same length one after the other stay two (repeat_first marks each).
  Task k2 = k;
  k2.bytes = 2;
  v = {c1, k, c1, k, c1, k2, c1, k2};
  compact_repeats(v);
  EXPECT_EQ(v, (std::vector<Task>{with(c1, 2, true), with(k, 2, false), with(c1, 2, true),
                                  with(k2, 2, false)}));
  EXPECT_EQ(expand_repeats(v), (std::vector<Task>{c1, k, c1, k, c1, k2, c1, k2}));
  // Other groups' collectives are not held in runs.
  Task tp = c1;
  tp.group = CommGroup::kTp;
  v = {tp, k, tp, k};
  compact_repeats(v);
  EXPECT_EQ(v, (std::vector<Task>{tp, k, tp, k}));
}

TEST(CpComm, PlanFieldRoundTripsAndIsRefusedWhereItCannotApply) {
  Plan p = cp_plan(CpComm::kTorchAllToAll);
  // The default (all-gather) is not written; other values are, and read back.
  testing::expect_plan_choice_in_file(p, cp_plan(CpComm::kAllGather), &Plan::cp_comm, "cp_comm",
                                      "torch-alltoall", "ring");
  testing::expect_plan_choice_in_file(cp_plan(CpComm::kP2p), cp_plan(CpComm::kAllGather),
                                      &Plan::cp_comm, "cp_comm", "p2p", "ring");
  EXPECT_NE(describe(p).find(" cp-comm=torch-alltoall"), std::string::npos) << describe(p);
  Plan one = p;
  one.cp = 1;
  const Status st = validate_plan(one);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.message(),
            "cp_comm=torch-alltoall says how context parallelism moves keys and "
            "values; the plan has cp=1");
}

TEST(CpComm, ExpandedKvMovesEveryQueryHeadsKeysAndValues) {
  // Plan::cp_kv_expanded: the model's code repeats K and V to the query heads before the
  // attention the ring wraps (torchtitan's repeat_kv at 9dec370), so every exchange, copy and
  // gradient update of K and V is at the query width: 32 / 8 = 4 times Llama 3 8B's GQA bytes.
  // Nothing else of the layer changes, and the attention FLOPs are the same.
  const ModelSpec m = load_repo_model("llama3-8b.json");
  const double rep = static_cast<double>(m.q_width()) / static_cast<double>(m.kv_width());
  ASSERT_EQ(rep, 4.0);
  for (CpComm form : {CpComm::kTorchAllGather, CpComm::kTorchAllToAll, CpComm::kP2p,
                      CpComm::kAllGather, CpComm::kA2a}) {
    const Plan gqa = cp_plan(form);
    Plan wide = gqa;
    wide.cp_kv_expanded = true;
    ASSERT_TRUE(validate_plan(wide).ok());
    const std::vector<Task> f0 = forward_steps(m, gqa), f1 = forward_steps(m, wide);
    const std::vector<Task> b0 = backward_steps(m, gqa), b1 = backward_steps(m, wide);
    ASSERT_EQ(f0.size(), f1.size());
    ASSERT_EQ(b0.size(), b1.size());
    if (form == CpComm::kA2a) {
      // Ulysses: Q's all-to-all unchanged, K's and V's four times theirs.
      const std::vector<Task> q0 = named(f0, "cp_all_to_all_qkv"),
                              q1 = named(f1, "cp_all_to_all_qkv");
      ASSERT_EQ(q0.size(), 3u);
      EXPECT_EQ(q1[0].message_bytes, q0[0].message_bytes);
      EXPECT_EQ(q1[1].message_bytes, q0[1].message_bytes * 4);
      EXPECT_EQ(q1[2].message_bytes, q0[2].message_bytes * 4);
    } else {
      EXPECT_NEAR(static_cast<double>(sent(f1)), 4.0 * static_cast<double>(sent(f0)),
                  1e-9 * static_cast<double>(sent(f1)))
          << to_string(form);
      EXPECT_NEAR(static_cast<double>(sent(b1)), 4.0 * static_cast<double>(sent(b0)),
                  1e-9 * static_cast<double>(sent(b1)))
          << to_string(form);
      EXPECT_GT(sent(f0), 0) << to_string(form);
    }
    for (std::size_t i = 0; i < f0.size(); ++i) {
      EXPECT_EQ(f1[i].name, f0[i].name);
      EXPECT_EQ(f1[i].flops, f0[i].flops) << f0[i].name;
      if (f0[i].name.substr(0, 3) != "cp_" && f0[i].kind != TaskKind::kAttention) {
        EXPECT_EQ(f1[i].bytes, f0[i].bytes) << f0[i].name;
      }
    }
  }
  // The torch ring's K/V-sized kernels: the send buffer's cat four times the bytes.
  const Plan gqa = cp_plan(CpComm::kTorchAllGather);
  Plan wide = gqa;
  wide.cp_kv_expanded = true;
  EXPECT_DOUBLE_EQ(sum(named(forward_steps(m, wide), "cp_kv_cat"), &Task::bytes),
                   4.0 * sum(named(forward_steps(m, gqa), "cp_kv_cat"), &Task::bytes));
  EXPECT_DOUBLE_EQ(sum(named(backward_steps(m, wide), "cp_dkv_cat"), &Task::bytes),
                   4.0 * sum(named(backward_steps(m, gqa), "cp_dkv_cat"), &Task::bytes));
  EXPECT_GT(layer_backward_workspace_bytes(m, wide), layer_backward_workspace_bytes(m, gqa));
  // Round trip; written only when true; refused without context parallelism.
  const Result<Plan> back = plan_from_json(plan_to_json(wide), "round trip");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_TRUE(back->cp_kv_expanded);
  EXPECT_FALSE(plan_to_json(gqa).contains("cp_kv_expanded"));
  EXPECT_NE(describe(wide).find(" cp-kv-expanded"), std::string::npos) << describe(wide);
  Plan one = wide;
  one.cp = 1;
  one.cp_comm = CpComm::kAllGather;
  const Status st = validate_plan(one);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.message(),
            "cp_kv_expanded says what context parallelism's ring moves; the plan has cp=1");
}

}  // namespace
}  // namespace trainplan
