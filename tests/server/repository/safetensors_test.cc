#include "server/repository/safetensors.h"

#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/repository/safetensors_writer.h"
#include "tests/testing/test_dir.h"

namespace fuseserve {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr char kName[] = "weights.safetensors";

// A safetensors image with `header` as the JSON text, verbatim, followed by
// `data_bytes` bytes counting up from 0.
std::string Image(const std::string& header, size_t data_bytes) {
  std::string image;
  const uint64_t length = header.size();
  for (int i = 0; i < 8; ++i) image.push_back(static_cast<char>((length >> (8 * i)) & 0xff));
  image += header;
  for (size_t i = 0; i < data_bytes; ++i) image.push_back(static_cast<char>(i & 0xff));
  return image;
}

absl::Status ParseStatus(const std::string& image) {
  return SafetensorsFile::FromBytes(image, kName).status();
}

void ExpectInvalid(const std::string& image, const std::string& problem) {
  const absl::Status status = ParseStatus(image);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(std::string(status.message()), AllOf(HasSubstr(kName), HasSubstr(problem)));
}

bool SameBits(const float* actual, const std::vector<float>& expected) {
  return std::memcmp(actual, expected.data(), expected.size() * sizeof(float)) == 0;
}

std::vector<float> AwkwardValues() {
  float signalling_nan_bits;
  const uint32_t bits = 0x7f800001u;
  std::memcpy(&signalling_nan_bits, &bits, sizeof(bits));
  return {0.0f,
          -0.0f,
          1.5f,
          -3.25e-3f,
          std::numeric_limits<float>::denorm_min(),
          std::numeric_limits<float>::infinity(),
          std::numeric_limits<float>::quiet_NaN(),
          signalling_nan_bits};
}

TEST(SafetensorsFileTest, ReadsBackWhatTheWriterWroteBitExact) {
  const std::vector<float> weight = AwkwardValues();
  const std::vector<float> bias = {7.0f, -8.0f};
  const std::vector<NamedF32Tensor> tensors = {{"layer.weight", {2, 4}, weight},
                                               {"layer.bias", {2}, bias}};
  TestDir dir;
  const std::string path = dir.Path("model.safetensors");
  ASSERT_TRUE(WriteSafetensorsFile(path, tensors).ok());

  auto file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->path(), path);
  ASSERT_EQ((*file)->tensors().size(), 2u);
  const SafetensorsTensor& info = (*file)->tensors().at("layer.weight");
  EXPECT_EQ(info.dtype, "F32");
  EXPECT_EQ(info.shape, Shape({2, 4}));
  EXPECT_EQ(info.byte_size, weight.size() * sizeof(float));

  auto weight_data = (*file)->GetF32("layer.weight", {2, 4});
  ASSERT_TRUE(weight_data.ok()) << weight_data.status();
  EXPECT_TRUE(SameBits(*weight_data, weight));
  auto bias_data = (*file)->GetF32("layer.bias", {2});
  ASSERT_TRUE(bias_data.ok()) << bias_data.status();
  EXPECT_TRUE(SameBits(*bias_data, bias));
}

TEST(SafetensorsFileTest, ReadsInMemoryImage) {
  const std::vector<float> values = {1.0f, 2.0f, 3.0f};
  auto file = SafetensorsFile::FromBytes(SerializeSafetensors({{"x", {3}, values}}), kName);
  ASSERT_TRUE(file.ok()) << file.status();
  auto data = (*file)->GetF32("x", {3});
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_TRUE(SameBits(*data, values));
}

TEST(SafetensorsFileTest, AcceptsScalarsEmptyTensorsAndMetadata) {
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"s":{"dtype":"F32","shape":[],"data_offsets":[0,4]},)"
      R"("e":{"dtype":"F32","shape":[0,3],"data_offsets":[4,4]},)"
      R"("h":{"dtype":"F16","shape":[2],"data_offsets":[4,8]}})";
  auto file = SafetensorsFile::FromBytes(Image(header, 8), kName);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->tensors().size(), 3u);
  EXPECT_EQ((*file)->tensors().count("__metadata__"), 0u);
  EXPECT_TRUE((*file)->GetF32("s", {}).ok());
  EXPECT_TRUE((*file)->GetF32("e", {0, 3}).ok());
  EXPECT_EQ((*file)->tensors().at("h").byte_size, 4u);
}

