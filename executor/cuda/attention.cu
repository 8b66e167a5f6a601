// Causal attention for the CUDA executor; see kernels.h. Memory-efficient in the
// FlashAttention sense (Dao et al. 2022): between the passes only the output and one
// log-sum-exp per row are kept, and the backward recomputes the probabilities from it.
// Two implementations:
//  - fused (gemm == nullptr): online softmax (Milakov & Gimelshein 2018), one warp per query
//    row (forward, dQ) or key row (dK, dV); each lane holds D = ceil(hd/32) of the head's
//    values in registers (compile-time indices only). CUDA cores, float32: simple and the
//    reference on the device.
//  - tensor cores (gemm != nullptr): per sequence, batched cuBLASLt
//    GEMMs over the heads for the scores and the products with V, dO, K and Q, and row kernels
//    for the causal softmax and its backward; the (heads, seq, seq) scratch exists only
//    inside one call. Computes the masked triangle as well.
// The stage model runs the FlashAttention-2 kernels of flash_attention.cu where they apply
// (attention_impl_from_env); these two remain the fallback and the on-device reference.
// Tested by tests/executor/cuda/kernels_test.cc against executor::attention_forward/backward.
#include <cfloat>
#include <cmath>
#include <cstdlib>
#include <string>

#include "executor/cuda/gemm.h"
#include "executor/cuda/kernels.h"

