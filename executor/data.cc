// Training batches; see data.h.
#include "executor/data.h"

#include <algorithm>

namespace trainplan::executor {

namespace {
std::uint64_t mix(std::uint64_t x) {  // splitmix64
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
std::uint64_t draw(std::uint64_t seed, std::int64_t step, std::int64_t i) {
  return mix(mix(seed ^ 0x5eed5eed5eedULL) + mix(static_cast<std::uint64_t>(step) * 1000003ULL +
                                                  static_cast<std::uint64_t>(i)));
}
}  // namespace

std::vector<std::int32_t> corpus_batch(const std::string& corpus, std::uint64_t seed,
                                       std::int64_t step, std::int64_t sequences,
                                       std::int64_t seq_len) {
  const std::int64_t window = seq_len + 1;
  const auto starts = static_cast<std::uint64_t>(static_cast<std::int64_t>(corpus.size()) - window + 1);
  std::vector<std::int32_t> out(static_cast<std::size_t>(sequences * window));
  for (std::int64_t j = 0; j < sequences; ++j) {
    const auto start = static_cast<std::size_t>(draw(seed, step, j) % starts);
    for (std::int64_t k = 0; k < window; ++k)
      out[static_cast<std::size_t>(j * window + k)] =
          static_cast<unsigned char>(corpus[start + static_cast<std::size_t>(k)]);
  }
  return out;
}

std::vector<std::int32_t> random_batch(std::uint64_t seed, std::int64_t step,
                                       std::int64_t sequences, std::int64_t seq_len,
                                       std::int64_t vocab) {
  std::vector<std::int32_t> out(static_cast<std::size_t>(sequences * (seq_len + 1)));
  for (std::size_t i = 0; i < out.size(); ++i)
    out[i] = static_cast<std::int32_t>(draw(seed, step, static_cast<std::int64_t>(i)) %
                                       static_cast<std::uint64_t>(vocab));
  return out;
}

std::int64_t cp_position(std::int64_t seq_len, ContextSplit split, std::int64_t j) {
  if (split.cp == 1) return j;
  const std::int64_t chunk = seq_len / (2 * split.cp);
  return j < chunk ? split.rank * chunk + j : (2 * split.cp - 1 - split.rank) * chunk + (j - chunk);
}

void micro_batch_tokens(const std::vector<std::int32_t>& batch, std::int64_t seq_len,
                        std::int64_t micro_batch_size, std::int64_t micro_batches,
                        std::int64_t replica, std::int64_t mb, std::int32_t* in,
                        std::int32_t* out, ContextSplit split) {
  const std::int64_t local = seq_len / split.cp;
  for (std::int64_t i = 0; i < micro_batch_size; ++i) {
    const std::int64_t seq = (replica * micro_batches + mb) * micro_batch_size + i;
    const std::int32_t* src = batch.data() + seq * (seq_len + 1);
    for (std::int64_t j = 0; j < local; ++j) {
      const std::int64_t pos = cp_position(seq_len, split, j);
      in[i * local + j] = src[pos];
      out[i * local + j] = src[pos + 1];
    }
  }
}

}  // namespace trainplan::executor
