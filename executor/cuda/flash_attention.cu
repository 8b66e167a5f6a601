// Causal attention on the tensor cores in tiles, FlashAttention-2's way (Dao 2023,
// "FlashAttention-2: Faster Attention with Better Parallelism and Work Partitioning",
// algorithms 1 and 2): the (seq x seq) scores never leave the chip. See kernels.h.
//
// Layout of the work:
//  - A block is 4 warps; a warp owns 16 rows of a 64-row tile: query rows in the forward and
//    in dQ, key rows in dK/dV. Its rows' Q (or K, V, dO) fragments stay in registers.
//  - The other operand streams through shared memory one 64-row tile at a time, row-major and,
//    where a product needs it as the reduction index, transposed.
//  - Products are PTX mma.sync.m16n8k16 with bf16 inputs and float32 accumulators (sm_80 and
//    later). The fragment layouts are those of the PTX ISA, section "Matrix Fragments for
//    mma.m16n8k16 with floating point type": for lane = 4 g + t,
//      A (16 x 16, row-major)  a0 = A[g][2t..2t+1], a1 = A[g+8][2t..], a2 = A[g][2t+8..],
//                              a3 = A[g+8][2t+8..];
//      B (16 x 8, k x n)       b0 = B[2t..2t+1][g], b1 = B[2t+8..2t+9][g];
//      C (16 x 8, float32)     c0, c1 = C[g][2t..2t+1], c2, c3 = C[g+8][2t..2t+1].
//    So a C tile pair (16 x 16) is, once rounded to bf16, the A operand of the next product:
//    the probabilities go from the score product to the P V product without shared memory.
//  - The forward keeps the online-softmax state per row (running max and sum; Milakov &
//    Gimelshein 2018) and writes O and the row's log-sum-exp.
//  - The backward recomputes P = exp(S - lse) and runs as two kernels that own their outputs:
//    dK, dV by key tiles (FlashAttention-2's loop order) and dQ by query tiles. Computing S
//    and dP twice costs 2 of 7 products, and in return no atomics: the result is the same
//    from run to run, which the layout checks rely on.
// Rounding: P and dS are rounded to bf16 before their products (as FlashAttention-2 does);
// everything else accumulates in float32. Tested against the CPU executor by
// tests/executor/cuda/kernels_test.cc (CudaAttention, the flash cases).
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "executor/cuda/kernels.h"

