#pragma once

// Page-locked ("pinned") host memory, which the GPU copies to and from by DMA
// directly. Without CUDA (or without a device) nothing can be page-locked and
// the functions fail with FailedPrecondition; callers then use pageable
// memory. Built from page_locked_memory.cc with CUDA,
// page_locked_memory_unavailable.cc without.

#include <cstddef>
#include <memory>

#include "absl/status/statusor.h"

namespace fuseserve {

// True when page-locked memory can be had (a CUDA build with a device).
bool PageLockedMemoryAvailable();

// `bytes` of new page-locked memory, usable by every device.
absl::StatusOr<void*> AllocatePageLocked(size_t bytes);
void FreePageLocked(void* data);

// Keeps an existing range of host memory (e.g. a shared-memory mapping)
// page-locked until destroyed. The range must stay mapped that long.
class PageLockedRange {
 public:
  virtual ~PageLockedRange() = default;
};

absl::StatusOr<std::unique_ptr<PageLockedRange>> PageLockRange(void* data, size_t bytes);

}  // namespace fuseserve
