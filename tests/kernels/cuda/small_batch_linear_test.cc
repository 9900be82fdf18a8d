#include "kernels/cuda/small_batch_linear.h"

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/resources.h"
#include "kernels/reference/error_metrics.h"
#include "kernels/reference/ops.h"
#include "kernels/reference/test_data.h"
#include "tests/kernels/cuda/device_copy.h"
#include "tests/kernels/cuda/gpu_test_fixtures.h"
#include "tests/kernels/cuda/linear_argument_cases.h"

namespace fuseserve::cuda {
namespace {

using reference::CompareToReference;
using reference::ErrorStats;
using reference::kFp32Tolerance;

class CudaSmallBatchLinearTest : public GpuStreamTest {
 protected:

  // y = x W^T on the GPU, into a NaN-poisoned output.
  std::vector<float> Run(int64_t batch, int64_t in_features, int64_t out_features,
                         const std::vector<float>& x, const std::vector<float>& weight) {
    DeviceBuffer dx = ToDevice(x);
    DeviceBuffer dw = ToDevice(weight);
    DeviceBuffer dy = PoisonedDevice(batch * out_features);
    FinishUploads();
    const absl::Status status = SmallBatchLinear(batch, in_features, out_features, dx.as<float>(),
                                                 dw.as<float>(), dy.as<float>(), stream_.get());
    EXPECT_TRUE(status.ok()) << status;
    EXPECT_TRUE(stream_.Synchronize().ok());
    return ToHost(dy, batch * out_features);
  }

};

// Every batch the kernel takes, with in_features below one warp's vector
// (4, 12), just past and not a multiple of one unrolled pass of a warp
// (516, 1000; a pass is 32 lanes x 4 float4 = 512 floats) and the
// reference 8192; out_features 1, odd, and not multiples of the 16 rows of
// a CTA (15, 17, 333) as well as a multiple (32). PyTorch-like weights
// U(-1/sqrt(F_in), 1/sqrt(F_in)); inputs U[0,1) and N(0,1) alternately.
TEST_F(CudaSmallBatchLinearTest, MatchesFloat64ReferenceAtFp32Tolerance) {
  uint64_t seed = 100;
  for (int64_t in_features : {4, 12, 516, 1000, 8192}) {
    for (int64_t out_features : {1, 15, 17, 32, 333}) {
      const float bound = 1.0f / std::sqrt(static_cast<float>(in_features));
      const std::vector<float> weight =
          reference::RandomUniform(out_features * in_features, seed++, -bound, bound);
      for (int64_t batch = 1; batch <= kSmallBatchLinearMaxBatch; ++batch) {
        const bool normal = batch % 2 == 0;
        const std::vector<float> x = normal ? reference::RandomNormal(batch * in_features, seed++)
                                            : reference::RandomUniform(batch * in_features, seed++);
        SCOPED_TRACE(absl::StrCat("N=", batch, " F_in=", in_features, " F_out=", out_features,
                                  normal ? " N(0,1)" : " U[0,1)"));
        const std::vector<double> expected = reference::Linear(
            reference::LinearShape{batch, in_features, out_features}, x.data(), weight.data(),
            static_cast<const float*>(nullptr));
        const ErrorStats error =
            CompareToReference(Run(batch, in_features, out_features, x, weight), expected);
        EXPECT_TRUE(error.Within(kFp32Tolerance)) << error;
      }
    }
  }
}

// Each output is one row of W against one row of x: a mix-up of rows,
// batches or the layout of y shows as a wrong small integer.
TEST_F(CudaSmallBatchLinearTest, ComputesRowMajorXTimesWeightTransposedExactly) {
  constexpr int64_t kBatch = 3;
  constexpr int64_t kIn = 8;
  constexpr int64_t kOut = 19;
  std::vector<float> x(kBatch * kIn, 0.0f);
  for (int64_t n = 0; n < kBatch; ++n) x[n * kIn + n] = 1.0f;  // x[n] = e_n
  std::vector<float> weight(kOut * kIn);
  for (int64_t o = 0; o < kOut; ++o) {
    for (int64_t i = 0; i < kIn; ++i) weight[o * kIn + i] = static_cast<float>(o * 100 + i);
  }
  const std::vector<float> y = Run(kBatch, kIn, kOut, x, weight);
  ASSERT_EQ(y.size(), static_cast<size_t>(kBatch * kOut));
  for (int64_t n = 0; n < kBatch; ++n) {
    for (int64_t o = 0; o < kOut; ++o) {
      EXPECT_EQ(y[n * kOut + o], static_cast<float>(o * 100 + n)) << "n " << n << " o " << o;
    }
  }
}

// Host pointers stand in for device ones: only their addresses are read.
const float* const kBuffer = kHostOperands;
using RejectedCase = LinearArgumentCase;

TEST(SmallBatchLinearSupportsTest, AcceptsBatchesUpToEightWithAlignedRowsOfFloat4) {
  const float* x = kBuffer;
  const float* w = kBuffer + 16;
  EXPECT_TRUE(SmallBatchLinearSupports(1, 4, 1, x, w));
  EXPECT_TRUE(SmallBatchLinearSupports(kSmallBatchLinearMaxBatch, 8192, 8192, x, w));
  EXPECT_TRUE(SmallBatchLinearSupports(5, 1000, 333, x, w));
  EXPECT_TRUE(SmallBatchLinearSupports(1, 4, 1, x + 4, w + 8));  // still 16-byte aligned
}

std::vector<RejectedCase> RejectedCases() {
  const float* x = kBuffer;
  const float* w = kBuffer + 16;
  return {
      {"batch 0", 0, 8, 8, x, w},
      {"batch 9", kSmallBatchLinearMaxBatch + 1, 8, 8, x, w},
      {"negative batch", -1, 8, 8, x, w},
      {"in_features 0", 1, 0, 8, x, w},
      {"in_features 6", 1, 6, 8, x, w},
      {"in_features 13", 1, 13, 8, x, w},
      {"in_features 2", 1, 2, 8, x, w},
      {"out_features 0", 1, 8, 0, x, w},
      {"in_features past int", 1, int64_t{1} << 32, 8, x, w},
      {"out_features past int", 1, 8, int64_t{1} << 31, x, w},
      {"x 4 bytes off", 1, 8, 8, x + 1, w},
      {"x 8 bytes off", 1, 8, 8, x + 2, w},
      {"weight 4 bytes off", 1, 8, 8, x, w + 1},
      {"weight 12 bytes off", 1, 8, 8, x, w + 3},
  };
}

TEST(SmallBatchLinearSupportsTest, RejectsOtherBatchesSizesAndMisalignedPointers) {
  for (const RejectedCase& c : RejectedCases()) {
    EXPECT_FALSE(
        SmallBatchLinearSupports(c.batch, c.in_features, c.out_features, c.x, c.weight))
        << c.name;
  }
}

TEST(SmallBatchLinearSupportsTest, RejectsNullPointers) {
  EXPECT_FALSE(SmallBatchLinearSupports(1, 8, 8, nullptr, kBuffer));
  EXPECT_FALSE(SmallBatchLinearSupports(1, 8, 8, kBuffer, nullptr));
}

// Rejected before anything is launched, so no device is needed.
TEST(SmallBatchLinearValidationTest, ReturnsInvalidArgumentForUnsupportedArguments) {
  float y[8] = {};
  for (const RejectedCase& c : RejectedCases()) {
    SCOPED_TRACE(c.name);
    // Guards the launch below: a supported case would run the kernel.
    ASSERT_FALSE(
        SmallBatchLinearSupports(c.batch, c.in_features, c.out_features, c.x, c.weight));
    EXPECT_EQ(
        SmallBatchLinear(c.batch, c.in_features, c.out_features, c.x, c.weight, y, nullptr).code(),
        absl::StatusCode::kInvalidArgument);
  }
  EXPECT_EQ(SmallBatchLinear(1, 8, 8, kBuffer, kBuffer + 16, nullptr, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SmallBatchLinearValidationTest, ReturnsInvalidArgumentForNullInputs) {
  float y[8] = {};
  // Guards the launches below: a supported case would read through null.
  ASSERT_FALSE(SmallBatchLinearSupports(1, 8, 8, nullptr, kBuffer));
  ASSERT_FALSE(SmallBatchLinearSupports(1, 8, 8, kBuffer, nullptr));
  EXPECT_EQ(SmallBatchLinear(1, 8, 8, nullptr, kBuffer, y, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SmallBatchLinear(1, 8, 8, kBuffer, nullptr, y, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace fuseserve::cuda
