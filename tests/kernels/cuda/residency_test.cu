#include "kernels/cuda/residency.h"

#include <cuda_runtime.h>

#include "gpu_test_fixtures.h"
#include "gtest/gtest.h"

namespace fuseserve::cuda {
namespace {

constexpr int kThreads = 256;

// No registers or shared memory to speak of: threads alone would let 8
// CTAs share an SM, so any lower cap comes from the dynamic shared memory.
__global__ void __launch_bounds__(kThreads) TouchKernel(int* out) {
  if (out != nullptr && threadIdx.x == 0) *out = 1;
}

int ResidentCtas(size_t dynamic_bytes) {
  int ctas = 0;
  EXPECT_EQ(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&ctas, TouchKernel, kThreads,
                                                          dynamic_bytes),
            cudaSuccess);
  return ctas;
}

using ResidencyTest = GpuStreamTest;

TEST_F(ResidencyTest, PaddingCapsTheCtasPerSmAtTheRequestedCount) {
  for (int ctas = 1; ctas <= 6; ++ctas) {
    SCOPED_TRACE(ctas);
    const absl::StatusOr<size_t> bytes =
        ResidencyPadding(reinterpret_cast<const void*>(TouchKernel), ctas);
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    EXPECT_EQ(ResidentCtas(*bytes), ctas);
    // The padding is launchable (the limit was raised where it had to be).
    TouchKernel<<<1, kThreads, *bytes, stream_.get()>>>(nullptr);
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  }
  EXPECT_EQ(cudaStreamSynchronize(stream_.get()), cudaSuccess);
}

TEST_F(ResidencyTest, NoCapLaunchesWithExactlyTheKernelsOwnSharedMemory) {
  for (size_t used : {size_t{0}, size_t{32} * 1024}) {
    const absl::StatusOr<size_t> bytes =
        ResidencyPadding(reinterpret_cast<const void*>(TouchKernel), 0, used);
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    EXPECT_EQ(*bytes, used);
  }
}

// A kernel that needs more than its share under the cap keeps what it needs
// (fewer CTAs then fit than asked for), beyond the default 48 KiB too.
TEST_F(ResidencyTest, KernelsOwnSharedMemoryWinsOverASmallerShare) {
  const size_t used = size_t{64} * 1024;
  const absl::StatusOr<size_t> bytes =
      ResidencyPadding(reinterpret_cast<const void*>(TouchKernel), 8, used);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(*bytes, used);
  EXPECT_GE(ResidentCtas(*bytes), 1);
  EXPECT_LT(ResidentCtas(*bytes), 8);
  TouchKernel<<<1, kThreads, *bytes, stream_.get()>>>(nullptr);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(stream_.get()), cudaSuccess);
}

}  // namespace
}  // namespace fuseserve::cuda
