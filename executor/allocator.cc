// See allocator.h.
#include "executor/allocator.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace trainplan::executor {

void keep_freed_memory_mapped() {
#if defined(__GLIBC__)
  constexpr int kOneGiB = 1 << 30;
  mallopt(M_TRIM_THRESHOLD, kOneGiB);
  mallopt(M_MMAP_THRESHOLD, kOneGiB);
#endif
}

}  // namespace trainplan::executor
