// CPU kernels; see kernels.h. Tested by tests/executor/cpu/kernels_test.cc.
#include "executor/cpu/kernels.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/status.h"

namespace trainplan::executor {

namespace {
// One thread until told otherwise (see set_math_threads): with OpenMP, Eigen would otherwise use
// omp_get_max_threads(), every core, in every rank.
[[maybe_unused]] const bool kOneThreadAtLoad = [] {
  Eigen::setNbThreads(1);
  return true;
}();
}  // namespace

void set_math_threads(int threads) { Eigen::setNbThreads(threads); }

int math_threads() { return Eigen::nbThreads(); }

namespace {
// Outputs come shaped (kernels.h): a mismatch is the caller's bug.
void expect_shape(const MatRef& m, Eigen::Index rows, Eigen::Index cols, const char* what) {
  TRAINPLAN_CHECK(m.rows() == rows && m.cols() == cols)
      << what << " is " << m.rows() << " x " << m.cols() << ", not " << rows << " x " << cols;
}
}  // namespace

void layernorm_forward(const ConstMatRef& x, const float* gamma, const float* beta, MatRef y,
                       VecRef mean, VecRef rstd) {
  const Eigen::Index n = x.rows(), h = x.cols();
  expect_shape(y, n, h, "layernorm_forward's output");
  TRAINPLAN_CHECK(mean.size() == n && rstd.size() == n) << "layernorm_forward's statistics";
  ConstRowMap g(gamma, h), b(beta, h);
  for (Eigen::Index i = 0; i < n; ++i) {
    const float mu = x.row(i).mean();
    const float var = (x.row(i).array() - mu).square().mean();
    const float r = 1.0f / std::sqrt(var + kLayerNormEps);
    mean[i] = mu;
    rstd[i] = r;
    y.row(i) = ((x.row(i).array() - mu) * r * g.array() + b.array()).matrix();
  }
}

void layernorm_backward(const ConstMatRef& dy, const ConstMatRef& x, const float* gamma,
                        const ConstVecRef& mean, const ConstVecRef& rstd, MatRef dx,
                        float* dgamma, float* dbeta, float* workspace) {
  const Eigen::Index n = x.rows(), h = x.cols();
  expect_shape(dx, n, h, "layernorm_backward's input gradient");
  ConstRowMap g(gamma, h);
  RowMap dg(dgamma, h), db(dbeta, h);
  // The caller's workspace (the stage model's scratch arena): two rows, each aligned.
  RowMap xhat(workspace, h), dxhat(workspace + layernorm_workspace_floats(h), h);
  for (Eigen::Index i = 0; i < n; ++i) {
    xhat = (x.row(i).array() - mean[i]) * rstd[i];
    dg.array() += dy.row(i).array() * xhat.array();
    db += dy.row(i);
    dxhat = dy.row(i).cwiseProduct(g);
    const float mean_dxhat = dxhat.mean();
    const float mean_dxhat_xhat = dxhat.cwiseProduct(xhat).mean();
    dx.row(i) = ((dxhat.array() - mean_dxhat - xhat.array() * mean_dxhat_xhat) * rstd[i]).matrix();
  }
}

namespace {
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;
}  // namespace

// Written as whole-array expressions so that Eigen vectorizes tanh (a scalar std::tanh per
// element made GELU a third of a small layer's time on CPU). One formula for the Mat and the
// rows kernels: x, dy and dx below are Eigen arrays of any shape.
template <class X, class Y>
void gelu_values(const X& x, Y&& y) {
  y = 0.5f * x * (1.0f + (kSqrt2OverPi * (x + kGeluCubic * x.cube())).tanh());
}
// t holds the tanh of gelu_values' argument, computed once for its two uses.
template <class X, class DY, class T, class DX>
void gelu_gradients(const X& x, const DY& dy, T& t, DX&& dx) {
  t = (kSqrt2OverPi * (x + kGeluCubic * x.cube())).tanh();
  dx = dy * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t.square()) * kSqrt2OverPi *
                                     (1.0f + 3.0f * kGeluCubic * x.square()));
}

void gelu_forward(const ConstMatRef& x, MatRef y) {
  expect_shape(y, x.rows(), x.cols(), "gelu_forward's output");
  gelu_values(x.array(), y.array());
}

