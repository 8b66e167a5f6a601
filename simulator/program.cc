// Builds the program of one training step; see program.h.
//
// Dependencies follow Megatron-LM:
//  - TP (and EP) collectives sit between the compute kernels of a layer and block them (the
//    cost model's task lists give the order);
//  - a stage's forward of a micro-batch waits for the previous stage's activation send, its
//    backward for the next stage's gradient send; sends run on their own streams;
//  - data-parallel collectives run on the DP stream: gradient buckets (one per parameter block)
//    after the block's last backward, overlapping the rest of the backward pass; ZeRO-2/3
//    reduce-scatters after every micro-batch's backward of the block; ZeRO-3 parameter gathers
//    before each block's forward, recompute and backward, prefetched one block ahead; ZeRO-1/2
//    parameter all-gathers after the optimizer step, or under the next forward
//    (Plan::param_gather);
//  - the optimizer step waits for every gradient collective; with offload the gradients go to
//    the host over PCIe, the host steps, and the weights come back.
#include "simulator/program.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <tuple>

#include "core/cost/compute_model.h"
#include "core/cost/step_tasks.h"
#include "core/units.h"
#include "simulator/parallel.h"

namespace trainplan::sim {

std::string_view to_string(StreamKind k) {
  switch (k) {
    case StreamKind::kCompute: return "compute";
    case StreamKind::kTp: return "tp";
    case StreamKind::kPpNext: return "pp send next";
    case StreamKind::kPpPrev: return "pp send prev";
    case StreamKind::kDp: return "dp";
    case StreamKind::kEp: return "ep";
    case StreamKind::kHost: return "host";
    case StreamKind::kCp: return "cp";
    case StreamKind::kCount: break;
  }
  return "?";
}

std::string_view to_string(ReportGroup g) {
  switch (g) {
    case ReportGroup::kTp: return "tp";
    case ReportGroup::kPp: return "pp";
    case ReportGroup::kDp: return "dp";
    case ReportGroup::kEp: return "ep";
    case ReportGroup::kCp: return "cp";
    default: break;
  }
  return "?";
}

namespace {

double d(std::int64_t v) { return static_cast<double>(v); }

TimeNs to_ns(double seconds) { return static_cast<TimeNs>(std::llround(seconds * kNsPerS)); }

// The uniform_compute unit: one layer's forward.
constexpr TimeNs kUnitNs = 1000;

ReportGroup report_group_of(CommGroup g) {
  switch (g) {
    case CommGroup::kTp:
    case CommGroup::kExpertTp: return ReportGroup::kTp;
    case CommGroup::kPp:
    case CommGroup::kEmbedding: return ReportGroup::kPp;
    case CommGroup::kDp:
    case CommGroup::kDpReplica:
    case CommGroup::kExpertDp: return ReportGroup::kDp;
    case CommGroup::kEp: return ReportGroup::kEp;
    case CommGroup::kCp: return ReportGroup::kCp;
  }
  return ReportGroup::kNone;
}

StreamKind stream_of(CommGroup g) {
  switch (g) {
    case CommGroup::kTp:
    case CommGroup::kExpertTp: return StreamKind::kTp;
    case CommGroup::kEp: return StreamKind::kEp;
    case CommGroup::kCp: return StreamKind::kCp;
    default: return StreamKind::kDp;
  }
}

// A task list with its compute times, computed once per plan.
struct TimedTasks {
  std::vector<Task> tasks;
  std::vector<TimeNs> ns;
  std::vector<std::int32_t> partner;  // tp_overlap_partners (empty: nothing overlapped)
  std::vector<bool> fed;              // a GEMM an overlapped collective before it feeds
  std::vector<OpShape> shape;         // each compute task's roofline terms (contention)
};

OpShape op_shape(const Task& t, const DeviceRates& r) {
  if (t.kind == TaskKind::kComm) return {};
  const WorkShape w = work_shape(t, r);
  return {static_cast<float>(w.compute_s), static_cast<float>(w.memory_s),
          static_cast<float>(w.overhead_s), static_cast<float>(w.tiles)};
}

// Per slot and (chunk, micro-batch) (Builder::cm_index): the op of a pipeline send, and the
// first op of the pass that waits for the neighbour's send (-1: none). Filled by each slot's
// build, read by link_pipeline.
struct PipeTables {
  std::vector<std::vector<std::int32_t>> send_fwd, send_bwd, first_fwd, first_bwd;
};

// net_for's key: (group kind, group colour, collective, message bytes, rounds, the kernels that
// carry it).
using NetKey = std::tuple<int, std::int64_t, int, std::int64_t, std::int32_t, int>;
// A collective instance among simulated group members: (group kind, group colour, how many
// collectives of that kind the slot had issued before it); kind -1: an instance of one op.
using CollectiveKey = std::tuple<int, std::int64_t, std::int64_t>;

class Builder {
 public:
  Builder(const ModelSpec& m, const ClusterSpec& c, const Plan& p, const SimOptions& o,
          const DeviceRates& r, const RankLayout& l, const Topology& t, Program& prog)
      : model_(m), cluster_(c), plan_(p), opt_(o), rates_(r), layout_(l), topo_(t), prog_(prog),
        eng_(&prog.engine), M_(p.num_micro_batches()), split_(splits_backward(p)),
        layers_(chunk_layers(p, m)),
        step_tasks_(static_cast<std::size_t>(p.pp)), pipe_(std::make_shared<PipeTables>()) {
    first_layer_.assign(layers_.size(), 0);
    for (std::size_t c2 = 1; c2 < layers_.size(); ++c2)
      first_layer_[c2] = first_layer_[c2 - 1] + layers_[c2 - 1];
    const MicroBatchTasks& mbt = step_tasks_of(0).micro_batch;
    for (LayerKind kind : {LayerKind::kDense, LayerKind::kMoe}) {
      const ModelSpec lm = layer_model(m, kind);
      LayerWork& w = work_[static_cast<std::size_t>(kind)];
      w.fwd = timed(mbt.of(kind).forward);
      w.bwd = timed(mbt.of(kind).backward);
      w.bwd_input = timed(backward_input_tasks(mbt.of(kind).backward));
      w.bwd_weight = timed(backward_weight_tasks(mbt.of(kind).backward));
      w.weight_operand_bytes =
          splits_backward(p) ? layer_weight_gradient_operand_bytes(lm, p) : 0.0;
      w.rec = timed(mbt.of(kind).recompute);
      w.act_bytes = layer_activation_bytes(lm, p);
      w.kept_bytes = layer_kept_activation_bytes(lm, p);
      w.workspace_bytes = layer_backward_workspace_bytes(lm, p);
      if (o.uniform_compute) {
        // One op per layer pass: forward 1 unit, backward 2, recompute 1.
        w.fwd = uniform(w.fwd, 1);
        w.bwd = uniform(w.bwd, 2);
        // Split (zero-bubble schedules): B 1 unit, W 1 unit (Qi et al. 2023's T_B = T_W).
        w.bwd_input = uniform(w.bwd_input, 1);
        w.bwd_weight = uniform(w.bwd_weight, 1);
        if (!w.rec.tasks.empty()) w.rec = uniform(w.rec, 1);
      }
    }
    emb_f_ = timed(mbt.embedding_forward);
    emb_b_ = timed(mbt.embedding_backward);
    head_f_ = timed(mbt.head_forward);
    head_b_ = timed(mbt.head_backward);
    head_b_input_ = timed(backward_input_tasks(mbt.head_backward));
    head_b_weight_ = timed(backward_weight_tasks(mbt.head_backward));
    // Plan::defer_embedding_wgrad keeps the operands of the head's weight-gradient GEMM (its
    // input and the logits' gradient, Megatron-Core's embedding_activation_buffer and
    // grad_output_buffer) from the backward to the flush.
    head_weight_operand_bytes_ = deferred_head_operand_bytes(m, p);
    if (o.uniform_compute) {
      // No embedding or head.
      emb_f_ = uniform(emb_f_, 0);
      emb_b_ = uniform(emb_b_, 0);
      head_f_ = uniform(head_f_, 0);
      head_b_ = uniform(head_b_, 0);
      head_b_input_ = uniform(head_b_input_, 0);
      head_b_weight_ = uniform(head_b_weight_, 0);
    }
    const double e = bytes_per_element(p.precision);
    // This rank's tokens of a micro-batch (seq_len / cp of each sequence).
    const double tokens = d(tokens_per_micro_batch(m, p));
    const double norm_tokens = tokens / (p.sequence_parallel && p.tp > 1 ? d(p.tp) : 1.0);
    layer_input_bytes_ = checkpoint_input_bytes(m, p);
    embedding_out_bytes_ = norm_tokens * d(m.hidden_size) * (e + (m.dropout ? 1.0 : 0.0));
    logits_bytes_ = cross_entropy_bytes_per_logit(p) * tokens * d(padded_vocab(m, p.tp)) / d(p.tp);
    pp_message_bytes_ = mbt.pipeline_message_bytes;
  }

  void build() {
    // Simulated ranks: all of them, or one per pipeline stage (tp = cp = dp = 0), which stands
    // for its TP peers, CP peers and DP replicas (they run the same program at the same times).
    std::vector<std::int64_t> ranks;
    if (opt_.all_ranks) {
      for (std::int64_t r = 0; r < layout_.world_size(); ++r) ranks.push_back(r);
      prog_.replicas_per_slot = 1;
    } else {
      for (std::int64_t s = 0; s < plan_.pp; ++s) ranks.push_back(layout_.rank({0, 0, s}));
      prog_.replicas_per_slot = plan_.tp * plan_.cp * plan_.dp;
    }
    prog_.context_parallel = plan_.cp > 1;
    eng_->set_compute_spread(opt_.hardware ? opt_.hardware->rank_compute_spread : 0.0);
    slot_of_.assign(static_cast<std::size_t>(layout_.world_size()), -1);
    for (std::size_t i = 0; i < ranks.size(); ++i) add_slot(ranks, i);
    reserve_ops();
    const std::size_t n = prog_.slots.size();
    const std::size_t cm = static_cast<std::size_t>(plan_.num_chunks() * M_);
    pipe_->send_fwd.assign(n, std::vector<std::int32_t>(cm, -1));
    pipe_->send_bwd.assign(n, std::vector<std::int32_t>(cm, -1));
    pipe_->first_fwd.assign(n, std::vector<std::int32_t>(cm, -1));
    pipe_->first_bwd.assign(n, std::vector<std::int32_t>(cm, -1));
    order_costs_ = zb_v_costs();
    // One thread builds in place: the parallel build's merge is pure overhead there.
    if (static_cast<std::int64_t>(n) >= opt_.parallel_build_min_slots && opt_.threads != 1) {
      build_in_parallel();
    } else {
      for (std::size_t i = 0; i < n; ++i) {
        prog_.slots[i].first_op = static_cast<std::int32_t>(eng_->num_ops());
        build_rank(static_cast<std::int32_t>(i));
        keep_meta(i);
      }
    }
    link_pipeline();
  }

