#include "common/malloc_trimmer.h"

#include <malloc.h>

#include "common/thread_name.h"

namespace fuseserve {

MallocTrimmer::MallocTrimmer(absl::Duration interval) : interval_(interval) {
  thread_ = std::thread([this] {
    NameCurrentThread("fs-malloc-trim");
    Loop();
  });
}

MallocTrimmer::~MallocTrimmer() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

int64_t MallocTrimmer::trims() const {
  absl::MutexLock lock(&mu_);
  return trims_;
}

void MallocTrimmer::Loop() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      // Wakes early only to stop.
      mu_.AwaitWithTimeout(absl::Condition(&stopping_), interval_);
      if (stopping_) return;
    }
    malloc_trim(0);
    absl::MutexLock lock(&mu_);
    ++trims_;
  }
}

}  // namespace fuseserve
