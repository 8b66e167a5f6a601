// Pipeline schedules: the order in which one pipeline stage runs the forward and backward passes
// of its micro-batches and model chunks. Tested by tests/simulator/schedule_test.cc.
//
//  - naive: one micro-batch (the whole per-replica batch), forward then backward.
//  - gpipe: all forwards, then all backwards (Huang et al. 2019).
//  - 1f1b: PipeDream-flush (Narayanan et al. 2021, sec. 2.2.1): pp - stage - 1 warm-up
//    forwards, then one forward one backward, then the cool-down backwards.
//  - interleaved: Megatron-LM's forward_backward_pipelining_with_interleaving (sec. 2.2.2):
//    (pp - stage - 1) * 2 + (v - 1) * pp warm-up forwards over v model chunks per stage.
//  - zb-h1: Qi et al. 2023, "Zero Bubble Pipeline Parallelism" (arXiv:2401.10241), sec. 2.1:
//    the backward split into B (input gradient) and W (weight gradient); 1F1B's order of F and
//    B, each stage's W passes held back by as many steps as it has fewer warm-up forwards than
//    the first stage, so every stage has pp micro-batches in flight (F to W) and the held-back
//    W passes fill the cool-down. Bubble (pp - 1)(T_F + T_B - T_W) against 1F1B's
//    (pp - 1)(T_F + T_B + T_W) (sec. 2.1), at 1F1B's peak activation memory on the first stage.
//  - zb-v: Qi et al. 2024, "Pipeline Parallelism with Controllable Memory" (arXiv:2405.15362),
//    and the zero-bubble paper's sec. 6 (ZB-V): two chunks per stage in a V (plan.h's
//    chunk_stage), the backward split into B and W as in zb-h1. The order is built as the
//    reference implementation builds it (sail-sg/zero-bubble-pipeline-parallelism,
//    megatron/core/pipeline_parallel/zerobubble/scheduler/zbv.py: a greedy list schedule over
//    passes with their F, B and W costs and a memory cap of 2pp chunk activations per stage,
//    W passes filling where nothing else is ready), with a simpler rule: the pass that can
//    start earliest, on ties B of the first chunk, B of the second, F of the second, F of the
//    first, and W where the stage would otherwise wait; a pass that depends on a neighbouring
//    stage waits a pipeline send longer (PassCosts::communication, the reference's c_cost;
//    tested in tests/simulator/schedule_test.cc). The simulator and the executor both take
//    the costs from order_costs below, so they play one order for the same inputs.
//    Peak: 2pp chunk activations on every
//    stage = pp micro-batches of a 1F1B stage, 1F1B's first stage (the paper's "same memory as
//    1F1B"). With T_F = T_B = T_W per chunk the step takes 6M + pp - 1 passes for pp <= 4 (the
//    lower bound: the last stage cannot start before pp - 1), a few more for larger pp
//    (tests/simulator/schedule_test.cc records both).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/cluster_spec.h"
#include "core/cost/compute_model.h"
#include "core/model_spec.h"
#include "core/plan.h"
#include "core/status.h"

