// The CPU backend; see cpu_stage.h. Each operation is the "how" of one step of the Trainer's
// data-parallel control flow (trainer.cc), on float32 host buffers.
#include "executor/cpu/cpu_stage.h"

#include <algorithm>
#include <limits>

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

// Freed block buffers (a ZeRO-3 block's gathered parameters, a ZeRO-2/3 block's full
// gradient), kept for the next block of the same size instead of given back to the C library,
// so that a step past the first allocates nothing (executor/cpu/workspace.h says why). What is
// live is what the cost model counts; the pool holds the rest of the high-water mark.
class FloatsPool {
 public:
  // `v` with n elements (contents unspecified), from a freed buffer of that size if any.
  void take(Floats& v, std::size_t n) {
    for (std::size_t i = 0; i < free_.size(); ++i) {
      if (free_[i].size() != n) continue;
      v.swap(free_[i]);
      free_[i].swap(free_.back());
      free_.pop_back();
      return;
    }
    v.resize(n);
  }
  // Frees v's buffer into the pool; v is left empty.
  void give(Floats& v) {
    if (v.empty()) return;
    free_.emplace_back().swap(v);
  }
  double bytes() const {
    double sum = 0;
    for (const Floats& v : free_) sum += static_cast<double>(v.size() * sizeof(float));
    return sum;
  }

 private:
  std::vector<Floats> free_;
};

