// Published attention kernel rates (core/cost/attention_rates.h) and how the cost model times a
// fused attention task with them: the paper's bars, interpolation, the causal backward, scaling
// to another part's peak, FlashAttention-2 on Blackwell and Ampere, cuDNN on Blackwell, the plan
// field and every refusal.
#include "core/cost/attention_rates.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/cluster_spec.h"
#include "core/cost/compute_model.h"
#include "core/cost/cost_model.h"
#include "core/units.h"
#include "tests/core/test_util.h"

namespace trainplan {
namespace {

double tflops(AttentionKernel k, bool backward, std::int64_t seq) {
  const auto r = attention_kernel_rate("hopper", k, backward, true, seq);
  EXPECT_TRUE(r.has_value());
  return r ? r->flops_per_s / kTFLOP : 0.0;
}

TEST(AttentionRates, ForwardIsThePapersCausalBar) {
  // arXiv:2407.08608 Fig. 5, head dim 128, causal: FA2 333, cuDNN 529, FA3 602 at 8k.
  EXPECT_DOUBLE_EQ(tflops(AttentionKernel::kFlash2, false, 8192), 333);
  EXPECT_DOUBLE_EQ(tflops(AttentionKernel::kCudnn, false, 8192), 529);
  EXPECT_DOUBLE_EQ(tflops(AttentionKernel::kFlash3, false, 8192), 602);
  EXPECT_DOUBLE_EQ(attention_kernel_rate("hopper", AttentionKernel::kFlash2, false, true, 512)
                       ->measured_peak_flops_per_s,
                   989.4 * kTFLOP);
}

TEST(AttentionRates, InterpolatesOnLogLengthAndHoldsTheEnds) {
  // Halfway between 2k (298) and 4k (319) in log2: 2896 tokens.
  EXPECT_NEAR(tflops(AttentionKernel::kFlash2, false, 2896), (298 + 319) / 2.0, 0.1);
  EXPECT_DOUBLE_EQ(tflops(AttentionKernel::kFlash2, false, 128), 191);
  EXPECT_DOUBLE_EQ(tflops(AttentionKernel::kFlash2, false, 1 << 20), 335);
}

TEST(AttentionRates, CausalBackwardScalesTheUnmaskedBarByTheForwardsRatio) {
  // Fig. 6 (no mask) FA2 318 at 8k, times Fig. 5's causal/unmasked 333/370.
  EXPECT_NEAR(tflops(AttentionKernel::kFlash2, true, 8192), 318.0 * 333.0 / 370.0, 1e-9);
  EXPECT_NEAR(tflops(AttentionKernel::kCudnn, true, 4096), 499.0 * 518.0 / 609.0, 1e-9);
}

TEST(AttentionRates, UnmaskedStepsTakeThePapersUnmaskedBars) {
  // A context-parallel ring step on another rank's keys (Task::causal false): Fig. 5's unmasked
  // forward (FA2 370 at 8k) and Fig. 6's backward as published (FA2 318 at 8k).
  auto unmasked = [](AttentionKernel k, bool backward, std::int64_t seq) {
    return attention_kernel_rate("hopper", k, backward, false, seq)->flops_per_s / kTFLOP;
  };
  EXPECT_DOUBLE_EQ(unmasked(AttentionKernel::kFlash2, false, 8192), 370);
  EXPECT_DOUBLE_EQ(unmasked(AttentionKernel::kFlash2, true, 8192), 318);
  EXPECT_DOUBLE_EQ(unmasked(AttentionKernel::kCudnn, false, 16384), 595);
  EXPECT_FALSE(attention_kernel_rate("volta", AttentionKernel::kFlash2, true, false, 4096));
}

// A kernel's published rate in TFLOP/s on `architecture`; a missing rate fails the test.
double published_tflops(const char* architecture, AttentionKernel kernel, bool backward,
                        bool causal, std::int64_t seq) {
  const auto r = attention_kernel_rate(architecture, kernel, backward, causal, seq);
  EXPECT_TRUE(r.has_value()) << architecture;
  return r ? r->flops_per_s / kTFLOP : 0.0;
}

TEST(AttentionRates, BlackwellFlash2IsTheMeasuredB200ForwardInHoppersShape) {
  // meta-pytorch/tritonbench PR 171: FA2 forward, no mask, head dim 128, on a B200: 361.591 at 8k.
  auto rate = [](bool backward, bool causal, std::int64_t seq) {
    return published_tflops("blackwell", AttentionKernel::kFlash2, backward, causal, seq);
  };
  EXPECT_DOUBLE_EQ(rate(false, false, 8192), 361.591);
  EXPECT_DOUBLE_EQ(rate(false, false, 512), 245.259);
  EXPECT_DOUBLE_EQ(rate(false, false, 1 << 20), 330.587);
  // The causal forward and the backward in Hopper FA2's shape (arXiv:2407.08608 Fig. 5-6 at 8k:
  // causal 333, unmasked 370, backward 318).
  EXPECT_NEAR(rate(false, true, 8192), 361.591 * 333.0 / 370.0, 1e-9);
  EXPECT_NEAR(rate(true, false, 8192), 361.591 * 318.0 / 370.0, 1e-9);
  EXPECT_NEAR(rate(true, true, 8192), 361.591 * 318.0 / 370.0 * 333.0 / 370.0, 1e-9);
  EXPECT_DOUBLE_EQ(attention_kernel_rate("blackwell", AttentionKernel::kFlash2, false, true, 512)
                       ->measured_peak_flops_per_s,
                   2250 * kTFLOP);
  // FA2 and cuDNN are published on Blackwell, FA3 is not.
  EXPECT_TRUE(attention_kernel_rate("blackwell", AttentionKernel::kCudnn, false, true, 4096));
  EXPECT_FALSE(attention_kernel_rate("blackwell", AttentionKernel::kFlash3, false, true, 4096));
  EXPECT_FALSE(attention_kernel_rate("blackwell", AttentionKernel::kGeneric, false, true, 4096));
}

TEST(AttentionRates, BlackwellCudnnIsTheMeasuredB200CausalTable) {
  // cudnn-frontend's sdpa_bf16_benchmark_results_NVIDIA_B200.csv (pyt_cudnn, causal, head dim
  // 128): 1171.278 forward and 942.509 backward TFLOP/s at 8k, 83.991 / 134.164 at 512.
  auto rate = [](bool backward, bool causal, std::int64_t seq) {
    return published_tflops("blackwell", AttentionKernel::kCudnn, backward, causal, seq);
  };
  EXPECT_DOUBLE_EQ(rate(false, true, 8192), 1171.278);
  EXPECT_NEAR(rate(true, true, 8192), 942.509, 1e-9);
  EXPECT_DOUBLE_EQ(rate(false, true, 512), 83.991);
  EXPECT_NEAR(rate(true, true, 512), 134.164, 1e-9);
  EXPECT_DOUBLE_EQ(rate(false, true, 1 << 20), 1332.415);
  // Between published lengths: linear in log2 of the length (6k is 0.585 of the way to 8k).
  const double f = std::log2(6144.0 / 4096.0);
  EXPECT_NEAR(rate(false, true, 6144), 855.678 + f * (1171.278 - 855.678), 1e-9);
  // Unmasked: in Hopper cuDNN's shape (arXiv:2407.08608 Fig. 5 at 8k: 600 unmasked, 529 causal).
  EXPECT_NEAR(rate(false, false, 8192), 1171.278 * 600.0 / 529.0, 1e-9);
  EXPECT_NEAR(rate(true, false, 8192), 942.509 * 600.0 / 529.0, 1e-9);
  EXPECT_DOUBLE_EQ(attention_kernel_rate("blackwell", AttentionKernel::kCudnn, true, true, 4096)
                       ->measured_peak_flops_per_s,
                   2250 * kTFLOP);
  // cuDNN on B200 is 3.6x FA2's B200 causal forward at 8k (325): the two are different kernels.
  EXPECT_GT(rate(false, true, 8192),
            2.5 * attention_kernel_rate("blackwell", AttentionKernel::kFlash2, false, true, 8192)
                      ->flops_per_s / kTFLOP);
}

// Blackwell Ultra (GB300, B300): cudnn-frontend's sdpa_bf16_benchmark_results_NVIDIA_GB300.csv
// beside the B200's at bb37575d (pyt_cudnn, causal, head dim 128): 1495.674 forward and 1130.076
// backward at 8k, measured at the GB300's 2,500 TFLOP/s peak; FA2 is the B200 die's.
TEST(AttentionRates, BlackwellUltraCudnnIsTheMeasuredGb300CausalTable) {
  auto rate = [](bool backward, bool causal, std::int64_t seq) {
    return published_tflops("blackwell-ultra", AttentionKernel::kCudnn, backward, causal, seq);
  };
  EXPECT_DOUBLE_EQ(rate(false, true, 8192), 1495.674);
  EXPECT_NEAR(rate(true, true, 8192), 1130.076, 1e-9);
  EXPECT_DOUBLE_EQ(rate(false, true, 512), 54.923);
  EXPECT_DOUBLE_EQ(rate(false, true, 1 << 20), 1702.463);
  EXPECT_NEAR(rate(false, false, 8192), 1495.674 * 600.0 / 529.0, 1e-9);
  EXPECT_DOUBLE_EQ(
      attention_kernel_rate("blackwell-ultra", AttentionKernel::kCudnn, true, true, 4096)
          ->measured_peak_flops_per_s,
      2500 * kTFLOP);
  // Faster than the B200's series scaled by the peak, forward and backward, at 4k and up.
  for (std::int64_t seq : {4096, 8192, 16384})
    for (bool backward : {false, true})
      EXPECT_GT(
          rate(backward, true, seq),
          published_tflops("blackwell", AttentionKernel::kCudnn, backward, true, seq) * 2500 / 2250)
          << seq << " " << backward;
  // FP8: the GB300 run's own ratio (2073.580 / 1716.056 forward, 1513.772 / 1150.498 backward).
  const auto fp8 = [](bool backward) {
    return attention_kernel_rate("blackwell-ultra", AttentionKernel::kCudnn, backward, true, 8192,
                                 true)
               ->flops_per_s /
           kTFLOP;
  };
  EXPECT_NEAR(fp8(false), 1495.674 * 2073.580 / 1716.056, 1e-9);
  EXPECT_NEAR(fp8(true), 1130.076 * 1513.772 / 1150.498, 1e-9);
  // FlashAttention-2 as on the B200 die; FA3 and FA1 unpublished.
  EXPECT_DOUBLE_EQ(
      published_tflops("blackwell-ultra", AttentionKernel::kFlash2, false, false, 8192), 361.591);
  EXPECT_FALSE(
      attention_kernel_rate("blackwell-ultra", AttentionKernel::kFlash3, false, true, 4096));
  EXPECT_FALSE(
      attention_kernel_rate("blackwell-ultra", AttentionKernel::kFlash2, false, true, 4096, true));
}

TEST(AttentionRates, AmpereFlash2KeepsTheMeasuredForwardBackwardPairRate) {
  // The flash-attention README's A100 figure (arXiv:2307.08691 Fig. 4, head dim 128): forward +
  // backward at 189 TFLOP/s causal and 203 unmasked at 16k, 155 and 187 at 2k. A pair is one
  // forward of F FLOPs and one backward of 2.5 F; its time at the split rates is 3.5 F / pair rate.
  auto rate = [](bool backward, bool causal, std::int64_t seq) {
    return published_tflops("ampere", AttentionKernel::kFlash2, backward, causal, seq);
  };
  auto pair_rate = [&](bool causal, std::int64_t seq) {
    return 3.5 / (1.0 / rate(false, causal, seq) + 2.5 / rate(true, causal, seq));
  };
  EXPECT_NEAR(pair_rate(true, 16384), 189, 1e-9);
  EXPECT_NEAR(pair_rate(false, 16384), 203, 1e-9);
  EXPECT_NEAR(pair_rate(true, 2048), 155, 1e-9);
  EXPECT_NEAR(pair_rate(false, 2048), 187, 1e-9);
  EXPECT_NEAR(pair_rate(true, 512), 99, 1e-9);
  // The split follows Hopper FA2's backward / forward ratio at the same length (318 / 370 at 8k).
  EXPECT_NEAR(rate(true, false, 8192) / rate(false, false, 8192), 318.0 / 370.0, 1e-12);
  EXPECT_DOUBLE_EQ(attention_kernel_rate("ampere", AttentionKernel::kFlash2, false, true, 512)
                       ->measured_peak_flops_per_s,
                   312 * kTFLOP);
  // Only FA2 and FA1 (Flash1KeepsThePublishedPairRatesOnAmpereAndHopper) on Ampere.
  EXPECT_FALSE(attention_kernel_rate("ampere", AttentionKernel::kCudnn, false, true, 4096));
  EXPECT_FALSE(attention_kernel_rate("ampere", AttentionKernel::kFlash3, false, true, 4096));
}

TEST(AttentionRates, Flash1KeepsThePublishedPairRatesOnAmpereAndHopper) {
  // FlashAttention-1's bars in the flash-attention repository's FA2 figures, head dim 128:
  // assets/flash2_a100_fwd_bwd_benchmark.png (A100 80GB SXM4) and
  // assets/flash2_h100_fwd_bwd_benchmark.png (H100 80GB SXM5), forward + backward.
  auto pair_rate = [](const char* arch, bool causal, std::int64_t seq) {
    auto rate = [&](bool backward) {
      return published_tflops(arch, AttentionKernel::kFlash1, backward, causal, seq);
    };
    return 3.5 / (1.0 / rate(false) + 2.5 / rate(true));
  };
  EXPECT_NEAR(pair_rate("ampere", true, 2048), 69, 1e-9);
  EXPECT_NEAR(pair_rate("ampere", true, 16384), 83, 1e-9);
  EXPECT_NEAR(pair_rate("ampere", false, 1024), 72, 1e-9);
  EXPECT_NEAR(pair_rate("hopper", true, 2048), 108, 1e-9);
  EXPECT_NEAR(pair_rate("hopper", true, 512), 98, 1e-9);
  EXPECT_NEAR(pair_rate("hopper", false, 8192), 137, 1e-9);
  // Measured on the A100 and the H100 SXM5: scaled from their peaks.
  EXPECT_DOUBLE_EQ(attention_kernel_rate("ampere", AttentionKernel::kFlash1, false, true, 512)
                       ->measured_peak_flops_per_s,
                   312 * kTFLOP);
  EXPECT_DOUBLE_EQ(attention_kernel_rate("hopper", AttentionKernel::kFlash1, true, true, 512)
                       ->measured_peak_flops_per_s,
                   989.4 * kTFLOP);
  // Slower than FlashAttention-2 at every published point of the same figure (265 at 2k causal
  // on H100); the split is FA2's Hopper shape, as for FA2 on Ampere.
  EXPECT_LT(published_tflops("hopper", AttentionKernel::kFlash1, false, true, 2048),
            published_tflops("hopper", AttentionKernel::kFlash2, false, true, 2048));
  auto rate = [](bool backward) {
    return published_tflops("ampere", AttentionKernel::kFlash1, backward, false, 8192);
  };
  EXPECT_NEAR(rate(true) / rate(false), 318.0 / 370.0, 1e-12);
  // Not published on Blackwell.
  EXPECT_FALSE(attention_kernel_rate("blackwell", AttentionKernel::kFlash1, false, true, 4096));
}

// FP8 (Plan::fp8_attention): the bf16 series times cudnn-frontend's FP8 / bf16 ratio measured in
// one B200 run (sdpa_fp8_benchmark_results_NVIDIA_B200.csv at bb37575d): at 8k 1502.114 / 1384.231
// forward and 1254.687 / 994.850 backward, causal; the unmasked rates take the same ratio.
TEST(AttentionRates, BlackwellCudnnFp8IsTheBf16SeriesAtTheMeasuredFp8Ratio) {
  auto rate = [](bool backward, bool causal, std::int64_t seq, bool fp8) {
    const auto r =
        attention_kernel_rate("blackwell", AttentionKernel::kCudnn, backward, causal, seq, fp8);
    EXPECT_TRUE(r.has_value());
    return r ? r->flops_per_s / kTFLOP : 0.0;
  };
  EXPECT_NEAR(rate(false, true, 8192, true), 1171.278 * 1502.114 / 1384.231, 1e-9);
  EXPECT_NEAR(rate(true, true, 8192, true), 942.509 * 1254.687 / 994.850, 1e-9);
  EXPECT_NEAR(rate(false, true, 512, true), 83.991 * 196.081 / 244.143, 1e-9);
  for (std::int64_t seq : {512, 4096, 8192, 1 << 20})  // at published lengths
    for (bool backward : {false, true})
      EXPECT_NEAR(rate(backward, false, seq, true) / rate(backward, true, seq, true),
                  rate(backward, false, seq, false) / rate(backward, true, seq, false), 1e-12);
  EXPECT_GT(rate(true, true, 8192, true), 1.2 * rate(true, true, 8192, false));
  // Published nowhere else.
  EXPECT_FALSE(attention_kernel_rate("hopper", AttentionKernel::kCudnn, false, true, 8192, true));
  EXPECT_FALSE(
      attention_kernel_rate("blackwell", AttentionKernel::kFlash2, false, true, 8192, true));
  EXPECT_FALSE(attention_kernel_rate("ampere", AttentionKernel::kFlash2, true, true, 8192, true));
}

TEST(AttentionRates, NoneOutsideTheirArchitecturesOrForTheGenericModel) {
  EXPECT_FALSE(attention_kernel_rate("volta", AttentionKernel::kFlash2, false, true, 4096));
  EXPECT_FALSE(attention_kernel_rate("", AttentionKernel::kCudnn, false, true, 4096));
  EXPECT_FALSE(attention_kernel_rate("hopper", AttentionKernel::kGeneric, false, true, 4096));
}

// The fused attention tasks of a Llama-like layer at 8k, on one GPU.
struct AttentionCase {
  ModelSpec model = testing::gpt_model(2, 4096, 32, 8192, 32000);
  Plan plan;
  AttentionCase() {
    plan.micro_batch_size = 1;
    plan.global_batch_size = 1;
  }
};

// The rates a plan naming `kernel` runs at on the preset `gpu`.
Result<DeviceRates> rates_for(AttentionKernel kernel, const char* gpu) {
  Plan plan;
  plan.attention_kernel = kernel;
  auto g = gpu_preset(gpu);
  EXPECT_TRUE(g.ok()) << gpu;
  return plan_rates(plan, *g, std::nullopt);
}

const Task& task_named(const std::vector<Task>& tasks, std::string_view name) {
  for (const Task& t : tasks)
    if (t.name == name) return t;
  ADD_FAILURE() << "no task " << name;
  return tasks.front();
}

TEST(AttentionRates, TaskTimeIsExecutedFlopsAtTheScaledRate) {
  AttentionCase c;
  auto rates = rates_for(AttentionKernel::kFlash2, "H100-96GB");
  ASSERT_TRUE(rates.ok()) << rates.status().message();
  const std::vector<Task> forward = layer_forward_tasks(c.model, c.plan);
  const std::vector<Task> backward = layer_backward_tasks(c.model, c.plan);
  const Task& fwd = task_named(forward, "attention");
  const Task& bwd = task_named(backward, "attention_bwd");
  EXPECT_FALSE(fwd.backward);
  EXPECT_TRUE(bwd.backward);
  // The 96 GB part's peak (the H100 die at 500 W, at_power_limit) against the measured SXM5's.
  const double scale = gpu_preset("H100-96GB")->peak_bf16_flops_per_s / (989.4 * kTFLOP);
  EXPECT_NEAR(task_time_s(fwd, *rates) - rates->kernel_overhead_s,
              fwd.executed_flops / (333.0 * kTFLOP * scale), 1e-12);
  EXPECT_NEAR(task_time_s(bwd, *rates) - rates->kernel_overhead_s,
              bwd.executed_flops / (318.0 * 333.0 / 370.0 * kTFLOP * scale), 1e-12);
}

// The generic model's own estimate: a fraction of the GEMM rate with the GEMM's shape efficiency.
double generic_estimate(const DeviceRates& r, const Task& t) {
  return r.peak_flops_per_s * r.gemm_efficiency * attention_efficiency_of(r, t.backward) *
         gemm_shape_efficiency(r, t.m, t.n, t.k, t.batch);
}

double task_rate(const Task& t, const DeviceRates& r) {
  return t.executed_flops / (task_time_s(t, r) - r.kernel_overhead_s);
}

TEST(AttentionRates, GenericIsFlooredByTheSlowestPublishedKernelAtItsLength) {
  AttentionCase c;  // 8k keys, causal
  auto generic = rates_for(AttentionKernel::kGeneric, "H100-80GB");
  ASSERT_TRUE(generic.ok()) << generic.status().message();
  EXPECT_EQ(generic->architecture, "hopper");
  const Task fwd = task_named(layer_forward_tasks(c.model, c.plan), "attention");
  const Task bwd = task_named(layer_backward_tasks(c.model, c.plan), "attention_bwd");
  // At 8k FlashAttention-2's causal forward (333 TFLOP/s) and backward (318 x 333/370) are above
  // the generic estimate (0.6 of the GEMM rate, about 250), so the task runs at FA2's rate.
  ASSERT_LT(generic_estimate(*generic, fwd), 333.0 * kTFLOP);
  EXPECT_NEAR(task_rate(fwd, *generic) / kTFLOP, 333.0, 1e-6);
  EXPECT_NEAR(task_rate(bwd, *generic) / kTFLOP, 318.0 * 333.0 / 370.0, 1e-6);
  // At 512 keys FA2's causal forward (191) is below the estimate, which stands.
  Task short_fwd = fwd;
  short_fwd.n = 512;
  ASSERT_GT(generic_estimate(*generic, short_fwd), 191.0 * kTFLOP);
  EXPECT_NEAR(task_rate(short_fwd, *generic) / generic_estimate(*generic, short_fwd), 1.0, 1e-12);
  // The floor follows the length: 16k runs faster than 8k, and without the mask faster again.
  Task long_fwd = fwd;
  long_fwd.n = 16384;
  EXPECT_NEAR(task_rate(long_fwd, *generic) / kTFLOP, 335.0, 1e-6);
  long_fwd.causal = false;
  EXPECT_NEAR(task_rate(long_fwd, *generic) / kTFLOP, 370.0, 1e-6);
}

TEST(AttentionRates, GenericFloorLeavesBlackwellVoltaAndMeasuredProfilesAlone) {
  AttentionCase c;
  const Task fwd = task_named(layer_forward_tasks(c.model, c.plan), "attention");
  // B200: the generic estimate is far above FA2's B200 rate (about its Hopper rate).
  auto b200 = rates_for(AttentionKernel::kGeneric, "B200-192GB");
  ASSERT_TRUE(b200.ok());
  ASSERT_GT(generic_estimate(*b200, fwd), 400.0 * kTFLOP);
  EXPECT_NEAR(task_rate(fwd, *b200) / generic_estimate(*b200, fwd), 1.0, 1e-12);
  // V100 (fp16: it has no bf16 rate): no published rates.
  Plan fp16;
  fp16.precision = Precision::kFp16;
  auto v100 = plan_rates(fp16, *gpu_preset("V100-32GB"), std::nullopt);
  ASSERT_TRUE(v100.ok()) << v100.status().message();
  EXPECT_NEAR(task_rate(fwd, *v100) / generic_estimate(*v100, fwd), 1.0, 1e-12);
  // A measured profile has no architecture: its fitted rate stands, even below FA2's.
  auto h100 = gpu_preset("H100-80GB");
  ASSERT_TRUE(h100.ok());
  HardwareProfile profile;
  profile.device = "measured";
  profile.rates = device_rates(*h100, Precision::kBf16);
  profile.rates.architecture.clear();
  auto measured = plan_rates(c.plan, *h100, profile);
  ASSERT_TRUE(measured.ok());
  EXPECT_NEAR(task_rate(fwd, *measured) / generic_estimate(*measured, fwd), 1.0, 1e-12);
  EXPECT_LT(task_rate(fwd, *measured), 333.0 * kTFLOP);
}

TEST(AttentionRates, B200RunsFlash2AndCudnnAtTheirMeasuredRatesAndRefusesFlash3) {
  AttentionCase c;
  auto rates = rates_for(AttentionKernel::kFlash2, "B200-192GB");
  ASSERT_TRUE(rates.ok()) << rates.status().message();
  const std::vector<Task> forward = layer_forward_tasks(c.model, c.plan);
  const Task& fwd = task_named(forward, "attention");
  // The B200 preset is the part the forward was measured on: no scaling.
  EXPECT_NEAR(task_time_s(fwd, *rates) - rates->kernel_overhead_s,
              fwd.executed_flops / (361.591 * 333.0 / 370.0 * kTFLOP), 1e-12);
  auto flash3 = rates_for(AttentionKernel::kFlash3, "B200-192GB");
  ASSERT_FALSE(flash3.ok());
  EXPECT_NE(flash3.status().message().find("B200-192GB (architecture 'blackwell')"),
            std::string::npos);
  // cuDNN's B200 rates are published (BlackwellCudnnIsTheMeasuredB200CausalTable): accepted.
  auto cudnn = rates_for(AttentionKernel::kCudnn, "B200-192GB");
  ASSERT_TRUE(cudnn.ok()) << cudnn.status().message();
  EXPECT_NEAR(task_time_s(fwd, *cudnn) - cudnn->kernel_overhead_s,
              fwd.executed_flops / (1171.278 * kTFLOP), 1e-12);
}

TEST(AttentionRates, PlanRatesRefusesAKernelWithoutPublishedRates) {
  auto r = rates_for(AttentionKernel::kFlash3, "A100-80GB");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("attention_kernel=flash3"), std::string::npos);
  EXPECT_NE(r.status().message().find("A100-80GB (architecture 'ampere')"), std::string::npos);
  // FlashAttention-1 is published on Ampere and Hopper only.
  r = rates_for(AttentionKernel::kFlash1, "B200-192GB");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("attention_kernel=flash1: no published flash1 rates for "
                                      "B200-192GB (architecture 'blackwell')"),
            std::string::npos)
      << r.status().message();
  EXPECT_TRUE(rates_for(AttentionKernel::kFlash1, "A100-80GB").ok());
  // A custom GPU without a base preset has no architecture.
  GpuSpec custom = *gpu_preset("A100-80GB");
  custom.name = "mine";
  custom.architecture.clear();
  Plan plan;
  plan.attention_kernel = AttentionKernel::kFlash3;
  r = plan_rates(plan, custom, std::nullopt);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("architecture 'unknown'"), std::string::npos);
}

