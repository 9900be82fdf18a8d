#include "kernels/cuda/resources.h"

#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/device.h"

namespace fuseserve::cuda {
namespace {

class CudaResourcesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (DeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  }
};

TEST_F(CudaResourcesTest, DeviceInfoNamesTheDevice) {
  absl::StatusOr<DeviceInfo> info = GetDeviceInfo(0);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_FALSE(info->name.empty());
  EXPECT_EQ(info->uuid.rfind("GPU-", 0), 0u);
  EXPECT_GT(info->total_memory_bytes, 0);
}

TEST_F(CudaResourcesTest, RoundTripsThroughPinnedAndDeviceBuffersOnAStream) {
  constexpr size_t kCount = 1 << 20;
  auto stream = Stream::Create();
  auto host_in = PinnedBuffer::Allocate(kCount * sizeof(float));
  auto host_out = PinnedBuffer::Allocate(kCount * sizeof(float));
  auto device = DeviceBuffer::Allocate(kCount * sizeof(float));
  auto start = Event::Create();
  auto stop = Event::Create();
  ASSERT_TRUE(stream.ok() && host_in.ok() && host_out.ok() && device.ok() && start.ok() &&
              stop.ok());
  for (size_t i = 0; i < kCount; ++i) host_in->as<float>()[i] = static_cast<float>(i) * 0.5f;
  std::memset(host_out->data(), 0, kCount * sizeof(float));

  ASSERT_TRUE(start->Record(stream->get()).ok());
  ASSERT_EQ(cudaMemcpyAsync(device->data(), host_in->data(), device->bytes(),
                            cudaMemcpyHostToDevice, stream->get()),
            cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(host_out->data(), device->data(), device->bytes(),
                            cudaMemcpyDeviceToHost, stream->get()),
            cudaSuccess);
  ASSERT_TRUE(stop->Record(stream->get()).ok());
  ASSERT_TRUE(stream->Synchronize().ok());
  EXPECT_EQ(std::memcmp(host_in->data(), host_out->data(), kCount * sizeof(float)), 0);
  absl::StatusOr<float> ms = stop->ElapsedMsSince(*start);
  ASSERT_TRUE(ms.ok()) << ms.status();
  EXPECT_GE(*ms, 0.0f);
}

TEST_F(CudaResourcesTest, MovedFromBufferOwnsNothing) {
  auto buffer = DeviceBuffer::Allocate(256);
  ASSERT_TRUE(buffer.ok());
  DeviceBuffer moved = std::move(*buffer);
  EXPECT_EQ(buffer->data(), nullptr);
  EXPECT_NE(moved.data(), nullptr);
  EXPECT_EQ(moved.bytes(), 256u);
}

TEST(CudaDeviceTest, DeviceCountIsNonNegativeWithoutADriver) {
  EXPECT_GE(DeviceCount(), 0);
}

}  // namespace
}  // namespace fuseserve::cuda
