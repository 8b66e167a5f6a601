// The CPU backend; see cpu_stage.h. Each operation is the "how" of one step of the Trainer's
// data-parallel control flow (trainer.cc), on float32 host buffers.
#include "executor/cpu/cpu_stage.h"

#include <algorithm>

#include "executor/cpu/gpt.h"
#include "executor/cpu/kernels.h"

namespace trainplan::executor {
namespace {

// The blocks' buffers start on Eigen's packet alignment (64 bytes with AVX-512): Eigen's
// vectorised reductions over an unaligned Map peel up to the first aligned element
// (Eigen/src/Core/Redux.h, first_default_aligned), so the order of a sum, and its last bits,
// would otherwise depend on where malloc put the buffer, and two runs of one plan in a process
// would differ.
using Floats = std::vector<float, Eigen::aligned_allocator<float>>;

class CpuStage final : public Stage, private BlockAccess {
 public:
  CpuStage(const ModelSpec& model, const Plan& plan, std::int64_t stage, Comm& comm,
           DpEvents& events)
      : plan_(plan), comm_(comm), events_(events), shard_rank_(comm.group_rank(CommGroup::kDp)) {
    BlockAccess& access = *this;
    net_ = std::make_unique<StageModel>(model, plan, stage, comm, access);
    hidden_ = model.hidden_size;
  }

  // ---- the stage model ----
  const std::vector<BlockLayout>& layouts() const override { return net_->layouts(); }
  bool has_embedding(std::int64_t c) const override { return net_->has_embedding(c); }
  bool has_head(std::int64_t c) const override { return net_->has_head(c); }
  std::int64_t message_words() const override { return net_->shape().local_tokens * hidden_; }
  void load_tokens(const std::vector<std::int32_t>& inputs,
                   const std::vector<std::int32_t>& targets) override {
    inputs_ = inputs;
    targets_ = targets;
    loss_sum_ = 0;
  }
  float* receive_buffer() override {
    received_.resize(net_->shape().local_tokens, hidden_);
    return received_.data();
  }
  void forward(std::int64_t chunk, std::int64_t mb, float loss_scale) override {
    const std::int64_t T = net_->shape().tokens;
    loss_sum_ += net_->forward(chunk, mb, inputs_.data() + mb * T, targets_.data() + mb * T,
                               &received_, &produced_, loss_scale);
  }
  void backward(std::int64_t chunk, std::int64_t mb) override {
    net_->backward(chunk, mb, &received_, &produced_);
  }
  void backward_input(std::int64_t chunk, std::int64_t mb) override {
    net_->backward_input(chunk, mb, &received_, &produced_);
  }
  void backward_weight(std::int64_t chunk, std::int64_t mb) override {
    net_->backward_weight(chunk, mb);
  }
  const float* send_buffer() override { return produced_.data(); }
  void drop_messages() override {
    received_ = Mat();
    produced_ = Mat();
  }
  double loss_sum() override { return loss_sum_; }

  // ---- parameters and gradients ----
  void init_block(std::size_t i, const BlockShape& shape, std::vector<float> full) override;
  void gather_params(std::size_t i) override {
    Block& b = blocks_[i];
    b.param.resize(static_cast<std::size_t>(b.shape.padded));
    comm_.all_gather(CommGroup::kDp, b.param_shard.data(), b.param.data(), b.shape.shard,
                     "zero3_param_all_gather");
  }
  void free_params(std::size_t i) override { Floats().swap(blocks_[i].param); }
  bool has_grad(std::size_t i) const override { return !blocks_[i].grad.empty(); }
  void ensure_grad(std::size_t i) override { grads(i); }
  void hold_summed(std::size_t i) override;
  void reduce_scatter_grad(std::size_t i) override;
  void all_reduce_grad(CommGroup g, const BlockRange& r, std::string_view task) override {
    comm_.all_reduce(g, blocks_[r.block].grad.data() + r.offset, r.count, ReduceOp::kSum, task);
  }
  void all_reduce_grads(CommGroup g, const std::vector<BlockRange>& rs,
                        std::string_view task) override;
  void all_reduce_grad_shard(CommGroup g, std::size_t i, std::string_view task) override {
    comm_.all_reduce(g, shard_grad(blocks_[i]), blocks_[i].shape.shard, ReduceOp::kSum, task);
  }
  void update(std::size_t i, const AdamW& opt, std::int64_t step) override;
  void all_gather_params(std::size_t i) override {
    Block& b = blocks_[i];
    comm_.all_gather(CommGroup::kDp, b.param.data() + shard_rank_ * b.shape.shard, b.param.data(),
                     b.shape.shard, "zero_param_all_gather");  // in place
  }
  void clear_grads(std::size_t i) override {
    Block& b = blocks_[i];
    std::fill(b.grad_shard.begin(), b.grad_shard.end(), 0.0f);
    std::fill(b.grad.begin(), b.grad.end(), 0.0f);
  }
  void for_each_param(const std::function<void(const TensorSlice&, std::int64_t, std::int64_t,
                                               float)>& fn) const override;
  Status for_each_grad(const std::function<void(const TensorSlice&, std::int64_t, std::int64_t,
                                                float)>& fn) const override;
  Status capture_logits(std::vector<float>* sink) override {
    net_->capture_logits(sink);
    return Status::Ok();
  }

