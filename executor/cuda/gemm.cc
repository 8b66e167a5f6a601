// cuBLASLt GEMMs; see gemm.h.
#include "executor/cuda/gemm.h"

#include <memory>

namespace trainplan::executor::cuda {

namespace {

constexpr std::size_t kWorkspaceBytes = 32u << 20;  // cuBLAS's recommendation for Hopper

// Largest power of two (<= 16) dividing the address: the alignment cuBLASLt may assume.
int alignment_bytes(const void* p) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  int al = 16;
  while (al > 1 && a % static_cast<std::uintptr_t>(al) != 0) al /= 2;
  return al;
}

struct Descs {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~Descs() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

}  // namespace

Gemm::Gemm() {
  TP_CUBLAS(cublasLtCreate(&handle_));
  TP_CUDA(cudaMalloc(&workspace_, kWorkspaceBytes));
  workspace_bytes_ = kWorkspaceBytes;
}

Gemm::~Gemm() {
  if (workspace_ != nullptr) cudaFree(workspace_);
  if (handle_ != nullptr) cublasLtDestroy(handle_);
}

void Gemm::run(const GemmArgs& g, cudaStream_t stream) {
  if (g.m == 0 || g.n == 0) return;
  if (g.bias != nullptr && g.c_fp32)
    throw CudaError("Gemm::run: the bias epilogue is only used with a bf16 output");
  // Column-major: D (n, m) = X (n, k) * Y (k, m), X = op(B)^T from B, Y = op(A)^T from A.
  Descs d;
  const cudaDataType_t c_type = g.c_fp32 ? CUDA_R_32F : CUDA_R_16BF;
  TP_CUBLAS(cublasLtMatmulDescCreate(&d.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t op_x = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_y = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  TP_CUBLAS(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSA, &op_x, sizeof(op_x)));
  TP_CUBLAS(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSB, &op_y, sizeof(op_y)));
  if (g.bias != nullptr) {
    const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    TP_CUBLAS(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
    TP_CUBLAS(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g.bias,
                                             sizeof(g.bias)));
    if (g.batch > 1 && g.stride_bias != 0) {
      const std::int64_t stride = g.stride_bias;
      TP_CUBLAS(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE,
                                               &stride, sizeof(stride)));
    }
  }
  // Stored shapes in column-major terms: B as stored is (ldb-strided) rows of B.
  const std::uint64_t x_rows = g.trans_b ? g.k : g.n, x_cols = g.trans_b ? g.n : g.k;
  const std::uint64_t y_rows = g.trans_a ? g.m : g.k, y_cols = g.trans_a ? g.k : g.m;
  TP_CUBLAS(cublasLtMatrixLayoutCreate(&d.a, CUDA_R_16BF, x_rows, x_cols, g.ldb));
  TP_CUBLAS(cublasLtMatrixLayoutCreate(&d.b, CUDA_R_16BF, y_rows, y_cols, g.lda));
  TP_CUBLAS(cublasLtMatrixLayoutCreate(&d.c, c_type, static_cast<std::uint64_t>(g.n),
                                       static_cast<std::uint64_t>(g.m), g.ldc));
  if (g.batch > 1) {
    const std::int32_t count = static_cast<std::int32_t>(g.batch);
    auto batched = [&](cublasLtMatrixLayout_t l, std::int64_t stride) {
      TP_CUBLAS(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                                 sizeof(count)));
      TP_CUBLAS(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                 &stride, sizeof(stride)));
    };
    batched(d.a, g.stride_b);  // the column-major A is our B, and the other way round
    batched(d.b, g.stride_a);
    batched(d.c, g.stride_c);
  }

  const int al_a = alignment_bytes(g.b), al_b = alignment_bytes(g.a),
            al_c = alignment_bytes(g.c);
  const Key key{g.trans_a, g.trans_b, g.m, g.n, g.k, g.lda, g.ldb, g.ldc, g.c_fp32,
                g.bias != nullptr, g.beta != 0.0f, al_a * 10000 + al_b * 100 + al_c,
                g.batch, g.stride_a, g.stride_b, g.stride_c, g.stride_bias};
  auto it = algos_.find(key);
  if (it == algos_.end()) {
    TP_CUBLAS(cublasLtMatmulPreferenceCreate(&d.pref));
    TP_CUBLAS(cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                   &workspace_bytes_, sizeof(workspace_bytes_)));
    const std::uint32_t ua = static_cast<std::uint32_t>(al_a), ub = static_cast<std::uint32_t>(al_b),
                        uc = static_cast<std::uint32_t>(al_c);
    TP_CUBLAS(cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &ua, sizeof(ua)));
    TP_CUBLAS(cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &ub, sizeof(ub)));
    TP_CUBLAS(cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &uc, sizeof(uc)));
    TP_CUBLAS(cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &uc, sizeof(uc)));
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    TP_CUBLAS(cublasLtMatmulAlgoGetHeuristic(handle_, d.op, d.a, d.b, d.c, d.c, d.pref, 1, &result,
                                             &found));
    if (found == 0)
      throw CudaError("cuBLASLt has no algorithm for a " + std::to_string(g.m) + "x" +
                      std::to_string(g.n) + "x" + std::to_string(g.k) + " bf16 GEMM");
    it = algos_.emplace(key, result.algo).first;
  }
  TP_CUBLAS(cublasLtMatmul(handle_, d.op, &g.alpha, g.b, d.a, g.a, d.b, &g.beta, g.c, d.c, g.c,
                           d.c, &it->second, workspace_, workspace_bytes_, stream));
}

