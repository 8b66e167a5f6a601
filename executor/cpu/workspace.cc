// See workspace.h.
#include "executor/cpu/workspace.h"

#include <cstdlib>

#include "core/status.h"

namespace trainplan::executor {

ScratchArena::~ScratchArena() { std::free(data_); }

void ScratchArena::reserve(std::size_t floats) {
  TRAINPLAN_CHECK(data_ == nullptr) << "the scratch arena is sized once";
  capacity_ = rounded(static_cast<std::int64_t>(floats));
  if (capacity_ == 0) return;
  // aligned_alloc needs a size that is a multiple of the alignment: rounded() makes it one.
  data_ = static_cast<float*>(std::aligned_alloc(kAlignFloats * sizeof(float),
                                                 capacity_ * sizeof(float)));
  TRAINPLAN_CHECK(data_ != nullptr) << "cannot allocate the scratch arena of " << capacity_
                                    << " floats";
}

float* ScratchArena::floats(std::int64_t n) {
  const std::size_t take = rounded(n);
  TRAINPLAN_CHECK(top_ + take <= capacity_)
      << "scratch arena: " << n << " floats asked for at " << top_ << " of " << capacity_
      << " (the arena's size, worked out from the plan, and the code disagree)";
  float* at = data_ + top_;
  top_ += take;
  if (top_ > high_) high_ = top_;
  return at;
}

MatMap ScratchArena::mat(Eigen::Index rows, Eigen::Index cols) {
  return MatMap(floats(rows * cols), rows, cols);
}

void ScratchArena::release(std::size_t mark) {
  TRAINPLAN_CHECK(mark <= top_) << "scratch arena: released past its top";
  top_ = mark;
}

}  // namespace trainplan::executor
