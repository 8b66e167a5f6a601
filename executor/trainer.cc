// The training step; see trainer.h. The data-parallel collectives are named by their cost-model
// task (dp_block_tasks in core/cost/cost_model.cc); the trace context of each call (pass,
// micro-batch, layer) follows the simulator's (simulator/program.cc) so the traces line up.
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
                                               const TrainOptions& options, Comm& comm) {
  TRAINPLAN_RETURN_IF_ERROR(validate_plan(plan));
  TRAINPLAN_RETURN_IF_ERROR(check_plan_fits_model(plan, model));
  TRAINPLAN_RETURN_IF_ERROR(check_plan_world_size(plan, comm.world_size()));
  TRAINPLAN_RETURN_IF_ERROR(check_executor_supports(model, plan));
  std::unique_ptr<Trainer> t(new Trainer(model, plan, options, comm));
  t->stage_ = comm.group_rank(CommGroup::kPp);
  // The replica's place among the dp*cp ranks (which batch slice it trains on), and its place
  // in its ZeRO shard group (which shard it owns); the same without hybrid sharding.
  t->shard_rank_ = comm.group_rank(CommGroup::kDp);
  t->dp_rank_ =
      comm.group_rank(CommGroup::kDpReplica) * comm.group_size(CommGroup::kDp) + t->shard_rank_;
  BlockAccess& access = *t;  // a private base: only Trainer may convert
  t->stage_model_ = std::make_unique<StageModel>(model, plan, t->stage_, comm, access);
  // ZeRO shards over the dp ranks, or with hybrid sharding over one shard group of them.
  const std::int64_t shards = plan.zero_shard_ranks();
  for (const BlockLayout& l : t->stage_model_->layouts()) {
    Block b;
    b.padded = (l.size + shards - 1) / shards * shards;  // as the cost model's dp_block_tasks pads
    b.shard = b.padded / shards;
    // ZeRO-2/3 hold a block's full gradient only from its backward to its reduce-scatter
    // (grads() allocates it, backward_done frees it); below that, it lives for the whole step.
    if (plan.zero_stage < 2) b.grad.assign(static_cast<std::size_t>(b.padded), 0.0f);
    // Initialise the full tensors, then keep what this rank holds.
    std::vector<float> full(static_cast<std::size_t>(b.padded), 0.0f);
    for (const TensorSlice& s : l.tensors) {
      init_slice(options.seed, s, full.data() + s.offset);
      if (s.decay) b.decayed.emplace_back(s.offset, s.size());
      if (s.tied) b.tied.emplace_back(s.offset, s.size());
      if (s.sp_norm) b.sp_norm.emplace_back(s.offset, s.size());
    }
    std::sort(b.decayed.begin(), b.decayed.end());
    const std::int64_t updated = plan.zero_stage >= 1 ? b.shard : b.padded;
    b.m.assign(static_cast<std::size_t>(updated), 0.0f);
    b.v.assign(static_cast<std::size_t>(updated), 0.0f);
    // ZeRO-1 reduce-scatters in place into its full gradient; ZeRO-2/3 accumulate each
    // micro-batch's reduced shard, as their full gradient is freed in between.
    if (plan.zero_stage >= 2) b.grad_shard.assign(static_cast<std::size_t>(b.shard), 0.0f);
    if (plan.zero_stage == 3) {
      b.param_shard.assign(full.begin() + t->shard_rank_ * b.shard,
                           full.begin() + (t->shard_rank_ + 1) * b.shard);
    } else {
      b.param = std::move(full);
    }
    t->blocks_.push_back(std::move(b));
  }
  return t;
}

// ---- BlockAccess: where ZeRO-3 gathers and ZeRO-2/3 reduce-scatter per micro-batch ----

void Trainer::acquire(std::size_t i, DpPoint) {
  if (plan_.zero_stage != 3) return;
  Block& b = blocks_[i];
  b.param.resize(static_cast<std::size_t>(b.padded));
  comm_.all_gather(CommGroup::kDp, b.param_shard.data(), b.param.data(), b.shard,
                   "zero3_param_all_gather");
}

