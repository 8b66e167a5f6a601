// The CUDA executor's non-GEMM kernels (kernels.cu, attention.cu, flash_attention.cu): bf16 activations, float32
// statistics and accumulation, float32 gradients of parameters. They mirror executor/cpu/kernels.h
// one for one and follow its conventions: activations row-major (tokens, features), tokens of
// one micro-batch sequence after sequence; backward kernels ACCUMULATE parameter gradients and
// WRITE input gradients. Every launch is checked. All calls are asynchronous on `stream`.
//
// Tested against the CPU kernels by tests/executor/cuda/kernels_test.cc.
#pragma once

#include <cstdint>

#include "executor/cuda/device.h"
#include "executor/params.h"

namespace trainplan::executor::cuda {

class Gemm;

void cast_f32_to_bf16(const float* in, bf16* out, std::int64_t n, cudaStream_t stream);
void cast_bf16_to_f32(const bf16* in, float* out, std::int64_t n, cudaStream_t stream);

// out = a + b (n elements). out may alias a or b.
void add(const bf16* a, const bf16* b, bf16* out, std::int64_t n, cudaStream_t stream);
// acc += x (n float32 elements): ZeRO-2/3's shard gradient over the step's micro-batches.
void accumulate(const float* x, float* acc, std::int64_t n, cudaStream_t stream);
// out (rows, cols) = resid + y + bias (bias per column; may be null). out may alias resid or y.
void residual_bias_add(const bf16* resid, const bf16* y, const bf16* bias, bf16* out,
                       std::int64_t rows, std::int64_t cols, cudaStream_t stream);
// db (cols) += column sums of dy (rows, cols).
void bias_backward(const bf16* dy, float* db, std::int64_t rows, std::int64_t cols,
                   cudaStream_t stream);

// LayerNorm (eps = executor::kLayerNormEps) per row of x (rows, h); mean, rstd (rows) kept.
void layernorm_forward(const bf16* x, const bf16* gamma, const bf16* beta, bf16* y, float* mean,
                       float* rstd, std::int64_t rows, std::int64_t h, cudaStream_t stream);
void layernorm_backward(const bf16* dy, const bf16* x, const bf16* gamma, const float* mean,
                        const float* rstd, bf16* dx, float* dgamma, float* dbeta,
                        std::int64_t rows, std::int64_t h, cudaStream_t stream);

// GELU, tanh approximation, over n elements.
void gelu_forward(const bf16* x, bf16* y, std::int64_t n, cudaStream_t stream);
void gelu_backward(const bf16* x, const bf16* dy, bf16* dx, std::int64_t n, cudaStream_t stream);

// Vocabulary-parallel lookup: out (tokens, h) row i = wte row (tokens[i] - row0) when that row is
// in [0, rows), else zeros.
void embedding_forward(const std::int32_t* tokens, const bf16* wte, std::int64_t row0,
                       std::int64_t rows, bf16* out, std::int64_t n_tokens, std::int64_t h,
                       cudaStream_t stream);
// out (n, h) row i += wpe row ((first_token + i) % seq).
void add_positions(bf16* out, const bf16* wpe, std::int64_t first_token, std::int64_t seq,
                   std::int64_t n, std::int64_t h, cudaStream_t stream);
// dwte rows in this rank's slice += dout rows of their tokens; dwpe (seq, h) += by position.
void embedding_backward(const std::int32_t* tokens, const bf16* dout, float* dwte,
                        std::int64_t row0, std::int64_t rows, float* dwpe, std::int64_t seq,
                        std::int64_t n_tokens, std::int64_t h, cudaStream_t stream);

// Megatron's vocabulary-parallel cross-entropy over logits (T, vr) of this rank's vocabulary
// slice [v0, v0 + vr), of which the first `valid` columns are real words (the rest padding).
// 1) row_max (T) = max over valid columns;   (all-reduce max over TP)
// 2) sum_exp (T) = sum exp(l - row_max), target_logit (T) = l[target - v0] or 0;   (all-reduce
//    sum of each over TP)
// 3) loss_sum (one double, accumulated) += sum_i log(sum_exp) + row_max - target_logit;
// 4) backward in place: logits := (softmax - one_hot(target)) * scale (padding: 0).
void cross_entropy_max(const bf16* logits, float* row_max, std::int64_t T, std::int64_t vr,
                       std::int64_t valid, cudaStream_t stream);
void cross_entropy_sum_exp(const bf16* logits, const float* row_max,
                           const std::int32_t* targets, std::int64_t v0, float* sum_exp,
                           float* target_logit, std::int64_t T, std::int64_t vr,
                           std::int64_t valid, cudaStream_t stream);
void cross_entropy_loss(const float* row_max, const float* sum_exp, const float* target_logit,
                        double* loss_sum, std::int64_t T, cudaStream_t stream);
void cross_entropy_backward(bf16* logits, const float* row_max, const float* sum_exp,
                            const std::int32_t* targets, std::int64_t v0, float scale,
                            std::int64_t T, std::int64_t vr, std::int64_t valid,
                            cudaStream_t stream);

// Fused causal attention (attention.cu): q, k, v rows of `ld` elements, head a at columns
// [a*hd, (a+1)*hd); out (batch*seq, heads*hd); lse (batch*heads*seq) the log-sum-exp of each
// softmax row, kept for the backward (which recomputes the probabilities from it, as
// FlashAttention: Dao et al. 2022, alg. 2 and 4). No (seq x seq) matrix is kept between the
// forward and the backward.
// Two implementations of the same function:
//  - gemm == nullptr: one fused kernel per pass, a warp per row on CUDA cores (no scratch).
//  - gemm != nullptr: per sequence, the heads' score matrices through batched cuBLASLt GEMMs on
//    the tensor cores (bf16 in, float32 scores) and a causal-softmax kernel; (heads, seq, seq)
//    scratch lives only inside the call (float32 scores, bf16 probabilities), so between the
//    passes only lse is kept, as with the fused kernel. It computes the masked upper triangle
//    too (2x the causal FLOPs) but runs on tensor cores.
void attention_forward(const bf16* q, const bf16* k, const bf16* v, std::int64_t ld,
                       bf16* out, float* lse, std::int64_t batch, std::int64_t seq,
                       std::int64_t heads, std::int64_t hd, cudaStream_t stream,
                       Gemm* gemm = nullptr);
// dq, dk, dv like q (ld). delta (batch*heads*seq) is scratch.
void attention_backward(const bf16* q, const bf16* k, const bf16* v, std::int64_t ld,
                        const bf16* out, const bf16* dout, const float* lse, float* delta,
                        bf16* dq, bf16* dk, bf16* dv, std::int64_t batch, std::int64_t seq,
                        std::int64_t heads, std::int64_t hd, cudaStream_t stream,
                        Gemm* gemm = nullptr);
inline constexpr std::int64_t kMaxHeadDim = 128;  // attention.cu: hd/32 values per lane

// delta_i = dO_i . O_i for every (row, head), FlashAttention-2's D: the backward's first step
// (delta: batch*heads*seq, as lse).
void attention_delta(const bf16* out, const bf16* dout, float* delta, std::int64_t batch,
                     std::int64_t seq, std::int64_t heads, std::int64_t hd, cudaStream_t stream);

// The same two functions as FlashAttention-2 tensor-core kernels (flash_attention.cu): 64-row
// tiles, mma.sync bf16 products with float32 accumulation, the scores kept on chip; one launch
// per pass for the whole micro-batch. Needs sm_80 or later, head_dim in {16, 32, 64, 80, 96,
// 128} and ld a multiple of 8 (flash_attention_supported; otherwise they throw CudaError).
bool flash_attention_supported(std::int64_t hd, std::int64_t ld);
void flash_attention_forward(const bf16* q, const bf16* k, const bf16* v, std::int64_t ld,
                             bf16* out, float* lse, std::int64_t batch, std::int64_t seq,
                             std::int64_t heads, std::int64_t hd, cudaStream_t stream);
void flash_attention_backward(const bf16* q, const bf16* k, const bf16* v, std::int64_t ld,
                              const bf16* out, const bf16* dout, const float* lse, float* delta,
                              bf16* dq, bf16* dk, bf16* dv, std::int64_t batch,
                              std::int64_t seq, std::int64_t heads, std::int64_t hd,
                              cudaStream_t stream);

// Which attention the stage model runs. The environment variable TRAINPLAN_CUDA_ATTENTION
// chooses, as Transformer Engine's NVTE_FLASH_ATTN does: "flash", "gemm" (cuBLASLt per
// sequence), "fused" (CUDA cores), or unset / "auto": flash where flash_attention_supported,
// else gemm. Any other value, or "flash" where it is not supported, throws CudaError naming
// the variable and the value.
enum class AttentionImpl { kFlash, kGemm, kFused };
AttentionImpl attention_impl_from_env(std::int64_t hd, std::int64_t ld);
const char* attention_impl_name(AttentionImpl impl);

// AdamW over n float32 master values, identical in arithmetic to executor::adamw_update; also
// writes the bf16 compute copy when param_bf16 is not null. Weight decay applies inside the
// `ranges` intervals [decayed[2k], decayed[2k+1]) of indices into param (device memory, sorted,
// disjoint): a few per block, not a byte per parameter (executor/params.h, for_each_decay_run).
using AdamWConfig = AdamW;  // executor/params.h
void adamw_update(const AdamWConfig& opt, std::int64_t step, std::int64_t n, float* param,
                  const float* grad, float* m, float* v, const std::int64_t* decayed,
                  std::int64_t ranges, bf16* param_bf16, cudaStream_t stream);

}  // namespace trainplan::executor::cuda
