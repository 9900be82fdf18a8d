#include "server/shm/shared_memory_region.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/server/shm/test_shared_memory_object.h"

namespace fuseserve {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::TestSharedMemoryObject;
using testing::UniqueSharedMemoryKey;

constexpr uint64_t kMaxOffset = std::numeric_limits<uint64_t>::max();

// An object of `byte_size` bytes where byte i holds i % 251 (a prime, so that
// no page- or word-sized shift of the data looks right by accident).
std::unique_ptr<TestSharedMemoryObject> PatternedObject(size_t byte_size) {
  auto object = TestSharedMemoryObject::Create(byte_size);
  EXPECT_TRUE(object.ok()) << object.status();
  if (!object.ok()) return nullptr;
  for (size_t i = 0; i < byte_size; ++i) (*object)->data()[i] = static_cast<uint8_t>(i % 251);
  return *std::move(object);
}

TEST(ValidateSharedMemoryKeyTest, AcceptsPortableNames) {
  for (const std::string& key :
       {std::string("/a"), std::string("/input_simple"), std::string("/x.y-z_0"),
        "/" + std::string(kMaxSharedMemoryKeyLength - 1, 'k')}) {
    EXPECT_TRUE(ValidateSharedMemoryKey(key).ok()) << key;
  }
}

TEST(ValidateSharedMemoryKeyTest, RejectsNamesThatAreNotPortableShmNames) {
  const struct {
    std::string key;
    const char* rule;
  } cases[] = {
      {"", "must start with '/'"},
      {"input", "must start with '/'"},
      {"/", "needs a name after the '/'"},
      {"/dir/input", "must not contain another '/'"},
      {"/../etc", "must not contain another '/'"},
      {std::string("/a\0b", 4), "must not contain a NUL"},
      {"/.", "'.' or '..'"},
      {"/..", "'.' or '..'"},
      {"/" + std::string(kMaxSharedMemoryKeyLength, 'k'), "at most 256"},
  };
  for (const auto& test_case : cases) {
    const absl::Status status = ValidateSharedMemoryKey(test_case.key);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << test_case.key;
    EXPECT_THAT(status.message(), HasSubstr(test_case.rule)) << test_case.key;
  }
}

TEST(SharedMemoryRegionTest, MapsTheRegisteredRangeAtAnUnalignedOffset) {
  auto object = PatternedObject(3 * 4096 + 100);
  ASSERT_NE(object, nullptr);

  auto region = SharedMemoryRegion::Map("r", object->key(), 4096 + 7, 5000);

  ASSERT_TRUE(region.ok()) << region.status();
  EXPECT_EQ((*region)->name(), "r");
  EXPECT_EQ((*region)->key(), object->key());
  EXPECT_EQ((*region)->offset(), 4096u + 7);
  EXPECT_EQ((*region)->byte_size(), 5000u);
  EXPECT_EQ(std::memcmp((*region)->data(), object->data() + 4096 + 7, 5000), 0);
}

TEST(SharedMemoryRegionTest, WritesThroughTheRegionReachTheObject) {
  auto object = PatternedObject(4096);
  ASSERT_NE(object, nullptr);
  auto region = SharedMemoryRegion::Map("r", object->key(), 10, 20);
  ASSERT_TRUE(region.ok()) << region.status();

  std::memset((*region)->data(), 0xAB, 20);

  EXPECT_EQ(object->data()[9], 9);
  EXPECT_EQ(object->data()[10], 0xAB);
  EXPECT_EQ(object->data()[29], 0xAB);
  EXPECT_EQ(object->data()[30], 30);
}

TEST(SharedMemoryRegionTest, AcceptsRangeEndingAtTheEndOfTheObject) {
  auto object = PatternedObject(1000);
  ASSERT_NE(object, nullptr);

  auto region = SharedMemoryRegion::Map("r", object->key(), 600, 400);

  ASSERT_TRUE(region.ok()) << region.status();
  EXPECT_EQ((*region)->data()[399], object->data()[999]);
}

TEST(SharedMemoryRegionTest, RejectsRangePastTheEndOfTheObject) {
  auto object = PatternedObject(1000);
  ASSERT_NE(object, nullptr);

  auto region = SharedMemoryRegion::Map("r", object->key(), 600, 401);

  ASSERT_EQ(region.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(region.status().message(),
              AllOf(HasSubstr("failed to register shared memory region 'r'"),
                    HasSubstr("offset 600 + byte_size 401"), HasSubstr(object->key()),
                    HasSubstr("(1000 bytes)")));
}

TEST(SharedMemoryRegionTest, RejectsOffsetPastTheEndOfTheObject) {
  auto object = PatternedObject(1000);
  ASSERT_NE(object, nullptr);

  EXPECT_EQ(SharedMemoryRegion::Map("r", object->key(), 1001, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// offset + byte_size wraps to 3 in 64 bits, which would pass a naive check.
TEST(SharedMemoryRegionTest, RejectsRangeWhoseEndOverflows) {
  auto object = PatternedObject(1000);
  ASSERT_NE(object, nullptr);

  EXPECT_EQ(SharedMemoryRegion::Map("r", object->key(), 4, kMaxOffset).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SharedMemoryRegion::Map("r", object->key(), kMaxOffset, 4).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SharedMemoryRegionTest, RejectsZeroByteSize) {
  auto object = PatternedObject(1000);
  ASSERT_NE(object, nullptr);

  auto region = SharedMemoryRegion::Map("r", object->key(), 0, 0);

  ASSERT_EQ(region.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(region.status().message(), HasSubstr("byte_size must be positive"));
}

TEST(SharedMemoryRegionTest, RejectsInvalidKeyBeforeOpeningAnything) {
  auto region = SharedMemoryRegion::Map("r", "/etc/passwd", 0, 1);

  ASSERT_EQ(region.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(region.status().message(), HasSubstr("must not contain another '/'"));
}

TEST(SharedMemoryRegionTest, ReportsMissingObjectAsNotFound) {
  const std::string key = UniqueSharedMemoryKey();

  auto region = SharedMemoryRegion::Map("r", key, 0, 1);

  ASSERT_EQ(region.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(region.status().message(),
              AllOf(HasSubstr("unable to open shared memory object '" + key + "'"),
                    HasSubstr("No such file")));
}

// A FIFO in /dev/shm opens read-write without blocking on Linux but is not
// memory; it must be refused, not mapped.
TEST(SharedMemoryRegionTest, RejectsKeyThatNamesSomethingOtherThanAnObject) {
  const std::string key = UniqueSharedMemoryKey();
  const std::string path = "/dev/shm" + key;
  if (::mkfifo(path.c_str(), 0600) != 0) GTEST_SKIP() << "cannot create a FIFO in /dev/shm";

  auto region = SharedMemoryRegion::Map("r", key, 0, 1);
  ::unlink(path.c_str());

  ASSERT_EQ(region.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(region.status().message(), HasSubstr("is not a shared memory object"));
}

TEST(SharedMemoryRegionTest, MappingOutlivesTheObjectsName) {
  auto object = PatternedObject(4096);
  ASSERT_NE(object, nullptr);
  auto region = SharedMemoryRegion::Map("r", object->key(), 100, 200);
  ASSERT_TRUE(region.ok()) << region.status();

  object->Unlink();

  EXPECT_EQ(std::memcmp((*region)->data(), object->data() + 100, 200), 0);
}

}  // namespace
}  // namespace fuseserve
