#pragma once

// The system shared-memory regions registered with the server (Triton's
// system_shared_memory extension, REFERENCE.md §5.1), by name. Thread-safe:
// the gRPC Register/Unregister/Status RPCs and the requests that read inputs
// from and write outputs to regions all go through one manager.
//
// Codes and wording follow Triton's shared_memory_manager.cc: a name taken is
// AlreadyExists ("... already in manager"), an unknown name NotFound,
// unregistering an unknown name succeeds, a range outside a region is
// InvalidArgument.

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/shm/shared_memory_region.h"

namespace fuseserve {

// byte_size bytes at `data` inside a registered region. `region` keeps the
// mapping alive for as long as the view is held, whatever happens to the
// registration meanwhile.
struct SharedMemoryView {
  std::shared_ptr<SharedMemoryRegion> region;
  uint8_t* data = nullptr;
  uint64_t byte_size = 0;
  // Where the view starts within the region, in bytes.
  uint64_t offset_in_region = 0;
};

class SharedMemoryManager {
 public:
  // Registrations beyond this many are refused: each one holds a mapping
  // (and, on a GPU host, may page-lock it) for as long as it lives.
  static constexpr size_t kDefaultMaxRegions = 1024;

  // With `page_lock`, every region is page-locked at registration (see
  // SharedMemoryRegion::LockPages) when that is possible; a region that
  // cannot be is still registered, pageable, with a warning in the log.
  explicit SharedMemoryManager(size_t max_regions = kDefaultMaxRegions, bool page_lock = false);
  ~SharedMemoryManager() = default;
  SharedMemoryManager(const SharedMemoryManager&) = delete;
  SharedMemoryManager& operator=(const SharedMemoryManager&) = delete;

  // Maps [offset, offset + byte_size) of the shared-memory object `key` as
  // region `name`. InvalidArgument for an empty name and everything
  // SharedMemoryRegion::Map refuses (with its codes); AlreadyExists when the
  // name is taken; ResourceExhausted at max_regions.
  absl::Status Register(const std::string& name, const std::string& key, uint64_t offset,
                        uint64_t byte_size) ABSL_LOCKS_EXCLUDED(mu_);

  // Forgets region `name` (every region when `name` is empty); an unknown
  // name is not an error. Requests that hold a view of a region keep its
  // mapping until they finish.
  void Unregister(const std::string& name) ABSL_LOCKS_EXCLUDED(mu_);

  // Region `name`, or every region ordered by name when `name` is empty.
  // NotFound for an unknown name.
  absl::StatusOr<std::vector<std::shared_ptr<const SharedMemoryRegion>>> Status(
      const std::string& name) const ABSL_LOCKS_EXCLUDED(mu_);

  // byte_size bytes at `offset` within region `name`. NotFound for an unknown
  // region; InvalidArgument when the bytes do not lie inside it
  // (overflow-safe).
  absl::StatusOr<SharedMemoryView> Find(const std::string& name, uint64_t offset,
                                        uint64_t byte_size) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  absl::Status CheckCanAdd(const std::string& name) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const size_t max_regions_;
  const bool page_lock_;
  mutable absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<SharedMemoryRegion>> regions_ ABSL_GUARDED_BY(mu_);
};

}  // namespace fuseserve
