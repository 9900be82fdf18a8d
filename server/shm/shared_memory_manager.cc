#include "server/shm/shared_memory_manager.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace fuseserve {

SharedMemoryManager::SharedMemoryManager(size_t max_regions, bool page_lock)
    : max_regions_(max_regions), page_lock_(page_lock) {}

absl::Status SharedMemoryManager::CheckCanAdd(const std::string& name) const {
  if (regions_.count(name) > 0) {
    return absl::AlreadyExistsError(
        absl::StrCat("shared memory region '", name, "' already in manager"));
  }
  if (regions_.size() >= max_regions_) {
    return absl::ResourceExhaustedError(
        absl::StrCat("failed to register shared memory region '", name, "': ", regions_.size(),
                     " regions are registered, the most this server allows"));
  }
  return absl::OkStatus();
}

absl::Status SharedMemoryManager::Register(const std::string& name, const std::string& key,
                                           uint64_t offset, uint64_t byte_size) {
  if (name.empty()) {
    return absl::InvalidArgumentError("shared memory region name must not be empty");
  }
  {
    // Fails fast before any system call; checked again when inserting.
    absl::MutexLock lock(&mu_);
    RETURN_IF_ERROR(CheckCanAdd(name));
  }
  // Mapped without the lock held, so that lookups by running requests never
  // wait on a registration's system calls.
  ASSIGN_OR_RETURN(std::unique_ptr<SharedMemoryRegion> region,
                   SharedMemoryRegion::Map(name, key, offset, byte_size));
  if (page_lock_) {
    const absl::Status locked = region->LockPages();
    if (!locked.ok()) {
      FS_LOG(WARNING) << "shared memory region '" << name
                      << "' stays pageable (its tensors are staged): " << locked.message();
    }
  }
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(CheckCanAdd(name));
  regions_.emplace(name, std::move(region));
  return absl::OkStatus();
}

void SharedMemoryManager::Unregister(const std::string& name) {
  // Unmapping happens when the last reference goes, outside the lock.
  std::map<std::string, std::shared_ptr<SharedMemoryRegion>> removed;
  absl::MutexLock lock(&mu_);
  if (name.empty()) {
    removed.swap(regions_);
  } else if (auto found = regions_.find(name); found != regions_.end()) {
    removed.insert(regions_.extract(found));
  }
}

absl::StatusOr<std::vector<std::shared_ptr<const SharedMemoryRegion>>> SharedMemoryManager::Status(
    const std::string& name) const {
  std::vector<std::shared_ptr<const SharedMemoryRegion>> result;
  absl::MutexLock lock(&mu_);
  if (name.empty()) {
    result.reserve(regions_.size());
    for (const auto& [unused, region] : regions_) result.push_back(region);
    return result;
  }
  const auto found = regions_.find(name);
  if (found == regions_.end()) {
    return absl::NotFoundError(
        absl::StrCat("Unable to find system shared memory region: '", name, "'"));
  }
  result.push_back(found->second);
  return result;
}

absl::StatusOr<SharedMemoryView> SharedMemoryManager::Find(const std::string& name, uint64_t offset,
                                                           uint64_t byte_size) const {
  std::shared_ptr<SharedMemoryRegion> region;
  {
    absl::MutexLock lock(&mu_);
    const auto found = regions_.find(name);
    if (found == regions_.end()) {
      return absl::NotFoundError(absl::StrCat("Unable to find shared memory region: '", name, "'"));
    }
    region = found->second;
  }
  // Written so that no sum can wrap: offset + byte_size <= region size.
  if (offset > region->byte_size() || byte_size > region->byte_size() - offset) {
    return absl::InvalidArgumentError(absl::StrCat("offset ", offset, " + byte size ", byte_size,
                                                   " is out of bounds of shared memory region '",
                                                   name, "' (", region->byte_size(), " bytes)"));
  }
  SharedMemoryView view;
  view.data = region->data() + offset;
  view.byte_size = byte_size;
  view.offset_in_region = offset;
  view.region = std::move(region);
  return view;
}

}  // namespace fuseserve
