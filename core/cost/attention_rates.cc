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

// TFLOP/s on H100 SXM5 (989.4 TFLOP/s dense bf16), head dim 128, as printed on the bars of
// arXiv:2407.08608: Fig. 5 "Attention forward speed, head dim 128" with and without the causal
// mask, and Fig. 6 "Attention backward speed, head dim 128" (no mask).
struct HopperSeries {
  std::array<double, kLengths> forward_causal;
  std::array<double, kLengths> forward;
  std::array<double, kLengths> backward;
};
constexpr HopperSeries kHopperFlash2 = {{191, 260, 298, 319, 333, 335},
                                        {309, 350, 362, 368, 370, 370},
                                        {214, 260, 291, 310, 318, 322}};
constexpr HopperSeries kHopperCudnn = {{315, 410, 484, 518, 529, 539},
                                       {497, 574, 617, 609, 600, 595},
                                       {305, 408, 465, 499, 518, 516}};
constexpr HopperSeries kHopperFlash3 = {{292, 423, 521, 579, 602, 616},
                                        {467, 565, 625, 638, 646, 648},
                                        {316, 424, 501, 542, 559, 561}};
constexpr double kH100SxmPeakTflops = 989.4;

const HopperSeries* hopper_series(AttentionKernel k) {
  switch (k) {
    case AttentionKernel::kFlash2: return &kHopperFlash2;
    case AttentionKernel::kCudnn: return &kHopperCudnn;
    case AttentionKernel::kFlash3: return &kHopperFlash3;
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
                                                         bool causal, std::int64_t seq_len) {
  if (architecture != "hopper") return std::nullopt;
  const HopperSeries* s = hopper_series(kernel);
  if (s == nullptr) return std::nullopt;
  // Without the mask: the paper's unmasked bars, forward and backward as published.
  if (!causal)
    return AttentionKernelRate{
        (backward ? at_length(s->backward, seq_len) : at_length(s->forward, seq_len)) * kTFLOP,
        kH100SxmPeakTflops * kTFLOP};
  const double forward_causal = at_length(s->forward_causal, seq_len);
  double tflops = forward_causal;
  if (backward) {
    // The paper's backward bars are without the causal mask. A causal kernel skips the masked
    // tiles but loses the same fraction of its rate on the diagonal tiles and the shorter rows
    // in either direction, so the backward is scaled by the forward's causal/unmasked ratio at
    // the same length (an assumption: no causal backward figure is published).
    tflops = at_length(s->backward, seq_len) * forward_causal / at_length(s->forward, seq_len);
  }
  return AttentionKernelRate{tflops * kTFLOP, kH100SxmPeakTflops * kTFLOP};
}

}  // namespace trainplan