TEST(AttentionRates, PlanRatesRefusesAKernelWithAMeasuredProfile) {
  AttentionCase c;
  c.plan.attention_kernel = AttentionKernel::kCudnn;
  auto h100 = gpu_preset("H100-80GB");
  ASSERT_TRUE(h100.ok());
  HardwareProfile profile;
  profile.device = "cpu: test";
  profile.rates = device_rates(*h100, Precision::kBf16);
  auto r = plan_rates(c.plan, *h100, profile);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("attention_kernel=cudnn: a measured hardware profile"),
            std::string::npos);
}

TEST(AttentionRates, PresetsKnowTheirDie) {
  for (const char* hopper : {"H100-80GB", "H800-80GB", "H100-96GB", "H200-141GB"})
    EXPECT_EQ(gpu_preset(hopper)->architecture, "hopper") << hopper;
  EXPECT_EQ(gpu_preset("A100-40GB")->architecture, "ampere");
  EXPECT_EQ(gpu_preset("B200-192GB")->architecture, "blackwell");
  EXPECT_EQ(gpu_preset("GB200-186GB")->architecture, "blackwell");
  for (const char* ultra : {"GB300-288GB", "B300-270GB"})
    EXPECT_EQ(gpu_preset(ultra)->architecture, "blackwell-ultra") << ultra;
  EXPECT_EQ(gpu_preset("V100-32GB")->architecture, "volta");
}

}  // namespace
}  // namespace trainplan
