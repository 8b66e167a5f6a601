// The CPU stage model's memory for temporaries and for the activations it keeps (issue 28: "no
// allocation in the step").
//
// ScratchArena: every temporary of the stage model's functions (gpt.cc, moe.cc) and of the
// kernels that need one (kernels.h: layernorm_backward, attention_backward) comes from one
// arena per rank, allocated once when the stage model is built, at the size the plan needs
// (StageModel::scratch_floats: the largest stack of temporaries any pass of the stage reaches,
// worked out from the model's widths, the tokens of a micro-batch and the layout). It is a
// stack: a function opens a Frame, takes what it needs from the top, and the Frame gives it
// all back when the function returns, so that temporaries of functions that do not run at the
// same time share the same bytes, as a GPU framework's caching allocator reuses one block for
// the temporaries of successive kernels (docs.pytorch.org/docs/stable/notes/cuda.html,
// "Memory management"). A request past the arena's size is a broken invariant (the sizing and
// the code disagree), never an allocation.
//
// BufferPool: a micro-batch's activations live from its forward to its backward, and are
// released as the cost model counts them (a layer's cache after its backward, all but the
// input under full recompute). Released here means kept for the next buffer of the same size
// instead of given back to the C library: a caching allocator again. The steady state holds
// the high-water mark of each size. Sizes in a step are few (tokens x hidden, tokens x ffn,
// ...), so a buffer is found by a linear scan.
//
// Tested by tests/executor/cpu/workspace_test.cc, and, for the whole step, by
// tests/executor/step_allocations_test.cc.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <Eigen/Core>

#include "executor/cpu/kernels.h"

namespace trainplan::executor {

class ScratchArena {
 public:
  // Every slice starts on a 64-byte boundary, the widest SIMD packet (AVX-512) and a cache
  // line: Eigen's vectorised reductions start at the first aligned element of a buffer, so a
  // slice aligned as a heap matrix is sums in the same order, bit for bit.
  static constexpr std::size_t kAlignFloats = 16;
  // The floats a slice of `floats` elements takes, rounded up to the alignment.
  static std::size_t rounded(std::int64_t floats) {
    const auto n = static_cast<std::size_t>(floats < 0 ? 0 : floats);
    return (n + kAlignFloats - 1) / kAlignFloats * kAlignFloats;
  }

  ScratchArena() = default;
  ~ScratchArena();
  ScratchArena(const ScratchArena&) = delete;
  ScratchArena& operator=(const ScratchArena&) = delete;

  // Allocates the arena, `floats` floats (rounded up), once; pages are faulted in as slices are
  // first written.
  void reserve(std::size_t floats);

  // A slice from the top, rows x cols (contents unspecified), until the enclosing Frame ends.
  MatMap mat(Eigen::Index rows, Eigen::Index cols);
  Eigen::Map<Vec> vec(Eigen::Index n) { return Eigen::Map<Vec>(floats(n), n); }
  float* floats(std::int64_t n);

  // The top of the stack, and a return to an earlier top (what Frame does when it ends).
  std::size_t mark() const { return top_; }
  void release(std::size_t mark);

  std::size_t capacity() const { return capacity_; }  // floats
  std::size_t high_water() const { return high_; }    // the most floats in use so far
  double bytes() const { return static_cast<double>(capacity_) * sizeof(float); }

  // The slices taken while it lives go back when it ends.
  class Frame {
   public:
    explicit Frame(ScratchArena& arena) : arena_(arena), mark_(arena.mark()) {}
    ~Frame() { arena_.release(mark_); }
    Frame(const Frame&) = delete;
    Frame& operator=(const Frame&) = delete;

   private:
    ScratchArena& arena_;
    std::size_t mark_;
  };

 private:
  float* data_ = nullptr;
  std::size_t capacity_ = 0, top_ = 0, high_ = 0;
};

// Released Eigen matrices or vectors (M: a dynamic-size Eigen::Matrix) by element count.
template <class M>
class BufferPool {
 public:
  // Gives `m` the shape rows x cols, from a released buffer of that many elements when `m`'s own
  // has another size (m's own is released first). Contents are unspecified.
  void take(M& m, Eigen::Index rows, Eigen::Index cols) {
    if (m.size() == rows * cols) {
      m.resize(rows, cols);  // same element count: Eigen keeps the buffer
      return;
    }
    give(m);
    for (std::size_t i = 0; i < free_.size(); ++i) {
      if (free_[i].size() != rows * cols) continue;
      m.swap(free_[i]);
      free_[i].swap(free_.back());
      free_.pop_back();
      break;
    }
    m.resize(rows, cols);  // allocates only when no released buffer had the size
  }
  void take(M& m, Eigen::Index size) { take(m, size, 1); }

  // Releases m's buffer into the pool; m is left empty.
  void give(M& m) {
    if (m.size() == 0) return;
    free_.emplace_back();
    free_.back().swap(m);
  }

  std::size_t released() const { return free_.size(); }
  // The released buffers' bytes (the memory account's pooled memory).
  double bytes() const {
    double sum = 0;
    for (const M& m : free_) sum += static_cast<double>(m.size()) * sizeof(typename M::Scalar);
    return sum;
  }

 private:
  std::vector<M> free_;
};

}  // namespace trainplan::executor