namespace trainplan::sim {

// Which part of a backward a step runs: all of it, or (zero-bubble schedules) B, the input
// gradient the previous stage waits for, or W, the weight gradient nobody waits for but the
// optimizer.
enum class BackwardPart { kWhole, kInput, kWeight };

struct PipeStep {
  bool forward = true;
  BackwardPart part = BackwardPart::kWhole;  // backward steps only
  std::int64_t micro_batch = 0;
  // 0..v-1; the model chunk is stage_chunk(plan, stage, it); dualpipe: the direction
  std::int64_t virtual_chunk = 0;
  // DualPipe's F&B (DeepSeek-V3, arXiv:2412.19437, sec. 3.2.1; deepseek-ai/DualPipe's
  // _forward_backward_chunk): this forward and the backward after it, of the other direction,
  // run as one overlapped pair, each one's communication while the other computes.
  bool overlap_next = false;
};

std::vector<PipeStep> schedule_gpipe(std::int64_t micro_batches);
std::vector<PipeStep> schedule_1f1b(std::int64_t pp, std::int64_t stage,
                                    std::int64_t micro_batches);
// Plan::interleaved_warmup: `all_forwards_at_pp` is Megatron-LM's case of micro_batches == pp,
// every forward before any backward; torch.distributed.pipelining has none.
std::vector<PipeStep> schedule_interleaved(std::int64_t pp, std::int64_t stage,
                                           std::int64_t micro_batches,
                                           std::int64_t virtual_stages,
                                           bool all_forwards_at_pp = true);
std::vector<PipeStep> schedule_zb_h1(std::int64_t pp, std::int64_t stage,
                                     std::int64_t micro_batches);
// Stage `stage`'s DualPipe order (pp even, micro_batches even and >= 2pp: validate_plan's
// rules). Micro-batches 0 .. M/2-1 go in direction 0, the rest in direction 1.
std::vector<PipeStep> schedule_dualpipe(std::int64_t pp, std::int64_t stage,
                                        std::int64_t micro_batches);
// How many F&B pairs (PipeStep::overlap_next) stage `stage`'s DualPipe order holds, in closed
// form from the reference's phase lengths: two per step-4 iteration, one per step-5 iteration,
// less the middle stages' first step-4 pair, which runs unpaired. The planner's estimate
// credits each pair's overlap (tests/simulator/schedule_test.cc counts the order's marks).
std::int64_t dualpipe_overlapped_pairs(std::int64_t pp, std::int64_t stage,
                                       std::int64_t micro_batches);
// What one chunk's F, B and W passes cost, in any one unit: the ZB-V greedy places passes by
// when they can start (the reference's scheduler takes its f, b and w costs the same way).
// `communication`: one pipeline send between neighbouring stages in the same unit, added to
// every dependency that crosses stages (the V's turns stay on their stage and take none), as
// the reference's PipelineGraph adds its c_cost (zbv.py, try_v_schedule: a pass on the next
// stage starts no sooner than end_time + c_cost; Qi et al. 2023 sec. 3 give their automatic
// schedules the communication time between stages the same way).
struct PassCosts {
  double forward = 1, backward_input = 1, backward_weight = 1, communication = 0;
  // The sending stage waits for its send too (Megatron-LM's batch_isend_irecv + wait, the
  // simulator's default, SimOptions::overlap_p2p false); false: only the receiver waits.
  bool sender_waits = false;
};
// A layer's FLOPs of each pass (core/cost's forward, input-gradient and weight-gradient tasks),
// the ratios zb-v is ordered by (order_costs adds the send); communication 0.
PassCosts zb_v_pass_costs(const ModelSpec& model, const Plan& plan);
// The same costs with a pipeline send of `send_s` seconds, given in forward-FLOP units through
// the forward's time `forward_s` (the simulator's rates: a send takes as long as
// forward * send_s / forward_s FLOPs of forward). Unchanged when either time is not positive.
PassCosts with_send_time(PassCosts costs, double send_s, double forward_s);
// All stages' orders at once (the greedy builds them together). With a send
// (costs.communication > 0) the send-blind order and send-aware ones (waits of 0, one and two
// sends approved before a W fills them, or a lower-priority pass takes the stage) are each
// replayed with the sends (zb_v_step_length); a send-aware order is kept only where it replays
// at least 1% shorter than the send-blind one: never longer than the send-blind order.
std::vector<std::vector<PipeStep>> schedule_zb_v(std::int64_t pp, std::int64_t micro_batches,
                                                 const PassCosts& costs = {});
// A zb-v order replayed on every stage in order: each pass starts when its stage is free and
// its dependency in the V has ended (a send later across stages; the sender held for it too
// when costs.sender_waits). The step's length in the costs' unit.
double zb_v_step_length(const std::vector<std::vector<PipeStep>>& order,
                        std::int64_t micro_batches, const PassCosts& costs);
// What the pipeline order is built from besides the model and the plan: the machine the step
// runs on, as `simulate` is given it, and the simulator's switches that change zb-v's pass
// costs. The simulator (SimOptions) and the CPU executor (TrainOptions, `execute --cluster`)
// both fill one and build their order with order_costs and stage_schedule, so for the same
// inputs the executed order is the simulated one (tests/executor/parallel_check.cc checks
// the two traces pass by pass).
struct OrderInputs {
  // The cluster (its links, node size and GPU rates). None: zb-v orders by the send-blind FLOP
  // ratios (zb_v_pass_costs), the order `simulate --zb-v-send-blind` plays.
  std::optional<ClusterSpec> cluster;
  std::optional<HardwareProfile> hardware;  // measured rates and links replace the preset's
  std::string rank_order = "tp,cp,dp,pp";   // rank placement (RankLayout), innermost first
  bool uniform_compute = false;     // equal pass costs and no send (the simulator's tests)
  bool free_communication = false;  // no send
  bool overlap_p2p = false;         // the sender is not held for its send
  bool send_aware = true;           // false: zb-v's send-blind order
};
// The costs stage_schedule orders the plan's passes by: for zb-v the F, B and W FLOP ratios
// (zb_v_pass_costs) with one pipeline send in forward-FLOP units (with_send_time: a micro-batch's
// activations between the first ranks of stages 0 and 1, collectives.h's alpha-beta time over
// the intra-node link when they share a node, the inter-node link otherwise; a chunk's forward
// at the plan's rates, compute tasks only), the sender held unless overlap_p2p; {} for every
// other schedule, whose order does not depend on costs. A cluster whose GPU count is not the
// plan's world size, an unknown rank order or a precision the GPU lacks is an error naming it.
Result<PassCosts> order_costs(const ModelSpec& model, const Plan& plan, const OrderInputs& in);
// Whether the plan's schedule splits the backward into B and W steps.
bool splits_backward(const Plan& plan);
// The schedule of `stage` for the plan's schedule kind (`costs`: zb-v's pass costs).
std::vector<PipeStep> stage_schedule(const Plan& plan, std::int64_t stage,
                                     const PassCosts& costs = {});

}  // namespace trainplan::sim
