#include "server/shm/shared_memory_manager.h"

#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/server/shm/test_shared_memory_object.h"

namespace fuseserve {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using testing::TestSharedMemoryObject;
using testing::UniqueSharedMemoryKey;

constexpr size_t kObjectBytes = 8192;

// The names of `regions`, in order.
std::vector<std::string> Names(
    const std::vector<std::shared_ptr<const SharedMemoryRegion>>& regions) {
  std::vector<std::string> names;
  for (const auto& region : regions) names.push_back(region->name());
  return names;
}

class SharedMemoryManagerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto object = TestSharedMemoryObject::Create(kObjectBytes);
    ASSERT_TRUE(object.ok()) << object.status();
    object_ = *std::move(object);
    for (size_t i = 0; i < kObjectBytes; ++i) object_->data()[i] = static_cast<uint8_t>(i % 251);
  }

  std::vector<std::string> RegisteredNames() {
    auto regions = manager_.Status("");
    EXPECT_TRUE(regions.ok()) << regions.status();
    return regions.ok() ? Names(*regions) : std::vector<std::string>{};
  }

  std::unique_ptr<TestSharedMemoryObject> object_;
  SharedMemoryManager manager_;
};

TEST_F(SharedMemoryManagerTest, ReportsRegisteredRegionsByName) {
  ASSERT_TRUE(manager_.Register("output", object_->key(), 4096, 1024).ok());
  ASSERT_TRUE(manager_.Register("input", object_->key(), 0, 4096).ok());

  auto all = manager_.Status("");
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_THAT(Names(*all), ElementsAre("input", "output"));

  auto one = manager_.Status("output");
  ASSERT_TRUE(one.ok()) << one.status();
  ASSERT_EQ(one->size(), 1u);
  EXPECT_EQ((*one)[0]->name(), "output");
  EXPECT_EQ((*one)[0]->key(), object_->key());
  EXPECT_EQ((*one)[0]->offset(), 4096u);
  EXPECT_EQ((*one)[0]->byte_size(), 1024u);
}

TEST_F(SharedMemoryManagerTest, StatusOfNoRegionsIsEmpty) {
  EXPECT_THAT(RegisteredNames(), IsEmpty());
}

