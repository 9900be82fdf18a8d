// GPU instances in a build without CUDA: there are no devices.

#include "server/runtime/gpu_instance.h"

namespace fuseserve {

int GpuDeviceCount() { return 0; }

absl::StatusOr<GpuDeviceMemory> QueryGpuMemory(int) {
  return absl::FailedPreconditionError("this fuseserve build has no CUDA backend");
}

absl::StatusOr<std::unique_ptr<Instance>> CreateGpuInstance(const GpuInstanceOptions&) {
  return absl::FailedPreconditionError("this fuseserve build has no CUDA backend");
}

}  // namespace fuseserve