  // ---- tracing ----
  void set_trace(StepTrace* trace, TraceClock::time_point origin) override {
    auto* recorder = dynamic_cast<TraceRecorder*>(trace);
    TRAINPLAN_CHECK(trace == nullptr || recorder != nullptr)
        << "the CPU backend records its trace into a TraceRecorder (trace.h)";
    if (recorder != nullptr) recorder->start_step(origin);
    recorder_ = recorder;
    net_->set_trace(recorder);
    comm_.set_trace(recorder);
    span_.reset();
  }
  void begin_span(std::string_view task) override {
    if (!span_) span_ = std::make_unique<TraceSpan>(recorder_);
    span_->begin(task);
  }
  void end_span() override {
    if (span_) span_->end();
  }

 private:
  struct Block {
    BlockShape shape;
    Floats param;                     // (padded) full; empty while a ZeRO-3 block is released
    Floats param_shard;               // (shard) ZeRO-3 only
    Floats grad;                      // (padded) this rank's accumulated gradient; ZeRO-2/3:
                                      // only between a block's backward and its reduce-scatter
    Floats held;                      // ZeRO-2/3: summed ranges kept between them
    Floats grad_shard;                // (shard) ZeRO-2/3: reduced gradient of the shard
    Floats m, v;                      // AdamW moments over the updated range
  };

  // ---- BlockAccess: the stage model's view of the blocks ----
  void acquire(std::size_t b, DpPoint point) override { events_.acquire(b, point); }
  void release(std::size_t b) override { events_.release(b); }
  void backward_done(std::size_t b) override { events_.backward_done(b); }
  const float* params(std::size_t i) override {
    TRAINPLAN_CHECK(!blocks_[i].param.empty()) << "block " << i << " used while not gathered";
    return blocks_[i].param.data();
  }
  float* grads(std::size_t i) override;
  // The block's reduced shard of the step's gradient: in place in ZeRO-1's full gradient, in
  // ZeRO-2/3's shard accumulator.
  float* shard_grad(Block& b) {
    return plan_.zero_stage == 1 ? b.grad.data() + shard_rank_ * b.shape.shard
                                 : b.grad_shard.data();
  }

