#include "kernels/cuda/device.h"

#include <cuda_runtime_api.h>

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cuda/cuda_status.h"

namespace fuseserve::cuda {
namespace {

std::string FormatUuid(const cudaUUID_t& uuid) {
  const auto* b = reinterpret_cast<const unsigned char*>(uuid.bytes);
  char text[64];
  std::snprintf(text, sizeof(text),
                "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
                b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12],
                b[13], b[14], b[15]);
  return text;
}

}  // namespace

int DeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the error; "no driver" is not sticky
    return 0;
  }
  return count;
}

absl::StatusOr<DeviceInfo> GetDeviceInfo(int device) {
  cudaDeviceProp properties{};
  RETURN_IF_CUDA_ERROR(cudaGetDeviceProperties(&properties, device));
  DeviceInfo info;
  info.index = device;
  info.name = properties.name;
  info.uuid = FormatUuid(properties.uuid);
  info.compute_capability_major = properties.major;
  info.compute_capability_minor = properties.minor;
  info.total_memory_bytes = static_cast<int64_t>(properties.totalGlobalMem);
  info.multiprocessor_count = properties.multiProcessorCount;
  return info;
}

absl::StatusOr<int64_t> DeviceMemoryUsedBytes(int device) {
  RETURN_IF_CUDA_ERROR(cudaSetDevice(device));
  size_t free_bytes = 0, total_bytes = 0;
  RETURN_IF_CUDA_ERROR(cudaMemGetInfo(&free_bytes, &total_bytes));
  return static_cast<int64_t>(total_bytes - free_bytes);
}

}  // namespace fuseserve::cuda
