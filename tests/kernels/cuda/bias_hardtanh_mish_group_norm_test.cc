#include "kernels/cuda/bias_hardtanh_mish_group_norm.h"

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/thread_pool.h"
#include "gtest/gtest.h"
#include "kernels/cpu/bias_hardtanh_mish_group_norm.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/resources.h"
#include "tests/kernels/cuda/device_copy.h"
#include "tests/kernels/cuda/gpu_test_fixtures.h"
#include "kernels/reference/error_metrics.h"
#include "kernels/reference/ops.h"
#include "kernels/reference/test_data.h"

namespace fuseserve::cuda {
namespace {

using reference::CompareToReference;
using reference::ErrorStats;
using reference::kFp32Tolerance;

struct Data {
  std::vector<float> input;
  std::vector<float> gemm_bias;
  std::vector<float> bias;
  std::vector<float> gn_weight;
  std::vector<float> gn_bias;
};

// y ~ U[0,1) or 1.5 N(0,1) (both hardtanh bounds hit), biases ~ N(0, 0.25^2),
// GroupNorm weight U[0.5, 1.5) and bias N(0,1).
Data MakeData(const BiasHardtanhMishGroupNormParams& p, bool normal, uint64_t seed) {
  Data d;
  const int64_t count = p.batch * p.channels;
  d.input = normal ? reference::RandomNormal(count, seed, 0.0f, 1.5f)
                   : reference::RandomUniform(count, seed);
  d.gemm_bias = reference::RandomNormal(p.channels, seed + 1, 0.0f, 0.25f);
  d.bias = reference::RandomNormal(p.channels, seed + 2, 0.0f, 0.25f);
  d.gn_weight = reference::RandomUniform(p.channels, seed + 3, 0.5f, 1.5f);
  d.gn_bias = reference::RandomNormal(p.channels, seed + 4);
  return d;
}

// The float64 reference; its single bias is gemm_bias + bias (in double).
std::vector<double> Reference(const BiasHardtanhMishGroupNormParams& p, const Data& d) {
  reference::BiasHardtanhMishGroupNormShape shape;
  shape.batch = p.batch;
  shape.channels = p.channels;
  shape.num_groups = p.num_groups;
  shape.hardtanh_min = p.hardtanh_min;
  shape.hardtanh_max = p.hardtanh_max;
  shape.eps = p.eps;
  const std::vector<double> input(d.input.begin(), d.input.end());
  std::vector<double> bias(p.channels);
  for (int64_t c = 0; c < p.channels; ++c) {
    bias[c] = static_cast<double>(d.gemm_bias[c]) + static_cast<double>(d.bias[c]);
  }
  const std::vector<double> gn_weight(d.gn_weight.begin(), d.gn_weight.end());
  const std::vector<double> gn_bias(d.gn_bias.begin(), d.gn_bias.end());
  return reference::BiasHardtanhMishGroupNorm(shape, input.data(), bias.data(), gn_weight.data(),
                                              gn_bias.data());
}

BiasHardtanhMishGroupNormParams Params(int64_t batch, int64_t channels, int64_t num_groups,
                                       float hardtanh_min = -1.0f, float hardtanh_max = 1.0f) {
  BiasHardtanhMishGroupNormParams p;
  p.batch = batch;
  p.channels = channels;
  p.num_groups = num_groups;
  p.hardtanh_min = hardtanh_min;
  p.hardtanh_max = hardtanh_max;
  return p;
}

class CudaBiasHardtanhMishGroupNormTest : public GpuStreamTest {
 protected:

  // The epilogue on the GPU into a NaN-poisoned output, or in place.
  std::vector<float> Run(const BiasHardtanhMishGroupNormParams& p, const Data& d,
                         bool in_place = false) {
    DeviceBuffer in = ToDevice(d.input);
    DeviceBuffer gemm_bias = ToDevice(d.gemm_bias);
    DeviceBuffer bias = ToDevice(d.bias);
    DeviceBuffer gn_weight = ToDevice(d.gn_weight);
    DeviceBuffer gn_bias = ToDevice(d.gn_bias);
    DeviceBuffer out;
    if (!in_place) {
      auto buffer = DeviceBuffer::Allocate(d.input.size() * sizeof(float));
      EXPECT_TRUE(buffer.ok());
      if (!buffer.ok()) return {};
      out = std::move(*buffer);
      EXPECT_EQ(cudaMemset(out.data(), 0xFF, out.bytes()), cudaSuccess);
      FinishUploads();
    }
    const DeviceBuffer& result = in_place ? in : out;
    const absl::Status status = BiasHardtanhMishGroupNorm(
        p, in.as<float>(), gemm_bias.as<float>(), bias.as<float>(), gn_weight.as<float>(),
        gn_bias.as<float>(), result.as<float>(), stream_.get());
    EXPECT_TRUE(status.ok()) << status;
    EXPECT_TRUE(stream_.Synchronize().ok());
    return ToHost(result, static_cast<int64_t>(d.input.size()));
  }

};

// Channels per group 32 (the reference), 1, 7, 512, and the other code
// paths: sub-warp widths (3, 13), several values per lane (33, 100, 300),
// one warp over memory (1000, 4096); batch 1 and odd batches; both sets of
// hardtanh bounds.
TEST_F(CudaBiasHardtanhMishGroupNormTest, MatchesFloat64ReferenceForAnyGroupSize) {
  const std::vector<std::pair<int64_t, int64_t>> shapes = {
      // {channels, num_groups}
      {256, 8}, {8192, 256}, {12, 12}, {63, 9},  {1024, 2}, {39, 13},
      {26, 2},  {99, 3},     {400, 4}, {900, 3}, {3000, 3}, {4096, 1},
  };
  const std::vector<std::pair<float, float>> bounds = {{-1.0f, 1.0f}, {-0.5f, 2.0f}};
  uint64_t seed = 1;
  for (const auto& [channels, num_groups] : shapes) {
    for (int64_t batch : {1, 5}) {
      for (const auto& [low, high] : bounds) {
        for (bool normal : {false, true}) {
          const BiasHardtanhMishGroupNormParams p = Params(batch, channels, num_groups, low, high);
          SCOPED_TRACE(absl::StrCat("[", batch, ", ", channels, "] G=", num_groups, " hardtanh [",
                                    low, ", ", high, "]", normal ? " N(0,1.5^2)" : " U[0,1)"));
          const Data d = MakeData(p, normal, seed);
          seed += 5;
          const ErrorStats error = CompareToReference(Run(p, d), Reference(p, d));
          EXPECT_TRUE(error.Within(kFp32Tolerance)) << error;
        }
      }
    }
  }
}

TEST_F(CudaBiasHardtanhMishGroupNormTest, MatchesCpuBackendAtTheReferenceShape) {
  const BiasHardtanhMishGroupNormParams p = Params(1024, 8192, 256);
  const Data d = MakeData(p, /*normal=*/true, 77);
  // The CPU backend takes one bias: (y + gemm_bias) + bias folded into y.
  std::vector<float> cpu_input = d.input;
  for (int64_t i = 0; i < p.batch * p.channels; ++i) {
    cpu_input[i] = (cpu_input[i] + d.gemm_bias[i % p.channels]) + d.bias[i % p.channels];
  }
  cpu::BiasHardtanhMishGroupNormParams cpu_params;
  cpu_params.batch = p.batch;
  cpu_params.channels = p.channels;
  cpu_params.num_groups = p.num_groups;
  std::vector<float> expected(cpu_input.size());
  ASSERT_TRUE(cpu::BiasHardtanhMishGroupNorm(cpu_params, cpu_input.data(), nullptr,
                                             d.gn_weight.data(), d.gn_bias.data(), expected.data(),
                                             ThreadPool::Default())
                  .ok());
  const ErrorStats error =
      CompareToReference(Run(p, d), std::vector<double>(expected.begin(), expected.end()));
  EXPECT_TRUE(error.Within(kFp32Tolerance)) << error;
}

TEST_F(CudaBiasHardtanhMishGroupNormTest, RunsInPlace) {
  for (const auto& [channels, num_groups] :
       std::vector<std::pair<int64_t, int64_t>>{{256, 8}, {63, 9}, {3000, 3}}) {
    const BiasHardtanhMishGroupNormParams p = Params(3, channels, num_groups);
    SCOPED_TRACE(absl::StrCat("channels ", channels, " G=", num_groups));
    const Data d = MakeData(p, /*normal=*/true, 91);
    const ErrorStats error = CompareToReference(Run(p, d, /*in_place=*/true), Reference(p, d));
    EXPECT_TRUE(error.Within(kFp32Tolerance)) << error;
  }
}

// A group whose values all clamp to the same bound has zero variance: the
// output is exactly gn_bias (rsqrt(eps) times an exact zero).
// As PyTorch: hardtanh and Mish pass a NaN through, so its GroupNorm group
// is NaN; the other groups are untouched. Groups held in registers (32
// channels) and groups too large for them (2048, the three-pass kernel).
TEST_F(CudaBiasHardtanhMishGroupNormTest, NanInputMakesItsGroupNan) {
  for (const int64_t channels_per_group : {32, 2048}) {
    const BiasHardtanhMishGroupNormParams p = Params(2, 4096, 4096 / channels_per_group);
    Data d = MakeData(p, /*normal=*/true, 6);
    const int64_t bad = p.channels + channels_per_group + 3;  // row 1, its second group
    d.input[bad] = std::numeric_limits<float>::quiet_NaN();
    const std::vector<float> actual = Run(p, d);
    ASSERT_EQ(actual.size(), d.input.size());
    for (int64_t i = 0; i < p.batch * p.channels; ++i) {
      EXPECT_EQ(std::isnan(actual[i]), i / channels_per_group == bad / channels_per_group)
          << channels_per_group << " channels per group, at " << i;
    }
  }
}

TEST_F(CudaBiasHardtanhMishGroupNormTest, ConstantGroupGivesTheGroupNormBias) {
  const BiasHardtanhMishGroupNormParams p = Params(2, 64, 2);
  Data d = MakeData(p, /*normal=*/false, 5);
  for (float& v : d.input) v = 10.0f;
  const std::vector<float> actual = Run(p, d);
  ASSERT_EQ(actual.size(), d.input.size());
  for (int64_t i = 0; i < p.batch * p.channels; ++i) {
    EXPECT_EQ(actual[i], d.gn_bias[i % p.channels]) << "at " << i;
  }
}

TEST(CudaBiasHardtanhMishGroupNormValidationTest, RejectsInvalidParameters) {
  EXPECT_TRUE(ValidateBiasHardtanhMishGroupNormParams(Params(2, 64, 2)).ok());
  EXPECT_EQ(ValidateBiasHardtanhMishGroupNormParams(Params(2, 64, 3)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateBiasHardtanhMishGroupNormParams(Params(0, 64, 2)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateBiasHardtanhMishGroupNormParams(Params(2, 64, 2, 1.0f, -1.0f)).code(),
            absl::StatusCode::kInvalidArgument);
  BiasHardtanhMishGroupNormParams p = Params(2, 64, 2);
  p.eps = -1.0f;
  EXPECT_EQ(ValidateBiasHardtanhMishGroupNormParams(p).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(BiasHardtanhMishGroupNorm(Params(2, 64, 2), nullptr, nullptr, nullptr, nullptr, nullptr,
                                      nullptr, nullptr)
                .code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace fuseserve::cuda
