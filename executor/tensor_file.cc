// Named float32 tensors as bytes; see tensor_file.h.
#include "executor/tensor_file.h"

#include <bit>
#include <cstring>
#include <numeric>

namespace trainplan::executor {

static_assert(std::endian::native == std::endian::little,
              "the tensor file is little-endian and written by memcpy");

namespace {
constexpr std::size_t kMagicBytes = 8, kLengthBytes = 8;

std::int64_t elements(const std::vector<std::int64_t>& shape) {
  return std::accumulate(shape.begin(), shape.end(), std::int64_t{1}, std::multiplies<>());
}
}  // namespace

std::string encode_tensors(const std::vector<NamedTensor>& tensors, const Json& meta) {
  Json list = Json::array();
  std::int64_t offset = 0;
  for (const NamedTensor& t : tensors) {
    TRAINPLAN_CHECK(elements(t.shape) == static_cast<std::int64_t>(t.data.size()))
        << "tensor " << t.name << " has " << t.data.size() << " elements, not its shape's";
    list.push_back(Json{{"name", t.name}, {"shape", t.shape}, {"offset", offset}});
    offset += static_cast<std::int64_t>(t.data.size());
  }
  const std::string header = Json{{"meta", meta}, {"tensors", list}}.dump();
  std::string out(kMagicBytes, '\0');
  std::memcpy(out.data(), kTensorFileMagic, kMagicBytes);
  const std::uint64_t n = header.size();
  out.append(reinterpret_cast<const char*>(&n), kLengthBytes);
  out += header;
  for (const NamedTensor& t : tensors)
    out.append(reinterpret_cast<const char*>(t.data.data()), t.data.size() * sizeof(float));
  return out;
}

Result<std::vector<NamedTensor>> decode_tensors(const std::string& bytes, Json* meta) {
  auto bad = [](const std::string& why) {
    return Status::Error("tensor file: " + why, ExitCode::kInvalidInput);
  };
  if (bytes.size() < kMagicBytes + kLengthBytes ||
      std::memcmp(bytes.data(), kTensorFileMagic, kMagicBytes) != 0)
    return bad("does not start with the magic \"TPTENS01\"");
  std::uint64_t n = 0;
  std::memcpy(&n, bytes.data() + kMagicBytes, kLengthBytes);
  const std::size_t data0 = kMagicBytes + kLengthBytes + n;
  if (n > bytes.size() || data0 > bytes.size())
    return bad("header length " + std::to_string(n) + " exceeds the file");
  auto header = parse_json_text(std::string_view(bytes).substr(kMagicBytes + kLengthBytes, n),
                                "tensor file header");
  if (!header.ok()) return header.status();
  if (meta != nullptr) *meta = header->value("meta", Json::object());
  std::vector<NamedTensor> out;
  try {
  for (const Json& j : header->value("tensors", Json::array())) {
    NamedTensor t;
    t.name = j.at("name").get<std::string>();
    t.shape = j.at("shape").get<std::vector<std::int64_t>>();
    const auto offset = j.at("offset").get<std::int64_t>();
    const std::int64_t count = elements(t.shape);
    if (offset < 0 || count < 0 ||
        data0 + static_cast<std::size_t>(offset + count) * sizeof(float) > bytes.size())
      return bad("tensor " + t.name + " runs past the end of the file");
    t.data.resize(static_cast<std::size_t>(count));
    std::memcpy(t.data.data(), bytes.data() + data0 + static_cast<std::size_t>(offset) * sizeof(float),
                t.data.size() * sizeof(float));
    out.push_back(std::move(t));
  }
  } catch (const Json::exception& e) {
    return bad(std::string("malformed header: ") + e.what());
  }
  return out;
}

}  // namespace trainplan::executor
