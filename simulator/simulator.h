// Discrete-event simulator of one training step on every rank (issue 3).
//
// Contract used by the planner and the `simulate` tool. The implementation lives in this folder;
// it builds on models/ only (cost_model tasks, compute_model times, collectives, rank_layout):
//   program.cc   the step's operations per rank from the cost model and the schedule
//   schedule.cc  naive, GPipe, 1F1B and Megatron-LM's interleaved order
//   engine.cc    the event loop (integer ns clock), in-order streams, collectives, link sharing
//   topology.cc  the cluster graph (Boost.Graph) and collective times from collectives.h
//   timeline.cc  per-rank figures, memory over time and the Chrome trace
// Tests: ctest -R 'Schedule|Comm|Simulator|Topology|Engine|SimulateTool|Validation';
// benchmark: build/bench/simulator/bench_simulator.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/chrome_trace.h"
#include "core/cluster_spec.h"
#include "core/html_report.h"
#include "core/cost/compute_model.h"
#include "core/model_spec.h"
#include "core/plan.h"
#include "core/step_report.h"

namespace trainplan {

// How the data-parallel gradient sum is done. ring: NCCL-style ring / hierarchical all-reduce
// (DDP). gather_broadcast: torch.nn.DataParallel's gather to one GPU and broadcast back.
enum class DpAlgorithm { kRing, kGatherBroadcast };

struct SimOptions {
  std::optional<HardwareProfile> hardware;  // measured rates replace the GPU preset's
  std::string rank_order = "tp,cp,dp,pp";   // innermost first (Megatron-Core's default)
  bool all_ranks = false;       // simulate every rank instead of one replica per symmetric set
  bool free_communication = false;  // collectives take zero time (tests of pure schedules)
  // Tests of pure schedules: every layer's forward takes 1 unit (1 us), backward 2, recompute
  // 1; embedding, head and optimizer take none. Collectives keep their bytes.
  bool uniform_compute = false;
  bool collect_trace = false;   // fill SimResult::trace_json
  // With collect_trace: the trace goes to trace_sink as it is written (SimResult::trace_json
  // stays empty), and a trace estimated above trace_limit_bytes (0: no limit) is refused, with
  // its size, before the step is played (estimate_trace_bytes).
  ChromeTraceWriter::Sink trace_sink;
  double trace_limit_bytes = 0;
  bool collect_picture = false;  // fill SimResult::picture (simulate --html, plan --html)
  // Threads for the per-rank passes over the played program (0: every core). The result does
  // not depend on it.
  unsigned threads = 0;
  // Programs of at least this many simulated ranks are built rank by rank on `threads` threads
  // (unless 1) and merged (simulator/program.cc); smaller ones in place on one. The program
  // does not depend on it.
  // Set from the sweep in bench/results/simulator-build-parallel-2026-11-25/.
  std::int64_t parallel_build_min_slots = 64;
  // Progress of the play: (ops finished, ops in the program), about every 65,536 ops.
  std::function<void(std::int64_t, std::int64_t)> progress;
  DpAlgorithm dp_algorithm = DpAlgorithm::kRing;
  // Gradient buckets reduced while the backward pass runs (PyTorch DDP, Megatron-LM's
  // --overlap-grad-reduce). false: after the pipeline has drained (Megatron-LM's 2021 "local"
  // DDP, which all-reduces in finalize after forward_backward).
  bool overlap_grad_reduce = true;
  // false (Megatron-LM's default): the compute stream waits for its pipeline sends to finish
  // (batch_isend_irecv + wait). true: sends run behind compute (--overlap-p2p-communication).
  bool overlap_p2p = false;
  // DualPipe's F&B pairs overlapped (DeepSeek-V3 sec. 3.2.1; PipeStep::overlap_next). false:
  // each pair's forward, then its backward, as deepseek-ai/DualPipe runs them for a module
  // without overlapped_forward_backward (tests compare the two).
  bool dualpipe_overlap = true;
  // Collectives in flight take the SMs and device-memory bandwidth their kernels hold from the
  // compute beside them (core/cost/contention.h; the engine's fluid model). Applies on GPU
  // presets only: a measured hardware profile's rates were timed with nothing beside them on its
  // own machine (a CPU's MPI ranks hold no SM). false: collectives are free to the compute.
  bool comm_contention = true;
  // zb-v's order built with the pipeline send time (core/schedule.h schedule_zb_v: kept only
  // where it replays shorter than the send-blind order). false: the send-blind order
  // (`simulate --zb-v-send-blind`; the study schedules-zbv-dualpipe-estimate compares them).
  bool zb_v_send_aware = true;
  // When > 0 and the plan has more micro-batches than this, play two shorter steps (M1 and
  // M1 + pp micro-batches, M1 >= 2 pp) and extrapolate linearly in M. A pipeline of identical
  // micro-batches repeats the same pattern every micro-batch once filled, so times, bytes and
  // memory are linear in M beyond the fill and drain (tests/simulator check it against the full
  // simulation). The planner uses it; `simulate` plays every micro-batch unless asked.
  std::int64_t extrapolate_above_micro_batches = 0;
  // Play each run of identical steps (Task::repeat: a context-parallel ring's) step by step, one
  // op per step's task, instead of one op per run: the check that holding them as runs changes
  // nothing (`simulate --expand-repeats`; tests/simulator/simulator_test.cc). Slower.
  bool expand_repeats = false;
};

struct SimResult {
  // kind "predicted". ranks: one per pipeline stage (the rank with tp = dp = 0, standing for
  // its TP peers and DP replicas), or every rank with all_ranks; bytes_per_group sums all ranks.
  StepReport report;
  std::int64_t events = 0;      // events processed (for the events/s benchmark)
  std::int64_t ops = 0;         // operations in the simulated program
  std::int64_t simulated_ranks = 0;  // ranks played (one per stage unless all_ranks)
  std::string trace_json;       // Chrome trace (when collect_trace without a trace_sink)
  std::optional<html::StepPicture> picture;  // when collect_picture
  double pipeline_span_s = 0;   // start of the step to the last forward/backward op
  // Per report.ranks entry: the most (micro-batch, model chunk) pairs whose activations were
  // stored at once (1F1B: min(pp - stage, M); GPipe: M).
  std::vector<std::int64_t> peak_in_flight;
  bool extrapolated = false;    // figures extrapolated from two shorter steps (see SimOptions)
};

// The Chrome trace's size in bytes for a program of `ops` operations and `memory_changes`
// memory counter samples (measured averages per event; bench/results/trace_size).
double estimate_trace_bytes(std::int64_t ops, std::int64_t memory_changes);

// Simulates one optimizer step. Errors: the plan does not fit the model or the cluster size.
// Whether collectives take from the compute beside them in this simulation
// (SimOptions::comm_contention on a GPU preset: no measured profile, no uniform compute, a known
// SM count).
bool comm_contention_applies(const SimOptions& options, const GpuSpec& gpu);

Result<SimResult> simulate_step(const ModelSpec& model, const ClusterSpec& cluster,
                                const Plan& plan, const SimOptions& options);

}  // namespace trainplan
