// One pipeline stage of a GPT on one GPU: executor/cpu/gpt.h's StageModel with device buffers,
// bf16 activations and weights, float32 parameter gradients. The same contract, the same
// tensor parallelism (column/row-parallel linears, attention by heads, vocabulary-parallel
// embedding and cross-entropy, sequence parallelism), the same TP collectives in the same
// order (each carries its cost-model task name in gpt_cuda.cc, as in gpt.cc), so the bytes per
// group equal comm_volume_on_stage for a bf16 plan: activations move as bf16 (2 bytes), the
// cross-entropy's three per-token values as float32.
//
// Differences from the CPU model, by design: attention is fused (flash_attention.cu, or
// attention.cu where that does not apply; kernels.h, attention_impl_from_env) and keeps one
// log-sum-exp per row instead of the probabilities, so selective recompute has nothing left to
// drop; everything runs asynchronously on one compute stream; the loss is accumulated on the
// device.
//
// Tested against the CPU StageModel by tests/executor/cuda/gpt_cuda_test.cc.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "executor/cuda/comm_nccl.h"
#include "executor/cuda/device.h"
#include "executor/cuda/device_trace.h"
#include "executor/cuda/gemm.h"
#include "executor/cuda/kernels.h"
#include "executor/params.h"
#include "executor/stage.h"
#include "executor/stage_model.h"
#include "core/cost/cost_model.h"
#include "core/model_spec.h"
#include "core/plan.h"

namespace trainplan::executor::cuda {

// What the CUDA executor supports, as a reason when it does not (the CPU executor's list,
// with bf16 instead of fp32).
Status check_cuda_executor_supports(const ModelSpec& model, const Plan& plan);

// How the stage model computes q, k and v. The environment variable TRAINPLAN_CUDA_QKV
// chooses: unset or "batched", one strided-batched product over the shared input where the
// block's layout keeps W_q, W_k, W_v at one stride (else three); "separate", always three.
// Any other value throws CudaError naming the variable and the value.
bool batched_qkv_from_env();

// executor/cpu/gpt.h's BlockAccess on the device: bf16 compute weights, float32 gradients,
// laid out as BlockLayout (offsets in elements); the data-parallel points go to the Trainer.
class DeviceBlockAccess : public DpEvents {
 public:
  virtual const bf16* params(std::size_t b) = 0;
  virtual float* grads(std::size_t b) = 0;
};

class CudaStageModel final : public StageModelBase {
 public:
  // comm may be null for a single rank (tp = pp = dp = 1).
  CudaStageModel(const ModelSpec& model, const Plan& plan, std::int64_t stage, NcclComm* comm,
                 DeviceBlockAccess& access, Gemm& gemm, cudaStream_t stream);
  ~CudaStageModel();
  CudaStageModel(const CudaStageModel&) = delete;
  CudaStageModel& operator=(const CudaStageModel&) = delete;

  // As StageModel::forward. tokens and targets are device arrays (T); `input` (local_tokens, h)
  // is consumed; `output` is written. The head chunk adds the sum of its token losses to
  // *loss_sum (a device double).
  void forward(std::int64_t chunk, std::int64_t mb, const std::int32_t* tokens,
               const std::int32_t* targets, DeviceBuffer<bf16>* input,
               DeviceBuffer<bf16>* output, float loss_scale, double* loss_sum);
  // As StageModel::backward; `grad_output` is consumed, `grad_input` written.
  void backward(std::int64_t chunk, std::int64_t mb, DeviceBuffer<bf16>* grad_output,
                DeviceBuffer<bf16>* grad_input);
  // The logits (T, V/tp) the head chunk kept for micro-batch mb (bf16; before the backward
  // turns them into their gradient). For tests.
  const DeviceBuffer<bf16>* logits(std::int64_t chunk, std::int64_t mb) const;
  // Records each stretch of kernels as a span named after its cost-model task(s), as gpt.cc
  // does on CPU (device_trace.h; null: none). The caller sets the pass and micro-batch.
  void set_trace(DeviceTrace* trace) { trace_ = trace; }

 private:
  struct LayerCache;
  struct MicroBatch;
  struct LayerParams {
    const bf16* p[kNumLayerTensors];
    float* g[kNumLayerTensors];
  };

  LayerParams layer_params(std::size_t block);
  void layer_forward(std::size_t block, DeviceBuffer<bf16>&& x, LayerCache& c,
                     DeviceBuffer<bf16>& out);
  void layer_backward(std::size_t block, LayerCache& c, const DeviceBuffer<bf16>& dout,
                      DeviceBuffer<bf16>& dx);
  void embedding_forward(const std::int32_t* tokens, DeviceBuffer<bf16>& out);
  void embedding_backward(const std::int32_t* tokens, const DeviceBuffer<bf16>& dout);
  void head_forward(MicroBatch& s, DeviceBuffer<bf16>&& x, const std::int32_t* targets,
                    float scale, double* loss_sum);
  void head_backward(MicroBatch& s, DeviceBuffer<bf16>& dx);
  // TP collectives on bf16 activations (a no-op copy or nothing when tp = 1), named by their
  // cost-model task.
  void all_reduce(bf16* data, std::int64_t count, std::string_view task);
  void all_reduce_f32(float* data, std::int64_t count, ReduceOp op, std::string_view task);
  void gather_tokens(const DeviceBuffer<bf16>& local, DeviceBuffer<bf16>& full,
                     std::string_view task);
  void reduce_scatter_tokens(const DeviceBuffer<bf16>& full, DeviceBuffer<bf16>& local,
                             std::string_view task);
  const bf16* head_weights();
  float* head_grads();

  PassContext pass_context() { return {plan_, model_.tie_word_embeddings, access_, trace_}; }

  ModelSpec model_;
  Plan plan_;
  NcclComm* comm_;
  DeviceBlockAccess& access_;
  Gemm& gemm_;
  cudaStream_t stream_;
  std::int64_t heads_ = 0, hd_ = 0;  // heads on this rank, head dim
  AttentionImpl attention_impl_ = AttentionImpl::kGemm;  // kernels.h, attention_impl_from_env
  bool batched_qkv_ = true;                              // batched_qkv_from_env
  std::map<std::pair<std::int64_t, std::int64_t>, std::unique_ptr<MicroBatch>> in_flight_;
  DeviceTrace* trace_ = nullptr;
};

}  // namespace trainplan::executor::cuda
