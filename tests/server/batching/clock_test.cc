#include "server/batching/clock.h"

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace fuseserve {
namespace {

TEST(RealClockTest, IsTheProcessWideClock) { EXPECT_EQ(Clock::Real(), Clock::Real()); }

TEST(RealClockTest, NowFollowsAbslNow) {
  const absl::Time before = absl::Now();
  const absl::Time now = Clock::Real()->Now();
  EXPECT_GE(now, before);
  EXPECT_LE(now, absl::Now());
}

TEST(RealClockTest, AwaitReturnsTrueAtOnceWhenConditionHolds) {
  absl::Mutex mu;
  bool ready = true;
  absl::MutexLock lock(&mu);
  EXPECT_TRUE(
      Clock::Real()->AwaitWithDeadline(&mu, absl::Condition(&ready), absl::InfiniteFuture()));
}

TEST(RealClockTest, AwaitReturnsFalseWhenDeadlineHasPassed) {
  absl::Mutex mu;
  bool ready = false;
  absl::MutexLock lock(&mu);
  EXPECT_FALSE(Clock::Real()->AwaitWithDeadline(&mu, absl::Condition(&ready),
                                                absl::Now() - absl::Seconds(1)));
}

}  // namespace
}  // namespace fuseserve
