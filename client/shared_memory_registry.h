#pragma once

// System shared-memory regions that this process creates and registers with
// one server for its own requests (the CLI's `infer --shared-memory system`
// and the bench's per-slot regions), and that must not outlive the process:
// released together, on every path out, including an interrupt.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "client/client.h"
#include "client/shared_memory.h"
#include "proto/grpc_service.pb.h"

namespace fuseserve::client {

// One region of a SharedMemoryRegistry.
struct RegisteredRegion {
  std::string name;                  // what the server knows it as
  SystemSharedMemoryRegion* region;  // owned by the registry

  // `byte_size` bytes of this region starting `offset` bytes in.
  SharedMemoryLocation Location(uint64_t byte_size, uint64_t offset = 0) const {
    return {name, byte_size, offset};
  }
};

// Thread-safe. Release() runs on destruction; ReleaseBeforeExit() may run on
// another thread (an interrupt) at any time.
class SharedMemoryRegistry {
 public:
  // `client` talks to the server the regions are registered with; it must
  // outlive the registry.
  explicit SharedMemoryRegistry(Client* client);
  SharedMemoryRegistry(const SharedMemoryRegistry&) = delete;
  SharedMemoryRegistry& operator=(const SharedMemoryRegistry&) = delete;
  ~SharedMemoryRegistry();

  // Creates a region of `byte_size` bytes under a fresh key
  // (UniqueSharedMemoryKey(tag)) and registers all of it under the key's
  // name (the key without its '/'). On failure nothing is left: the error is
  // SystemSharedMemoryRegion::Create's, or the server's (its code, with the
  // region named) when it refuses the registration.
  absl::StatusOr<RegisteredRegion> Add(absl::string_view tag, uint64_t byte_size);

  // Unregisters every region from the server (each by its name: other
  // clients' regions are left alone), then unmaps and unlinks it. Every region
  // is removed even when the server cannot be reached; the first error is
  // returned.
  absl::Status Release();

  // For a process about to exit on an interrupt: unregisters and unlinks
  // every region but leaves it mapped, so that threads still using the memory
  // do not fault. Waits for a Release() in progress.
  void ReleaseBeforeExit();

  // The number of regions held.
  int size() const;

 private:
  // Unregisters every region and unlinks it; returns the first error.
  absl::Status UnregisterAndUnlinkAll() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  Client* const client_;
  mutable absl::Mutex mutex_;
  std::vector<std::pair<std::string, std::unique_ptr<SystemSharedMemoryRegion>>> regions_
      ABSL_GUARDED_BY(mutex_);
};

// The byte size of `output` of a request whose batch dimension (when
// `batch_size` > 0: the model batches, and the metadata shows that dimension
// as -1) is `batch_size`. InvalidArgument naming the output when another
// dimension is variable (-1): its size is only known once the model ran, so
// the caller must give it (--output-shared-memory-size).
absl::StatusOr<uint64_t> OutputByteSize(
    const inference::ModelMetadataResponse::TensorMetadata& output, int64_t batch_size);

}  // namespace fuseserve::client
