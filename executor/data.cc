// Training batches; see data.h.
#include "executor/data.h"

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

}  // namespace trainplan::executor
