// Compute measurements; see kernels.h. Tested by tests/calibration/kernels_test.cc.
#include "calibration/kernels.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <set>
#include <tuple>

#include <Eigen/Dense>

#include "models/plan.h"

namespace trainplan::calibration {

namespace {

using Clock = std::chrono::steady_clock;
using MatrixF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic>;
using ArrayF = Eigen::ArrayXf;

double d(std::int64_t v) { return static_cast<double>(v); }

// Median seconds of one call of `fn`, after one warm-up call.
template <class Fn>
double median_call_time(const TimingOptions& o, Fn&& fn) {
  fn();
  std::vector<double> times;
  const auto start = Clock::now();
  while (static_cast<int>(times.size()) < o.min_calls ||
         std::chrono::duration<double>(Clock::now() - start).count() < o.min_time_s) {
    const auto t0 = Clock::now();
    fn();
    times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    if (times.size() >= 100000) break;
  }
  std::nth_element(times.begin(), times.begin() + static_cast<std::ptrdiff_t>(times.size() / 2),
                   times.end());
  return times[times.size() / 2];
}

// Keeps a computed value observable so the compiler cannot drop the kernel.
volatile float g_sink = 0.0f;

std::vector<Plan> probe_plans(const ModelSpec& model, const std::vector<std::int64_t>& mbs,
                              const std::vector<std::int64_t>& tps) {
  std::vector<Plan> plans;
  for (std::int64_t t : tps) {
    for (std::int64_t b : mbs) {
      Plan p;
      p.tp = t;
      p.micro_batch_size = b;
      p.global_batch_size = b;
      p.precision = Precision::kFp32;
      p.attention = AttentionImpl::kUnfused;
      p.schedule = Schedule::k1F1B;
      if (!validate_plan(p).ok() || !check_plan_fits_model(p, model).ok()) continue;
      plans.push_back(p);
    }
  }
  return plans;
}

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

}  // namespace

std::vector<GemmShape> cost_model_gemm_shapes(const std::vector<ModelSpec>& models,
                                              const std::vector<std::int64_t>& micro_batches,
                                              const std::vector<std::int64_t>& tps) {
  std::vector<GemmShape> out;
  std::set<std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t>> seen;
  for (const ModelSpec& m : models) {
    for (const Plan& p : probe_plans(m, micro_batches, tps)) {
      std::vector<Task> tasks = layer_forward_tasks(m, p);
      for (auto* more : {&layer_backward_tasks, &head_forward_tasks, &head_backward_tasks}) {
        std::vector<Task> t = (*more)(m, p);
        tasks.insert(tasks.end(), t.begin(), t.end());
      }
      for (const Task& t : tasks) {
        if (t.kind != TaskKind::kGemm) continue;
        if (!seen.insert({t.m, t.n, t.k, t.batch}).second) continue;
        out.push_back({std::string(t.name), t.m, t.n, t.k, t.batch});
      }
    }
  }
  return out;
}

std::vector<MemoryTask> cost_model_memory_tasks(const std::vector<ModelSpec>& models,
                                                const std::vector<std::int64_t>& micro_batches,
                                                const std::vector<std::int64_t>& tps) {
  std::vector<MemoryTask> out;
  std::set<std::pair<std::string, double>> seen;
  for (const ModelSpec& m : models) {
    for (const Plan& p : probe_plans(m, micro_batches, tps)) {
      std::vector<Task> tasks = layer_forward_tasks(m, p);
      for (auto* more : {&layer_backward_tasks, &embedding_forward_tasks,
                         &embedding_backward_tasks, &head_forward_tasks, &head_backward_tasks}) {
        std::vector<Task> t = (*more)(m, p);
        tasks.insert(tasks.end(), t.begin(), t.end());
      }
      for (const Task& t : tasks) {
        if (t.kind != TaskKind::kMemory) continue;
        if (!seen.insert({std::string(t.name), t.bytes}).second) continue;
        std::int64_t row = m.hidden_size;
        if (starts_with(t.name, "gelu") || starts_with(t.name, "swiglu")) row = m.ffn_hidden_size / p.tp;
        if (starts_with(t.name, "softmax")) row = m.seq_len;
        if (starts_with(t.name, "cross_entropy")) row = padded_vocab(m, p.tp) / p.tp;
        out.push_back({t, row});
      }
      // The optimizer step over this rank's parameters (one stage, no ZeRO).
      Task opt;
      opt.name = "optimizer";
      opt.kind = TaskKind::kMemory;
      opt.bytes = optimizer_params_on_rank(m, p, 0) *
                  optimizer_step_bytes_per_param(p.precision, p.optimizer);
      if (seen.insert({"optimizer", opt.bytes}).second) out.push_back({opt, m.hidden_size});
    }
  }
  return out;
}

std::vector<GemmShape> gemm_sweep_shapes(const std::vector<std::int64_t>& sizes) {
  std::vector<GemmShape> out;
  for (std::int64_t m : sizes)
    for (std::int64_t n : sizes)
      for (std::int64_t k : sizes) out.push_back({"sweep", m, n, k, 1});
  return out;
}

GemmSample time_gemm(const GemmShape& s, const TimingOptions& o) {
  GemmSample r;
  r.shape = s;
  r.flops = 2.0 * d(s.batch) * d(s.m) * d(s.n) * d(s.k);
  r.bytes = 4.0 * d(s.batch) * (d(s.m) * d(s.k) + d(s.k) * d(s.n) + d(s.m) * d(s.n));
  std::vector<MatrixF> a, b, c;
  for (std::int64_t i = 0; i < s.batch; ++i) {
    a.push_back(MatrixF::Random(s.m, s.k));
    b.push_back(MatrixF::Random(s.k, s.n));
    c.push_back(MatrixF::Zero(s.m, s.n));
  }
  r.time_s = median_call_time(o, [&] {
    for (std::size_t i = 0; i < a.size(); ++i) c[i].noalias() = a[i] * b[i];
  });
  g_sink = g_sink + c[0](0, 0);
  return r;
}

MemorySample time_memory_task(const MemoryTask& mt, const TimingOptions& o) {
  const Task& t = mt.task;
  MemorySample r;
  r.task = std::string(t.name);
  r.bytes = t.bytes;
  const std::int64_t row = std::max<std::int64_t>(1, mt.row);
  // Bytes per element each stand-in kernel moves (float32 reads and writes).
  auto elements = [&](double bytes_per_element) {
    const auto n = static_cast<std::int64_t>(std::llround(t.bytes / bytes_per_element));
    return std::max<std::int64_t>(row, (n + row - 1) / row * row);
  };
  if (starts_with(t.name, "norm") || starts_with(t.name, "final_norm")) {
    r.kernel = "layernorm";
    const std::int64_t n = elements(8.0);
    MatrixF x = MatrixF::Random(row, n / row), y(row, n / row);
    r.time_s = median_call_time(o, [&] {
      for (Eigen::Index j = 0; j < x.cols(); ++j) {
        const float mean = x.col(j).mean();
        const float var = (x.col(j).array() - mean).square().mean();
        y.col(j) = (x.col(j).array() - mean) * (1.0f / std::sqrt(var + 1e-5f));
      }
    });
    g_sink = g_sink + y(0, 0);
  } else if (starts_with(t.name, "gelu") || starts_with(t.name, "swiglu")) {
    r.kernel = "gelu";
    const std::int64_t n = elements(8.0);
    ArrayF x = ArrayF::Random(n), y(n);
    r.time_s = median_call_time(o, [&] {
      // GELU, tanh approximation (Hendrycks and Gimpel 2016).
      y = 0.5f * x * (1.0f + (0.7978845608f * (x + 0.044715f * x.cube())).tanh());
    });
    g_sink = g_sink + y(0);
  } else if (starts_with(t.name, "softmax") || starts_with(t.name, "cross_entropy")) {
    r.kernel = "softmax";
    const std::int64_t n = elements(8.0);
    MatrixF x = MatrixF::Random(row, n / row), y(row, n / row);
    r.time_s = median_call_time(o, [&] {
      for (Eigen::Index j = 0; j < x.cols(); ++j) {
        const float mx = x.col(j).maxCoeff();
        y.col(j) = (x.col(j).array() - mx).exp();
        y.col(j) /= y.col(j).sum();
      }
    });
    g_sink = g_sink + y(0, 0);
  } else if (starts_with(t.name, "residual")) {
    r.kernel = "add";
    const std::int64_t n = elements(12.0);
    ArrayF a = ArrayF::Random(n), b = ArrayF::Random(n), c(n);
    r.time_s = median_call_time(o, [&] { c = a + b; });
    g_sink = g_sink + c(0);
  } else if (t.name == "optimizer") {
    r.kernel = "adamw";
    const std::int64_t n = elements(24.0);
    ArrayF p = ArrayF::Random(n), g = ArrayF::Random(n), m1 = ArrayF::Zero(n),
           m2 = ArrayF::Zero(n);
    r.time_s = median_call_time(o, [&] {
      // AdamW (Loshchilov and Hutter 2019) with bias correction folded into the rate.
      m1 = 0.9f * m1 + 0.1f * g;
      m2 = 0.999f * m2 + 0.001f * g.square();
      p -= 1e-4f * (m1 / (m2.sqrt() + 1e-8f) + 0.01f * p);
    });
    g_sink = g_sink + p(0);
  } else {
    r.kernel = "copy";
    const std::int64_t n = elements(8.0);
    ArrayF a = ArrayF::Random(n), b(n);
    r.time_s = median_call_time(o, [&] { b = a; });
    g_sink = g_sink + b(0);
  }
  return r;
}

AttentionSample time_attention(std::int64_t seq, std::int64_t head_dim, std::int64_t batch,
                               const TimingOptions& o) {
  AttentionSample r;
  r.seq = seq;
  r.head_dim = head_dim;
  r.batch = batch;
  // The cost model's causal kernel executes half of 4*batch*s^2*hd (cost_model.cc).
  r.executed_flops = 2.0 * d(batch) * d(seq) * d(seq) * d(head_dim);
  std::vector<MatrixF> q, k, v, out;
  for (std::int64_t i = 0; i < batch; ++i) {
    q.push_back(MatrixF::Random(seq, head_dim));  // (s, hd)
    k.push_back(MatrixF::Random(seq, head_dim));
    v.push_back(MatrixF::Random(seq, head_dim));
    out.push_back(MatrixF::Zero(seq, head_dim));
  }
  MatrixF scores(seq, seq);  // (s, s)
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  r.time_s = median_call_time(o, [&] {
    for (std::size_t b = 0; b < q.size(); ++b) {
      scores.noalias() = q[b] * k[b].transpose();
      for (Eigen::Index i = 0; i < seq; ++i) {
        auto row = scores.row(i).head(i + 1);
        row *= scale;
        const float mx = row.maxCoeff();
        row = (row.array() - mx).exp().matrix();
        row /= row.sum();
        scores.row(i).tail(seq - i - 1).setZero();
      }
      out[b].noalias() = scores * v[b];
    }
  });
  g_sink = g_sink + out[0](0, 0);
  return r;
}

std::vector<StreamSample> time_stream(double array_bytes, const TimingOptions& o) {
  const auto n = static_cast<Eigen::Index>(std::max(1.0, array_bytes / 4.0));
  ArrayF a = ArrayF::Constant(n, 1.0f), b = ArrayF::Constant(n, 2.0f),
         c = ArrayF::Constant(n, 0.5f);
  const float s = 3.0f;
  const double bytes = 4.0 * static_cast<double>(n);
  std::vector<StreamSample> out;
  auto run = [&](const char* name, double arrays, auto&& fn) {
    StreamSample x;
    x.kernel = name;
    x.array_bytes = bytes;
    x.bytes_moved = arrays * bytes;
    x.time_s = median_call_time(o, fn);
    out.push_back(x);
  };
  run("copy", 2, [&] { c = a; });
  run("scale", 2, [&] { b = s * c; });
  run("add", 3, [&] { c = a + b; });
  run("triad", 3, [&] { a = b + s * c; });
  g_sink = g_sink + a(0) + c(n - 1);
  return out;
}

}  // namespace trainplan::calibration
