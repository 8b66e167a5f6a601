// The program of one training step: every simulated rank's operations on its streams, built from
// the cost model's tasks and the pipeline schedule, with what the report and the trace need to
// know about each operation. Built by build_program (program.cc), played by Engine. Tested
// through tests/simulator/ (tests/simulator/program_build_test.cc: the parallel build against
// the serial one, op for op).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "core/cost/cost_model.h"
#include "core/rank_layout.h"
#include "simulator/engine.h"
#include "core/schedule.h"
#include "simulator/simulator.h"
#include "simulator/topology.h"

namespace trainplan::sim {

// kCp last: a trace names it only for plans with context parallelism (chrome_trace).
enum class StreamKind : std::int32_t {
  kCompute = 0, kTp, kPpNext, kPpPrev, kDp, kEp, kHost, kCp, kCount
};
inline constexpr std::int32_t kStreamsPerRank = static_cast<std::int32_t>(StreamKind::kCount);
std::string_view to_string(StreamKind k);

// Groups as the report names them: those of comm_volume_on_stage (the embedding group's bytes
// count as pp, the expert replicas' as dp). cp is reported only for plans with cp > 1.
enum class ReportGroup : std::int8_t { kNone = -1, kTp = 0, kPp, kDp, kEp, kCp, kCount };
std::string_view to_string(ReportGroup g);

enum class MemKind : std::int8_t { kActivations, kBuffers, kInFlight };

// What the report and the trace need to know about an op beyond its timing. The simulated
// rank is not here (Program::slot_of): the ranks of a stage then carry the same metadata, and
// Program keeps it once.
// A compute op's roofline terms (core/cost/compute_model.h WorkShape, in floats): how much a
// collective in flight beside it slows it (core/cost/contention.h). All zero: not slowed.
struct OpShape {
  float compute_s = 0, memory_s = 0, overhead_s = 0, tiles = 0;
  bool operator==(const OpShape&) const = default;
  bool empty() const { return compute_s <= 0 && memory_s <= 0; }
};

struct OpMeta {
  std::string_view name;   // the cost model's task name, "send_forward", "optimizer", ...
  std::int32_t micro_batch = -1;
  std::int32_t layer = -1;  // global layer index, -1 outside layers
  char pass = ' ';          // 'F', 'B', 'R' (recompute), 'O' (optimizer), ' '
  ReportGroup group = ReportGroup::kNone;
  bool pipeline = false;    // compute op of the forward/backward passes (bubble accounting)
  bool optimizer = false;
  // A run's op (Task::repeat): the steps it stands for, said in the trace's labels (" x8").
  std::int32_t repeat = 1;
  std::int64_t bytes_sent = 0;  // this rank's payload (collectives.h convention), every step's
  OpShape shape;                // compute ops (contention)
  bool operator==(const OpMeta&) const = default;
};

struct MemEvent {
  std::int32_t op = 0;
  bool at_end = false;   // applied when the op ends (a free) or starts (an allocation)
  MemKind kind = MemKind::kActivations;
  double bytes = 0;      // signed
};

struct SlotInfo {
  std::int64_t rank = 0;
  RankCoord coord;
  std::int32_t first_stream = 0;  // slot * kStreamsPerRank
  // Its ops are first_op, first_op + 1, ... (a slot's program is built whole before the
  // next's), their metadata Program::meta_programs[meta_program], in op order.
  std::int32_t first_op = 0;
  std::int32_t meta_program = 0;
  MemoryBreakdown static_memory;  // weights, gradients, optimizer states (from memory_on_stage)
  std::vector<MemEvent> mem;
};

struct Program {
  Engine engine;
  // The ops' metadata, one sequence per slot, each distinct sequence kept once: with
  // all_ranks, the ranks of a stage share one (GPT-3 on 512 ranks: 8 sequences instead of
  // 512, 40 bytes less per op).
  std::vector<std::vector<OpMeta>> meta_programs;
  std::vector<SlotInfo> slots;
  // For each simulated slot in symmetric mode, how many world ranks it stands for.
  std::int64_t replicas_per_slot = 1;
  // The plan has cp > 1: reports and traces show the cp group and stream.
  bool context_parallel = false;
  explicit Program(std::int32_t num_links) : engine(num_links) {}

  std::int32_t slot_of(std::int32_t op) const { return engine.op(op).stream / kStreamsPerRank; }
  const OpMeta& meta(std::int32_t op) const {
    const SlotInfo& si = slots[static_cast<std::size_t>(slot_of(op))];
    return meta_programs[static_cast<std::size_t>(si.meta_program)]
                        [static_cast<std::size_t>(op - si.first_op)];
  }
};

// Builds the step's program. `layout` and `topology` describe the placement and the cluster.
void build_program(const ModelSpec& model, const ClusterSpec& cluster, const Plan& plan,
                   const SimOptions& options, const DeviceRates& rates, const RankLayout& layout,
                   const Topology& topology, Program& program);

}  // namespace trainplan::sim
