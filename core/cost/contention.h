// What a communication kernel takes from the compute that runs beside it (issue 23).
//
// While a collective is in flight its kernel holds SMs, one per CTA, exclusively: NCCL launches
// one CTA per channel, and "NCCL CTAs won't share an SM with compute kernels" (NVIDIA's answers
// in NVIDIA/nccl issues 689, 1424 and 1656). Its copies and reductions also stream through device
// memory: "300GB/s needs to be multiplied by at least 2x for memory bandwidth, as we need to store
// to memory, then read back from it. If you add reading from or writing to user data, it can be
// 3x" (NVIDIA/nccl issue 1428). The compute kernels beside it run on what is left:
//  - a GEMM's or attention kernel's compute term spreads its output tiles over the SMs left, so
//    it takes waves(sm_count - held) / waves(sm_count) of its time (the compute model's own wave
//    quantization, compute_model.h: a 132-tile GEMM on an H100 beside NCCL's 24-CTA all-gather
//    runs two waves instead of one, the doubling the NVIDIA forum thread "Compute-Communication
//    Overlap Causes Severe GEMM Performance Degradation because of Tail Effect" measured);
//  - a memory term takes hbm / (hbm - held bandwidth).
// Nothing is fitted to the published runs: the channel counts are NCCL's (below), the bandwidth
// factor the maintainer's, the slowdown the compute model's. The simulator charges it only while
// a collective is in flight beside the compute (simulator/engine.h); the planner's estimate in
// closed form where it overlaps collectives with compute (planner/estimate.cc).
// Tested by tests/core/contention_test.cc.
#pragma once

#include <cstdint>

#include "core/cluster_spec.h"
#include "core/cost/collectives.h"
#include "core/cost/compute_model.h"
#include "core/cost/cost_model.h"

