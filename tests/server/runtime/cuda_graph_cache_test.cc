#include "server/runtime/cuda_graph_cache.h"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "tests/kernels/cuda/gpu_test_fixtures.h"

namespace fuseserve {
namespace {

constexpr size_t kBytes = 4096;

// The work under test: `dst` = `src` (a device-to-device copy), then byte
// `marker` of `dst` set to 0x5A. Both are capturable stream operations, and
// each batch's effect is visible in `dst`.
class CudaGraphCacheTest : public cuda::GpuStreamTest {
 protected:
  void SetUp() override {
    cuda::GpuStreamTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    auto src = cuda::DeviceBuffer::Allocate(kBytes);
    auto dst = cuda::DeviceBuffer::Allocate(kBytes);
    ASSERT_TRUE(src.ok() && dst.ok());
    src_ = *std::move(src);
    dst_ = *std::move(dst);
    ASSERT_EQ(cudaMemset(src_.data(), 0x11, kBytes), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }

  CudaGraphCache::EnqueueFn CopyAndMark(size_t marker) {
    return [this, marker](cudaStream_t stream) -> absl::Status {
      if (cudaMemcpyAsync(dst_.data(), src_.data(), kBytes, cudaMemcpyDeviceToDevice, stream) !=
              cudaSuccess ||
          cudaMemsetAsync(dst_.as<char>() + marker, 0x5A, 1, stream) != cudaSuccess) {
        return absl::InternalError("enqueue failed");
      }
      return absl::OkStatus();
    };
  }

  // Clears dst_, runs one batch through `cache` and returns dst_'s bytes.
  std::vector<uint8_t> RunBatch(CudaGraphCache& cache, const Shape& shape,
                                const CudaGraphCache::EnqueueFn& enqueue) {
    EXPECT_EQ(cudaMemsetAsync(dst_.data(), 0, kBytes, stream_.get()), cudaSuccess);
    const absl::Status status = cache.Run(stream_.get(), shape, Layout(), enqueue);
    EXPECT_TRUE(status.ok()) << status;
    std::vector<uint8_t> host(kBytes);
    EXPECT_EQ(cudaMemcpyAsync(host.data(), dst_.data(), kBytes, cudaMemcpyDeviceToHost,
                              stream_.get()),
              cudaSuccess);
    EXPECT_EQ(cudaStreamSynchronize(stream_.get()), cudaSuccess);
    return host;
  }

  GraphMemoryLayout Layout() const { return {src_.data(), dst_.data(), 0}; }

  static std::vector<uint8_t> Expected(size_t marker) {
    std::vector<uint8_t> bytes(kBytes, 0x11);
    bytes[marker] = 0x5A;
    return bytes;
  }

  cuda::DeviceBuffer src_, dst_;
};

TEST_F(CudaGraphCacheTest, RunsPlainlyThenCapturesThenReplays) {
  CudaGraphCache cache(8);
  const Shape shape = {4, 16};
  EXPECT_EQ(RunBatch(cache, shape, CopyAndMark(7)), Expected(7));
  EXPECT_EQ(cache.stats().plain_runs, 1);
  EXPECT_EQ(cache.stats().captures, 0);
  EXPECT_EQ(RunBatch(cache, shape, CopyAndMark(7)), Expected(7));
  EXPECT_EQ(cache.stats().captures, 1);
  EXPECT_EQ(cache.stats().graph_runs, 1);
  EXPECT_EQ(RunBatch(cache, shape, CopyAndMark(7)), Expected(7));
  EXPECT_EQ(cache.stats().captures, 1);
  EXPECT_EQ(cache.stats().graph_runs, 2);
  EXPECT_EQ(cache.stats().plain_runs, 1);
}

TEST_F(CudaGraphCacheTest, ReplayRepeatsTheCapturedWorkNotTheNewCallback) {
  // A graph is the work as captured: a replay ignores the callback, which is
  // why the instance keys graphs by everything its launches depend on.
  CudaGraphCache cache(8);
  const Shape shape = {2};
  RunBatch(cache, shape, CopyAndMark(1));
  RunBatch(cache, shape, CopyAndMark(2));  // captured with marker 2
  EXPECT_EQ(RunBatch(cache, shape, CopyAndMark(3)), Expected(2));
}

TEST_F(CudaGraphCacheTest, EachShapeGetsItsOwnGraph) {
  CudaGraphCache cache(8);
  for (int round = 0; round < 3; ++round) {
    EXPECT_EQ(RunBatch(cache, {1}, CopyAndMark(10)), Expected(10));
    EXPECT_EQ(RunBatch(cache, {2}, CopyAndMark(20)), Expected(20));
  }
  EXPECT_EQ(cache.stats().captures, 2);
  EXPECT_EQ(cache.stats().graph_runs, 4);
  EXPECT_EQ(cache.stats().plain_runs, 2);
}

TEST_F(CudaGraphCacheTest, ChangedMemoryLayoutDropsEveryGraph) {
  CudaGraphCache cache(8);
  const Shape shape = {3};
  RunBatch(cache, shape, CopyAndMark(5));
  RunBatch(cache, shape, CopyAndMark(5));
  ASSERT_EQ(cache.stats().captures, 1);
  // The executor's memory moved: the graph (which points at the old memory)
  // must not be replayed; the shape starts over.
  EXPECT_EQ(cudaMemsetAsync(dst_.data(), 0, kBytes, stream_.get()), cudaSuccess);
  GraphMemoryLayout moved = Layout();
  moved.executor_bytes = 1;
  ASSERT_TRUE(cache.Run(stream_.get(), shape, moved, CopyAndMark(6)).ok());
  EXPECT_EQ(cudaStreamSynchronize(stream_.get()), cudaSuccess);
  EXPECT_EQ(cache.stats().plain_runs, 2);
  EXPECT_EQ(cache.stats().graph_runs, 1);
}

TEST_F(CudaGraphCacheTest, WorkThatCannotBeCapturedRunsPlainlyEveryTime) {
  CudaGraphCache cache(8);
  const Shape shape = {5};
  // A synchronisation inside the enqueue is illegal during capture.
  const CudaGraphCache::EnqueueFn synchronising = [this](cudaStream_t stream) -> absl::Status {
    const absl::Status copied = CopyAndMark(9)(stream);
    if (!copied.ok()) return copied;
    if (cudaStreamSynchronize(stream) != cudaSuccess) {
      return absl::InternalError("cudaStreamSynchronize failed");
    }
    return absl::OkStatus();
  };
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(RunBatch(cache, shape, synchronising), Expected(9)) << "batch " << i;
  }
  EXPECT_EQ(cache.stats().failed_captures, 1);
  EXPECT_EQ(cache.stats().captures, 0);
  EXPECT_EQ(cache.stats().plain_runs, 3);
  // The failed capture left no error behind.
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

TEST_F(CudaGraphCacheTest, AnEnqueueErrorIsReturned) {
  CudaGraphCache cache(8);
  const auto failing = [](cudaStream_t) { return absl::InternalError("kernel refused"); };
  const absl::Status status = cache.Run(stream_.get(), {1}, Layout(), failing);
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(status.message(), "kernel refused");
}

TEST_F(CudaGraphCacheTest, ZeroCapacityNeverCaptures) {
  CudaGraphCache cache(0);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(RunBatch(cache, {1}, CopyAndMark(4)), Expected(4));
  EXPECT_EQ(cache.stats().captures, 0);
  EXPECT_EQ(cache.stats().plain_runs, 3);
}

TEST_F(CudaGraphCacheTest, ShapesBeyondCapacityRunPlainly) {
  CudaGraphCache cache(1);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(RunBatch(cache, {1}, CopyAndMark(1)), Expected(1));
    EXPECT_EQ(RunBatch(cache, {2}, CopyAndMark(2)), Expected(2));
  }
  EXPECT_EQ(cache.stats().captures, 1);
  EXPECT_EQ(cache.stats().plain_runs, 4);  // shape {2} always, shape {1} once
}

}  // namespace
}  // namespace fuseserve