void gelu_backward(const ConstMatRef& x, const ConstMatRef& dy, MatRef dx) {
  expect_shape(dx, x.rows(), x.cols(), "gelu_backward's input gradient");
  gelu_backward_rows(ConstMatMap(x.data(), x.rows(), x.cols()),
                     ConstMatMap(dy.data(), dy.rows(), dy.cols()),
                     MatMap(dx.data(), dx.rows(), dx.cols()));
}

void linear_forward(const ConstMatRef& x, const ConstMatMap& w, const float* b, MatRef y) {
  expect_shape(y, x.rows(), w.cols(), "linear_forward's output");
  y.noalias() = x * w;
  if (b != nullptr) y.rowwise() += ConstRowMap(b, w.cols());
}

void linear_input_gradient(const ConstMatMap& w, const ConstMatRef& dy, MatRef dx) {
  expect_shape(dx, dy.rows(), w.rows(), "linear_input_gradient's output");
  dx.noalias() = dy * w.transpose();
}

void linear_weight_gradient(const ConstMatRef& x, const ConstMatRef& dy, MatMap& dw) {
  dw.noalias() += x.transpose() * dy;
}

void linear_backward(const ConstMatRef& x, const ConstMatMap& w, const ConstMatRef& dy, Mat* dx,
                     MatMap& dw, float* db) {
  if (dx != nullptr) {
    dx->resize(dy.rows(), w.rows());
    linear_input_gradient(w, dy, *dx);
  }
  linear_weight_gradient(x, dy, dw);
  if (db != nullptr) RowMap(db, dy.cols()) += dy.colwise().sum();
}

namespace {
using ConstFlat = Eigen::Map<const Eigen::ArrayXf>;
using Flat = Eigen::Map<Eigen::ArrayXf>;
// Elements per chunk of gelu_backward_rows: 16 KiB of stack, a multiple of every vector width
// and alignment, so that the chunks vectorise as the whole array would. A workspace sized by
// the call would be reallocated whenever consecutive calls differ in size (an MoE layer's
// experts, shared experts and dense layers all have their own).
constexpr Eigen::Index kGeluChunk = 4096;
}  // namespace

void gelu_forward_rows(const ConstMatMap& x, MatMap y) {
  gelu_values(ConstFlat(x.data(), x.size()), Flat(y.data(), y.size()));
}

void gelu_backward_rows(const ConstMatMap& x, const ConstMatMap& dy, MatMap dx) {
  Eigen::Array<float, Eigen::Dynamic, 1, 0, kGeluChunk, 1> t;  // on the stack
  for (Eigen::Index at = 0; at < x.size(); at += kGeluChunk) {
    const Eigen::Index n = std::min(kGeluChunk, x.size() - at);
    gelu_gradients(ConstFlat(x.data() + at, n), ConstFlat(dy.data() + at, n), t,
                   Flat(dx.data() + at, n));
  }
}

void linear_forward_rows(const ConstMatMap& x, const ConstMatMap& w, const float* b, MatMap y) {
  y.noalias() = x * w;
  if (b != nullptr) y.rowwise() += ConstRowMap(b, w.cols());
}

namespace {
std::vector<std::int64_t> positions_0_to(std::int64_t n) {
  std::vector<std::int64_t> out(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) out[static_cast<std::size_t>(i)] = i;
  return out;
}
}  // namespace

void attention_forward(const ConstMatRef& q, const ConstMatRef& k, const ConstMatRef& v,
                       std::int64_t batch, std::int64_t seq, std::int64_t heads, MatRef probs,
                       MatRef out) {
  attention_forward(q, k, v, batch, positions_0_to(seq), heads, probs, out);
}

void attention_backward(const ConstMatRef& q, const ConstMatRef& k, const ConstMatRef& v,
                        const ConstMatRef& probs, const ConstMatRef& dout, std::int64_t batch,
                        std::int64_t seq, std::int64_t heads, MatRef dq, MatRef dk, MatRef dv) {
  Mat workspace(seq, k.rows() / batch);
  attention_backward(q, k, v, probs, dout, batch, positions_0_to(seq), heads, dq, dk, dv,
                     workspace);
}

