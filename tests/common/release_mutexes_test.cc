#include "common/release_mutexes.h"

#include <cstdlib>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"

namespace fuseserve {
namespace {

// Takes two mutexes in one order, then in the other: no deadlock in one
// thread, but a cycle in Abseil's lock-order graph.
void LockInBothOrders() {
  absl::Mutex first;
  absl::Mutex second;
  {
    absl::MutexLock a(&first);
    absl::MutexLock b(&second);
  }
  {
    absl::MutexLock b(&second);
    absl::MutexLock a(&first);
  }
}

TEST(ReleaseMutexesDeathTest, DeadlockDetectionAbortsOnALockOrderCycle) {
  // The premise: with detection on, a lock-order cycle aborts the process.
  EXPECT_DEATH(
      {
        absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kAbort);
        LockInBothOrders();
      },
      "Potential Mutex deadlock");
}

// In a child process too, so that the mode set here stays out of the other
// tests of this binary.
TEST(ReleaseMutexesDeathTest, DisabledDetectionIgnoresALockOrderCycle) {
  EXPECT_EXIT(
      {
        absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kAbort);
        DisableMutexDeadlockDetection();
        LockInBothOrders();
        std::exit(0);
      },
      testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace fuseserve