  Builder(const Builder&) = default;  // the parallel build's workers start as copies

 private:
  // A worker's net and collective, kept until merge_slot numbers them in the program.
  struct LocalNet {
    std::optional<NetKey> key;
    NetDemand demand;
  };
  struct LocalCollective {
    std::int32_t net = 0, participants = 0, ranks = 0;
    CollectiveKey key;
  };

  // Slots built at once by the parallel build. Two sets of workers take turns, each with an
  // engine that holds its slot's ops (GPT-3 on 512 ranks: about 3 MB) and is reused.
  static constexpr std::size_t kBuildBatchSlots = 8;

  // The parallel build: a batch of slots at a time, each built by its own worker into an engine
  // of its own, while the previous batch is merged into the program in slot order (merge_slot,
  // which gives every op, net and collective the id the serial build gives it). The merge
  // touches only the program and the merged slots, the workers only their own slots.
  void build_in_parallel() {
    for (std::int64_t s = 0; s < plan_.pp; ++s) step_tasks_of(s);  // the workers only read them
    const std::size_t n = prog_.slots.size();
    const std::size_t batch = std::min(n, kBuildBatchSlots);
    std::vector<Builder> workers(2 * batch, *this);
    std::vector<std::unique_ptr<Engine>> engines;
    for (std::size_t k = 0; k < 2 * batch; ++k) engines.push_back(std::make_unique<Engine>(0));
    const std::size_t batches = (n + batch - 1) / batch;
    for (std::size_t b = 0; b <= batches; ++b) {
      const std::size_t first = b * batch;
      const std::size_t count = b < batches ? std::min(batch, n - first) : 0;
      const std::size_t set = (b % 2) * batch, previous = batch - set;
      // Item 0 merges the previous batch (first, on the calling thread); the others build.
      parallel_for_index(count + 1, opt_.threads, [&](std::size_t k) {
        if (k > 0) {
          workers[set + k - 1].build_slot_alone(first + k - 1, *engines[set + k - 1]);
        } else if (b > 0) {
          for (std::size_t j = 0; j < batch && first - batch + j < n; ++j)
            merge_slot(first - batch + j, workers[previous + j]);
        }
      });
    }
  }

  // A worker builds slot i into `local`: its streams 0 .. kStreamsPerRank - 1, its ops, nets
  // and collectives numbered from 0.
  void build_slot_alone(std::size_t i, Engine& local) {
    local.clear_program();
    for (std::int32_t k = 0; k < kStreamsPerRank; ++k)
      local.add_stream(0, k == static_cast<std::int32_t>(StreamKind::kCompute));
    eng_ = &local;
    local_ = true;
    nets_.clear();
    local_nets_.clear();
    local_collectives_.clear();
    slot_meta_.clear();
    build_rank(static_cast<std::int32_t>(i));
  }

  // Appends worker w's slot i to the program, renumbered as the serial build numbers it: ops
  // after the earlier slots'; a net seen before (same key) keeps its id, others get the next
  // ones in the order the slot made them; a collective instance an earlier slot made is
  // joined, others get the next ids.
  void merge_slot(std::size_t i, Builder& w) {
    SlotInfo& si = prog_.slots[i];
    const auto offset = static_cast<std::int32_t>(eng_->num_ops());
    si.first_op = offset;
    std::vector<std::int32_t> net_of(w.local_nets_.size());
    for (std::size_t j = 0; j < net_of.size(); ++j) net_of[j] = merge_net(w.local_nets_[j]);
    std::vector<std::int32_t> collective_of(w.local_collectives_.size());
    for (std::size_t j = 0; j < collective_of.size(); ++j) {
      const LocalCollective& lc = w.local_collectives_[j];
      const std::int32_t net = net_of[static_cast<std::size_t>(lc.net)];
      const auto& [kind, color, seq] = lc.key;
      if (kind < 0) {
        collective_of[j] = eng_->add_collective(net, lc.participants, lc.ranks);
        continue;
      }
      auto& list = instances_[{kind, color}];
      if (static_cast<std::int64_t>(list.size()) <= seq)
        list.push_back(eng_->add_collective(net, lc.participants, lc.ranks));
      collective_of[j] = list[static_cast<std::size_t>(seq)];
    }
    eng_->append(*w.eng_, si.first_stream, collective_of);
    for (MemEvent& e : si.mem) e.op += offset;
    for (auto* table : {&pipe_->send_fwd, &pipe_->send_bwd, &pipe_->first_fwd, &pipe_->first_bwd})
      for (std::int32_t& id : (*table)[i])
        if (id >= 0) id += offset;
    std::swap(slot_meta_, w.slot_meta_);
    keep_meta(i);
  }

  std::int32_t merge_net(LocalNet& net) {
    if (net.key) {
      const auto it = nets_.find(*net.key);
      if (it != nets_.end()) return it->second;
    }
    const std::int32_t id = eng_->add_net(net.demand);  // copied: allocated on this thread
    if (net.key) nets_.emplace(*net.key, id);
    return id;
  }

  // Simulated rank i (world rank ranks[i]): its streams and the memory its stage holds throughout.
  void add_slot(const std::vector<std::int64_t>& ranks, std::size_t i) {
    SlotInfo si;
    si.rank = ranks[i];
    si.coord = layout_.coord(ranks[i]);
    si.first_stream = static_cast<std::int32_t>(i) * kStreamsPerRank;
    for (std::int32_t k = 0; k < kStreamsPerRank; ++k) {
      const std::int32_t id = eng_->add_stream(static_cast<std::int32_t>(i),
                                              k == static_cast<std::int32_t>(StreamKind::kCompute));
      TRAINPLAN_CHECK(id == si.first_stream + k) << "Program::slot_of needs slot-major streams";
    }
    const MemoryBreakdown mem = memory_on_stage(model_, plan_, si.coord.pp);
    si.static_memory.weights_bytes = mem.weights_bytes;
    si.static_memory.gradients_bytes = mem.gradients_bytes;
    si.static_memory.optimizer_bytes = mem.optimizer_bytes;
    si.static_memory.host_optimizer_bytes = mem.host_optimizer_bytes;
    si.static_memory.host_activation_bytes = mem.host_activation_bytes;
    si.static_memory.host_param_bytes = mem.host_param_bytes;
    si.static_memory.nvme_bytes = mem.nvme_bytes;
    prog_.slots.push_back(std::move(si));
    slot_of_[static_cast<std::size_t>(ranks[i])] = static_cast<std::int32_t>(i);
  }

  // Keeps slot i's metadata (slot_meta_) once: a slot whose ops carry the same metadata in the
  // same order as an earlier slot of its stage shares that slot's sequence.
  void keep_meta(std::size_t i) {
    SlotInfo& si = prog_.slots[i];
    std::vector<std::int32_t>& same_stage = meta_programs_of_stage_[si.coord.pp];
    for (std::int32_t k : same_stage) {
      if (prog_.meta_programs[static_cast<std::size_t>(k)] != slot_meta_) continue;
      si.meta_program = k;
      slot_meta_.clear();
      return;
    }
    si.meta_program = static_cast<std::int32_t>(prog_.meta_programs.size());
    same_stage.push_back(si.meta_program);
    prog_.meta_programs.push_back(slot_meta_);
    slot_meta_.clear();
  }

  // Room for the ops of the step, estimated from the layers' task counts.
  void reserve_ops() {
    const std::size_t n = prog_.slots.size();
    std::size_t per_layer = 4;
    for (const LayerWork& w : work_)
      per_layer =
          std::max(per_layer, w.fwd.tasks.size() + w.bwd.tasks.size() + w.rec.tasks.size() + 4);
    if (plan_.zero_stage == 3) per_layer += 6;
    const std::size_t estimate =
        n * static_cast<std::size_t>(M_) *
        (per_layer * static_cast<std::size_t>(model_.num_layers / plan_.pp + 1) + 40);
    eng_->reserve(estimate);
    slot_meta_.reserve(estimate / std::max<std::size_t>(n, 1));
  }

  // A group as one slot sees it, computed once per slot and kind.
  struct GroupInfo {
    bool ready = false;
    std::vector<std::int64_t> ranks;
    std::int64_t color = 0;
    std::int32_t participants = 0;  // members that are simulated
  };

  struct RankState {
    std::int32_t slot = 0;
    std::int64_t stage = 0;
    std::int32_t last_compute = -1;
    std::int32_t last_dp = -1;
    std::int32_t last_other_sync = -1;  // e.g. the sequence-parallel norm sum on the TP stream
    std::vector<std::int32_t> wait;  // ops the next compute op waits for
    std::array<std::int64_t, kCommGroupCount> coll_count{};  // collectives issued per CommGroup
    std::array<GroupInfo, kCommGroupCount> groups;          // by CommGroup
    // This slot's demands: (group kind, collective, message bytes, rounds, kernels, net).
    std::vector<std::tuple<int, int, std::int64_t, std::int32_t, int, std::int32_t>> nets;
    const StepTasks* step = nullptr;  // the stage's tasks and parameter blocks
    std::map<std::int64_t, std::size_t> block_of_layer;
    std::vector<std::int64_t> backwards_done;  // per block
    std::int32_t prefetch_gate = -1;  // ZeRO-3: first compute op of the previous block
    // Plan::zero3_backward_prefetch before-reduce: the gather issued ahead for the block the
    // backward reaches next (op -1: none), and the block and point it serves.
    std::int32_t ahead = -1;
    std::size_t ahead_block = 0;
    DpPoint ahead_point = DpPoint::kBeforeBackward;
    // The last zero3_gather was one issued ahead: it began during the block before, so what
    // the pass allocates starts with the pass's compute, not with the gather.
    bool gathered_ahead = false;
    // Plan::param_gather next-forward / aligned: the blocks whose overlapped parameter
    // all-gather has been issued this step.
    std::vector<bool> params_gathered;
    std::int32_t last_offload = -1;   // the latest gradient shard sent to the host
    std::vector<Task> deferred;       // collectives issued after the last backward
    std::int64_t deferred_head = 0;   // Plan::defer_embedding_wgrad: head wgrads kept this step
  };

  // The step's tasks of a stage, assembled on first use.
  const StepTasks& step_tasks_of(std::int64_t stage) {
    std::optional<StepTasks>& t = step_tasks_[static_cast<std::size_t>(stage)];
    if (!t) t = step_tasks(model_, plan_, stage);
    return *t;
  }