TEST(SafetensorsFileTest, OpenReportsMissingFileAsNotFound) {
  TestDir dir;
  const std::string path = dir.Path("absent.safetensors");
  const absl::Status status = SafetensorsFile::Open(path).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(status.message()), HasSubstr(path));
}

TEST(SafetensorsFileTest, OpenRejectsDirectory) {
  TestDir dir;
  const absl::Status status = SafetensorsFile::Open(dir.path()).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("not a regular file"));
}

TEST(SafetensorsFileTest, RejectsFileShorterThanLengthField) {
  ExpectInvalid(std::string(5, '\0'), "shorter than the 8-byte header length");
  TestDir dir;
  const std::string path = dir.WriteFile(kName, std::string(3, '\0'));
  const absl::Status status = SafetensorsFile::Open(path).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr(path));
}

TEST(SafetensorsFileTest, RejectsTruncatedFile) {
  const std::string image = SerializeSafetensors({{"w", {4, 4}, std::vector<float>(16, 1.0f)}});
  ExpectInvalid(image.substr(0, image.size() - 4), "past the end of the data section");
}

TEST(SafetensorsFileTest, RejectsHeaderLengthLargerThanFile) {
  std::string image = Image("{}", 0);
  image[0] = static_cast<char>(100);
  ExpectInvalid(image, "header length 100 exceeds the 2 bytes");
  image[7] = static_cast<char>(0xff);  // a length near 2^64 must not wrap
  ExpectInvalid(image, "exceeds the 2 bytes");
}

TEST(SafetensorsFileTest, RejectsNonJsonHeader) {
  ExpectInvalid(Image("{\"w\": {dtype}", 0), "header is not valid JSON");
}

TEST(SafetensorsFileTest, RejectsHeaderThatIsNotAnObject) {
  ExpectInvalid(Image("[1, 2]  ", 0), "header is a JSON array, expected an object");
}

TEST(SafetensorsFileTest, RejectsOffsetsPastEndOfData) {
  ExpectInvalid(Image(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 8),
                "tensor \"w\" has data_offsets [4, 12] past the end of the data section (8 bytes");
}

TEST(SafetensorsFileTest, RejectsEndBeforeBegin) {
  ExpectInvalid(Image(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", 8),
                "tensor \"w\" has data_offsets [8, 4] with end before begin");
}

TEST(SafetensorsFileTest, RejectsMalformedOffsets) {
  ExpectInvalid(Image(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", 4),
                "needs \"data_offsets\" [begin, end]");
  ExpectInvalid(Image(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})", 4),
                "needs \"data_offsets\" [begin, end]");
  ExpectInvalid(Image(R"({"w":{"dtype":"F32","shape":[1]}})", 4), "got nothing");
}

TEST(SafetensorsFileTest, RejectsByteSizeThatDisagreesWithShape) {
  ExpectInvalid(Image(R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}})", 24),
                "spanning 20 bytes, but F32 [2, 3] needs 24 bytes");
}

TEST(SafetensorsFileTest, RejectsShapeWhoseByteSizeOverflows) {
  ExpectInvalid(
      Image(R"({"w":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", 8),
      "byte size overflows");
  ExpectInvalid(Image(R"({"w":{"dtype":"F32","shape":[18446744073709551615],)"
                      R"("data_offsets":[0,8]}})",
                      8),
                "dimensions must be non-negative integers");
}

TEST(SafetensorsFileTest, RejectsNegativeOrFractionalDims) {
  ExpectInvalid(Image(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4),
                "has shape [-1]; dimensions must be non-negative integers");
  ExpectInvalid(Image(R"({"w":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", 4),
                "dimensions must be non-negative integers");
}

TEST(SafetensorsFileTest, RejectsOverlappingRegions) {
  ExpectInvalid(Image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                      R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                      12),
                "tensors \"a\" [0, 8) and \"b\" [4, 12) overlap");
}

