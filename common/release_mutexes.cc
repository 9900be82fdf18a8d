#include "common/release_mutexes.h"

#include "absl/synchronization/mutex.h"

namespace fuseserve {

void DisableMutexDeadlockDetection() {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
}

}  // namespace fuseserve
