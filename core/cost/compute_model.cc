// Task times; see compute_model.h. Tested by tests/core/cost_model_test.cc (task times) and
// tests/core/attention_rates_test.cc (named attention kernels).
#include "core/cost/compute_model.h"

#include <algorithm>
#include <cmath>

#include "core/cost/attention_rates.h"
#include "core/cost/memory_kernel_rates.h"
#include "core/units.h"

namespace trainplan {

DeviceRates device_rates(const GpuSpec& gpu, Precision precision) {
  DeviceRates r;
  r.peak_flops_per_s = gpu.peak_flops_per_s(precision);
  r.fp8_peak_flops_per_s = gpu.peak_fp8_flops_per_s;
  r.fp4_peak_flops_per_s = gpu.peak_fp4_flops_per_s;
  r.hbm_bytes_per_s = gpu.hbm_bytes_per_s;
  r.gemm_efficiency = gpu.gemm_efficiency;
  r.memory_efficiency = gpu.memory_efficiency;
  r.published_memory_rates = gpu.memory_rates == MemoryRates::kPublished;
  r.sm_count = std::max<std::int64_t>(1, gpu.sm_count);
  r.split_k = true;
  r.architecture = gpu.architecture;
  return r;
}

GemmDirection gemm_direction(const Task& t) {
  constexpr std::string_view kInputSuffix = "_dgrad";
  if (t.kind != TaskKind::kGemm) return GemmDirection::kForward;
  if (is_weight_gradient_task(t)) return GemmDirection::kWeightGradient;
  if (t.name.size() >= kInputSuffix.size() &&
      t.name.substr(t.name.size() - kInputSuffix.size()) == kInputSuffix)
    return GemmDirection::kInputGradient;
  return GemmDirection::kForward;
}

std::string_view to_string(GemmDirection d) {
  switch (d) {
    case GemmDirection::kForward: return "forward";
    case GemmDirection::kInputGradient: return "input_gradient";
    case GemmDirection::kWeightGradient: return "weight_gradient";
  }
  return "forward";
}

double gemm_efficiency_of(const DeviceRates& r, GemmDirection d) {
  double e = 0;
  if (d == GemmDirection::kInputGradient) e = r.gemm_input_gradient_efficiency;
  if (d == GemmDirection::kWeightGradient) e = r.gemm_weight_gradient_efficiency;
  return e > 0 ? e : r.gemm_efficiency;
}

double attention_efficiency_of(const DeviceRates& r, bool backward) {
  return backward && r.attention_backward_efficiency > 0 ? r.attention_backward_efficiency
                                                         : r.attention_efficiency;
}

double memory_efficiency_of(const DeviceRates& r, MemoryKernel k) {
  const double e = r.memory_kernel_efficiency[static_cast<std::size_t>(k)];
  return e > 0 ? e : r.memory_efficiency;
}

double memory_efficiency_of(const DeviceRates& r, const Task& t) {
  if (r.memory_kernel_efficiency[static_cast<std::size_t>(t.memory_kernel)] > 0 ||
      !r.published_memory_rates)
    return memory_efficiency_of(r, t.memory_kernel);
  return published_memory_efficiency(t.memory_kernel, t.backward, t.eager);
}

double gemm_shape_efficiency(const DeviceRates& r, std::int64_t m, std::int64_t n, std::int64_t k,
                             std::int64_t batch, bool may_split_k) {
  const double tiles_m = std::ceil(static_cast<double>(m) / r.tile_m);
  const double tiles_n = std::ceil(static_cast<double>(n) / r.tile_n);
  const double tiles = tiles_m * tiles_n * static_cast<double>(std::max<std::int64_t>(1, batch));
  const double units = static_cast<double>(r.sm_count);
  const double pad_eff = (static_cast<double>(m) * static_cast<double>(n)) /
                         (tiles_m * r.tile_m * tiles_n * r.tile_n);
  // S slices of K: S x tiles work units in waves, each slice's K ceil(k / S) (S = 1: no split).
  auto at_split = [&](double s) {
    const double work = tiles * s;
    const double wave_eff = work / (std::ceil(work / units) * units);
    const double kd = s == 1.0 ? static_cast<double>(k) : std::ceil(static_cast<double>(k) / s);
    return wave_eff * pad_eff * kd / (kd + r.k_half);
  };
  double best = at_split(1.0);
  if (may_split_k && r.split_k && tiles < units) {
    // A slice is at least one K-tile of the main loop: 64 for bf16 on Hopper and Ampere
    // (CUTLASS's 128x128x64 threadblock tiles; Stream-K divides the loop in such iterations).
    constexpr double kSliceK = 64;
    const double most = std::min(std::floor(units / tiles),
                                 std::floor(static_cast<double>(k) / kSliceK));
    for (double s = 2; s <= most; ++s) best = std::max(best, at_split(s));
  }
  return std::max(1e-6, best);
}

namespace {
// A named kernel's published rate over the task's key length (its n), masked or not (its causal),
// scaled from the measured part's peak to this one's; nullopt where none is published.
std::optional<double> published_attention_flops_per_s(const Task& t, const DeviceRates& r,
                                                      AttentionKernel kernel) {
  const auto rate = attention_kernel_rate(r.architecture, kernel, t.backward, t.causal, t.n, t.fp8);
  if (!rate) return std::nullopt;
  return rate->flops_per_s * r.peak_flops_per_s / rate->measured_peak_flops_per_s;
}

// A fused attention kernel's rate: the named kernel's published rate; else the generic model, a
// fraction of the GEMM rate with the GEMM's shape efficiency, but never below the slowest
// published fused kernel of the architecture at the task's length, mask and direction.
//
// The floor: FlashAttention-2 is the slowest fused kernel at every published point on Hopper
// (arXiv:2407.08608 Fig. 5/6: cuDNN and FA3 above it at each length, masked or not, both
// directions), and on Ampere and Blackwell the only other one published (attention_rates.h).
// FlashAttention-1, published on Hopper and Ampere, is slower still, but frameworks have shipped
// FlashAttention-2 or faster since flash-attn 2.0 (July 2023): a run launches FA1 only where its
// code pins flash-attn 1.x, so it is named there (attention_kernel=flash1), not assumed. A flat
// fraction of the GEMM rate cannot follow the kernels' rise with the key length (FA2 causal forward
// 191 -> 335 TFLOP/s from 512 to 16k on H100): on H100 the generic 0.6 gives about 252 TFLOP/s at
// every length, below every published kernel from 1k on, which is why long-sequence rows read too
// slow (validation/corpus/NOTES.md, twenty-fifth pass). Where the generic estimate is higher (short
// causal keys; Blackwell, whose frameworks run cuDNN's sm100 kernels while the published FA2 runs
// at about its Hopper rate) it stands. A measured hardware profile (`calibrate`) has no
// architecture and keeps its fitted rate.
double attention_flops_per_s(const Task& t, const DeviceRates& r) {
  if (r.attention_kernel != AttentionKernel::kGeneric) {
    const auto rate = published_attention_flops_per_s(t, r, r.attention_kernel);
    TRAINPLAN_CHECK(rate.has_value()) << "task " << t.name << ": no published rate for "
                                      << to_string(r.attention_kernel) << " (plan_rates checks)";
    return *rate;
  }
  const double generic = r.peak_flops_per_s * r.gemm_efficiency *
                         attention_efficiency_of(r, t.backward) *
                         gemm_shape_efficiency(r, t.m, t.n, t.k, t.batch);
  // The published rates are at head dim 128 (the task's k); at a smaller head dim every kernel
  // runs slower (FA3 paper Fig. 5 against its head dim 64 panels), so no floor is known there.
  if (t.k < kPublishedAttentionHeadDim) return generic;
  const auto floor = published_attention_flops_per_s(t, r, AttentionKernel::kFlash2);
  return floor ? std::max(generic, *floor) : generic;
}
}  // namespace

bool WorkShape::operator==(const WorkShape&) const = default;

MeasuredTaskTime measured_task(const Task& t, double time_s) {
  MeasuredTaskTime m;
  m.name = std::string(t.name);
  m.kind = t.kind;
  m.m = t.m;
  m.n = t.n;
  m.k = t.k;
  m.batch = t.batch;
  m.executed_flops = t.executed_flops;
  m.bytes = t.bytes;
  m.memory_kernel = t.memory_kernel;
  m.backward = t.backward;
  m.fp8 = t.fp8;
  m.fp4 = t.fp4;
  m.causal = t.causal;
  m.launches = t.launches;
  m.time_s = time_s;
  return m;
}

bool same_task(const MeasuredTaskTime& m, const Task& t) {
  auto same = [](double a, double b) {
    return std::abs(a - b) <= 1e-9 * std::max(std::abs(a), std::abs(b));
  };
  return m.name == t.name && m.kind == t.kind && m.m == t.m && m.n == t.n && m.k == t.k &&
         m.batch == t.batch && same(m.executed_flops, t.executed_flops) && same(m.bytes, t.bytes) &&
         (t.kind != TaskKind::kMemory || m.memory_kernel == t.memory_kernel) &&
         m.backward == t.backward && m.fp8 == t.fp8 && m.fp4 == t.fp4 && m.causal == t.causal &&
         m.launches == t.launches;
}

const MeasuredTaskTime* measured_task_time(const Task& t, const DeviceRates& r) {
  if (!r.measured_tasks || t.kind == TaskKind::kComm) return nullptr;
  for (const MeasuredTaskTime& m : *r.measured_tasks)
    if (same_task(m, t)) return &m;
  return nullptr;
}

WorkShape work_shape(const Task& t, const DeviceRates& r) {
  WorkShape w;
  switch (t.kind) {
    case TaskKind::kComm: return w;
    case TaskKind::kMemory: break;
    case TaskKind::kGemm: {
      const double peak = t.fp4   ? r.fp4_peak_flops_per_s
                          : t.fp8 ? r.fp8_peak_flops_per_s
                                  : r.peak_flops_per_s;
      TRAINPLAN_CHECK(peak > 0) << "task " << t.name << ": no "
                                << (t.fp4 ? "FP4 " : t.fp8 ? "FP8 " : "")
                                << "peak rate (plan_rates checks FP8 plans)";
      w.compute_s = t.executed_flops / (peak * gemm_efficiency_of(r, gemm_direction(t)) *
                                        gemm_shape_efficiency(r, t.m, t.n, t.k, t.batch, true));
      break;
    }
    case TaskKind::kAttention:
      w.compute_s = t.executed_flops / attention_flops_per_s(t, r);
      break;
  }
  if (t.kind != TaskKind::kMemory)
    w.tiles = std::ceil(static_cast<double>(t.m) / r.tile_m) *
              std::ceil(static_cast<double>(t.n) / r.tile_n) *
              static_cast<double>(std::max<std::int64_t>(1, t.batch));
  const double eff = t.kind == TaskKind::kMemory ? memory_efficiency_of(r, t) : r.memory_efficiency;
  w.memory_s = t.bytes / (r.hbm_bytes_per_s * eff);
  if (t.kind == TaskKind::kMemory) w.memory_s += t.transcendentals * r.transcendental_s;
  w.overhead_s = static_cast<double>(t.launches) * r.kernel_overhead_s;
  // A measured time replaces the roofline's total; its compute and memory terms keep their
  // proportion (what contention.h slows), the overhead its fitted size where the measurement
  // leaves room for it.
  if (const MeasuredTaskTime* measured = measured_task_time(t, r)) {
    const double roofline = std::max(w.compute_s, w.memory_s);
    const double rest = measured->time_s - w.overhead_s;
    if (rest <= 0) {
      w.overhead_s = measured->time_s;
      w.compute_s = w.memory_s = 0;
    } else if (roofline > 0) {
      w.compute_s *= rest / roofline;
      w.memory_s *= rest / roofline;
    } else {
      w.memory_s = rest;
    }
  }
  return w;
}

double task_copy_time_s(const Task& t, const DeviceRates& r) {
  if (t.kind == TaskKind::kComm) return 0.0;
  const WorkShape w = work_shape(t, r);
  return std::max(w.compute_s, w.memory_s) + w.overhead_s;
}

double task_time_s(const Task& t, const DeviceRates& r) {
  const double one = task_copy_time_s(t, r);
  return t.repeat == 1 ? one : static_cast<double>(t.repeat) * one;
}

double tp_decomposed_gemm_s(const Task& gemm, const Plan& p, const DeviceRates& r) {
  if (p.tp_comm_overlap_impl != TpOverlapImpl::kTorchAsync || p.tp < 2) return task_time_s(gemm, r);
  return static_cast<double>(p.tp) * task_time_s(tp_decomposed_chunk(gemm, p.tp), r);
}

namespace {
constexpr std::initializer_list<const char*> kMeasuredKinds = {"gemm", "attention", "memory"};

Result<MeasuredTaskTime> measured_task_from_json(const Json& j, const std::string& where) {
  MeasuredTaskTime m;
  JsonReader r(j, where);
  r.get_string("task", m.name, true);
  int kind = 0;
  if (r.get_choice("kind", kind, kMeasuredKinds, true))
    m.kind = kind == 0 ? TaskKind::kGemm : (kind == 1 ? TaskKind::kAttention : TaskKind::kMemory);
  r.get_int("m", m.m, 0, std::int64_t{1} << 40, false);
  r.get_int("n", m.n, 0, std::int64_t{1} << 40, false);
  r.get_int("k", m.k, 0, std::int64_t{1} << 40, false);
  r.get_int("batch", m.batch, 1, std::int64_t{1} << 40, false);
  r.get_double("executed_flops", m.executed_flops, 0, 1e30, false);
  r.get_double("bytes", m.bytes, 0, 1e30, false);
  int kernel = 0;
  if (r.get_choice("memory_kernel", kernel,
                   {"elementwise", "norm", "activation", "softmax", "embedding", "optimizer"},
                   false))
    m.memory_kernel = static_cast<MemoryKernel>(kernel);
  r.get_bool("backward", m.backward, false);
  r.get_bool("fp8", m.fp8, false);
  r.get_bool("fp4", m.fp4, false);
  r.get_bool("causal", m.causal, false);
  r.get_int("launches", m.launches, 0, std::int64_t{1} << 40, false);
  double us = 0;
  if (r.get_double("time_us", us, 1e-6, 1e12, true)) m.time_s = us * kUs;
  r.get_int("samples", m.samples, 1, std::int64_t{1} << 40, false);
  TRAINPLAN_RETURN_IF_ERROR(r.finish());
  return m;
}

Json measured_task_to_json(const MeasuredTaskTime& m) {
  Json j;
  j["task"] = m.name;
  const std::size_t kind = m.kind == TaskKind::kGemm ? 0 : (m.kind == TaskKind::kAttention ? 1 : 2);
  j["kind"] = *(kMeasuredKinds.begin() + kind);
  j["m"] = m.m;
  j["n"] = m.n;
  j["k"] = m.k;
  j["batch"] = m.batch;
  j["executed_flops"] = m.executed_flops;
  j["bytes"] = m.bytes;
  if (m.kind == TaskKind::kMemory) j["memory_kernel"] = std::string(to_string(m.memory_kernel));
  j["backward"] = m.backward;
  j["fp8"] = m.fp8;
  if (m.fp4) j["fp4"] = true;
  j["causal"] = m.causal;
  j["launches"] = m.launches;
  j["time_us"] = m.time_s / kUs;
  j["samples"] = m.samples;
  return j;
}
}  // namespace

Result<HardwareProfile> hardware_profile_from_json(const Json& j, std::string_view source) {
  HardwareProfile p;
  JsonReader r(j, "hardware profile '" + std::string(source) + "'");
  r.accept("schema");
  r.accept("notes");
  r.accept("measurements");
  r.get_string("device", p.device, true);
  r.get_string("date", p.date, true);
  double v = 0;
  if (r.get_double("peak_TFLOPs", v, 1e-9, 1e6, true)) p.rates.peak_flops_per_s = v * kTFLOP;
  if (r.get_double("memory_GBps", v, 1e-9, 1e6, true)) p.rates.hbm_bytes_per_s = v * kGB;
  if (r.get_double("fp8_peak_TFLOPs", v, 1e-9, 1e6, false))
    p.rates.fp8_peak_flops_per_s = v * kTFLOP;
  if (r.get_double("fp4_peak_TFLOPs", v, 1e-9, 1e6, false))
    p.rates.fp4_peak_flops_per_s = v * kTFLOP;
  r.get_double("gemm_efficiency", p.rates.gemm_efficiency, 1e-6, 1.0, true);
  r.get_double("memory_efficiency", p.rates.memory_efficiency, 1e-6, 1.0, true);
  // Profiles written before the directions were measured apart have none of these three:
  // the single figures then apply to every direction (gemm_efficiency_of,
  // attention_efficiency_of).
  r.get_double("gemm_input_gradient_efficiency", p.rates.gemm_input_gradient_efficiency, 1e-6,
               1.0, false);
  r.get_double("gemm_weight_gradient_efficiency", p.rates.gemm_weight_gradient_efficiency, 1e-6,
               1.0, false);
  r.get_double("attention_efficiency", p.rates.attention_efficiency, 1e-6, 10.0, false);
  r.get_double("attention_backward_efficiency", p.rates.attention_backward_efficiency, 1e-6, 10.0,
               false);
  r.get_int("parallel_units", p.rates.sm_count, 1, 1000000, true);
  r.get_double("tile_m", p.rates.tile_m, 1, 4096, false);
  r.get_double("tile_n", p.rates.tile_n, 1, 4096, false);
  r.get_double("k_half", p.rates.k_half, 0, 1e6, false);
  // Profiles written before split-K was modelled have none: off, as they were fitted.
  r.get_bool("split_k", p.rates.split_k, false);
  if (r.get_double("kernel_overhead_us", v, 0, 1e6, false)) p.rates.kernel_overhead_s = v * kUs;
  if (r.get_double("transcendental_ns", v, 0, 1e6, false)) p.rates.transcendental_s = v * kNs;
  if (const Json* by_kernel = r.get_object("memory_efficiency_by_kernel", false)) {
    JsonReader kr(*by_kernel, r.where() + " memory_efficiency_by_kernel");
    for (std::size_t k = 0; k < kMemoryKernelCount; ++k)
      kr.get_double(std::string(to_string(static_cast<MemoryKernel>(k))).c_str(),
                    p.rates.memory_kernel_efficiency[k], 1e-6, 1.0, false);
    TRAINPLAN_RETURN_IF_ERROR(kr.finish());
  }
  // MB (10^6 bytes) like every figure the tools print; the MiB key of earlier profiles is read.
  const bool baseline_mb = r.get_double("baseline_memory_MB", v, 0, 1e9, false);
  if (baseline_mb) p.baseline_memory_bytes = v * kMB;
  if (r.get_double("baseline_memory_MiB", v, 0, 1e9, false)) {
    p.baseline_memory_bytes = v * kMiB;
    if (baseline_mb)
      r.fail_field("baseline_memory_MiB",
                   "the baseline memory is also given as baseline_memory_MB (10^6 bytes); give one");
  }
  r.get_double("rank_compute_spread", p.rank_compute_spread, 0, 1.0, false);
  r.accept("rank_compute_time_factor");  // a list of doubles: checked here
  const auto factor = j.is_object() ? j.find("rank_compute_time_factor") : j.end();
  if (factor != j.end() && !factor->is_null()) {
    const Json* f = &*factor;
    // One entry per rank of the calibration's world, each finite and > 0.
    if (!f->is_array() || f->empty()) {
      r.fail_field("rank_compute_time_factor",
                   "expected a non-empty array with one factor per rank, got " +
                       json_value_for_message(*f));
    } else {
      for (std::size_t i = 0; i < f->size(); ++i) {
        const Json& e = (*f)[i];
        const double x = e.is_number() ? e.get<double>() : 0.0;
        if (!e.is_number() || !std::isfinite(x) || x <= 0) {
          std::string why = "entry ";
          why += std::to_string(i);
          why += " is ";
          why += json_value_for_message(e);
          why += ": each rank's compute time factor must be a finite number > 0";
          r.fail_field("rank_compute_time_factor", why);
          break;
        }
        p.rank_compute_time_factor.push_back(x);
      }
    }
  }
  r.accept("measured_tasks");  // a list of objects: read here
  const auto measured = j.is_object() ? j.find("measured_tasks") : j.end();
  if (measured != j.end() && !measured->is_null()) {
    if (!measured->is_array()) {
      r.fail_field("measured_tasks", "expected an array of measured task times, got " +
                                         json_value_for_message(*measured));
    } else {
      auto table = std::make_shared<std::vector<MeasuredTaskTime>>();
      for (std::size_t i = 0; i < measured->size() && !r.failed(); ++i) {
        auto entry = measured_task_from_json(
            (*measured)[i], r.where() + " measured_tasks[" + std::to_string(i) + "]");
        if (!entry.ok()) return entry.status();
        table->push_back(*entry);
      }
      if (!table->empty()) p.rates.measured_tasks = std::move(table);
    }
  }
  if (const Json* links = r.get_object("links", false)) {
    JsonReader lr(*links, r.where() + " links");
    p.has_links = true;
    if (lr.get_double("intra_node_GBps", v, 1e-9, 1e6, true)) p.intra_node_bytes_per_s = v * kGB;
    if (lr.get_double("intra_node_latency_us", v, 0, 1e7, true)) p.intra_node_latency_s = v * kUs;
    p.inter_node_bytes_per_s = p.intra_node_bytes_per_s;
    p.inter_node_latency_s = p.intra_node_latency_s;
    if (lr.get_double("inter_node_GBps", v, 1e-9, 1e6, false)) p.inter_node_bytes_per_s = v * kGB;
    if (lr.get_double("inter_node_latency_us", v, 0, 1e7, false)) p.inter_node_latency_s = v * kUs;
    // The rendezvous protocol: both keys or neither.
    const bool limit = lr.get_double("eager_limit_bytes", v, 1, 1e12, false);
    if (limit) p.eager_limit_bytes = static_cast<std::int64_t>(std::llround(v));
    const bool rendezvous = lr.get_double("rendezvous_latency_us", v, 0, 1e7, false);
    if (rendezvous) p.rendezvous_latency_s = v * kUs;
    if (limit != rendezvous)
      lr.fail_field(limit ? "rendezvous_latency_us" : "eager_limit_bytes",
                    std::string("missing: it goes with ") +
                        (limit ? "eager_limit_bytes" : "rendezvous_latency_us") +
                        " (an MPI rendezvous protocol needs both)");
    TRAINPLAN_RETURN_IF_ERROR(lr.finish());
  }
  TRAINPLAN_RETURN_IF_ERROR(r.finish());
  return p;
}

Json hardware_profile_to_json(const HardwareProfile& p) {
  Json j;
  j["schema"] = "trainplan.hardware/1";
  j["device"] = p.device;
  j["date"] = p.date;
  j["peak_TFLOPs"] = p.rates.peak_flops_per_s / kTFLOP;
  j["memory_GBps"] = p.rates.hbm_bytes_per_s / kGB;
  if (p.rates.fp8_peak_flops_per_s > 0) j["fp8_peak_TFLOPs"] = p.rates.fp8_peak_flops_per_s / kTFLOP;
  if (p.rates.fp4_peak_flops_per_s > 0)
    j["fp4_peak_TFLOPs"] = p.rates.fp4_peak_flops_per_s / kTFLOP;
  j["gemm_efficiency"] = p.rates.gemm_efficiency;
  j["memory_efficiency"] = p.rates.memory_efficiency;
  if (p.rates.gemm_input_gradient_efficiency > 0)
    j["gemm_input_gradient_efficiency"] = p.rates.gemm_input_gradient_efficiency;
  if (p.rates.gemm_weight_gradient_efficiency > 0)
    j["gemm_weight_gradient_efficiency"] = p.rates.gemm_weight_gradient_efficiency;
  j["attention_efficiency"] = p.rates.attention_efficiency;
  if (p.rates.attention_backward_efficiency > 0)
    j["attention_backward_efficiency"] = p.rates.attention_backward_efficiency;
  Json by_kernel = Json::object();
  for (std::size_t k = 0; k < kMemoryKernelCount; ++k)
    if (p.rates.memory_kernel_efficiency[k] > 0)
      by_kernel[std::string(to_string(static_cast<MemoryKernel>(k)))] =
          p.rates.memory_kernel_efficiency[k];
  if (!by_kernel.empty()) j["memory_efficiency_by_kernel"] = by_kernel;
  j["parallel_units"] = p.rates.sm_count;
  j["tile_m"] = p.rates.tile_m;
  j["tile_n"] = p.rates.tile_n;
  j["k_half"] = p.rates.k_half;
  if (p.rates.split_k) j["split_k"] = true;
  j["kernel_overhead_us"] = p.rates.kernel_overhead_s / kUs;
  if (p.rates.transcendental_s > 0) j["transcendental_ns"] = p.rates.transcendental_s / kNs;
  j["baseline_memory_MB"] = p.baseline_memory_bytes / kMB;
  j["rank_compute_spread"] = p.rank_compute_spread;
  if (!p.rank_compute_time_factor.empty()) j["rank_compute_time_factor"] = p.rank_compute_time_factor;
  if (p.rates.measured_tasks && !p.rates.measured_tasks->empty()) {
    Json table = Json::array();
    for (const MeasuredTaskTime& m : *p.rates.measured_tasks)
      table.push_back(measured_task_to_json(m));
    j["measured_tasks"] = table;
  }
  if (p.has_links) {
    j["links"] = {{"intra_node_GBps", p.intra_node_bytes_per_s / kGB},
                  {"intra_node_latency_us", p.intra_node_latency_s / kUs},
                  {"inter_node_GBps", p.inter_node_bytes_per_s / kGB},
                  {"inter_node_latency_us", p.inter_node_latency_s / kUs}};
    if (p.eager_limit_bytes > 0) {
      j["links"]["eager_limit_bytes"] = p.eager_limit_bytes;
      j["links"]["rendezvous_latency_us"] = p.rendezvous_latency_s / kUs;
    }
  }
  return j;
}

bool has_uneven_rank_speeds(const HardwareProfile& p) {
  for (double f : p.rank_compute_time_factor)
    if (f != 1.0) return true;
  return false;
}

double rank_compute_time_factor(const HardwareProfile& p, std::int64_t rank) {
  if (rank < 0 || rank >= static_cast<std::int64_t>(p.rank_compute_time_factor.size())) return 1.0;
  return p.rank_compute_time_factor[static_cast<std::size_t>(rank)];
}

void apply_profile_links(const HardwareProfile& p, ClusterSpec& c) {
  if (!p.has_links) return;
  c.intra_node_bytes_per_s = p.intra_node_bytes_per_s;
  c.intra_node_latency_s = p.intra_node_latency_s;
  c.inter_node_bytes_per_s = p.inter_node_bytes_per_s;
  c.inter_node_latency_s = p.inter_node_latency_s;
  c.eager_limit_bytes = p.eager_limit_bytes;
  c.rendezvous_latency_s = p.rendezvous_latency_s;
  // A measured profile fitted one alpha-beta line to its timings (one protocol, whatever the
  // library ran): it replaces NCCL's model rather than feeding it.
  c.collective_model = CollectiveModel::kAlphaBeta;
}

Result<DeviceRates> plan_rates(const Plan& plan, const GpuSpec& gpu,
                               const std::optional<HardwareProfile>& hardware) {
  if (!hardware && gpu.peak_flops_per_s(plan.precision) <= 0)
    return Status::Error("precision " + std::string(to_string(plan.precision)) + ": " + gpu.name +
                             " has no " + std::string(to_string(plan.precision)) +
                             " rate (a GPU without bf16 tensor cores, as Volta: use precision "
                             "fp16)",
                         ExitCode::kInfeasible);
  DeviceRates r = hardware ? hardware->rates : device_rates(gpu, plan.precision);
  if (r.fp8_peak_flops_per_s <= 0) r.fp8_peak_flops_per_s = gpu.peak_fp8_flops_per_s;
  if (r.fp4_peak_flops_per_s <= 0) r.fp4_peak_flops_per_s = gpu.peak_fp4_flops_per_s;
  if (plan.attention_kernel != AttentionKernel::kGeneric) {
    const std::string kernel(to_string(plan.attention_kernel));
    if (hardware)
      return Status::Error("attention_kernel=" + kernel + ": a measured hardware profile ('" +
                               hardware->device + "') times attention at its own fitted rate; "
                               "use attention_kernel=generic with --hardware",
                           ExitCode::kInfeasible);
    if (!attention_kernel_rate(gpu.architecture, plan.attention_kernel, false, true, 4096))
      return Status::Error("attention_kernel=" + kernel + ": no published " + kernel +
                               " rates for " + gpu.name + " (architecture '" +
                               (gpu.architecture.empty() ? "unknown" : gpu.architecture) +
                               "'); published rates exist for hopper (H100, H800, H200) and, "
                               "for flash2 and cudnn, blackwell (B200, GB200) and "
                               "blackwell-ultra (B300, GB300), and for flash2 and flash1, "
                               "ampere (A100); use attention_kernel=generic",
                           ExitCode::kInfeasible);
    r.attention_kernel = plan.attention_kernel;
    r.architecture = gpu.architecture;
  }
  if (plan.fp8_attention &&
      (hardware || !attention_kernel_rate(gpu.architecture, plan.attention_kernel, false, true,
                                          4096, true)))
    return Status::Error(
        "fp8_attention: no published FP8 rate for attention_kernel=" +
            std::string(to_string(plan.attention_kernel)) + " on " +
            (hardware ? "the hardware profile of '" + hardware->device + "'" : gpu.name) +
            "; one is published for cudnn on blackwell (B200) and "
            "blackwell-ultra (GB300)",
        ExitCode::kInfeasible);
  if (plan.fp8 && plan.fp8_scaling == Fp8Scaling::kNvfp4 && r.fp4_peak_flops_per_s <= 0)
    return Status::Error("fp8_scaling nvfp4: " +
                             (hardware ? "the hardware profile of '" + hardware->device + "'"
                                       : gpu.name) +
                             " has no FP4 tensor-core rate (NVFP4 needs Blackwell: B200)",
                         ExitCode::kInfeasible);
  if (plan.fp8 && r.fp8_peak_flops_per_s <= 0)
    return Status::Error("fp8: " + (hardware ? "the hardware profile of '" + hardware->device + "'"
                                             : gpu.name) +
                             " has no FP8 tensor-core rate (FP8 needs Hopper or newer: H100, "
                             "H200, B200)",
                         ExitCode::kInfeasible);
  return r;
}

}  // namespace trainplan
