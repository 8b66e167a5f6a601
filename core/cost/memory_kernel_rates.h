// Published achieved bandwidth of memory-bound kernels on GPUs, as a fraction of the part's HBM
// peak, by kernel kind (MemoryKernel), direction and implementation (one kernel, or PyTorch
// eager's ATen ops one by one). The cost model times a GPU preset's memory-bound tasks at these
// rates (GpuSpec::memory_rates published) instead of one memory_efficiency for every kernel.
//
// Every rate is the median of published figures of its kind at the largest shape each source
// gives, converted to the byte count core/cost/tasks.cc gives the same tensor where the source
// counted otherwise; a kind or direction without a figure takes the elementwise rate. The figures
// and their sources: bench/results/memkernels-sources-2026-12-07/SOURCES.md; the rule and the
// arithmetic: bench/results/memrates-2026-12-07/derive_rates.py (validation/corpus/NOTES.md,
// fifty-first pass). Fractions of peak from A100, H100, B200 and V100 are pooled into one table:
// on one part the implementations differ more than one implementation differs between parts.
//
// Tested by tests/core/cost_model_test.cc (MemoryKernelRates) and, for GpuSpec::memory_rates in
// JSON, tests/core/loaders_test.cc (MemoryRates).
#pragma once

#include "core/cost/cost_model.h"

namespace trainplan {

// The published fraction of HBM peak a memory-bound kernel of kind k reaches, in the forward or
// the backward pass, as one kernel (eager false: fused, native or compiled) or as PyTorch
// eager's chain of ATen kernels (eager true; only norms and activations have such a chain in
// the task lists, the other kinds ignore it).
double published_memory_efficiency(MemoryKernel k, bool backward, bool eager);

// The rate of single elementwise kernels (residual adds, casts, copies): the presets' figure for
// a GEMM's operand traffic and for kinds without a figure of their own.
inline constexpr double kPublishedElementwiseEfficiency = 0.873;

}  // namespace trainplan
