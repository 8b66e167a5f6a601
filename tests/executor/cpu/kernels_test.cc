// Each kernel's backward against central finite differences of its forward, and the attention
// against a naive per-element reference. Run: ctest -R executor_kernels
//
// Tolerance: float32 central differences with step 1e-2 on O(1) inputs have truncation error
// O(step^2 * f''') ~ 1e-4 and rounding error ~ eps * |f| / step ~ 1e-5 per unit of f, so an
// analytic gradient within 2e-3 (absolute, on gradients of order 1) is right; a wrong formula
// is off by O(1).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>

#include "executor/cpu/kernels.h"
#include "executor/params.h"

namespace trainplan::executor {
namespace {

constexpr float kStep = 1e-2f;
constexpr double kTol = 2e-3;

Mat random_mat(std::int64_t r, std::int64_t c, std::mt19937& g, float scale = 1.0f) {
  std::normal_distribution<float> n(0.0f, scale);
  Mat m(r, c);
  for (std::int64_t i = 0; i < m.size(); ++i) m.data()[i] = n(g);
  return m;
}

// d/dv of sum(w * f()) for every element of v, by central differences.
Mat numeric_grad(float* v, std::int64_t n, const Mat& w, const std::function<Mat()>& f) {
  Mat g(1, n);
  for (std::int64_t i = 0; i < n; ++i) {
    const float keep = v[i];
    v[i] = keep + kStep;
    const double up = (f().array() * w.array()).cast<double>().sum();
    v[i] = keep - kStep;
    const double down = (f().array() * w.array()).cast<double>().sum();
    v[i] = keep;
    g(0, i) = static_cast<float>((up - down) / (2.0 * kStep));
  }
  return g;
}

void expect_close(const float* analytic, const Mat& numeric, const char* what) {
  for (std::int64_t i = 0; i < numeric.size(); ++i)
    ASSERT_NEAR(analytic[i], numeric.data()[i], kTol) << what << " element " << i;
}

TEST(Kernels, LayerNormBackwardMatchesFiniteDifferences) {
  std::mt19937 gen(1);
  Mat x = random_mat(5, 8, gen), w = random_mat(5, 8, gen);
  Mat gamma = random_mat(1, 8, gen), beta = random_mat(1, 8, gen);
  auto f = [&] {
    Mat y(5, 8);
    Vec m(5), r(5);
    layernorm_forward(x, gamma.data(), beta.data(), y, m, r);
    return y;
  };
  Mat y(5, 8), dx(5, 8);
  Vec m(5), r(5);
  layernorm_forward(x, gamma.data(), beta.data(), y, m, r);
  Mat dg = Mat::Zero(1, 8), db = Mat::Zero(1, 8);
  std::vector<float> workspace(static_cast<std::size_t>(2 * layernorm_workspace_floats(8)));
  layernorm_backward(w, x, gamma.data(), m, r, dx, dg.data(), db.data(), workspace.data());
  expect_close(dx.data(), numeric_grad(x.data(), x.size(), w, f), "dx");
  expect_close(dg.data(), numeric_grad(gamma.data(), 8, w, f), "dgamma");
  expect_close(db.data(), numeric_grad(beta.data(), 8, w, f), "dbeta");
}

TEST(Kernels, GeluBackwardMatchesFiniteDifferences) {
  std::mt19937 gen(2);
  Mat x = random_mat(4, 6, gen, 2.0f), w = random_mat(4, 6, gen);
  auto f = [&] {
    Mat y(x.rows(), x.cols());
    gelu_forward(x, y);
    return y;
  };
  Mat dx(x.rows(), x.cols());
  gelu_backward(x, w, dx);
  expect_close(dx.data(), numeric_grad(x.data(), x.size(), w, f), "dx");
  // GELU(0) = 0, GELU(x) ~ x for large x.
  Mat probe(1, 2);
  probe << 0.0f, 8.0f;
  Mat out(1, 2);
  gelu_forward(probe, out);
  EXPECT_FLOAT_EQ(out(0, 0), 0.0f);
  EXPECT_NEAR(out(0, 1), 8.0f, 1e-5);
}

TEST(Kernels, LinearBackwardMatchesFiniteDifferences) {
  std::mt19937 gen(3);
  Mat x = random_mat(5, 4, gen), wt = random_mat(4, 3, gen), b = random_mat(1, 3, gen);
  Mat w = random_mat(5, 3, gen);
  auto f = [&] {
    Mat y(5, 3);
    linear_forward(x, ConstMatMap(wt.data(), 4, 3), b.data(), y);
    return y;
  };
  Mat dx, dw = Mat::Zero(4, 3), db = Mat::Zero(1, 3);
  MatMap dwm(dw.data(), 4, 3);
  linear_backward(x, ConstMatMap(wt.data(), 4, 3), w, &dx, dwm, db.data());
  expect_close(dx.data(), numeric_grad(x.data(), x.size(), w, f), "dx");
  expect_close(dw.data(), numeric_grad(wt.data(), wt.size(), w, f), "dW");
  expect_close(db.data(), numeric_grad(b.data(), b.size(), w, f), "db");
}

// The rows kernels (an MoE layer's experts, on views of a buffer sized for the most rows they
// can receive) give the Mat kernels' values exactly, on a block of rows in the middle of a
// larger buffer, with more elements than gelu_backward_rows' 4096-element chunk so that the
// chunk boundary and the scalar tail are crossed; the rows outside the block are not touched.
TEST(Kernels, RowsKernelsEqualTheMatKernelsOnAViewOfRows) {
  std::mt19937 gen(5);
  const std::int64_t rows = 70, f = 64, h = 16, r0 = 9;  // 70 x 64 = 4480 elements
  Mat x = random_mat(rows, h, gen), w1 = random_mat(h, f, gen), b1 = random_mat(1, f, gen);
  Mat dy = random_mat(rows, f, gen, 2.0f);
  Mat a(rows, f), g(rows, f), da(rows, f);
  linear_forward(x, ConstMatMap(w1.data(), h, f), b1.data(), a);
  gelu_forward(a, g);
  gelu_backward(a, dy, da);
  // The same rows at r0 of buffers with 100 rows, the rest a sentinel.
  const float kSentinel = -7.0f;
  Mat xb = Mat::Constant(100, h, kSentinel), ab = Mat::Constant(100, f, kSentinel);
  Mat gb = ab, dyb = ab, dab = ab;
  xb.middleRows(r0, rows) = x;
  dyb.middleRows(r0, rows) = dy;
  auto view = [&](Mat& m) { return MatMap(m.data() + r0 * m.cols(), rows, m.cols()); };
  auto cview = [&](const Mat& m) { return ConstMatMap(m.data() + r0 * m.cols(), rows, m.cols()); };
  linear_forward_rows(cview(xb), ConstMatMap(w1.data(), h, f), b1.data(), view(ab));
  gelu_forward_rows(cview(ab), view(gb));
  gelu_backward_rows(cview(ab), cview(dyb), view(dab));
  EXPECT_EQ(Mat(ab.middleRows(r0, rows)), a);
  EXPECT_EQ(Mat(gb.middleRows(r0, rows)), g);
  EXPECT_EQ(Mat(dab.middleRows(r0, rows)), da);
  for (const Mat* m : {&ab, &gb, &dab}) {
    EXPECT_TRUE((m->topRows(r0).array() == kSentinel).all());
    EXPECT_TRUE((m->bottomRows(100 - r0 - rows).array() == kSentinel).all());
  }
}

TEST(Kernels, AttentionMatchesNaiveReference) {
  std::mt19937 gen(4);
  const std::int64_t batch = 2, seq = 5, heads = 2, hd = 3;
  Mat q = random_mat(batch * seq, heads * hd, gen), k = random_mat(batch * seq, heads * hd, gen),
      v = random_mat(batch * seq, heads * hd, gen);
  Mat probs(batch * heads * seq, seq), out(q.rows(), q.cols());
  attention_forward(q, k, v, batch, seq, heads, probs, out);
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t a = 0; a < heads; ++a)
      for (std::int64_t i = 0; i < seq; ++i) {
        std::vector<double> e(static_cast<std::size_t>(i + 1));
        double z = 0;
        for (std::int64_t j = 0; j <= i; ++j) {
          double dot = 0;
          for (std::int64_t c = 0; c < hd; ++c)
            dot += static_cast<double>(q(b * seq + i, a * hd + c)) * k(b * seq + j, a * hd + c);
          e[static_cast<std::size_t>(j)] = std::exp(dot / std::sqrt(static_cast<double>(hd)));
          z += e[static_cast<std::size_t>(j)];
        }
        for (std::int64_t c = 0; c < hd; ++c) {
          double o = 0;
          for (std::int64_t j = 0; j <= i; ++j)
            o += e[static_cast<std::size_t>(j)] / z * v(b * seq + j, a * hd + c);
          EXPECT_NEAR(out(b * seq + i, a * hd + c), o, 1e-5);
        }
      }
}

TEST(Kernels, AttentionBackwardMatchesFiniteDifferences) {
  std::mt19937 gen(5);
  const std::int64_t batch = 2, seq = 4, heads = 2, hd = 3;
  Mat q = random_mat(batch * seq, heads * hd, gen), k = random_mat(batch * seq, heads * hd, gen),
      v = random_mat(batch * seq, heads * hd, gen), w = random_mat(batch * seq, heads * hd, gen);
  const std::int64_t rows = batch * seq, cols = heads * hd;
  auto f = [&] {
    Mat p(batch * heads * seq, seq), o(rows, cols);
    attention_forward(q, k, v, batch, seq, heads, p, o);
    return o;
  };
  Mat p(batch * heads * seq, seq), o(rows, cols), dq(rows, cols), dk(rows, cols), dv(rows, cols);
  attention_forward(q, k, v, batch, seq, heads, p, o);
  attention_backward(q, k, v, p, w, batch, seq, heads, dq, dk, dv);
  expect_close(dq.data(), numeric_grad(q.data(), q.size(), w, f), "dq");
  expect_close(dk.data(), numeric_grad(k.data(), k.size(), w, f), "dk");
  expect_close(dv.data(), numeric_grad(v.data(), v.size(), w, f), "dv");
}

// Context parallelism: queries at some positions of the sequence (a CP rank's two chunks)
// against all keys give those rows of the whole-sequence attention, and their backward's dK, dV
// summed over the ranks that split the sequence give the whole-sequence dK, dV.
TEST(Kernels, AttentionOnQuerySubsetsSumsToTheWholeSequence) {
  std::mt19937 gen(6);
  const std::int64_t batch = 2, seq = 8, heads = 2, hd = 3;
  Mat q = random_mat(batch * seq, heads * hd, gen), k = random_mat(batch * seq, heads * hd, gen),
      v = random_mat(batch * seq, heads * hd, gen), w = random_mat(batch * seq, heads * hd, gen);
  const std::int64_t rows = batch * seq, cols = heads * hd;
  Mat p(batch * heads * seq, seq), o(rows, cols), dq(rows, cols), dk(rows, cols), dv(rows, cols);
  attention_forward(q, k, v, batch, seq, heads, p, o);
  attention_backward(q, k, v, p, w, batch, seq, heads, dq, dk, dv);
  // cp = 2, chunks of 2: rank 0 holds positions 0, 1, 6, 7 and rank 1 positions 2..5.
  const std::vector<std::vector<std::int64_t>> ranks = {{0, 1, 6, 7}, {2, 3, 4, 5}};
  Mat dk_sum = Mat::Zero(dk.rows(), dk.cols()), dv_sum = Mat::Zero(dv.rows(), dv.cols());
  for (const auto& pos : ranks) {
    const std::int64_t sq = static_cast<std::int64_t>(pos.size());
    Mat qs(batch * sq, q.cols()), ws(batch * sq, w.cols());
    for (std::int64_t b = 0; b < batch; ++b)
      for (std::int64_t i = 0; i < sq; ++i) {
        qs.row(b * sq + i) = q.row(b * seq + pos[static_cast<std::size_t>(i)]);
        ws.row(b * sq + i) = w.row(b * seq + pos[static_cast<std::size_t>(i)]);
      }
    Mat ps(batch * heads * sq, seq), os(batch * sq, cols), dqs(batch * sq, cols), dks(rows, cols),
        dvs(rows, cols), workspace(sq, seq);
    attention_forward(qs, k, v, batch, pos, heads, ps, os);
    attention_backward(qs, k, v, ps, ws, batch, pos, heads, dqs, dks, dvs, workspace);
    for (std::int64_t b = 0; b < batch; ++b)
      for (std::int64_t i = 0; i < sq; ++i) {
        const std::int64_t row = b * seq + pos[static_cast<std::size_t>(i)];
        EXPECT_LT((os.row(b * sq + i) - o.row(row)).cwiseAbs().maxCoeff(), 1e-6f) << row;
        EXPECT_LT((dqs.row(b * sq + i) - dq.row(row)).cwiseAbs().maxCoeff(), 1e-6f) << row;
      }
    dk_sum += dks;
    dv_sum += dvs;
  }
  EXPECT_LT((dk_sum - dk).cwiseAbs().maxCoeff(), 1e-6f);
  EXPECT_LT((dv_sum - dv).cwiseAbs().maxCoeff(), 1e-6f);
}

TEST(Kernels, MathThreadsStartAtOneAndSplitProductsWithTheSameResult) {
  // The library starts at one thread whatever OpenMP's default; Eigen reports 2 after
  // set_math_threads(2) only when it was built with OpenMP (otherwise nbThreads() is always 1).
  EXPECT_EQ(math_threads(), 1);
  std::mt19937 g(7);
  const Mat x = random_mat(512, 256, g), w = random_mat(256, 1024, g);
  Mat one(512, 1024), two(512, 1024);
  linear_forward(x, ConstMatMap(w.data(), w.rows(), w.cols()), nullptr, one);
  set_math_threads(2);
  EXPECT_EQ(math_threads(), 2);
  linear_forward(x, ConstMatMap(w.data(), w.rows(), w.cols()), nullptr, two);
  set_math_threads(1);
  // Eigen splits the product's blocks between threads, each summing its own outputs in full.
  EXPECT_LT((one - two).cwiseAbs().maxCoeff(), 1e-5f * one.cwiseAbs().maxCoeff());
}

TEST(Kernels, AdamWFirstStepMovesByLearningRate) {
  // Step 1 with bias correction: m_hat = g, v_hat = g^2, so the update is lr * sign(g)
  // (plus decoupled decay lr * wd * p where enabled).
  AdamW opt;
  float p[2] = {1.0f, 1.0f}, g[2] = {0.5f, -2.0f}, m[2] = {}, v[2] = {};
  adamw_update(opt, 1, 1, &p[0], &g[0], &m[0], &v[0], /*decay=*/false);
  adamw_update(opt, 1, 1, &p[1], &g[1], &m[1], &v[1], /*decay=*/true);
  EXPECT_NEAR(p[0], 1.0f - opt.lr, 1e-6);
  EXPECT_NEAR(p[1], 1.0f - opt.lr * opt.weight_decay + opt.lr, 1e-6);
}

TEST(Kernels, DecayRunsCoverAWindowAsAPerElementMaskWould) {
  // Decayed tensors [2, 5) and [7, 8) and [12, 20) of a 20-element block, windows as ZeRO
  // shards cut them (both CUDA and CPU trainers walk the runs; no mask per element).
  const Ranges decayed = {{2, 3}, {7, 1}, {12, 8}};
  std::vector<int> mask(20, 0);
  for (auto [off, n] : decayed)
    for (std::int64_t i = off; i < off + n; ++i) mask[static_cast<std::size_t>(i)] = 1;
  for (std::int64_t begin = 0; begin <= 20; ++begin)
    for (std::int64_t end = begin; end <= 20; ++end) {
      std::vector<int> seen(20, -1);
      std::int64_t next = begin;
      for_each_decay_run(decayed, begin, end, [&](std::int64_t at, std::int64_t n, bool decay) {
        EXPECT_EQ(at, next) << "runs are contiguous, in order";
        EXPECT_GT(n, 0);
        for (std::int64_t i = at; i < at + n; ++i) seen[static_cast<std::size_t>(i)] = decay;
        next = at + n;
      });
      EXPECT_EQ(next, end) << "[" << begin << ", " << end << ")";
      for (std::int64_t i = begin; i < end; ++i)
        EXPECT_EQ(seen[static_cast<std::size_t>(i)], mask[static_cast<std::size_t>(i)]) << i;
    }
}

}  // namespace
}  // namespace trainplan::executor