namespace trainplan::executor::cuda {

namespace {

constexpr int kTile = 64;             // rows per block and per streamed tile
constexpr int kWarps = kTile / 16;    // a warp per 16 rows
constexpr int kThreads = 32 * kWarps;
constexpr int kPad = 8;               // bf16 per shared row: 16 bytes, no bank conflicts below

using u32 = std::uint32_t;

__device__ __forceinline__ u32 ld32(const bf16* p) { return *reinterpret_cast<const u32*>(p); }

// Two floats as a bf16 pair: `lo` in the low half, the lower column index (PTX's order).
__device__ __forceinline__ u32 pack2(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<u32*>(&v);
}

// d += a b on the tensor cores: A 16 x 16, B 16 x 8, C 16 x 8 (layouts above).
__device__ __forceinline__ void mma(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif  // below sm_80 never launched: flash_attention_supported() says no
}

// The A operand at columns [k0, k0 + 16) of two rows (g and g + 8 of a 16-row slab) of a
// row-major matrix; a null row reads as zeros (rows past the sequence).
__device__ __forceinline__ void load_a(u32 (&a)[4], const bf16* row_lo, const bf16* row_hi,
                                       int k0, int t) {
  const int c = k0 + 2 * t;
  a[0] = row_lo != nullptr ? ld32(row_lo + c) : 0u;
  a[1] = row_hi != nullptr ? ld32(row_hi + c) : 0u;
  a[2] = row_lo != nullptr ? ld32(row_lo + c + 8) : 0u;
  a[3] = row_hi != nullptr ? ld32(row_hi + c + 8) : 0u;
}

// The B operand (k in [k0, k0 + 16), n in [n0, n0 + 8)) of a matrix stored n-major: s[n][k].
__device__ __forceinline__ void load_b(u32& b0, u32& b1, const bf16* s, int lds, int n0, int k0,
                                       int g, int t) {
  const bf16* p = s + (n0 + g) * lds + k0 + 2 * t;
  b0 = ld32(p);
  b1 = ld32(p + 8);
}

// The A operand of columns [16 kk, 16 kk + 16) of a 16 x 64 float32 C tile set, in bf16.
__device__ __forceinline__ void c_to_a(u32 (&a)[4], const float (*c)[4], int kk) {
  a[0] = pack2(c[2 * kk][0], c[2 * kk][1]);
  a[1] = pack2(c[2 * kk][2], c[2 * kk][3]);
  a[2] = pack2(c[2 * kk + 1][0], c[2 * kk + 1][1]);
  a[3] = pack2(c[2 * kk + 1][2], c[2 * kk + 1][3]);
}

// Rows [r0, r0 + kTile) of a (rows x D) bf16 slice (row stride ld) into shared memory:
// `dst` [kTile][D + kPad] row-major and/or `dst_t` [D][kTile + kPad] transposed; rows past
// `rows` are zeros. 16-byte loads: ld and the slice's column offset are multiples of 8.
template <int D>
__device__ __forceinline__ void load_tile(const bf16* src, std::int64_t ld, std::int64_t r0,
                                          std::int64_t rows, bf16* dst, bf16* dst_t) {
  constexpr int kChunks = D / 8;
  for (int c = threadIdx.x; c < kTile * kChunks; c += kThreads) {
    const int r = c / kChunks, d = (c % kChunks) * 8;
    uint4 val = make_uint4(0u, 0u, 0u, 0u);
    if (r0 + r < rows) val = *reinterpret_cast<const uint4*>(src + (r0 + r) * ld + d);
    if (dst != nullptr) *reinterpret_cast<uint4*>(dst + r * (D + kPad) + d) = val;
    if (dst_t != nullptr) {
      const bf16* e = reinterpret_cast<const bf16*>(&val);
#pragma unroll
      for (int u = 0; u < 8; ++u) dst_t[(d + u) * (kTile + kPad) + r] = e[u];
    }
  }
}

__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// c1 = a1 B1 and c2 = a2 B2 for the 16 rows of a1, a2 (D wide, in registers) against two
// streamed tiles stored n-major (s[n][k], row stride D + kPad): the backward's S and dP, one
// column tile at a time, each tile's two operand loads together.
template <int D>
__device__ __forceinline__ void tile_products(float (&c1)[kTile / 8][4], const u32 (&a1)[D / 16][4],
                                              const bf16* s1, float (&c2)[kTile / 8][4],
                                              const u32 (&a2)[D / 16][4], const bf16* s2, int g,
                                              int t) {
#pragma unroll
  for (int nt = 0; nt < kTile / 8; ++nt) {
#pragma unroll
    for (int r = 0; r < 4; ++r) c1[nt][r] = c2[nt][r] = 0.0f;
#pragma unroll
    for (int kc = 0; kc < D / 16; ++kc) {
      u32 b0, b1;
      load_b(b0, b1, s1, D + kPad, nt * 8, kc * 16, g, t);
      mma(c1[nt], a1[kc], b0, b1);
      load_b(b0, b1, s2, D + kPad, nt * 8, kc * 16, g, t);
      mma(c2[nt], a2[kc], b0, b1);
    }
  }
}

// One term of accumulate_products: acc (D / 8 C tiles) += C B, C the 16 x kTile float32 tiles
// of a previous product, rounded to bf16 as the A operand (c_to_a); B a streamed tile stored
// transposed, st[d][k] with row stride kTile + kPad.
struct AccumulateTerm {
  float (*acc)[4];
  const float (*c)[4];
  const bf16* st;
};

// The N terms' products, interleaved per column tile as the forward (N = 1: O += P V), dQ
// (N = 1: dQ += dS K) and dK/dV (N = 2: dV += P^T dO beside dK += dS^T Q) need them.
template <int D, int N>
__device__ __forceinline__ void accumulate_products(const AccumulateTerm (&terms)[N], int g,
                                                    int t) {
#pragma unroll
  for (int kk = 0; kk < kTile / 16; ++kk) {
    u32 a[N][4];
#pragma unroll
    for (int i = 0; i < N; ++i) c_to_a(a[i], terms[i].c, kk);
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt) {
#pragma unroll
      for (int i = 0; i < N; ++i) {
        u32 b0, b1;
        load_b(b0, b1, terms[i].st, kTile + kPad, dt * 8, kk * 16, g, t);
        mma(terms[i].acc[dt], a[i], b0, b1);
      }
    }
  }
}

// Writes a 16 x D float32 C tile set (times `mul`) as bf16 to rows row_lo / row_hi (null: skip).
template <int D>
__device__ __forceinline__ void store_rows(const float (&c)[D / 8][4], float mul_lo,
                                           float mul_hi, bf16* row_lo, bf16* row_hi, int t) {
#pragma unroll
  for (int dt = 0; dt < D / 8; ++dt) {
    const int col = dt * 8 + 2 * t;
    if (row_lo != nullptr)
      *reinterpret_cast<u32*>(row_lo + col) = pack2(c[dt][0] * mul_lo, c[dt][1] * mul_lo);
    if (row_hi != nullptr)
      *reinterpret_cast<u32*>(row_hi + col) = pack2(c[dt][2] * mul_hi, c[dt][3] * mul_hi);
  }
}

template <int D>
constexpr int row_bytes() { return kTile * (D + kPad) * 2; }  // a [kTile][D + kPad] tile
template <int D>
constexpr int col_bytes() { return D * (kTile + kPad) * 2; }  // a [D][kTile + kPad] tile

// ---- forward: grid (query tiles, batch * heads), the longest rows first ----
template <int D>
__global__ void __launch_bounds__(kThreads)
    flash_forward_kernel(const bf16* q, const bf16* k, const bf16* v, std::int64_t ld, bf16* out,
                         float* lse, int seq, int heads, float scale) {
  extern __shared__ __align__(16) unsigned char smem[];
  bf16* ks = reinterpret_cast<bf16*>(smem);  // [kTile][D + kPad]
  bf16* vt = ks + kTile * (D + kPad);        // [D][kTile + kPad]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int qt = gridDim.x - 1 - blockIdx.x;
  const std::int64_t b = blockIdx.y / heads, a = blockIdx.y % heads, base = b * seq;
  const bf16* qh = q + base * ld + a * D;
  const bf16* kh = k + base * ld + a * D;
  const bf16* vh = v + base * ld + a * D;
  const int i_lo = qt * kTile + warp * 16 + g, i_hi = i_lo + 8;
  u32 qa[D / 16][4];
#pragma unroll
  for (int kc = 0; kc < D / 16; ++kc)
    load_a(qa[kc], i_lo < seq ? qh + i_lo * ld : nullptr, i_hi < seq ? qh + i_hi * ld : nullptr,
           kc * 16, t);
  float o[D / 8][4];
#pragma unroll
  for (int dt = 0; dt < D / 8; ++dt) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.0f;
  // Key 0 is in every row's first tile, so the running max is finite from the first tile on.
  float m_lo = -INFINITY, m_hi = -INFINITY, l_lo = 0.0f, l_hi = 0.0f;  // l: this lane's part
  for (int kt = 0; kt <= qt; ++kt) {
    __syncthreads();  // the previous tile is used up
    load_tile<D>(kh, ld, kt * kTile, seq, ks, nullptr);
    load_tile<D>(vh, ld, kt * kTile, seq, nullptr, vt);
    __syncthreads();
    float s[kTile / 8][4];
#pragma unroll
    for (int nt = 0; nt < kTile / 8; ++nt) {
      s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
      for (int kc = 0; kc < D / 16; ++kc) {
        u32 b0, b1;
        load_b(b0, b1, ks, D + kPad, nt * 8, kc * 16, g, t);
        mma(s[nt], qa[kc], b0, b1);
      }
    }
    float mx_lo = m_lo, mx_hi = m_hi;
#pragma unroll
    for (int nt = 0; nt < kTile / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int j = kt * kTile + nt * 8 + 2 * t + e;
        s[nt][e] = (j <= i_lo && j < seq) ? s[nt][e] * scale : -INFINITY;
        s[nt][2 + e] = (j <= i_hi && j < seq) ? s[nt][2 + e] * scale : -INFINITY;
        mx_lo = fmaxf(mx_lo, s[nt][e]);
        mx_hi = fmaxf(mx_hi, s[nt][2 + e]);
      }
    }
    mx_lo = quad_max(mx_lo);
    mx_hi = quad_max(mx_hi);
    const float c_lo = __expf(m_lo - mx_lo), c_hi = __expf(m_hi - mx_hi);  // 0 on the first tile
    m_lo = mx_lo;
    m_hi = mx_hi;
    float sum_lo = 0.0f, sum_hi = 0.0f;
#pragma unroll
    for (int nt = 0; nt < kTile / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        s[nt][e] = __expf(s[nt][e] - m_lo);
        s[nt][2 + e] = __expf(s[nt][2 + e] - m_hi);
        sum_lo += s[nt][e];
        sum_hi += s[nt][2 + e];
      }
    }
    l_lo = l_lo * c_lo + sum_lo;
    l_hi = l_hi * c_hi + sum_hi;
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt) {
      o[dt][0] *= c_lo;
      o[dt][1] *= c_lo;
      o[dt][2] *= c_hi;
      o[dt][3] *= c_hi;
    }
    accumulate_products<D>({AccumulateTerm{o, s, vt}}, g, t);
  }
  l_lo = quad_sum(l_lo);
  l_hi = quad_sum(l_hi);
  const std::int64_t ldo = static_cast<std::int64_t>(heads) * D;
  bf16* oh = out + base * ldo + a * D;
  store_rows<D>(o, 1.0f / l_lo, 1.0f / l_hi, i_lo < seq ? oh + i_lo * ldo : nullptr,
                i_hi < seq ? oh + i_hi * ldo : nullptr, t);
  if (t == 0) {
    float* lh = lse + (b * heads + a) * seq;
    if (i_lo < seq) lh[i_lo] = m_lo + logf(l_lo);
    if (i_hi < seq) lh[i_hi] = m_hi + logf(l_hi);
  }
}

