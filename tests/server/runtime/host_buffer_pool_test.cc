#include "server/runtime/host_buffer_pool.h"

#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "server/runtime/page_locked_memory.h"

namespace fuseserve {
namespace {

std::shared_ptr<HostBufferPool> PageablePool(size_t max_idle_bytes = size_t{1} << 30) {
  HostBufferPool::Options options;
  options.max_idle_bytes = max_idle_bytes;
  return HostBufferPool::Create(options);
}

TEST(HostBufferPoolTest, GivesWritablePageAlignedBuffersOfTheSizeAskedFor) {
  auto pool = PageablePool();
  absl::StatusOr<HostBuffer> buffer = pool->Acquire(10000);
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  EXPECT_EQ(buffer->size(), 10000u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(buffer->data()) % 4096, 0u);
  std::memset(buffer->data(), 0xAB, buffer->size());
  EXPECT_FALSE(buffer->page_locked());
}

TEST(HostBufferPoolTest, ReusesAReturnedBufferInsteadOfAllocating) {
  auto pool = PageablePool();
  char* first = nullptr;
  {
    absl::StatusOr<HostBuffer> buffer = pool->Acquire(1 << 20);
    ASSERT_TRUE(buffer.ok());
    first = buffer->data();
  }
  EXPECT_EQ(pool->idle_bytes(), size_t{1} << 20);
  for (int i = 0; i < 10; ++i) {
    absl::StatusOr<HostBuffer> buffer = pool->Acquire(1 << 20);
    ASSERT_TRUE(buffer.ok());
    EXPECT_EQ(buffer->data(), first);
  }
  EXPECT_EQ(pool->allocations(), 1);
}

TEST(HostBufferPoolTest, ReusesOnlyBuffersAtMostTwiceTheSize) {
  auto pool = PageablePool();
  { ASSERT_TRUE(pool->Acquire(1 << 20).ok()); }
  {
    absl::StatusOr<HostBuffer> small = pool->Acquire(1 << 18);  // a quarter: not reused
    ASSERT_TRUE(small.ok());
    EXPECT_EQ(pool->allocations(), 2);
  }
  absl::StatusOr<HostBuffer> half = pool->Acquire((1 << 19) + 1);  // just over half: reused
  ASSERT_TRUE(half.ok());
  EXPECT_EQ(pool->allocations(), 2);
  EXPECT_EQ(half->size(), (size_t{1} << 19) + 1);
  absl::StatusOr<HostBuffer> larger = pool->Acquire((1 << 20) + 1);  // larger: new
  ASSERT_TRUE(larger.ok());
  EXPECT_EQ(pool->allocations(), 3);
}

TEST(HostBufferPoolTest, FreesReturnedBuffersBeyondTheIdleLimit) {
  auto pool = PageablePool(/*max_idle_bytes=*/1 << 20);
  {
    absl::StatusOr<HostBuffer> a = pool->Acquire(1 << 20);
    absl::StatusOr<HostBuffer> b = pool->Acquire(1 << 20);
    ASSERT_TRUE(a.ok() && b.ok());
  }
  EXPECT_EQ(pool->idle_bytes(), size_t{1} << 20);
}

TEST(HostBufferPoolTest, AReturnToAFullPoolDisplacesTheLeastRecentlyReturned) {
  constexpr size_t kPage = 4096;
  auto pool = PageablePool(/*max_idle_bytes=*/3 * kPage);
  {
    absl::StatusOr<HostBuffer> a = pool->Acquire(kPage);
    absl::StatusOr<HostBuffer> b = pool->Acquire(kPage);
    absl::StatusOr<HostBuffer> c = pool->Acquire(kPage);
    ASSERT_TRUE(a.ok() && b.ok() && c.ok());
    *a = HostBuffer();  // returned first, then b, then c
    *b = HostBuffer();
  }
  ASSERT_EQ(pool->idle_bytes(), 3 * kPage);
  EXPECT_EQ(pool->allocations(), 3);
  // Two pages returned: the two oldest one-page buffers make room.
  ASSERT_TRUE(pool->Acquire(2 * kPage).ok());
  EXPECT_EQ(pool->allocations(), 4);
  EXPECT_EQ(pool->idle_bytes(), 3 * kPage);
  // What is left idle: one page (c) and the two pages, both reused.
  absl::StatusOr<HostBuffer> one = pool->Acquire(kPage);
  absl::StatusOr<HostBuffer> two = pool->Acquire(2 * kPage);
  ASSERT_TRUE(one.ok() && two.ok());
  EXPECT_EQ(pool->allocations(), 4);
  EXPECT_EQ(pool->idle_bytes(), 0u);
}

// After one load has filled the pool with its buffers, the next load's
// sizes are pooled too, instead of allocated and freed for every request
// (page-locked memory costs the driver milliseconds each way).
TEST(HostBufferPoolTest, ANewLoadIsPooledAfterAnotherFilledThePool) {
  auto pool = PageablePool(/*max_idle_bytes=*/4 << 20);
  {
    std::vector<HostBuffer> large;
    for (int i = 0; i < 4; ++i) {
      absl::StatusOr<HostBuffer> buffer = pool->Acquire(1 << 20);
      ASSERT_TRUE(buffer.ok());
      large.push_back(*std::move(buffer));
    }
  }
  ASSERT_EQ(pool->idle_bytes(), size_t{4} << 20);
  const int64_t before = pool->allocations();
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(pool->Acquire(32 << 10).ok());
  EXPECT_EQ(pool->allocations(), before + 1);
  EXPECT_LE(pool->idle_bytes(), size_t{4} << 20);
}

TEST(HostBufferPoolTest, ABufferLargerThanTheLimitIsFreedAndTheIdleOnesStay) {
  auto pool = PageablePool(/*max_idle_bytes=*/1 << 20);
  ASSERT_TRUE(pool->Acquire(1 << 20).ok());
  ASSERT_TRUE(pool->Acquire(2 << 20).ok());
  EXPECT_EQ(pool->idle_bytes(), size_t{1} << 20);
  ASSERT_TRUE(pool->Acquire(1 << 20).ok());
  EXPECT_EQ(pool->allocations(), 2);
}

// Where no page-locked memory can be had (no CUDA device), a page-locked
// pool's allocations fail: an error naming the size, and nothing counted.
TEST(HostBufferPoolTest, AFailedAllocationIsNeitherCountedNorHeld) {
  if (PageLockedMemoryAvailable()) GTEST_SKIP() << "page-locked memory can be had here";
  HostBufferPool::Options options;
  options.page_locked = true;
  auto pool = HostBufferPool::Create(options);
  absl::StatusOr<HostBuffer> buffer = pool->Acquire(4096);
  ASSERT_FALSE(buffer.ok());
  EXPECT_EQ(buffer.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(buffer.status().message().find("4096 bytes of page-locked host memory"),
            std::string::npos)
      << buffer.status();
  EXPECT_EQ(pool->allocations(), 0);
  EXPECT_EQ(pool->usage().held_bytes, 0u);
}

// What nv_pinned_memory_pool_{total,used}_bytes report.
TEST(HostBufferPoolTest, UsageCountsHeldAndInUseBytesThroughReturnsAndFrees) {
  constexpr size_t kPage = 4096;
  auto pool = PageablePool(/*max_idle_bytes=*/3 * kPage);
  EXPECT_EQ(pool->usage().held_bytes, 0u);
  absl::StatusOr<HostBuffer> a = pool->Acquire(kPage);
  absl::StatusOr<HostBuffer> b = pool->Acquire(2 * kPage);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(pool->usage().held_bytes, 3 * kPage);
  EXPECT_EQ(pool->usage().in_use_bytes, 3 * kPage);
  *a = HostBuffer();
  EXPECT_EQ(pool->usage().held_bytes, 3 * kPage);
  EXPECT_EQ(pool->usage().in_use_bytes, 2 * kPage);
  // Too large to keep: freed.
  { ASSERT_TRUE(pool->Acquire(4 * kPage).ok()); }
  EXPECT_EQ(pool->usage().held_bytes, 3 * kPage);
  *b = HostBuffer();
  EXPECT_EQ(pool->usage().held_bytes, 3 * kPage);
  EXPECT_EQ(pool->usage().in_use_bytes, 0u);
  // Three pages: a new buffer (none idle is large enough), held with the
  // idle ones until its return displaces both of them.
  {
    absl::StatusOr<HostBuffer> c = pool->Acquire(3 * kPage);
    ASSERT_TRUE(c.ok());
    EXPECT_EQ(pool->usage().held_bytes, 6 * kPage);
    EXPECT_EQ(pool->usage().in_use_bytes, 3 * kPage);
  }
  EXPECT_EQ(pool->usage().held_bytes, 3 * kPage);
  EXPECT_EQ(pool->usage().in_use_bytes, 0u);
}

TEST(HostBufferPoolTest, DetachedBufferReturnsWhenReleased) {
  auto pool = PageablePool();
  absl::StatusOr<HostBuffer> buffer = pool->Acquire(4096);
  ASSERT_TRUE(buffer.ok());
  void* context = buffer->Detach();
  EXPECT_EQ(buffer->data(), nullptr);
  EXPECT_EQ(pool->idle_bytes(), 0u);
  HostBuffer::Release(context);
  EXPECT_EQ(pool->idle_bytes(), 4096u);
}

// gRPC releases an answer's buffer on one of its own threads, handed the slice
// through gRPC core, whose synchronisation is invisible here. The relaxed
// atomic below models that hand-off: it orders nothing, so under TSan this
// test reports a race unless Detach/Release order the buffer's hand-off
// themselves.
TEST(HostBufferPoolTest, DetachedBufferIsReleasedSafelyOnAnotherThread) {
  auto pool = PageablePool();
  std::atomic<void*> handed_over{nullptr};
  std::thread releaser([&handed_over] {
    void* context = nullptr;
    while ((context = handed_over.load(std::memory_order_relaxed)) == nullptr) {
      std::this_thread::yield();
    }
    HostBuffer::Release(context);
  });
  {
    absl::StatusOr<HostBuffer> buffer = pool->Acquire(8192);
    ASSERT_TRUE(buffer.ok());
    std::memset(buffer->data(), 7, 8192);
    handed_over.store(buffer->Detach(), std::memory_order_relaxed);
  }
  releaser.join();
  EXPECT_EQ(pool->idle_bytes(), 8192u);
}

TEST(HostBufferPoolTest, BuffersKeepThePoolAlive) {
  absl::StatusOr<HostBuffer> buffer = PageablePool()->Acquire(4096);
  ASSERT_TRUE(buffer.ok());
  std::memset(buffer->data(), 1, 4096);  // the pool is gone; its buffer is not
}

TEST(HostBufferPoolTest, MovedBufferReturnsOnce) {
  auto pool = PageablePool();
  {
    absl::StatusOr<HostBuffer> a = pool->Acquire(4096);
    ASSERT_TRUE(a.ok());
    HostBuffer b = std::move(*a);
    HostBuffer c;
    c = std::move(b);
  }
  EXPECT_EQ(pool->idle_bytes(), 4096u);
}

TEST(HostBufferPoolTest, ManyThreadsAcquireAndReturnConcurrently) {
  auto pool = PageablePool();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([pool, t] {
      for (int i = 0; i < 200; ++i) {
        absl::StatusOr<HostBuffer> buffer = pool->Acquire(4096 * (1 + (i + t) % 3));
        ASSERT_TRUE(buffer.ok());
        buffer->data()[0] = static_cast<char>(i);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  // At most one buffer per thread and size class was ever in use at once.
  EXPECT_LE(pool->allocations(), 12);
}

// The freeing thread of each buffer freed, in order (on_free's record).
struct FreeLog {
  absl::Mutex mu;
  std::vector<std::pair<const char*, std::thread::id>> freed ABSL_GUARDED_BY(mu);
  // While false, on_free waits: the freeing thread is held inside the free.
  bool release ABSL_GUARDED_BY(mu) = true;
};

std::shared_ptr<HostBufferPool> BackgroundFreeingPool(FreeLog& log, size_t max_idle_bytes) {
  HostBufferPool::Options options;
  options.max_idle_bytes = max_idle_bytes;
  options.free_in_background = true;
  options.on_free = [&log](const char* data) {
    absl::MutexLock lock(&log.mu);
    log.freed.emplace_back(data, std::this_thread::get_id());
    // Bounded: a free on the returning thread itself fails the test below
    // instead of hanging it.
    static_cast<void>(log.mu.AwaitWithTimeout(absl::Condition(&log.release), absl::Seconds(10)));
  };
  return HostBufferPool::Create(options);
}

// A displaced buffer is freed on the pool's own thread, and the return that
// displaced it does not wait for the free: here the free is held until the
// return has come back.
TEST(HostBufferPoolTest, FreesDisplacedBuffersOnItsOwnThreadWithoutWaitingForThem) {
  constexpr size_t kPage = 4096;
  FreeLog log;
  {
    absl::MutexLock lock(&log.mu);
    log.release = false;
  }
  auto pool = BackgroundFreeingPool(log, /*max_idle_bytes=*/kPage);
  const char* first = nullptr;
  {
    absl::StatusOr<HostBuffer> a = pool->Acquire(kPage);
    absl::StatusOr<HostBuffer> b = pool->Acquire(kPage);
    ASSERT_TRUE(a.ok() && b.ok());
    first = a->data();
    *a = HostBuffer();  // idle
    *b = HostBuffer();  // displaces a: handed to the freer, which is held
  }
  {
    absl::MutexLock lock(&log.mu);
    log.mu.Await(absl::Condition(
        +[](FreeLog* l) ABSL_EXCLUSIVE_LOCKS_REQUIRED(l->mu) { return !l->freed.empty(); },
        &log));
    ASSERT_EQ(log.freed.size(), 1u);
    EXPECT_EQ(log.freed[0].first, first);
    EXPECT_NE(log.freed[0].second, std::this_thread::get_id());
    log.release = true;
  }
  EXPECT_EQ(pool->idle_bytes(), kPage);
  EXPECT_EQ(pool->usage().held_bytes, kPage);
}

// Destroying the pool frees every buffer: those still waiting for the
// background thread, and the idle ones.
TEST(HostBufferPoolTest, BackgroundFreeingPoolFreesEveryBufferByItsDestruction) {
  constexpr size_t kPage = 4096;
  FreeLog log;
  int64_t allocations = 0;
  {
    auto pool = BackgroundFreeingPool(log, /*max_idle_bytes=*/2 * kPage);
    for (int round = 0; round < 20; ++round) {
      std::vector<HostBuffer> held;
      for (int i = 0; i < 3; ++i) {
        absl::StatusOr<HostBuffer> buffer = pool->Acquire(kPage * (1 + (round + i) % 3));
        ASSERT_TRUE(buffer.ok());
        held.push_back(*std::move(buffer));
      }
    }
    // Larger than the limit: freed at once, in the background.
    { ASSERT_TRUE(pool->Acquire(4 * kPage).ok()); }
    allocations = pool->allocations();
  }
  // Each buffer freed once: none left behind, none freed twice.
  absl::MutexLock lock(&log.mu);
  EXPECT_EQ(static_cast<int64_t>(log.freed.size()), allocations);
}

}  // namespace
}  // namespace fuseserve
