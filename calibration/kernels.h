// Compute measurements on the machine at hand, one thread per rank, of the code that will run
// the plans: the executor's (executor/cpu/kernels.h) GEMM over a sweep of m, n, k, and STREAM
// bandwidth. The per-task measurements of a whole training step are in executor_probe.h.
// File I/O only in time_offload_file (the executor's NVMe-tier file under a directory the user
// names); `calibrate` (tools/calibrate.cc) runs these and fits (fit.h).
// Tested by tests/calibration/profile_test.cc.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/cost/compute_model.h"
#include "core/cost/cost_model.h"
#include "core/status.h"

namespace trainplan::calibration {

// How long each measurement runs: calls are repeated until min_time_s has passed (at least
// min_calls), and the median call time is kept (the steady state a training step sees).
struct TimingOptions {
  double min_time_s = 0.05;
  int min_calls = 3;
};

// A measured piece of code and the cost-model compute tasks (kGemm, kAttention, kMemory) it
// carries out: one task (a GEMM, a LayerNorm), or several where the executor runs them as one
// call (its attention kernel is scores, softmax and values at once).
struct TaskSample {
  std::string name;         // "fc1", "attn_scores+softmax+attn_values", "sweep"
  std::string probe;        // where it was measured: "tiny GPT, tp 1, micro-batch 2", "sweep"
  std::vector<Task> tasks;
  std::int64_t calls = 0;   // timings the median is over
  double time_s = 0;        // median
  double flops() const;     // executed FLOPs of its tasks
  double bytes() const;     // memory traffic of its memory-bound tasks
};

// One GEMM shape: (m x k) * (k x n).
struct GemmShape {
  std::int64_t m = 0, n = 0, k = 0;
};
// A sweep of m, n, k (each of `sizes`).
std::vector<GemmShape> gemm_sweep_shapes(const std::vector<std::int64_t>& sizes);
// One of the executor's three linear-layer products (float32, row-major; executor/cpu/kernels.h)
// at one shape, the output m x n with reduction k: the forward's linear_forward (no bias), the
// input gradient's linear_input_gradient (dY W^T) or the weight gradient's
// linear_weight_gradient (dW += X^T dY). A one-GEMM sample named "sweep", "sweep_dgrad" or
// "sweep_wgrad" (gemm_direction reads the suffix).
TaskSample time_gemm(const GemmShape& shape, const TimingOptions& options,
                     GemmDirection direction = GemmDirection::kForward);

// The reference kernel (executor/cpu/reference_gemm.h: one fixed forward GEMM, the median of
// a few calls) timed at several points of a calibration: `execute` times it between its steps,
// and validation/reference_gate.h compares the two rates. Empty `seconds`: not measured.
struct ReferenceSamples {
  std::int64_t m = 0, n = 0, k = 0;
  int calls = 0;                // timed calls per sample (the median is kept)
  std::vector<double> seconds;  // one median per sample, in the order taken
  double flops() const { return 2.0 * static_cast<double>(m) * static_cast<double>(n) *
                                static_cast<double>(k); }
};

// The memory-bound reference kernel (executor/cpu/reference_gemm.h's ReferenceTriad: STREAM's
// triad), sampled at the same points as the GEMM. Empty `seconds`: not measured.
struct TriadReferenceSamples {
  std::int64_t elements = 0;
  int calls = 0;
  std::vector<double> seconds;
  double bytes() const { return 3.0 * 4.0 * static_cast<double>(elements); }  // STREAM's count
};

// STREAM-style kernels (McCalpin): copy a=b, scale a=s*b, add a=b+c, triad a=b+s*c, over
// arrays of `array_bytes` each. Bytes counted as STREAM does (no write-allocate traffic).
struct StreamSample {
  std::string kernel;
  double array_bytes = 0;
  double bytes_moved = 0;
  double time_s = 0;
  double bytes_per_s() const { return time_s > 0 ? bytes_moved / time_s : 0; }
};
std::vector<StreamSample> time_stream(double array_bytes, const TimingOptions& options);

// The NVMe offload tier's file I/O as the executor runs it (executor/offload.h OffloadFile: a
// file created under `dir`, its space reserved, pwrite and pread of whole ranges): `bytes`
// written at offset 0 and read back, each the median call; the file is removed after. What a
// step's nvme_read_* / nvme_write_states cost on this machine, page cache included (the executor
// does not bypass it either).
struct FileIoSample {
  double bytes = 0;
  double write_s = 0, read_s = 0;
  // One direction's rate, write and read alike: 2 bytes over the two times.
  double bytes_per_s() const {
    return write_s + read_s > 0 ? 2.0 * bytes / (write_s + read_s) : 0.0;
  }
};
Result<FileIoSample> time_offload_file(const std::string& dir, std::int64_t rank, double bytes,
                                       const TimingOptions& options);

}  // namespace trainplan::calibration