  // A run's task (Task::repeat) takes repeat times one copy's nanoseconds, as its steps' ops
  // would one after another; SimOptions::expand_repeats plays the steps instead.
  TimedTasks timed(const std::vector<Task>& tasks) const {
    if (opt_.expand_repeats && has_repeats(tasks)) return timed(expand_repeats(tasks));
    TimedTasks t;
    for (const Task& task : tasks) {
      t.ns.push_back(to_ns(task_copy_time_s(task, rates_)) * task.repeat);
      t.shape.push_back(op_shape(task, rates_));  // one copy's: contention slows it by a ratio
    }
    t.partner = tp_overlap_partners(tasks, plan_);
    t.fed.assign(t.partner.size(), false);
    for (std::size_t i = 0; i < t.partner.size(); ++i) {
      if (t.partner[i] < 0) continue;
      const auto g = static_cast<std::size_t>(t.partner[i]);
      if (t.partner[i] > static_cast<std::int32_t>(i)) t.fed[g] = true;
      // torch-async: the GEMM runs as tp chunks (tp_decomposed_gemm_s).
      if (plan_.tp_comm_overlap_impl == TpOverlapImpl::kTorchAsync)
        t.ns[g] = to_ns(tp_decomposed_gemm_s(tasks[g], plan_, rates_)) * tasks[g].repeat;
    }
    t.tasks = tasks;
    return t;
  }
  static TimedTasks uniform(const TimedTasks& in, TimeNs units) {
    TimedTasks t;
    Task task;
    task.name = "uniform";
    task.kind = TaskKind::kMemory;
    t.tasks.push_back(task);
    t.ns.push_back(units * kUnitNs);
    // Keep the collectives, so bytes stay those of the cost model.
    for (const Task& c : in.tasks)
      if (c.kind == TaskKind::kComm) {
        t.tasks.push_back(c);
        t.ns.push_back(0);
      }
    t.shape.assign(t.tasks.size(), OpShape{});
    if (units == 0 && t.tasks.size() == 1) return {};
    return t;
  }

  std::int32_t stream(const RankState& rs, StreamKind k) const {
    const std::int32_t first = local_ ? 0 : prog_.slots[static_cast<std::size_t>(rs.slot)].first_stream;
    return first + static_cast<std::int32_t>(k);
  }

  // A network demand (key: net_for's, none for a host transfer's). A worker keeps it until
  // merge_slot gives it its id in the program (an earlier slot's, for a key seen before).
  std::int32_t new_net(NetDemand demand, std::optional<NetKey> key = std::nullopt) {
    if (!local_) return eng_->add_net(std::move(demand));
    local_nets_.push_back({key, std::move(demand)});
    return static_cast<std::int32_t>(local_nets_.size() - 1);
  }
  // A collective instance; `key` (kind, group colour, the slot's count of that kind) names the
  // instance the group's other simulated members join (kind -1: only this op joins it).
  std::int32_t new_collective(std::int32_t net, std::int32_t participants, std::int32_t ranks = 0,
                              CollectiveKey key = {-1, 0, 0}) {
    if (!local_) return eng_->add_collective(net, participants, ranks);
    local_collectives_.push_back({net, participants, ranks, key});
    return static_cast<std::int32_t>(local_collectives_.size() - 1);
  }

  std::int32_t new_op(const RankState& rs, StreamKind k, TimeNs ns, OpMeta meta) {
    // A measured profile's per-rank speed (HardwareProfile::rank_compute_time_factor): the
    // compute ops of world rank r (the compute stream's, and the kernels on the data-parallel
    // stream) take factor[r] times the mean rank's. Without the field nothing changes.
    if (ns > 0 && (k == StreamKind::kCompute || k == StreamKind::kDp) && opt_.hardware &&
        !opt_.hardware->rank_compute_time_factor.empty()) {
      const double f = rank_compute_time_factor(
          *opt_.hardware, prog_.slots[static_cast<std::size_t>(rs.slot)].rank);
      if (f != 1.0) ns = static_cast<TimeNs>(std::llround(static_cast<double>(ns) * f));
    }
    const std::int32_t id = eng_->add_op(stream(rs, k), ns);
    slot_meta_.push_back(meta);
    if (window_) window_->push_back({segment_, chain_, id});
    return id;
  }

  std::int32_t compute(RankState& rs, TimeNs ns, OpMeta meta) {
    meta.pipeline = meta.pass == 'F' || meta.pass == 'B' || meta.pass == 'R' || meta.pass == 'W';
    const std::int32_t id = new_op(rs, StreamKind::kCompute, ns, meta);
    for (std::int32_t w : rs.wait) eng_->add_dep(w, id);
    rs.wait.clear();
    rs.last_compute = id;
    return id;
  }

  // The ranks of `rank`'s group of kind g, in ring order. Gradients are summed over the data-
  // parallel replicas and the context-parallel ranks, which hold the same weights; ZeRO shards
  // over all of them, or with hybrid sharding over a run of Plan::zero_shard_size of them.
  std::vector<std::int64_t> group_ranks(CommGroup g, std::int64_t rank) const {
    switch (g) {
      case CommGroup::kTp: return layout_.group(Axis::kTp, rank);
      case CommGroup::kCp: return layout_.group(Axis::kCp, rank);
      case CommGroup::kDp: return layout_.group(Axis::kZeroShard, rank);
      case CommGroup::kDpReplica: return layout_.group(Axis::kZeroReplica, rank);
      case CommGroup::kEp: return layout_.group(Axis::kEp, rank);
      case CommGroup::kExpertTp: return layout_.group(Axis::kExpertTp, rank);
      case CommGroup::kExpertDp: return layout_.group(Axis::kExpertDp, rank);
      case CommGroup::kEmbedding:
      case CommGroup::kPp: {
        const std::vector<std::int64_t> pp = layout_.group(Axis::kPp, rank);
        if (plan_.schedule != Schedule::kDualPipe || g == CommGroup::kPp)
          return {pp.front(), pp.back()};
        // DualPipe: the stage and its mirror, which holds the other copy of its chunks.
        const std::int64_t s = layout_.coord(rank).pp, n = plan_.pp;
        return {pp[static_cast<std::size_t>(std::min(s, n - 1 - s))],
                pp[static_cast<std::size_t>(std::max(s, n - 1 - s))]};
      }
    }
    return {rank};
  }

  std::int32_t canonical_link(std::int32_t link) const {
    if (opt_.all_ranks) return link;
    const std::int64_t gpu = link / kLinksPerGpu;
    const std::int64_t rep = layout_.rank({0, 0, layout_.coord(gpu).pp});
    return static_cast<std::int32_t>(rep * kLinksPerGpu + link % kLinksPerGpu);
  }

  // Keyed without `spread`: within one group kind every all-to-all carries the model's one
  // spread (the MoE layers' dispatch and combine), so the key still names one demand.
  // `rounds`: a run's collective (Task::repeat), that many exchanges back to back. The demand
  // holds, on each member while in flight, what `kernels` take (contention.h).
  std::int32_t net_for(int kind, std::int64_t color, Collective c, std::int64_t bytes,
                       const std::vector<std::int64_t>& group, bool dp_sum,
                       const RoutedSpread& spread, CommKernels kernels, std::int32_t rounds = 1) {
    const auto key = std::make_tuple(kind, color, static_cast<int>(c), bytes, rounds,
                                     static_cast<int>(kernels));
    auto it = nets_.find(key);
    if (it != nets_.end()) return it->second;
    NetDemand demand;
    if (!opt_.free_communication) {
      const SumAlgorithm algo = dp_sum && opt_.dp_algorithm == DpAlgorithm::kGatherBroadcast
                                    ? SumAlgorithm::kGatherBroadcast
                                    : SumAlgorithm::kRing;
      demand = topo_.collective_demand(
          c, bytes, group, algo, [this](std::int32_t l) { return canonical_link(l); }, spread);
      std::map<std::int64_t, std::int64_t> per_node;
      for (std::int64_t g : group) ++per_node[topo_.node_of(g)];
      const auto nodes = static_cast<std::int64_t>(per_node.size());
      const std::int64_t local = std::max<std::int64_t>(1, static_cast<std::int64_t>(group.size()) / nodes);
      demand.hold = comm_hold(cluster_, kernels, c, bytes, nodes, local,
                              demand.latency_s + demand.transfer_s);
    }
    demand.rounds = rounds;
    const std::int32_t id = new_net(std::move(demand), key);
    nets_.emplace(key, id);
    return id;
  }

  // A collective task of the cost model on rank rs: one op on the group's stream, joined with
  // the same collective of the other simulated members.
  const GroupInfo& group_info(RankState& rs, CommGroup g) {
    GroupInfo& info = rs.groups[static_cast<std::size_t>(g)];
    if (info.ready) return info;
    const std::int64_t rank = prog_.slots[static_cast<std::size_t>(rs.slot)].rank;
    info.ranks = group_ranks(g, rank);
    info.color = *std::min_element(info.ranks.begin(), info.ranks.end());
    for (std::int64_t r : info.ranks)
      if (slot_of_[static_cast<std::size_t>(r)] >= 0) ++info.participants;
    info.ready = true;
    return info;
  }

  // `kernels`: what carries it (contention.h); NCCL unless a TP overlap names another. The
  // expert all-to-alls of the overlapped MoE schedules (DualPipe, Plan::ep_overlap) run on
  // DeepSeek-V3's / DeepEP's dispatch kernels.
  std::int32_t collective(RankState& rs, const Task& t, OpMeta meta,
                          CommKernels kernels = CommKernels::kNccl) {
    if (kernels == CommKernels::kNccl && t.group == CommGroup::kEp &&
        t.collective == Collective::kAllToAll &&
        (plan_.ep_overlap || plan_.schedule == Schedule::kDualPipe))
      kernels = CommKernels::kExpertDispatch;
    const GroupInfo& gi = group_info(rs, t.group);
    const auto members = static_cast<std::int32_t>(gi.ranks.size());  // the whole group
    const int kind = static_cast<int>(t.group);
    std::int32_t net = -1;
    for (const auto& [k, c, bytes, rounds, kern, id] : rs.nets)
      if (k == kind && c == static_cast<int>(t.collective) && bytes == t.message_bytes &&
          rounds == t.repeat && kern == static_cast<int>(kernels))
        net = id;
    if (net < 0) {
      const bool dp_sum = t.group == CommGroup::kDp || t.group == CommGroup::kExpertDp ||
                          t.group == CommGroup::kDpReplica;
      net = net_for(kind, gi.color, t.collective, t.message_bytes, gi.ranks, dp_sum, t.spread,
                    kernels, t.repeat);
      rs.nets.emplace_back(kind, static_cast<int>(t.collective), t.message_bytes, t.repeat,
                           static_cast<int>(kernels), net);
    }
    meta.name = t.name;
    meta.group = report_group_of(t.group);
    meta.bytes_sent = t.bytes_sent();
    meta.repeat = t.repeat;
    const std::int32_t id = new_op(rs, stream_of(t.group), 0, meta);
    // The members that are simulated meet at the collective (all of them with all_ranks; in
    // symmetric mode the others are replicas of this rank, at the same point at the same time).
    if (gi.participants <= 1) {
      eng_->join(id, new_collective(net, 1, members));
      return id;
    }
    const std::int64_t seq = rs.coll_count[static_cast<std::size_t>(kind)]++;
    if (local_) {
      // Matched with the other members' instance when the slot is merged (merge_slot).
      eng_->join(id, new_collective(net, gi.participants, members, {kind, gi.color, seq}));
      return id;
    }
    auto& list = instances_[{kind, gi.color}];
    if (static_cast<std::int64_t>(list.size()) <= seq)
      list.push_back(eng_->add_collective(net, gi.participants, members));
    eng_->join(id, list[static_cast<std::size_t>(seq)]);
    return id;
  }

