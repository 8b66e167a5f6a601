// Every CUDA kernel (executor/cuda/kernels.h, gemm.h) against the CPU kernel of
// executor/cpu/kernels.h on the same inputs. Skips without a GPU.
// Run: build-cuda/tests/executor/cuda/executor_cuda_kernels_test
//
// Tolerances, as ||gpu - cpu|| / ||cpu|| over the whole tensor. Inputs are drawn as bf16 values,
// so both sides start from identical numbers; the CPU computes in float32. The GPU also
// computes in float32 but stores activations as bf16, whose rounding is at most 2^-9 = 1.95e-3
// relative per element (about 1.1e-3 RMS for uniformly distributed rounding errors):
//  - kOneRounding = 4e-3: an output rounded once to bf16 (norms, GELU, casts, embeddings,
//    GEMMs: float32 accumulation over k <= 100 adds well under 1e-4).
//  - kTwoRoundings = 1e-2: outputs computed from another bf16-rounded intermediate (attention
//    backward reads the bf16 output and recomputes probabilities; LayerNorm dx; cross-entropy
//    gradient from bf16 logits), i.e. two or three roundings compounding.
//  - float32 parameter gradients (dgamma, dW, dwte, AdamW state) accumulate in float32 from
//    bf16 inputs: kOneRounding, and AdamW, pure float32 on both sides, 1e-6.
// A NaN anywhere fails (rel_l2 returns infinity), and outputs are poisoned before each launch.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include "executor/cuda/gemm.h"
#include "executor/cuda/kernels.h"
#include "executor/cpu/kernels.h"
#include "gpu_test_util.h"

