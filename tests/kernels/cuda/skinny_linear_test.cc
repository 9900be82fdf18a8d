#include "kernels/cuda/skinny_linear.h"

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <utility>
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

// Bytes past the workspace that a run must leave untouched.
constexpr size_t kGuardBytes = 256;

class CudaSkinnyLinearTest : public GpuStreamTest {
 protected:
  // y = x W^T on the GPU, into a NaN-poisoned output, with a workspace of
  // exactly SkinnyLinearWorkspaceBytes followed by a guard that must stay
  // untouched.
  std::vector<float> Run(int64_t batch, int64_t in_features, int64_t out_features,
                         const std::vector<float>& x, const std::vector<float>& weight) {
    DeviceBuffer dx = ToDevice(x);
    DeviceBuffer dw = ToDevice(weight);
    DeviceBuffer dy = PoisonedDevice(batch * out_features);
    const size_t workspace_bytes = SkinnyLinearWorkspaceBytes(batch, in_features, out_features);
    auto workspace = DeviceBuffer::Allocate(workspace_bytes + kGuardBytes);
    EXPECT_TRUE(workspace.ok()) << workspace.status();
    if (!workspace.ok()) return {};
    EXPECT_EQ(cudaMemset(workspace->data(), 0x5A, workspace->bytes()), cudaSuccess);
    FinishUploads();
    const absl::Status status =
        SkinnyLinear(batch, in_features, out_features, dx.as<float>(), dw.as<float>(),
                     dy.as<float>(), workspace->data(), stream_.get());
    EXPECT_TRUE(status.ok()) << status;
    EXPECT_TRUE(stream_.Synchronize().ok());
    std::vector<unsigned char> guard(kGuardBytes);
    EXPECT_EQ(
        cudaMemcpy(guard.data(), static_cast<unsigned char*>(workspace->data()) + workspace_bytes,
                   kGuardBytes, cudaMemcpyDeviceToHost),
        cudaSuccess);
    for (size_t i = 0; i < kGuardBytes; ++i) {
      EXPECT_EQ(guard[i], 0x5A) << "workspace guard byte " << i << " written";
    }
    return ToHost(dy, batch * out_features);
  }
};

// Batches at and around the 16-row tiles (1, 7, 15, 16, 17, 33, 47, 48);
// in_features of one stage (64), three stages in one slice (192), split in
// slices (1024, 8192); out_features 1, odd, and around the 128 rows of a
// CTA (127, 129). PyTorch-like weights U(-1/sqrt(F_in), 1/sqrt(F_in));
// inputs U[0,1) and N(0,1) alternately.
TEST_F(CudaSkinnyLinearTest, MatchesFloat64ReferenceAtFp32Tolerance) {
  uint64_t seed = 700;
  for (int64_t in_features : {64, 192, 1024, 8192}) {
    for (int64_t out_features : {1, 15, 127, 129}) {
      const float bound = 1.0f / std::sqrt(static_cast<float>(in_features));
      const std::vector<float> weight =
          reference::RandomUniform(out_features * in_features, seed++, -bound, bound);
      for (int64_t batch : {1, 7, 15, 16, 17, 33, 47, 48}) {
        const bool normal = batch % 2 == 0;
        const std::vector<float> x = normal ? reference::RandomNormal(batch * in_features, seed++)
                                            : reference::RandomUniform(batch * in_features, seed++);
        SCOPED_TRACE(absl::StrCat("N=", batch, " F_in=", in_features, " F_out=", out_features,
                                  " slices=", SkinnyLinearSlices(in_features, out_features),
                                  normal ? " N(0,1)" : " U[0,1)"));
        const std::vector<double> expected =
            reference::Linear(reference::LinearShape{batch, in_features, out_features}, x.data(),
                              weight.data(), static_cast<const float*>(nullptr));
        const ErrorStats error =
            CompareToReference(Run(batch, in_features, out_features, x, weight), expected);
        EXPECT_TRUE(error.Within(kFp32Tolerance)) << error;
      }
    }
  }
}