TEST_F(SharedMemoryManagerTest, StatusOfUnknownNameIsNotFound) {
  auto status = manager_.Status("nope");

  ASSERT_EQ(status.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(status.status().message(), "Unable to find system shared memory region: 'nope'");
}

TEST_F(SharedMemoryManagerTest, RefusesNameAlreadyRegisteredAndKeepsTheFirst) {
  ASSERT_TRUE(manager_.Register("r", object_->key(), 0, 16).ok());

  const absl::Status again = manager_.Register("r", object_->key(), 16, 32);

  EXPECT_EQ(again.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(again.message(), "shared memory region 'r' already in manager");
  auto status = manager_.Status("r");
  ASSERT_TRUE(status.ok());
  EXPECT_EQ((*status)[0]->byte_size(), 16u);
}

TEST_F(SharedMemoryManagerTest, RefusesEmptyName) {
  const absl::Status status = manager_.Register("", object_->key(), 0, 16);

  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("name must not be empty"));
}

TEST_F(SharedMemoryManagerTest, RegistersNothingWhenMappingFails) {
  EXPECT_EQ(manager_.Register("r", UniqueSharedMemoryKey(), 0, 16).code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(manager_.Register("r", "no-slash", 0, 16).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(manager_.Register("r", object_->key(), kObjectBytes, 1).code(),
            absl::StatusCode::kInvalidArgument);

  EXPECT_THAT(RegisteredNames(), IsEmpty());
}

TEST_F(SharedMemoryManagerTest, UnregistersOneRegionByName) {
  ASSERT_TRUE(manager_.Register("a", object_->key(), 0, 16).ok());
  ASSERT_TRUE(manager_.Register("b", object_->key(), 0, 16).ok());

  manager_.Unregister("a");

  EXPECT_THAT(RegisteredNames(), ElementsAre("b"));
}

TEST_F(SharedMemoryManagerTest, UnregistersEveryRegionForAnEmptyName) {
  ASSERT_TRUE(manager_.Register("a", object_->key(), 0, 16).ok());
  ASSERT_TRUE(manager_.Register("b", object_->key(), 0, 16).ok());

  manager_.Unregister("");

  EXPECT_THAT(RegisteredNames(), IsEmpty());
}

TEST_F(SharedMemoryManagerTest, UnregisteringAnUnknownNameChangesNothing) {
  ASSERT_TRUE(manager_.Register("a", object_->key(), 0, 16).ok());

  manager_.Unregister("nope");

  EXPECT_THAT(RegisteredNames(), ElementsAre("a"));
}

TEST_F(SharedMemoryManagerTest, NameCanBeRegisteredAgainAfterUnregister) {
  ASSERT_TRUE(manager_.Register("a", object_->key(), 0, 16).ok());
  manager_.Unregister("a");

  EXPECT_TRUE(manager_.Register("a", object_->key(), 16, 32).ok());
}

TEST(SharedMemoryManagerLimitTest, RefusesRegionsBeyondTheLimitUntilOneIsUnregistered) {
  auto object = TestSharedMemoryObject::Create(64);
  ASSERT_TRUE(object.ok()) << object.status();
  SharedMemoryManager manager(/*max_regions=*/2);
  ASSERT_TRUE(manager.Register("a", (*object)->key(), 0, 8).ok());
  ASSERT_TRUE(manager.Register("b", (*object)->key(), 0, 8).ok());

  const absl::Status third = manager.Register("c", (*object)->key(), 0, 8);
  EXPECT_EQ(third.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(third.message(), AllOf(HasSubstr("'c'"), HasSubstr("2 regions")));

  manager.Unregister("a");
  EXPECT_TRUE(manager.Register("c", (*object)->key(), 0, 8).ok());
}

TEST_F(SharedMemoryManagerTest, FindReturnsTheBytesAtAnOffsetInTheRegion) {
  ASSERT_TRUE(manager_.Register("r", object_->key(), 1000, 2000).ok());

  auto view = manager_.Find("r", 24, 100);

  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_EQ(view->byte_size, 100u);
  EXPECT_EQ(view->offset_in_region, 24u);
  EXPECT_EQ(view->region->name(), "r");
  EXPECT_EQ(std::memcmp(view->data, object_->data() + 1024, 100), 0);
}

TEST_F(SharedMemoryManagerTest, FindAcceptsRangeEndingAtTheEndOfTheRegion) {
  ASSERT_TRUE(manager_.Register("r", object_->key(), 0, 100).ok());

  EXPECT_TRUE(manager_.Find("r", 60, 40).ok());
  EXPECT_TRUE(manager_.Find("r", 100, 0).ok());
}

TEST_F(SharedMemoryManagerTest, FindOfUnknownRegionIsNotFound) {
  auto view = manager_.Find("nope", 0, 4);

  ASSERT_EQ(view.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(view.status().message(), "Unable to find shared memory region: 'nope'");
}

TEST_F(SharedMemoryManagerTest, FindRejectsRangesOutsideTheRegion) {
  ASSERT_TRUE(manager_.Register("r", object_->key(), 0, 100).ok());
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
  const struct {
    uint64_t offset;
    uint64_t byte_size;
  } cases[] = {{61, 40}, {0, 101}, {101, 0}, {8, kMax}, {kMax, 8}, {kMax, kMax}};

  for (const auto& test_case : cases) {
    auto view = manager_.Find("r", test_case.offset, test_case.byte_size);
    ASSERT_EQ(view.status().code(), absl::StatusCode::kInvalidArgument)
        << test_case.offset << " + " << test_case.byte_size;
    EXPECT_THAT(view.status().message(),
                AllOf(HasSubstr(absl::StrCat("offset ", test_case.offset, " + byte size ",
                                             test_case.byte_size)),
                      HasSubstr("out of bounds of shared memory region 'r' (100 bytes)")));
  }
}

TEST_F(SharedMemoryManagerTest, ViewKeepsTheMappingAfterUnregisterAndUnlink) {
  ASSERT_TRUE(manager_.Register("r", object_->key(), 0, kObjectBytes).ok());
  auto view = manager_.Find("r", 4000, 100);
  ASSERT_TRUE(view.ok()) << view.status();

  manager_.Unregister("r");
  object_->Unlink();

  EXPECT_EQ(view->region.use_count(), 1) << "the view holds the last reference";
  EXPECT_EQ(std::memcmp(view->data, object_->data() + 4000, 100), 0);
  view->data[0] = 0x5A;
  EXPECT_EQ(object_->data()[4000], 0x5A) << "still the client's memory";
}

// Registrations, lookups and unregistrations from several threads: every
// lookup either misses or sees the bytes its region maps (TSan checks the
// locking in the sanitizer build).
TEST_F(SharedMemoryManagerTest, ConcurrentRegisterFindAndUnregisterAreConsistent) {
  constexpr int kIterations = 200;
  constexpr int kNames = 4;
  const auto name = [](int i) { return absl::StrCat("r", i % kNames); };
  // Region ri maps 64 bytes at offset 64 * i of the object.
  const auto churn = [&](int thread) {
    for (int i = 0; i < kIterations; ++i) {
      const int n = (i + thread) % kNames;
      const absl::Status status = manager_.Register(name(n), object_->key(), 64 * n, 64);
      EXPECT_TRUE(status.ok() || status.code() == absl::StatusCode::kAlreadyExists) << status;
      manager_.Unregister(name(n + 1));
    }
  };
  std::vector<int> mismatches(2, 0);
  const auto look_up = [&](int thread) {
    for (int i = 0; i < kIterations; ++i) {
      const int n = i % kNames;
      auto view = manager_.Find(name(n), 0, 64);
      if (!view.ok()) {
        EXPECT_EQ(view.status().code(), absl::StatusCode::kNotFound);
        continue;
      }
      if (std::memcmp(view->data, object_->data() + 64 * n, 64) != 0) ++mismatches[thread];
    }
  };
  std::vector<std::thread> threads;
  threads.emplace_back(churn, 0);
  threads.emplace_back(churn, 1);
  threads.emplace_back(look_up, 0);
  threads.emplace_back(look_up, 1);
  for (std::thread& thread : threads) thread.join();

  EXPECT_THAT(mismatches, ElementsAre(0, 0));
}

}  // namespace
}  // namespace fuseserve