namespace trainplan::executor::cuda {

namespace {

constexpr int kWarps = 4;  // rows per block

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Loads this lane's D values of a head row (zeros past hd).
template <int D>
__device__ __forceinline__ void load_row(const bf16* row, int lane, int hd, float (&r)[D]) {
#pragma unroll
  for (int t = 0; t < D; ++t) {
    const int d = lane + 32 * t;
    r[t] = d < hd ? __bfloat162float(row[d]) : 0.0f;
  }
}
template <int D>
__device__ __forceinline__ float dot_row(const float (&a)[D], const bf16* row, int lane, int hd) {
  float s = 0;
#pragma unroll
  for (int t = 0; t < D; ++t) {
    const int d = lane + 32 * t;
    if (d < hd) s += a[t] * __bfloat162float(row[d]);
  }
  return warp_sum(s);
}

// grid (ceil(seq / kWarps), batch * heads); warp w of block x handles query x*kWarps + w.
template <int D>
__global__ void attention_forward_kernel(const bf16* q, const bf16* k, const bf16* v,
                                         std::int64_t ld, bf16* out, float* lse,
                                         std::int64_t seq, std::int64_t heads, int hd,
                                         float scale) {
  const int lane = threadIdx.x % 32;
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (i >= seq) return;
  const std::int64_t b = blockIdx.y / heads, a = blockIdx.y % heads;
  const std::int64_t base = b * seq, col = a * hd;
  float qr[D], acc[D];
  load_row<D>(q + (base + i) * ld + col, lane, hd, qr);
#pragma unroll
  for (int t = 0; t < D; ++t) acc[t] = 0;
  float m = -FLT_MAX, l = 0;
  // Keys in tiles of 32: lane t keeps key j0 + t's score; one rescale per tile.
  for (std::int64_t j0 = 0; j0 <= i; j0 += 32) {
    float s = -FLT_MAX;
    const int n = i - j0 + 1 < 32 ? static_cast<int>(i - j0 + 1) : 32;
    for (int t = 0; t < n; ++t) {
      const float st = dot_row<D>(qr, k + (base + j0 + t) * ld + col, lane, hd) * scale;
      if (lane == t) s = st;
    }
    const float m_new = fmaxf(m, warp_max(s));
    const float corr = __expf(m - m_new);
    const float p = lane < n ? __expf(s - m_new) : 0.0f;
    l = l * corr + warp_sum(p);
#pragma unroll
    for (int t = 0; t < D; ++t) acc[t] *= corr;
    for (int t = 0; t < n; ++t) {
      const float pt = __shfl_sync(0xffffffffu, p, t);
      const bf16* vr = v + (base + j0 + t) * ld + col;
#pragma unroll
      for (int u = 0; u < D; ++u) {
        const int d = lane + 32 * u;
        if (d < hd) acc[u] += pt * __bfloat162float(vr[d]);
      }
    }
    m = m_new;
  }
  const float inv = 1.0f / l;
  bf16* o = out + (base + i) * (heads * hd) + col;
#pragma unroll
  for (int t = 0; t < D; ++t) {
    const int d = lane + 32 * t;
    if (d < hd) o[d] = __float2bfloat16(acc[t] * inv);
  }
  if (lane == 0) lse[(b * heads + a) * seq + i] = m + logf(l);
}

// delta_i = sum_d dout_i,d * out_i,d (FlashAttention-2's D). A warp per (row, head).
template <int D>
__global__ void attention_delta_kernel(const bf16* out, const bf16* dout, float* delta,
                                       std::int64_t seq, std::int64_t heads, int hd) {
  const int lane = threadIdx.x % 32;
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (i >= seq) return;
  const std::int64_t b = blockIdx.y / heads, a = blockIdx.y % heads;
  const std::int64_t off = (b * seq + i) * (heads * hd) + a * hd;
  float o[D];
  load_row<D>(out + off, lane, hd, o);
  const float s = dot_row<D>(o, dout + off, lane, hd);
  if (lane == 0) delta[(b * heads + a) * seq + i] = s;
}

// dQ_i = scale * sum_{j<=i} P_ij (dP_ij - delta_i) k_j, with P_ij = exp(s_ij - lse_i) and
// dP_ij = dout_i . v_j.
template <int D>
__global__ void attention_dq_kernel(const bf16* q, const bf16* k, const bf16* v,
                                    std::int64_t ld, const bf16* dout, const float* lse,
                                    const float* delta, bf16* dq, std::int64_t seq,
                                    std::int64_t heads, int hd, float scale) {
  const int lane = threadIdx.x % 32;
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (i >= seq) return;
  const std::int64_t b = blockIdx.y / heads, a = blockIdx.y % heads;
  const std::int64_t base = b * seq, col = a * hd, stat = (b * heads + a) * seq + i;
  float qr[D], dor[D], acc[D];
  load_row<D>(q + (base + i) * ld + col, lane, hd, qr);
  load_row<D>(dout + (base + i) * (heads * hd) + col, lane, hd, dor);
#pragma unroll
  for (int t = 0; t < D; ++t) acc[t] = 0;
  const float L = lse[stat], dl = delta[stat];
  for (std::int64_t j = 0; j <= i; ++j) {
    const bf16* kr = k + (base + j) * ld + col;
    const float p = __expf(dot_row<D>(qr, kr, lane, hd) * scale - L);
    const float dp = dot_row<D>(dor, v + (base + j) * ld + col, lane, hd);
    const float ds = p * (dp - dl) * scale;
#pragma unroll
    for (int t = 0; t < D; ++t) {
      const int d = lane + 32 * t;
      if (d < hd) acc[t] += ds * __bfloat162float(kr[d]);
    }
  }
  bf16* o = dq + (base + i) * ld + col;
#pragma unroll
  for (int t = 0; t < D; ++t) {
    const int d = lane + 32 * t;
    if (d < hd) o[d] = __float2bfloat16(acc[t]);
  }
}

// dV_j = sum_{i>=j} P_ij dout_i;  dK_j = scale * sum_{i>=j} P_ij (dP_ij - delta_i) q_i.
template <int D>
__global__ void attention_dkv_kernel(const bf16* q, const bf16* k, const bf16* v,
                                     std::int64_t ld, const bf16* dout, const float* lse,
                                     const float* delta, bf16* dk, bf16* dv, std::int64_t seq,
                                     std::int64_t heads, int hd, float scale) {
  const int lane = threadIdx.x % 32;
  const std::int64_t j = static_cast<std::int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (j >= seq) return;
  const std::int64_t b = blockIdx.y / heads, a = blockIdx.y % heads;
  const std::int64_t base = b * seq, col = a * hd, stat0 = (b * heads + a) * seq;
  float kr[D], vr[D], dka[D], dva[D];
  load_row<D>(k + (base + j) * ld + col, lane, hd, kr);
  load_row<D>(v + (base + j) * ld + col, lane, hd, vr);
#pragma unroll
  for (int t = 0; t < D; ++t) dka[t] = dva[t] = 0;
  for (std::int64_t i = j; i < seq; ++i) {
    const bf16* qi = q + (base + i) * ld + col;
    const bf16* doi = dout + (base + i) * (heads * hd) + col;
    const float p = __expf(dot_row<D>(kr, qi, lane, hd) * scale - lse[stat0 + i]);
    const float dp = dot_row<D>(vr, doi, lane, hd);
    const float ds = p * (dp - delta[stat0 + i]) * scale;
#pragma unroll
    for (int t = 0; t < D; ++t) {
      const int d = lane + 32 * t;
      if (d < hd) {
        dva[t] += p * __bfloat162float(doi[d]);
        dka[t] += ds * __bfloat162float(qi[d]);
      }
    }
  }
#pragma unroll
  for (int t = 0; t < D; ++t) {
    const int d = lane + 32 * t;
    if (d < hd) {
      dk[(base + j) * ld + col + d] = __float2bfloat16(dka[t]);
      dv[(base + j) * ld + col + d] = __float2bfloat16(dva[t]);
    }
  }
}

// ---- the tensor-core path: scores through batched GEMMs, softmax on one row per block ----

constexpr int kRowThreads = 128;

__device__ float block_reduce(float v, bool is_max) {
  __shared__ float part[kRowThreads / 32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = is_max ? warp_max(v) : warp_sum(v);
  __syncthreads();
  if (lane == 0) part[warp] = v;
  __syncthreads();
  v = lane < kRowThreads / 32 ? part[lane] : (is_max ? -FLT_MAX : 0.0f);
  return is_max ? warp_max(v) : warp_sum(v);
}

// One sequence: S (heads, seq, lds) scaled scores -> P (bf16, zeros above the diagonal) and
// lse (heads * seq). grid (seq, heads).
__global__ void causal_softmax_kernel(const float* S, bf16* P, float* lse, std::int64_t seq,
                                      std::int64_t lds) {
  const std::int64_t row = blockIdx.x, head = blockIdx.y;
  const float* sr = S + (head * seq + row) * lds;
  bf16* pr = P + (head * seq + row) * lds;
  float m = -FLT_MAX;
  for (std::int64_t j = threadIdx.x; j <= row; j += blockDim.x) m = fmaxf(m, sr[j]);
  m = block_reduce(m, true);
  float sum = 0;
  for (std::int64_t j = threadIdx.x; j <= row; j += blockDim.x) sum += __expf(sr[j] - m);
  const float L = m + logf(block_reduce(sum, false));
  for (std::int64_t j = threadIdx.x; j < seq; j += blockDim.x)
    pr[j] = __float2bfloat16(j <= row ? __expf(sr[j] - L) : 0.0f);
  if (threadIdx.x == 0) lse[head * seq + row] = L;
}

// Backward, one sequence: P = exp(S - lse) again (bf16, for dV).
__global__ void causal_probs_kernel(const float* S, const float* lse, bf16* P, std::int64_t seq,
                                    std::int64_t lds) {
  const std::int64_t row = blockIdx.x, head = blockIdx.y;
  const float L = lse[head * seq + row];
  const float* sr = S + (head * seq + row) * lds;
  bf16* pr = P + (head * seq + row) * lds;
  for (std::int64_t j = threadIdx.x; j < seq; j += blockDim.x)
    pr[j] = __float2bfloat16(j <= row ? __expf(sr[j] - L) : 0.0f);
}

// dS = P (dP - delta) * scale with P recomputed in float32 from S and lse; bf16 out.
__global__ void causal_softmax_backward_kernel(const float* S, const float* dP, const float* lse,
                                               const float* delta, float scale, bf16* dS,
                                               std::int64_t seq, std::int64_t lds) {
  const std::int64_t row = blockIdx.x, head = blockIdx.y, r = head * seq + row;
  const float L = lse[r], D = delta[r];
  for (std::int64_t j = threadIdx.x; j < seq; j += blockDim.x) {
    const std::int64_t at = r * lds + j;
    dS[at] = __float2bfloat16(j <= row ? __expf(S[at] - L) * (dP[at] - D) * scale : 0.0f);
  }
}

// Scores of sequence b for every head: S_a = scale * Q_a K_a^T, float32 (heads, seq, lds).
void scores(Gemm& gemm, const bf16* q, const bf16* k, std::int64_t ld, std::int64_t seq,
            std::int64_t heads, std::int64_t hd, std::int64_t lds, float scale, float* S,
            cudaStream_t s) {
  GemmArgs g;
  g.trans_b = true;
  g.m = seq; g.n = seq; g.k = hd;
  g.a = q; g.lda = ld; g.stride_a = hd;
  g.b = k; g.ldb = ld; g.stride_b = hd;
  g.c = S; g.ldc = lds; g.stride_c = seq * lds; g.c_fp32 = true;
  g.alpha = scale;
  g.batch = heads;
  gemm.run(g, s);
}

// C_a (seq, hd) = op(X_a) Y_a for every head: X (heads, seq, lds) bf16, Y rows of stride ldy at
// column a*hd, C rows of stride ldc at column a*hd.
void probs_times(Gemm& gemm, bool transpose_x, const bf16* X, std::int64_t lds, const bf16* Y,
                 std::int64_t ldy, bf16* C, std::int64_t ldc, std::int64_t seq,
                 std::int64_t heads, std::int64_t hd, cudaStream_t s) {
  GemmArgs g;
  g.trans_a = transpose_x;
  g.m = seq; g.n = hd; g.k = seq;
  g.a = X; g.lda = lds; g.stride_a = seq * lds;
  g.b = Y; g.ldb = ldy; g.stride_b = hd;
  g.c = C; g.ldc = ldc; g.stride_c = hd;
  g.batch = heads;
  gemm.run(g, s);
}

dim3 grid_for(std::int64_t batch, std::int64_t seq, std::int64_t heads) {
  return dim3(static_cast<unsigned>((seq + kWarps - 1) / kWarps),
              static_cast<unsigned>(batch * heads));
}

void check_shape(std::int64_t hd, std::int64_t batch, std::int64_t heads) {
  if (hd < 1 || hd > kMaxHeadDim)
    throw CudaError("attention: head_dim " + std::to_string(hd) + " outside [1, " +
                    std::to_string(kMaxHeadDim) + "]");
  if (batch * heads > 65535)
    throw CudaError("attention: batch * heads = " + std::to_string(batch * heads) +
                    " exceeds the grid's y limit 65535");
}

// Calls f(std::integral_constant<int, D>) with D = ceil(hd / 32).
template <typename F>
void dispatch_d(std::int64_t hd, F&& f) {
  switch ((hd + 31) / 32) {
    case 1: f(std::integral_constant<int, 1>{}); break;
    case 2: f(std::integral_constant<int, 2>{}); break;
    case 3: f(std::integral_constant<int, 3>{}); break;
    default: f(std::integral_constant<int, 4>{}); break;
  }
}

}  // namespace

AttentionImpl attention_impl_from_env(std::int64_t hd, std::int64_t ld) {
  const char* v = std::getenv("TRAINPLAN_CUDA_ATTENTION");
  const std::string choice = v != nullptr ? v : "";
  const bool flash_ok = flash_attention_supported(hd, ld);
  if (choice.empty() || choice == "auto") return flash_ok ? AttentionImpl::kFlash : AttentionImpl::kGemm;
  if (choice == "gemm") return AttentionImpl::kGemm;
  if (choice == "fused") return AttentionImpl::kFused;
  if (choice == "flash") {
    if (!flash_ok)
      throw CudaError("TRAINPLAN_CUDA_ATTENTION=flash: head_dim " + std::to_string(hd) +
                      " with row stride " + std::to_string(ld) +
                      " is not supported here (needs sm_80+, head_dim 16/32/64/80/96/128 and a "
                      "row stride that is a multiple of 8)");
    return AttentionImpl::kFlash;
  }
  throw CudaError("TRAINPLAN_CUDA_ATTENTION=" + choice +
                  ": expected auto, flash, gemm or fused");
}

const char* attention_impl_name(AttentionImpl impl) {
  switch (impl) {
    case AttentionImpl::kFlash: return "flash";
    case AttentionImpl::kGemm: return "gemm";
    case AttentionImpl::kFused: return "fused";
  }
  return "?";
}

void attention_delta(const bf16* out, const bf16* dout, float* delta, std::int64_t batch,
                     std::int64_t seq, std::int64_t heads, std::int64_t hd, cudaStream_t s) {
  check_shape(hd, batch, heads);
  dispatch_d(hd, [&](auto d) {
    attention_delta_kernel<decltype(d)::value><<<grid_for(batch, seq, heads), 32 * kWarps, 0, s>>>(
        out, dout, delta, seq, heads, static_cast<int>(hd));
  });
  TP_LAUNCH_CHECK(attention_delta_kernel);
}

void attention_forward(const bf16* q, const bf16* k, const bf16* v, std::int64_t ld, bf16* out,
                       float* lse, std::int64_t batch, std::int64_t seq, std::int64_t heads,
                       std::int64_t hd, cudaStream_t s, Gemm* gemm) {
  check_shape(hd, batch, heads);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  if (gemm != nullptr) {
    const std::int64_t lds = (seq + 7) / 8 * 8, ldo = heads * hd;  // 16-byte aligned rows
    DeviceBuffer<float> S(heads * seq * lds);
    DeviceBuffer<bf16> P(heads * seq * lds);
    const dim3 rows(static_cast<unsigned>(seq), static_cast<unsigned>(heads));
    for (std::int64_t b = 0; b < batch; ++b) {
      scores(*gemm, q + b * seq * ld, k + b * seq * ld, ld, seq, heads, hd, lds, scale, S.data(), s);
      causal_softmax_kernel<<<rows, kRowThreads, 0, s>>>(S.data(), P.data(), lse + b * heads * seq,
                                                         seq, lds);
      TP_LAUNCH_CHECK(causal_softmax_kernel);
      probs_times(*gemm, false, P.data(), lds, v + b * seq * ld, ld, out + b * seq * ldo, ldo, seq,
                  heads, hd, s);
    }
    return;
  }
  dispatch_d(hd, [&](auto d) {
    attention_forward_kernel<decltype(d)::value><<<grid_for(batch, seq, heads), 32 * kWarps, 0, s>>>(
        q, k, v, ld, out, lse, seq, heads, static_cast<int>(hd), scale);
  });
  TP_LAUNCH_CHECK(attention_forward_kernel);
}

void attention_backward(const bf16* q, const bf16* k, const bf16* v, std::int64_t ld,
                        const bf16* out, const bf16* dout, const float* lse, float* delta,
                        bf16* dq, bf16* dk, bf16* dv, std::int64_t batch, std::int64_t seq,
                        std::int64_t heads, std::int64_t hd, cudaStream_t s, Gemm* gemm) {
  check_shape(hd, batch, heads);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const dim3 grid = grid_for(batch, seq, heads);
  const int hdi = static_cast<int>(hd);
  if (gemm != nullptr) {
    attention_delta(out, dout, delta, batch, seq, heads, hd, s);
    const std::int64_t lds = (seq + 7) / 8 * 8, ldo = heads * hd;
    DeviceBuffer<float> S(heads * seq * lds), dP(heads * seq * lds);
    DeviceBuffer<bf16> P(heads * seq * lds);
    const dim3 rows(static_cast<unsigned>(seq), static_cast<unsigned>(heads));
    for (std::int64_t b = 0; b < batch; ++b) {
      const std::int64_t off = b * seq * ld, offo = b * seq * ldo, stat = b * heads * seq;
      scores(*gemm, q + off, k + off, ld, seq, heads, hd, lds, scale, S.data(), s);
      causal_probs_kernel<<<rows, kRowThreads, 0, s>>>(S.data(), lse + stat, P.data(), seq, lds);
      TP_LAUNCH_CHECK(causal_probs_kernel);
      // dV_a = P_a^T dO_a
      probs_times(*gemm, true, P.data(), lds, dout + offo, ldo, dv + off, ld, seq, heads, hd, s);
      // dP_a = dO_a V_a^T (float32)
      GemmArgs g;
      g.trans_b = true;
      g.m = seq; g.n = seq; g.k = hd;
      g.a = dout + offo; g.lda = ldo; g.stride_a = hd;
      g.b = v + off; g.ldb = ld; g.stride_b = hd;
      g.c = dP.data(); g.ldc = lds; g.stride_c = seq * lds; g.c_fp32 = true;
      g.batch = heads;
      gemm->run(g, s);
      causal_softmax_backward_kernel<<<rows, kRowThreads, 0, s>>>(
          S.data(), dP.data(), lse + stat, delta + stat, scale, P.data(), seq, lds);
      TP_LAUNCH_CHECK(causal_softmax_backward_kernel);
      // dQ_a = dS_a K_a, dK_a = dS_a^T Q_a (dS in P's buffer)
      probs_times(*gemm, false, P.data(), lds, k + off, ld, dq + off, ld, seq, heads, hd, s);
      probs_times(*gemm, true, P.data(), lds, q + off, ld, dk + off, ld, seq, heads, hd, s);
    }
    return;
  }
  attention_delta(out, dout, delta, batch, seq, heads, hd, s);
  dispatch_d(hd, [&](auto d) {
    constexpr int kD = decltype(d)::value;
    attention_dq_kernel<kD><<<grid, 32 * kWarps, 0, s>>>(q, k, v, ld, dout, lse, delta, dq, seq,
                                                         heads, hdi, scale);
    TP_LAUNCH_CHECK(attention_dq_kernel);
    attention_dkv_kernel<kD><<<grid, 32 * kWarps, 0, s>>>(q, k, v, ld, dout, lse, delta, dk, dv,
                                                          seq, heads, hdi, scale);
    TP_LAUNCH_CHECK(attention_dkv_kernel);
  });
}

}  // namespace trainplan::executor::cuda
