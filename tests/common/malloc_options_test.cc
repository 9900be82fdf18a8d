#include "common/malloc_options.h"

#include <malloc.h>

#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>

#include "absl/base/config.h"
#include "gtest/gtest.h"

namespace fuseserve {
namespace {

// The sanitizers' allocators replace glibc's malloc, and with it mallopt.
#if defined(ABSL_HAVE_ADDRESS_SANITIZER) || defined(ABSL_HAVE_THREAD_SANITIZER)
constexpr bool kUnderSanitizerAllocator = true;
#else
constexpr bool kUnderSanitizerAllocator = false;
#endif

constexpr size_t kBlockBytes = size_t{8} << 20;

// Sets an environment variable for one test and restores it after.
class ScopedVariable {
 public:
  ScopedVariable(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value == nullptr) {
      unsetenv(name);
    } else {
      setenv(name, value, /*overwrite=*/1);
    }
  }
  ~ScopedVariable() {
    if (old_.has_value()) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// Frees a block allocated at the top of the main heap and returns how much
// free memory the top then keeps (mallinfo2's keepcost): the block's bytes
// when the heap is not trimmed, far less when free() gave them back.
size_t TopKeptAfterFreeingABlock() {
  char* block = static_cast<char*>(std::malloc(kBlockBytes));
  std::memset(block, 1, kBlockBytes);
  // Keeps the compiler from eliding the unused block's malloc/free pair.
  asm volatile("" : : "r"(block) : "memory");
  std::free(block);
  return mallinfo2().keepcost;
}

TEST(MallocOptionsTest, AVariableOfTheEnvironmentWins) {
  ScopedVariable variable("MALLOC_TRIM_THRESHOLD_", "131072");
  ScopedVariable tunables("GLIBC_TUNABLES", nullptr);
  EXPECT_FALSE(SetMallocOptionUnlessConfigured(MallocOption::kTrimThreshold, 1 << 20));
}

TEST(MallocOptionsTest, ATunableOfTheEnvironmentWinsAnywhereInTheList) {
  ScopedVariable variable("MALLOC_MMAP_THRESHOLD_", nullptr);
  ScopedVariable tunables("GLIBC_TUNABLES",
                          "glibc.malloc.arena_max=2:glibc.malloc.mmap_threshold=65536");
  EXPECT_FALSE(SetMallocOptionUnlessConfigured(MallocOption::kMmapThreshold, 1 << 20));
}

// In a child process, so that the settings stay out of the other tests.
TEST(MallocOptionsDeathTest, OtherTunablesLeaveTheOptionToTheProgram) {
  if (kUnderSanitizerAllocator) GTEST_SKIP() << "the sanitizer's allocator has no mallopt";
  EXPECT_EXIT(
      {
        ScopedVariable variable("MALLOC_TRIM_THRESHOLD_", nullptr);
        // A longer name that starts with the option's is another tunable.
        ScopedVariable tunables("GLIBC_TUNABLES",
                                "glibc.malloc.mmap_threshold=65536:"
                                "glibc.malloc.trim_threshold_x=1");
        std::exit(SetMallocOptionUnlessConfigured(MallocOption::kTrimThreshold, 1 << 20) ? 0 : 1);
      },
      testing::ExitedWithCode(0), "");
}

TEST(MallocOptionsDeathTest, TheNoTrimThresholdKeepsAFreedHeapTop) {
  if (kUnderSanitizerAllocator) GTEST_SKIP() << "the sanitizer's allocator has no mallopt";
  EXPECT_EXIT(
      {
        ScopedVariable mmap("MALLOC_MMAP_THRESHOLD_", nullptr);
        ScopedVariable trim("MALLOC_TRIM_THRESHOLD_", nullptr);
        ScopedVariable tunables("GLIBC_TUNABLES", nullptr);
        // The block comes from the heap, not a mapping of its own.
        if (!SetMallocOptionUnlessConfigured(MallocOption::kMmapThreshold, 32 << 20)) {
          std::exit(2);
        }
        // The premise: at glibc's default threshold, free() gives it back.
        if (mallopt(M_TRIM_THRESHOLD, 128 << 10) != 1) std::exit(3);
        if (TopKeptAfterFreeingABlock() >= kBlockBytes) std::exit(4);
        if (!SetMallocOptionUnlessConfigured(MallocOption::kTrimThreshold, kNoTrimThresholdBytes)) {
          std::exit(5);
        }
        std::exit(TopKeptAfterFreeingABlock() >= kBlockBytes ? 0 : 6);
      },
      testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace fuseserve