void Trainer::release(std::size_t i) {
  if (plan_.zero_stage != 3) return;
  std::vector<float>().swap(blocks_[i].param);  // freed after use
}

const float* Trainer::params(std::size_t i) {
  TRAINPLAN_CHECK(!blocks_[i].param.empty()) << "block " << i << " used while not gathered";
  return blocks_[i].param.data();
}

float* Trainer::grads(std::size_t i) {
  Block& b = blocks_[i];
  if (b.grad.empty()) {  // ZeRO-2/3: a fresh buffer for this micro-batch's backward
    b.grad.assign(static_cast<std::size_t>(b.padded), 0.0f);
    if (!b.held.empty()) {  // with the tied / SP-norm sums set aside by earlier micro-batches
      auto from = b.held.begin();
      b.for_each_summed_range([&](std::int64_t off, std::int64_t n) {
        std::copy_n(from, n, b.grad.begin() + off);
        from += n;
      });
      b.held.clear();
    }
  }
  return b.grad.data();
}

void Trainer::reduce_scatter_grad(Block& b) {
  float* shard = b.grad.data() + shard_rank_ * b.shard;  // in place
  comm_.reduce_scatter(CommGroup::kDp, b.grad.data(), shard, b.shard, "zero_grad_reduce_scatter");
  for (std::int64_t j = 0; j < b.shard; ++j) b.grad_shard[j] += shard[j];
  std::vector<float>().swap(b.grad);  // freed: the next micro-batch allocates it again
}

void Trainer::backward_done(std::size_t i) {
  // ZeRO-2/3 reduce-scatter each micro-batch's gradient as soon as the block is done, and free
  // the block's full gradient. Positions that need another group's sum first (the tied table,
  // sequence-parallel norms) must see every micro-batch: until the last, they stay out of the
  // reduce-scatter and are set aside; a block holding any defers its last micro-batch's
  // reduce-scatter to finish_gradients, after those sums.
  if (plan_.zero_stage < 2) return;
  Block& b = blocks_[i];
  const bool has_sums = !b.tied.empty() || !b.sp_norm.empty();
  if (last_micro_batch_ && has_sums) return;
  grads(i);  // a block whose backward wrote nothing still takes part
  TraceScope after_backward(trace_, {.pass = ' '});
  b.for_each_summed_range([&](std::int64_t off, std::int64_t n) {
    b.held.insert(b.held.end(), b.grad.begin() + off, b.grad.begin() + off + n);
    std::fill_n(b.grad.begin() + off, n, 0.0f);
  });
  reduce_scatter_grad(b);
}

// ---- the step ----

