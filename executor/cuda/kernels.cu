// Non-GEMM kernels of the CUDA executor; see kernels.h. Each kernel reads bf16, computes in
// float32 and writes bf16 (activations) or float32 (statistics, parameter gradients).
// Tested by tests/executor/cuda/kernels_test.cc against executor/cpu/kernels.cc.
#include <cfloat>
#include <cmath>

#include "executor/cuda/kernels.h"

namespace trainplan::executor::cuda {

namespace {

constexpr float kEps = 1e-5f;  // executor::kLayerNormEps
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;
constexpr int kThreads = 256;

unsigned blocks_for(std::int64_t n, int threads = kThreads) {
  std::int64_t b = (n + threads - 1) / threads;
  if (b > 65535LL * 64) b = 65535LL * 64;  // grid-stride loops cover the rest
  return static_cast<unsigned>(b < 1 ? 1 : b);
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
// Block-wide sum for blockDim.x a multiple of 32 (<= 1024); every thread gets the result.
__device__ float block_sum(float v) {
  __shared__ float part[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) part[warp] = v;
  __syncthreads();
  v = lane < static_cast<int>(blockDim.x / 32) ? part[lane] : 0.0f;
  return warp_sum(v);
}
__device__ float block_max(float v) {
  __shared__ float part[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) part[warp] = v;
  __syncthreads();
  v = lane < static_cast<int>(blockDim.x / 32) ? part[lane] : -FLT_MAX;
  return warp_max(v);
}

__device__ __forceinline__ float ld(const bf16* p) { return __bfloat162float(*p); }

#define GRID_STRIDE(i, n)                                                                  \
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; \
       i < (n); i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)

__global__ void cast_f32_bf16_kernel(const float* in, bf16* out, std::int64_t n) {
  GRID_STRIDE(i, n) out[i] = __float2bfloat16(in[i]);
}
__global__ void cast_bf16_f32_kernel(const bf16* in, float* out, std::int64_t n) {
  GRID_STRIDE(i, n) out[i] = __bfloat162float(in[i]);
}
__global__ void add_kernel(const bf16* a, const bf16* b, bf16* out, std::int64_t n) {
  GRID_STRIDE(i, n) out[i] = __float2bfloat16(ld(a + i) + ld(b + i));
}
__global__ void accumulate_kernel(const float* x, float* acc, std::int64_t n) {
  GRID_STRIDE(i, n) acc[i] += x[i];
}
__global__ void residual_bias_add_kernel(const bf16* r, const bf16* y, const bf16* bias,
                                         bf16* out, std::int64_t rows, std::int64_t cols) {
  GRID_STRIDE(i, rows * cols) {
    float v = ld(r + i) + ld(y + i);
    if (bias != nullptr) v += ld(bias + i % cols);
    out[i] = __float2bfloat16(v);
  }
}

// Column sums: thread per column over a slice of rows, then one atomic per thread.
constexpr int kRowsPerSlice = 256;
__global__ void bias_backward_kernel(const bf16* dy, float* db, std::int64_t rows,
                                     std::int64_t cols) {
  const std::int64_t c = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (c >= cols) return;
  const std::int64_t r0 = static_cast<std::int64_t>(blockIdx.y) * kRowsPerSlice;
  const std::int64_t r1 = min(rows, r0 + kRowsPerSlice);
  float s = 0;
  for (std::int64_t r = r0; r < r1; ++r) s += ld(dy + r * cols + c);
  atomicAdd(db + c, s);
}

// LayerNorm forward: one block per row, two passes over the row (mean, then variance of the
// centred values, as the CPU kernel).
__global__ void layernorm_forward_kernel(const bf16* x, const bf16* gamma, const bf16* beta,
                                         bf16* y, float* mean, float* rstd, std::int64_t h) {
  const std::int64_t row = blockIdx.x;
  const bf16* xr = x + row * h;
  float s = 0;
  for (std::int64_t j = threadIdx.x; j < h; j += blockDim.x) s += ld(xr + j);
  const float mu = block_sum(s) / static_cast<float>(h);
  float q = 0;
  for (std::int64_t j = threadIdx.x; j < h; j += blockDim.x) {
    const float d = ld(xr + j) - mu;
    q += d * d;
  }
  const float r = rsqrtf(block_sum(q) / static_cast<float>(h) + kEps);
  for (std::int64_t j = threadIdx.x; j < h; j += blockDim.x)
    y[row * h + j] = __float2bfloat16((ld(xr + j) - mu) * r * ld(gamma + j) + ld(beta + j));
  if (threadIdx.x == 0) {
    mean[row] = mu;
    rstd[row] = r;
  }
}

// LayerNorm backward: a warp per row, rows strided over the grid; dgamma/dbeta partials in
// shared memory (2h floats), added to global memory once per block.
__global__ void layernorm_backward_kernel(const bf16* dy, const bf16* x, const bf16* gamma,
                                          const float* mean, const float* rstd, bf16* dx,
                                          float* dgamma, float* dbeta, std::int64_t rows,
                                          std::int64_t h) {
  extern __shared__ float acc[];  // dgamma (h), dbeta (h)
  for (std::int64_t j = threadIdx.x; j < 2 * h; j += blockDim.x) acc[j] = 0;
  __syncthreads();
  const int lane = threadIdx.x % 32, warps = blockDim.x / 32;
  const float inv_h = 1.0f / static_cast<float>(h);
  for (std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * warps + threadIdx.x / 32;
       row < rows; row += static_cast<std::int64_t>(gridDim.x) * warps) {
    const bf16* dyr = dy + row * h;
    const bf16* xr = x + row * h;
    const float mu = mean[row], r = rstd[row];
    float s1 = 0, s2 = 0;  // sum dxhat, sum dxhat * xhat
    for (std::int64_t j = lane; j < h; j += 32) {
      const float xhat = (ld(xr + j) - mu) * r, d = ld(dyr + j);
      const float dxhat = d * ld(gamma + j);
      s1 += dxhat;
      s2 += dxhat * xhat;
      atomicAdd(acc + j, d * xhat);
      atomicAdd(acc + h + j, d);
    }
    s1 = warp_sum(s1) * inv_h;
    s2 = warp_sum(s2) * inv_h;
    for (std::int64_t j = lane; j < h; j += 32) {
      const float xhat = (ld(xr + j) - mu) * r;
      const float dxhat = ld(dyr + j) * ld(gamma + j);
      dx[row * h + j] = __float2bfloat16((dxhat - s1 - xhat * s2) * r);
    }
  }
  __syncthreads();
  for (std::int64_t j = threadIdx.x; j < h; j += blockDim.x) {
    atomicAdd(dgamma + j, acc[j]);
    atomicAdd(dbeta + j, acc[h + j]);
  }
}

__global__ void gelu_forward_kernel(const bf16* x, bf16* y, std::int64_t n) {
  GRID_STRIDE(i, n) {
    const float v = ld(x + i);
    y[i] = __float2bfloat16(0.5f * v * (1.0f + tanhf(kSqrt2OverPi * (v + kGeluCubic * v * v * v))));
  }
}
__global__ void gelu_backward_kernel(const bf16* x, const bf16* dy, bf16* dx, std::int64_t n) {
  GRID_STRIDE(i, n) {
    const float v = ld(x + i);
    const float t = tanhf(kSqrt2OverPi * (v + kGeluCubic * v * v * v));
    const float du = kSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * v * v);
    dx[i] = __float2bfloat16(ld(dy + i) * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du));
  }
}

