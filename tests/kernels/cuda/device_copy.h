#pragma once

// Host <-> device copies for the GPU kernel tests. Failures are reported as
// test failures (EXPECT_*), and the test goes on with an empty result.
//
// The uploads finish before they return: cudaMemcpy from pageable memory may
// return before its DMA lands and cudaMemset is asynchronous, both on the
// legacy default stream, which the kernels' non-blocking streams do not wait
// for.

#include <cuda_runtime_api.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/resources.h"

namespace fuseserve::cuda {

// Waits for every upload and memset issued on the default stream.
inline void FinishUploads() { EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess); }

// A device copy of `host`.
template <typename T>
DeviceBuffer ToDevice(const std::vector<T>& host) {
  auto buffer = DeviceBuffer::Allocate(host.size() * sizeof(T));
  EXPECT_TRUE(buffer.ok()) << buffer.status();
  if (!buffer.ok()) return DeviceBuffer();
  EXPECT_EQ(cudaMemcpy(buffer->data(), host.data(), buffer->bytes(), cudaMemcpyHostToDevice),
            cudaSuccess);
  FinishUploads();
  return std::move(*buffer);
}

// `count` floats of device memory filled with NaN (all bits set), so that an
// element a kernel fails to write cannot pass a comparison.
inline DeviceBuffer PoisonedDevice(int64_t count) {
  auto buffer = DeviceBuffer::Allocate(count * sizeof(float));
  EXPECT_TRUE(buffer.ok()) << buffer.status();
  if (!buffer.ok()) return DeviceBuffer();
  EXPECT_EQ(cudaMemset(buffer->data(), 0xFF, buffer->bytes()), cudaSuccess);
  FinishUploads();
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