void Trainer::run_schedule(const std::vector<std::int32_t>& batch, double& loss_sum) {
  const std::int64_t M = plan_.num_micro_batches(), mbs = plan_.micro_batch_size;
  const std::int64_t s = model_.seq_len, T = mbs * s;
  const std::int64_t pp = plan_.pp;
  const float loss_scale = 1.0f / static_cast<float>(plan_.global_batch_size * s);
  const StageShape& x = stage_model_->shape();
  const std::int64_t msg = x.local_tokens * model_.hidden_size;  // pipeline_message_bytes / 4

  std::vector<std::int32_t> in(static_cast<std::size_t>(T)), out(in.size());
  StageModel& net = *stage_model_;
  // Neighbours in the pipeline ring: with interleaving, the last stage's chunk c feeds the
  // first stage's chunk c + 1. Forward and backward messages have their own tags, so with
  // pp = 2 the two directions between one pair of ranks cannot be confused.
  const std::int64_t next = (stage_ + 1) % pp, prev = (stage_ + pp - 1) % pp;
  constexpr int kForwardTag = 1, kBackwardTag = 2;
  // Trace: receives and sends belong to a micro-batch but no pass, as the simulator's.
  auto fwd = [&](std::int64_t chunk, std::int64_t mb) {
    TraceScope micro_batch(trace_, {.pass = ' ', .micro_batch = static_cast<std::int32_t>(mb)});
    micro_batch_tokens(batch, s, mbs, M, dp_rank_, mb, in.data(), out.data());
    Mat input, output;
    if (!net.has_embedding(chunk)) {
      input.resize(x.local_tokens, model_.hidden_size);
      comm_.recv(CommGroup::kPp, input.data(), msg, prev, kForwardTag, "recv_forward");
    }
    {
      TraceScope forward(trace_, {.pass = 'F'});
      loss_sum += net.forward(chunk, mb, in.data(), out.data(), &input, &output, loss_scale);
    }
    if (!net.has_head(chunk))
      comm_.send(CommGroup::kPp, output.data(), msg, next, kForwardTag, "send_forward");
  };
  auto bwd = [&](std::int64_t chunk, std::int64_t mb) {
    TraceScope micro_batch(trace_, {.pass = ' ', .micro_batch = static_cast<std::int32_t>(mb)});
    last_micro_batch_ = mb == M - 1;
    Mat grad_out, grad_in;
    if (!net.has_head(chunk)) {
      grad_out.resize(x.local_tokens, model_.hidden_size);
      comm_.recv(CommGroup::kPp, grad_out.data(), msg, next, kBackwardTag, "recv_backward");
    }
    {
      TraceScope backward(trace_, {.pass = 'B'});
      net.backward(chunk, mb, &grad_out, &grad_in);
    }
    if (!net.has_embedding(chunk))
      comm_.send(CommGroup::kPp, grad_in.data(), msg, prev, kBackwardTag, "send_backward");
  };

  // The order the simulator plays (core/schedule.h: GPipe, 1F1B, interleaved 1F1B).
  for (const sim::PipeStep& p : sim::stage_schedule(plan_, stage_)) {
    if (p.forward) {
      fwd(p.virtual_chunk, p.micro_batch);
    } else {
      bwd(p.virtual_chunk, p.micro_batch);
    }
  }
  comm_.wait_sends();
}

void Trainer::finish_gradients() {
  // Sequence parallel: norms see only this rank's tokens, so their gradients are partial sums
  // over the TP group (Megatron-LM all-reduces them, "allreduce_sequence_parallel_grads").
  // One all-reduce of all of the stage's norms (the cost model lists one per block: the same
  // bytes).
  std::vector<float> norms;
  for (const Block& b : blocks_)
    for (auto [off, n] : b.sp_norm) norms.insert(norms.end(), b.grad.begin() + off,
                                                 b.grad.begin() + off + n);
  if (!norms.empty()) {
    comm_.all_reduce(CommGroup::kTp, norms.data(), static_cast<std::int64_t>(norms.size()),
                     ReduceOp::kSum, "tp_sp_norm_grad_all_reduce");
    std::size_t k = 0;
    for (Block& b : blocks_)
      for (auto [off, n] : b.sp_norm) {
        std::copy_n(norms.begin() + static_cast<std::ptrdiff_t>(k), n, b.grad.begin() + off);
        k += static_cast<std::size_t>(n);
      }
  }
  const std::vector<BlockLayout>& layouts = stage_model_->layouts();
  for (std::size_t i = 0; i < blocks_.size(); ++i) {
    Block& b = blocks_[i];
    // Tied table on the first and last stage: sum the two copies' gradients before the DP
    // reduction, so that every ZeRO stage sees the whole sum.
    for (auto [off, n] : b.tied)
      comm_.all_reduce(CommGroup::kEmbedding, b.grad.data() + off, n, ReduceOp::kSum,
                       "embedding_grad_all_reduce");
    // Traced under the block's layer, as the simulator's per-block reductions.
    TraceScope block(trace_, {.layer = static_cast<std::int32_t>(layouts[i].layer)});
    switch (plan_.zero_stage) {
      case 0:
        comm_.all_reduce(CommGroup::kDp, b.grad.data(), b.padded, ReduceOp::kSum,
                         "dp_grad_all_reduce");
        break;
      case 1:
        comm_.reduce_scatter(CommGroup::kDp, b.grad.data(), b.grad.data() + shard_rank_ * b.shard,
                             b.shard, "zero_grad_reduce_scatter");  // once per step, in place
        break;
      default:
        // The last micro-batch's reduce-scatter of a block with tied or SP-norm positions
        // (backward_done did the others'; their buffer is gone).
        if (!b.grad.empty()) reduce_scatter_grad(b);
        break;
    }
    // Hybrid sharding: the shard groups sum the step's reduced shards across each other.
    if (plan_.zero_stage >= 1 && plan_.zero_replicas() > 1) {
      float* shard =
          plan_.zero_stage == 1 ? b.grad.data() + shard_rank_ * b.shard : b.grad_shard.data();
      comm_.all_reduce(CommGroup::kDpReplica, shard, b.shard, ReduceOp::kSum,
                       "hsdp_grad_all_reduce");
    }
  }
}