void attention_forward(const ConstMatRef& q, const ConstMatRef& k, const ConstMatRef& v,
                       std::int64_t batch, const std::vector<std::int64_t>& q_positions,
                       std::int64_t heads, MatRef probs, MatRef out) {
  const Eigen::Index hd = q.cols() / heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const std::int64_t sq = static_cast<std::int64_t>(q_positions.size()), sk = k.rows() / batch;
  expect_shape(probs, batch * heads * sq, sk, "attention_forward's probabilities");
  expect_shape(out, q.rows(), q.cols(), "attention_forward's output");
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t a = 0; a < heads; ++a) {
      const auto qa = q.block(b * sq, a * hd, sq, hd);
      const auto ka = k.block(b * sk, a * hd, sk, hd);
      const auto va = v.block(b * sk, a * hd, sk, hd);
      auto p = probs.block((b * heads + a) * sq, 0, sq, sk);
      // The product, then the scale: (A B) s as one expression evaluates A B into a temporary.
      p.noalias() = qa * ka.transpose();
      p *= scale;
      for (std::int64_t i = 0; i < sq; ++i) {
        // Causal mask: the query at position pos attends to keys 0..pos.
        const std::int64_t n = q_positions[static_cast<std::size_t>(i)] + 1;
        const float mx = p.row(i).head(n).maxCoeff();
        p.row(i).head(n) = (p.row(i).head(n).array() - mx).exp().matrix();
        p.row(i).head(n) /= p.row(i).head(n).sum();
        p.row(i).tail(sk - n).setZero();
      }
      out.block(b * sq, a * hd, sq, hd).noalias() = p * va;
    }
  }
}

void attention_backward(const ConstMatRef& q, const ConstMatRef& k, const ConstMatRef& v,
                        const ConstMatRef& probs, const ConstMatRef& dout, std::int64_t batch,
                        const std::vector<std::int64_t>& q_positions, std::int64_t heads,
                        MatRef dq, MatRef dk, MatRef dv, MatRef workspace) {
  const Eigen::Index hd = q.cols() / heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const std::int64_t sq = static_cast<std::int64_t>(q_positions.size()), sk = k.rows() / batch;
  expect_shape(dq, q.rows(), q.cols(), "attention_backward's dq");
  expect_shape(dk, k.rows(), k.cols(), "attention_backward's dk");
  expect_shape(dv, v.rows(), v.cols(), "attention_backward's dv");
  expect_shape(workspace, sq, sk, "attention_backward's workspace");
  MatRef& dp = workspace;  // one head's score gradients
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t a = 0; a < heads; ++a) {
      const auto p = probs.block((b * heads + a) * sq, 0, sq, sk);
      const auto doa = dout.block(b * sq, a * hd, sq, hd);
      dv.block(b * sk, a * hd, sk, hd).noalias() = p.transpose() * doa;
      dp.noalias() = doa * v.block(b * sk, a * hd, sk, hd).transpose();
      // Softmax backward per row: ds = p * (dp - sum(p * dp)); masked entries have p = 0.
      for (std::int64_t i = 0; i < sq; ++i) {
        const float dot = p.row(i).dot(dp.row(i));
        dp.row(i) = (p.row(i).array() * (dp.row(i).array() - dot) * scale).matrix();
      }
      dq.block(b * sq, a * hd, sq, hd).noalias() = dp * k.block(b * sk, a * hd, sk, hd);
      dk.block(b * sk, a * hd, sk, hd).noalias() =
          dp.transpose() * q.block(b * sq, a * hd, sq, hd);
    }
  }
}

void adamw_update(const AdamW& opt, std::int64_t step, std::int64_t n, float* param,
                  const float* grad, float* m, float* v, bool decay) {
  const double c1 = 1.0 - std::pow(static_cast<double>(opt.beta1), static_cast<double>(step));
  const double c2 = 1.0 - std::pow(static_cast<double>(opt.beta2), static_cast<double>(step));
  const float step_size = static_cast<float>(opt.lr / c1);
  const float v_scale = static_cast<float>(1.0 / std::sqrt(c2));
  const float decay_rate = decay ? opt.lr * opt.weight_decay : 0.0f;
  for (std::int64_t i = 0; i < n; ++i) {
    const float g = grad[i];
    m[i] = opt.beta1 * m[i] + (1.0f - opt.beta1) * g;
    v[i] = opt.beta2 * v[i] + (1.0f - opt.beta2) * g * g;
    if (decay) param[i] -= decay_rate * param[i];
    param[i] -= step_size * m[i] / (std::sqrt(v[i]) * v_scale + opt.eps);
  }
}

}  // namespace trainplan::executor
