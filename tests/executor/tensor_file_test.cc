// executor/tensor_file.h: the bytes round-trip, and malformed files are errors, not crashes.
#include "executor/tensor_file.h"

#include <gtest/gtest.h>

#include <cstring>

namespace trainplan::executor {
namespace {

std::vector<NamedTensor> two_tensors() {
  return {{"h0.wq", {2, 3}, {1, 2, 3, 4, 5, 6}}, {"lnf.g", {2}, {-1.5f, 0.25f}}};
}

TEST(TensorFile, RoundTripsNamesShapesValuesAndMeta) {
  const std::string bytes = encode_tensors(two_tensors(), Json{{"seed", 7}});
  EXPECT_EQ(bytes.substr(0, 8), "TPTENS01");
  Json meta;
  auto back = decode_tensors(bytes, &meta);
  ASSERT_TRUE(back.ok()) << back.status().message();
  ASSERT_EQ(back->size(), 2u);
  EXPECT_EQ((*back)[0].name, "h0.wq");
  EXPECT_EQ((*back)[0].shape, (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ((*back)[0].data, two_tensors()[0].data);
  EXPECT_EQ((*back)[1].data, two_tensors()[1].data);
  EXPECT_EQ(meta.at("seed"), 7);
  // The data follow the header as raw float32: the file ends with the last tensor's floats.
  float last = 0;
  std::memcpy(&last, bytes.data() + bytes.size() - sizeof(float), sizeof(float));
  EXPECT_EQ(last, 0.25f);
}

TEST(TensorFile, RejectsAWrongMagic) {
  std::string bytes = encode_tensors(two_tensors(), Json::object());
  bytes[0] = 'X';
  auto r = decode_tensors(bytes, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("magic"), std::string::npos);
}

TEST(TensorFile, RejectsATruncatedFile) {
  const std::string bytes = encode_tensors(two_tensors(), Json::object());
  auto r = decode_tensors(bytes.substr(0, bytes.size() - 4), nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("lnf.g runs past the end"), std::string::npos);
  EXPECT_FALSE(decode_tensors(bytes.substr(0, 20), nullptr).ok());  // inside the header
}

TEST(TensorFile, RejectsAMalformedHeader) {
  std::string bytes = encode_tensors(two_tensors(), Json::object());
  const auto at = bytes.find("\"shape\"");
  bytes.replace(at, 7, "\"shaqe\"");
  auto r = decode_tensors(bytes, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("malformed header"), std::string::npos);
}

}  // namespace
}  // namespace trainplan::executor
