// The CPU executor's process-wide allocation policy. Every micro-batch allocates its activations
// afresh and frees them after its backward; with glibc's defaults, freed memory above the trim
// threshold goes back to the kernel and large blocks are mmap'ed per allocation, so every
// micro-batch faults its activation pages in again (measured on the tiny GPT: GELU's forward
// ran at half its isolated speed). Keeping freed memory mapped makes later micro-batches reuse
// the pages, which is what a caching allocator does on a GPU. Resident memory then stays at its
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
