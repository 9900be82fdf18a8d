#pragma once

// One registered system shared-memory region (Triton's system_shared_memory
// extension): the byte range [offset, offset + byte_size) of the POSIX
// shared-memory object `key`, mapped read-write into this process. The
// mapping lives exactly as long as the SharedMemoryRegion: the manager and
// every request reading or writing the region hold it through a shared_ptr,
// so unregistering a region that a request still uses only drops the
// manager's reference.
//
// The client owns the object. A client that shrinks it (ftruncate) while it is
// registered makes accesses past its new end fault (SIGBUS), as in Triton;
// this is why the extension is off unless --allow-shared-memory is given.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/runtime/page_locked_memory.h"

namespace fuseserve {

// Longest key accepted, leading '/' included (NAME_MAX for the name of the
// file that backs the object in /dev/shm, plus the '/').
inline constexpr size_t kMaxSharedMemoryKeyLength = 256;

// OK when `key` is a portable POSIX shared-memory object name: a '/', then 1
// to kMaxSharedMemoryKeyLength - 1 characters with no other '/' and no NUL,
// not "." or "..". InvalidArgument naming the rule otherwise.
absl::Status ValidateSharedMemoryKey(const std::string& key);

class SharedMemoryRegion {
 public:
  // Opens `key` (shm_open, O_RDWR), checks that [offset, offset + byte_size)
  // lies inside the object (overflow-safe) and maps that range. `name` is the
  // region's name for messages and status; byte_size must be positive.
  // InvalidArgument for a bad key, a zero size, a range outside the object or
  // a key that names something other than a shared-memory object; NotFound
  // when no object has that key; PermissionDenied when this process may not
  // open it read-write; Internal for other system errors.
  static absl::StatusOr<std::unique_ptr<SharedMemoryRegion>> Map(std::string name, std::string key,
                                                                 uint64_t offset,
                                                                 uint64_t byte_size);

  SharedMemoryRegion(const SharedMemoryRegion&) = delete;
  SharedMemoryRegion& operator=(const SharedMemoryRegion&) = delete;

  const std::string& name() const { return name_; }
  const std::string& key() const { return key_; }
  // Where the range starts in the object, and its length, in bytes.
  uint64_t offset() const { return offset_; }
  uint64_t byte_size() const { return byte_size_; }

  // The first byte of the range; byte_size() bytes are readable and writable
  // for the lifetime of this object. Other processes may change them at any
  // time.
  uint8_t* data() const { return data_; }

  // Page-locks the range (cudaHostRegister) so that the GPU copies to and
  // from it directly; undone before the range is unmapped. FailedPrecondition
  // without a CUDA device. Called once, before the region is shared.
  absl::Status LockPages();
  bool page_locked() const { return page_lock_ != nullptr; }

 private:
  // One mmap'ed span, unmapped on destruction.
  class Mapping {
   public:
    Mapping(void* address, size_t length) : address_(address), length_(length) {}
    ~Mapping();
    Mapping(const Mapping&) = delete;
    Mapping& operator=(const Mapping&) = delete;

    uint8_t* address() const { return static_cast<uint8_t*>(address_); }

   private:
    void* address_;
    size_t length_;
  };

  SharedMemoryRegion(std::string name, std::string key, uint64_t offset, uint64_t byte_size,
                     void* mapped, size_t mapped_length, size_t data_offset);

  const std::string name_;
  const std::string key_;
  const uint64_t offset_;
  const uint64_t byte_size_;
  // Members are destroyed in reverse order of declaration: whatever refers
  // into the mapped range (a page-lock registration of it, for instance) is
  // declared after mapping_ and so released before the munmap.
  const Mapping mapping_;
  uint8_t* const data_;
  std::unique_ptr<PageLockedRange> page_lock_;
};

}  // namespace fuseserve
