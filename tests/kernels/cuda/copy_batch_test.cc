#include "kernels/cuda/copy_batch.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/resources.h"

namespace fuseserve::cuda {
namespace {

class CopyBatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (DeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  }
};

// `count` page-locked buffers of `bytes` each (sizes differ by a few bytes
// when `uneven`), copied into one device buffer and back into fresh ones:
// every byte comes back where it belongs.
void RoundTrip(int count, size_t bytes, bool uneven) {
  auto stream = Stream::Create();
  ASSERT_TRUE(stream.ok()) << stream.status();
  std::vector<size_t> sizes(count);
  size_t total = 0;
  for (int i = 0; i < count; ++i) {
    sizes[i] = uneven ? bytes + 4 * static_cast<size_t>(i % 3) : bytes;
    total += sizes[i];
  }
  auto device = DeviceBuffer::Allocate(total);
  ASSERT_TRUE(device.ok()) << device.status();
  std::vector<PinnedBuffer> sources, destinations;
  for (int i = 0; i < count; ++i) {
    auto source = PinnedBuffer::Allocate(sizes[i]);
    auto destination = PinnedBuffer::Allocate(sizes[i]);
    ASSERT_TRUE(source.ok() && destination.ok());
    for (size_t b = 0; b < sizes[i]; ++b) {
      source->as<uint8_t>()[b] = static_cast<uint8_t>(i * 31 + b * 7);
      destination->as<uint8_t>()[b] = 0xEE;
    }
    sources.push_back(*std::move(source));
    destinations.push_back(*std::move(destination));
  }

  CopyBatch copies;
  size_t offset = 0;
  for (int i = 0; i < count; ++i) {
    copies.Add(device->as<char>() + offset, sources[i].data(), sizes[i]);
    offset += sizes[i];
  }
  copies.Add(device->data(), sources[0].data(), 0);  // nothing to copy: not added
  EXPECT_EQ(copies.size(), static_cast<size_t>(count));
  ASSERT_TRUE(copies.Issue(stream->get()).ok());
  EXPECT_EQ(copies.size(), 0u);
  offset = 0;
  for (int i = 0; i < count; ++i) {
    copies.Add(destinations[i].data(), device->as<char>() + offset, sizes[i]);
    offset += sizes[i];
  }
  ASSERT_TRUE(copies.Issue(stream->get()).ok());
  ASSERT_TRUE(stream->Synchronize().ok());
  for (int i = 0; i < count; ++i) {
    for (size_t b = 0; b < sizes[i]; ++b) {
      ASSERT_EQ(destinations[i].as<uint8_t>()[b], static_cast<uint8_t>(i * 31 + b * 7))
          << "buffer " << i << " byte " << b;
    }
  }
}

TEST_F(CopyBatchTest, OneCopyRoundTrips) { RoundTrip(1, 32768, false); }

TEST_F(CopyBatchTest, ManyCopiesOfOneCallLandEachWhereItBelongs) {
  RoundTrip(9, 32768, false);
  RoundTrip(64, 4096, true);
}

TEST_F(CopyBatchTest, IssuingNothingIsFine) {
  auto stream = Stream::Create();
  ASSERT_TRUE(stream.ok());
  CopyBatch copies;
  EXPECT_TRUE(copies.Issue(stream->get()).ok());
}

}  // namespace
}  // namespace fuseserve::cuda