void Trainer::optimizer_step() {
  ++step_;
  TraceScope optimizer(trace_, {.pass = 'O', .micro_batch = -1, .layer = -1});
  TraceSpan span(trace_);
  span.begin("optimizer");
  AdamW adamw = options_.adamw;
  if (options_.lr_warmup_steps > 0 && step_ < options_.lr_warmup_steps)
    adamw.lr *= static_cast<float>(step_) / static_cast<float>(options_.lr_warmup_steps);
  for (Block& b : blocks_) {
    // The updated range [off, off + n) of the block, and its parameters and gradient there.
    const bool sharded = plan_.zero_stage >= 1;
    const std::int64_t off = sharded ? shard_rank_ * b.shard : 0, n = sharded ? b.shard : b.padded;
    float* p = plan_.zero_stage == 3 ? b.param_shard.data() : b.param.data() + off;
    const float* g = plan_.zero_stage >= 2 ? b.grad_shard.data() : b.grad.data() + off;
    for_each_decay_run(b.decayed, off, off + n, [&](std::int64_t at, std::int64_t count, bool decay) {
      const std::int64_t i = at - off;
      adamw_update(adamw, step_, count, p + i, g + i, b.m.data() + i, b.v.data() + i,
                   decay);
    });
    if (sharded) {
      if (plan_.zero_stage <= 2) {
        span.end();
        {
          TraceScope after_optimizer(trace_, {.pass = ' '});
          comm_.all_gather(CommGroup::kDp, p, b.param.data(), b.shard,
                           "zero_param_all_gather");  // in place
        }
        span.begin("optimizer");
      }
      std::fill(b.grad_shard.begin(), b.grad_shard.end(), 0.0f);
    }
    std::fill(b.grad.begin(), b.grad.end(), 0.0f);
  }
}

void Trainer::set_trace(TraceRecorder* trace) {
  trace_ = trace;
  stage_model_->set_trace(trace);
  comm_.set_trace(trace);
}

