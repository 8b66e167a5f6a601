// The training step of one rank on a GPU; see trainer_cuda.h. Mirrors executor/trainer.cc; the
// data-parallel collectives carry their cost-model task names (dp_block_tasks).
#include "executor/cuda/trainer_cuda.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/schedule.h"
#include "executor/data.h"

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
}  // namespace

CudaTrainer::CudaTrainer(const ModelSpec& model, const Plan& plan,
                         const CudaTrainOptions& options, NcclComm* comm)
    : model_(model), plan_(plan), options_(options), comm_(comm) {}

CudaTrainer::~CudaTrainer() {
  timer_.reset();
  model_net_.reset();
  gemm_.reset();
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

Result<std::unique_ptr<CudaTrainer>> CudaTrainer::make(const ModelSpec& model, const Plan& plan,
                                                       const CudaTrainOptions& options,
                                                       NcclComm* comm) {
  TRAINPLAN_RETURN_IF_ERROR(validate_plan(plan));
  TRAINPLAN_RETURN_IF_ERROR(check_plan_fits_model(plan, model));
  TRAINPLAN_RETURN_IF_ERROR(check_plan_world_size(plan, comm != nullptr ? comm->world_size() : 1));
  TRAINPLAN_RETURN_IF_ERROR(check_cuda_executor_supports(model, plan));
  if (comm == nullptr && plan.zero_stage > 0)
    return Status::Error("ZeRO (zero_stage > 0) needs a communicator: run it with dp > 1");
  if (plan.schedule == Schedule::kInterleaved)
    return Status::Error("the CUDA trainer does not run interleaved 1F1B yet (GPipe and 1F1B only)");
  std::unique_ptr<CudaTrainer> t(new CudaTrainer(model, plan, options, comm));
  t->stage_ = comm != nullptr ? comm->group_rank(CommGroup::kPp) : 0;
  t->dp_rank_ = comm != nullptr ? comm->group_rank(CommGroup::kDp) : 0;
  TP_CUDA(cudaStreamCreateWithFlags(&t->stream_, cudaStreamNonBlocking));
  t->gemm_ = std::make_unique<Gemm>();
  t->timer_ = std::make_unique<PhaseTimer>(t->stream_);
  DeviceBlockAccess& access = *t;
  t->model_net_ = std::make_unique<CudaStageModel>(model, plan, t->stage_, comm, access,
                                                   *t->gemm_, t->stream_);
  const std::int64_t dp = plan.dp;
  for (const BlockLayout& l : t->model_net_->layouts()) {
    Block b;
    b.padded = (l.size + dp - 1) / dp * dp;
    b.shard = b.padded / dp;
    std::vector<float> full(static_cast<std::size_t>(b.padded), 0.0f);
    Ranges decayed;
    for (const TensorSlice& s : l.tensors) {
      init_slice(options.seed, s, full.data() + s.offset);
      if (s.decay) decayed.emplace_back(s.offset, s.size());
      if (s.tied) b.tied.emplace_back(s.offset, s.size());
      if (s.sp_norm) b.sp_norm.emplace_back(s.offset, s.size());
    }
    std::sort(decayed.begin(), decayed.end());
    const bool sharded = plan.zero_stage >= 1;
    b.master_offset = sharded ? t->dp_rank_ * b.shard : 0;
    const std::int64_t n = sharded ? b.shard : b.padded;
    const auto first = full.begin() + b.master_offset;
    b.master = upload(std::vector<float>(first, first + n));
    // The decayed runs of this rank's range, relative to `master`.
    std::vector<std::int64_t> runs;
    for_each_decay_run(decayed, b.master_offset, b.master_offset + n,
                       [&](std::int64_t at, std::int64_t count, bool decay) {
                         if (!decay) return;
                         runs.push_back(at - b.master_offset);
                         runs.push_back(at - b.master_offset + count);
                       });
    b.decayed = upload(runs);
    b.decayed_ranges = static_cast<std::int64_t>(runs.size() / 2);
    b.m.resize(n);
    b.v.resize(n);
    zero(b.m, t->stream_);
    zero(b.v, t->stream_);
    b.compute.resize(plan.zero_stage == 3 ? b.shard : b.padded);
    if (plan.zero_stage == 3) {
      cast_f32_to_bf16(b.master.data(), b.compute.data(), b.shard, t->stream_);
    } else {
      DeviceBuffer<float> all = upload(full);
      cast_f32_to_bf16(all.data(), b.compute.data(), b.padded, t->stream_);
      TP_CUDA(cudaStreamSynchronize(t->stream_));
    }
    b.grad.resize(b.padded);
    zero(b.grad, t->stream_);
    t->blocks_.push_back(std::move(b));
  }
  t->loss_sum_.resize(1);
  TP_CUDA(cudaStreamSynchronize(t->stream_));
  return t;
}

// ---- DeviceBlockAccess: ZeRO-3 gathers bf16 weights per use ----

void CudaTrainer::acquire(std::size_t i, DpPoint) {
  if (plan_.zero_stage != 3) return;
  Block& b = blocks_[i];
  b.gathered.resize(b.padded);
  comm_->all_gather_device(CommGroup::kDp, b.compute.data(), b.gathered.data(), b.shard,
                           DType::kBF16, stream_, "zero3_param_all_gather");
}

void CudaTrainer::release(std::size_t i) {
  if (plan_.zero_stage != 3) return;
  blocks_[i].gathered.release();  // back to the pool, in stream order
}

const bf16* CudaTrainer::params(std::size_t i) {
  Block& b = blocks_[i];
  if (plan_.zero_stage == 3) {
    TRAINPLAN_CHECK(!b.gathered.empty()) << "block " << i << " used while not gathered";
    return b.gathered.data();
  }
  return b.compute.data();
}

float* CudaTrainer::grads(std::size_t i) { return blocks_[i].grad.data(); }

// ---- the step ----

void CudaTrainer::run_schedule(const std::vector<std::int32_t>& batch) {
  const std::int64_t M = plan_.num_micro_batches(), mbs = plan_.micro_batch_size;
  const std::int64_t s = model_.seq_len, T = mbs * s, pp = plan_.pp;
  const float loss_scale = 1.0f / static_cast<float>(plan_.global_batch_size * s);
  CudaStageModel& net = *model_net_;
  const std::int64_t msg = net.shape().local_tokens * model_.hidden_size;  // bf16 elements
  TRAINPLAN_CHECK(msg % 2 == 0) << "pipeline messages travel as float pairs";
  // This replica's micro-batches, on the device: inputs and targets (M, T).
  std::vector<std::int32_t> in(static_cast<std::size_t>(M * T)), out(in.size());
  for (std::int64_t mb = 0; mb < M; ++mb)
    micro_batch_tokens(batch, s, mbs, M, dp_rank_, mb, in.data() + mb * T, out.data() + mb * T);
  DeviceBuffer<std::int32_t> in_d = upload(in), out_d = upload(out);
  const std::int64_t next = (stage_ + 1) % pp, prev = (stage_ + pp - 1) % pp;
  constexpr int kForwardTag = 1, kBackwardTag = 2;
  // Pipeline messages are bf16 activations sent through the float32 hooks as pairs: the bytes
  // counted are the bf16 bytes (pipeline_message_bytes).
  auto fwd = [&](std::int64_t mb) {
    TraceScope micro_batch(trace_, {.pass = ' ', .micro_batch = static_cast<std::int32_t>(mb)});
    DeviceBuffer<bf16> input, output;
    if (!net.has_embedding(0)) {
      // The receive writes on NCCL's stream into a pool block that the compute stream may
      // still be using (the pool orders reuse on the compute stream only): drain it first.
      TP_CUDA(cudaStreamSynchronize(stream_));
      input.resize(msg);
      comm_->recv(CommGroup::kPp, reinterpret_cast<float*>(input.data()), msg / 2, prev,
                  kForwardTag, "recv_forward");
    }
    timer_->begin("forward");
    {
      TraceScope forward(trace_, {.pass = 'F'});
      net.forward(0, mb, in_d.data() + mb * T, out_d.data() + mb * T, &input, &output,
                  loss_scale, loss_sum_.data());
    }
    timer_->end("forward");
    if (!net.has_head(0)) {
      TP_CUDA(cudaStreamSynchronize(stream_));  // send copies `output` at once: complete it
      comm_->send(CommGroup::kPp, reinterpret_cast<const float*>(output.data()), msg / 2, next,
                  kForwardTag, "send_forward");
    }
  };
  auto bwd = [&](std::int64_t mb) {
    TraceScope micro_batch(trace_, {.pass = ' ', .micro_batch = static_cast<std::int32_t>(mb)});
    DeviceBuffer<bf16> grad_out, grad_in;
    if (!net.has_head(0)) {
      TP_CUDA(cudaStreamSynchronize(stream_));  // as fwd's receive
      grad_out.resize(msg);
      comm_->recv(CommGroup::kPp, reinterpret_cast<float*>(grad_out.data()), msg / 2, next,
                  kBackwardTag, "recv_backward");
    }
    timer_->begin("backward");
    {
      TraceScope backward(trace_, {.pass = 'B'});
      net.backward(0, mb, &grad_out, &grad_in);
    }
    timer_->end("backward");
    if (!net.has_embedding(0)) {
      TP_CUDA(cudaStreamSynchronize(stream_));
      comm_->send(CommGroup::kPp, reinterpret_cast<const float*>(grad_in.data()), msg / 2, prev,
                  kBackwardTag, "send_backward");
    }
  };
  // The order the simulator plays (core/schedule.h); one model chunk per stage here.
  for (const sim::PipeStep& p : sim::stage_schedule(plan_, stage_)) {
    if (p.forward) {
      fwd(p.micro_batch);
    } else {
      bwd(p.micro_batch);
    }
  }
  TP_CUDA(cudaStreamSynchronize(stream_));  // in_d/out_d are freed next
  if (comm_ != nullptr) comm_->wait_sends();
}

void CudaTrainer::all_reduce_grad(CommGroup g, float* grad, std::int64_t n,
                                  std::string_view task) {
  if (plan_.grad_precision == GradPrecision::kFp32) {
    comm_->all_reduce_device(g, grad, n, DType::kF32, ReduceOp::kSum, stream_, task);
    return;
  }
  grad16_.resize(std::max(grad16_.size(), n));
  cast_f32_to_bf16(grad, grad16_.data(), n, stream_);
  comm_->all_reduce_device(g, grad16_.data(), n, DType::kBF16, ReduceOp::kSum, stream_, task);
  cast_bf16_to_f32(grad16_.data(), grad, n, stream_);
}

void CudaTrainer::finish_gradients() {
  if (comm_ == nullptr) return;
  // Sequence-parallel norms: partial sums over TP, all of the stage's in one all-reduce, as
  // trainer.cc (the cost model's tp_sp_norm_grad_all_reduce per block: the same bytes).
  std::int64_t norm_elements = 0;
  for (const Block& b : blocks_)
    for (auto [off, n] : b.sp_norm) norm_elements += n;
  if (norm_elements > 0) {
    DeviceBuffer<float> norms(norm_elements);
    auto copy = [&](bool into_norms) {
      std::int64_t k = 0;
      for (Block& b : blocks_)
        for (auto [off, n] : b.sp_norm) {
          float* grad = b.grad.data() + off;
          TP_CUDA(cudaMemcpyAsync(into_norms ? norms.data() + k : grad,
                                  into_norms ? grad : norms.data() + k,
                                  static_cast<std::size_t>(n) * sizeof(float),
                                  cudaMemcpyDeviceToDevice, stream_));
          k += n;
        }
    };
    copy(true);
    all_reduce_grad(CommGroup::kTp, norms.data(), norm_elements, "tp_sp_norm_grad_all_reduce");
    copy(false);
  }
  const std::vector<BlockLayout>& layouts = model_net_->layouts();
  for (std::size_t i = 0; i < blocks_.size(); ++i) {
    Block& b = blocks_[i];
    for (auto [off, n] : b.tied)
      all_reduce_grad(CommGroup::kEmbedding, b.grad.data() + off, n, "embedding_grad_all_reduce");
    if (plan_.dp == 1 && plan_.zero_stage == 0) continue;
    // Traced under the block's layer, as the simulator's per-block reductions (trainer.cc).
    TraceScope block(trace_, {.layer = static_cast<std::int32_t>(layouts[i].layer)});
    if (plan_.zero_stage == 0) {
      all_reduce_grad(CommGroup::kDp, b.grad.data(), b.padded, "dp_grad_all_reduce");
      continue;
    }
    // ZeRO: reduce-scatter in place (as NCCL allows); this rank's shard lands at master_offset.
    constexpr std::string_view kTask = "zero_grad_reduce_scatter";
    if (plan_.grad_precision == GradPrecision::kFp32) {
      comm_->reduce_scatter_device(CommGroup::kDp, b.grad.data(), b.grad.data() + b.master_offset,
                                   b.shard, DType::kF32, stream_, kTask);
      continue;
    }
    grad16_.resize(std::max(grad16_.size(), b.padded));
    cast_f32_to_bf16(b.grad.data(), grad16_.data(), b.padded, stream_);
    bf16* shard = grad16_.data() + b.master_offset;
    comm_->reduce_scatter_device(CommGroup::kDp, grad16_.data(), shard, b.shard, DType::kBF16,
                                 stream_, kTask);
    cast_bf16_to_f32(shard, b.grad.data() + b.master_offset, b.shard, stream_);
  }
}

void CudaTrainer::optimizer_step() {
  ++step_;
  TraceScope optimizer(trace_, {.pass = 'O', .micro_batch = -1, .layer = -1});
  DeviceTraceSpan span(trace_, stream_);
  span.begin("optimizer");
  for (Block& b : blocks_) {
    if (plan_.zero_stage == 0) {
      adamw_update(options_.adamw, step_, b.padded, b.master.data(), b.grad.data(), b.m.data(),
                   b.v.data(), b.decayed.data(), b.decayed_ranges, b.compute.data(), stream_);
    } else {
      bf16* mine = plan_.zero_stage == 3 ? b.compute.data() : b.compute.data() + b.master_offset;
      adamw_update(options_.adamw, step_, b.shard, b.master.data(),
                   b.grad.data() + b.master_offset, b.m.data(), b.v.data(), b.decayed.data(),
                   b.decayed_ranges, mine, stream_);
      if (plan_.zero_stage <= 2) {
        span.end();
        {
          TraceScope after_optimizer(trace_, {.pass = ' '});
          comm_->all_gather_device(CommGroup::kDp, mine, b.compute.data(), b.shard,
                                   DType::kBF16, stream_, "zero_param_all_gather");
        }
        span.begin("optimizer");
      }
    }
    zero(b.grad, stream_);
  }
}

Result<CudaStepResult> CudaTrainer::step(const std::vector<std::int32_t>& batch,
                                         DeviceTrace* trace) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::int64_t need = plan_.global_batch_size * (model_.seq_len + 1);
  if (static_cast<std::int64_t>(batch.size()) != need)
    return Status::Error("batch has " + std::to_string(batch.size()) + " tokens, the step needs " +
                         std::to_string(need));
  for (std::int32_t tok : batch)
    if (tok < 0 || tok >= model_.vocab_size)
      return Status::Error("token " + std::to_string(tok) + " is outside the vocabulary [0, " +
                           std::to_string(model_.vocab_size) + ")");
  timer_->clear();
  // The trace is installed for this step only (as Trainer::step's recorder).
  trace_ = trace;
  model_net_->set_trace(trace);
  if (comm_ != nullptr) comm_->set_trace(trace);
  struct Uninstall {
    CudaTrainer* t;
    ~Uninstall() {
      t->trace_ = nullptr;
      t->model_net_->set_trace(nullptr);
      if (t->comm_ != nullptr) t->comm_->set_trace(nullptr);
    }
  } uninstall{this};
  if (trace != nullptr) trace->start_step(stream_);
  TP_CUDA(cudaMemsetAsync(loss_sum_.data(), 0, sizeof(double), stream_));
  run_schedule(batch);
  double loss_sum = to_host(loss_sum_.data(), 1, stream_)[0];
  const bool reporter =
      stage_ == plan_.pp - 1 && (comm_ == nullptr || comm_->group_rank(CommGroup::kTp) == 0);
  const bool bad = reporter && !std::isfinite(loss_sum);
  double control[2] = {reporter && !bad ? loss_sum : 0.0, bad ? 1.0 : 0.0};
  if (comm_ != nullptr) comm_->control_all_reduce(control, 2, ReduceOp::kSum);
  if (control[1] > 0) {
    double who = bad && comm_ != nullptr ? static_cast<double>(comm_->world_rank()) : -1.0;
    if (comm_ != nullptr) comm_->control_all_reduce(&who, 1, ReduceOp::kMax);
    return Status::Error("non-finite loss at step " + std::to_string(step_ + 1) + " on rank " +
                             std::to_string(static_cast<std::int64_t>(who)),
                         ExitCode::kRuntime);
  }
  timer_->begin("gradient_sync");
  {
    TraceScope after_backward(trace_, {.pass = ' ', .micro_batch = -1, .layer = -1});
    finish_gradients();
  }
  timer_->end("gradient_sync");
  timer_->begin("optimizer");
  optimizer_step();
  timer_->end("optimizer");
  TP_CUDA(cudaStreamSynchronize(stream_));
  CudaStepResult r;
  r.loss = control[0] / static_cast<double>(plan_.global_batch_size * model_.seq_len);
  r.phase_s = timer_->elapsed_s();
  r.spans = timer_->spans();
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

void CudaTrainer::for_each_param(const std::function<void(const TensorSlice&, std::int64_t,
                                                          std::int64_t, float)>& fn) const {
  const std::vector<BlockLayout>& layouts = model_net_->layouts();
  for (std::size_t i = 0; i < blocks_.size(); ++i) {
    const Block& b = blocks_[i];
    const std::vector<float> master = to_host(b.master.data(), b.master.size());
    const std::int64_t begin = b.master_offset;
    const std::int64_t end = std::min(begin + b.master.size(), layouts[i].size);
    for (const TensorSlice& t : layouts[i].tensors)
      for (std::int64_t j = std::max(begin, t.offset); j < std::min(end, t.offset + t.size()); ++j) {
        const std::int64_t local = j - t.offset;
        fn(t, t.row0 + local / t.cols, t.col0 + local % t.cols,
           master[static_cast<std::size_t>(j - begin)]);
      }
  }
}

}  // namespace trainplan::executor::cuda
