// Published memory-kernel rates; see memory_kernel_rates.h. The figures' sources are in
// bench/results/memkernels-sources-2026-12-07/SOURCES.md (section per kind below) and each
// median is computed, figure by figure, by bench/results/memrates-2026-12-07/derive_rates.py.
#include "core/cost/memory_kernel_rates.h"

namespace trainplan {
namespace {

// Forward and backward of one implementation of one kind.
struct Rate {
  double forward, backward;
};

// Elementwise kernels (SOURCES.md sections 2 and 4): the median of nine single SM kernels that
// read and write each element once: torch.add on an A100-40GB (bf16 0.873, fp32 0.874; FlagPerf
// operation/benchmarks/add), FlagGems' add (0.886), torch add on a V100 (0.91,
// ml-explore/mlx#2330), CUB DeviceTransform add and relu on a B200 at 2^28 elements (0.840,
// 0.82; NVIDIA/cccl#7391), torch GELU on an A100-40GB (0.84, 0.90) and Liger's relu^2 on an
// H100 (0.85). No figure of a fused Adam step on a known peak exists: the optimizer takes this.
constexpr Rate kElementwise{kPublishedElementwiseEfficiency, kPublishedElementwiseEfficiency};

// Norms as one kernel (section 3): forward, the median of 21 figures (Apex, Liger, Quack, cuDNN,
// CuTe-DSL, PyTorch's native LayerNorm and RMSNorm on A100, H100 and B200; 0.22 to 0.90), the
// sources' bytes those of the model (read x, write y). Backward, the median of 10 figures (0.19
// to 0.74) is 0.341 against the sources' three tensors (read x and dy, write dx); the model counts
// four (tasks.cc norm_task: twice the forward), so 0.341 x 4/3.
constexpr Rate kNormOneKernel{0.713, 0.455};

// Norms as PyTorch eager's ATen ops (Plan::elementwise eager: torchtitan's RMSNorm, the same ops
// as Hugging Face's LlamaRMSNorm): Liger-Kernel's benchmark of LlamaRMSNorm on an A100-SXM4-80GB
// (v0.2.1, 2048 x 32768 bf16: 1.9191 ms forward, 5.0147 ms backward), against the model's bytes
// for that chain (tasks.cc eager_rmsnorm_*_bytes_per_element: 36 and 92 bytes per element).
constexpr Rate kNormEager{0.617, 0.604};

// Activations as one kernel (section 4): forward, the median of six (torch GELU on an A100-40GB,
// Liger's SwiGLU and relu^2 and Megatron-Core's bias-SwiGLU on an H100, CUB relu on a B200;
// 0.56 to 0.91). Backward, the median of three against the model's bytes (SwiGLU 6 elements
// where the sources count 5, a unary activation 4 where they count 3): Liger SwiGLU 0.42 x 6/5,
// Megatron-Core bias-SwiGLU 0.16 x 6/5, Liger relu^2 0.88 x 4/3 capped at 1.
constexpr Rate kActivationOneKernel{0.845, 0.504};

// SwiGLU as PyTorch eager's silu then a product (Plan::elementwise eager, eager-swiglu):
// Liger-Kernel's benchmark of it on an H100 80GB HBM3 (v0.8.1 megatron_swiglu "torch", 8192 rows,
// F = 32768, bf16: 1.4953 ms forward, 4.5729 ms backward), against the model's bytes for those
// kernels (tasks.cc: 5 elements forward, 9 backward).
constexpr Rate kActivationEager{0.536, 0.315};

// Softmax (section 5): the median of three row-softmax kernels on an H100 at the largest widths
// published (Quack 0.897 by Nsight, torch.compile 0.56, Liger 0.60; Dao-AILab/quack,
// media/2025-07-10-membound-sol.md). No backward figure exists: the forward's. The
// cross-entropy's forward is of this kind; its published figures are of other implementations
// with other byte counts and are not used.
constexpr Rate kSoftmax{0.600, 0.600};

// Embedding (section 6): PyTorch's nn.Embedding forward on an A100-SXM4-80GB (Liger v0.2.1,
// 16384 tokens, h = 4096, V = 131072, fp32). Its published backward counts a dense V x h
// gradient that tasks.cc's embedding_bwd does not hold: the forward's figure.
constexpr Rate kEmbedding{0.300, 0.300};

Rate rate_of(MemoryKernel k, bool eager) {
  switch (k) {
    case MemoryKernel::kNorm: return eager ? kNormEager : kNormOneKernel;
    case MemoryKernel::kActivation: return eager ? kActivationEager : kActivationOneKernel;
    case MemoryKernel::kSoftmax: return kSoftmax;
    case MemoryKernel::kEmbedding: return kEmbedding;
    case MemoryKernel::kElementwise:
    case MemoryKernel::kOptimizer:
    case MemoryKernel::kCount: break;
  }
  return kElementwise;
}

}  // namespace

double published_memory_efficiency(MemoryKernel k, bool backward, bool eager) {
  const Rate r = rate_of(k, eager);
  return backward ? r.backward : r.forward;
}

}  // namespace trainplan