// The serving shape: 8192x8192 in 8 slices, at batches the server forms.
TEST_F(CudaSkinnyLinearTest, MatchesFloat64ReferenceAtTheReferenceShape) {
  constexpr int64_t kFeatures = 8192;
  const float bound = 1.0f / std::sqrt(static_cast<float>(kFeatures));
  const std::vector<float> weight =
      reference::RandomUniform(kFeatures * kFeatures, 800, -bound, bound);
  for (int64_t batch : {int64_t{13}, kSkinnyLinearMaxBatch}) {
    const std::vector<float> x = reference::RandomNormal(batch * kFeatures, 801 + batch);
    SCOPED_TRACE(absl::StrCat("N=", batch));
    const std::vector<double> expected =
        reference::Linear(reference::LinearShape{batch, kFeatures, kFeatures}, x.data(),
                          weight.data(), static_cast<const float*>(nullptr));
    const ErrorStats error =
        CompareToReference(Run(batch, kFeatures, kFeatures, x, weight), expected);
    EXPECT_TRUE(error.Within(kFp32Tolerance)) << error;
  }
}

// Each output is one row of W against one row of x: a mix-up of rows,
// batches, slices or the layout of y shows as a wrong small integer.
// in_features 256 runs in 4 slices, out_features 131 over two row blocks,
// batch 11 padded to 16. The values need at most 18 significant bits, so
// the 3xTF32 halves hold them exactly.
TEST_F(CudaSkinnyLinearTest, ComputesRowMajorXTimesWeightTransposedExactly) {
  constexpr int64_t kBatch = 11;
  constexpr int64_t kIn = 256;
  constexpr int64_t kOut = 131;
  ASSERT_GT(SkinnyLinearSlices(kIn, kOut), 1);
  std::vector<float> x(kBatch * kIn, 0.0f);
  for (int64_t n = 0; n < kBatch; ++n) x[n * kIn + n * 23] = 1.0f;  // x[n] = e_{23 n}
  std::vector<float> weight(kOut * kIn);
  for (int64_t o = 0; o < kOut; ++o) {
    for (int64_t i = 0; i < kIn; ++i) weight[o * kIn + i] = static_cast<float>(o * 1000 + i);
  }
  const std::vector<float> y = Run(kBatch, kIn, kOut, x, weight);
  ASSERT_EQ(y.size(), static_cast<size_t>(kBatch * kOut));
  for (int64_t n = 0; n < kBatch; ++n) {
    for (int64_t o = 0; o < kOut; ++o) {
      EXPECT_EQ(y[n * kOut + o], static_cast<float>(o * 1000 + n * 23)) << "n " << n << " o " << o;
    }
  }
}