namespace trainplan {

// What one collective holds on each of its ranks while it runs.
struct CommHold {
  double sms = 0;              // SMs its CTAs occupy
  double hbm_bytes_per_s = 0;  // device-memory traffic of its copies and reductions
  bool empty() const { return sms <= 0 && hbm_bytes_per_s <= 0; }
  CommHold& operator+=(const CommHold& o) {
    sms += o.sms;
    hbm_bytes_per_s += o.hbm_bytes_per_s;
    return *this;
  }
  CommHold& operator-=(const CommHold& o) {
    sms -= o.sms;
    hbm_bytes_per_s -= o.hbm_bytes_per_s;
    return *this;
  }
};

// The kernels that carry a collective.
enum class CommKernels {
  kNccl,         // NCCL's: one CTA per channel (nccl_channels)
  // Transformer Engine's userbuffers (transformer_engine/pytorch/module/base.py, initialize_ub):
  // the reduce-scatters after a GEMM ("pipeline") and the bulk overlaps run as kernels on
  // num_sm SMs, 16 by default (add_ub); the all-gathers feeding a GEMM ("ring_exchange") go
  // over copy engines and take no SM. A bulk overlap (the backward's; set_sm_margin False in TE's
  // defaults and in every NeMo config) holds its SMs while it runs, beside a GEMM launched on all
  // of them: kUserbuffersSm.
  kUserbuffersSm,
  // The forward's pipelined reduce-scatter with set_sm_margin, as NeMo's per-model configs set
  // it on every "pipeline" entry (nemo/collections/llm/recipes/tp_overlap_configs/
  // userbuffers.py): the GEMM beside it is launched on sm_count - num_sm SMs for all of its
  // run (kUserbufferSms; the simulator and the estimate charge it on the GEMM), so the
  // collective holds no further SM beside it, only its bandwidth.
  kUserbuffersMargin,
  kCopyEngine,   // cudaMemcpy between devices: no SM, the bytes still cross device memory
  // DeepSeek-V3's expert all-to-all kernels (arXiv:2412.19437 sec. 3.2.2: "20 SMs suffice to
  // use IB and NVLink fully"; sec. 3.5.1: "20 out of the 132 SMs available in the H800 GPU"),
  // also DeepEP's default (deep_ep Buffer.num_sms = 20): the dispatcher of the overlapped MoE
  // schedules (DualPipe, Megatron-Core's overlap_moe_expert_parallel_comm with DeepEP).
  kExpertDispatch,
};

// NCCL's channels (one CTA each) for a ring or tree collective of `message_bytes` (the full
// buffer, collectives.h's S) over a group with `per_node` ranks in each of `nodes` nodes, on a
// node of `gpu`s behind an NVSwitch with one NIC per GPU. From NCCL's code (v2.21.5; v2.27.3
// where it differs), not from any run:
//  - src/graph/search.cc ncclTopoCompute: the ring search tries per-channel speeds from the
//    architecture's speed array (speedArrayIntra/Inter; sm90 and, from 2.25, sm100 arrays), keeps
//    the first solution with the most channels x speed, and stops when that fills the GPU's total
//    NVLink bandwidth (links x SMxx_NVLINK_BW, src/graph/topo.h: 20.0 GB/s per link on Volta and
//    Ampere, 20.6 on Hopper, 40.0 on Blackwell) or the next speed is below 0.49 of the best. Inside
//    a node that is total / speed channels; across nodes, one channel per NIC the group's GPUs in
//    the node reach (min(per_node, ClusterSpec::nics_per_node)), at the fastest speed the
//    GPU-to-NIC path carries: the NIC's line rate and the PCIe link (NCCL's PCI model, width x
//    GT/s / 80: gen3 x16 12, gen4 24, gen5 48 GB/s);
//  - ncclTopoDupChannels (search.cc:835): doubles them (to at most MAXCHANNELS/2) unless the
//    speed is below 25, or, on ccMin > 80, below 50 with more than 4 channels;
//  - ncclTopoPostset (src/graph/connect.cc, "Duplication should be complete now"): doubles again,
//    to at most MAXCHANNELS (32; 64 from 2.25, Blackwell's first release); on Hopper across nodes
//    ("Use 4 compute channels per search channel to reach peak BW on <8 PPN") once more when
//    still under 16 and the speed is above 45;
//  - src/enqueue.cc getChannnelThreadInfo (line 1590): "while (nBytes < nc * nt *
//    threadThreshold) nc--", nt = 512 threads, threshold 64 (NCCL_SIMPLE_THREAD_THRESHOLD):
//    small messages run on fewer channels.
// This gives 24 on an 8-GPU A100 or H100 node, 16 on an H800 node, 32 on a B200 node, 16 across
// nodes of 8 GPUs with 8 NICs (A100: NVIDIA's "on DGX with 8 NICs ... it would use 16 SMs",
// nccl issue 689), 2 (A100) or 4 (H100) across nodes with one GPU of each. The logs agree: 24 coll
// channels on an 8-GPU H100 node (NCCL 2.27), 16 on an H800 node (nccl issue 892), 16 across
// nodes of A800s. NVLS (NVLink SHARP, Hopper; 16 channels, NCCL_NVLS_NCHANNELS in
// src/transport/nvls.cc) is not modelled: the presets' link rates are ring rates.
std::int64_t nccl_channels(const ClusterSpec& cluster, std::int64_t nodes, std::int64_t per_node,
                           std::int64_t message_bytes);
// TE userbuffers' num_sm default (add_ub in initialize_ub).
inline constexpr double kUserbufferSms = 16;
// NCCL's channels for a send/recv or an all-to-all among `ranks` ranks (src/graph/paths.cc
// ncclTopoComputeP2pChannels: p2pnChannels = nextPow2(the collective channels); per peer
// 2 x NVLinks inside a node, 2 per NIC across nodes, rounded to a power of two; src/enqueue.cc
// scheduleP2pTasksToPlan: a send spreads over as many of its peer's channels as its size needs,
// chunks of at most 32 x 128 KiB inside a node and 128 KiB across; an all-to-all reaches every
// peer and so every p2p channel).
std::int64_t nccl_p2p_channels(const ClusterSpec& cluster, Collective c, std::int64_t nodes,
                               std::int64_t per_node, std::int64_t message_bytes);

// The hold of collective `c` over `nodes` x `per_node` ranks carried by `kernels`, which takes
// `seconds` on an idle network: the SMs above, and device-memory traffic of three times the bytes
// it sends per second (issue 1428's "it can be 3x": each byte received is written by the peer,
// read back, and the user buffer read or written; zero-length collectives hold only SMs).
CommHold comm_hold(const ClusterSpec& cluster, CommKernels kernels, Collective c,
                   std::int64_t message_bytes, std::int64_t nodes, std::int64_t per_node,
                   double seconds);

// How much longer a task of shape `w` takes beside collectives holding `held` (>= 1; 1 when
// nothing is held or the device's SM count is unknown): its compute term on the SMs left (waves
// of its tiles, or sm_count / (sm_count - held) for an untiled compute term), its memory term on
// the bandwidth left (held bandwidth capped at 0.9 of the device's), the launch overhead as is.
double contended_ratio(const WorkShape& w, std::int64_t sm_count, double hbm_bytes_per_s,
                       const CommHold& held);

}  // namespace trainplan