__global__ void embedding_forward_kernel(const std::int32_t* tokens, const bf16* wte,
                                         std::int64_t row0, std::int64_t rows, bf16* out,
                                         std::int64_t n, std::int64_t h) {
  GRID_STRIDE(i, n * h) {
    const std::int64_t t = i / h, j = i % h, row = tokens[t] - row0;
    out[i] = (row >= 0 && row < rows) ? wte[row * h + j] : __float2bfloat16(0.0f);
  }
}
__global__ void add_positions_kernel(bf16* out, const bf16* wpe, std::int64_t first,
                                     std::int64_t seq, std::int64_t n, std::int64_t h) {
  GRID_STRIDE(i, n * h) {
    const std::int64_t t = i / h, j = i % h, pos = (first + t) % seq;
    out[i] = __float2bfloat16(ld(out + i) + ld(wpe + pos * h + j));
  }
}
__global__ void embedding_backward_kernel(const std::int32_t* tokens, const bf16* dout,
                                          float* dwte, std::int64_t row0, std::int64_t rows,
                                          float* dwpe, std::int64_t seq, std::int64_t n,
                                          std::int64_t h) {
  GRID_STRIDE(i, n * h) {
    const std::int64_t t = i / h, j = i % h, row = tokens[t] - row0;
    const float d = ld(dout + i);
    atomicAdd(dwpe + (t % seq) * h + j, d);
    if (row >= 0 && row < rows) atomicAdd(dwte + row * h + j, d);
  }
}

