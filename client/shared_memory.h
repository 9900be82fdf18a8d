#pragma once

// Client side of Triton's system shared-memory extension: POSIX shared-memory
// objects that this process creates, fills and reads, and that a server on the
// same host maps once they are registered with it (Client::
// RegisterSystemSharedMemory). The names follow tritonclient's
// utils.shared_memory (create_shared_memory_region, set_shared_memory_region,
// get_contents_as_numpy, destroy_shared_memory_region).

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace fuseserve::client {

// How tensors travel: in the gRPC messages, or through system shared memory
// (perf_analyzer's --shared-memory none|system).
enum class SharedMemoryType {
  kNone,
  kSystem,
};

// "none" / "system".
absl::StatusOr<SharedMemoryType> ParseSharedMemoryType(absl::string_view text);
const char* SharedMemoryTypeName(SharedMemoryType type);

// A POSIX shared-memory object created by this process and mapped read-write
// (MAP_SHARED), so that what one side writes the other sees. The object is
// the creator's: the destructor unmaps it and removes its name (shm_unlink);
// a server that still has it mapped keeps its own mapping until it
// unregisters the region.
class SystemSharedMemoryRegion {
 public:
  // Creates the object `key` with mode 0600, `byte_size` bytes long, and maps
  // it. The bytes are reserved in the shared-memory filesystem now, so that a
  // full /dev/shm is an error here rather than a SIGBUS (in this process or
  // in the server) at the first touch of a page. Errors leave nothing behind:
  //   InvalidArgument   `key` is not "/name" (one leading '/', no other, at
  //                     most NAME_MAX characters after it), or byte_size is 0
  //   AlreadyExists     an object named `key` exists (another region, or a
  //                     stale one: it lives in /dev/shm until removed)
  //   PermissionDenied  the system refuses access
  //   ResourceExhausted not enough shared memory (ENOSPC: /dev/shm is full or
  //                     too small, e.g. Docker's 64 MiB default; see
  //                     --shm-size) or address space, or too many open files
  //   Internal          anything else, with the system's message
  static absl::StatusOr<std::unique_ptr<SystemSharedMemoryRegion>> Create(const std::string& key,
                                                                          uint64_t byte_size);

  SystemSharedMemoryRegion(const SystemSharedMemoryRegion&) = delete;
  SystemSharedMemoryRegion& operator=(const SystemSharedMemoryRegion&) = delete;
  ~SystemSharedMemoryRegion();

  // The region's name in the system, "/name" as given to Create.
  const std::string& key() const { return key_; }
  uint64_t size() const { return size_; }
  // The mapping: size() bytes, page aligned.
  uint8_t* data() { return data_; }
  const uint8_t* data() const { return data_; }

  // Copies `values` into the region starting `offset` bytes in. OutOfRange
  // when they do not fit.
  absl::Status WriteFloats(uint64_t offset, absl::Span<const float> values);

  // The `count` float32 values starting `offset` bytes in, without copying:
  // valid while the region lives. OutOfRange when they do not fit,
  // InvalidArgument when `offset` is not a multiple of 4.
  absl::StatusOr<absl::Span<const float>> Floats(uint64_t offset, uint64_t count) const;

  // Removes the object's name now (the mapping stays valid until
  // destruction). For a process about to exit while other threads may still
  // use the memory; the destructor does not unlink twice.
  void Unlink();

 private:
  SystemSharedMemoryRegion(std::string key, uint64_t size, uint8_t* data);

  const std::string key_;
  const uint64_t size_;
  uint8_t* const data_;
  std::atomic<bool> linked_{true};
};

// A fresh key "/fuseserve_<tag>_<pid>_<counter>_<random hex>": unique across
// processes (pid), within this one (counter), and against stale objects of a
// process that had the same pid (random). `tag` should be short and made of
// [A-Za-z0-9_-].
std::string UniqueSharedMemoryKey(absl::string_view tag);

}  // namespace fuseserve::client
