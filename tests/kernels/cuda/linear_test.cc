#include "kernels/cuda/linear.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/thread_pool.h"
#include "gtest/gtest.h"
#include "kernels/cpu/linear.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/resources.h"
#include "tests/kernels/cuda/device_copy.h"
#include "kernels/reference/error_metrics.h"
#include "kernels/reference/ops.h"
#include "kernels/reference/test_data.h"

namespace fuseserve::cuda {
namespace {

using reference::CompareToReference;
using reference::ErrorStats;
using reference::Tolerance;

Tolerance ToleranceOf(MathMode mode) {
  return mode == MathMode::kFp32 ? reference::kFp32Tolerance : reference::kTf32Tolerance;
}

class CudaLinearTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (DeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
    auto stream = Stream::Create();
    ASSERT_TRUE(stream.ok()) << stream.status();
    stream_ = std::move(*stream);
    ASSERT_EQ(cublasCreate(&handle_), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(cublasSetStream(handle_, stream_.get()), CUBLAS_STATUS_SUCCESS);
  }
  void TearDown() override {
    if (handle_ != nullptr) cublasDestroy(handle_);
  }

  // y = x W^T on the GPU, into a NaN-poisoned output.
  std::vector<float> Run(const LinearParams& params, MathMode mode, const std::vector<float>& x,
                         const std::vector<float>& weight) {
    DeviceBuffer dx = ToDevice(x);
    DeviceBuffer dw = ToDevice(weight);
    auto dy = DeviceBuffer::Allocate(params.batch * params.out_features * sizeof(float));
    EXPECT_TRUE(dy.ok());
    if (!dy.ok()) return {};
    EXPECT_EQ(cudaMemset(dy->data(), 0xFF, dy->bytes()), cudaSuccess);
    const absl::Status status =
        Linear(handle_, params, mode, dx.as<float>(), dw.as<float>(), dy->as<float>());
    EXPECT_TRUE(status.ok()) << status;
    EXPECT_TRUE(stream_.Synchronize().ok());
    return ToHost(*dy, params.batch * params.out_features);
  }

  Stream stream_;
  cublasHandle_t handle_ = nullptr;
};

// Odd, non-square shapes in both modes against cpu::Linear (float32
// sgemm) and, where it is quick, the float64 reference. The handle is left
// in TF32 math mode on purpose: kFp32 must not pick TF32 up from it (with
// F_in = 8192 a TF32 product misses the fp32 tolerance by two orders).
TEST_F(CudaLinearTest, MatchesCpuAndFloat64ReferenceOnOddShapes) {
  ASSERT_EQ(cublasSetMathMode(handle_, CUBLAS_TF32_TENSOR_OP_MATH), CUBLAS_STATUS_SUCCESS);
  ThreadPool& pool = ThreadPool::Default();
  uint64_t seed = 1;
  for (int64_t batch : {1, 3, 65}) {
    for (int64_t in_features : {17, 64, 8192}) {
      for (int64_t out_features : {33, 8192}) {
        LinearParams params{batch, in_features, out_features};
        const float bound = 1.0f / std::sqrt(static_cast<float>(in_features));
        const std::vector<float> x = (seed % 2 == 0)
                                         ? reference::RandomNormal(batch * in_features, seed)
                                         : reference::RandomUniform(batch * in_features, seed);
        const std::vector<float> weight =
            reference::RandomUniform(out_features * in_features, seed + 1, -bound, bound);
        seed += 2;

        std::vector<float> cpu_y(batch * out_features);
        ASSERT_TRUE(cpu::Linear(cpu::LinearParams{batch, in_features, out_features}, x.data(),
                                weight.data(), nullptr, cpu_y.data(), pool)
                        .ok());
        const std::vector<double> cpu_expected(cpu_y.begin(), cpu_y.end());
        const bool small = batch * in_features * out_features <= (int64_t{1} << 26);
        std::vector<double> exact;
        if (small) {
          exact = reference::Linear(reference::LinearShape{batch, in_features, out_features},
                                    x.data(), weight.data(), static_cast<const float*>(nullptr));
        }
        for (MathMode mode : {MathMode::kFp32, MathMode::kTf32}) {
          SCOPED_TRACE(absl::StrCat("N=", batch, " F_in=", in_features, " F_out=", out_features,
                                    mode == MathMode::kFp32 ? " fp32" : " tf32"));
          const std::vector<float> actual = Run(params, mode, x, weight);
          const ErrorStats vs_cpu = CompareToReference(actual, cpu_expected);
          EXPECT_TRUE(vs_cpu.Within(ToleranceOf(mode))) << "vs cpu::Linear: " << vs_cpu;
          if (small) {
            const ErrorStats vs_exact = CompareToReference(actual, exact);
            EXPECT_TRUE(vs_exact.Within(ToleranceOf(mode))) << "vs float64: " << vs_exact;
          }
        }
      }
    }
  }
}

// A transposition mistake shows at once on a 2x3 by 3x4 product.
TEST_F(CudaLinearTest, ComputesRowMajorXTimesWeightTransposedExactly) {
  const LinearParams params{2, 3, 4};
  const std::vector<float> x = {1, 2, 3, 4, 5, 6};
  const std::vector<float> weight = {1, 0, 0, 0, 1, 0, 0, 0, 1, 1, 1, 1};
  const std::vector<float> expected = {1, 2, 3, 6, 4, 5, 6, 15};
  EXPECT_EQ(Run(params, MathMode::kFp32, x, weight), expected);
}

TEST(CudaLinearValidationTest, RejectsInvalidSizesAndNullPointers) {
  EXPECT_TRUE(ValidateLinearParams(LinearParams{1, 1, 1}).ok());
  EXPECT_EQ(ValidateLinearParams(LinearParams{0, 4, 4}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateLinearParams(LinearParams{4, 0, 4}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateLinearParams(LinearParams{4, 4, 0}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateLinearParams(LinearParams{int64_t{1} << 31, 4, 4}).code(),
            absl::StatusCode::kInvalidArgument);
  float dummy = 0.0f;
  EXPECT_EQ(Linear(nullptr, LinearParams{1, 1, 1}, MathMode::kFp32, &dummy, &dummy, &dummy).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace fuseserve::cuda
