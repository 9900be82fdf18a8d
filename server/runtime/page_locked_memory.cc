#include "server/runtime/page_locked_memory.h"

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "common/status_macros.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/device.h"

namespace fuseserve {
namespace {

class RegisteredRange final : public PageLockedRange {
 public:
  explicit RegisteredRange(void* data) : data_(data) {}
  ~RegisteredRange() override { cudaHostUnregister(data_); }

 private:
  void* data_;
};

absl::Status CheckAvailable() {
  if (!PageLockedMemoryAvailable()) {
    return absl::FailedPreconditionError("page-locked memory needs a CUDA device");
  }
  return absl::OkStatus();
}

}  // namespace

bool PageLockedMemoryAvailable() { return cuda::DeviceCount() > 0; }

absl::StatusOr<void*> AllocatePageLocked(size_t bytes) {
  RETURN_IF_ERROR(CheckAvailable());
  void* data = nullptr;
  RETURN_IF_CUDA_ERROR(cudaHostAlloc(&data, bytes, cudaHostAllocPortable));
  return data;
}

void FreePageLocked(void* data) { cudaFreeHost(data); }

absl::StatusOr<std::unique_ptr<PageLockedRange>> PageLockRange(void* data, size_t bytes) {
  RETURN_IF_ERROR(CheckAvailable());
  RETURN_IF_CUDA_ERROR(cudaHostRegister(data, bytes, cudaHostRegisterPortable));
  return std::make_unique<RegisteredRange>(data);
}

}  // namespace fuseserve