TEST(SafetensorsFileTest, RejectsUnknownDtype) {
  ExpectInvalid(Image(R"({"w":{"dtype":"F31","shape":[1],"data_offsets":[0,4]}})", 4),
                "tensor \"w\" has unknown dtype \"F31\"");
  ExpectInvalid(Image(R"({"w":{"dtype":32,"shape":[1],"data_offsets":[0,4]}})", 4),
                "has no string \"dtype\"");
}

TEST(SafetensorsFileTest, RejectsRepeatedTensorName) {
  ExpectInvalid(Image(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                      R"("w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                      8),
                "header lists \"w\" more than once");
}

TEST(SafetensorsFileTest, RejectsMalformedEntriesAndMetadata) {
  ExpectInvalid(Image(R"({"w":[1,2]})", 0), "tensor \"w\" is a JSON array");
  ExpectInvalid(Image(R"({"__metadata__":{"step":3}})", 0),
                "\"__metadata__\" value of \"step\" is a JSON number");
}

TEST(SafetensorsFileTest, GetF32RejectsWrongDtype) {
  auto file = SafetensorsFile::FromBytes(
      Image(R"({"w":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]}})", 4), kName);
  ASSERT_TRUE(file.ok()) << file.status();
  const absl::Status status = (*file)->GetF32("w", {2}, "w = [channels]").status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()),
              AllOf(HasSubstr("tensor \"w\" in weights.safetensors has dtype BF16"),
                    HasSubstr("expected F32 [2] (w = [channels])")));
}

TEST(SafetensorsFileTest, GetF32RejectsWrongShapeNamingBothShapes) {
  auto file = SafetensorsFile::FromBytes(
      SerializeSafetensors({{"gemm.weight", {8, 4}, std::vector<float>(32)}}), kName);
  ASSERT_TRUE(file.ok()) << file.status();
  const absl::Status status =
      (*file)->GetF32("gemm.weight", {8, 8}, "gemm.weight = [out_features, in_features]").status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "tensor \"gemm.weight\" in weights.safetensors has shape [8, 4], expected [8, 8] "
            "(gemm.weight = [out_features, in_features])");
}

TEST(SafetensorsFileTest, GetF32ReportsMissingTensorByName) {
  auto file =
      SafetensorsFile::FromBytes(SerializeSafetensors({{"gn.weight", {4}, std::vector<float>(4)},
                                                       {"gn.bias", {4}, std::vector<float>(4)}}),
                                 kName);
  ASSERT_TRUE(file.ok()) << file.status();
  const absl::Status status = (*file)->GetF32("group_norm.weight", {4}, "[C]").status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(
      std::string(status.message()),
      AllOf(HasSubstr("tensor \"group_norm.weight\" not found in weights.safetensors"),
            HasSubstr("expected F32 [4] ([C])"), HasSubstr("the file holds: gn.bias, gn.weight")));
}

// The header length 9 puts the data at offset 17, so the F32 tensor is
// misaligned both in an in-memory image and in a page-aligned mapping.
TEST(SafetensorsFileTest, HandsOutAlignedDataForMisalignedTensor) {
  const std::vector<float> values = {1.0f, -2.0f, 3.5f};
  std::string header = R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,12]}})";
  header.append(1 + (8 - header.size() % 8) % 8, ' ');
  ASSERT_EQ((8 + header.size()) % 4, 1u);
  std::string image = Image(header, 0);
  image.append(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));

  TestDir dir;
  auto from_bytes = SafetensorsFile::FromBytes(image, kName);
  auto mapped = SafetensorsFile::Open(dir.WriteFile(kName, image));
  for (const auto* file : {&from_bytes, &mapped}) {
    ASSERT_TRUE(file->ok()) << file->status();
    auto data = (**file)->GetF32("w", {3});
    ASSERT_TRUE(data.ok()) << data.status();
    EXPECT_EQ(reinterpret_cast<uintptr_t>(*data) % alignof(float), 0u);
    EXPECT_EQ((*data)[0], 1.0f);
    EXPECT_EQ((*data)[1], -2.0f);
    EXPECT_EQ((*data)[2], 3.5f);
  }
}

}  // namespace
}  // namespace fuseserve
