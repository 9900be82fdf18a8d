#include "server/grpc/queue_mailbox.h"

#include <utility>

#include "grpc/support/time.h"

namespace fuseserve {

void QueueMailbox::Post(Item* item) {
  bool set_alarm = false;
  {
    absl::MutexLock lock(&mu_);
    posted_.push_back(item);
    if (!alarm_pending_) {
      alarm_pending_ = true;
      ++alarms_set_;
      set_alarm = true;
    }
  }
  // Outside the lock: the tag cannot come out before Set, and only its
  // delivery clears alarm_pending_, so no other thread sets the alarm now.
  if (set_alarm) alarm_.Set(queue_, gpr_time_0(GPR_CLOCK_MONOTONIC), this);
}

void QueueMailbox::DeliverPosted() {
  {
    absl::MutexLock lock(&mu_);
    std::swap(delivering_, posted_);
    alarm_pending_ = false;
  }
  for (Item* item : delivering_) item->Deliver();
  delivering_.clear();
}

int QueueMailbox::alarms_set() const {
  absl::MutexLock lock(&mu_);
  return alarms_set_;
}

}  // namespace fuseserve