  // Plays a task list on the compute stream, with its TP/EP collectives inline. Returns the
  // first op. Plan::tp_comm_overlap: a TP collective paired with a GEMM (tt.partner) runs beside
  // it instead, the GEMM split in two (tp_overlapped_pair_s): a GEMM fed by the collective runs
  // its first (tp-1)/tp while the collective travels and its last chunk after it; a GEMM the
  // collective follows runs its first chunk, then the rest beside the collective, which what
  // follows waits for. The collective's kernels are Transformer Engine's userbuffers
  // (contention.h): an all-gather feeding its GEMM goes over copy engines, a collective after
  // its GEMM runs on 16 SMs, which the engine takes from the GEMM while it is in flight. A
  // collective with Task::beside (context parallelism's ring exchange) is issued when the compute
  // before it and what that waits for are done, and the compute op after the next `beside` ones
  // waits for it.
  std::int32_t tasks(RankState& rs, const TimedTasks& tt, OpMeta meta) {
    std::int32_t first = -1;
    std::int32_t gathering = -1;  // a collective feeding the GEMM ahead, which ends after it
    const TimeNs chunks = std::max<std::int64_t>(1, plan_.tp);
    auto partner_of = [&](std::size_t i) { return tt.partner.empty() ? -1 : tt.partner[i]; };
    // Task::beside collectives in flight: (op, compute ops still to run beside it).
    std::vector<std::pair<std::int32_t, std::int32_t>> beside;
    auto computed = [&]() {
      for (auto it = beside.begin(); it != beside.end();) {
        if (--it->second > 0) {
          ++it;
          continue;
        }
        rs.wait.push_back(it->first);
        it = beside.erase(it);
      }
    };
    for (std::size_t i = 0; i < tt.tasks.size(); ++i) {
      const Task& t = tt.tasks[i];
      std::int32_t id;
      if (t.kind == TaskKind::kComm && t.beside > 0) {
        id = collective(rs, t, meta);
        eng_->add_dep(rs.last_compute, id);
        for (std::int32_t w : rs.wait) eng_->add_dep(w, id);
        beside.emplace_back(id, t.beside);
      } else if (t.kind == TaskKind::kComm && partner_of(i) >= 0) {
        // Issued when the compute before it is done; the compute stream goes on (the GEMM's
        // last chunk waits for it).
        id = collective(rs, t, meta, CommKernels::kCopyEngine);
        eng_->add_dep(rs.last_compute, id);
        for (std::int32_t w : rs.wait) eng_->add_dep(w, id);
        gathering = id;
      } else if (t.kind == TaskKind::kGemm && !tt.fed.empty() && tt.fed[i]) {
        OpMeta m = meta;
        m.name = t.name;
        m.shape = tt.shape[i];
        const TimeNs last = tt.ns[i] / chunks;
        id = compute(rs, tt.ns[i] - last, m);
        if (gathering >= 0) rs.wait.push_back(gathering);
        compute(rs, last, m);
        gathering = -1;
      } else if (t.kind == TaskKind::kGemm && i + 1 < tt.tasks.size() &&
                 partner_of(i + 1) == static_cast<std::int32_t>(i)) {
        // The collective after this GEMM runs beside it: its first chunk, the collective, the
        // rest.
        OpMeta m = meta;
        m.name = t.name;
        m.shape = tt.shape[i];
        const TimeNs head = tt.ns[i] / chunks;
        id = compute(rs, head, m);
        // The forward's pipelined reduce-scatter: its GEMM launched with an SM margin for all of
        // its run; the backward's bulk overlaps: SMs held while in flight (contention.h).
        // torch-async: the partial chunks are pulled by copy engines (_pipelined_produce_and_
        // all2all's copy_ of a contiguous peer buffer: cudaMemcpyAsync), no SM margin.
        const bool torch_async = plan_.tp_comm_overlap_impl == TpOverlapImpl::kTorchAsync;
        const bool margin = !torch_async && gemm_direction(t) == GemmDirection::kForward;
        const std::int32_t rs_id =  // what follows waits
            collective(rs, tt.tasks[i + 1], meta,
                       torch_async ? CommKernels::kCopyEngine
                       : margin    ? CommKernels::kUserbuffersMargin
                                   : CommKernels::kUserbuffersSm);
        eng_->add_dep(id, rs_id);
        TimeNs rest = tt.ns[i] - head;
        if (margin && comm_contention_applies(opt_, cluster_.gpu)) {
          const OpShape& s = tt.shape[i];
          rest = static_cast<TimeNs>(std::llround(
              static_cast<double>(rest) *
              contended_ratio(WorkShape{s.compute_s, s.memory_s, s.overhead_s, s.tiles},
                              rates_.sm_count, rates_.hbm_bytes_per_s,
                              CommHold{kUserbufferSms, 0})));
        }
        compute(rs, rest, m);
        rs.wait.push_back(rs_id);
        if (torch_async) {  // the sum of the received partials, after the last transfer
          const Task red = tp_partials_reduce_task(t, plan_);
          OpMeta rm = meta;
          rm.name = red.name;
          rm.shape = op_shape(red, rates_);
          compute(rs, opt_.uniform_compute ? 0 : to_ns(task_time_s(red, rates_)), rm);
        }
        ++i;
      } else if (t.kind == TaskKind::kComm) {
        id = collective(rs, t, meta);
        eng_->add_dep(rs.last_compute, id);
        for (std::int32_t w : rs.wait) eng_->add_dep(w, id);
        rs.wait.clear();
        rs.wait.push_back(id);
        // A merged pass pair changes turns at each expert all-to-all (merged_pair).
        if (window_ && t.group == CommGroup::kEp) ++segment_;
      } else {
        OpMeta m = meta;
        m.name = t.name;
        m.shape = tt.shape[i];
        id = compute(rs, tt.ns[i], m);
      }
      if (t.kind != TaskKind::kComm) computed();
      if (first < 0) first = id;
    }
    // What the list's last compute ops ran beside, the next op waits for.
    for (const auto& pending : beside) rs.wait.push_back(pending.first);
    return first;
  }

  void mem(RankState& rs, std::int32_t op, bool at_end, MemKind kind, double bytes) {
    if (op < 0 || bytes == 0) return;
    prog_.slots[static_cast<std::size_t>(rs.slot)].mem.push_back({op, at_end, kind, bytes});
  }

  // Data-parallel collectives of one block at one point, on the DP stream after `after`.
  // Returns the last op issued (or -1).
  std::int32_t dp_tasks(RankState& rs, std::size_t bi, DpPoint point, std::int32_t after,
                        std::int32_t gate, OpMeta meta) {
    if (dp_point_count(plan_, rs.step->blocks[bi], point) == 0) return -1;
    std::int32_t last = -1;
    for (const Task& t : rs.step->dp(bi, point)) {
      if (t.group == CommGroup::kEmbedding ||
          (point == DpPoint::kAfterLastBackward && !opt_.overlap_grad_reduce)) {
        // Megatron-LM sums the tied embedding's two copies once the whole pipeline has
        // drained (finalize_model_grads); issued earlier it would hold the DP stream of the
        // last stage until the first stage finishes.
        rs.deferred.push_back(t);
        continue;
      }
      const std::int32_t id = t.kind == TaskKind::kComm ? collective(rs, t, meta)
                                                        : dp_stream_kernel(rs, t, meta);
      eng_->add_dep(after, id);
      eng_->add_dep(gate, id);
      if (t.kind == TaskKind::kComm) note_sync(rs, t, id);
      last = id;
    }
    return last;
  }

  // A kernel PyTorch launches on the collective's stream beside it (Plan::zero3_gather
  // per-tensor: the list all-gather's copies into each rank's view; Plan::zero1_collectives
  // per-rank: the list reduce-scatter's and all-gather's flattens and copies).
  std::int32_t dp_stream_kernel(RankState& rs, const Task& t, OpMeta meta) {
    meta.name = t.name;
    const TimeNs ns = opt_.uniform_compute ? 0 : to_ns(task_time_s(t, rates_));
    return new_op(rs, StreamKind::kDp, ns, meta);
  }

  // Remembers the latest gradient/parameter collective on each stream (streams run in order,
  // so waiting for it waits for all before it).
  void note_sync(RankState& rs, const Task& t, std::int32_t id) {
    if (stream_of(t.group) == StreamKind::kDp) rs.last_dp = id;
    else rs.last_other_sync = id;
  }

  // ZeRO-3: gather a block's parameters before it computes (prefetched: the gather may start
  // once the previous block has started), and hold them until the block's compute ends.
  std::int32_t zero3_gather(RankState& rs, std::size_t bi, DpPoint point, OpMeta meta) {
    rs.gathered_ahead = rs.ahead >= 0 && rs.ahead_block == bi && rs.ahead_point == point;
    if (rs.gathered_ahead) {
      // Issued ahead by the block before it in the backward (zero3_gather_ahead).
      const std::int32_t g = rs.ahead;
      rs.ahead = -1;
      rs.wait.push_back(g);
      zero3_copies(rs, bi, point, meta);
      return g;
    }
    const std::int32_t g = zero3_issue(rs, bi, point, meta);
    if (g >= 0) rs.wait.push_back(g);
    zero3_copies(rs, bi, point, meta);
    return g;
  }

  // Plan::zero3_copies: the compute-stream copies beside a block's collectives at `point`
  // (zero3_compute_copies), each after the ops the compute stream waits for (the gather, or the
  // block's backward). A copy holds its output beside its input while it runs: half its bytes.
  void zero3_copies(RankState& rs, std::size_t bi, DpPoint point, OpMeta meta) {
    if (dp_point_count(plan_, rs.step->blocks[bi], point) == 0) return;
    for (const Task& t : rs.step->compute_copies(bi, point)) {
      meta.name = t.name;
      meta.shape = op_shape(t, rates_);
      const std::int32_t id =
          compute(rs, opt_.uniform_compute ? 0 : to_ns(task_time_s(t, rates_)), meta);
      mem(rs, id, false, MemKind::kBuffers, t.bytes / 2.0);
      mem(rs, id, true, MemKind::kBuffers, -t.bytes / 2.0);
    }
  }

