#include "server/repository/safetensors_writer.h"

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "server/repository/safetensors.h"
#include "tests/testing/test_dir.h"

namespace fuseserve {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

uint64_t HeaderLength(const std::string& image) {
  uint64_t length = 0;
  for (int i = 0; i < 8; ++i) {
    length |= static_cast<uint64_t>(static_cast<unsigned char>(image[i])) << (8 * i);
  }
  return length;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::vector<std::string> FileNames(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    names.push_back(entry.path().filename().string());
  }
  return names;
}

TEST(SafetensorsWriterTest, PadsHeaderToMultipleOfEightAndWritesDataInOrder) {
  const std::vector<NamedF32Tensor> tensors = {{"b", {2}, {1.0f, 2.0f}}, {"a", {1, 1}, {3.0f}}};
  const std::string image = SerializeSafetensors(tensors);
  const uint64_t header_length = HeaderLength(image);
  EXPECT_EQ(header_length % 8, 0u);
  ASSERT_EQ(image.size(), 8 + header_length + 3 * sizeof(float));

  const std::string header = image.substr(8, header_length);
  const size_t json_end = header.find_last_of('}') + 1;
  EXPECT_EQ(header.substr(json_end), std::string(header_length - json_end, ' '));
  const nlohmann::json json = nlohmann::json::parse(header);
  EXPECT_EQ(json["b"]["dtype"], "F32");
  EXPECT_EQ(json["b"]["shape"], nlohmann::json({2}));
  EXPECT_EQ(json["b"]["data_offsets"], nlohmann::json({0, 8}));
  EXPECT_EQ(json["a"]["shape"], nlohmann::json({1, 1}));
  EXPECT_EQ(json["a"]["data_offsets"], nlohmann::json({8, 12}));

  float data[3];
  std::memcpy(data, image.data() + 8 + header_length, sizeof(data));
  EXPECT_THAT(data, ElementsAre(1.0f, 2.0f, 3.0f));
}

TEST(SafetensorsWriterTest, SerializesEmptyListAsValidFile) {
  auto file = SafetensorsFile::FromBytes(SerializeSafetensors({}), "empty");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_TRUE((*file)->tensors().empty());
}

TEST(SafetensorsWriterTest, EscapesNamesInHeader) {
  const std::string name = "odd \"name\"\\with\nescapes";
  auto file = SafetensorsFile::FromBytes(SerializeSafetensors({{name, {1}, {4.0f}}}), "odd");
  ASSERT_TRUE(file.ok()) << file.status();
  auto data = (*file)->GetF32(name, {1});
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(**data, 4.0f);
}

TEST(SafetensorsWriterTest, ReplacesExistingFileAndLeavesNoTemporaryFile) {
  TestDir dir;
  const std::string path = dir.WriteFile("model.safetensors", "old contents");
  const std::vector<NamedF32Tensor> tensors = {{"w", {2}, {5.0f, 6.0f}}};
  ASSERT_TRUE(WriteSafetensorsFile(path, tensors).ok());
  EXPECT_EQ(ReadFile(path), SerializeSafetensors(tensors));
  EXPECT_THAT(FileNames(dir.path()), ElementsAre("model.safetensors"));
}

TEST(SafetensorsWriterTest, RejectsDataThatDisagreesWithShape) {
  TestDir dir;
  const std::string path = dir.Path("model.safetensors");
  const absl::Status status = WriteSafetensorsFile(path, {{"w", {2, 2}, {1.0f, 2.0f, 3.0f}}});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("tensor \"w\" has shape [2, 2] (4 values) but 3 values of data"));
  EXPECT_TRUE(FileNames(dir.path()).empty());
}

TEST(SafetensorsWriterTest, RejectsRepeatedAndEmptyNames) {
  TestDir dir;
  const std::string path = dir.Path("model.safetensors");
  const absl::Status repeated =
      WriteSafetensorsFile(path, {{"w", {1}, {1.0f}}, {"w", {1}, {2.0f}}});
  EXPECT_EQ(repeated.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(repeated.message()), HasSubstr("tensor \"w\" appears twice"));
  const absl::Status empty = WriteSafetensorsFile(path, {{"", {1}, {1.0f}}});
  EXPECT_EQ(empty.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(FileNames(dir.path()).empty());
}

TEST(SafetensorsWriterTest, ReportsUnwritableDirectory) {
  TestDir dir;
  const std::string path = dir.Path("missing/model.safetensors");
  const absl::Status status = WriteSafetensorsFile(path, {{"w", {1}, {1.0f}}});
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(std::string(status.message()), HasSubstr(path));
}

}  // namespace
}  // namespace fuseserve
