#include "absl/status/status.h"
#include "server/runtime/page_locked_memory.h"

namespace fuseserve {
namespace {

absl::Status Unavailable() {
  return absl::FailedPreconditionError("page-locked memory needs a build with CUDA");
}

}  // namespace

bool PageLockedMemoryAvailable() { return false; }

absl::StatusOr<void*> AllocatePageLocked(size_t) { return Unavailable(); }

void FreePageLocked(void*) {}

absl::StatusOr<std::unique_ptr<PageLockedRange>> PageLockRange(void*, size_t) {
  return Unavailable();
}

}  // namespace fuseserve