class CpuStage final : public Stage, private BlockAccess {
 public:
  CpuStage(const ModelSpec& model, const Plan& plan, std::int64_t stage, Comm& comm,
           DpEvents& events, OffloadOptions offload, MoeCapacityShares capacity_shares)
      : plan_(plan), comm_(comm), events_(events), offload_options_(std::move(offload)) {
    offload_ = plan.offload != Offload::kNone;
    offload_params_ = plan.offload == Offload::kOptimizerParams;  // validate_plan: ZeRO-3
    nvme_ = offload_ && plan.offload_device == OffloadDevice::kNvme;
    BlockAccess& access = *this;
    net_ = std::make_unique<StageModel>(model, plan, stage, comm, access, capacity_shares);
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
    aux_start_ = net_->aux_loss_trained();
    moved_ = {};
    // The gathers of the first step are the order the next ones repeat (stream_in).
    if (!gather_trace_.empty()) gathers_traced_ = true;
    gather_at_ = 0;
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
  // The messages' buffers are kept: every pass's are the same size (local tokens x hidden).
  void drop_messages() override {}
  double loss_sum() override { return loss_sum_; }
  double aux_loss_sum() override { return net_->aux_loss_trained() - aux_start_; }

  void account_memory(MemoryAccount& account) const override;

  // ---- parameters and gradients ----
  void init_block(std::size_t i, const BlockShape& shape, std::vector<float> full) override;
  void gather_params(std::size_t i) override {
    Block& b = blocks_[i];
    if (b.param.empty()) pool_.take(b.param, static_cast<std::size_t>(b.shape.padded));
    const float* shard = offload_params_ ? stream_in(i) : b.param_shard.data();
    for (const Part& part : b.parts)
      comm_.all_gather(part.group, shard + part.local, b.param.data() + part.offset,
                       part.shard,
                       part.expert ? "zero3_expert_param_all_gather" : "zero3_param_all_gather");
  }
  void free_params(std::size_t i) override { pool_.give(blocks_[i].param); }
  bool has_grad(std::size_t i) const override { return !blocks_[i].grad.empty(); }
  void ensure_grad(std::size_t i) override { grads(i); }
  void hold_summed(std::size_t i) override;
  void reduce_scatter_grad(std::size_t i) override;
  void all_reduce_grad(CommGroup g, const BlockRange& r, std::string_view task) override {
    comm_.all_reduce(g, blocks_[r.block].grad.data() + r.offset, r.count, ReduceOp::kSum, task);
  }
  void all_reduce_grads(CommGroup g, const std::vector<BlockRange>& rs,
                        std::string_view task) override;
  // Hybrid sharding sums the dense part only: the experts' group is never split in shard
  // groups (the cost model's dp_block_tasks).
  void all_reduce_grad_shard(CommGroup g, std::size_t i, std::string_view task) override {
    Block& b = blocks_[i];
    comm_.all_reduce(g, shard_grad(b, b.parts.front()), b.parts.front().shard, ReduceOp::kSum,
                     task);
  }
  void all_reduce_grad_shards(CommGroup g, std::size_t i, std::string_view task) override {
    Block& b = blocks_[i];
    comm_.all_reduce(g, grad_shards(b), b.owned, ReduceOp::kSum, task);
  }
  void update(std::size_t i, const AdamW& opt, std::int64_t step) override;
  void all_gather_params(std::size_t i) override {
    Block& b = blocks_[i];
    for (const Part& part : b.parts)  // in place
      comm_.all_gather(part.group, b.param.data() + part.owned(), b.param.data() + part.offset,
                       part.shard,
                       part.expert ? "zero_expert_param_all_gather" : "zero_param_all_gather");
  }
  void clear_grads(std::size_t i) override {
    Block& b = blocks_[i];
    std::fill(b.grad_shard.begin(), b.grad_shard.end(), 0.0f);
    std::fill(b.host_grad.begin(), b.host_grad.end(), 0.0f);
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
  Status capture_routing(RoutingCapture* sink) override {
    net_->capture_routing(sink);
    return Status::Ok();
  }

  // ---- offload tiers ----
  Status place_offloaded() override;
  OffloadBytes offload_bytes() const override { return moved_; }
  Status offload_status() const override { return io_; }

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
  // A block's parts as ZeRO shards them (the cost model's dp_block_tasks): the dense part over
  // the dp group, an MoE layer's experts over the expert data-parallel group (Megatron-Core's
  // expert data-parallel group, parallel_state.get_expert_data_parallel_group: the distributed
  // optimizer shards expert parameters over it, the others over the data-parallel group). This
  // rank's shards of every part sit one after the other in the shard buffers.
  struct Part {
    std::int64_t offset = 0;  // the part's first element in the block
    std::int64_t shard = 0;   // one rank's share of the part
    std::int64_t rank = 0;    // which share is this rank's
    std::int64_t local = 0;   // where this rank's share starts in the shard buffers
    CommGroup group = CommGroup::kDp;
    bool expert = false;
    std::int64_t owned() const { return offset + rank * shard; }  // in the block
  };
  // A range AdamW updates: its offset in the block, its count, its offset in the updated range.
  struct Updated {
    std::int64_t offset = 0, count = 0, local = 0;
  };
  struct Block {
    BlockShape shape;
    std::vector<Part> parts;          // dense, then experts
    std::int64_t owned = 0;           // the shards' total: the shard buffers' size
    Floats param;                     // (padded) full; empty while a ZeRO-3 block is released
    Floats param_shard;               // (owned) ZeRO-3 only
    Floats grad;                      // (padded) this rank's accumulated gradient; ZeRO-2/3:
                                      // only between a block's backward and its reduce-scatter
    Floats held;                      // ZeRO-2/3: summed ranges kept between them
    Floats grad_shard;                // (owned) ZeRO-2/3: reduced gradient of the shards
    Floats m, v;                      // AdamW moments over the updated range
    // Offload (offload.h), over the updated range (n = updated(), this rank's shards one after
    // the other): off the device, and counted so in account_memory.
    Floats host_master;               // (n) offload_device cpu: the fp32 parameters the host
                                      // updates; optimizer+params: the rank's parameter shard
                                      // itself (nvme: in the file, with the moments)
    Floats host_grad;                 // (n) optimizer+params: the step's reduced gradient shard
    Floats host_m, host_v;            // (n each) offload_device cpu: AdamW's moments
    std::int64_t file_offset = 0;     // nvme: bytes into the file of the block's optimizer
                                      // states: m, v, then the fp32 parameters (3n floats;
                                      // optimizer+params: the parameter shard)
    std::vector<Updated> updated;     // offload: updated_ranges(), kept so that a step
                                      // allocates nothing
  };
  // The ranges AdamW updates: ZeRO 0 the whole block, ZeRO >= 1 this rank's share of each part.
  std::vector<Updated> updated_ranges(const Block& b) const {
    if (plan_.zero_stage == 0) return {{0, b.shape.padded, 0}};
    std::vector<Updated> out;
    for (const Part& part : b.parts) out.push_back({part.owned(), part.shard, part.local});
    return out;
  }
  std::int64_t updated(const Block& b) const {
    return plan_.zero_stage == 0 ? b.shape.padded : b.owned;
  }
  // The step's reduced gradient shards of a ZeRO-2/3 block (every part's, one after another):
  // on the host with optimizer+params.
  float* grad_shards(Block& b) {
    return offload_params_ ? b.host_grad.data() : b.grad_shard.data();
  }
  // optimizer+params: block i's parameter shard, streamed in for a gather (from the file with
  // nvme, where the gather before may have read it ahead); returns where it landed.
  const float* stream_in(std::size_t i);
  // nvme: starts reading block i's parameter shard from the file into bounce_ on reader_.
  void prefetch_shard(std::size_t i);
  // AdamW over block i on the host (update() with offload).
  void offload_update(std::size_t i, const AdamW& opt, std::int64_t step);
  void note(const Status& s) const {
    if (io_.ok() && !s.ok()) io_ = s;
  }

  // ---- BlockAccess: the stage model's view of the blocks ----
  void acquire(std::size_t b, DpPoint point) override { events_.acquire(b, point); }
  void release(std::size_t b) override { events_.release(b); }
  void backward_done(std::size_t b) override { events_.backward_done(b); }
  const float* params(std::size_t i) override {
    TRAINPLAN_CHECK(!blocks_[i].param.empty()) << "block " << i << " used while not gathered";
    return blocks_[i].param.data();
  }
  float* grads(std::size_t i) override;
  // A part's reduced shard of the step's gradient: in place in ZeRO-1's full gradient, in
  // ZeRO-2/3's shard accumulator.
  float* shard_grad(Block& b, const Part& part) {
    return plan_.zero_stage == 1 ? b.grad.data() + part.owned() : grad_shards(b) + part.local;
  }
  std::vector<Part> parts_of(const BlockShape& shape) const;

  Plan plan_;
  Comm& comm_;
  DpEvents& events_;
  std::int64_t hidden_ = 0;
  std::unique_ptr<StageModel> net_;
  std::vector<Block> blocks_;
  FloatsPool pool_;
  std::vector<float> joined_;  // all_reduce_grads' ranges, one after another
  std::vector<std::int32_t> inputs_, targets_;
  Mat received_, produced_;  // the pass's pipeline messages
  double loss_sum_ = 0, aux_start_ = 0;
  TraceRecorder* recorder_ = nullptr;
  std::unique_ptr<TraceSpan> span_;
  // Offload (offload.h).
  OffloadOptions offload_options_;
  bool offload_ = false, offload_params_ = false, nvme_ = false;
  std::int64_t largest_updated_ = 0;  // the largest block's n
  std::unique_ptr<OffloadFile> file_;  // nvme; before reader_, which may be reading it
  Floats grad_in_;    // (largest n) optimizer: a block's gradient shard copied to the host
  Floats states_[2];  // (3 x largest n each) nvme: a block's states (m, v, fp32 parameters)
                      // read from the file; the other one receives the next block's while this
                      // one is updated
  Floats fetched_;    // (largest n) optimizer+params: the shard streamed in for a gather
  Floats bounce_;     // (largest n) nvme and optimizer+params: the shard read from the file
  std::unique_ptr<BackgroundReader> reader_;  // nvme prefetch: the next block's moments, or
                                               // the next gather's parameter shard
  enum class Reading { kMoments, kShard };
  Reading reading_ = Reading::kMoments;        // what reader_ reads (busy() only)
  std::size_t next_block_ = 0;                 // and whose (busy() only)
  // optimizer+params on nvme: the blocks in the order of the first step's gathers (the trace
  // the prefetch follows from the second step on), and where this step is in it.
  std::vector<std::size_t> gather_trace_;
  bool gathers_traced_ = false;
  std::size_t gather_at_ = 0;
  OffloadBytes moved_;  // since the step began
  mutable Status io_;   // the first offload I/O error (for_each_param's reads included)
};

// The blocks' buffers by use, the pipeline messages, and the stage model's (gpt.h).
void CpuStage::account_memory(MemoryAccount& account) const {
  auto bytes = [](const auto& v) { return static_cast<double>(v.size() * sizeof(float)); };
  for (const Block& b : blocks_) {
    account.add("block.params", MemoryUse::kWeights, bytes(b.param));
    account.add("block.param_shard", MemoryUse::kWeights, bytes(b.param_shard));
    account.add("block.grad", MemoryUse::kGradients, bytes(b.grad));
    account.add("block.grad_held", MemoryUse::kGradients, bytes(b.held));
    account.add("block.grad_shard", MemoryUse::kGradients, bytes(b.grad_shard));
    account.add("block.adam_moments", MemoryUse::kOptimizer, bytes(b.m) + bytes(b.v));
    account.add("offload.host_params", MemoryUse::kOffloadHost, bytes(b.host_master));
    account.add("offload.host_grad_shard", MemoryUse::kOffloadHost, bytes(b.host_grad));
    account.add("offload.host_adam_moments", MemoryUse::kOffloadHost,
                bytes(b.host_m) + bytes(b.host_v));
  }
  account.add("offload.grad_staging", MemoryUse::kOffloadHost, bytes(grad_in_));
  account.add("offload.nvme_read_buffers", MemoryUse::kOffloadHost,
              bytes(states_[0]) + bytes(states_[1]) + bytes(bounce_));
  account.add("offload.fetched_shard", MemoryUse::kWeights, bytes(fetched_));
  if (file_)
    account.add("offload.nvme_file", MemoryUse::kOffloadNvme,
                static_cast<double>(file_->size_bytes()));
  account.add("block.pool", MemoryUse::kPooled, pool_.bytes());
  account.add("grad.joined_ranges", MemoryUse::kScratch, bytes(joined_));
  account.add("pipeline.received", MemoryUse::kCommBuffers, bytes(received_));
  account.add("pipeline.produced", MemoryUse::kCommBuffers, bytes(produced_));
  net_->account_memory(account);
}

void CpuStage::init_block(std::size_t i, const BlockShape& shape, std::vector<float> full) {
  TRAINPLAN_CHECK(i == blocks_.size()) << "blocks are initialised in order";
  Block b;
  b.shape = shape;
  b.parts = parts_of(shape);
  for (const Part& part : b.parts) b.owned += part.shard;
  const std::int64_t padded = shape.padded, owned = b.owned;
  // ZeRO-2/3 hold a block's full gradient only from its backward to its reduce-scatter
  // (grads() allocates it, reduce_scatter_grad frees it); below that, it lives for the step.
  if (plan_.zero_stage < 2) b.grad.assign(static_cast<std::size_t>(padded), 0.0f);
  const auto n = static_cast<std::size_t>(plan_.zero_stage >= 1 ? owned : padded);
  if (!offload_) {
    b.m.assign(n, 0.0f);
    b.v.assign(n, 0.0f);
  } else {
    // The host's fp32 copy of the updated parameters and (cpu) the moments beside it; nvme
    // writes both to the file (place_offloaded) and keeps neither in host memory.
    b.updated = updated_ranges(b);
    for (const Updated& r : b.updated)
      b.host_master.insert(b.host_master.end(), full.begin() + r.offset,
                           full.begin() + r.offset + r.count);
    if (!nvme_) {
      b.host_m.assign(n, 0.0f);
      b.host_v.assign(n, 0.0f);
    }
    if (offload_params_) b.host_grad.assign(n, 0.0f);
    largest_updated_ = std::max(largest_updated_, static_cast<std::int64_t>(n));
  }
  // ZeRO-1 reduce-scatters in place into its full gradient; ZeRO-2/3 accumulate each
  // micro-batch's reduced shard, as their full gradient is freed in between (optimizer+params:
  // on the host).
  if (plan_.zero_stage >= 2 && !offload_params_)
    b.grad_shard.assign(static_cast<std::size_t>(owned), 0.0f);
  if (offload_params_) {
    // The shard lives off the device (host_master; with nvme, the file).
  } else if (plan_.zero_stage == 3) {
    for (const Part& part : b.parts)
      b.param_shard.insert(b.param_shard.end(), full.begin() + part.owned(),
                           full.begin() + part.owned() + part.shard);
  } else {
    b.param.assign(full.begin(), full.end());
  }
  blocks_.push_back(std::move(b));
}

float* CpuStage::grads(std::size_t i) {
  Block& b = blocks_[i];
  if (b.grad.empty()) {  // ZeRO-2/3: a fresh buffer for this micro-batch's backward
    pool_.take(b.grad, static_cast<std::size_t>(b.shape.padded));
    std::fill(b.grad.begin(), b.grad.end(), 0.0f);
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

std::vector<CpuStage::Part> CpuStage::parts_of(const BlockShape& shape) const {
  std::vector<Part> parts;
  Part dense;
  dense.shard = shape.shard;
  dense.rank = comm_.group_rank(CommGroup::kDp);
  parts.push_back(dense);
  if (shape.expert_offset < 0) return parts;
  Part experts;
  experts.offset = shape.expert_offset;
  experts.shard = shape.expert_shard;
  experts.rank = comm_.group_rank(CommGroup::kExpertDp);
  experts.local = dense.shard;
  experts.group = CommGroup::kExpertDp;
  experts.expert = true;
  TRAINPLAN_CHECK(experts.shard * comm_.group_size(CommGroup::kExpertDp) == shape.expert_size)
      << "the experts' " << shape.expert_size << " elements do not split over the "
      << comm_.group_size(CommGroup::kExpertDp) << " expert data-parallel ranks";
  parts.push_back(experts);
  return parts;
}

void CpuStage::reduce_scatter_grad(std::size_t i) {
  Block& b = blocks_[i];
  for (const Part& part : b.parts) {
    float* shard = b.grad.data() + part.owned();  // in place
    comm_.reduce_scatter(part.group, b.grad.data() + part.offset, shard, part.shard,
                         part.expert ? "zero_expert_grad_reduce_scatter"
                                     : "zero_grad_reduce_scatter");
    if (plan_.zero_stage < 2) continue;
    // optimizer+params: the reduced shard goes to the host and is accumulated there.
    float* into = grad_shards(b) + part.local;
    for (std::int64_t j = 0; j < part.shard; ++j) into[j] += shard[j];
    if (offload_params_) moved_.device_to_host += static_cast<double>(part.shard * 4);
  }
  if (plan_.zero_stage >= 2) pool_.give(b.grad);  // freed: the next micro-batch takes one
}

void CpuStage::all_reduce_grads(CommGroup g, const std::vector<BlockRange>& rs,
                                std::string_view task) {
  std::vector<float>& joined = joined_;
  joined.clear();  // keeps its capacity
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
  if (offload_) {
    offload_update(i, opt, step);
    return;
  }
  Block& b = blocks_[i];
  // Each updated range [off, off + n) of the block (ZeRO 0: the whole; ZeRO >= 1: this rank's
  // share of each part), its parameters and gradient there, and its moments from `local`.
  auto update_range = [&](std::int64_t off, std::int64_t n, std::int64_t local) {
    float* p = plan_.zero_stage == 3 ? b.param_shard.data() + local : b.param.data() + off;
    const float* g = plan_.zero_stage >= 2 ? b.grad_shard.data() + local : b.grad.data() + off;
    for_each_decay_run(b.shape.decayed, off, off + n,
                       [&](std::int64_t at, std::int64_t count, bool decay) {
                         const std::int64_t j = at - off;
                         adamw_update(opt, step, count, p + j, g + j, b.m.data() + local + j,
                                      b.v.data() + local + j, decay);
                       });
  };
  if (plan_.zero_stage == 0) {
    update_range(0, b.shape.padded, 0);
    return;
  }
  for (const Part& part : b.parts) update_range(part.owned(), part.shard, part.local);
}

Status CpuStage::place_offloaded() {
  if (!offload_) return Status::Ok();
  const auto largest = static_cast<std::size_t>(largest_updated_);
  if (!offload_params_) grad_in_.resize(largest);
  if (offload_params_) fetched_.resize(largest);
  if (!nvme_) return Status::Ok();
  // The file: per block its optimizer states, the moments and the fp32 parameters the host
  // updates (3n floats), as DeepSpeed's NVMe tier swaps the fp32 partition out with the
  // moments (stage3.py, _create_fp32_partitions: a swappable sub-group's fp32 partition is
  // on NVMe, not in host memory); with optimizer+params that copy is the parameter shard the
  // gathers read.
  std::int64_t bytes = 0;
  for (Block& b : blocks_) {
    b.file_offset = bytes;
    bytes += 3 * updated(b) * static_cast<std::int64_t>(sizeof(float));
  }
  auto file = OffloadFile::create(offload_options_.dir, comm_.world_rank(), bytes);
  if (!file.ok()) return file.status();
  file_ = std::move(*file);
  for (Floats& buffer : states_) buffer.resize(3 * largest);
  if (offload_params_) bounce_.resize(largest);
  if (offload_options_.prefetch) reader_ = std::make_unique<BackgroundReader>();
  // The initial states: zero moments and the initial parameters (not counted: before any
  // step), which then leave host memory.
  std::fill(states_[0].begin(), states_[0].end(), 0.0f);
  for (Block& b : blocks_) {
    const std::int64_t n = updated(b), fb = n * static_cast<std::int64_t>(sizeof(float));
    TRAINPLAN_RETURN_IF_ERROR(file_->write(b.file_offset, states_[0].data(), 2 * fb));
    TRAINPLAN_RETURN_IF_ERROR(file_->write(b.file_offset + 2 * fb, b.host_master.data(), fb));
    Floats().swap(b.host_master);
  }
  return Status::Ok();
}

void CpuStage::prefetch_shard(std::size_t i) {
  const Block& b = blocks_[i];
  const std::int64_t n = updated(b), fb = n * static_cast<std::int64_t>(sizeof(float));
  reading_ = Reading::kShard;
  next_block_ = i;
  reader_->start(*file_, b.file_offset + 2 * fb, bounce_.data(), fb);
  moved_.nvme_read += static_cast<double>(fb);  // counted when read, used or not
  moved_.nvme_prefetched += static_cast<double>(fb);
}

const float* CpuStage::stream_in(std::size_t i) {
  Block& b = blocks_[i];
  const std::int64_t n = updated(b);
  const double bytes = static_cast<double>(n) * sizeof(float);
  const float* from = b.host_master.data();
  if (nvme_) {
    // ZeRO-Infinity (sec. 5.1): the shard is read from NVMe into host memory, then copied in.
    // Its prefetch (sec. 6.2, the overlap-centric design): the reads follow the operator
    // sequence traced in the first iteration (DeepSpeed's PartitionedParameterCoordinator
    // records the module order in the first step and prefetches along it after), so from the
    // second step on this block's shard was read on reader_ while the block gathered before it
    // computed. A gather off the trace waits for that read and reads its own (the wasted read
    // stays counted: bytes per step then exceed the cost model's, which the checks would see).
    bool have = false;
    if (reader_ && reader_->busy()) {
      have = reading_ == Reading::kShard && next_block_ == i;
      note(reader_->wait());
    }
    if (!have) {
      note(file_->read(b.file_offset + 2 * n * static_cast<std::int64_t>(sizeof(float)),
                       bounce_.data(), n * static_cast<std::int64_t>(sizeof(float))));
      moved_.nvme_read += bytes;
    }
    from = bounce_.data();
  }
  std::copy_n(from, n, fetched_.data());  // what ZeRO-Infinity puts on PCIe
  moved_.host_to_device += bytes;
  if (nvme_) {
    // bounce_ is free again: the next gather's shard goes into it while this block computes.
    // Never past the step's last gather: the optimizer writes the shards after it.
    if (!gathers_traced_) {
      gather_trace_.push_back(i);
    } else if (reader_ && gather_at_ + 1 < gather_trace_.size()) {
      prefetch_shard(gather_trace_[gather_at_ + 1]);
    }
    ++gather_at_;
  }
  return fetched_.data();
}

void CpuStage::offload_update(std::size_t i, const AdamW& opt, std::int64_t step) {
  Block& b = blocks_[i];
  const std::int64_t n = updated(b), fb = n * static_cast<std::int64_t>(sizeof(float));
  const std::vector<Updated>& ranges = b.updated;
  // The reduced gradient shard on the host (ZeRO-Offload, Ren et al. 2021, sec. 4.1: over PCIe
  // once per step); optimizer+params accumulated it there micro-batch by micro-batch.
  const float* g = b.host_grad.data();
  if (!offload_params_) {
    for (const Updated& r : ranges) {
      const float* from = plan_.zero_stage >= 2 ? b.grad_shard.data() + r.local
                                                : b.grad.data() + r.offset;
      std::copy_n(from, r.count, grad_in_.data() + r.local);
    }
    moved_.device_to_host += static_cast<double>(fb);
    g = grad_in_.data();
  }
  // AdamW's states: in host memory, or read from the file (ZeRO-Infinity, sec. 6.2), the
  // moments and the fp32 parameters together, where the prefetch of the block before may have
  // read them already.
  float* m = b.host_m.data();
  float* v = b.host_v.data();
  float* p = b.host_master.data();
  Floats& states = states_[i % 2];
  if (nvme_) {
    if (reader_ && reader_->busy() && reading_ == Reading::kMoments && next_block_ == i) {
      note(reader_->wait());
    } else {
      if (reader_ && reader_->busy()) note(reader_->wait());  // a stale prefetch: not this block's
      note(file_->read(b.file_offset, states.data(), 3 * fb));
    }
    moved_.nvme_read += static_cast<double>(3 * fb);
    m = states.data();
    v = states.data() + n;
    p = states.data() + 2 * n;
    if (reader_ && i + 1 < blocks_.size()) {
      const Block& after = blocks_[i + 1];
      reading_ = Reading::kMoments;
      next_block_ = i + 1;
      moved_.nvme_prefetched += 3.0 * static_cast<double>(updated(after)) * sizeof(float);
      reader_->start(*file_, after.file_offset, states_[(i + 1) % 2].data(),
                     3 * updated(after) * static_cast<std::int64_t>(sizeof(float)));
    }
  }
  // The same AdamW calls as update() without offload, on the host's copy.
  for (const Updated& r : ranges)
    for_each_decay_run(b.shape.decayed, r.offset, r.offset + r.count,
                       [&](std::int64_t at, std::int64_t count, bool decay) {
                         const std::int64_t j = r.local + at - r.offset;
                         adamw_update(opt, step, count, p + j, g + j, m + j, v + j, decay);
                       });
  if (nvme_) {
    note(file_->write(b.file_offset, states.data(), 3 * fb));
    moved_.nvme_write += static_cast<double>(3 * fb);
  }
  if (offload_params_) return;  // the shard stays off the device
  // The updated parameters back to the device (ZeRO-Offload's second PCIe transfer).
  for (const Updated& r : ranges) {
    float* into = plan_.zero_stage == 3 ? b.param_shard.data() + r.local : b.param.data() + r.offset;
    std::copy_n(p + r.local, r.count, into);
  }
  moved_.host_to_device += static_cast<double>(fb);
}

void CpuStage::for_each_param(const std::function<void(const TensorSlice&, std::int64_t,
                                                       std::int64_t, float)>& fn) const {
  const std::vector<BlockLayout>& layouts = net_->layouts();
  for (std::size_t i = 0; i < blocks_.size(); ++i) {
    const Block& b = blocks_[i];
    // ZeRO-3 holds its shard of each part only (optimizer+params: on the host, or in the
    // NVMe tier's file, read here; a failed read is the trainer's offload_status and its
    // elements are NaN); below that, the whole block.
    Floats from_file;
    if (offload_params_ && nvme_) {
      const std::int64_t n = updated(b), fb = n * static_cast<std::int64_t>(sizeof(float));
      from_file.assign(static_cast<std::size_t>(n), std::numeric_limits<float>::quiet_NaN());
      note(file_->read(b.file_offset + 2 * fb, from_file.data(), fb));
    }
    const Floats& shard = !offload_params_ ? b.param_shard : nvme_ ? from_file : b.host_master;
    if (plan_.zero_stage != 3) {
      for_each_element(layouts[i], 0, static_cast<std::int64_t>(b.param.size()),
                       [&](const TensorSlice& t, std::int64_t row, std::int64_t col,
                           std::int64_t at) { fn(t, row, col, b.param[static_cast<std::size_t>(at)]); });
      continue;
    }
    for (const Part& part : b.parts) {
      const std::int64_t begin = part.owned();
      for_each_element(layouts[i], begin, begin + part.shard,
                       [&](const TensorSlice& t, std::int64_t row, std::int64_t col,
                           std::int64_t at) {
                         fn(t, row, col,
                            shard[static_cast<std::size_t>(part.local + at - begin)]);
                       });
    }
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

Backend cpu_backend(const ModelSpec& model, const Plan& plan, const OffloadOptions& offload,
                    MoeCapacityShares capacity_shares) {
  return Backend{
      .check_supports = check_executor_supports,
      .make_stage = [model, plan, offload, capacity_shares](std::int64_t stage, Comm& comm,
                                                            DpEvents& events) {
        return std::unique_ptr<Stage>(
            new CpuStage(model, plan, stage, comm, events, offload, capacity_shares));
      }};
}

Result<std::unique_ptr<Trainer>> make_cpu_trainer(const ModelSpec& model, const Plan& plan,
                                                  const TrainOptions& options, Comm& comm) {
  return Trainer::make(model, plan, options, &comm,
                       cpu_backend(model, plan, options.offload, options.moe_capacity_shares));
}

}  // namespace trainplan::executor
