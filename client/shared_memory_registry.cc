#include "client/shared_memory_registry.h"

#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/shape.h"
#include "common/status_macros.h"

namespace fuseserve::client {
namespace {

// Bounds the whole of a release, so that a server that stopped answering
// delays the exit by this much at most however many regions there are.
constexpr absl::Duration kReleaseBudget = absl::Seconds(10);

}  // namespace

SharedMemoryRegistry::SharedMemoryRegistry(Client* client) : client_(client) {}

SharedMemoryRegistry::~SharedMemoryRegistry() { Release().IgnoreError(); }

absl::StatusOr<RegisteredRegion> SharedMemoryRegistry::Add(absl::string_view tag,
                                                           uint64_t byte_size) {
  ASSIGN_OR_RETURN(std::unique_ptr<SystemSharedMemoryRegion> region,
                   SystemSharedMemoryRegion::Create(UniqueSharedMemoryKey(tag), byte_size));
  const RegisteredRegion added{region->key().substr(1), region.get()};
  {
    // Held before it is registered, so that an interrupt during the
    // registration removes it too.
    absl::MutexLock lock(&mutex_);
    regions_.emplace_back(added.name, std::move(region));
  }
  const absl::Status registered =
      client_->RegisterSystemSharedMemory(added.name, added.region->key(), byte_size);
  if (registered.ok()) return added;
  std::unique_ptr<SystemSharedMemoryRegion> refused;  // removed when this returns
  {
    absl::MutexLock lock(&mutex_);
    for (auto it = regions_.begin(); it != regions_.end(); ++it) {
      if (it->second.get() == added.region) {
        refused = std::move(it->second);
        regions_.erase(it);
        break;
      }
    }
  }
  return absl::Status(registered.code(),
                      absl::StrCat("registering system shared-memory region \"", added.name, "\" (",
                                   byte_size, " bytes): ", registered.message()));
}

absl::Status SharedMemoryRegistry::UnregisterAndUnlinkAll() {
  const absl::Time deadline = absl::Now() + kReleaseBudget;
  absl::Status first_error;
  for (auto& [name, region] : regions_) {
    const absl::Duration left = deadline - absl::Now();
    absl::Status unregistered = left > absl::ZeroDuration()
                                    ? client_->UnregisterSystemSharedMemory(name, left)
                                    : absl::DeadlineExceededError("no time left to unregister it");
    if (!unregistered.ok() && first_error.ok()) {
      first_error = absl::Status(unregistered.code(),
                                 absl::StrCat("unregistering system shared-memory region \"", name,
                                              "\": ", unregistered.message()));
    }
    region->Unlink();
  }
  return first_error;
}

absl::Status SharedMemoryRegistry::Release() {
  absl::MutexLock lock(&mutex_);
  const absl::Status status = UnregisterAndUnlinkAll();
  regions_.clear();
  return status;
}

void SharedMemoryRegistry::ReleaseBeforeExit() {
  absl::MutexLock lock(&mutex_);
  UnregisterAndUnlinkAll().IgnoreError();
}

int SharedMemoryRegistry::size() const {
  absl::MutexLock lock(&mutex_);
  return static_cast<int>(regions_.size());
}

absl::StatusOr<uint64_t> OutputByteSize(
    const inference::ModelMetadataResponse::TensorMetadata& output, int64_t batch_size) {
  if (output.datatype() != "FP32") {
    return absl::InvalidArgumentError(absl::StrCat("output \"", output.name(), "\" is ",
                                                   output.datatype(), "; only FP32 is supported"));
  }
  Shape shape(output.shape().begin(), output.shape().end());
  if (batch_size > 0 && !shape.empty()) shape[0] = batch_size;
  for (int64_t dim : shape) {
    if (dim < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "output \"", output.name(), "\" has variable dims [", absl::StrJoin(output.shape(), ", "),
          "]: its size is known only once the model ran; give the bytes to reserve for it with "
          "--output-shared-memory-size"));
    }
  }
  const absl::StatusOr<int64_t> count = CheckedNumElements(shape);
  if (!count.ok() || *count > std::numeric_limits<int64_t>::max() / 4) {
    return absl::InvalidArgumentError(absl::StrCat("output \"", output.name(), "\" of shape ",
                                                   ShapeToString(shape),
                                                   " is too large to place in shared memory"));
  }
  return static_cast<uint64_t>(*count) * sizeof(float);
}

}  // namespace fuseserve::client
