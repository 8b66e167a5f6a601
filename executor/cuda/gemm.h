// Row-major GEMMs on cuBLASLt: bf16 operands, float32 accumulation (CUBLAS_COMPUTE_32F), bf16 or
// float32 output, optional bias epilogue. Row-major C = op(A) op(B) is computed as the
// column-major C^T = op(B)^T op(A)^T, so no data is transposed. The algorithm of each shape is
// chosen once by cuBLASLt's heuristic and cached.
//
// Tested by tests/executor/cuda/kernels_test.cc (against executor::linear_forward/backward).
#pragma once

#include <cstdint>
#include <map>
#include <tuple>

#include "executor/cuda/device.h"

namespace trainplan::executor::cuda {

struct GemmArgs {
  bool trans_a = false, trans_b = false;  // op(A) = A^T, op(B) = B^T
  std::int64_t m = 0, n = 0, k = 0;       // C (m, n) = op(A) (m, k) * op(B) (k, n)
  const bf16* a = nullptr;
  std::int64_t lda = 0;                   // row stride of A as stored
  const bf16* b = nullptr;
  std::int64_t ldb = 0;
  void* c = nullptr;                      // bf16 or float (c_fp32)
  std::int64_t ldc = 0;
  bool c_fp32 = false;
  float alpha = 1.0f, beta = 0.0f;        // beta = 1 accumulates (parameter gradients)
  const bf16* bias = nullptr;             // (n) added to every row; bf16 output only
  // Strided batch: `batch` products, operand i at a + i * stride_a (elements), etc. A stride of 0
  // shares the operand across the batch; stride_bias steps the bias vector.
  std::int64_t batch = 1, stride_a = 0, stride_b = 0, stride_c = 0, stride_bias = 0;
};

class Gemm {
 public:
  Gemm();
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  void run(const GemmArgs& g, cudaStream_t stream);

  // Convenience forms of the three products of a linear layer y = x W (+ b), W (in, out):
  // y (rows, out) = x (rows, in) W (+ b)
  void linear_forward(const bf16* x, const bf16* w, const bf16* b, bf16* y, std::int64_t rows,
                      std::int64_t in, std::int64_t out, cudaStream_t stream);
  // dx (rows, in) = dy (rows, out) W^T; accumulate = true adds into dx (float32 not needed)
  void linear_dgrad(const bf16* dy, const bf16* w, bf16* dx, std::int64_t rows, std::int64_t in,
                    std::int64_t out, bool accumulate, cudaStream_t stream);
  // dW (in, out, float32) += x^T dy
  void linear_wgrad(const bf16* x, const bf16* dy, float* dw, std::int64_t rows, std::int64_t in,
                    std::int64_t out, cudaStream_t stream);

  // `batch` linear layers of one shape on one input, in one launch: for i < batch,
  // y_i = x W_i (+ b_i) with W_i = w + i * w_stride, b_i = b + i * w_stride, y_i = y + i * y_stride
  // (elements), and dW_i += x^T dy_i with dy_i = dy + i * y_stride, dW_i = dw + i * w_stride.
  // The q, k and v projections: BlockLayout keeps W_q, b_q, W_k, b_k, W_v, b_v at one stride,
  // and the cost model's qkv task is one product of 3 q_width columns.
  void linear_forward_shared_input(const bf16* x, const bf16* w, const bf16* b,
                                   std::int64_t w_stride, bf16* y, std::int64_t y_stride,
                                   std::int64_t batch, std::int64_t rows, std::int64_t in,
                                   std::int64_t out, cudaStream_t stream);
  void linear_wgrad_shared_input(const bf16* x, const bf16* dy, std::int64_t y_stride, float* dw,
                                 std::int64_t w_stride, std::int64_t batch, std::int64_t rows,
                                 std::int64_t in, std::int64_t out, cudaStream_t stream);

 private:
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  std::size_t workspace_bytes_ = 0;
  using Key = std::tuple<bool, bool, std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                         std::int64_t, std::int64_t, bool, bool, bool, int, std::int64_t, std::int64_t,
                         std::int64_t, std::int64_t, std::int64_t>;
  std::map<Key, cublasLtMatmulAlgo_t> algos_;
};

}  // namespace trainplan::executor::cuda
