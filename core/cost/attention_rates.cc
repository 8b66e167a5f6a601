// Published attention kernel rates; see attention_rates.h.
#include "core/cost/attention_rates.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "core/units.h"

namespace trainplan {

namespace {

constexpr std::size_t kLengths = 6;
// The published sequence lengths: 512, 1k, 2k, 4k, 8k, 16k.
constexpr std::array<double, kLengths> kSeqLen = {512, 1024, 2048, 4096, 8192, 16384};

// A kernel's TFLOP/s by length. Hopper: on H100 SXM5 (989.4 TFLOP/s dense bf16), head dim 128,
// as printed on the bars of arXiv:2407.08608: Fig. 5 "Attention forward speed, head dim 128"
// with and without the causal mask, and Fig. 6 "Attention backward speed, head dim 128" (no
// mask).
struct KernelSeries {
  std::array<double, kLengths> forward_causal;
  std::array<double, kLengths> forward;
  std::array<double, kLengths> backward;
};
constexpr KernelSeries kHopperFlash2 = {{191, 260, 298, 319, 333, 335},
                                        {309, 350, 362, 368, 370, 370},
                                        {214, 260, 291, 310, 318, 322}};
constexpr KernelSeries kHopperCudnn = {{315, 410, 484, 518, 529, 539},
                                       {497, 574, 617, 609, 600, 595},
                                       {305, 408, 465, 499, 518, 516}};
constexpr KernelSeries kHopperFlash3 = {{292, 423, 521, 579, 602, 616},
                                        {467, 565, 625, 638, 646, 648},
                                        {316, 424, 501, 542, 559, 561}};
constexpr double kH100SxmPeakTflops = 989.4;

// FlashAttention-2 on Blackwell (B200, 2,250 TFLOP/s dense bf16). FA2's kernels use Ampere's
// warp-level MMA (flash-attention csrc/flash_attn/src/kernel_traits.h: SM80_16x8x16 MMA atoms for
// sm80 and up), not Blackwell's own tensor-core instructions, and run on a B200 at about their H100
// rate, far below the part's peak. The forward without the mask, head dim 128, measured on a B200
// by tritonbench (meta-pytorch/tritonbench PR 171, 2025-03-04: `run.py --op flash_attention
// --metrics tflops --only flash_v2 --batch 8 --n-heads 16 --d-head 128`, its printed table at 512
// to 16k tokens; the operator's defaults are the forward, tritonbench/utils/parser.py `--mode fwd`,
// and no mask, operators/flash_attention/operator.py `--causal` off; its `flops` metric is
// attention_rates.h's convention, 4*b*s^2*h*d per forward). flash-attention issue 1589 (2025-04-13,
// flash_attn 2.7.4.post1 on a B200, benchmarks/benchmark_flash_attention.py) shows the same level
// at head dim 64 without the mask: 307-381 TFLOP/s forward, 243-334 backward. No causal forward or
// backward at head dim 128 is published for B200: each is taken in the same kernel's Hopper shape,
// the unmasked B200 forward times kHopperFlash2's ratio to its unmasked forward at the same length
// (an assumption, said in docs/inputs.md).
constexpr std::array<double, kLengths> kBlackwellFlash2Forward = {245.259, 315.111, 352.104,
                                                                  353.912, 361.591, 330.587};
constexpr double kB200PeakTflops = 2250;

KernelSeries blackwell_flash2() {
  KernelSeries s{};
  for (std::size_t i = 0; i < kLengths; ++i) {
    const double f = kBlackwellFlash2Forward[i];
    s.forward[i] = f;
    s.forward_causal[i] = f * kHopperFlash2.forward_causal[i] / kHopperFlash2.forward[i];
    s.backward[i] = f * kHopperFlash2.backward[i] / kHopperFlash2.forward[i];
  }
  return s;
}

// cuDNN's fused attention on Blackwell (B200, 2,250 TFLOP/s dense bf16): NVIDIA's own measurement,
// cudnn-frontend benchmark/sdpa_benchmark_training/artifacts/
// sdpa_bf16_benchmark_results_NVIDIA_B200.csv (commit bb37575d; NGC PyTorch 25.09 with cuDNN
// 9.13.0 on a B200, sample_b200_bf16_run.txt beside it), backend pyt_cudnn: bf16, causal, head dim
// 128, batch 1, 128 query and 8 KV heads (Llama 3.1 405B's attention), 512 to 128k tokens; forward
// and backward TFLOP/s in this file's convention (4*b*s^2*h*d per forward, halved for causal, 2.5x
// for the backward: the table's times give 2.2e12 and 5.5e12 FLOPs at 8k). Only the causal mask is
// published; the unmasked forward and backward are taken in Hopper cuDNN's shape (its unmasked /
// causal forward ratio at the same length, an assumption said in docs/inputs.md), which keeps the
// measured causal backward exactly (at_length's causal backward is backward x causal forward /
// forward).
constexpr std::array<double, kLengths> kBlackwellCudnnForwardCausal = {
    83.991, 254.501, 478.921, 855.678, 1171.278, 1332.415};
constexpr std::array<double, kLengths> kBlackwellCudnnBackwardCausal = {
    134.164, 308.529, 371.486, 701.265, 942.509, 1074.776};

// cuDNN's fused attention on the Blackwell Ultra die (GB300, 2,500 TFLOP/s dense bf16), measured
// by NVIDIA in the same benchmark, commit, container and backend as the B200 series above:
// artifacts/sdpa_bf16_benchmark_results_NVIDIA_GB300.csv at bb37575d (NGC PyTorch 25.09, cuDNN
// 9.13.0, sample_gb300_bf16_run.txt), pyt_cudnn, the same shapes. The die runs attention faster
// than its peak alone says (at 8k 15% forward and 8% backward above the B200's rates scaled to
// 2,500): NVIDIA gives Blackwell Ultra twice the SFU exponential rate for attention ("Inside
// NVIDIA Blackwell Ultra", developer blog, 2025-08). Below 2k the PyTorch path's launch cost
// shows (55 TFLOP/s at 512 against the B200's 84).
constexpr std::array<double, kLengths> kBlackwellUltraCudnnForwardCausal = {
    54.923, 224.233, 593.514, 1144.867, 1495.674, 1702.463};
constexpr std::array<double, kLengths> kBlackwellUltraCudnnBackwardCausal = {
    95.339, 277.209, 487.345, 892.572, 1130.076, 1267.827};
constexpr double kGb300PeakTflops = 2500;

// A measured causal series, with the unmasked forward and backward in Hopper cuDNN's shape.
KernelSeries cudnn_from_causal(const std::array<double, kLengths>& forward_causal,
                               const std::array<double, kLengths>& backward_causal) {
  KernelSeries s{};
  for (std::size_t i = 0; i < kLengths; ++i) {
    const double unmasked_per_causal = kHopperCudnn.forward[i] / kHopperCudnn.forward_causal[i];
    s.forward_causal[i] = forward_causal[i];
    s.forward[i] = forward_causal[i] * unmasked_per_causal;
    s.backward[i] = backward_causal[i] * unmasked_per_causal;
  }
  return s;
}

// cuDNN's FP8 fused attention on Blackwell against its bf16 one, measured in the same run:
// cudnn-frontend benchmark/sdpa_benchmark_training/artifacts/
// sdpa_fp8_benchmark_results_NVIDIA_B200.csv (commit bb37575d, the commit of the bf16 file above;
// cuDNN 9.13.1, sample_b200_fp8_run.txt beside it), causal, head dim 128, batch 1, 128 query
// and 8 KV heads, fp8 and bf16 rows at each length. The FP8 series is the bf16 series above times
// the measured FP8 / bf16 ratio at each length (the two files ran different cuDNN builds, so the
// ratio is taken within one run); the unmasked ratio is assumed equal to the causal one.
constexpr std::array<double, kLengths> kBlackwellCudnnFp8ForwardCausal = {
    196.081, 516.222, 974.247, 1230.650, 1502.114, 1692.390};
constexpr std::array<double, kLengths> kBlackwellCudnnFp8RunBf16ForwardCausal = {
    244.143, 561.287, 907.547, 1141.140, 1384.231, 1475.253};
constexpr std::array<double, kLengths> kBlackwellCudnnFp8BackwardCausal = {
    169.939, 376.804, 555.968, 972.284, 1254.687, 1469.494};
constexpr std::array<double, kLengths> kBlackwellCudnnFp8RunBf16BackwardCausal = {
    200.594, 376.937, 545.088, 832.907, 994.850, 1151.690};

// The same for the Blackwell Ultra die: artifacts/sdpa_fp8_benchmark_results_NVIDIA_GB300.csv at
// bb37575d (cuDNN 9.13.1, sample_gb300_fp8_run.txt), fp8 and bf16 rows of one run.
constexpr std::array<double, kLengths> kBlackwellUltraCudnnFp8ForwardCausal = {
    137.027, 425.497, 1030.215, 1675.104, 2073.580, 2266.632};
constexpr std::array<double, kLengths> kBlackwellUltraCudnnFp8RunBf16ForwardCausal = {
    175.563, 492.203, 999.760, 1445.205, 1716.056, 1835.897};
constexpr std::array<double, kLengths> kBlackwellUltraCudnnFp8BackwardCausal = {
    146.223, 368.629, 573.320, 1156.208, 1513.772, 1745.939};
constexpr std::array<double, kLengths> kBlackwellUltraCudnnFp8RunBf16BackwardCausal = {
    174.467, 365.691, 544.508, 941.941, 1150.498, 1290.765};

// One run's FP8 / bf16 ratios applied to a bf16 series.
struct Fp8Run {
  const std::array<double, kLengths>& fp8_forward;
  const std::array<double, kLengths>& bf16_forward;
  const std::array<double, kLengths>& fp8_backward;
  const std::array<double, kLengths>& bf16_backward;
};
KernelSeries cudnn_fp8(const KernelSeries& bf16, const Fp8Run& run) {
  KernelSeries s = bf16;
  for (std::size_t i = 0; i < kLengths; ++i) {
    const double forward = run.fp8_forward[i] / run.bf16_forward[i];
    const double backward = run.fp8_backward[i] / run.bf16_backward[i];
    s.forward_causal[i] *= forward;
    s.forward[i] *= forward;
    s.backward[i] *= backward;
  }
  return s;
}

// A forward + backward pair rate split into the forward and the backward in the shape of
// Hopper FA2's figures (its backward / unmasked forward ratio at the same length), which keeps each
// pair's time exactly at the measured rate (an assumption, docs/inputs.md). A pair of one forward
// (F FLOPs at rate f) and one backward (2.5 F at rate b = ratio x f) at the pair rate R takes
// 3.5 F / R = F / f + 2.5 F / b, so f = R (1 + 2.5 / ratio) / 3.5.
KernelSeries split_pairs(const std::array<double, kLengths>& pair_causal,
                         const std::array<double, kLengths>& pair) {
  KernelSeries s{};
  for (std::size_t i = 0; i < kLengths; ++i) {
    const double ratio = kHopperFlash2.backward[i] / kHopperFlash2.forward[i];
    const double forward_of_pair = (1 + 2.5 / ratio) / 3.5;
    s.forward[i] = pair[i] * forward_of_pair;
    s.forward_causal[i] = pair_causal[i] * forward_of_pair;
    s.backward[i] = s.forward[i] * ratio;
  }
  return s;
}

// FlashAttention-2 on Ampere (A100 80GB SXM4, 312 TFLOP/s dense bf16), head dim 128, from the
// flash-attention README's A100 figure (assets/flash2_a100_fwd_bwd_benchmark.png, the FA2
// paper's Fig. 4 (b) and (d), arXiv:2307.08691): forward + backward together, batch x sequence =
// 16k tokens, hidden 2048 (16 heads), in the same FLOP convention (benchmarks/
// benchmark_flash_attention.py: the pair counts 3.5 forwards). Bars as printed: causal 99, 133,
// 155, 173, 182, 189; unmasked 173 at 1k and 187, 196, 201, 203 from 2k, and at 512, whose
// label the legend covers, 149 read from the bar's height on the axis (+-1). The paper's
// separate A100 forward and backward figures are not read here; the pair is split by
// split_pairs.
constexpr std::array<double, kLengths> kAmpereFlash2PairCausal = {99, 133, 155, 173, 182, 189};
constexpr std::array<double, kLengths> kAmpereFlash2Pair = {149, 173, 187, 196, 201, 203};
constexpr double kA100PeakTflops = 312;

// FlashAttention-1 (flash-attn 1.x and the 0.2 releases before it; "FlashAttention" in the
// figures' legends), head dim 128, forward + backward, on the same figures as FA2's pairs and in
// the same benchmark: Ampere from assets/flash2_a100_fwd_bwd_benchmark.png (panels (b) unmasked
// and (d) causal), Hopper from assets/flash2_h100_fwd_bwd_benchmark.png (H100 80GB SXM5, panels
// (b) and (d)). Bars as printed at 512 to 16k. Split by split_pairs (no separate FA1 forward or
// backward figure is read). Named where a run's code runs flash-attn 1.x (MLPerf v3.0's GPT-3:
// flash_attn==1.0.5 under Transformer Engine release_v0.8); the generic floor stays FA2's
// (compute_model.cc).
constexpr std::array<double, kLengths> kAmpereFlash1PairCausal = {55, 62, 69, 76, 80, 83};
constexpr std::array<double, kLengths> kAmpereFlash1Pair = {76, 72, 76, 80, 82, 83};
constexpr std::array<double, kLengths> kHopperFlash1PairCausal = {98, 109, 108, 126, 135, 137};
constexpr std::array<double, kLengths> kHopperFlash1Pair = {127, 127, 128, 131, 137, 139};

const KernelSeries* hopper_series(AttentionKernel k) {
  switch (k) {
    case AttentionKernel::kFlash2: return &kHopperFlash2;
    case AttentionKernel::kCudnn: return &kHopperCudnn;
    case AttentionKernel::kFlash3: return &kHopperFlash3;
    case AttentionKernel::kFlash1:
    case AttentionKernel::kGeneric: return nullptr;
  }
  return nullptr;
}

// The series at `seq_len`, linear in log2(seq_len) between published points, flat outside.
double at_length(const std::array<double, kLengths>& series, std::int64_t seq_len) {
  const double x = std::log2(static_cast<double>(std::max<std::int64_t>(seq_len, 1)));
  if (x <= std::log2(kSeqLen.front())) return series.front();
  for (std::size_t i = 1; i < kLengths; ++i) {
    const double hi = std::log2(kSeqLen[i]);
    if (x <= hi) {
      const double lo = std::log2(kSeqLen[i - 1]);
      const double f = (x - lo) / (hi - lo);
      return series[i - 1] + f * (series[i] - series[i - 1]);
    }
  }
  return series.back();
}

}  // namespace

std::optional<AttentionKernelRate> attention_kernel_rate(std::string_view architecture,
                                                         AttentionKernel kernel, bool backward,
                                                         bool causal, std::int64_t seq_len,
                                                         bool fp8) {
  static const KernelSeries kBlackwellFlash2 = blackwell_flash2();
  static const KernelSeries kBlackwellCudnn =
      cudnn_from_causal(kBlackwellCudnnForwardCausal, kBlackwellCudnnBackwardCausal);
  static const KernelSeries kBlackwellCudnnFp8 = cudnn_fp8(
      kBlackwellCudnn, {kBlackwellCudnnFp8ForwardCausal, kBlackwellCudnnFp8RunBf16ForwardCausal,
                        kBlackwellCudnnFp8BackwardCausal, kBlackwellCudnnFp8RunBf16BackwardCausal});
  static const KernelSeries kBlackwellUltraCudnn =
      cudnn_from_causal(kBlackwellUltraCudnnForwardCausal, kBlackwellUltraCudnnBackwardCausal);
  static const KernelSeries kBlackwellUltraCudnnFp8 = cudnn_fp8(
      kBlackwellUltraCudnn,
      {kBlackwellUltraCudnnFp8ForwardCausal, kBlackwellUltraCudnnFp8RunBf16ForwardCausal,
       kBlackwellUltraCudnnFp8BackwardCausal, kBlackwellUltraCudnnFp8RunBf16BackwardCausal});
  static const KernelSeries kAmpereFlash2 = split_pairs(kAmpereFlash2PairCausal, kAmpereFlash2Pair);
  static const KernelSeries kAmpereFlash1 = split_pairs(kAmpereFlash1PairCausal, kAmpereFlash1Pair);
  static const KernelSeries kHopperFlash1 = split_pairs(kHopperFlash1PairCausal, kHopperFlash1Pair);
  const KernelSeries* s = nullptr;
  double measured_peak_tflops = 0;
  const bool ultra = architecture == "blackwell-ultra";
  const bool blackwell = architecture == "blackwell" || ultra;
  if (fp8) {
    // FP8 rates are published for cuDNN on the Blackwell dies only.
    if (!blackwell || kernel != AttentionKernel::kCudnn) return std::nullopt;
    s = ultra ? &kBlackwellUltraCudnnFp8 : &kBlackwellCudnnFp8;
    measured_peak_tflops = ultra ? kGb300PeakTflops : kB200PeakTflops;
  } else if (architecture == "hopper") {
    s = kernel == AttentionKernel::kFlash1 ? &kHopperFlash1 : hopper_series(kernel);
    measured_peak_tflops = kH100SxmPeakTflops;
  } else if (blackwell && kernel == AttentionKernel::kFlash2) {
    // FA2 runs Ampere's MMA on either die: the B200's series, scaled by the peak (an assumption
    // for Blackwell Ultra, where no FA2 series is read).
    s = &kBlackwellFlash2;
    measured_peak_tflops = kB200PeakTflops;
  } else if (blackwell && kernel == AttentionKernel::kCudnn) {
    s = ultra ? &kBlackwellUltraCudnn : &kBlackwellCudnn;
    measured_peak_tflops = ultra ? kGb300PeakTflops : kB200PeakTflops;
  } else if (architecture == "ampere" && kernel == AttentionKernel::kFlash2) {
    s = &kAmpereFlash2;
    measured_peak_tflops = kA100PeakTflops;
  } else if (architecture == "ampere" && kernel == AttentionKernel::kFlash1) {
    s = &kAmpereFlash1;
    measured_peak_tflops = kA100PeakTflops;
  }
  if (s == nullptr) return std::nullopt;
  // Without the mask: the paper's unmasked bars, forward and backward as published.
  if (!causal)
    return AttentionKernelRate{
        (backward ? at_length(s->backward, seq_len) : at_length(s->forward, seq_len)) * kTFLOP,
        measured_peak_tflops * kTFLOP};
  const double forward_causal = at_length(s->forward_causal, seq_len);
  double tflops = forward_causal;
  if (backward) {
    // The paper's backward bars are without the causal mask. A causal kernel skips the masked
    // tiles but loses the same fraction of its rate on the diagonal tiles and the shorter rows
    // in either direction, so the backward is scaled by the forward's causal/unmasked ratio at
    // the same length (an assumption: no causal backward figure is published).
    tflops = at_length(s->backward, seq_len) * forward_causal / at_length(s->forward, seq_len);
  }
  return AttentionKernelRate{tflops * kTFLOP, measured_peak_tflops * kTFLOP};
}

}  // namespace trainplan