// The A operands (D wide) of a warp's two rows, lo and lo + 8, of two row-major matrices at
// once (m1 rows of ld1, m2 rows of ld2); a row past the sequence reads as zeros.
template <int D>
__device__ __forceinline__ void load_rows(u32 (&a1)[D / 16][4], const bf16* m1, std::int64_t ld1,
                                          u32 (&a2)[D / 16][4], const bf16* m2, std::int64_t ld2,
                                          int lo, bool in_lo, bool in_hi, int t) {
#pragma unroll
  for (int kc = 0; kc < D / 16; ++kc) {
    load_a(a1[kc], in_lo ? m1 + lo * ld1 : nullptr, in_hi ? m1 + (lo + 8) * ld1 : nullptr,
           kc * 16, t);
    load_a(a2[kc], in_lo ? m2 + lo * ld2 : nullptr, in_hi ? m2 + (lo + 8) * ld2 : nullptr,
           kc * 16, t);
  }
}

// The backward kernels' operands for one (sequence, head), blockIdx.y = b * heads + a: row 0
// of the sequence at the head's columns (q, k, v rows of `ld`; dO rows of ldo = heads * D) and
// the head's per-row statistics.
template <int D>
struct BackwardSlice {
  std::int64_t b, a, base, ldo;
  const bf16 *q, *k, *v, *dout;
  const float *lse, *delta;
  __device__ BackwardSlice(const bf16* q0, const bf16* k0, const bf16* v0, std::int64_t ld,
                           const bf16* dout0, const float* lse0, const float* delta0, int seq,
                           int heads)
      : b(blockIdx.y / heads),
        a(blockIdx.y % heads),
        base(b * seq),
        ldo(static_cast<std::int64_t>(heads) * D),
        q(q0 + base * ld + a * D),
        k(k0 + base * ld + a * D),
        v(v0 + base * ld + a * D),
        dout(dout0 + base * ldo + a * D),
        lse(lse0 + (b * heads + a) * seq),
        delta(delta0 + (b * heads + a) * seq) {}
};

