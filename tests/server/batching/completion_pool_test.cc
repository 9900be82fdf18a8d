#include "server/batching/completion_pool.h"

#include <atomic>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace fuseserve {
namespace {

// Real-time safety net: a broken pool fails the test instead of hanging it.
constexpr absl::Duration kTimeout = absl::Seconds(30);

TEST(CompletionPoolTest, RunsEveryPostedTaskBeforeItIsDestroyed) {
  std::atomic<int> ran{0};
  {
    CompletionPool pool(2, "test-pool");
    for (int i = 0; i < 1000; ++i) pool.Post([&ran] { ran.fetch_add(1); });
  }
  EXPECT_EQ(ran.load(), 1000);
}

TEST(CompletionPoolTest, OneThreadRunsTasksInTheOrderPosted) {
  std::vector<int> order;  // touched by the pool's one thread only
  {
    CompletionPool pool(1, "test-pool");
    for (int i = 0; i < 100; ++i) pool.Post([&order, i] { order.push_back(i); });
  }
  ASSERT_EQ(order.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(order[i], i);
}

TEST(CompletionPoolTest, SeveralThreadsRunTasksConcurrently) {
  absl::Mutex mu;
  int started = 0;
  std::atomic<int> met{0};
  {
    CompletionPool pool(2, "test-pool");
    EXPECT_EQ(pool.num_threads(), 2);
    // Each task waits until both have started: only two threads running
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

TEST(CompletionPoolTest, AtLeastOneThread) {
  std::atomic<bool> ran{false};
  {
    CompletionPool pool(0, "test-pool");
    EXPECT_EQ(pool.num_threads(), 1);
    pool.Post([&ran] { ran.store(true); });
  }
  EXPECT_TRUE(ran.load());
}

}  // namespace
}  // namespace fuseserve
