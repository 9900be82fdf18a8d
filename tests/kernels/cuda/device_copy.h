#pragma once

// Host <-> device copies for the GPU kernel tests. Failures are reported as
// test failures (EXPECT_*), and the test goes on with an empty result.

#include <cuda_runtime_api.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/resources.h"

namespace fuseserve::cuda {

// A device copy of `host`.
inline DeviceBuffer ToDevice(const std::vector<float>& host) {
  auto buffer = DeviceBuffer::Allocate(host.size() * sizeof(float));
  EXPECT_TRUE(buffer.ok()) << buffer.status();
  if (!buffer.ok()) return DeviceBuffer();
  EXPECT_EQ(cudaMemcpy(buffer->data(), host.data(), buffer->bytes(), cudaMemcpyHostToDevice),
            cudaSuccess);
  return std::move(*buffer);
}

// `count` floats of device memory filled with NaN (all bits set), so that an
// element a kernel fails to write cannot pass a comparison.
inline DeviceBuffer PoisonedDevice(int64_t count) {
  auto buffer = DeviceBuffer::Allocate(count * sizeof(float));
  EXPECT_TRUE(buffer.ok()) << buffer.status();
  if (!buffer.ok()) return DeviceBuffer();
  EXPECT_EQ(cudaMemset(buffer->data(), 0xFF, buffer->bytes()), cudaSuccess);
  return std::move(*buffer);
}

// The first `count` floats of `device`.
inline std::vector<float> ToHost(const DeviceBuffer& device, int64_t count) {
  std::vector<float> host(count);
  EXPECT_EQ(cudaMemcpy(host.data(), device.data(), count * sizeof(float), cudaMemcpyDeviceToHost),
            cudaSuccess);
  return host;
}

}  // namespace fuseserve::cuda
