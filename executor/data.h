// Training batches: byte-level tokens from a corpus held in memory (the caller reads the file),
// or random tokens for timing. Deterministic in (seed, step), and the same whatever the layout:
// every rank builds the whole global batch and the trainer takes its share (micro_batch_tokens).
// Tested by tests/executor/parallel_check.cc (every layout trains on its share of one batch).
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

// Context parallelism's load-balanced split of each sequence (Megatron-LM's
// get_batch_on_this_cp_rank, megatron/training/utils.py): the sequence is cut into 2*cp equal
// chunks and CP rank r holds chunks r and 2*cp-1-r, in that order, so that every rank has the
// same share of the causal attention's work. cp = 1: the whole sequence.
struct ContextSplit {
  std::int64_t cp = 1, rank = 0;
};
// The position in the whole sequence of token j (0 <= j < seq_len / cp) of a CP rank's share.
std::int64_t cp_position(std::int64_t seq_len, ContextSplit split, std::int64_t j);

// A data-parallel replica's share of a global batch (sequences of seq_len + 1 tokens): replica
// d's micro-batch mb holds sequences (d * micro_batches + mb) * micro_batch_size + i, i <
// micro_batch_size. Writes their inputs to `in` and next-token targets to `out`
// (micro_batch_size * seq_len / cp tokens each: the CP rank's share of every sequence).
void micro_batch_tokens(const std::vector<std::int32_t>& batch, std::int64_t seq_len,
                        std::int64_t micro_batch_size, std::int64_t micro_batches,
                        std::int64_t replica, std::int64_t mb, std::int32_t* in,
                        std::int32_t* out, ContextSplit split = {});

}  // namespace trainplan::executor
