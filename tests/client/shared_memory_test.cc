// SystemSharedMemoryRegion and its helpers against the real /dev/shm: what is
// created, what a second mapping sees, what is left behind (nothing), and the
// error for every kind of bad request.

#include "client/shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fuseserve::client {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// Whether an object named `key` exists in the system.
bool Exists(const std::string& key) {
  const int fd = ::shm_open(key.c_str(), O_RDONLY, 0);
  if (fd < 0) return false;
  ::close(fd);
  return true;
}

TEST(SystemSharedMemoryRegionTest, CreatesAnObjectThatASecondMappingSees) {
  const std::string key = UniqueSharedMemoryKey("test");
  auto region = SystemSharedMemoryRegion::Create(key, 4099);
  ASSERT_TRUE(region.ok()) << region.status();
  EXPECT_EQ((*region)->key(), key);
  EXPECT_EQ((*region)->size(), 4099u);
  ASSERT_NE((*region)->data(), nullptr);

  const std::vector<float> values = {1.5f, -2.0f, 3.25f};
  ASSERT_TRUE((*region)->WriteFloats(8, values).ok());

  // Another mapping of the same object, as the server makes it.
  const int fd = ::shm_open(key.c_str(), O_RDONLY, 0);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  struct stat info = {};
  ASSERT_EQ(::fstat(fd, &info), 0);
  EXPECT_EQ(info.st_size, 4099);
  EXPECT_EQ(info.st_mode & 0777, 0600u);
  void* other = ::mmap(nullptr, 4099, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  ASSERT_NE(other, MAP_FAILED);
  float seen[3];
  std::memcpy(seen, static_cast<const char*>(other) + 8, sizeof(seen));
  EXPECT_EQ(seen[0], 1.5f);
  EXPECT_EQ(seen[2], 3.25f);
  ::munmap(other, 4099);

  auto floats = (*region)->Floats(8, 3);
  ASSERT_TRUE(floats.ok()) << floats.status();
  EXPECT_THAT(*floats, ::testing::ElementsAre(1.5f, -2.0f, 3.25f));
}

TEST(SystemSharedMemoryRegionTest, RemovesTheObjectOnDestruction) {
  const std::string key = UniqueSharedMemoryKey("test");
  {
    auto region = SystemSharedMemoryRegion::Create(key, 64);
    ASSERT_TRUE(region.ok()) << region.status();
    EXPECT_TRUE(Exists(key));
  }
  EXPECT_FALSE(Exists(key));
}

TEST(SystemSharedMemoryRegionTest, UnlinkRemovesTheNameButKeepsTheMapping) {
  const std::string key = UniqueSharedMemoryKey("test");
  auto region = SystemSharedMemoryRegion::Create(key, 64);
  ASSERT_TRUE(region.ok()) << region.status();
  (*region)->Unlink();
  EXPECT_FALSE(Exists(key));
  ASSERT_TRUE((*region)->WriteFloats(0, {7.0f}).ok());
  EXPECT_EQ((*(*region)->Floats(0, 1))[0], 7.0f);
  // The key is free again, and destroying the first region leaves the new one alone.
  auto again = SystemSharedMemoryRegion::Create(key, 64);
  ASSERT_TRUE(again.ok()) << again.status();
  region->reset();
  EXPECT_TRUE(Exists(key));
}

TEST(SystemSharedMemoryRegionTest, AnExistingKeyIsAlreadyExistsAndLeftAlone) {
  const std::string key = UniqueSharedMemoryKey("test");
  auto first = SystemSharedMemoryRegion::Create(key, 64);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE((*first)->WriteFloats(0, {42.0f}).ok());
  const auto second = SystemSharedMemoryRegion::Create(key, 128);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kAlreadyExists) << second.status();
  EXPECT_THAT(second.status().message(), HasSubstr(key));
  EXPECT_TRUE(Exists(key));
  EXPECT_EQ((*(*first)->Floats(0, 1))[0], 42.0f);
}

TEST(SystemSharedMemoryRegionTest, BadKeysAndZeroSizesAreInvalidArgument) {
  for (const std::string& key :
       {std::string(""), std::string("no_slash"), std::string("/"), std::string("/a/b"),
        std::string("//a"), "/" + std::string(NAME_MAX + 1, 'k')}) {
    const auto region = SystemSharedMemoryRegion::Create(key, 64);
    EXPECT_EQ(region.status().code(), absl::StatusCode::kInvalidArgument) << key;
    EXPECT_THAT(region.status().message(), HasSubstr("/name")) << key;
  }
  std::string longest = UniqueSharedMemoryKey("test");
  longest.resize(NAME_MAX + 1, 'k');
  EXPECT_TRUE(SystemSharedMemoryRegion::Create(longest, 1).ok());

  const std::string key = UniqueSharedMemoryKey("test");
  const auto empty = SystemSharedMemoryRegion::Create(key, 0);
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(Exists(key));
}

TEST(SystemSharedMemoryRegionTest, MoreThanTheSystemHasIsResourceExhaustedAndLeavesNothing) {
  const std::string key = UniqueSharedMemoryKey("test");
  const auto huge = SystemSharedMemoryRegion::Create(key, uint64_t{1} << 50);  // 1 PiB
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kResourceExhausted) << huge.status();
  EXPECT_THAT(huge.status().message(), HasSubstr("--shm-size"));
  EXPECT_FALSE(Exists(key));
}

TEST(SystemSharedMemoryRegionTest, ReadsAndWritesStayInsideTheRegion) {
  auto region = SystemSharedMemoryRegion::Create(UniqueSharedMemoryKey("test"), 16);
  ASSERT_TRUE(region.ok()) << region.status();
  EXPECT_TRUE((*region)->Floats(0, 4).ok());
  EXPECT_TRUE((*region)->Floats(16, 0).ok());
  EXPECT_EQ((*region)->Floats(4, 4).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ((*region)->Floats(20, 0).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ((*region)->Floats(0, uint64_t{1} << 62).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ((*region)->Floats(2, 1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*region)->WriteFloats(12, {1.0f, 2.0f}).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ((*region)->WriteFloats(uint64_t{1} << 63, {1.0f}).code(),
            absl::StatusCode::kOutOfRange);
}

TEST(UniqueSharedMemoryKeyTest, KeysAreValidDistinctAndNameTheProcess) {
  std::set<std::string> keys;
  for (int i = 0; i < 1000; ++i) keys.insert(UniqueSharedMemoryKey("tag"));
  EXPECT_EQ(keys.size(), 1000u);
  for (const std::string& key : keys) {
    ASSERT_THAT(key, StartsWith(absl::StrCat("/fuseserve_tag_", ::getpid(), "_")));
    ASSERT_EQ(key.find('/', 1), std::string::npos);
  }
}

TEST(SharedMemoryTypeTest, ParsesNoneAndSystemOnly) {
  EXPECT_EQ(*ParseSharedMemoryType("none"), SharedMemoryType::kNone);
  EXPECT_EQ(*ParseSharedMemoryType("system"), SharedMemoryType::kSystem);
  const auto cuda = ParseSharedMemoryType("cuda");
  EXPECT_EQ(cuda.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(cuda.status().message(), HasSubstr("none or system"));
  EXPECT_STREQ(SharedMemoryTypeName(SharedMemoryType::kSystem), "system");
  EXPECT_STREQ(SharedMemoryTypeName(SharedMemoryType::kNone), "none");
}

}  // namespace
}  // namespace fuseserve::client