  // Plan::zero3_backward_prefetch before-reduce: FSDP2's pre-backward hook, once this block's
  // gather is waited for, issues the gather of the block the backward reaches next
  // (FSDPParamGroup._backward_prefetch), before this block computes and reduce-scatters. The
  // gather is placed on the DP stream now, ahead of this block's reduce-scatter; the next
  // block's zero3_gather waits for it.
  void zero3_gather_ahead(RankState& rs, std::size_t bi, DpPoint point, OpMeta meta) {
    if (plan_.zero_stage != 3 ||
        plan_.zero3_backward_prefetch != ZeroBackwardPrefetch::kBeforeReduce || rs.ahead >= 0)
      return;
    const std::int32_t g = zero3_issue(rs, bi, point, meta);
    if (g < 0) return;
    rs.ahead = g;
    rs.ahead_block = bi;
    rs.ahead_point = point;
  }

  // The first point at which layer i of chunk c gathers in its backward: before its recompute
  // when the recompute gathers, else before its backward.
  DpPoint backward_gather_point(const RankState& rs, std::size_t c, std::int64_t i) const {
    const std::int64_t layer = first_layer_[c] + i;
    const std::size_t bi = rs.block_of_layer.at(layer);
    const LayerWork& w = work(layer);
    const bool full = recomputes_layer(plan_, i);
    const bool recomputes = !w.rec.tasks.empty() && (full || plan_.recompute != Recompute::kFull);
    if (recomputes && dp_point_count(plan_, rs.step->blocks[bi], DpPoint::kBeforeRecompute) > 0)
      return DpPoint::kBeforeRecompute;
    return DpPoint::kBeforeBackward;
  }
  // Issues ahead the gather of the block after layer i of chunk c in the backward: layer i - 1,
  // or the embedding below layer 0 of the first chunk.
  // The gather keeps the pass and layer it serves in its name ("R mb0 L3 ...").
  void gather_below_ahead(RankState& rs, std::size_t c, std::int64_t i, OpMeta meta) {
    if (i > 0) {
      const DpPoint point = backward_gather_point(rs, c, i - 1);
      meta.layer = static_cast<std::int32_t>(first_layer_[c] + i - 1);
      meta.pass = point == DpPoint::kBeforeRecompute ? 'R' : 'B';
      zero3_gather_ahead(rs, rs.block_of_layer.at(first_layer_[c] + i - 1), point, meta);
    } else if (c == 0) {
      meta.layer = -1;
      meta.pass = 'B';
      zero3_gather_ahead(rs, 0, DpPoint::kBeforeBackward, meta);
    }
  }

  // Issues a block's ZeRO-3 gather on the DP stream (and, offloaded, its shard's fetch) and
  // holds its buffer from the gather's start; returns it (or -1). The caller decides who waits.
  std::int32_t zero3_issue(RankState& rs, std::size_t bi, DpPoint point, OpMeta meta) {
    if (plan_.zero_stage != 3) return -1;
    const ParamBlock& b = rs.step->blocks[bi];
    // Offloaded parameters come over PCIe before every gather, and before every use when the
    // shard is the whole block (one rank per shard group: nothing to gather).
    const bool gathers = dp_point_count(plan_, b, point) > 0;
    const bool fetches = plan_.offload == Offload::kOptimizerParams &&
                         (gathers || plan_.zero_shard_ranks() == 1);
    if (!gathers && !fetches) return -1;
    const std::int32_t gate = fetches ? fetch_param_shard(rs, b, meta) : rs.prefetch_gate;
    // Per-tensor gathers are preceded by torch.cuda.synchronize() (Plan::zero3_gather): each
    // waits for all the compute queued before it, so none is prefetched under compute.
    const std::int32_t after =
        plan_.zero3_gather == ZeroGather::kPerTensor ? rs.last_compute : -1;
    const std::int32_t g = gathers ? dp_tasks(rs, bi, point, after, gate, meta) : gate;
    if (g < 0) return -1;
    const double bytes =
        d(b.dense_params + b.expert_params) * bytes_per_element(plan_.precision);
    mem(rs, g, false, MemKind::kBuffers, bytes);
    return g;
  }
  void block_begin(RankState& rs, std::int32_t first_compute) { rs.prefetch_gate = first_compute; }

  // Plan::param_gather next-forward / aligned: ZeRO-1/2's parameter all-gather of the step
  // before, which the block's first forward of this step waits for (one step in steady state:
  // the optimizer step ends the step, and its gathers run under the next step's forward).
  // next-forward: issued once the block before it has started (Megatron-Core's pre-hook waits
  // for one bucket and dispatches the next); aligned: all issued when the step starts.
  void overlapped_param_gather(RankState& rs, std::size_t bi, OpMeta meta) {
    if (plan_.param_gather == ParamGather::kAfterStep) return;
    if (rs.params_gathered.empty()) rs.params_gathered.assign(rs.step->blocks.size(), false);
    if (rs.params_gathered[bi]) return;
    rs.params_gathered[bi] = true;
    const std::int32_t gate =
        plan_.param_gather == ParamGather::kNextForward ? rs.prefetch_gate : -1;
    const std::int32_t g = dp_tasks(rs, bi, DpPoint::kAfterOptimizer, -1, gate, meta);
    if (g >= 0) rs.wait.push_back(g);
  }

  // Offload optimizer+params (ZeRO-Infinity, Rajbhandari et al. 2021, sec. 6): the block's
  // parameter shard comes from host memory over PCIe (from NVMe first, with offload_device
  // nvme, at this GPU's share of the node's drives) before its all-gather, prefetched as the
  // gather is: once the previous block has started. Returns what the gather waits for.
  std::int32_t fetch_param_shard(RankState& rs, const ParamBlock& b, OpMeta meta) {
    meta.pass = ' ';
    const double bytes = shard_params(b) * bytes_per_element(plan_.precision);
    std::int32_t after = rs.prefetch_gate;
    if (plan_.offload_device == OffloadDevice::kNvme) after = nvme_io(rs, bytes, "nvme_read_params", after, meta);
    const std::int32_t h2d = host_transfer(rs, bytes, false, "offload_params_h2d", after, meta);
    return h2d;
  }

  // This rank's ZeRO shard of a block: dense parameters over the shard group, experts over
  // their data-parallel ranks.
  double shard_params(const ParamBlock& b) const {
    return d(b.dense_params) / d(plan_.zero_shard_ranks()) +
           d(b.expert_params) / d(expert_dp_cp(plan_));
  }

  // Time on the host stream for `bytes` to or from the node's NVMe drives, this GPU's share.
  std::int32_t nvme_io(RankState& rs, double bytes, std::string_view name, std::int32_t after,
                       OpMeta meta) {
    const double bw = cluster_.nvme_bytes_per_s_per_node /
                      d(std::max<std::int64_t>(1, cluster_.gpus_per_node));
    meta.name = name;
    const TimeNs ns = opt_.uniform_compute || bw <= 0 ? 0 : to_ns(bytes / bw);
    const std::int32_t id = new_op(rs, StreamKind::kHost, ns, meta);
    eng_->add_dep(after, id);
    return id;
  }
  void zero3_release(RankState& rs, const ParamBlock& b, std::int32_t gather) {
    if (gather < 0) return;
    const double bytes =
        d(b.dense_params + b.expert_params) * bytes_per_element(plan_.precision);
    mem(rs, rs.last_compute, true, MemKind::kBuffers, -bytes);
  }

  // ZeRO-2/3: the block's full gradient is held from the start of its backward's first op to
  // the end of its reduce-scatter (`release`, after_backward); op -1: the last compute op.
  void grad_buffer(RankState& rs, const ParamBlock& b, std::int32_t op, bool release = false) {
    const double bytes = zero_grad_buffer_bytes(plan_, b);
    if (bytes <= 0) return;
    mem(rs, op >= 0 ? op : rs.last_compute, release, MemKind::kBuffers, release ? -bytes : bytes);
  }

  std::size_t chunk_index(std::int64_t v, std::int64_t stage) const {
    return static_cast<std::size_t>(stage_chunk(plan_, stage, v));
  }
  std::size_t cm_index(std::size_t chunk, std::int64_t mb) const {
    return chunk * static_cast<std::size_t>(M_) + static_cast<std::size_t>(mb);
  }

  // A PCIe transfer of `bytes` between this rank's GPU and the host, on the host stream after
  // op `after`; returns its op.
  std::int32_t host_transfer(RankState& rs, double bytes, bool to_host, std::string_view name,
                             std::int32_t after, OpMeta meta) {
    const std::int64_t rank = prog_.slots[static_cast<std::size_t>(rs.slot)].rank;
    NetDemand demand;
    if (!opt_.free_communication)
      demand = topo_.host_transfer_demand(rank, bytes, to_host,
                                          [this](std::int32_t l) { return canonical_link(l); });
    meta.name = name;
    const std::int32_t id = new_op(rs, StreamKind::kHost, 0, meta);
    eng_->join(id, new_collective(new_net(std::move(demand)), 1));
    eng_->add_dep(after, id);
    return id;
  }

  // Offloaded checkpoints (Plan::offload_checkpoints): fetches layer `i` of chunk `c`'s input
  // back to the device after op `after` (the start of the layer above it in the backward), and
  // has the layer's recompute wait for it.
  void fetch_checkpoint(RankState& rs, std::size_t c, std::int64_t i, std::int32_t after,
                        OpMeta meta) {
    if (!plan_.offload_checkpoints || i < 0 || !recomputes_layer(plan_, i)) return;
    meta.layer = static_cast<std::int32_t>(first_layer_[c] + i);
    meta.pass = ' ';
    const std::int32_t h2d = host_transfer(rs, layer_input_bytes_, false, "checkpoint_h2d", after, meta);
    mem(rs, h2d, false, MemKind::kActivations, layer_input_bytes_);
    fetched_[static_cast<std::size_t>(i)] = h2d;
  }

  // Runs `body` as one block pass; returns the first op of the pass (its gather, unless that
  // was issued ahead during the block before). `ahead` (when set) runs between the pass's
  // gather and its compute (zero3_gather_ahead).
  std::int32_t block_pass(RankState& rs, std::size_t bi, DpPoint point, const TimedTasks& tt,
                          OpMeta meta, const std::function<void()>& ahead = {}) {
    if (point == DpPoint::kBeforeForward) overlapped_param_gather(rs, bi, meta);
    const std::int32_t g = zero3_gather(rs, bi, point, meta);
    const bool gathered_ahead = rs.gathered_ahead;
    if (ahead) ahead();
    const std::int32_t first = tasks(rs, tt, meta);
    block_begin(rs, first >= 0 ? first : rs.last_compute);
    zero3_release(rs, rs.step->blocks[bi], g);
    return g >= 0 && !gathered_ahead ? g : first;
  }