// Cross-entropy: one block per token row.
__global__ void ce_max_kernel(const bf16* logits, float* row_max, std::int64_t vr,
                              std::int64_t valid) {
  const bf16* l = logits + blockIdx.x * vr;
  float m = -FLT_MAX;
  for (std::int64_t j = threadIdx.x; j < valid; j += blockDim.x) m = fmaxf(m, ld(l + j));
  m = block_max(m);
  if (threadIdx.x == 0) row_max[blockIdx.x] = valid > 0 ? m : -INFINITY;
}
__global__ void ce_sum_exp_kernel(const bf16* logits, const float* row_max,
                                  const std::int32_t* targets, std::int64_t v0, float* sum_exp,
                                  float* target_logit, std::int64_t vr, std::int64_t valid) {
  const std::int64_t row = blockIdx.x;
  const bf16* l = logits + row * vr;
  const float mx = row_max[row];
  float s = 0;
  for (std::int64_t j = threadIdx.x; j < valid; j += blockDim.x) s += __expf(ld(l + j) - mx);
  s = block_sum(s);
  if (threadIdx.x == 0) {
    sum_exp[row] = s;
    const std::int64_t col = targets[row] - v0;
    target_logit[row] = (col >= 0 && col < vr) ? ld(l + col) : 0.0f;
  }
}
__global__ void ce_loss_kernel(const float* row_max, const float* sum_exp, const float* target,
                               double* loss_sum, std::int64_t T) {
  double s = 0;
  for (std::int64_t i = threadIdx.x; i < T; i += blockDim.x)
    s += log(static_cast<double>(sum_exp[i])) + row_max[i] - target[i];
  __shared__ double part[kThreads];
  part[threadIdx.x] = s;
  __syncthreads();
  for (int o = blockDim.x / 2; o > 0; o >>= 1) {
    if (static_cast<int>(threadIdx.x) < o) part[threadIdx.x] += part[threadIdx.x + o];
    __syncthreads();
  }
  if (threadIdx.x == 0) *loss_sum += part[0];
}
__global__ void ce_backward_kernel(bf16* logits, const float* row_max, const float* sum_exp,
                                   const std::int32_t* targets, std::int64_t v0, float scale,
                                   std::int64_t vr, std::int64_t valid) {
  const std::int64_t row = blockIdx.x;
  bf16* l = logits + row * vr;
  const float mx = row_max[row], inv = 1.0f / sum_exp[row];
  const std::int64_t col = targets[row] - v0;
  for (std::int64_t j = threadIdx.x; j < vr; j += blockDim.x) {
    float g = 0;
    if (j < valid) g = __expf(ld(l + j) - mx) * inv - (j == col ? 1.0f : 0.0f);
    l[j] = __float2bfloat16(g * scale);
  }
}

__global__ void adamw_kernel(AdamWConfig opt, float step_size, float v_scale, std::int64_t n,
                             float* param, const float* grad, float* m, float* v,
                             const std::int64_t* decayed, std::int64_t ranges,
                             bf16* param_bf16) {
  GRID_STRIDE(i, n) {
    // The last range that starts at or before i (binary search over a handful).
    std::int64_t lo = 0, hi = ranges;
    while (lo < hi) {
      const std::int64_t mid = (lo + hi) / 2;
      if (decayed[2 * mid] <= i) lo = mid + 1; else hi = mid;
    }
    const bool decay = lo > 0 && i < decayed[2 * (lo - 1) + 1];
    const float g = grad[i];
    const float mi = opt.beta1 * m[i] + (1.0f - opt.beta1) * g;
    const float vi = opt.beta2 * v[i] + (1.0f - opt.beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    float p = param[i];
    if (decay) p -= opt.lr * opt.weight_decay * p;
    p -= step_size * mi / (sqrtf(vi) * v_scale + opt.eps);
    param[i] = p;
    if (param_bf16 != nullptr) param_bf16[i] = __float2bfloat16(p);
  }
}

}  // namespace

