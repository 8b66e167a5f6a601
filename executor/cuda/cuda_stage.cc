// The CUDA backend; see cuda_stage.h. Each operation is the "how" of one step of the Trainer's
// data-parallel control flow (executor/trainer.cc) on device buffers; the data-parallel
// collectives carry their cost-model task names (dp_block_tasks), as executor/cpu/cpu_stage.cc's.
#include "executor/cuda/cuda_stage.h"

#include <algorithm>

#include "executor/cuda/gpt_cuda.h"
#include "executor/cuda/kernels.h"

namespace trainplan::executor::cuda {
namespace {

template <typename T>
DeviceBuffer<T> upload(const std::vector<T>& host) {
  DeviceBuffer<T> d(static_cast<std::int64_t>(host.size()));
  if (!host.empty()) to_device(host.data(), d.data(), d.size());
  return d;
}
template <typename T>
void zero(DeviceBuffer<T>& d, cudaStream_t s) {
  if (!d.empty())
    TP_CUDA(cudaMemsetAsync(d.data(), 0, static_cast<std::size_t>(d.size()) * sizeof(T), s));
}
void copy_floats(float* to, const float* from, std::int64_t n, cudaStream_t s) {
  TP_CUDA(cudaMemcpyAsync(to, from, static_cast<std::size_t>(n) * sizeof(float),
                          cudaMemcpyDeviceToDevice, s));
}

class CudaStage final : public Stage, private DeviceBlockAccess {
 public:
  CudaStage(const ModelSpec& model, const Plan& plan, std::int64_t stage, NcclComm* comm,
            DpEvents& events)
      : plan_(plan), comm_(comm), events_(events) {
    TP_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    gemm_ = std::make_unique<Gemm>();
    timer_ = std::make_unique<PhaseTimer>(stream_);
    DeviceBlockAccess& access = *this;
    net_ = std::make_unique<CudaStageModel>(model, plan, stage, comm, access, *gemm_, stream_);
    shard_rank_ = comm != nullptr ? comm->group_rank(CommGroup::kDp) : 0;
    hidden_ = model.hidden_size;
    loss_sum_.resize(1);
  }
  ~CudaStage() override {
    span_.reset();
    timer_.reset();
    net_.reset();
    gemm_.reset();
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  // ---- the stage model ----
  const std::vector<BlockLayout>& layouts() const override { return net_->layouts(); }
  bool has_embedding(std::int64_t c) const override { return net_->has_embedding(c); }
  bool has_head(std::int64_t c) const override { return net_->has_head(c); }
  // Pipeline messages are bf16 activations sent through Comm's float32 calls as pairs: the
  // bytes counted are the bf16 bytes (pipeline_message_bytes).
  std::int64_t message_words() const override {
    const std::int64_t elements = net_->shape().local_tokens * hidden_;
    TRAINPLAN_CHECK(elements % 2 == 0) << "pipeline messages travel as float pairs";
    return elements / 2;
  }
  void load_tokens(const std::vector<std::int32_t>& inputs,
                   const std::vector<std::int32_t>& targets) override {
    timer_->clear();
    TP_CUDA(cudaMemsetAsync(loss_sum_.data(), 0, sizeof(double), stream_));
    inputs_ = upload(inputs);
    targets_ = upload(targets);
  }
  float* receive_buffer() override {
    // The receive writes on NCCL's stream into a pool block that the compute stream may still
    // be using (the pool orders reuse on the compute stream only): drain it first.
    TP_CUDA(cudaStreamSynchronize(stream_));
    received_.resize(message_words() * 2);
    return reinterpret_cast<float*>(received_.data());
  }
  void forward(std::int64_t chunk, std::int64_t mb, float loss_scale) override {
    const std::int64_t T = net_->shape().tokens;
    net_->forward(chunk, mb, inputs_.data() + mb * T, targets_.data() + mb * T, &received_,
                  &produced_, loss_scale, loss_sum_.data());
  }
  void backward(std::int64_t chunk, std::int64_t mb) override {
    net_->backward(chunk, mb, &received_, &produced_);
  }
  const float* send_buffer() override {
    TP_CUDA(cudaStreamSynchronize(stream_));  // send copies the message at once: complete it
    return reinterpret_cast<const float*>(produced_.data());
  }
  void drop_messages() override {
    received_.release();
    produced_.release();
  }
  double loss_sum() override { return to_host(loss_sum_.data(), 1, stream_)[0]; }

  // ---- parameters and gradients ----
  void init_block(std::size_t i, const BlockShape& shape, std::vector<float> full) override;
  void gather_params(std::size_t i) override;
  void free_params(std::size_t i) override {
    blocks_[i].gathered.release();  // back to the pool, in stream order
  }
  bool has_grad(std::size_t i) const override { return !blocks_[i].grad.empty(); }
  void ensure_grad(std::size_t i) override { grads(i); }
  void hold_summed(std::size_t i) override;
  void reduce_scatter_grad(std::size_t i) override;
  void all_reduce_grad(CommGroup g, const BlockRange& r, std::string_view task) override {
    if (group_size(g) > 1) reduce_f32(g, blocks_[r.block].grad.data() + r.offset, r.count, task);
  }
  void all_reduce_grads(CommGroup g, const std::vector<BlockRange>& rs,
                        std::string_view task) override;
  void all_reduce_grad_shard(CommGroup g, std::size_t i, std::string_view task) override {
    Block& b = blocks_[i];
    float* shard = plan_.zero_stage == 1 ? b.grad.data() + b.master_offset : b.grad_shard.data();
    if (group_size(g) > 1) reduce_f32(g, shard, b.shape.shard, task);
  }
  void update(std::size_t i, const AdamW& opt, std::int64_t step) override;
  void all_gather_params(std::size_t i) override {
    Block& b = blocks_[i];
    if (group_size(CommGroup::kDp) > 1)
      comm_->all_gather_device(CommGroup::kDp, b.compute.data() + b.master_offset,
                               b.compute.data(), b.shape.shard, DType::kBF16, stream_,
                               "zero_param_all_gather");
  }
  void clear_grads(std::size_t i) override {
    zero(blocks_[i].grad, stream_);
    zero(blocks_[i].grad_shard, stream_);
  }
  void for_each_param(const std::function<void(const TensorSlice&, std::int64_t, std::int64_t,
                                               float)>& fn) const override;
  // The PyTorch reference check (execute --dump-reference) reads float32 gradients and logits of
  // the CPU backend only; this one keeps bf16 activations and its gradients on the device.
  Status for_each_grad(const std::function<void(const TensorSlice&, std::int64_t, std::int64_t,
                                                float)>&) const override {
    return Status::Error("the CUDA backend does not read its gradients back to the host (the "
                         "reference dump is CPU-only: --backend cpu)",
                         ExitCode::kUsage);
  }
  Status capture_logits(std::vector<float>*) override {
    return Status::Error("the CUDA backend does not capture logits (the reference dump is "
                         "CPU-only: --backend cpu)",
                         ExitCode::kUsage);
  }

  // ---- tracing and timing ----
  void set_trace(StepTrace* trace, TraceClock::time_point) override {
    auto* device_trace = dynamic_cast<DeviceTrace*>(trace);
    TRAINPLAN_CHECK(trace == nullptr || device_trace != nullptr)
        << "the CUDA backend records its trace into a DeviceTrace (device_trace.h)";
    span_.reset();
    if (device_trace != nullptr) device_trace->start_step(stream_);
    trace_ = device_trace;
    net_->set_trace(device_trace);
    if (comm_ != nullptr) comm_->set_trace(device_trace);
  }
  void begin_span(std::string_view task) override {
    if (!span_) span_ = std::make_unique<DeviceTraceSpan>(trace_, stream_);
    span_->begin(task);
  }
  void end_span() override {
    if (span_) span_->end();
  }
  void begin_phase(const char* phase) override { timer_->begin(phase); }
  void end_phase(const char* phase) override { timer_->end(phase); }
  void finish_step(std::map<std::string, double>& phase_s,
                   std::vector<PhaseSpan>& spans) override {
    TP_CUDA(cudaStreamSynchronize(stream_));
    phase_s = timer_->elapsed_s();
    for (const PhaseTimer::SpanTime& s : timer_->spans())
      spans.push_back({s.phase, s.start_s, s.duration_s});
  }

 private:
  struct Block {
    BlockShape shape;
    std::int64_t master_offset = 0;      // first padded element of `master` (shard_rank * shard)
    DeviceBuffer<float> master;          // (padded) DDP, (shard) ZeRO >= 1
    DeviceBuffer<float> m, v;            // like master
    DeviceBuffer<std::int64_t> decayed;  // (begin, end) pairs into master: AdamW decays there
    std::int64_t decayed_ranges = 0;
    DeviceBuffer<bf16> compute;          // (padded) compute weights; ZeRO-3: (shard)
    DeviceBuffer<bf16> gathered;         // ZeRO-3: (padded) while acquired
    DeviceBuffer<float> grad;            // (padded) this rank's accumulated gradient; ZeRO-1:
                                         // reduced in place (its shard at master_offset);
                                         // ZeRO-2/3: from a backward to its reduce-scatter
    DeviceBuffer<float> held;            // ZeRO-2/3: summed ranges kept between them
    DeviceBuffer<float> grad_shard;      // (shard) ZeRO-2/3: reduced gradient of the shard
  };

  // ---- DeviceBlockAccess: the stage model's view of the blocks ----
  void acquire(std::size_t b, DpPoint point) override { events_.acquire(b, point); }
  void release(std::size_t b) override { events_.release(b); }
  void backward_done(std::size_t b) override { events_.backward_done(b); }
  const bf16* params(std::size_t i) override {
    Block& b = blocks_[i];
    if (plan_.zero_stage != 3) return b.compute.data();
    TRAINPLAN_CHECK(!b.gathered.empty()) << "block " << i << " used while not gathered";
    return b.gathered.data();
  }
  float* grads(std::size_t i) override;

  std::int64_t group_size(CommGroup g) const {
    return comm_ != nullptr ? comm_->group_size(g) : 1;
  }
  // Sums n gradient elements over group g in the plan's gradient precision.
  void reduce_f32(CommGroup g, float* grad, std::int64_t n, std::string_view task);

  Plan plan_;
  NcclComm* comm_;
  DpEvents& events_;
  std::int64_t shard_rank_ = 0, hidden_ = 0;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<Gemm> gemm_;
  std::unique_ptr<PhaseTimer> timer_;
  std::unique_ptr<CudaStageModel> net_;
  std::vector<Block> blocks_;
  DeviceBuffer<std::int32_t> inputs_, targets_;  // (M, T) the step's tokens
  DeviceBuffer<bf16> received_, produced_;       // the pass's pipeline messages
  DeviceBuffer<double> loss_sum_;
  DeviceBuffer<bf16> grad16_;  // grad_precision compute: gradients cast for the collectives
  DeviceTrace* trace_ = nullptr;
  std::unique_ptr<DeviceTraceSpan> span_;
};

void CudaStage::init_block(std::size_t i, const BlockShape& shape, std::vector<float> full) {
  TRAINPLAN_CHECK(i == blocks_.size()) << "blocks are initialised in order";
  Block b;
  b.shape = shape;
  const bool sharded = plan_.zero_stage >= 1;
  b.master_offset = sharded ? shard_rank_ * shape.shard : 0;
  const std::int64_t n = sharded ? shape.shard : shape.padded;
  const auto first = full.begin() + b.master_offset;
  b.master = upload(std::vector<float>(first, first + n));
  // The decayed runs of this rank's range, relative to `master`.
  std::vector<std::int64_t> runs;
  for_each_decay_run(shape.decayed, b.master_offset, b.master_offset + n,
                     [&](std::int64_t at, std::int64_t count, bool decay) {
                       if (!decay) return;
                       runs.push_back(at - b.master_offset);
                       runs.push_back(at - b.master_offset + count);
                     });
  b.decayed = upload(runs);
  b.decayed_ranges = static_cast<std::int64_t>(runs.size() / 2);
  b.m.resize(n);
  b.v.resize(n);
  zero(b.m, stream_);
  zero(b.v, stream_);
  b.compute.resize(plan_.zero_stage == 3 ? shape.shard : shape.padded);
  if (plan_.zero_stage == 3) {
    cast_f32_to_bf16(b.master.data(), b.compute.data(), shape.shard, stream_);
  } else {
    DeviceBuffer<float> all = upload(full);
    cast_f32_to_bf16(all.data(), b.compute.data(), shape.padded, stream_);
  }
  // ZeRO-2/3 hold a block's full gradient only from its backward to its reduce-scatter
  // (grads() allocates it, reduce_scatter_grad frees it); below that, it lives for the step.
  if (plan_.zero_stage < 2) {
    b.grad.resize(shape.padded);
    zero(b.grad, stream_);
  } else {
    b.grad_shard.resize(shape.shard);
    zero(b.grad_shard, stream_);
  }
  TP_CUDA(cudaStreamSynchronize(stream_));  // `all` and `full` are freed next
  blocks_.push_back(std::move(b));
}

void CudaStage::gather_params(std::size_t i) {
  Block& b = blocks_[i];
  b.gathered.resize(b.shape.padded);
  TRAINPLAN_CHECK(comm_ != nullptr) << "ZeRO-3 without a communicator (cuda_backend refuses it)";
  comm_->all_gather_device(CommGroup::kDp, b.compute.data(), b.gathered.data(), b.shape.shard,
                           DType::kBF16, stream_, "zero3_param_all_gather");
}

float* CudaStage::grads(std::size_t i) {
  Block& b = blocks_[i];
  if (b.grad.empty()) {  // ZeRO-2/3: a fresh buffer for this micro-batch's backward
    b.grad.resize(b.shape.padded);
    zero(b.grad, stream_);
    std::int64_t k = 0;  // with the tied / SP-norm sums set aside by earlier micro-batches
    if (!b.held.empty())
      for (auto [off, n] : b.shape.summed) {
        copy_floats(b.grad.data() + off, b.held.data() + k, n, stream_);
        k += n;
      }
    b.held.release();
  }
  return b.grad.data();
}

void CudaStage::hold_summed(std::size_t i) {
  Block& b = blocks_[i];
  std::int64_t total = 0;
  for (auto [off, n] : b.shape.summed) total += n;
  b.held.resize(total);
  std::int64_t k = 0;
  for (auto [off, n] : b.shape.summed) {
    copy_floats(b.held.data() + k, b.grad.data() + off, n, stream_);
    TP_CUDA(cudaMemsetAsync(b.grad.data() + off, 0, static_cast<std::size_t>(n) * sizeof(float),
                            stream_));
    k += n;
  }
}

void CudaStage::reduce_scatter_grad(std::size_t i) {
  Block& b = blocks_[i];
  const std::int64_t n = b.shape.shard;
  float* mine = b.grad.data() + b.master_offset;  // in place (as NCCL allows)
  constexpr std::string_view kTask = "zero_grad_reduce_scatter";
  if (group_size(CommGroup::kDp) > 1) {
    if (plan_.grad_precision == GradPrecision::kFp32) {
      comm_->reduce_scatter_device(CommGroup::kDp, b.grad.data(), mine, n, DType::kF32, stream_,
                                   kTask);
    } else {
      grad16_.resize(std::max(grad16_.size(), b.shape.padded));
      cast_f32_to_bf16(b.grad.data(), grad16_.data(), b.shape.padded, stream_);
      bf16* shard16 = grad16_.data() + b.master_offset;
      comm_->reduce_scatter_device(CommGroup::kDp, grad16_.data(), shard16, n, DType::kBF16,
                                   stream_, kTask);
      cast_bf16_to_f32(shard16, mine, n, stream_);
    }
  }
  if (plan_.zero_stage < 2) return;
  accumulate(mine, b.grad_shard.data(), n, stream_);
  b.grad.release();  // back to the pool: the next micro-batch allocates it again
}

void CudaStage::reduce_f32(CommGroup g, float* grad, std::int64_t n, std::string_view task) {
  if (plan_.grad_precision == GradPrecision::kFp32) {
    comm_->all_reduce_device(g, grad, n, DType::kF32, ReduceOp::kSum, stream_, task);
    return;
  }
  grad16_.resize(std::max(grad16_.size(), n));
  cast_f32_to_bf16(grad, grad16_.data(), n, stream_);
  comm_->all_reduce_device(g, grad16_.data(), n, DType::kBF16, ReduceOp::kSum, stream_, task);
  cast_bf16_to_f32(grad16_.data(), grad, n, stream_);
}

void CudaStage::all_reduce_grads(CommGroup g, const std::vector<BlockRange>& rs,
                                 std::string_view task) {
  if (group_size(g) <= 1) return;
  std::int64_t total = 0;
  for (const BlockRange& r : rs) total += r.count;
  DeviceBuffer<float> joined(total);
  std::int64_t k = 0;
  for (const BlockRange& r : rs) {
    copy_floats(joined.data() + k, blocks_[r.block].grad.data() + r.offset, r.count, stream_);
    k += r.count;
  }
  reduce_f32(g, joined.data(), total, task);
  k = 0;
  for (const BlockRange& r : rs) {
    copy_floats(blocks_[r.block].grad.data() + r.offset, joined.data() + k, r.count, stream_);
    k += r.count;
  }
}

void CudaStage::update(std::size_t i, const AdamW& opt, std::int64_t step) {
  Block& b = blocks_[i];
  if (plan_.zero_stage == 0) {
    adamw_update(opt, step, b.shape.padded, b.master.data(), b.grad.data(), b.m.data(),
                 b.v.data(), b.decayed.data(), b.decayed_ranges, b.compute.data(), stream_);
    return;
  }
  // ZeRO: this rank's shard of the master weights, its reduced gradient and compute copy.
  bf16* mine = plan_.zero_stage == 3 ? b.compute.data() : b.compute.data() + b.master_offset;
  const float* grad =
      plan_.zero_stage >= 2 ? b.grad_shard.data() : b.grad.data() + b.master_offset;
  adamw_update(opt, step, b.shape.shard, b.master.data(), grad, b.m.data(), b.v.data(),
               b.decayed.data(), b.decayed_ranges, mine, stream_);
}

void CudaStage::for_each_param(const std::function<void(const TensorSlice&, std::int64_t,
                                                        std::int64_t, float)>& fn) const {
  const std::vector<BlockLayout>& layouts = net_->layouts();
  for (std::size_t i = 0; i < blocks_.size(); ++i) {
    const Block& b = blocks_[i];
    const std::vector<float> master = to_host(b.master.data(), b.master.size());
    const std::int64_t begin = b.master_offset;
    for_each_element(layouts[i], begin, begin + b.master.size(),
                     [&](const TensorSlice& t, std::int64_t row, std::int64_t col,
                         std::int64_t at) {
                       fn(t, row, col, master[static_cast<std::size_t>(at - begin)]);
                     });
  }
}

}  // namespace

Backend cuda_backend(const ModelSpec& model, const Plan& plan, NcclComm* comm) {
  return Backend{
      .check_supports =
          [comm](const ModelSpec& m, const Plan& p) {
            TRAINPLAN_RETURN_IF_ERROR(check_cuda_executor_supports(m, p));
            if (comm == nullptr && p.zero_stage > 0)
              return Status::Error(
                  "ZeRO (zero_stage > 0) needs a communicator: run it with dp > 1");
            return Status::Ok();
          },
      .make_stage = [model, plan, comm](std::int64_t stage, Comm&, DpEvents& events) {
        return std::unique_ptr<Stage>(new CudaStage(model, plan, stage, comm, events));
      }};
}

Result<std::unique_ptr<Trainer>> make_cuda_trainer(const ModelSpec& model, const Plan& plan,
                                                   const TrainOptions& options, NcclComm* comm) {
  return Trainer::make(model, plan, options, comm, cuda_backend(model, plan, comm));
}

}  // namespace trainplan::executor::cuda
