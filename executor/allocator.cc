// See allocator.h.
#include "executor/allocator.h"

// Any C library header defines __GLIBC__ (through <features.h>); without one included first, the
// check below is false on glibc too and the policy is silently never applied.
#include <cstdlib>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace trainplan::executor {

bool keep_freed_memory_mapped() {
#if defined(__GLIBC__)
  constexpr int kOneGiB = 1 << 30;
  // mallopt returns 1 on success. Sanitizers' allocators intercept it and return 0.
  const bool trim = mallopt(M_TRIM_THRESHOLD, kOneGiB) == 1;
  const bool mmap = mallopt(M_MMAP_THRESHOLD, kOneGiB) == 1;
  return trim && mmap;
#else
  return false;
#endif
}

}  // namespace trainplan::executor
