#include "common/thread_pool.h"

#include <atomic>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace fuseserve {
namespace {

TEST(ThreadPoolTest, ParallelForCoversRangeExactlyOnce) {
  ThreadPool pool(3);
  std::vector<std::atomic<int>> hits(1001);
  pool.ParallelFor(1001, 7, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) hits[i].fetch_add(1);
  });
  for (const auto& hit : hits) EXPECT_EQ(hit.load(), 1);
}

TEST(ThreadPoolTest, EmptyRangeCallsNothing) {
  ThreadPool pool(2);
  bool called = false;
  pool.ParallelFor(0, 1, [&](int64_t, int64_t) { called = true; });
  EXPECT_FALSE(called);
}

TEST(ThreadPoolTest, ConcurrentCallersBothComplete) {
  ThreadPool pool(2);
  std::atomic<int64_t> sum{0};
  auto work = [&] {
    pool.ParallelFor(10000, 10, [&](int64_t begin, int64_t end) {
      sum.fetch_add(end - begin);
    });
  };
  std::thread a(work), b(work);
  a.join();
  b.join();
  EXPECT_EQ(sum.load(), 20000);
}

// Real-time safety net: a broken pool fails the test instead of hanging it.
constexpr absl::Duration kTimeout = absl::Seconds(30);

TEST(ThreadPoolTest, RunsEveryPostedTaskBeforeItIsDestroyed) {
  std::atomic<int> ran{0};
  {
    ThreadPool pool(2, "test-pool");
    for (int i = 0; i < 1000; ++i) pool.Post([&ran] { ran.fetch_add(1); });
  }
  EXPECT_EQ(ran.load(), 1000);
}

TEST(ThreadPoolTest, OneWorkerRunsPostedTasksInTheOrderPosted) {
  std::vector<int> order;  // touched by the pool's one worker only
  {
    ThreadPool pool(1, "test-pool");
    for (int i = 0; i < 100; ++i) pool.Post([&order, i] { order.push_back(i); });
  }
  ASSERT_EQ(order.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(order[i], i);
}

TEST(ThreadPoolTest, SeveralWorkersRunPostedTasksConcurrently) {
  absl::Mutex mu;
  int started = 0;
  std::atomic<int> met{0};
  {
    ThreadPool pool(2, "test-pool");
    EXPECT_EQ(pool.num_workers(), 2);
    // Each task waits until both have started: only two workers running
    // them at once let both see it.
    for (int i = 0; i < 2; ++i) {
      pool.Post([&] {
        absl::MutexLock lock(&mu);
        ++started;
        auto both = [&started] { return started >= 2; };
        if (mu.AwaitWithTimeout(absl::Condition(&both), kTimeout)) met.fetch_add(1);
      });
    }
  }
  EXPECT_EQ(met.load(), 2);
}

}  // namespace
}  // namespace fuseserve