// Non-finite inputs behave as in a float32 product: a NaN makes its row
// NaN; an Inf makes each output of its row an Inf of the sign of input x
// weight (not NaN from also meeting the weight's TF32 remainder, whose sign
// may differ). 256 in_features run in 4 slices, so the Inf also passes
// through the slice sums.
TEST_F(CudaSkinnyLinearTest, PropagatesNanAndInfLikeFloat32) {
  constexpr int64_t kBatch = 4;
  constexpr int64_t kIn = 256;
  constexpr int64_t kOut = 40;
  ASSERT_GT(SkinnyLinearSlices(kIn, kOut), 1);
  std::vector<float> weight = reference::RandomUniform(kOut * kIn, 950, -1.0f, 1.0f);
  for (float& w : weight) {
    if (w == 0.0f) w = 0.5f;  // the Inf's product must not be Inf * 0
  }
  std::vector<float> x = reference::RandomNormal(kBatch * kIn, 951);
  constexpr float kInf = std::numeric_limits<float>::infinity();
  x[0 * kIn + 17] = std::numeric_limits<float>::quiet_NaN();
  x[1 * kIn + 3] = kInf;
  x[2 * kIn + 200] = -kInf;
  const std::vector<float> y = Run(kBatch, kIn, kOut, x, weight);
  ASSERT_EQ(y.size(), static_cast<size_t>(kBatch * kOut));
  for (int64_t o = 0; o < kOut; ++o) {
    EXPECT_TRUE(std::isnan(y[0 * kOut + o])) << "NaN row, output " << o;
    EXPECT_EQ(y[1 * kOut + o], weight[o * kIn + 3] > 0 ? kInf : -kInf) << "+Inf row, output " << o;
    EXPECT_EQ(y[2 * kOut + o], weight[o * kIn + 200] > 0 ? -kInf : kInf)
        << "-Inf row, output " << o;
  }
  const std::vector<float> finite_row(x.begin() + 3 * kIn, x.end());
  const std::vector<double> expected =
      reference::Linear(reference::LinearShape{1, kIn, kOut}, finite_row.data(), weight.data(),
                        static_cast<const float*>(nullptr));
  const std::vector<float> last_row(y.begin() + 3 * kOut, y.end());
  const ErrorStats error = CompareToReference(last_row, expected);
  EXPECT_TRUE(error.Within(kFp32Tolerance)) << "finite row: " << error;
}

// The slices are summed in a fixed order: two runs agree bit for bit.
TEST_F(CudaSkinnyLinearTest, RepeatsBitwise) {
  constexpr int64_t kBatch = 24;
  constexpr int64_t kIn = 4096;
  constexpr int64_t kOut = 300;
  const std::vector<float> weight = reference::RandomNormal(kOut * kIn, 900);
  const std::vector<float> x = reference::RandomNormal(kBatch * kIn, 901);
  const std::vector<float> first = Run(kBatch, kIn, kOut, x, weight);
  const std::vector<float> second = Run(kBatch, kIn, kOut, x, weight);
  ASSERT_EQ(first.size(), second.size());
  EXPECT_EQ(std::memcmp(first.data(), second.data(), first.size() * sizeof(float)), 0);
}

TEST(SkinnyLinearSlicesTest, SplitsKIntoPowersOfTwoWithinTheBlockTarget) {
  EXPECT_EQ(SkinnyLinearSlices(8192, 8192), 8);  // 64 row blocks x 8 = 512 CTAs
  EXPECT_EQ(SkinnyLinearSlices(8192, 8193), 4);  // 65 row blocks: 8 would be 520 CTAs
  EXPECT_EQ(SkinnyLinearSlices(4096, 257), kSkinnyLinearMaxSlices);
  EXPECT_EQ(SkinnyLinearSlices(192, 1), 1);  // 3 stages: no power-of-two split
  EXPECT_EQ(SkinnyLinearSlices(384, 1), 2);  // 6 stages
  EXPECT_EQ(SkinnyLinearSlices(64, 1), 1);
  EXPECT_EQ(SkinnyLinearSlices(8192, 65536), 1);  // 512 row blocks already
  EXPECT_EQ(SkinnyLinearSlices(0, 1), 1);
}

TEST(SkinnyLinearSlicesTest, WorkspaceHoldsOnePartialPerSlice) {
  EXPECT_EQ(SkinnyLinearWorkspaceBytes(16, 8192, 8192), size_t{8} * 16 * 8192 * sizeof(float));
  EXPECT_EQ(SkinnyLinearWorkspaceBytes(64, 256, 131), size_t{4} * 64 * 131 * sizeof(float));
  EXPECT_EQ(SkinnyLinearWorkspaceBytes(5, 192, 10), 0u);  // one slice: straight into y
  EXPECT_EQ(SkinnyLinearWorkspaceBytes(0, 8192, 8192), 0u);
}

// Host pointers stand in for device ones: only their addresses are read.
const float* const kBuffer = kHostOperands;
using RejectedCase = LinearArgumentCase;