void cast_f32_to_bf16(const float* in, bf16* out, std::int64_t n, cudaStream_t s) {
  if (n == 0) return;
  cast_f32_bf16_kernel<<<blocks_for(n), kThreads, 0, s>>>(in, out, n);
  TP_LAUNCH_CHECK(cast_f32_bf16_kernel);
}
void cast_bf16_to_f32(const bf16* in, float* out, std::int64_t n, cudaStream_t s) {
  if (n == 0) return;
  cast_bf16_f32_kernel<<<blocks_for(n), kThreads, 0, s>>>(in, out, n);
  TP_LAUNCH_CHECK(cast_bf16_f32_kernel);
}
void add(const bf16* a, const bf16* b, bf16* out, std::int64_t n, cudaStream_t s) {
  if (n == 0) return;
  add_kernel<<<blocks_for(n), kThreads, 0, s>>>(a, b, out, n);
  TP_LAUNCH_CHECK(add_kernel);
}
void accumulate(const float* x, float* acc, std::int64_t n, cudaStream_t s) {
  if (n == 0) return;
  accumulate_kernel<<<blocks_for(n), kThreads, 0, s>>>(x, acc, n);
  TP_LAUNCH_CHECK(accumulate_kernel);
}
void residual_bias_add(const bf16* resid, const bf16* y, const bf16* bias, bf16* out,
                       std::int64_t rows, std::int64_t cols, cudaStream_t s) {
  if (rows * cols == 0) return;
  residual_bias_add_kernel<<<blocks_for(rows * cols), kThreads, 0, s>>>(resid, y, bias, out,
                                                                        rows, cols);
  TP_LAUNCH_CHECK(residual_bias_add_kernel);
}
void bias_backward(const bf16* dy, float* db, std::int64_t rows, std::int64_t cols,
                   cudaStream_t s) {
  if (rows * cols == 0) return;
  const dim3 grid(static_cast<unsigned>((cols + kThreads - 1) / kThreads),
                  static_cast<unsigned>((rows + kRowsPerSlice - 1) / kRowsPerSlice));
  bias_backward_kernel<<<grid, kThreads, 0, s>>>(dy, db, rows, cols);
  TP_LAUNCH_CHECK(bias_backward_kernel);
}

void layernorm_forward(const bf16* x, const bf16* gamma, const bf16* beta, bf16* y, float* mean,
                       float* rstd, std::int64_t rows, std::int64_t h, cudaStream_t s) {
  if (rows == 0) return;
  layernorm_forward_kernel<<<static_cast<unsigned>(rows), kThreads, 0, s>>>(x, gamma, beta, y,
                                                                            mean, rstd, h);
  TP_LAUNCH_CHECK(layernorm_forward_kernel);
}
void layernorm_backward(const bf16* dy, const bf16* x, const bf16* gamma, const float* mean,
                        const float* rstd, bf16* dx, float* dgamma, float* dbeta,
                        std::int64_t rows, std::int64_t h, cudaStream_t s) {
  if (rows == 0) return;
  const std::size_t smem = static_cast<std::size_t>(2 * h) * sizeof(float);
  if (smem > 48 * 1024)
    TP_CUDA(cudaFuncSetAttribute(layernorm_backward_kernel,
                                 cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 static_cast<int>(smem)));
  const int warps = kThreads / 32;
  std::int64_t blocks = (rows + warps - 1) / warps;
  if (blocks > 1024) blocks = 1024;  // fewer blocks: fewer global atomics for dgamma/dbeta
  layernorm_backward_kernel<<<static_cast<unsigned>(blocks), kThreads, smem, s>>>(
      dy, x, gamma, mean, rstd, dx, dgamma, dbeta, rows, h);
  TP_LAUNCH_CHECK(layernorm_backward_kernel);
}

void gelu_forward(const bf16* x, bf16* y, std::int64_t n, cudaStream_t s) {
  if (n == 0) return;
  gelu_forward_kernel<<<blocks_for(n), kThreads, 0, s>>>(x, y, n);
  TP_LAUNCH_CHECK(gelu_forward_kernel);
}
void gelu_backward(const bf16* x, const bf16* dy, bf16* dx, std::int64_t n, cudaStream_t s) {
  if (n == 0) return;
  gelu_backward_kernel<<<blocks_for(n), kThreads, 0, s>>>(x, dy, dx, n);
  TP_LAUNCH_CHECK(gelu_backward_kernel);
}

