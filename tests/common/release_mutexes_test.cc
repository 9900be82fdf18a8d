#include "common/release_mutexes.h"

#include <cstdlib>

#include "absl/base/config.h"
#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"

namespace fuseserve {
namespace {

// ThreadSanitizer has a lock-order detector of its own: it would report the
// inversion these tests make on purpose (from the death tests' children too,
// into the stage's report files).
#ifdef ABSL_HAVE_THREAD_SANITIZER
constexpr bool kUnderThreadSanitizer = true;
#else
constexpr bool kUnderThreadSanitizer = false;
#endif

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
  if (kUnderThreadSanitizer) GTEST_SKIP() << "TSan reports the inversion itself";
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
  if (kUnderThreadSanitizer) GTEST_SKIP() << "TSan reports the inversion itself";
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
