#include "common/malloc_trimmer.h"

#include <malloc.h>

#include <cstdlib>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace fuseserve {
namespace {

TEST(MallocTrimmerTest, TrimsEveryIntervalUntilDestroyed) {
  MallocTrimmer trimmer(absl::Milliseconds(5));
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (trimmer.trims() < 3 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(1));
  EXPECT_GE(trimmer.trims(), 3);
}

TEST(MallocTrimmerTest, DestructionDoesNotWaitForTheInterval) {
  const absl::Time start = absl::Now();
  { MallocTrimmer trimmer(absl::Hours(1)); }
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define FUSESERVE_SANITIZER_ALLOCATOR 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define FUSESERVE_SANITIZER_ALLOCATOR 1
#endif

// The premise of the trimmer: free memory scattered between live blocks of
// a glibc arena stays resident until malloc_trim returns its pages. Blocks
// of 64 KiB (below the mmap threshold, so from the arena) are allocated and
// touched, every other one freed; malloc_trim(0) then reports that it
// returned memory. (Under a sanitizer, malloc is the sanitizer's and glibc's
// arenas are unused.)
TEST(MallocTrimmerTest, GlibcReturnsFreePagesHeldBetweenLiveBlocks) {
#ifdef FUSESERVE_SANITIZER_ALLOCATOR
  GTEST_SKIP() << "malloc is the sanitizer's allocator";
#endif
  constexpr size_t kBlock = 64 * 1024;
  constexpr int kBlocks = 512;  // 32 MiB
  std::vector<char*> blocks;
  for (int i = 0; i < kBlocks; ++i) {
    auto* block = static_cast<char*>(std::malloc(kBlock));
    ASSERT_NE(block, nullptr);
    for (size_t j = 0; j < kBlock; j += 4096) block[j] = 1;
    blocks.push_back(block);
  }
  for (int i = 0; i < kBlocks; i += 2) {
    std::free(blocks[i]);
    blocks[i] = nullptr;
  }
  // malloc_trim(0) reports whether it returned any memory to the system.
  EXPECT_EQ(malloc_trim(0), 1);
  for (char* block : blocks) std::free(block);
}

}  // namespace
}  // namespace fuseserve
