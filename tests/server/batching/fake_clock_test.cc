#include "server/batching/fake_clock.h"

#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace fuseserve {
namespace {

TEST(FakeClockTest, TimeStandsStillUntilAdvancedOrSet) {
  const absl::Time start = absl::FromUnixSeconds(1000);
  FakeClock clock(start);
  EXPECT_EQ(clock.Now(), start);
  EXPECT_EQ(clock.Now(), start);
  clock.Advance(absl::Microseconds(7));
  EXPECT_EQ(clock.Now(), start + absl::Microseconds(7));
  clock.SetTime(start - absl::Seconds(1));
  EXPECT_EQ(clock.Now(), start - absl::Seconds(1));
}

TEST(FakeClockTest, AwaitReturnsFalseAtOnceWhenDeadlineHasPassed) {
  FakeClock clock;
  absl::Mutex mu;
  bool ready = false;
  absl::MutexLock lock(&mu);
  EXPECT_FALSE(clock.AwaitWithDeadline(&mu, absl::Condition(&ready), clock.Now()));
}

TEST(FakeClockTest, AwaitWakesWhenConditionBecomesTrue) {
  FakeClock clock;
  absl::Mutex mu;
  bool ready = false;
  bool result = false;
  std::thread waiter([&] {
    absl::MutexLock lock(&mu);
    result = clock.AwaitWithDeadline(&mu, absl::Condition(&ready), absl::InfiniteFuture());
  });
  ASSERT_TRUE(clock.WaitForWaiters(1));
  {
    absl::MutexLock lock(&mu);
    ready = true;
  }
  waiter.join();
  EXPECT_TRUE(result);
  EXPECT_EQ(clock.waiters(), 0);
}

TEST(FakeClockTest, AdvanceWakesWaiterOnlyOnceItsDeadlinePasses) {
  FakeClock clock;
  const absl::Time deadline = clock.Now() + absl::Microseconds(10);
  absl::Mutex mu;
  bool ready = false;
  absl::Notification returned;
  bool result = true;
  std::thread waiter([&] {
    absl::MutexLock lock(&mu);
    result = clock.AwaitWithDeadline(&mu, absl::Condition(&ready), deadline);
    returned.Notify();
  });
  ASSERT_TRUE(clock.WaitForWaiterWithDeadline(deadline));
  clock.Advance(absl::Microseconds(9));
  // Advance re-evaluates the waiter's condition before returning; it is
  // still false, so the waiter is still waiting.
  EXPECT_FALSE(returned.HasBeenNotified());
  EXPECT_EQ(clock.waiters(), 1);
  clock.Advance(absl::Microseconds(1));
  waiter.join();
  EXPECT_FALSE(result);
  EXPECT_EQ(clock.waiters(), 0);
}

TEST(FakeClockTest, SetTimeWakesWaiters) {
  FakeClock clock;
  const absl::Time deadline = clock.Now() + absl::Hours(1);
  absl::Mutex mu;
  bool ready = false;
  std::thread waiter([&] {
    absl::MutexLock lock(&mu);
    clock.AwaitWithDeadline(&mu, absl::Condition(&ready), deadline);
  });
  ASSERT_TRUE(clock.WaitForWaiterWithDeadline(deadline));
  clock.SetTime(deadline);
  waiter.join();
  EXPECT_EQ(clock.waiters(), 0);
}

TEST(FakeClockTest, ConcurrentAdvancesWakeManyWaitersOnSeveralMutexes) {
  FakeClock clock;
  const absl::Time start = clock.Now();
  constexpr int kWaiters = 8;
  absl::Mutex mus[2];
  bool never = false;
  std::vector<std::thread> waiters;
  for (int i = 0; i < kWaiters; ++i) {
    waiters.emplace_back([&, i] {
      absl::Mutex* mu = &mus[i % 2];
      absl::MutexLock lock(mu);
      EXPECT_FALSE(clock.AwaitWithDeadline(mu, absl::Condition(&never),
                                           start + absl::Microseconds(1 + i % 4)));
    });
  }
  ASSERT_TRUE(clock.WaitForWaiters(kWaiters));
  std::vector<std::thread> advancers;
  for (int i = 0; i < 2; ++i) {
    advancers.emplace_back([&] {
      clock.Advance(absl::Microseconds(1));
      clock.Advance(absl::Microseconds(1));
    });
  }
  for (std::thread& advancer : advancers) advancer.join();
  for (std::thread& waiter : waiters) waiter.join();
  EXPECT_EQ(clock.Now(), start + absl::Microseconds(4));
  EXPECT_EQ(clock.waiters(), 0);
}

TEST(FakeClockTest, WaitForWaitersGivesUpAfterRealTimeout) {
  FakeClock clock;
  EXPECT_FALSE(clock.WaitForWaiters(1, absl::ZeroDuration()));
  EXPECT_FALSE(clock.WaitForWaiterWithDeadline(clock.Now(), absl::ZeroDuration()));
}

}  // namespace
}  // namespace fuseserve