  // A zero-time op on the compute stream that the neighbour's send completes (Megatron-LM's
  // blocking recv_forward / recv_backward), then what the receiver runs before the pass reads
  // the message (MicroBatchTasks::pipeline_receive: the scatter/gather's TP all-gather, which
  // the compute stream waits for; not when chunk `from` is on this stage: the V's turn, which
  // reads the output in place). Returns the receive op.
  std::int32_t recv(RankState& rs, std::string_view name, std::int64_t mb, std::size_t from) {
    OpMeta m;
    m.name = name;
    m.micro_batch = static_cast<std::int32_t>(mb);
    const std::int32_t id = compute(rs, 0, m);
    const bool local = chunk_stage(plan_, static_cast<std::int64_t>(from),
                                   pipeline_direction(plan_, mb)) == rs.stage;
    if (local) return id;
    for (const Task& t : rs.step->micro_batch.pipeline_receive) {
      OpMeta gm = m;
      const std::int32_t g = collective(rs, t, gm);
      eng_->add_dep(rs.last_compute, g);
      for (std::int32_t w : rs.wait) eng_->add_dep(w, g);
      rs.wait.clear();
      rs.wait.push_back(g);
    }
    return id;
  }

  // ZeRO-3 with a tied head in another chunk of the embedding's stage (ParamBlock::read_by_head):
  // the table is gathered again for the head's pass. Returns the gather (or -1).
  std::int32_t gather_table_for_head(RankState& rs, DpPoint point, OpMeta meta) {
    if (!rs.step->blocks.front().read_by_head) return -1;
    return zero3_gather(rs, 0, point, meta);
  }

  void forward(RankState& rs, std::int64_t mb, std::int64_t v) {
    const std::size_t c = chunk_index(v, rs.stage);
    const bool edges = !opt_.uniform_compute;  // embedding and head exist as ops
    std::int32_t anchor = -1;  // the forward's first op on this rank
    if (c > 0) {
      anchor = recv(rs, "recv_forward", mb, c - 1);
      pipe_->first_fwd[static_cast<std::size_t>(rs.slot)][cm_index(c, mb)] = anchor;
    }
    OpMeta meta;
    meta.micro_batch = static_cast<std::int32_t>(mb);
    meta.pass = 'F';
    if (c == 0) {
      const std::int32_t op = block_pass(rs, 0, DpPoint::kBeforeForward, emb_f_, meta);
      if (edges) mem(rs, op, false, MemKind::kActivations, embedding_out_bytes_);
      if (anchor < 0) anchor = op;
    }
    for (std::int64_t i = 0; i < layers_[c]; ++i) {
      const std::int64_t layer = first_layer_[c] + i;
      meta.layer = static_cast<std::int32_t>(layer);
      const std::size_t bi = rs.block_of_layer.at(layer);
      const LayerWork& w = work(layer);
      const std::int32_t op = block_pass(rs, bi, DpPoint::kBeforeForward, w.fwd, meta);
      if (anchor < 0) anchor = op;
      // Stored activations: the layer input when it is fully recomputed, else everything.
      mem(rs, op, false, MemKind::kActivations,
          recomputes_layer(plan_, i) ? layer_input_bytes_ : w.kept_bytes);
      if (plan_.offload_checkpoints && recomputes_layer(plan_, i)) {
        // The input goes to the host once the layer's forward is done, while the next one
        // computes; its device copy is freed when the copy ends.
        OpMeta tm = meta;
        tm.pass = ' ';
        const std::int32_t d2h =
            host_transfer(rs, layer_input_bytes_, true, "checkpoint_d2h", rs.last_compute, tm);
        mem(rs, d2h, true, MemKind::kActivations, -layer_input_bytes_);
      }
    }
    meta.layer = -1;
    if (c + 1 == layers_.size()) {
      const std::int32_t table = gather_table_for_head(rs, DpPoint::kBeforeForward, meta);
      const std::int32_t h = block_pass(rs, rs.step->blocks.size() - 1, DpPoint::kBeforeForward, head_f_, meta);
      zero3_release(rs, rs.step->blocks.front(), table);
      if (edges) mem(rs, h, false, MemKind::kActivations, logits_bytes_);
      if (anchor < 0) anchor = h;
    }
    mem(rs, anchor, false, MemKind::kInFlight, 1.0);
    if (c + 1 < layers_.size()) {
      OpMeta sm = meta;
      sm.pass = ' ';
      send(rs, StreamKind::kPpNext, sm, "send_forward", c, mb, pipe_->send_fwd);
    }
  }

  void backward(RankState& rs, std::int64_t mb, std::int64_t v) {
    const std::size_t c = chunk_index(v, rs.stage);
    const bool edges = !opt_.uniform_compute;
    if (c + 1 < layers_.size())
      pipe_->first_bwd[static_cast<std::size_t>(rs.slot)][cm_index(c, mb)] = recv(rs, "recv_backward", mb, c + 1);
    OpMeta meta;
    meta.micro_batch = static_cast<std::int32_t>(mb);
    meta.pass = 'B';
    if (c + 1 == layers_.size()) {
      const std::size_t head = rs.step->blocks.size() - 1;
      const std::int32_t table = gather_table_for_head(rs, DpPoint::kBeforeBackward, meta);
      // Plan::defer_embedding_wgrad: the step's first wgrad_deferral_limit micro-batches (all at
      // 0) keep their head weight gradient for the flush (drain_head_weight_gradients).
      const bool defer = !split_ && plan_.defer_embedding_wgrad &&
                         (plan_.wgrad_deferral_limit == 0 ||
                          rs.deferred_head < plan_.wgrad_deferral_limit);
      const std::int32_t pass = block_pass(rs, head, DpPoint::kBeforeBackward,
                                           split_ || defer ? head_b_input_ : head_b_, meta,
                                           [&] { gather_below_ahead(rs, c, layers_[c], meta); });
      zero3_release(rs, rs.step->blocks.front(), table);
      if (!split_ && !defer) grad_buffer(rs, rs.step->blocks[head], pass);
      if (edges) mem(rs, rs.last_compute, true, MemKind::kActivations, -logits_bytes_);
      if (defer) {
        ++rs.deferred_head;
        if (edges)
          mem(rs, rs.last_compute, false, MemKind::kActivations, head_weight_operand_bytes_);
      } else if (!split_) {
        after_backward(rs, head, meta);
      }
    }
    fetched_.assign(static_cast<std::size_t>(layers_[c]), -1);
    fetch_checkpoint(rs, c, layers_[c] - 1, rs.last_compute, meta);
    for (std::int64_t i = layers_[c] - 1; i >= 0; --i) backward_layer(rs, c, i, meta);
    meta.layer = -1;
    if (c == 0) {
      grad_buffer(rs, rs.step->blocks.front(),
                  block_pass(rs, 0, DpPoint::kBeforeBackward, emb_b_, meta));
      if (edges) mem(rs, rs.last_compute, true, MemKind::kActivations, -embedding_out_bytes_);
      after_backward(rs, 0, meta);
    }
    TRAINPLAN_CHECK(rs.ahead < 0) << "a ZeRO-3 gather issued ahead in the backward was not used";
    if (!split_) mem(rs, rs.last_compute, true, MemKind::kInFlight, -1.0);
    if (c > 0) {
      OpMeta sm = meta;
      sm.pass = ' ';
      send(rs, StreamKind::kPpPrev, sm, "send_backward", c, mb, pipe_->send_bwd);
    }
  }

  // Layer i of chunk c: its recompute (when it has one) and backward, the memory they hold and
  // free, then the block's gradient collectives.
  void backward_layer(RankState& rs, std::size_t c, std::int64_t i, OpMeta meta) {
    const std::int64_t layer = first_layer_[c] + i;
    meta.layer = static_cast<std::int32_t>(layer);
    const std::size_t bi = rs.block_of_layer.at(layer);
    const ParamBlock& b = rs.step->blocks[bi];
    const LayerWork& w = work(layer);
    const bool full = recomputes_layer(plan_, i);
    // The next layer's checkpoint comes back while this one is back-propagated; this one's,
    // fetched earlier, must be in before its recompute.
    fetch_checkpoint(rs, c, i - 1, rs.last_compute, meta);
    const std::int32_t fetched = fetched_[static_cast<std::size_t>(i)];
    if (fetched >= 0) rs.wait.push_back(fetched);
    // Full recompute runs the forward again in the layers it names; selective (unfused
    // attention) in every layer.
    // Plan::zero3_recompute_gather kept: the recompute's gather serves the backward too, so its
    // parameters are held until the backward ends.
    const bool keep = full && plan_.zero3_recompute_gather == ZeroRecomputeGather::kKept;
    // Plan::zero3_backward_prefetch before-reduce: the layer below's gather is issued right
    // after this layer's first gather of its backward, before its compute and reduce-scatter.
    const DpPoint first_point = backward_gather_point(rs, c, i);
    const std::function<void()> ahead = [&] { gather_below_ahead(rs, c, i, meta); };
    const std::function<void()> none;
    std::int32_t kept_gather = -1;
    if (!w.rec.tasks.empty() && (full || plan_.recompute != Recompute::kFull)) {
      OpMeta rm = meta;
      rm.pass = 'R';
      std::int32_t r = -1;
      if (keep) {
        kept_gather = zero3_gather(rs, bi, DpPoint::kBeforeRecompute, rm);
        const bool gathered_ahead = rs.gathered_ahead;
        if (first_point == DpPoint::kBeforeRecompute) ahead();
        const std::int32_t first = tasks(rs, w.rec, rm);
        block_begin(rs, first >= 0 ? first : rs.last_compute);
        r = kept_gather >= 0 && !gathered_ahead ? kept_gather : first;
      } else {
        r = block_pass(rs, bi, DpPoint::kBeforeRecompute, w.rec, rm,
                       first_point == DpPoint::kBeforeRecompute ? ahead : none);
      }
      if (full) mem(rs, r, false, MemKind::kActivations, w.act_bytes);
    }
    const std::int32_t pass =
        block_pass(rs, bi, DpPoint::kBeforeBackward, split_ ? w.bwd_input : w.bwd, meta,
                   first_point == DpPoint::kBeforeBackward ? ahead : none);
    zero3_release(rs, b, kept_gather);
    if (!split_) grad_buffer(rs, b, pass);
    const std::int32_t from = pass >= 0 ? pass : rs.last_compute;
    mem(rs, from, false, MemKind::kBuffers, w.workspace_bytes);
    mem(rs, rs.last_compute, true, MemKind::kBuffers, -w.workspace_bytes);
    const double stored = full ? layer_input_bytes_ + w.act_bytes : w.kept_bytes;
    // Split: B frees what W does not read; W's operands stay until W (weight_pass).
    mem(rs, rs.last_compute, true, MemKind::kActivations,
        -stored + (split_ ? w.weight_operand_bytes : 0.0));
    if (!split_) after_backward(rs, bi, meta);
  }