// ---- dQ: grid (query tiles, batch * heads). dQ_i = scale sum_j P_ij (dP_ij - delta_i) k_j ----
template <int D>
__global__ void __launch_bounds__(kThreads)
    flash_dq_kernel(const bf16* q, const bf16* k, const bf16* v, std::int64_t ld,
                    const bf16* dout, const float* lse, const float* delta, bf16* dq, int seq,
                    int heads, float scale) {
  extern __shared__ __align__(16) unsigned char smem[];
  bf16* ks = reinterpret_cast<bf16*>(smem);  // [kTile][D + kPad]
  bf16* vs = ks + kTile * (D + kPad);        // [kTile][D + kPad]
  bf16* kt_s = vs + kTile * (D + kPad);      // [D][kTile + kPad]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int qt = gridDim.x - 1 - blockIdx.x;
  const BackwardSlice<D> h(q, k, v, ld, dout, lse, delta, seq, heads);
  const std::int64_t a = h.a, base = h.base, ldo = h.ldo;
  const bf16 *qh = h.q, *kh = h.k, *vh = h.v, *doh = h.dout;
  const int i_lo = qt * kTile + warp * 16 + g, i_hi = i_lo + 8;
  const bool in_lo = i_lo < seq, in_hi = i_hi < seq;
  u32 qa[D / 16][4], da[D / 16][4];
  load_rows<D>(qa, qh, ld, da, doh, ldo, i_lo, in_lo, in_hi, t);
  const float *lh = h.lse, *dh = h.delta;
  const float L_lo = in_lo ? lh[i_lo] : 0.0f, L_hi = in_hi ? lh[i_hi] : 0.0f;
  const float D_lo = in_lo ? dh[i_lo] : 0.0f, D_hi = in_hi ? dh[i_hi] : 0.0f;
  float acc[D / 8][4];
#pragma unroll
  for (int dt = 0; dt < D / 8; ++dt) acc[dt][0] = acc[dt][1] = acc[dt][2] = acc[dt][3] = 0.0f;
  for (int kt = 0; kt <= qt; ++kt) {
    __syncthreads();
    load_tile<D>(kh, ld, kt * kTile, seq, ks, kt_s);
    load_tile<D>(vh, ld, kt * kTile, seq, vs, nullptr);
    __syncthreads();
    float s[kTile / 8][4], dp[kTile / 8][4];
    tile_products<D>(s, qa, ks, dp, da, vs, g, t);
#pragma unroll
    for (int nt = 0; nt < kTile / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {  // s := dS (unscaled): P (dP - delta), zero where masked
        const int j = kt * kTile + nt * 8 + 2 * t + e;
        const float p_lo = (j <= i_lo && j < seq) ? __expf(s[nt][e] * scale - L_lo) : 0.0f;
        const float p_hi = (j <= i_hi && j < seq) ? __expf(s[nt][2 + e] * scale - L_hi) : 0.0f;
        s[nt][e] = p_lo * (dp[nt][e] - D_lo);
        s[nt][2 + e] = p_hi * (dp[nt][2 + e] - D_hi);
      }
    }
    accumulate_products<D>({AccumulateTerm{acc, s, kt_s}}, g, t);
  }
  bf16* dqh = dq + base * ld + a * D;
  store_rows<D>(acc, scale, scale, in_lo ? dqh + i_lo * ld : nullptr,
                in_hi ? dqh + i_hi * ld : nullptr, t);
}

