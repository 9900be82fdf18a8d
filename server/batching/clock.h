#pragma once

// Time as the batcher sees it. Production uses RealClock; tests use FakeClock
// (server/batching/fake_clock.h) so that queue delays and timeouts are
// exercised deterministically without sleeping.

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace fuseserve {

class Clock {
 public:
  virtual ~Clock() = default;

  virtual absl::Time Now() const = 0;

  // With `mu` held: blocks until `condition` holds or Now() >= deadline,
  // releasing `mu` while waiting, and returns with `mu` held. Returns whether
  // `condition` holds. `condition` is re-evaluated whenever `mu` is released
  // by another thread (absl::Mutex semantics), so a change to state guarded
  // by `mu` wakes the waiter. `mu` may be released and reacquired during any
  // call that does not find `condition` true at once. InfiniteFuture() = no
  // deadline.
  virtual bool AwaitWithDeadline(absl::Mutex* mu, const absl::Condition& condition,
                                 absl::Time deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) = 0;

  // The process-wide real clock.
  static Clock* Real();
};

}  // namespace fuseserve