  // W of micro-batch mb in chunk v (zero-bubble schedules): the head's weight-gradient GEMM, then
  // each layer's, last layer first; the gradient is complete there, so the block's gradient
  // buffer and data-parallel collectives follow W, not B. Needs no parameter gather (dW = X^T
  // dY reads no weight). The micro-batch leaves flight when its last W ends.
  void weight_pass(RankState& rs, std::int64_t mb, std::int64_t v) {
    const std::size_t c = chunk_index(v, rs.stage);
    OpMeta meta;
    meta.micro_batch = static_cast<std::int32_t>(mb);
    meta.pass = 'W';
    if (c + 1 == layers_.size()) {
      const std::size_t head = rs.step->blocks.size() - 1;
      grad_buffer(rs, rs.step->blocks[head], tasks(rs, head_b_weight_, meta));
      after_backward(rs, head, meta);
    }
    for (std::int64_t i = layers_[c] - 1; i >= 0; --i) {
      const std::int64_t layer = first_layer_[c] + i;
      meta.layer = static_cast<std::int32_t>(layer);
      const std::size_t bi = rs.block_of_layer.at(layer);
      const LayerWork& w = work(layer);
      grad_buffer(rs, rs.step->blocks[bi], tasks(rs, w.bwd_weight, meta));
      mem(rs, rs.last_compute, true, MemKind::kActivations, -w.weight_operand_bytes);
      after_backward(rs, bi, meta);
    }
    // The embedding's gradient is a scatter-add with no weight-gradient GEMM: B completes it.
    mem(rs, rs.last_compute, true, MemKind::kInFlight, -1.0);
  }

  // Plan::defer_embedding_wgrad: after the last stage's last backward, the kept head
  // weight-gradient GEMMs one after another (Megatron-Core's finish_embedding_wgrad_compute,
  // called before finalize_model_grads), each freeing its operands; the head's gradient
  // collectives follow them.
  void drain_head_weight_gradients(RankState& rs) {
    if (rs.deferred_head == 0) return;
    const std::size_t head = rs.step->blocks.size() - 1;
    OpMeta meta;
    meta.pass = 'W';
    for (std::int64_t k = 0; k < rs.deferred_head; ++k) {
      meta.micro_batch = static_cast<std::int32_t>(k);
      grad_buffer(rs, rs.step->blocks[head], tasks(rs, head_b_weight_, meta));
      if (!opt_.uniform_compute)
        mem(rs, rs.last_compute, true, MemKind::kActivations, -head_weight_operand_bytes_);
      after_backward(rs, head, meta);
    }
    rs.deferred_head = 0;
  }

  void after_backward(RankState& rs, std::size_t bi, OpMeta meta) {
    meta.pass = ' ';
    const ParamBlock& b = rs.step->blocks[bi];
    meta.layer = b.kind == BlockKind::kLayer ? static_cast<std::int32_t>(b.layer) : -1;
    zero3_copies(rs, bi, DpPoint::kAfterBackward, meta);
    const std::int32_t reduced =
        dp_tasks(rs, bi, DpPoint::kAfterBackward, rs.last_compute, -1, meta);
    grad_buffer(rs, b, reduced, /*release=*/true);
    if (plan_.offload == Offload::kOptimizerParams) {
      // ZeRO-Infinity: the reduced gradient shard goes to the host, where it accumulates.
      const double bytes = shard_params(b) * grad_bytes_per_element(plan_);
      rs.last_offload = host_transfer(rs, bytes, true, "offload_grads_d2h",
                                      reduced >= 0 ? reduced : rs.last_compute, meta);
    }
    if (++rs.backwards_done[bi] == chunk_copy_micro_batches(plan_)) {
      meta.micro_batch = -1;
      dp_tasks(rs, bi, DpPoint::kAfterLastBackward, rs.last_compute, -1, meta);
    }
  }

  void send(RankState& rs, StreamKind k, OpMeta meta, std::string_view name, std::size_t chunk,
            std::int64_t mb, std::vector<std::vector<std::int32_t>>& table) {
    const std::int64_t rank = prog_.slots[static_cast<std::size_t>(rs.slot)].rank;
    RankCoord peer = layout_.coord(rank);
    const std::int64_t to_chunk = k == StreamKind::kPpNext ? static_cast<std::int64_t>(chunk) + 1
                                                            : static_cast<std::int64_t>(chunk) - 1;
    peer.pp = chunk_stage(plan_, to_chunk, pipeline_direction(plan_, mb));
    const std::int64_t peer_rank = layout_.rank(peer);
    if (peer_rank == rank) {
      // The V's turn (zb-v): the next chunk is on this rank; its pass reads the output in place.
      table[static_cast<std::size_t>(rs.slot)][cm_index(chunk, mb)] = rs.last_compute;
      return;
    }
    Task t;
    t.name = name;
    t.kind = TaskKind::kComm;
    t.collective = Collective::kSendRecv;
    t.group = CommGroup::kPp;
    t.group_size = 2;
    t.message_bytes = pp_message_bytes_;
    const int kind = 100 + static_cast<int>(k);  // p2p: its own key space
    const std::int32_t net =
        net_for(kind, rank * layout_.world_size() + peer_rank, t.collective, t.message_bytes,
                {rank, peer_rank}, false, {}, CommKernels::kNccl);
    meta.name = name;
    meta.group = ReportGroup::kPp;
    meta.bytes_sent = t.bytes_sent();
    const std::int32_t id = new_op(rs, k, 0, meta);
    eng_->join(id, new_collective(net, 1));
    eng_->add_dep(rs.last_compute, id);
    if (!opt_.overlap_p2p) rs.wait.push_back(id);
    table[static_cast<std::size_t>(rs.slot)][cm_index(chunk, mb)] = id;
  }

  void optimizer(RankState& rs) {
    OpMeta meta;
    meta.pass = 'O';
    meta.name = "optimizer";
    meta.optimizer = true;
    issue_deferred(rs);
    std::int32_t done = -1;
    if (plan_.offload != Offload::kNone) {
      done = offload_step(rs, meta);
    } else {
      const Task& step = rs.step->optimizer;
      const TimeNs ns = opt_.uniform_compute ? 0 : to_ns(task_time_s(step, rates_));
      meta.shape = op_shape(step, rates_);
      if (rs.last_dp >= 0) rs.wait.push_back(rs.last_dp);
      if (rs.last_other_sync >= 0) rs.wait.push_back(rs.last_other_sync);
      done = compute(rs, ns, meta);
    }
    OpMeta am;
    am.name = "after_optimizer";
    if (plan_.param_gather == ParamGather::kAfterStep)  // else under the forward
      for (std::size_t bi = 0; bi < rs.step->blocks.size(); ++bi)
        dp_tasks(rs, bi, DpPoint::kAfterOptimizer, done, -1, am);
  }

  // The collectives held back to the step's end (dp_tasks), the tied embedding's sum last.
  void issue_deferred(RankState& rs) {
    std::stable_partition(rs.deferred.begin(), rs.deferred.end(),
                          [](const Task& t) { return t.group != CommGroup::kEmbedding; });
    for (const Task& t : rs.deferred) {
      OpMeta dm;
      const std::int32_t id = t.kind == TaskKind::kComm ? collective(rs, t, dm)
                                                        : dp_stream_kernel(rs, t, dm);
      eng_->add_dep(rs.last_compute, id);
      if (t.kind == TaskKind::kComm) note_sync(rs, t, id);
    }
  }

  // ZeRO-Offload: gradients to the host, the CPU step (host DRAM bound, the node's bandwidth
  // shared by its GPUs' optimizers), updated weights back. optimizer+params: the gradients are
  // already on the host (after_backward) and the weights stay there. offload_device nvme: the
  // optimizer states are read from NVMe before the step and written back after it
  // (ZeRO-Infinity, sec. 6). Returns the last op.
  std::int32_t offload_step(RankState& rs, const OpMeta& meta) {
    const OffloadTraffic off = offload_traffic_on_stage(model_, plan_, rs.stage);
    const bool params = plan_.offload == Offload::kOptimizerParams;
    const bool nvme = plan_.offload_device == OffloadDevice::kNvme;
    OpMeta tm = meta;
    tm.optimizer = false;
    std::int32_t ready = rs.last_offload;
    if (!params) {
      ready = host_transfer(rs, off.device_to_host_bytes, true, "offload_grads_d2h",
                            rs.last_dp >= 0 ? rs.last_dp : rs.last_compute, tm);
    }
    eng_->add_dep(rs.last_compute, ready);
    eng_->add_dep(rs.last_other_sync, ready);
    eng_->add_dep(rs.last_dp, ready);
    const double state_bytes = (off.nvme_read_bytes - off.nvme_param_read_bytes) / 2.0;
    if (nvme) ready = nvme_io(rs, state_bytes, "nvme_read_states", ready, tm);
    const double host_bw = cluster_.host_memory_bytes_per_s_per_node /
                           d(std::max<std::int64_t>(1, cluster_.gpus_per_node));
    const TimeNs step_ns = opt_.uniform_compute || host_bw <= 0
                               ? 0
                               : to_ns(off.host_memory_bytes / host_bw);
    OpMeta hm = meta;
    hm.name = "host_optimizer";
    std::int32_t done = new_op(rs, StreamKind::kHost, step_ns, hm);
    eng_->add_dep(ready, done);
    if (nvme) done = nvme_io(rs, off.nvme_write_bytes, "nvme_write_states", done, tm);
    if (params) return done;
    return host_transfer(rs, off.host_to_device_bytes, false, "offload_weights_h2d", done, tm);
  }

  void build_rank(std::int32_t slot) {
    RankState rs;
    rs.slot = slot;
    rs.stage = prog_.slots[static_cast<std::size_t>(slot)].coord.pp;
    rs.step = &step_tasks_of(rs.stage);
    const std::vector<ParamBlock>& blocks = rs.step->blocks;
    for (std::size_t i = 0; i < blocks.size(); ++i)
      if (blocks[i].kind == BlockKind::kLayer) rs.block_of_layer[blocks[i].layer] = i;
    rs.backwards_done.assign(blocks.size(), 0);
    const std::vector<PipeStep> steps = stage_schedule(plan_, rs.stage, order_costs_);
    for (std::size_t i = 0; i < steps.size(); ++i) {
      const PipeStep& step = steps[i];
      const bool has_next = i + 1 < steps.size();
      if (plan_.ep_overlap && !step.forward && has_next && steps[i + 1].forward) {
        merged_pair(rs, step, steps[i + 1]);
        ++i;
      } else if (step.overlap_next && opt_.dualpipe_overlap && has_next) {
        fb_pair(rs, step, steps[i + 1]);
        ++i;
      } else {
        pass(rs, step);
      }
    }
    drain_head_weight_gradients(rs);
    optimizer(rs);
  }

