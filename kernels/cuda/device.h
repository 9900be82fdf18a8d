#pragma once

// Probing for CUDA devices. Safe on machines without a GPU driver: nothing
// but cudaGetDeviceCount is called before a device is known to exist, and its
// failure simply means "no device" (DESIGN.md: never touch a CUDA library
// when no device is present).

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace fuseserve::cuda {

struct DeviceInfo {
  int index = 0;
  std::string name;
  std::string uuid;  // "GPU-xxxxxxxx-..." as nvidia-smi prints it
  int compute_capability_major = 0;
  int compute_capability_minor = 0;
  int64_t total_memory_bytes = 0;
  int multiprocessor_count = 0;
};

// Number of usable CUDA devices; 0 when there is no driver or no device.
int DeviceCount();

absl::StatusOr<DeviceInfo> GetDeviceInfo(int device);

// Device memory in use on `device` (total - free), for the GPU memory metric.
absl::StatusOr<int64_t> DeviceMemoryUsedBytes(int device);

}  // namespace fuseserve::cuda
