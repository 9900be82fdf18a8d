#pragma once

// A Clock for tests: time stands still until the test moves it, so queue
// delays and timeouts are exercised deterministically without sleeping.
//
//   FakeClock clock;
//   DynamicBatcher batcher(options, std::move(instances), &clock, nullptr);
//   batcher.Enqueue(...);                                  // waits for a fuller batch
//   clock.WaitForWaiterWithDeadline(clock.Now() + delay);  // the worker is waiting
//   clock.Advance(delay);                                  // ...and now dispatches
//
// Thread-safe: any number of threads may wait while others advance the time.
// Waiters register their mutex; Advance/SetTime lock and unlock each
// registered mutex after changing the time, which makes absl::Mutex
// re-evaluate the waiters' conditions (now including "deadline passed").

#include <atomic>
#include <cstdint>
#include <list>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/batching/clock.h"

namespace fuseserve {

class FakeClock final : public Clock {
 public:
  // Starts at `start` (by default an arbitrary, realistic fixed time).
  explicit FakeClock(absl::Time start = absl::FromUnixSeconds(1'700'000'000));

  FakeClock(const FakeClock&) = delete;
  FakeClock& operator=(const FakeClock&) = delete;

  absl::Time Now() const override;

  bool AwaitWithDeadline(absl::Mutex* mu, const absl::Condition& condition,
                         absl::Time deadline) override ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

  // Moves the time forward by `delta` (>= 0) and wakes every waiter whose
  // deadline has now passed. When this returns, each such waiter has been
  // woken (or has observed the new time on its own).
  void Advance(absl::Duration delta) ABSL_LOCKS_EXCLUDED(waiters_mu_);

  // Sets the time (forwards or backwards) and wakes waiters as Advance does.
  void SetTime(absl::Time time) ABSL_LOCKS_EXCLUDED(waiters_mu_);

  // Number of threads currently inside AwaitWithDeadline (including ones that
  // have been woken but not yet returned).
  int waiters() const ABSL_LOCKS_EXCLUDED(waiters_mu_);

  // Blocks until at least `n` threads are inside AwaitWithDeadline. Returns
  // false if that did not happen within `real_timeout` of real time (a
  // safety net so that a broken test fails instead of hanging).
  bool WaitForWaiters(int n, absl::Duration real_timeout = absl::Seconds(30))
      ABSL_LOCKS_EXCLUDED(waiters_mu_);

  // Blocks until some thread is inside AwaitWithDeadline with exactly
  // `deadline`: e.g. a batcher worker that decided to wait for a fuller batch
  // until then. Returns false after `real_timeout` of real time.
  bool WaitForWaiterWithDeadline(absl::Time deadline,
                                 absl::Duration real_timeout = absl::Seconds(30))
      ABSL_LOCKS_EXCLUDED(waiters_mu_);

 private:
  struct Waiter {
    absl::Mutex* mu;
    absl::Time deadline;
  };

  // Wakes the waiters after a change of time. `waiters_mu_` is held while
  // their mutexes are locked: a waiter unregisters (under `waiters_mu_`)
  // before it returns, so every registered mutex is still alive. A waiter
  // never takes `waiters_mu_` while holding its own mutex, so the lock order
  // is waiters_mu_ -> waiter's mutex.
  void WakeWaitersLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(waiters_mu_);

  // Unix nanoseconds. Atomic rather than guarded so that the wait condition,
  // evaluated under a waiter's mutex by whichever thread releases it, reads
  // it without taking another lock.
  std::atomic<int64_t> now_ns_;

  mutable absl::Mutex waiters_mu_;
  std::list<Waiter> waiters_ ABSL_GUARDED_BY(waiters_mu_);
};

}  // namespace fuseserve
