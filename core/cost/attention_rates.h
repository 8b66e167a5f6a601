// Published rates of fused attention kernels, by kernel, direction and sequence length, for the
// architectures where they are published. The cost model times a fused attention task at these
// rates when the plan names its kernel (Plan::attention_kernel); otherwise at the generic
// DeviceRates::attention_efficiency.
//
// Hopper (H100 SXM5, bf16, head dim 128): Shah et al. 2024, "FlashAttention-3", arXiv:2407.08608,
// Fig. 5 (forward, causal) and Fig. 6 (backward, non-causal), bars for FlashAttention-2, cuDNN
// and FlashAttention-3 at sequence lengths 512 to 16k, batch x sequence = 16k tokens and 16
// heads. The FLOP convention is the one the cost model's attention tasks use: 4*b*s^2*h*d per
// forward, halved for causal, times 2.5 for the backward (flash-attention's
// benchmarks/benchmark_flash_attention.py, `flops`).
//
// Blackwell (B200): FlashAttention-2 (attention_rates.cc: its forward measured on a B200 by
// tritonbench, at about the Hopper rate; the causal forward and the backward in Hopper's shape)
// and cuDNN (NVIDIA's cudnn-frontend SDPA training benchmark on a B200, causal forward and
// backward; the unmasked ones in Hopper cuDNN's shape). Transformer Engine's fused attention
// (Megatron-LM, NeMo) is cuDNN's.
// PyTorch's SDPA ran it on B200 until cuDNN attention became its default on sm100 (PyTorch PR
// 162073, 2025-09-04, for 2.9).
//
// Blackwell Ultra (GB300, B300; "blackwell-ultra"): cuDNN measured on a GB300 by NVIDIA in the
// same cudnn-frontend run setup as the B200's (attention_rates.cc); FlashAttention-2 as on B200.
//
// Ampere (A100): FlashAttention-2 only (attention_rates.cc: the flash-attention README's A100
// forward + backward figure, arXiv:2307.08691 Fig. 4, head dim 128, causal and unmasked, split
// into forward and backward in the Hopper FA2 figures' shape).
//
// Tested by tests/core/attention_rates_test.cc.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "core/plan.h"

namespace trainplan {

// The sustained FLOP rate of an attention kernel's forward or backward over key sequences of
// `seq_len` tokens, with the causal mask or without it (`causal` false: a context-parallel ring
// step on another rank's keys, every score kept), on the part it was measured on
// (`measured_peak_flops_per_s`, for scaling to a part of the same die with another clock).
// Between published lengths the rate is interpolated on log2(seq_len); beyond them it stays at
// the end value (the rates flatten by 8k-16k in the published figures). nullopt where the kernel
// has no published rates on `architecture` (then the generic model applies), and for
// AttentionKernel::kGeneric.
// The head dimension every published series here was measured at.
inline constexpr std::int64_t kPublishedAttentionHeadDim = 128;
struct AttentionKernelRate {
  double flops_per_s = 0;
  double measured_peak_flops_per_s = 0;  // dense bf16 peak of the part it was measured on
};
// fp8: the kernel on FP8 Q, K, V (Plan::fp8_attention); published for cuDNN on the Blackwell dies
// only (attention_rates.cc: NVIDIA's FP8 / bf16 ratio measured in one cudnn-frontend run on a B200
// and in one on a GB300).
std::optional<AttentionKernelRate> attention_kernel_rate(std::string_view architecture,
                                                         AttentionKernel kernel, bool backward,
                                                         bool causal, std::int64_t seq_len,
                                                         bool fp8 = false);

}  // namespace trainplan