void Gemm::linear_forward(const bf16* x, const bf16* w, const bf16* b, bf16* y,
                          std::int64_t rows, std::int64_t in, std::int64_t out,
                          cudaStream_t stream) {
  linear_forward_shared_input(x, w, b, 0, y, 0, 1, rows, in, out, stream);
}

void Gemm::linear_dgrad(const bf16* dy, const bf16* w, bf16* dx, std::int64_t rows,
                        std::int64_t in, std::int64_t out, bool accumulate,
                        cudaStream_t stream) {
  GemmArgs g;
  g.trans_b = true;
  g.m = rows; g.n = in; g.k = out;
  g.a = dy; g.lda = out;
  g.b = w; g.ldb = out;  // W stored (in, out): W^T is (out, in)
  g.c = dx; g.ldc = in;
  g.beta = accumulate ? 1.0f : 0.0f;
  run(g, stream);
}

void Gemm::linear_wgrad(const bf16* x, const bf16* dy, float* dw, std::int64_t rows,
                        std::int64_t in, std::int64_t out, cudaStream_t stream) {
  linear_wgrad_shared_input(x, dy, 0, dw, 0, 1, rows, in, out, stream);
}

void Gemm::linear_forward_shared_input(const bf16* x, const bf16* w, const bf16* b,
                                       std::int64_t w_stride, bf16* y, std::int64_t y_stride,
                                       std::int64_t batch, std::int64_t rows, std::int64_t in,
                                       std::int64_t out, cudaStream_t stream) {
  GemmArgs g;
  g.m = rows; g.n = out; g.k = in;
  g.a = x; g.lda = in;
  g.b = w; g.ldb = out;
  g.c = y; g.ldc = out;
  g.bias = b;
  g.batch = batch;
  g.stride_a = 0;  // x shared by every product
  g.stride_b = w_stride;
  g.stride_c = y_stride;
  g.stride_bias = b != nullptr ? w_stride : 0;
  run(g, stream);
}

void Gemm::linear_wgrad_shared_input(const bf16* x, const bf16* dy, std::int64_t y_stride,
                                     float* dw, std::int64_t w_stride, std::int64_t batch,
                                     std::int64_t rows, std::int64_t in, std::int64_t out,
                                     cudaStream_t stream) {
  GemmArgs g;
  g.trans_a = true;
  g.m = in; g.n = out; g.k = rows;
  g.a = x; g.lda = in;
  g.b = dy; g.ldb = out;
  g.c = dw; g.ldc = out;
  g.c_fp32 = true;
  g.beta = 1.0f;
  g.batch = batch;
  g.stride_a = 0;
  g.stride_b = y_stride;
  g.stride_c = w_stride;
  run(g, stream);
}

}  // namespace trainplan::executor::cuda