// ---- dK, dV: grid (key tiles, batch * heads), the longest columns (first keys) first. With
// rows j (keys) and columns i (queries): P^T_ji = exp(s_ij - lse_i), dV_j = sum_i P_ij dO_i,
// dK_j = scale sum_i P_ij (dP_ij - delta_i) q_i ----
template <int D>
__global__ void __launch_bounds__(kThreads)
    flash_dkv_kernel(const bf16* q, const bf16* k, const bf16* v, std::int64_t ld,
                     const bf16* dout, const float* lse, const float* delta, bf16* dk, bf16* dv,
                     int seq, int heads, float scale) {
  extern __shared__ __align__(16) unsigned char smem[];
  bf16* qs = reinterpret_cast<bf16*>(smem);  // [kTile][D + kPad]
  bf16* ds = qs + kTile * (D + kPad);        // dO, [kTile][D + kPad]
  bf16* qt_s = ds + kTile * (D + kPad);      // [D][kTile + kPad]
  bf16* dt_s = qt_s + D * (kTile + kPad);    // dO transposed, [D][kTile + kPad]
  float* lse_s = reinterpret_cast<float*>(dt_s + D * (kTile + kPad));  // [kTile]
  float* del_s = lse_s + kTile;                                        // [kTile]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int kb = blockIdx.x;
  const BackwardSlice<D> h(q, k, v, ld, dout, lse, delta, seq, heads);
  const std::int64_t a = h.a, base = h.base, ldo = h.ldo;
  const bf16 *qh = h.q, *kh = h.k, *vh = h.v, *doh = h.dout;
  const float *lh = h.lse, *dh = h.delta;
  const int j_lo = kb * kTile + warp * 16 + g, j_hi = j_lo + 8;
  const bool in_lo = j_lo < seq, in_hi = j_hi < seq;
  u32 ka[D / 16][4], va[D / 16][4];
  load_rows<D>(ka, kh, ld, va, vh, ld, j_lo, in_lo, in_hi, t);
  float dka[D / 8][4], dva[D / 8][4];
#pragma unroll
  for (int dt = 0; dt < D / 8; ++dt)
#pragma unroll
    for (int r = 0; r < 4; ++r) dka[dt][r] = dva[dt][r] = 0.0f;
  const int tiles = (seq + kTile - 1) / kTile;
  for (int it = kb; it < tiles; ++it) {
    __syncthreads();
    load_tile<D>(qh, ld, static_cast<std::int64_t>(it) * kTile, seq, qs, qt_s);
    load_tile<D>(doh, ldo, static_cast<std::int64_t>(it) * kTile, seq, ds, dt_s);
    for (int r = threadIdx.x; r < kTile; r += kThreads) {
      const int i = it * kTile + r;
      lse_s[r] = i < seq ? lh[i] : 0.0f;
      del_s[r] = i < seq ? dh[i] : 0.0f;
    }
    __syncthreads();
    float p[kTile / 8][4], dp[kTile / 8][4];
    tile_products<D>(p, ka, qs, dp, va, ds, g, t);
#pragma unroll
    for (int nt = 0; nt < kTile / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {  // p := P^T, dp := dS^T (unscaled), zero where masked
        const int c = nt * 8 + 2 * t + e, i = it * kTile + c;
        const float pl = (i >= j_lo && i < seq) ? __expf(p[nt][e] * scale - lse_s[c]) : 0.0f;
        const float ph = (i >= j_hi && i < seq) ? __expf(p[nt][2 + e] * scale - lse_s[c]) : 0.0f;
        p[nt][e] = pl;
        p[nt][2 + e] = ph;
        dp[nt][e] = pl * (dp[nt][e] - del_s[c]);
        dp[nt][2 + e] = ph * (dp[nt][2 + e] - del_s[c]);
      }
    }
    accumulate_products<D>({AccumulateTerm{dva, p, dt_s}, AccumulateTerm{dka, dp, qt_s}}, g, t);
  }
  store_rows<D>(dka, scale, scale, in_lo ? dk + (base + j_lo) * ld + a * D : nullptr,
                in_hi ? dk + (base + j_hi) * ld + a * D : nullptr, t);
  store_rows<D>(dva, 1.0f, 1.0f, in_lo ? dv + (base + j_lo) * ld + a * D : nullptr,
                in_hi ? dv + (base + j_hi) * ld + a * D : nullptr, t);
}

