// Training batches: byte-level tokens from a corpus held in memory (the caller reads the file),
// or random tokens for timing. Deterministic in (seed, step), and the same whatever the layout:
// every rank builds the whole global batch and the trainer takes its share.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace trainplan::executor {

// `sequences` windows of seq_len + 1 consecutive bytes of `corpus`, at offsets drawn from
// (seed, step). The corpus must be longer than seq_len + 1 bytes.
std::vector<std::int32_t> corpus_batch(const std::string& corpus, std::uint64_t seed,
                                       std::int64_t step, std::int64_t sequences,
                                       std::int64_t seq_len);
// Uniform random tokens in [0, vocab).
std::vector<std::int32_t> random_batch(std::uint64_t seed, std::int64_t step,
                                       std::int64_t sequences, std::int64_t seq_len,
                                       std::int64_t vocab);

}  // namespace trainplan::executor