  Plan plan_;
  Comm& comm_;
  DpEvents& events_;
  std::int64_t shard_rank_ = 0, hidden_ = 0;
  std::unique_ptr<StageModel> net_;
  std::vector<Block> blocks_;
  std::vector<std::int32_t> inputs_, targets_;
  Mat received_, produced_;  // the pass's pipeline messages
  double loss_sum_ = 0;
  TraceRecorder* recorder_ = nullptr;
  std::unique_ptr<TraceSpan> span_;
};

void CpuStage::init_block(std::size_t i, const BlockShape& shape, std::vector<float> full) {
  TRAINPLAN_CHECK(i == blocks_.size()) << "blocks are initialised in order";
  Block b;
  b.shape = shape;
  const std::int64_t padded = shape.padded, shard = shape.shard;
  // ZeRO-2/3 hold a block's full gradient only from its backward to its reduce-scatter
  // (grads() allocates it, reduce_scatter_grad frees it); below that, it lives for the step.
  if (plan_.zero_stage < 2) b.grad.assign(static_cast<std::size_t>(padded), 0.0f);
  const std::int64_t updated = plan_.zero_stage >= 1 ? shard : padded;
  b.m.assign(static_cast<std::size_t>(updated), 0.0f);
  b.v.assign(static_cast<std::size_t>(updated), 0.0f);
  // ZeRO-1 reduce-scatters in place into its full gradient; ZeRO-2/3 accumulate each
  // micro-batch's reduced shard, as their full gradient is freed in between.
  if (plan_.zero_stage >= 2) b.grad_shard.assign(static_cast<std::size_t>(shard), 0.0f);
  if (plan_.zero_stage == 3) {
    b.param_shard.assign(full.begin() + shard_rank_ * shard,
                         full.begin() + (shard_rank_ + 1) * shard);
  } else {
    b.param.assign(full.begin(), full.end());
  }
  blocks_.push_back(std::move(b));
}

float* CpuStage::grads(std::size_t i) {
  Block& b = blocks_[i];
  if (b.grad.empty()) {  // ZeRO-2/3: a fresh buffer for this micro-batch's backward
    b.grad.assign(static_cast<std::size_t>(b.shape.padded), 0.0f);
    if (!b.held.empty()) {  // with the tied / SP-norm sums set aside by earlier micro-batches
      auto from = b.held.begin();
      for (auto [off, n] : b.shape.summed) {
        std::copy_n(from, n, b.grad.begin() + off);
        from += n;
      }
      b.held.clear();
    }
  }
  return b.grad.data();
}

void CpuStage::hold_summed(std::size_t i) {
  Block& b = blocks_[i];
  for (auto [off, n] : b.shape.summed) {
    b.held.insert(b.held.end(), b.grad.begin() + off, b.grad.begin() + off + n);
    std::fill_n(b.grad.begin() + off, n, 0.0f);
  }
}

void CpuStage::reduce_scatter_grad(std::size_t i) {
  Block& b = blocks_[i];
  const std::int64_t n = b.shape.shard;
  float* shard = b.grad.data() + shard_rank_ * n;  // in place
  comm_.reduce_scatter(CommGroup::kDp, b.grad.data(), shard, n, "zero_grad_reduce_scatter");
  if (plan_.zero_stage < 2) return;
  for (std::int64_t j = 0; j < n; ++j) b.grad_shard[j] += shard[j];
  Floats().swap(b.grad);  // freed: the next micro-batch allocates it again
}

void CpuStage::all_reduce_grads(CommGroup g, const std::vector<BlockRange>& rs,
                                std::string_view task) {
  std::vector<float> joined;
  for (const BlockRange& r : rs) {
    const auto from = blocks_[r.block].grad.begin() + r.offset;
    joined.insert(joined.end(), from, from + r.count);
  }
  comm_.all_reduce(g, joined.data(), static_cast<std::int64_t>(joined.size()), ReduceOp::kSum,
                   task);
  auto from = joined.begin();
  for (const BlockRange& r : rs) {
    std::copy_n(from, r.count, blocks_[r.block].grad.begin() + r.offset);
    from += r.count;
  }
}

void CpuStage::update(std::size_t i, const AdamW& opt, std::int64_t step) {
  Block& b = blocks_[i];
  // The updated range [off, off + n) of the block, and its parameters and gradient there.
  const bool sharded = plan_.zero_stage >= 1;
  const std::int64_t off = sharded ? shard_rank_ * b.shape.shard : 0;
  const std::int64_t n = sharded ? b.shape.shard : b.shape.padded;
  float* p = plan_.zero_stage == 3 ? b.param_shard.data() : b.param.data() + off;
  const float* g = plan_.zero_stage >= 2 ? b.grad_shard.data() : b.grad.data() + off;
  for_each_decay_run(b.shape.decayed, off, off + n,
                     [&](std::int64_t at, std::int64_t count, bool decay) {
                       const std::int64_t j = at - off;
                       adamw_update(opt, step, count, p + j, g + j, b.m.data() + j,
                                    b.v.data() + j, decay);
                     });
}

void CpuStage::for_each_param(const std::function<void(const TensorSlice&, std::int64_t,
                                                       std::int64_t, float)>& fn) const {
  const std::vector<BlockLayout>& layouts = net_->layouts();
  for (std::size_t i = 0; i < blocks_.size(); ++i) {
    const Block& b = blocks_[i];
    // ZeRO-3 holds its shard only; below that, the whole block.
    const bool sharded = plan_.zero_stage == 3;
    const std::int64_t begin = sharded ? shard_rank_ * b.shape.shard : 0;
    const Floats& values = sharded ? b.param_shard : b.param;
    for_each_element(layouts[i], begin, begin + static_cast<std::int64_t>(values.size()),
                     [&](const TensorSlice& t, std::int64_t row, std::int64_t col,
                         std::int64_t at) {
                       fn(t, row, col, values[static_cast<std::size_t>(at - begin)]);
                     });
  }
}

Status CpuStage::for_each_grad(const std::function<void(const TensorSlice&, std::int64_t,
                                                       std::int64_t, float)>& fn) const {
  // ZeRO 0, and ZeRO-1 on one shard rank, reduce the whole block in place (the Trainer checks
  // the plan): the full gradient is the block's buffer.
  const std::vector<BlockLayout>& layouts = net_->layouts();
  for (std::size_t i = 0; i < blocks_.size(); ++i) {
    const Floats& grad = blocks_[i].grad;
    for_each_element(layouts[i], 0, static_cast<std::int64_t>(grad.size()),
                     [&](const TensorSlice& t, std::int64_t row, std::int64_t col,
                         std::int64_t at) { fn(t, row, col, grad[static_cast<std::size_t>(at)]); });
  }
  return Status::Ok();
}

}  // namespace

Backend cpu_backend(const ModelSpec& model, const Plan& plan) {
  return Backend{
      .check_supports = check_executor_supports,
      .make_stage = [model, plan](std::int64_t stage, Comm& comm, DpEvents& events) {
        return std::unique_ptr<Stage>(new CpuStage(model, plan, stage, comm, events));
      }};
}

Result<std::unique_ptr<Trainer>> make_cpu_trainer(const ModelSpec& model, const Plan& plan,
                                                  const TrainOptions& options, Comm& comm) {
  return Trainer::make(model, plan, options, &comm, cpu_backend(model, plan));
}

}  // namespace trainplan::executor