namespace trainplan::executor::cuda {
namespace {

using testing::download;
using testing::poison;
using testing::random_bf16;
using testing::rel_l2;
using testing::upload_bf16;
using testing::upload_f32;

constexpr double kOneRounding = 4e-3;
constexpr double kTwoRoundings = 1e-2;

Mat to_mat(const std::vector<float>& v, std::int64_t rows, std::int64_t cols) {
  return Eigen::Map<const Mat>(v.data(), rows, cols);
}
std::vector<float> from_mat(const Mat& m) { return std::vector<float>(m.data(), m.data() + m.size()); }

TEST(CudaKernels, CastRoundTripIsExactForBf16Values) {
  TRAINPLAN_REQUIRE_GPU();
  const auto x = random_bf16(1001, 1);
  auto d32 = upload_f32(x);
  DeviceBuffer<bf16> d16(1001);
  DeviceBuffer<float> back(1001);
  poison(back);
  cast_f32_to_bf16(d32.data(), d16.data(), 1001, nullptr);
  cast_bf16_to_f32(d16.data(), back.data(), 1001, nullptr);
  EXPECT_EQ(download(back), x);
}

TEST(CudaKernels, LayerNormMatchesCpu) {
  TRAINPLAN_REQUIRE_GPU();
  const std::int64_t rows = 37, h = 200;
  const auto x = random_bf16(rows * h, 2, 2.0f), dy = random_bf16(rows * h, 3);
  const auto gamma = random_bf16(h, 4), beta = random_bf16(h, 5);
  // The CPU kernels write into buffers the caller has shaped (executor/cpu/kernels.h).
  Mat y(rows, h), dx(rows, h);
  Vec mean(rows), rstd(rows);
  std::vector<float> workspace(static_cast<std::size_t>(2 * executor::layernorm_workspace_floats(h)));
  executor::layernorm_forward(to_mat(x, rows, h), gamma.data(), beta.data(), y, mean, rstd);
  std::vector<float> dg(h, 0.5f), db(h, -0.25f);  // backward accumulates: start non-zero
  std::vector<float> dg_ref = dg, db_ref = db;
  executor::layernorm_backward(to_mat(dy, rows, h), to_mat(x, rows, h), gamma.data(), mean, rstd, dx,
                     dg_ref.data(), db_ref.data(), workspace.data());

  auto dx_d = upload_bf16(x), gamma_d = upload_bf16(gamma), beta_d = upload_bf16(beta);
  auto dy_d = upload_bf16(dy);
  auto dg_d = upload_f32(dg), db_d = upload_f32(db);
  DeviceBuffer<bf16> y_d(rows * h), dxo_d(rows * h);
  DeviceBuffer<float> mean_d(rows), rstd_d(rows);
  poison(y_d);
  poison(dxo_d);
  layernorm_forward(dx_d.data(), gamma_d.data(), beta_d.data(), y_d.data(), mean_d.data(),
                    rstd_d.data(), rows, h, nullptr);
  layernorm_backward(dy_d.data(), dx_d.data(), gamma_d.data(), mean_d.data(), rstd_d.data(),
                     dxo_d.data(), dg_d.data(), db_d.data(), rows, h, nullptr);
  EXPECT_LT(rel_l2(download(y_d), from_mat(y)), kOneRounding);
  EXPECT_LT(rel_l2(download(mean_d), mean.data(), rows), 1e-5);
  EXPECT_LT(rel_l2(download(rstd_d), rstd.data(), rows), 1e-5);
  EXPECT_LT(rel_l2(download(dxo_d), from_mat(dx)), kTwoRoundings);
  EXPECT_LT(rel_l2(download(dg_d), dg_ref), kOneRounding);
  EXPECT_LT(rel_l2(download(db_d), db_ref), kOneRounding);
}

TEST(CudaKernels, GeluMatchesCpu) {
  TRAINPLAN_REQUIRE_GPU();
  const std::int64_t n = 4099;
  const auto x = random_bf16(n, 6, 3.0f), dy = random_bf16(n, 7);
  Mat y(1, n), dx(1, n);
  executor::gelu_forward(to_mat(x, 1, n), y);
  executor::gelu_backward(to_mat(x, 1, n), to_mat(dy, 1, n), dx);
  auto x_d = upload_bf16(x), dy_d = upload_bf16(dy);
  DeviceBuffer<bf16> y_d(n), dx_d(n);
  poison(y_d);
  poison(dx_d);
  gelu_forward(x_d.data(), y_d.data(), n, nullptr);
  gelu_backward(x_d.data(), dy_d.data(), dx_d.data(), n, nullptr);
  EXPECT_LT(rel_l2(download(y_d), from_mat(y)), kOneRounding);
  EXPECT_LT(rel_l2(download(dx_d), from_mat(dx)), kOneRounding);
}

TEST(CudaKernels, LinearForwardAndBackwardMatchCpu) {
  TRAINPLAN_REQUIRE_GPU();
  const std::int64_t rows = 40, in = 72, out = 48;
  const auto x = random_bf16(rows * in, 8), w = random_bf16(in * out, 9, 0.2f);
  const auto b = random_bf16(out, 10), dy = random_bf16(rows * out, 11);
  const auto dw0 = random_bf16(in * out, 12), db0 = random_bf16(out, 13);
  Mat y(rows, out), dx;
  executor::linear_forward(to_mat(x, rows, in), ConstMatMap(w.data(), in, out), b.data(), y);
  std::vector<float> dw_ref = dw0, db_ref = db0;
  MatMap dw_map(dw_ref.data(), in, out);
  executor::linear_backward(to_mat(x, rows, in), ConstMatMap(w.data(), in, out), to_mat(dy, rows, out), &dx,
                  dw_map, db_ref.data());

  Gemm gemm;
  auto x_d = upload_bf16(x), w_d = upload_bf16(w), b_d = upload_bf16(b), dy_d = upload_bf16(dy);
  auto dw_d = upload_f32(dw0), db_d = upload_f32(db0);
  DeviceBuffer<bf16> y_d(rows * out), dx_d(rows * in);
  poison(y_d);
  poison(dx_d);
  gemm.linear_forward(x_d.data(), w_d.data(), b_d.data(), y_d.data(), rows, in, out, nullptr);
  gemm.linear_dgrad(dy_d.data(), w_d.data(), dx_d.data(), rows, in, out, false, nullptr);
  gemm.linear_wgrad(x_d.data(), dy_d.data(), dw_d.data(), rows, in, out, nullptr);
  bias_backward(dy_d.data(), db_d.data(), rows, out, nullptr);
  EXPECT_LT(rel_l2(download(y_d), from_mat(y)), kOneRounding);
  EXPECT_LT(rel_l2(download(dx_d), from_mat(dx)), kOneRounding);
  EXPECT_LT(rel_l2(download(dw_d), dw_ref), kOneRounding);
  EXPECT_LT(rel_l2(download(db_d), db_ref), kOneRounding);
  // Accumulating dgrad (beta = 1): dx + dy W^T again is twice dx.
  gemm.linear_dgrad(dy_d.data(), w_d.data(), dx_d.data(), rows, in, out, true, nullptr);
  Mat twice = dx * 2.0f;
  EXPECT_LT(rel_l2(download(dx_d), from_mat(twice)), kTwoRoundings);
}

// Three linear layers of one shape on one input in one launch, as the stage model runs q, k and
// v: weight and bias i at a constant stride (W, b, W, b, W, b, as BlockLayout packs them), the
// input shared (batch stride 0), each output and weight gradient against the CPU's.
TEST(CudaKernels, SharedInputBatchedLinearMatchesCpuPerLayer) {
  TRAINPLAN_REQUIRE_GPU();
  const std::int64_t rows = 40, in = 72, out = 48, batch = 3, stride = in * out + out;
  const auto x = random_bf16(rows * in, 40), packed = random_bf16(batch * stride, 41, 0.2f);
  const auto dy = random_bf16(batch * rows * out, 42);
  const auto dw0 = random_bf16(batch * stride, 43);
  Gemm gemm;
  auto x_d = upload_bf16(x), p_d = upload_bf16(packed), dy_d = upload_bf16(dy);
  auto dw_d = upload_f32(dw0);
  DeviceBuffer<bf16> y_d(batch * rows * out);
  poison(y_d);
  gemm.linear_forward_shared_input(x_d.data(), p_d.data(), p_d.data() + in * out, stride,
                                   y_d.data(), rows * out, batch, rows, in, out, nullptr);
  gemm.linear_wgrad_shared_input(x_d.data(), dy_d.data(), rows * out, dw_d.data(), stride, batch,
                                 rows, in, out, nullptr);
  const auto y = download(y_d), dw = download(dw_d);
  for (std::int64_t i = 0; i < batch; ++i) {
    const float* w = packed.data() + i * stride;
    Mat y_ref(rows, out), dx;
    executor::linear_forward(to_mat(x, rows, in), ConstMatMap(w, in, out), w + in * out, y_ref);
    std::vector<float> dw_ref(dw0.begin() + i * stride, dw0.begin() + i * stride + in * out);
    std::vector<float> db_unused(out, 0.0f);
    MatMap dw_map(dw_ref.data(), in, out);
    const std::vector<float> dy_i(dy.begin() + i * rows * out, dy.begin() + (i + 1) * rows * out);
    executor::linear_backward(to_mat(x, rows, in), ConstMatMap(w, in, out),
                              to_mat(dy_i, rows, out), &dx, dw_map, db_unused.data());
    const std::vector<float> y_i(y.begin() + i * rows * out, y.begin() + (i + 1) * rows * out);
    const std::vector<float> dw_i(dw.begin() + i * stride, dw.begin() + i * stride + in * out);
    EXPECT_LT(rel_l2(y_i, from_mat(y_ref)), kOneRounding) << "layer " << i;
    EXPECT_LT(rel_l2(dw_i, dw_ref), kOneRounding) << "layer " << i;
    // The bias slots between the weights are not written by the weight-gradient product.
    for (std::int64_t j = 0; j < out; ++j)
      EXPECT_EQ(dw[i * stride + in * out + j], dw0[i * stride + in * out + j]) << "layer " << i;
  }
}

// The three implementations (the fused CUDA-core kernels; the tensor-core path through
// batched cuBLASLt GEMMs; the FlashAttention-2 tiles of flash_attention.cu) at head_dim 16,
// 64 (GPT-2), 80 and 128, and seq 70 (one partial 64-row tile, rows not a multiple of 8) and
// 200 (four tiles, the last partial, so the causal mask, the online softmax's rescaling across
// tiles and the backward's loops over tiles all run).
using AttentionCase = std::tuple<std::int64_t, std::int64_t, AttentionImpl>;
}  // namespace
// gtest prints the implementation by name in a failing case's parameters.
void PrintTo(AttentionImpl impl, std::ostream* os) { *os << attention_impl_name(impl); }
namespace {
class CudaAttention : public ::testing::TestWithParam<AttentionCase> {};

TEST_P(CudaAttention, ForwardAndBackwardMatchCpu) {
  TRAINPLAN_REQUIRE_GPU();
  const auto [hd, seq, impl] = GetParam();
  const std::int64_t batch = 2, heads = 3, w = heads * hd;
  if (impl == AttentionImpl::kFlash && !flash_attention_supported(hd, w))
    GTEST_SKIP() << "flash attention needs sm_80 or later";
  Gemm gemm;
  const std::int64_t rows = batch * seq;
  const auto q = random_bf16(rows * w, 20), k = random_bf16(rows * w, 21);
  const auto v = random_bf16(rows * w, 22), dout = random_bf16(rows * w, 23);
  Mat probs(batch * heads * seq, seq), out(rows, w), dq(rows, w), dk(rows, w), dv(rows, w);
  executor::attention_forward(to_mat(q, rows, w), to_mat(k, rows, w), to_mat(v, rows, w), batch, seq, heads,
                    probs, out);
  executor::attention_backward(to_mat(q, rows, w), to_mat(k, rows, w), to_mat(v, rows, w), probs,
                     to_mat(dout, rows, w), batch, seq, heads, dq, dk, dv);

  auto q_d = upload_bf16(q), k_d = upload_bf16(k), v_d = upload_bf16(v), do_d = upload_bf16(dout);
  DeviceBuffer<bf16> out_d(rows * w), dq_d(rows * w), dk_d(rows * w), dv_d(rows * w);
  DeviceBuffer<float> lse(batch * heads * seq), delta(batch * heads * seq);
  for (auto* b : {&out_d, &dq_d, &dk_d, &dv_d}) poison(*b);
  if (impl == AttentionImpl::kFlash) {
    flash_attention_forward(q_d.data(), k_d.data(), v_d.data(), w, out_d.data(), lse.data(),
                            batch, seq, heads, hd, nullptr);
    flash_attention_backward(q_d.data(), k_d.data(), v_d.data(), w, out_d.data(), do_d.data(),
                             lse.data(), delta.data(), dq_d.data(), dk_d.data(), dv_d.data(),
                             batch, seq, heads, hd, nullptr);
  } else {
    Gemm* path = impl == AttentionImpl::kGemm ? &gemm : nullptr;
    attention_forward(q_d.data(), k_d.data(), v_d.data(), w, out_d.data(), lse.data(), batch,
                      seq, heads, hd, nullptr, path);
    attention_backward(q_d.data(), k_d.data(), v_d.data(), w, out_d.data(), do_d.data(),
                       lse.data(), delta.data(), dq_d.data(), dk_d.data(), dv_d.data(), batch,
                       seq, heads, hd, nullptr, path);
  }
  // The tensor-core paths round the probabilities to bf16 before P V: two roundings.
  const double out_tol = impl == AttentionImpl::kFused ? kOneRounding : kTwoRoundings;
  EXPECT_LT(rel_l2(download(out_d), from_mat(out)), out_tol);
  EXPECT_LT(rel_l2(download(dq_d), from_mat(dq)), kTwoRoundings);
  EXPECT_LT(rel_l2(download(dk_d), from_mat(dk)), kTwoRoundings);
  EXPECT_LT(rel_l2(download(dv_d), from_mat(dv)), kTwoRoundings);
}
INSTANTIATE_TEST_SUITE_P(
    HeadDims, CudaAttention,
    ::testing::Combine(::testing::Values<std::int64_t>(16, 64, 80, 128),
                       ::testing::Values<std::int64_t>(70, 200),
                       ::testing::Values(AttentionImpl::kFused, AttentionImpl::kGemm,
                                         AttentionImpl::kFlash)),
    [](const ::testing::TestParamInfo<AttentionCase>& p) {
      return "hd" + std::to_string(std::get<0>(p.param)) + "_seq" +
             std::to_string(std::get<1>(p.param)) + "_" +
             attention_impl_name(std::get<2>(p.param));
    });

// The stage model's choice: TRAINPLAN_CUDA_ATTENTION names the implementation; a value it does
// not know, or flash where flash cannot run, is an error naming the variable and the value.
// Runs without a GPU (flash is then unsupported, so auto falls back to gemm).
TEST(CudaAttentionChoice, EnvironmentSelectsAndRejectsWithTheValue) {
  testing::ScopedEnv env;
  env.set("TRAINPLAN_CUDA_ATTENTION", "gemm");
  EXPECT_EQ(attention_impl_from_env(64, 768), AttentionImpl::kGemm);
  env.set("TRAINPLAN_CUDA_ATTENTION", "fused");
  EXPECT_EQ(attention_impl_from_env(64, 768), AttentionImpl::kFused);
  env.set("TRAINPLAN_CUDA_ATTENTION", "auto");
  EXPECT_EQ(attention_impl_from_env(24, 72), AttentionImpl::kGemm);  // head_dim 24: no flash
  EXPECT_EQ(attention_impl_from_env(64, 768),
            flash_attention_supported(64, 768) ? AttentionImpl::kFlash : AttentionImpl::kGemm);
  env.set("TRAINPLAN_CUDA_ATTENTION", "flashy");
  try {
    attention_impl_from_env(64, 768);
    ADD_FAILURE() << "no error for an unknown value";
  } catch (const CudaError& e) {
    EXPECT_NE(std::string(e.what()).find("TRAINPLAN_CUDA_ATTENTION=flashy"), std::string::npos)
        << e.what();
  }
  env.set("TRAINPLAN_CUDA_ATTENTION", "flash");
  try {
    attention_impl_from_env(24, 72);
    ADD_FAILURE() << "no error for flash at head_dim 24";
  } catch (const CudaError& e) {
    EXPECT_NE(std::string(e.what()).find("head_dim 24"), std::string::npos) << e.what();
  }
}

TEST(CudaKernels, CrossEntropyMatchesDoubleReference) {
  TRAINPLAN_REQUIRE_GPU();
  const std::int64_t T = 19, vr = 300, valid = 290, v0 = 0;
  const auto logits = random_bf16(T * vr, 30, 3.0f);
  std::vector<std::int32_t> targets(T);
  for (std::int64_t i = 0; i < T; ++i) targets[i] = static_cast<std::int32_t>((i * 37) % valid);
  const float scale = 1.0f / static_cast<float>(T);
  // Reference in double: loss = sum log(sum exp) - l[target]; grad = (p - onehot) * scale.
  double loss_ref = 0;
  std::vector<float> grad_ref(T * vr, 0.0f);
  for (std::int64_t i = 0; i < T; ++i) {
    double mx = -1e300, s = 0;
    for (std::int64_t j = 0; j < valid; ++j) mx = std::max(mx, double(logits[i * vr + j]));
    for (std::int64_t j = 0; j < valid; ++j) s += std::exp(logits[i * vr + j] - mx);
    loss_ref += std::log(s) + mx - logits[i * vr + targets[i]];
    for (std::int64_t j = 0; j < valid; ++j)
      grad_ref[i * vr + j] = static_cast<float>(
          (std::exp(logits[i * vr + j] - mx) / s - (j == targets[i] ? 1.0 : 0.0)) * scale);
  }
  auto l_d = upload_bf16(logits);
  DeviceBuffer<std::int32_t> t_d(T);
  to_device(targets.data(), t_d.data(), T);
  DeviceBuffer<float> mx(T), se(T), tl(T);
  DeviceBuffer<double> loss(1);
  TP_CUDA(cudaMemset(loss.data(), 0, sizeof(double)));
  cross_entropy_max(l_d.data(), mx.data(), T, vr, valid, nullptr);
  cross_entropy_sum_exp(l_d.data(), mx.data(), t_d.data(), v0, se.data(), tl.data(), T, vr, valid,
                        nullptr);
  cross_entropy_loss(mx.data(), se.data(), tl.data(), loss.data(), T, nullptr);
  cross_entropy_backward(l_d.data(), mx.data(), se.data(), t_d.data(), v0, scale, T, vr, valid,
                         nullptr);
  const double loss_gpu = to_host(loss.data(), 1)[0];
  EXPECT_NEAR(loss_gpu, loss_ref, 1e-4 * std::abs(loss_ref));  // float32 sums of exact inputs
  EXPECT_LT(rel_l2(download(l_d), grad_ref), kOneRounding);
}

TEST(CudaKernels, EmbeddingMatchesCpuDefinition) {
  TRAINPLAN_REQUIRE_GPU();
  const std::int64_t T = 24, h = 40, seq = 12, row0 = 10, rows = 30;
  std::vector<std::int32_t> tokens(T);
  for (std::int64_t i = 0; i < T; ++i) tokens[i] = static_cast<std::int32_t>((i * 7) % 50);
  const auto wte = random_bf16(rows * h, 40), wpe = random_bf16(seq * h, 41);
  const auto dout = random_bf16(T * h, 42);
  std::vector<float> out_ref(T * h, 0.0f), dwte_ref(rows * h, 0.0f), dwpe_ref(seq * h, 0.0f);
  for (std::int64_t i = 0; i < T; ++i) {
    const std::int64_t r = tokens[i] - row0;
    for (std::int64_t j = 0; j < h; ++j) {
      const float e = (r >= 0 && r < rows) ? wte[r * h + j] : 0.0f;
      out_ref[i * h + j] = testing::round_bf16(e + wpe[(i % seq) * h + j]);
      dwpe_ref[(i % seq) * h + j] += dout[i * h + j];
      if (r >= 0 && r < rows) dwte_ref[r * h + j] += dout[i * h + j];
    }
  }
  DeviceBuffer<std::int32_t> t_d(T);
  to_device(tokens.data(), t_d.data(), T);
  auto wte_d = upload_bf16(wte), wpe_d = upload_bf16(wpe), do_d = upload_bf16(dout);
  DeviceBuffer<bf16> out(T * h);
  DeviceBuffer<float> dwte(rows * h), dwpe(seq * h);
  poison(out);
  TP_CUDA(cudaMemset(dwte.data(), 0, rows * h * 4));
  TP_CUDA(cudaMemset(dwpe.data(), 0, seq * h * 4));
  embedding_forward(t_d.data(), wte_d.data(), row0, rows, out.data(), T, h, nullptr);
  add_positions(out.data(), wpe_d.data(), 0, seq, T, h, nullptr);
  embedding_backward(t_d.data(), do_d.data(), dwte.data(), row0, rows, dwpe.data(), seq, T, h,
                     nullptr);
  EXPECT_LT(rel_l2(download(out), out_ref), kOneRounding);
  EXPECT_LT(rel_l2(download(dwte), dwte_ref), 1e-6);  // float32 sums of a few exact values
  EXPECT_LT(rel_l2(download(dwpe), dwpe_ref), 1e-6);
}

TEST(CudaKernels, AdamWMatchesCpu) {
  TRAINPLAN_REQUIRE_GPU();
  const std::int64_t n = 5000;
  auto p = random_bf16(n, 50), g = random_bf16(n, 51), m = random_bf16(n, 52, 0.1f);
  auto v = random_bf16(n, 53, 0.1f);
  for (float& x : v) x = x * x;
  // Decayed ranges of several lengths, one at each end of the buffer and one single element.
  const std::vector<std::int64_t> ranges = {0, 7, 100, 101, 640, 2000, 4999, 5000};
  std::vector<std::uint8_t> decay(n, 0);
  for (std::size_t k = 0; k < ranges.size(); k += 2)
    std::fill(decay.begin() + ranges[k], decay.begin() + ranges[k + 1], 1);
  auto p_d = upload_f32(p), g_d = upload_f32(g), m_d = upload_f32(m), v_d = upload_f32(v);
  DeviceBuffer<std::int64_t> ranges_d(static_cast<std::int64_t>(ranges.size()));
  to_device(ranges.data(), ranges_d.data(), ranges_d.size());
  DeviceBuffer<bf16> p16(n);
  executor::AdamW cpu;
  AdamWConfig opt{cpu.lr, cpu.beta1, cpu.beta2, cpu.eps, cpu.weight_decay};
  for (std::int64_t i = 0; i < n; ++i)
    executor::adamw_update(cpu, 7, 1, &p[i], &g[i], &m[i], &v[i], decay[i] != 0);
  adamw_update(opt, 7, n, p_d.data(), g_d.data(), m_d.data(), v_d.data(), ranges_d.data(),
               static_cast<std::int64_t>(ranges.size() / 2), p16.data(), nullptr);
  EXPECT_LT(rel_l2(download(p_d), p), 1e-6);
  EXPECT_LT(rel_l2(download(m_d), m), 1e-6);
  EXPECT_LT(rel_l2(download(v_d), v), 1e-6);
  EXPECT_LT(rel_l2(download(p16), p), kOneRounding);
}

TEST(CudaDevice, SkipsWithAReasonWithoutAGpu) {
  // Always runs: the device query itself must not throw or crash on a machine without a GPU.
  std::string why;
  const int n = device_count(&why);
  if (n == 0) {
    EXPECT_FALSE(why.empty());
  }
  SUCCEED() << n << " CUDA device(s)" << (why.empty() ? "" : ": " + why);
}

}  // namespace
}  // namespace trainplan::executor::cuda
