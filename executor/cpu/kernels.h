// The executor's CPU math: float32, Eigen, one thread per rank unless set_math_threads() says
// otherwise (matrix products only). Each kernel has a forward and a
// hand-written backward; tests/executor/cpu/kernels_test.cc checks every backward against central
// finite differences (in double) and the attention against a naive reference.
//
// Activations are row-major (tokens, features); tokens are micro-batch sequences one after
// another (b, s). Backward functions ACCUMULATE into parameter gradients (+=) and WRITE the
// input gradient.
#pragma once

#include <Eigen/Dense>
#include <cstdint>
#include <vector>

#include "executor/params.h"

namespace trainplan::executor {

using Mat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Vec = Eigen::VectorXf;
using MatMap = Eigen::Map<Mat>;
using ConstMatMap = Eigen::Map<const Mat>;
using RowMap = Eigen::Map<Eigen::RowVectorXf>;
using ConstRowMap = Eigen::Map<const Eigen::RowVectorXf>;
// A view of a whole matrix or of a block of rows of one (Eigen::Ref: binds to a Mat or a Map
// without a copy), for the kernels whose callers pass either.
using ConstMatRef = Eigen::Ref<const Mat>;

inline constexpr float kLayerNormEps = 1e-5f;

// Threads per rank for the matrix products (Eigen::setNbThreads): Eigen splits a GEMM's blocks
// over OpenMP threads; the element-wise kernels stay on one. The library starts at 1, not at
// OpenMP's default of every core, because several ranks usually share a machine. threads >= 1
// (the caller validates it). Process-wide, like Eigen's own setting.
void set_math_threads(int threads);
int math_threads();

// Outputs are written into buffers the caller has shaped (a cache matrix, a slice of the
// stage model's scratch arena: workspace.h); a kernel never allocates. Inputs and outputs are
// Eigen::Ref views, which bind to a Mat or a Map without a copy.
using MatRef = Eigen::Ref<Mat>;
using VecRef = Eigen::Ref<Vec>;
using ConstVecRef = Eigen::Ref<const Vec>;

// y = (x - mean) / sqrt(var + eps) * gamma + beta, per row. mean, rstd (rows) kept for backward.
void layernorm_forward(const ConstMatRef& x, const float* gamma, const float* beta, MatRef y,
                       VecRef mean, VecRef rstd);
// `workspace`: 2 * layernorm_workspace_floats(h) floats for two rows of h (the normalised row
// and its gradient), aligned as ScratchArena's slices.
void layernorm_backward(const ConstMatRef& dy, const ConstMatRef& x, const float* gamma,
                        const ConstVecRef& mean, const ConstVecRef& rstd, MatRef dx,
                        float* dgamma, float* dbeta, float* workspace);
// The floats of one of layernorm_backward's two workspace rows: h rounded up to 16 (64 bytes).
inline std::int64_t layernorm_workspace_floats(std::int64_t h) { return (h + 15) / 16 * 16; }

// GELU, tanh approximation (Hendrycks & Gimpel 2016, as GPT-2).
void gelu_forward(const ConstMatRef& x, MatRef y);
void gelu_backward(const ConstMatRef& x, const ConstMatRef& dy, MatRef dx);

// y = x W + b with W (in, out) and b (out) (b may be null).
void linear_forward(const ConstMatRef& x, const ConstMatMap& w, const float* b, MatRef y);
// dx = dy W^T (skipped when dx is null), dW += x^T dy, db += column sums of dy.
void linear_backward(const ConstMatRef& x, const ConstMatMap& w, const ConstMatRef& dy, Mat* dx,
                     MatMap& dw, float* db);
// linear_backward's two products on their own (calibrate times each): dx = dy W^T, and
// dW += x^T dy.
void linear_input_gradient(const ConstMatMap& w, const ConstMatRef& dy, MatRef dx);
void linear_weight_gradient(const ConstMatRef& x, const ConstMatRef& dy, MatMap& dw);

// The same three on rows of larger buffers: an MoE layer's experts, whose row counts follow
// the routing, work in buffers sized once for the most rows they can receive (moe.cc). The
// element-wise kernels treat their rows as one run of elements; gelu_backward_rows keeps its
// tanh in fixed-size chunks on the stack.
void gelu_forward_rows(const ConstMatMap& x, MatMap y);
void gelu_backward_rows(const ConstMatMap& x, const ConstMatMap& dy, MatMap dx);
void linear_forward_rows(const ConstMatMap& x, const ConstMatMap& w, const float* b, MatMap y);

// Causal multi-head attention over `batch` sequences of `seq` tokens: q, k, v (batch*seq,
// heads*head_dim), out (batch*seq, heads*head_dim); probs (batch*heads*seq, seq) keeps the
// softmax rows for the backward (recompute it with the same call under selective recompute).
// These two allocate their positions list and the backward's workspace: for tests.
void attention_forward(const ConstMatRef& q, const ConstMatRef& k, const ConstMatRef& v,
                       std::int64_t batch, std::int64_t seq, std::int64_t heads, MatRef probs,
                       MatRef out);
void attention_backward(const ConstMatRef& q, const ConstMatRef& k, const ConstMatRef& v,
                        const ConstMatRef& probs, const ConstMatRef& dout, std::int64_t batch,
                        std::int64_t seq, std::int64_t heads, MatRef dq, MatRef dk, MatRef dv);

// The same with queries that are a subset of each sequence (context parallelism): q (batch*sq,
// heads*head_dim) are the tokens at `q_positions` (sq of them, the same in every sequence) of
// sequences whose keys and values k, v (batch*sk, ...) are all sk tokens in order; query i
// attends to the keys at positions 0..q_positions[i]. probs is (batch*heads*sq, sk); dk and dv
// are the gradients of all sk keys and values, to be summed over the ranks that share them.
// `workspace` (sq, sk): one head's score gradients.
void attention_forward(const ConstMatRef& q, const ConstMatRef& k, const ConstMatRef& v,
                       std::int64_t batch, const std::vector<std::int64_t>& q_positions,
                       std::int64_t heads, MatRef probs, MatRef out);
void attention_backward(const ConstMatRef& q, const ConstMatRef& k, const ConstMatRef& v,
                        const ConstMatRef& probs, const ConstMatRef& dout, std::int64_t batch,
                        const std::vector<std::int64_t>& q_positions, std::int64_t heads,
                        MatRef dq, MatRef dk, MatRef dv, MatRef workspace);

// AdamW (Loshchilov & Hutter 2019; its settings: executor/params.h) over n elements, with
// decoupled weight decay if `decay` (a run of one tensor's elements, or of tensors that are all
// decayed or all not).
void adamw_update(const AdamW& opt, std::int64_t step, std::int64_t n, float* param,
                  const float* grad, float* m, float* v, bool decay);

}  // namespace trainplan::executor