// Launches kernel with `bytes` of dynamic shared memory, raising the kernel's limit past the
// default 48 KiB where needed (once per kernel).
template <typename Kernel, typename... Args>
void launch(Kernel kernel, dim3 grid, int bytes, cudaStream_t s, Args... args) {
  if (bytes > 48 * 1024)
    TP_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  kernel<<<grid, kThreads, bytes, s>>>(args...);
}

// Calls f(std::integral_constant<int, D>) for the head dims compiled here.
template <typename F>
void dispatch_hd(std::int64_t hd, F&& f) {
  switch (hd) {
    case 16: f(std::integral_constant<int, 16>{}); break;
    case 32: f(std::integral_constant<int, 32>{}); break;
    case 64: f(std::integral_constant<int, 64>{}); break;
    case 80: f(std::integral_constant<int, 80>{}); break;
    case 96: f(std::integral_constant<int, 96>{}); break;
    case 128: f(std::integral_constant<int, 128>{}); break;
    default: throw CudaError("flash attention: head_dim " + std::to_string(hd) + " not compiled");
  }
}

bool head_dim_compiled(std::int64_t hd) {
  return hd == 16 || hd == 32 || hd == 64 || hd == 80 || hd == 96 || hd == 128;
}

dim3 grid_of(std::int64_t batch, std::int64_t seq, std::int64_t heads) {
  if (batch * heads > 65535 || seq > (std::int64_t{1} << 30))
    throw CudaError("flash attention: batch * heads = " + std::to_string(batch * heads) +
                    " exceeds the grid's y limit 65535");
  return dim3(static_cast<unsigned>((seq + kTile - 1) / kTile),
              static_cast<unsigned>(batch * heads));
}

}  // namespace

