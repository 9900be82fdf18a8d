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

// With the pool's only worker held by another task, a ParallelFor's caller
// runs every chunk itself instead of waiting for that worker.
TEST(ThreadPoolTest, ACallerRunsItsChunksItselfWhileEveryWorkerIsBusy) {
  absl::Mutex mu;
  bool release = false;
  ThreadPool pool(1, "test-pool");
  pool.Post([&] {
    absl::MutexLock lock(&mu);
    static_cast<void>(mu.AwaitWithTimeout(absl::Condition(&release), kTimeout));
  });
  absl::Mutex ran_mu;
  std::vector<std::thread::id> ran_on;
  int64_t covered = 0;
  pool.ParallelFor(100, 1, [&](int64_t begin, int64_t end) {
    absl::MutexLock lock(&ran_mu);
    ran_on.push_back(std::this_thread::get_id());
    covered += end - begin;
  });
  {
    absl::MutexLock lock(&mu);
    EXPECT_FALSE(release) << "ParallelFor waited for the held worker";
    release = true;
  }
  absl::MutexLock lock(&ran_mu);
  EXPECT_EQ(covered, 100);
  for (const std::thread::id& id : ran_on) EXPECT_EQ(id, std::this_thread::get_id());
}

// A task on the pool's only worker that calls ParallelFor on the same pool
// completes: its chunks do not wait for the worker it occupies.
TEST(ThreadPoolTest, AParallelForFromThePoolsOwnTaskCompletes) {
  // Leaked if the nested call hangs, so that the test fails instead of
  // hanging in the pool's destruction.
  auto* pool = new ThreadPool(1, "test-pool");
  absl::Mutex mu;
  bool finished = false;
  std::atomic<int64_t> covered{0};
  pool->Post([&] {
    pool->ParallelFor(1000, 10, [&](int64_t begin, int64_t end) { covered += end - begin; });
    absl::MutexLock lock(&mu);
    finished = true;
  });
  bool completed = false;
  {
    absl::MutexLock lock(&mu);
    completed = mu.AwaitWithTimeout(absl::Condition(&finished), kTimeout);
  }
  ASSERT_TRUE(completed) << "the nested ParallelFor did not complete";
  delete pool;
  EXPECT_EQ(covered.load(), 1000);
}

}  // namespace
}  // namespace fuseserve
