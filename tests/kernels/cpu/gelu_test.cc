#include "kernels/cpu/gelu.h"

#include <vector>

#include "common/thread_pool.h"
#include "gtest/gtest.h"
#include "kernels/reference/error_metrics.h"
#include "kernels/reference/ops.h"
#include "kernels/reference/test_data.h"

namespace fuseserve {
namespace {

// SPEC.md §1.4 fp32 tolerance: rel L2 <= 5e-6, max abs <= 1e-4.
TEST(GeluTest, MatchesFloat64ReferenceWithinFp32Tolerance) {
  for (const auto& input :
       {reference::RandomUniform(100003, 41), reference::RandomNormal(100003, 42, 0.0f, 3.0f),
        reference::RandomUniform(4097, 43, -12.0f, 12.0f)}) {
    std::vector<float> output(input.size());
    ThreadPool pool(3);
    ASSERT_TRUE(
        cpu::Gelu(input.data(), static_cast<int64_t>(input.size()), output.data(), pool).ok());
    const reference::ErrorStats stats = reference::CompareToReference(
        output, reference::Gelu(input.data(), static_cast<int64_t>(input.size())));
    EXPECT_TRUE(stats.Within(reference::kFp32Tolerance)) << stats;
  }
}

TEST(GeluTest, IsTheExactErfFormNotTheTanhApproximation) {
  // torch.nn.functional.gelu(torch.tensor(1.0, dtype=torch.float64)) and
  // (-3.0): the tanh approximation gives 0.8411919906 and -0.0036373920.
  EXPECT_NEAR(cpu::GeluErf(1.0), 0.84134474606854304, 1e-15);
  EXPECT_NEAR(cpu::GeluErf(-3.0), -0.0040496940948903104, 1e-15);
  EXPECT_EQ(cpu::GeluErf(0.0), 0.0);
}

TEST(GeluTest, WorksInPlace) {
  std::vector<float> data = {-1.0f, 0.0f, 2.0f};
  ThreadPool pool(1);
  ASSERT_TRUE(cpu::Gelu(data.data(), 3, data.data(), pool).ok());
  EXPECT_FLOAT_EQ(data[0], -0.15865525393145707f);
  EXPECT_FLOAT_EQ(data[1], 0.0f);
  EXPECT_FLOAT_EQ(data[2], 1.9544997361036416f);
}

TEST(GeluTest, RejectsNegativeCountAndNullPointers) {
  std::vector<float> data(4);
  ThreadPool pool(1);
  EXPECT_EQ(cpu::Gelu(data.data(), -1, data.data(), pool).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cpu::Gelu(nullptr, 4, data.data(), pool).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cpu::Gelu(data.data(), 4, nullptr, pool).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(cpu::Gelu(nullptr, 0, nullptr, pool).ok());
}

}  // namespace
}  // namespace fuseserve