bool flash_attention_supported(std::int64_t hd, std::int64_t ld) {
  if (!head_dim_compiled(hd) || ld % 8 != 0) return false;
  int device = 0, major = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess)
    return false;
  return major >= 8;
}

void flash_attention_forward(const bf16* q, const bf16* k, const bf16* v, std::int64_t ld,
                             bf16* out, float* lse, std::int64_t batch, std::int64_t seq,
                             std::int64_t heads, std::int64_t hd, cudaStream_t s) {
  if (!flash_attention_supported(hd, ld))
    throw CudaError("flash attention: head_dim " + std::to_string(hd) + " with row stride " +
                    std::to_string(ld) + " is not supported here");
  const dim3 grid = grid_of(batch, seq, heads);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  dispatch_hd(hd, [&](auto d) {
    constexpr int kD = decltype(d)::value;
    launch(flash_forward_kernel<kD>, grid, row_bytes<kD>() + col_bytes<kD>(), s, q, k, v, ld,
           out, lse, static_cast<int>(seq), static_cast<int>(heads), scale);
  });
  TP_LAUNCH_CHECK(flash_forward_kernel);
}

void flash_attention_backward(const bf16* q, const bf16* k, const bf16* v, std::int64_t ld,
                              const bf16* out, const bf16* dout, const float* lse, float* delta,
                              bf16* dq, bf16* dk, bf16* dv, std::int64_t batch, std::int64_t seq,
                              std::int64_t heads, std::int64_t hd, cudaStream_t s) {
  if (!flash_attention_supported(hd, ld))
    throw CudaError("flash attention: head_dim " + std::to_string(hd) + " with row stride " +
                    std::to_string(ld) + " is not supported here");
  const dim3 grid = grid_of(batch, seq, heads);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  attention_delta(out, dout, delta, batch, seq, heads, hd, s);
  const int n = static_cast<int>(seq), h = static_cast<int>(heads);
  dispatch_hd(hd, [&](auto d) {
    constexpr int kD = decltype(d)::value;
    launch(flash_dkv_kernel<kD>, grid, 2 * row_bytes<kD>() + 2 * col_bytes<kD>() +
               2 * kTile * static_cast<int>(sizeof(float)), s,
           q, k, v, ld, dout, lse, static_cast<const float*>(delta), dk, dv, n, h, scale);
    TP_LAUNCH_CHECK(flash_dkv_kernel);
    launch(flash_dq_kernel<kD>, grid, 2 * row_bytes<kD>() + col_bytes<kD>(), s, q, k, v, ld,
           dout, lse, static_cast<const float*>(delta), dq, n, h, scale);
    TP_LAUNCH_CHECK(flash_dq_kernel);
  });
}

}  // namespace trainplan::executor::cuda
