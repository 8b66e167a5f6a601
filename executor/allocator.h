// The CPU executor's process-wide allocation policy. The first step allocates the buffers and
// later ones reuse them (executor/cpu/workspace.h); what is still freed and allocated again (an
// MoE layer's routed experts, Eigen's parallel products, OpenMPI's buffers) would, with glibc's
// defaults, go back to the kernel above the trim threshold or be mmap'ed per allocation, and
// fault its pages in again each time (measured before the buffers were reused, on the tiny GPT:
// GELU's forward ran at half its isolated speed). Keeping freed memory mapped reuses the pages,
// which is what a caching allocator does on a GPU. Resident memory then stays at its
// high-water mark, which is what `execute` reports as peak memory anyway.
//
// Called once by the programs that run the executor (tools/execute.cc, tools/calibrate.cc),
// before they allocate: a library does not change process state by itself.
#pragma once

namespace trainplan::executor {

// glibc: M_TRIM_THRESHOLD and M_MMAP_THRESHOLD raised to 1 GiB. Returns whether both took
// effect: false on other C libraries and under a sanitizer, whose allocator ignores mallopt.
// Measured without it on the tiny GPT at micro-batch 2: about 750 page faults per step, and the
// forward kernels that write new activations 20-35% slower than backward kernels of their shape.
bool keep_freed_memory_mapped();

}  // namespace trainplan::executor