TEST(SkinnyLinearSupportsTest, AcceptsBatchesUpTo48WithWholeStagesOfAlignedRows) {
  const float* x = kBuffer;
  const float* w = kBuffer + 16;
  EXPECT_TRUE(SkinnyLinearSupports(1, 64, 1, x, w));
  EXPECT_TRUE(SkinnyLinearSupports(kSkinnyLinearMaxBatch, 8192, 8192, x, w));
  EXPECT_TRUE(SkinnyLinearSupports(33, 192, 333, x, w));
  EXPECT_TRUE(SkinnyLinearSupports(1, 64, 1, x + 4, w + 8));  // still 16-byte aligned
}

std::vector<RejectedCase> RejectedCases() {
  const float* x = kBuffer;
  const float* w = kBuffer + 16;
  return {
      {"batch 0", 0, 64, 8, x, w},
      {"batch 49", kSkinnyLinearMaxBatch + 1, 64, 8, x, w},
      {"negative batch", -1, 64, 8, x, w},
      {"in_features 0", 1, 0, 8, x, w},
      {"in_features 32", 1, 32, 8, x, w},
      {"in_features 100", 1, 100, 8, x, w},
      {"out_features 0", 1, 64, 0, x, w},
      {"in_features past int", 1, int64_t{1} << 32, 8, x, w},
      {"out_features past int", 1, 64, int64_t{1} << 31, x, w},
      {"one slice of 8192 columns", 1, 8192, 65536, x, w},
      {"x 4 bytes off", 1, 64, 8, x + 1, w},
      {"weight 8 bytes off", 1, 64, 8, x, w + 2},
      {"null x", 1, 64, 8, nullptr, w},
      {"null weight", 1, 64, 8, x, nullptr},
  };
}

TEST(SkinnyLinearSupportsTest, RejectsOtherBatchesSizesAndPointers) {
  for (const RejectedCase& c : RejectedCases()) {
    EXPECT_FALSE(SkinnyLinearSupports(c.batch, c.in_features, c.out_features, c.x, c.weight))
        << c.name;
  }
}

// Rejected before anything is launched, so no device is needed.
TEST(SkinnyLinearValidationTest, ReturnsInvalidArgumentForUnsupportedArguments) {
  float y[8] = {};
  alignas(16) float workspace[64] = {};
  for (const RejectedCase& c : RejectedCases()) {
    SCOPED_TRACE(c.name);
    // Guards the launch below: a supported case would run the kernel.
    ASSERT_FALSE(SkinnyLinearSupports(c.batch, c.in_features, c.out_features, c.x, c.weight));
    EXPECT_EQ(
        SkinnyLinear(c.batch, c.in_features, c.out_features, c.x, c.weight, y, workspace, nullptr)
            .code(),
        absl::StatusCode::kInvalidArgument);
  }
  EXPECT_EQ(SkinnyLinear(1, 64, 8, kBuffer, kBuffer + 16, nullptr, workspace, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SkinnyLinearValidationTest, ASplitCallNeedsAnAlignedWorkspaceApartFromY) {
  // 256 in_features over 131 rows run in 4 slices: a workspace is needed.
  ASSERT_GT(SkinnyLinearWorkspaceBytes(2, 256, 131), 0u);
  alignas(16) static float storage[4 * 2 * 131 + 2 * 131 + 8] = {};
  float* y = storage;
  EXPECT_EQ(SkinnyLinear(2, 256, 131, kBuffer, kBuffer, y, nullptr, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SkinnyLinear(2, 256, 131, kBuffer, kBuffer, y + 8, storage + 1, nullptr).code(),
            absl::StatusCode::kInvalidArgument);  // misaligned
  EXPECT_EQ(SkinnyLinear(2, 256, 131, kBuffer, kBuffer, y, storage + 4, nullptr).code(),
            absl::StatusCode::kInvalidArgument);  // overlaps y
}

}  // namespace
}  // namespace fuseserve::cuda
