// Named float32 tensors as one byte string, for handing the executor's state to an independent
// implementation (the PyTorch reference check, bench/scripts/reference_check.py), in the
// manner of llm.c's checkpoint files: a fixed header, then raw little-endian floats.
//
// Layout ("trainplan tensors", version 1):
//   bytes 0..7    magic "TPTENS01"
//   bytes 8..15   N, the JSON header's length in bytes (uint64, little-endian)
//   N bytes       JSON: {"meta": {...}, "tensors": [{"name", "shape": [d0, d1, ...],
//                 "offset": first element}, ...]}
//   then          every tensor's float32 elements, row-major, in list order
// The library builds the bytes; tools/ write the file. Tested by tests/executor/tensor_file_test.cc.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/json_util.h"

namespace trainplan::executor {

struct NamedTensor {
  std::string name;                // "h0.wq", "grad.h0.wq", "logits", ...
  std::vector<std::int64_t> shape;  // row-major
  std::vector<float> data;         // product(shape) elements
};

inline constexpr char kTensorFileMagic[] = "TPTENS01";

// The file's bytes. `meta` is copied into the header (seed, step, loss, ...).
std::string encode_tensors(const std::vector<NamedTensor>& tensors, const Json& meta);
// The inverse, for tests; an error names what is malformed.
Result<std::vector<NamedTensor>> decode_tensors(const std::string& bytes, Json* meta);

}  // namespace trainplan::executor