void embedding_forward(const std::int32_t* tokens, const bf16* wte, std::int64_t row0,
                       std::int64_t rows, bf16* out, std::int64_t n, std::int64_t h,
                       cudaStream_t s) {
  if (n * h == 0) return;
  embedding_forward_kernel<<<blocks_for(n * h), kThreads, 0, s>>>(tokens, wte, row0, rows, out,
                                                                  n, h);
  TP_LAUNCH_CHECK(embedding_forward_kernel);
}
void add_positions(bf16* out, const bf16* wpe, std::int64_t first, std::int64_t seq,
                   std::int64_t n, std::int64_t h, cudaStream_t s) {
  if (n * h == 0) return;
  add_positions_kernel<<<blocks_for(n * h), kThreads, 0, s>>>(out, wpe, first, seq, n, h);
  TP_LAUNCH_CHECK(add_positions_kernel);
}
void embedding_backward(const std::int32_t* tokens, const bf16* dout, float* dwte,
                        std::int64_t row0, std::int64_t rows, float* dwpe, std::int64_t seq,
                        std::int64_t n, std::int64_t h, cudaStream_t s) {
  if (n * h == 0) return;
  embedding_backward_kernel<<<blocks_for(n * h), kThreads, 0, s>>>(tokens, dout, dwte, row0,
                                                                   rows, dwpe, seq, n, h);
  TP_LAUNCH_CHECK(embedding_backward_kernel);
}

void cross_entropy_max(const bf16* logits, float* row_max, std::int64_t T, std::int64_t vr,
                       std::int64_t valid, cudaStream_t s) {
  if (T == 0) return;
  ce_max_kernel<<<static_cast<unsigned>(T), kThreads, 0, s>>>(logits, row_max, vr, valid);
  TP_LAUNCH_CHECK(ce_max_kernel);
}
void cross_entropy_sum_exp(const bf16* logits, const float* row_max,
                           const std::int32_t* targets, std::int64_t v0, float* sum_exp,
                           float* target_logit, std::int64_t T, std::int64_t vr,
                           std::int64_t valid, cudaStream_t s) {
  if (T == 0) return;
  ce_sum_exp_kernel<<<static_cast<unsigned>(T), kThreads, 0, s>>>(
      logits, row_max, targets, v0, sum_exp, target_logit, vr, valid);
  TP_LAUNCH_CHECK(ce_sum_exp_kernel);
}
void cross_entropy_loss(const float* row_max, const float* sum_exp, const float* target_logit,
                        double* loss_sum, std::int64_t T, cudaStream_t s) {
  ce_loss_kernel<<<1, kThreads, 0, s>>>(row_max, sum_exp, target_logit, loss_sum, T);
  TP_LAUNCH_CHECK(ce_loss_kernel);
}
void cross_entropy_backward(bf16* logits, const float* row_max, const float* sum_exp,
                            const std::int32_t* targets, std::int64_t v0, float scale,
                            std::int64_t T, std::int64_t vr, std::int64_t valid,
                            cudaStream_t s) {
  if (T == 0) return;
  ce_backward_kernel<<<static_cast<unsigned>(T), kThreads, 0, s>>>(logits, row_max, sum_exp,
                                                                   targets, v0, scale, vr, valid);
  TP_LAUNCH_CHECK(ce_backward_kernel);
}

void adamw_update(const AdamWConfig& opt, std::int64_t step, std::int64_t n, float* param,
                  const float* grad, float* m, float* v, const std::int64_t* decayed,
                  std::int64_t ranges, bf16* param_bf16, cudaStream_t s) {
  if (n == 0) return;
  // Bias corrections in double, as executor::adamw_update.
  const double c1 = 1.0 - std::pow(static_cast<double>(opt.beta1), static_cast<double>(step));
  const double c2 = 1.0 - std::pow(static_cast<double>(opt.beta2), static_cast<double>(step));
  const float step_size = static_cast<float>(opt.lr / c1);
  const float v_scale = static_cast<float>(1.0 / std::sqrt(c2));
  adamw_kernel<<<blocks_for(n), kThreads, 0, s>>>(opt, step_size, v_scale, n, param, grad, m, v,
                                                  decayed, ranges, param_bf16);
  TP_LAUNCH_CHECK(adamw_kernel);
}

}  // namespace trainplan::executor::cuda