  // zb-v orders its passes by their costs, taken from core/schedule.h's order_costs with this
  // run's cluster, profile, rank order and switches, as the CPU executor takes them (FLOP ratios
  // with one pipeline send between stages 0 and 1; equal costs under uniform_compute):
  // schedule_zb_v keeps the send-aware order only where it replays shorter.
  PassCosts zb_v_costs() const {
    if (plan_.schedule != Schedule::kZbV) return {};
    OrderInputs in;
    in.cluster = cluster_;
    in.hardware = opt_.hardware;
    in.rank_order = opt_.rank_order;
    in.uniform_compute = opt_.uniform_compute;
    in.free_communication = opt_.free_communication;
    in.overlap_p2p = opt_.overlap_p2p;
    in.send_aware = opt_.zb_v_send_aware;
    Result<PassCosts> costs = order_costs(model_, plan_, in);
    TRAINPLAN_CHECK(costs.ok()) << "zb-v's order costs: " << costs.status().message();
    return *costs;
  }

  void pass(RankState& rs, const PipeStep& step) {
    split_ = step.part == BackwardPart::kInput;
    if (step.forward) {
      forward(rs, step.micro_batch, step.virtual_chunk);
    } else if (step.part == BackwardPart::kWeight) {
      weight_pass(rs, step.micro_batch, step.virtual_chunk);
    } else {
      backward(rs, step.micro_batch, step.virtual_chunk);
    }
  }

  // DualPipe's F&B (PipeStep::overlap_next): a forward and the backward of the other direction
  // after it, merged as merged_pair merges its pairs, so each one's expert all-to-alls and
  // pipeline send travel while the other computes (DeepSeek-V3, arXiv:2412.19437, sec. 3.2.1,
  // fig. 4). While an all-to-all is in flight its dispatch kernels hold their SMs
  // (CommKernels::kExpertDispatch), which the engine takes from the compute beside it.
  void fb_pair(RankState& rs, const PipeStep& fwd, const PipeStep& bwd) {
    TRAINPLAN_CHECK(fwd.forward && !bwd.forward && bwd.part == BackwardPart::kWhole)
        << "dualpipe F&B pairs a forward with a whole backward";
    merged_pair(rs, fwd, bwd);
  }

  // Plan::ep_overlap: a backward and the forward after it as two chains of one merged pass
  // (Megatron-Core's combined 1F1B); fb_pair: a forward and the backward after it (DualPipe).
  // Each chain is cut at its expert all-to-alls into segments, and every stream of the rank
  // runs the pair's ops in the order (segment, chain, issue): the first pass's segment k, the
  // second's segment k, then segment k + 1 of each, so one chain's dispatch or combine travels
  // while the other computes. A chain's ops depend only on its own earlier ops (and on ops
  // before the pair), always earlier in that order, so no stream can wait on an op queued
  // behind it. Without all-to-alls the first pass's ops all come first; the second pass's
  // compute does not wait for the first's pipeline send.
  void merged_pair(RankState& rs, const PipeStep& first, const PipeStep& second) {
    const std::int32_t first_stream = stream(rs, StreamKind::kCompute);
    std::array<std::int32_t, kStreamsPerRank> tails{};
    for (std::int32_t k = 0; k < kStreamsPerRank; ++k) tails[k] = eng_->stream_tail(first_stream + k);
    const std::int32_t last_before = rs.last_compute;
    const std::vector<std::int32_t> wait_before = rs.wait;
    std::vector<WindowOp> window;
    window_ = &window;
    chain_ = 0;
    segment_ = 0;
    const std::int32_t gate_before = rs.prefetch_gate;
    pass(rs, first);
    std::vector<std::int32_t> wait_after = rs.wait;
    rs.last_compute = last_before;  // the second chain does not follow the first's ops
    rs.wait = wait_before;
    // Nor do its ZeRO-3 gathers wait for the first chain's compute (the prefetch gate): that
    // op runs after the second chain's own compute in the merged order, and a dualpipe pair
    // under ZeRO-3 deadlocked (Mixtral 8x7B, pp 8, dp 8, ep 8).
    rs.prefetch_gate = gate_before;
    chain_ = 1;
    segment_ = 0;
    pass(rs, second);
    window_ = nullptr;
    wait_after.insert(wait_after.end(), rs.wait.begin(), rs.wait.end());
    rs.wait = std::move(wait_after);
    std::stable_sort(window.begin(), window.end(), [](const WindowOp& a, const WindowOp& b) {
      return std::tie(a.segment, a.chain) < std::tie(b.segment, b.chain);
    });
    std::array<std::vector<std::int32_t>, kStreamsPerRank> order;
    for (const WindowOp& op : window) order[eng_->stream_of(op.id) - first_stream].push_back(op.id);
    for (std::int32_t k = 0; k < kStreamsPerRank; ++k)
      eng_->reorder_tail(first_stream + k, tails[k], order[k]);
    // What follows the pair waits for its last compute op in the merged order.
    const std::int32_t compute_tail = eng_->stream_tail(first_stream);
    if (compute_tail != tails[static_cast<std::size_t>(StreamKind::kCompute)])
      rs.last_compute = compute_tail;
  }

  // A forward (backward) waits for the activation (gradient) its neighbour sends.
  void link_pipeline() {
    for (std::size_t slot = 0; slot < prog_.slots.size(); ++slot) {
      const RankCoord me = prog_.slots[slot].coord;
      for (std::int64_t v = 0; v < plan_.virtual_stages; ++v) {
        const std::size_t c = chunk_index(v, me.pp);
        for (std::int64_t mb = 0; mb < M_; ++mb) {
          // DualPipe: local chunk v carries direction v's micro-batches only.
          const std::int64_t dir = pipeline_direction(plan_, mb);
          if (plan_.schedule == Schedule::kDualPipe && dir != v) continue;
          if (c > 0) {
            RankCoord peer = me;
            peer.pp = chunk_stage(plan_, static_cast<std::int64_t>(c) - 1, dir);
            const std::int32_t ps = slot_of_[static_cast<std::size_t>(layout_.rank(peer))];
            TRAINPLAN_CHECK(ps >= 0) << "pipeline peer not simulated";
            eng_->add_dep(pipe_->send_fwd[static_cast<std::size_t>(ps)][cm_index(c - 1, mb)],
                         pipe_->first_fwd[slot][cm_index(c, mb)]);
          }
          if (c + 1 < layers_.size()) {
            RankCoord peer = me;
            peer.pp = chunk_stage(plan_, static_cast<std::int64_t>(c) + 1, dir);
            const std::int32_t ps = slot_of_[static_cast<std::size_t>(layout_.rank(peer))];
            TRAINPLAN_CHECK(ps >= 0) << "pipeline peer not simulated";
            eng_->add_dep(pipe_->send_bwd[static_cast<std::size_t>(ps)][cm_index(c + 1, mb)],
                         pipe_->first_bwd[slot][cm_index(c, mb)]);
          }
        }
      }
    }
  }

  const ModelSpec& model_;
  const ClusterSpec& cluster_;
  const Plan& plan_;
  const SimOptions& opt_;
  const DeviceRates& rates_;
  const RankLayout& layout_;
  const Topology& topo_;
  Program& prog_;
  Engine* eng_;  // the program's engine, or a worker's own for one slot (local_)
  const std::int64_t M_;
  // The backward being built runs B only, its W a later step (zero-bubble schedules; dualpipe
  // splits some of its backwards).
  bool split_;
  const std::vector<std::int64_t> layers_;
  std::vector<std::int64_t> first_layer_;
  // The ops of a merged backward/forward pair (merged_pair), with their place in it.
  struct WindowOp {
    std::int32_t segment = 0;  // expert all-to-alls of its chain before it
    std::int32_t chain = 0;    // 0: the backward, 1: the forward
    std::int32_t id = -1;
  };
  std::vector<WindowOp>* window_ = nullptr;  // the pair being built, if any
  std::vector<std::int32_t> fetched_;        // checkpoint fetches of the chunk in backward
  std::int32_t chain_ = 0, segment_ = 0;
  // fb_pair: the slowdown of compute beside an all-to-all; the backward's all-to-all times
  // (known before the forward is built) and the forward's (as it is built); the segment whose
  // all-to-all the compute being added runs beside, and what is left of that all-to-all.

  // What one layer of a kind does and keeps, per micro-batch.
  struct LayerWork {
    TimedTasks fwd, bwd, rec;
    TimedTasks bwd_input, bwd_weight;  // bwd split into B and W (zero-bubble schedules)
    double weight_operand_bytes = 0;   // held from B to W (layer_weight_gradient_operand_bytes)
    double act_bytes = 0;        // stored activations (rebuilt ones, under full recompute)
    double kept_bytes = 0;       // stored by a layer that full recompute leaves out
    double workspace_bytes = 0;  // activation gradients during its backward
  };
  const LayerWork& work(std::int64_t layer) const {
    return work_[static_cast<std::size_t>(layer_kind(model_, layer))];
  }
  std::array<LayerWork, kLayerKindCount> work_;
  TimedTasks emb_f_, emb_b_, head_f_, head_b_, head_b_input_, head_b_weight_;
  double layer_input_bytes_ = 0, embedding_out_bytes_ = 0, logits_bytes_ = 0;
  double head_weight_operand_bytes_ = 0;  // Plan::defer_embedding_wgrad: X and dY of the head
  std::int64_t pp_message_bytes_ = 0;
  PassCosts order_costs_;  // zb_v_costs(), once per program
  std::vector<std::optional<StepTasks>> step_tasks_;  // by stage (step_tasks_of)
  std::vector<std::int32_t> slot_of_;
  std::vector<OpMeta> slot_meta_;  // the metadata of the slot being built, in op order
  std::map<std::int64_t, std::vector<std::int32_t>> meta_programs_of_stage_;  // keep_meta
  std::map<NetKey, std::int32_t> nets_;
  std::map<std::pair<int, std::int64_t>, std::vector<std::int32_t>> instances_;

  // A worker of the parallel build (build_in_parallel): builds one slot at a time into its own
  // engine, with local op, net and collective ids; merge_slot renumbers them.
  bool local_ = false;
  std::vector<LocalNet> local_nets_;
  std::vector<LocalCollective> local_collectives_;
  std::shared_ptr<PipeTables> pipe_;  // shared by the prototype and its workers
};

}  // namespace

void build_program(const ModelSpec& model, const ClusterSpec& cluster, const Plan& plan,
                   const SimOptions& options, const DeviceRates& rates, const RankLayout& layout,
                   const Topology& topology, Program& program) {
  Builder(model, cluster, plan, options, rates, layout, topology, program).build();
}

}  // namespace trainplan::sim