Result<StepResult> Trainer::step(const std::vector<std::int32_t>& batch, TraceRecorder* trace) {
  if (trace != nullptr) {
    // Ranks' clocks share no origin and ranks leave the previous step apart (by 50-500 us in
    // execute's traces): a traced step starts on every rank together, so that its time 0 is one
    // instant everywhere (to within the all-reduce's exit skew) and the ranks' traces line up.
    double sync = 0;
    comm_.control_all_reduce(&sync, 1, ReduceOp::kSum);
  }
  const auto t0 = std::chrono::steady_clock::now();
  if (trace != nullptr) {
    trace->start_step(t0);
    set_trace(trace);
  }
  // Uninstalls the recorder however the step ends.
  struct Untrace {
    Trainer* t;
    ~Untrace() {
      if (t->trace_ != nullptr) t->set_trace(nullptr);
    }
  } untrace{this};
  const std::int64_t need = plan_.global_batch_size * (model_.seq_len + 1);
  if (static_cast<std::int64_t>(batch.size()) != need)
    return Status::Error("batch has " + std::to_string(batch.size()) + " tokens, the step needs " +
                         std::to_string(need));
  for (std::int32_t tok : batch)
    if (tok < 0 || tok >= model_.vocab_size)
      return Status::Error("token " + std::to_string(tok) + " is outside the vocabulary [0, " +
                           std::to_string(model_.vocab_size) + ")");
  double loss_sum = 0;
  run_schedule(batch, loss_sum);
  // The loss lives on the last stage; its TP ranks hold the same value, so one counts it.
  const bool reporter = stage_ == plan_.pp - 1 && comm_.group_rank(CommGroup::kTp) == 0;
  const bool bad = reporter && !std::isfinite(loss_sum);
  double control[2] = {reporter && !bad ? loss_sum : 0.0, bad ? 1.0 : 0.0};
  comm_.control_all_reduce(control, 2, ReduceOp::kSum);  // control traffic: not traced
  if (control[1] > 0) {
    double who = bad ? static_cast<double>(comm_.world_rank()) : -1.0;
    comm_.control_all_reduce(&who, 1, ReduceOp::kMax);
    return Status::Error("non-finite loss at step " + std::to_string(step_ + 1) + " on rank " +
                             std::to_string(static_cast<std::int64_t>(who)) +
                             " (last pipeline stage); stopping",
                         ExitCode::kRuntime);
  }
  {
    TraceScope after_backward(trace_, {.pass = ' ', .micro_batch = -1, .layer = -1});
    finish_gradients();
  }
  if (options_.before_optimizer) options_.before_optimizer(*this);
  const auto t1 = std::chrono::steady_clock::now();
  optimizer_step();
  StepResult r;
  r.optimizer_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  r.loss = control[0] / static_cast<double>(plan_.global_batch_size * model_.seq_len);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

void Trainer::for_each_param(const std::function<void(const TensorSlice&, std::int64_t,
                                                      std::int64_t, float)>& fn) const {
  const std::vector<BlockLayout>& layouts = stage_model_->layouts();
  for (std::size_t i = 0; i < blocks_.size(); ++i) {
    const Block& b = blocks_[i];
    const bool sharded = plan_.zero_stage == 3;
    const std::int64_t begin = sharded ? shard_rank_ * b.shard : 0;
    const std::int64_t end = std::min(sharded ? begin + b.shard : b.padded, layouts[i].size);
    for (const TensorSlice& t : layouts[i].tensors) {
      for (std::int64_t j = std::max(begin, t.offset); j < std::min(end, t.offset + t.size());
           ++j) {
        const std::int64_t local = j - t.offset;
        const float v = sharded ? b.param_shard[static_cast<std::size_t>(j - begin)]
                                : b.param[static_cast<std::size_t>(j)];
        fn(t, t.row0 + local / t.cols, t.col0 + local % t.cols, v);
      }
    }
  }
}

Status Trainer::for_each_grad(const std::function<void(const TensorSlice&, std::int64_t,
                                                      std::int64_t, float)>& fn) const {
  // ZeRO-2/3 keep only the reduced shard; ZeRO-1 over several ranks reduces only its shard in
  // place (the rest of its buffer is this rank's own, unreduced, contribution).
  if (plan_.zero_stage >= 2 || (plan_.zero_stage == 1 && plan_.zero_shard_ranks() > 1))
    return Status::Error("zero_stage=" + std::to_string(plan_.zero_stage) +
                             ": this rank holds no full reduced gradient; read gradients with "
                             "zero_stage 0, or 1 on one rank",
                         ExitCode::kInvalidInput);
  const std::vector<BlockLayout>& layouts = stage_model_->layouts();
  for (std::size_t i = 0; i < blocks_.size(); ++i)
    for (const TensorSlice& t : layouts[i].tensors)
      for (std::int64_t j = 0; j < t.size(); ++j)
        fn(t, t.row0 + j / t.cols, t.col0 + j % t.cols,
           blocks_[i].grad[static_cast<std::size_t>(t.offset + j)]);
  return Status::Ok();
}

void Trainer::capture_logits(std::vector<float>* sink) { stage_model_->capture_logits(sink); }

}  // namespace trainplan::executor
