// The training step over a backend; see trainer.h. The data-parallel collectives are named by
// their cost-model task (dp_block_tasks in core/cost/data_parallel.cc); the trace context of each
// call (pass, micro-batch, layer) follows the simulator's (simulator/program.cc) so the traces
// line up.
#include "executor/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>

#include "core/schedule.h"
#include "executor/data.h"

namespace trainplan::executor {

Trainer::Trainer(const ModelSpec& model, const Plan& plan, const TrainOptions& options,
                 Comm& comm)
    : model_(model), plan_(plan), options_(options), comm_(comm) {}

Trainer::~Trainer() = default;

Result<std::unique_ptr<Trainer>> Trainer::make(const ModelSpec& model, const Plan& plan,
                                               const TrainOptions& options, Comm* comm,
                                               const Backend& backend) {
  TRAINPLAN_RETURN_IF_ERROR(validate_plan(plan));
  TRAINPLAN_RETURN_IF_ERROR(check_plan_fits_model(plan, model));
  std::unique_ptr<Comm> own = comm != nullptr ? nullptr : make_local_comm();
  Comm& c = comm != nullptr ? *comm : *own;
  TRAINPLAN_RETURN_IF_ERROR(check_plan_world_size(plan, c.world_size()));
  TRAINPLAN_RETURN_IF_ERROR(backend.check_supports(model, plan));
  // The order the simulator plays for the same inputs (core/schedule.h: GPipe, 1F1B,
  // interleaved 1F1B, ZB-H1, ZB-V by its pass costs, DualPipe, whose steps name the direction
  // as the local chunk).
  Result<sim::PassCosts> costs = sim::order_costs(model, plan, options.order);
  if (!costs.ok()) return costs.status();
  std::unique_ptr<Trainer> t(new Trainer(model, plan, options, c));
  t->own_comm_ = std::move(own);
  t->stage_ = c.group_rank(CommGroup::kPp);
  t->schedule_ = sim::stage_schedule(plan, t->stage_, *costs);
  // The rank's place among the dp*cp ranks (RankLayout's kDpCp index, dp * cp + cp rank): its
  // replica says which sequences it trains on, its CP rank which part of each; its place in its
  // ZeRO shard group (which shard it owns) is the backend's, from the same groups.
  const std::int64_t dp_cp_index =
      c.group_rank(CommGroup::kDpReplica) * c.group_size(CommGroup::kDp) +
      c.group_rank(CommGroup::kDp);
  t->dp_rank_ = dp_cp_index / plan.cp;
  t->cp_rank_ = dp_cp_index % plan.cp;
  DpEvents& events = *t;  // a private base: only Trainer may convert
  t->stage_model_ = backend.make_stage(t->stage_, c, events);
  t->init_blocks();
  TRAINPLAN_RETURN_IF_ERROR(t->stage_model_->place_offloaded());
  return t;
}

namespace {
// The ranges of a block's buffer that its tensors cover, adjacent ones merged: all of it but
// the padding (one range; an MoE layer's dense part and experts are two).
Ranges filled_ranges(const BlockLayout& l) {
  Ranges out;
  for (const TensorSlice& t : l.tensors) {
    if (!out.empty() && out.back().first + out.back().second == t.offset) {
      out.back().second += t.size();
    } else {
      out.emplace_back(t.offset, t.size());
    }
  }
  return out;
}
}  // namespace

void Trainer::init_blocks() {
  // ZeRO shards over the dp ranks, or with hybrid sharding over one shard group of them.
  const std::int64_t shards = plan_.zero_shard_ranks();
  const std::vector<BlockLayout>& layouts = stage_model_->layouts();
  for (std::size_t i = 0; i < layouts.size(); ++i) {
    const BlockLayout& l = layouts[i];
    BlockShape b;
    b.padded = (l.size + shards - 1) / shards * shards;  // as the cost model's dp_block_tasks pads
    b.shard = b.padded / shards;
    b.layer = l.layer;
    if (l.expert_offset >= 0) {
      // An MoE layer pads each part by itself (stage_layouts): the dense part for the dp group,
      // the experts for the expert data-parallel group (dp / ep x cp ranks).
      b.padded = l.size;
      b.shard = l.expert_offset / shards;
      b.expert_offset = l.expert_offset;
      b.expert_size = l.expert_size;
      b.expert_shard = l.expert_size / expert_dp_cp(plan_);
    }
    // Initialise the full tensors; the backend keeps what this rank holds.
    std::vector<float> full(static_cast<std::size_t>(b.padded), 0.0f);
    for (const TensorSlice& s : l.tensors) {
      init_slice(options_.seed, s, full.data() + s.offset);
      if (s.decay) b.decayed.emplace_back(s.offset, s.size());
      if (s.tied) b.tied.emplace_back(s.offset, s.size());
      if (s.sp_norm) b.sp_norm.emplace_back(s.offset, s.size());
    }
    std::sort(b.decayed.begin(), b.decayed.end());
    b.filled = filled_ranges(l);
    b.summed = b.tied;
    b.summed.insert(b.summed.end(), b.sp_norm.begin(), b.sp_norm.end());
    stage_model_->init_block(i, b, std::move(full));
    blocks_.push_back(std::move(b));
  }
}

// ---- DpEvents: where ZeRO-3 gathers and ZeRO-2/3 reduce-scatter per micro-batch ----

void Trainer::acquire(std::size_t b, DpPoint) {
  if (plan_.zero_stage == 3) stage_model_->gather_params(b);
}

void Trainer::release(std::size_t b) {
  if (plan_.zero_stage == 3) stage_model_->free_params(b);  // freed after use
}

void Trainer::backward_done(std::size_t i) {
  // ZeRO-2/3 reduce-scatter each micro-batch's gradient as soon as the block is done, and free
  // the block's full gradient. Positions that need another group's sum first (the tied table,
  // sequence-parallel norms) must see every micro-batch: until the last, they stay out of the
  // reduce-scatter and are set aside; a block holding any defers its last micro-batch's
  // reduce-scatter to finish_gradients, after those sums.
  if (plan_.zero_stage < 2) return;
  const bool has_sums = !blocks_[i].summed.empty();
  if (last_micro_batch_ && has_sums) return;
  stage_model_->ensure_grad(i);  // a block whose backward wrote nothing still takes part
  TraceScope after_backward(trace_, {.pass = ' '});
  if (has_sums) stage_model_->hold_summed(i);
  stage_model_->reduce_scatter_grad(i);
}

// ---- the step ----

// Pipeline neighbours: the stages of the chunks before and after on the micro-batch's
// direction (core/plan.h's chunk_stage: with interleaving the last stage's chunk c feeds the
// first stage's chunk c + 1; in zb-v's V the last stage feeds itself; dualpipe's second
// direction runs from stage pp-1 up to stage 0). Forward and backward messages have their own
// tags, so with pp = 2 the two kinds between one pair of ranks cannot be confused; with
// dualpipe each (sender, receiver, tag) carries one direction's messages, in micro-batch order.
namespace {
constexpr int kForwardTag = 1, kBackwardTag = 2;
}  // namespace

void Trainer::send_message(int tag, std::int64_t peer_chunk, std::int64_t mb, const char* name) {
  Stage& net = *stage_model_;
  const std::int64_t words = net.message_words();
  const std::int64_t peer = chunk_stage(plan_, peer_chunk, pipeline_direction(plan_, mb));
  if (peer == stage_) {
    const float* data = net.send_buffer();
    auto slot = std::find_if(local_messages_.begin(), local_messages_.end(),
                             [](const LocalMessage& m) { return m.mb < 0; });
    if (slot == local_messages_.end()) slot = local_messages_.emplace(local_messages_.end());
    slot->tag = tag;
    slot->mb = mb;
    slot->data.assign(data, data + words);
    return;
  }
  comm_.send(CommGroup::kPp, net.send_buffer(), words, peer, tag, name);
}

void Trainer::receive_message(int tag, std::int64_t peer_chunk, std::int64_t mb,
                              const char* name) {
  Stage& net = *stage_model_;
  const std::int64_t words = net.message_words();
  const std::int64_t peer = chunk_stage(plan_, peer_chunk, pipeline_direction(plan_, mb));
  if (peer != stage_) {
    comm_.recv(CommGroup::kPp, net.receive_buffer(), words, peer, tag, name);
    return;
  }
  const auto it = std::find_if(local_messages_.begin(), local_messages_.end(),
                               [&](const LocalMessage& m) { return m.tag == tag && m.mb == mb; });
  TRAINPLAN_CHECK(it != local_messages_.end())
      << "schedule reads micro-batch " << mb << "'s message before this stage wrote it";
  std::copy(it->data.begin(), it->data.end(), net.receive_buffer());
  it->mb = -1;
}

void Trainer::forward(std::int64_t chunk, std::int64_t mb) {
  // Trace: receives and sends belong to a micro-batch but no pass, as the simulator's.
  TraceScope micro_batch(trace_, {.pass = ' ', .micro_batch = static_cast<std::int32_t>(mb)});
  Stage& net = *stage_model_;
  const std::int64_t global = stage_chunk(plan_, stage_, chunk);
  if (!net.has_embedding(chunk)) receive_message(kForwardTag, global - 1, mb, "recv_forward");
  const float loss_scale =
      1.0f / static_cast<float>(plan_.global_batch_size * model_.seq_len);
  net.begin_phase("forward");
  {
    TraceScope pass(trace_, {.pass = 'F'});
    net.forward(chunk, mb, loss_scale);
  }
  net.end_phase("forward");
  if (!net.has_head(chunk)) send_message(kForwardTag, global + 1, mb, "send_forward");
  net.drop_messages();
  note_memory();
}

bool Trainer::last_through_chunk(std::int64_t mb) const {
  // Each chunk copy sees one direction's micro-batches (dualpipe: 0 .. M/2-1 or M/2 .. M-1).
  const std::int64_t per_copy = chunk_copy_micro_batches(plan_);
  return mb == (pipeline_direction(plan_, mb) + 1) * per_copy - 1;
}

void Trainer::backward(std::int64_t chunk, std::int64_t mb, bool input_only) {
  TraceScope micro_batch(trace_, {.pass = ' ', .micro_batch = static_cast<std::int32_t>(mb)});
  if (!input_only) last_micro_batch_ = last_through_chunk(mb);
  Stage& net = *stage_model_;
  const std::int64_t global = stage_chunk(plan_, stage_, chunk);
  if (!net.has_head(chunk)) receive_message(kBackwardTag, global + 1, mb, "recv_backward");
  net.begin_phase("backward");
  {
    TraceScope pass(trace_, {.pass = 'B'});
    if (input_only) {
      net.backward_input(chunk, mb);
    } else {
      net.backward(chunk, mb);
    }
  }
  net.end_phase("backward");
  if (!net.has_embedding(chunk)) send_message(kBackwardTag, global - 1, mb, "send_backward");
  net.drop_messages();
  note_memory();
}

// W of a zero-bubble schedule: the weight gradients the B pass held back, then the blocks'
// ZeRO-2/3 reduce-scatters, so the last micro-batch is the one whose W this is.
void Trainer::weight(std::int64_t chunk, std::int64_t mb) {
  TraceScope micro_batch(trace_, {.pass = ' ', .micro_batch = static_cast<std::int32_t>(mb)});
  last_micro_batch_ = last_through_chunk(mb);
  stage_model_->begin_phase("backward");
  stage_model_->backward_weight(chunk, mb);
  stage_model_->end_phase("backward");
  note_memory();
}

MemoryAccount Trainer::memory_account() const {
  MemoryAccount account;
  stage_model_->account_memory(account);
  for (const LocalMessage& m : local_messages_)
    account.add("pipeline.same_stage_messages", MemoryUse::kCommBuffers,
                static_cast<double>(m.data.size() * sizeof(float)));
  return account;
}

void Trainer::note_memory() {
  if (!track_memory_) return;
  MemoryAccount now = memory_account();
  if (now.in_use_bytes() >= peak_account_.in_use_bytes()) peak_account_ = std::move(now);
}

void Trainer::run_schedule(const std::vector<std::int32_t>& batch) {
  // This replica's micro-batches: inputs and targets, (M, T) each.
  const std::int64_t M = plan_.num_micro_batches(), mbs = plan_.micro_batch_size;
  const std::int64_t s = model_.seq_len, T = mbs * s / plan_.cp;
  // Kept from step to step, as the schedule: a step allocates nothing (issue 28).
  std::vector<std::int32_t>& in = mb_inputs_;
  std::vector<std::int32_t>& out = mb_targets_;
  in.resize(static_cast<std::size_t>(M * T));
  out.resize(in.size());
  for (std::int64_t mb = 0; mb < M; ++mb)
    micro_batch_tokens(batch, s, mbs, M, dp_rank_, mb, in.data() + mb * T, out.data() + mb * T,
                       {plan_.cp, cp_rank_});
  stage_model_->load_tokens(in, out);
  for (const sim::PipeStep& p : schedule_) {
    if (p.forward) {
      forward(p.virtual_chunk, p.micro_batch);
    } else if (p.part == sim::BackwardPart::kWeight) {
      weight(p.virtual_chunk, p.micro_batch);
    } else {
      backward(p.virtual_chunk, p.micro_batch, p.part == sim::BackwardPart::kInput);
    }
  }
  comm_.wait_sends();
}

Result<double> Trainer::reduce_loss() {
  const double loss_sum = stage_model_->loss_sum();
  // The loss lives on the head's stage (dualpipe: on both end stages, each its direction's
  // micro-batches); its TP ranks hold the same value, so one counts it.
  const bool reporter =
      stage_holds_head(plan_, stage_) && comm_.group_rank(CommGroup::kTp) == 0;
  const bool bad = reporter && !std::isfinite(loss_sum);
  // With the load-balancing loss: every rank holding MoE layers adds its share.
  double control[3] = {reporter && !bad ? loss_sum : 0.0, bad ? 1.0 : 0.0,
                       stage_model_->aux_loss_sum()};
  comm_.control_all_reduce(control, 3, ReduceOp::kSum);  // control traffic: not traced
  aux_loss_ = control[2];
  if (control[1] > 0) {
    double who = bad ? static_cast<double>(comm_.world_rank()) : -1.0;
    comm_.control_all_reduce(&who, 1, ReduceOp::kMax);
    return Status::Error("non-finite loss at step " + std::to_string(step_ + 1) + " on rank " +
                             std::to_string(static_cast<std::int64_t>(who)) +
                             " (the pipeline stage holding the loss); stopping",
                         ExitCode::kRuntime);
  }
  return control[0] / static_cast<double>(plan_.global_batch_size * model_.seq_len);
}

// DualPipe holds every model chunk twice, on stage s and its mirror pp-1-s, each copy training
// on one direction's micro-batches: the two copies' gradients are summed (the cost model's
// dualpipe_mirror_grad_all_reduce, over the embedding group, which dualpipe makes the mirror
// pair; deepseek-ai/DualPipe's examples/example_dualpipe.py adds each module's gradient to its
// mirror rank's). Both stages list their blocks in model order, so block i pairs with block i.
// Below ZeRO-2 the whole gradient (its tensors, not the padding), before the data-parallel
// reduction; ZeRO-2/3 keep only their reduced shard, which is summed after it.
void Trainer::mirror_sum(std::size_t i, bool shard) {
  if (plan_.schedule != Schedule::kDualPipe) return;
  Stage& net = *stage_model_;
  constexpr const char* kTask = "dualpipe_mirror_grad_all_reduce";
  if (shard) {
    net.all_reduce_grad_shards(CommGroup::kEmbedding, i, kTask);
  } else if (blocks_[i].filled.size() == 1) {
    net.all_reduce_grad(CommGroup::kEmbedding,
                        {i, blocks_[i].filled[0].first, blocks_[i].filled[0].second}, kTask);
  } else {
    std::vector<BlockRange> ranges;
    for (auto [off, n] : blocks_[i].filled) ranges.push_back({i, off, n});
    net.all_reduce_grads(CommGroup::kEmbedding, ranges, kTask);
  }
}

void Trainer::finish_gradients() {
  Stage& net = *stage_model_;
  // Sequence parallel: norms see only this rank's tokens, so their gradients are partial sums
  // over the TP group (Megatron-LM all-reduces them, "allreduce_sequence_parallel_grads").
  // One all-reduce of all of the stage's norms (the cost model lists one per block: the same
  // bytes).
  std::vector<BlockRange>& norms = sp_norms_;  // kept: a step allocates nothing (issue 28)
  norms.clear();
  for (std::size_t i = 0; i < blocks_.size(); ++i)
    for (auto [off, n] : blocks_[i].sp_norm) norms.push_back({i, off, n});
  if (!norms.empty()) net.all_reduce_grads(CommGroup::kTp, norms, "tp_sp_norm_grad_all_reduce");
  for (std::size_t i = 0; i < blocks_.size(); ++i) {
    const BlockShape& b = blocks_[i];
    // Tied table on the first and last stage: sum the two copies' gradients before the DP
    // reduction, so that every ZeRO stage sees the whole sum.
    for (auto [off, n] : b.tied)
      net.all_reduce_grad(CommGroup::kEmbedding, {i, off, n}, "embedding_grad_all_reduce");
    // Traced under the block's layer, as the simulator's per-block reductions.
    TraceScope block(trace_, {.layer = static_cast<std::int32_t>(b.layer)});
    if (plan_.zero_stage < 2) mirror_sum(i, false);
    switch (plan_.zero_stage) {
      case 0:
        if (b.expert_offset < 0) {
          net.all_reduce_grad(CommGroup::kDp, {i, 0, b.padded}, "dp_grad_all_reduce");
          break;
        }
        // An MoE layer: the dense part over the dp group, the experts over the ranks that hold
        // the same ones (dp/ep; dp_block_tasks' two collectives, each part padded by itself).
        net.all_reduce_grad(CommGroup::kDp, {i, 0, b.expert_offset}, "dp_grad_all_reduce");
        net.all_reduce_grad(CommGroup::kExpertDp, {i, b.expert_offset, b.expert_size},
                            "expert_dp_grad_all_reduce");
        break;
      case 1:
        net.reduce_scatter_grad(i);  // once per step, in place
        break;
      default:
        // The last micro-batch's reduce-scatter of a block with tied or SP-norm positions
        // (backward_done did the others'; their buffer is gone).
        if (net.has_grad(i)) net.reduce_scatter_grad(i);
        mirror_sum(i, true);
        break;
    }
    // Hybrid sharding: the shard groups sum the step's reduced shards across each other.
    if (plan_.zero_stage >= 1 && plan_.zero_replicas() > 1)
      net.all_reduce_grad_shard(CommGroup::kDpReplica, i, "hsdp_grad_all_reduce");
  }
}

void Trainer::optimizer_step() {
  ++step_;
  Stage& net = *stage_model_;
  TraceScope optimizer(trace_, {.pass = 'O', .micro_batch = -1, .layer = -1});
  net.begin_span("optimizer");
  AdamW adamw = options_.adamw;
  if (options_.lr_warmup_steps > 0 && step_ < options_.lr_warmup_steps)
    adamw.lr *= static_cast<float>(step_) / static_cast<float>(options_.lr_warmup_steps);
  for (std::size_t i = 0; i < blocks_.size(); ++i) {
    net.update(i, adamw, step_);
    if (plan_.zero_stage == 1 || plan_.zero_stage == 2) {
      net.end_span();
      {
        TraceScope after_optimizer(trace_, {.pass = ' '});
        net.all_gather_params(i);
      }
      net.begin_span("optimizer");
    }
    net.clear_grads(i);
  }
  net.end_span();
}

void Trainer::set_trace(StepTrace* trace, TraceClock::time_point origin) {
  trace_ = trace;
  stage_model_->set_trace(trace, origin);
}

Status Trainer::check_batch(const std::vector<std::int32_t>& batch) const {
  const std::int64_t need = plan_.global_batch_size * (model_.seq_len + 1);
  if (static_cast<std::int64_t>(batch.size()) != need)
    return Status::Error("batch has " + std::to_string(batch.size()) + " tokens, the step needs " +
                         std::to_string(need));
  for (std::int32_t tok : batch)
    if (tok < 0 || tok >= model_.vocab_size)
      return Status::Error("token " + std::to_string(tok) + " is outside the vocabulary [0, " +
                           std::to_string(model_.vocab_size) + ")");
  return Status::Ok();
}

Result<StepResult> Trainer::step(const std::vector<std::int32_t>& batch, StepTrace* trace) {
  if (trace != nullptr) {
    // Ranks' clocks share no origin and ranks leave the previous step apart (by 50-500 us in
    // execute's traces): a traced step starts on every rank together, so that its time 0 is one
    // instant everywhere (to within the all-reduce's exit skew) and the ranks' traces line up.
    double sync = 0;
    comm_.control_all_reduce(&sync, 1, ReduceOp::kSum);
  }
  const auto t0 = std::chrono::steady_clock::now();
  if (trace != nullptr) set_trace(trace, t0);
  // Uninstalls the trace however the step ends.
  struct Untrace {
    Trainer* t;
    ~Untrace() {
      if (t->trace_ != nullptr) t->set_trace(nullptr, {});
    }
  } untrace{this};
  TRAINPLAN_RETURN_IF_ERROR(check_batch(batch));
  run_schedule(batch);
  // An offloaded shard that could not be read leaves garbage in the pass: say that, not the loss.
  TRAINPLAN_RETURN_IF_ERROR(stage_model_->offload_status());
  Result<double> loss = reduce_loss();
  if (!loss.ok()) return loss.status();
  stage_model_->begin_phase("gradient_sync");
  {
    TraceScope after_backward(trace_, {.pass = ' ', .micro_batch = -1, .layer = -1});
    finish_gradients();
  }
  stage_model_->end_phase("gradient_sync");
  if (options_.before_optimizer) options_.before_optimizer(*this);
  const auto t1 = std::chrono::steady_clock::now();
  stage_model_->begin_phase("optimizer");
  optimizer_step();
  stage_model_->end_phase("optimizer");
  TRAINPLAN_RETURN_IF_ERROR(stage_model_->offload_status());
  StepResult r;
  r.offload = stage_model_->offload_bytes();
  stage_model_->finish_step(r.phase_s, r.spans);
  r.optimizer_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  r.loss = *loss;
  r.aux_loss = aux_loss_;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

Status Trainer::for_each_grad(const std::function<void(const TensorSlice&, std::int64_t,
                                                      std::int64_t, float)>& fn) const {
  // ZeRO-2/3 keep only the reduced shard; ZeRO-1 over several ranks reduces only its shard in
  // place (the rest of its buffer is this rank's own, unreduced, contribution). The Trainer
  // says when a full gradient exists; the backend reads it.
  const bool sharded = plan_.zero_shard_ranks() > 1 || (model_.is_moe() && expert_dp_cp(plan_) > 1);
  if (plan_.zero_stage >= 2 || (plan_.zero_stage == 1 && sharded))
    return Status::Error("zero_stage=" + std::to_string(plan_.zero_stage) +
                             ": this rank holds no full reduced gradient; read gradients with "
                             "zero_stage 0, or 1 on one rank",
                         ExitCode::kInvalidInput);
  return stage_model_->for_each_grad(fn);
}

}  // namespace trainplan::executor
