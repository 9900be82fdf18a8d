#include "server/batching/fake_clock.h"

#include <algorithm>
#include <vector>

namespace fuseserve {
namespace {

// The condition a registered waiter sleeps on: the caller's condition or the
// fake time reaching its deadline.
struct WaitState {
  const absl::Condition* condition;
  const Clock* clock;
  absl::Time deadline;

  bool Ready() const { return condition->Eval() || clock->Now() >= deadline; }
};

}  // namespace

FakeClock::FakeClock(absl::Time start) : now_ns_(absl::ToUnixNanos(start)) {}

absl::Time FakeClock::Now() const { return absl::FromUnixNanos(now_ns_.load()); }

bool FakeClock::AwaitWithDeadline(absl::Mutex* mu, const absl::Condition& condition,
                                  absl::Time deadline) {
  while (true) {
    if (condition.Eval()) return true;
    if (Now() >= deadline) return false;
    // Registration needs `waiters_mu_`, which must never be taken while
    // holding `mu` (see WakeWaitersLocked).
    mu->Unlock();
    std::list<Waiter>::iterator self;
    {
      absl::MutexLock lock(&waiters_mu_);
      self = waiters_.insert(waiters_.end(), Waiter{mu, deadline});
    }
    mu->Lock();
    const WaitState state{&condition, this, deadline};
    mu->Await(absl::Condition(&state, &WaitState::Ready));
    mu->Unlock();
    {
      absl::MutexLock lock(&waiters_mu_);
      waiters_.erase(self);
    }
    mu->Lock();
  }
}

void FakeClock::Advance(absl::Duration delta) {
  absl::MutexLock lock(&waiters_mu_);
  now_ns_.fetch_add(absl::ToInt64Nanoseconds(delta));
  WakeWaitersLocked();
}

void FakeClock::SetTime(absl::Time time) {
  absl::MutexLock lock(&waiters_mu_);
  now_ns_.store(absl::ToUnixNanos(time));
  WakeWaitersLocked();
}

void FakeClock::WakeWaitersLocked() {
  std::vector<absl::Mutex*> mutexes;
  for (const Waiter& waiter : waiters_) {
    if (std::find(mutexes.begin(), mutexes.end(), waiter.mu) == mutexes.end()) {
      mutexes.push_back(waiter.mu);
    }
  }
  // Releasing a mutex makes absl::Mutex evaluate its waiters' conditions,
  // which now see the new time.
  for (absl::Mutex* mu : mutexes) {
    mu->Lock();
    mu->Unlock();
  }
}

int FakeClock::waiters() const {
  absl::MutexLock lock(&waiters_mu_);
  return static_cast<int>(waiters_.size());
}

bool FakeClock::WaitForWaiters(int n, absl::Duration real_timeout) {
  absl::MutexLock lock(&waiters_mu_);
  auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(waiters_mu_) {
    return static_cast<int>(waiters_.size()) >= n;
  };
  return waiters_mu_.AwaitWithTimeout(absl::Condition(&enough), real_timeout);
}

bool FakeClock::WaitForWaiterWithDeadline(absl::Time deadline, absl::Duration real_timeout) {
  absl::MutexLock lock(&waiters_mu_);
  auto found = [this, deadline]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(waiters_mu_) {
    return std::any_of(waiters_.begin(), waiters_.end(),
                       [deadline](const Waiter& waiter) { return waiter.deadline == deadline; });
  };
  return waiters_mu_.AwaitWithTimeout(absl::Condition(&found), real_timeout);
}

}  // namespace fuseserve
