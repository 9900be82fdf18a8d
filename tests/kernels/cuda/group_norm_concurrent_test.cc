#include "kernels/cuda/group_norm_concurrent.h"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/group_norm.h"
#include "kernels/cuda/resources.h"
#include "kernels/reference/test_data.h"
#include "tests/kernels/cuda/device_copy.h"
#include "tests/kernels/cuda/gpu_test_fixtures.h"
#include "tests/kernels/cuda/sample_producer.h"

namespace fuseserve::cuda {
namespace {

GroupNormParams Params(int64_t batch, int64_t channels, int64_t spatial_size, int64_t num_groups) {
  GroupNormParams p;
  p.batch = batch;
  p.channels = channels;
  p.spatial_size = spatial_size;
  p.num_groups = num_groups;
  return p;
}

TEST(GroupNormConcurrentSupportsTest, NeedsNoPrologueWholeFloat4ChannelsAndAlignedData) {
  alignas(16) float data[8] = {};
  const GroupNormParams p = Params(2, 8, 12, 2);
  EXPECT_TRUE(GroupNormConcurrentSupports(p, data));
  EXPECT_FALSE(GroupNormConcurrentSupports(p, data + 1));  // 4-byte aligned only
  GroupNormParams odd = Params(2, 8, 10, 2);                // a float4 would cross channels
  EXPECT_FALSE(GroupNormConcurrentSupports(odd, data));
  GroupNormParams gelu = p;
  gelu.prologue = GroupNormPrologue::kGeluErf;
  EXPECT_FALSE(GroupNormConcurrentSupports(gelu, data));
  GroupNormParams invalid = Params(2, 8, 12, 3);  // 3 does not divide 8
  EXPECT_FALSE(GroupNormConcurrentSupports(invalid, data));
}

TEST(GroupNormConcurrentArgumentsTest, RejectsNullAndUnsupportedArgumentsBeforeAnyWork) {
  alignas(16) float data[8] = {};
  double sums[2] = {};
  unsigned done[1] = {};
  unsigned char scratch[kGroupNormConcurrentScratchBytes] = {};
  const SampleProgress progress{done, 1};
  const GroupNormParams p = Params(1, 8, 12, 2);
  EXPECT_EQ(GroupNormApplyConcurrent(p, nullptr, progress, nullptr, nullptr, data, scratch, nullptr)
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(GroupNormApplyConcurrent(p, sums, SampleProgress{}, nullptr, nullptr, data, scratch,
                                     nullptr)
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      GroupNormApplyConcurrent(p, sums, progress, nullptr, nullptr, data, nullptr, nullptr).code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(GroupNormApplyConcurrent(p, sums, progress, nullptr, nullptr, data + 1, scratch,
                                     nullptr)
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(GroupNormApplyConcurrent(Params(1, 8, 12, 3), sums, progress, nullptr, nullptr, data,
                                     scratch, nullptr)
                .code(),
            absl::StatusCode::kInvalidArgument);
}

class GroupNormConcurrentTest : public GpuStreamTest {};

// (sum, sum of squares) in double of each (sample, group) slab of `x`.
std::vector<double> GroupSums(const GroupNormParams& p, const std::vector<float>& x) {
  const int64_t group_size = p.channels / p.num_groups * p.spatial_size;
  std::vector<double> sums(2 * p.batch * p.num_groups, 0.0);
  for (int64_t group = 0; group < p.batch * p.num_groups; ++group) {
    for (int64_t i = 0; i < group_size; ++i) {
      const double v = x[group * group_size + i];
      sums[2 * group] += v;
      sums[2 * group + 1] += v * v;
    }
  }
  return sums;
}

std::vector<double> ToHostDoubles(const DeviceBuffer& device, int64_t count) {
  std::vector<double> host(count);
  EXPECT_EQ(cudaMemcpy(host.data(), device.data(), count * sizeof(double), cudaMemcpyDeviceToHost),
            cudaSuccess);
  return host;
}

DeviceBuffer Zeros(size_t bytes) {
  auto buffer = DeviceBuffer::Allocate(bytes);
  EXPECT_TRUE(buffer.ok()) << buffer.status();
  if (!buffer.ok()) return DeviceBuffer();
  EXPECT_EQ(cudaMemset(buffer->data(), 0, bytes), cudaSuccess);
  FinishUploads();
  return std::move(*buffer);
}

// The producer writes each sample (values and sums) into poisoned memory
// only after a delay, and signals it in several increments: a normalisation
// that read a sample before its signal reached the target would read NaN.
// The result must equal GroupNormApply's on the finished data, bitwise.
TEST_F(GroupNormConcurrentTest, WaitsForEachSampleAndMatchesGroupNormApplyBitwise) {
  struct Case {
    GroupNormParams params;
    unsigned target;
  };
  uint64_t seed = 300;
  for (const Case& c : std::vector<Case>{{Params(3, 8, 2052, 2), 3},  // 2 chunks per group
                                         {Params(2, 64, 12288, 8), 1},
                                         {Params(9, 4, 4, 4), 2}}) {
    const GroupNormParams& p = c.params;
    SCOPED_TRACE(absl::StrCat("N=", p.batch, " C=", p.channels, " HW=", p.spatial_size,
                              " G=", p.num_groups, " target=", c.target));
    const int64_t count = p.batch * p.channels * p.spatial_size;
    const std::vector<float> source = reference::RandomNormal(count, seed);
    const std::vector<float> weight = reference::RandomUniform(p.channels, seed + 1, 0.5f, 1.5f);
    const std::vector<float> bias = reference::RandomNormal(p.channels, seed + 2);
    seed += 3;
    const std::vector<double> sums = GroupSums(p, source);

    // GroupNormApply on the finished data.
    DeviceBuffer expected = ToDevice(source);
    DeviceBuffer d_sums = ToDevice(sums);
    DeviceBuffer d_weight = ToDevice(weight);
    DeviceBuffer d_bias = ToDevice(bias);
    ASSERT_TRUE(GroupNormApply(p, d_sums.as<double>(), d_weight.as<float>(), d_bias.as<float>(),
                               expected.as<float>(), stream_.get())
                    .ok());

    // The concurrent one behind the slow producer, on poisoned memory.
    DeviceBuffer d_source = ToDevice(source);
    DeviceBuffer data = PoisonedDevice(count);
    auto produced_sums = DeviceBuffer::Allocate(sums.size() * sizeof(double));
    ASSERT_TRUE(produced_sums.ok());
    ASSERT_EQ(cudaMemset(produced_sums->data(), 0xFF, produced_sums->bytes()), cudaSuccess);
    DeviceBuffer done = Zeros(p.batch * sizeof(unsigned));
    DeviceBuffer scratch = Zeros(kGroupNormConcurrentScratchBytes);
    ASSERT_EQ(LaunchSlowSampleProducer(d_source.as<float>(), data.as<float>(), d_sums.as<double>(),
                                       produced_sums->as<double>(), p.batch,
                                       p.channels * p.spatial_size, 2 * p.num_groups,
                                       done.as<unsigned>(), c.target, 20000, stream_.get()),
              cudaSuccess);
    const SampleProgress progress{done.as<unsigned>(), c.target};
    const absl::Status status =
        GroupNormApplyConcurrent(p, produced_sums->as<double>(), progress, d_weight.as<float>(),
                                 d_bias.as<float>(), data.as<float>(), scratch.data(), stream_.get());
    ASSERT_TRUE(status.ok()) << status;
    ASSERT_TRUE(stream_.Synchronize().ok());
    const std::vector<float> want = ToHost(expected, count);
    const std::vector<float> got = ToHost(data, count);
    int64_t mismatches = 0;
    for (int64_t i = 0; i < count; ++i) {
      if (std::memcmp(&want[i], &got[i], sizeof(float)) != 0) ++mismatches;
    }
    EXPECT_EQ(mismatches, 0);
    // Every sample was signalled exactly `target` times.
    std::vector<unsigned> signals(p.batch);
    ASSERT_EQ(cudaMemcpy(signals.data(), done.data(), p.batch * sizeof(unsigned),
                         cudaMemcpyDeviceToHost),
              cudaSuccess);
    for (unsigned s : signals) EXPECT_EQ(s, c.target);
    EXPECT_EQ(ToHostDoubles(*produced_sums, sums.size()), sums);
  }
}

}  // namespace
}  // namespace fuseserve::cuda
