#include "server/batching/clock.h"

namespace fuseserve {
namespace {

class RealClock final : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }

  bool AwaitWithDeadline(absl::Mutex* mu, const absl::Condition& condition,
                         absl::Time deadline) override ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return mu->AwaitWithDeadline(condition, deadline);
  }
};

}  // namespace

Clock* Clock::Real() {
  // Never destroyed: batchers on other threads may still use it during exit.
  static Clock* const clock = new RealClock();
  return clock;
}

}  // namespace fuseserve
