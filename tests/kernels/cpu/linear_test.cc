#include "kernels/cpu/linear.h"

#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/thread_pool.h"
#include "gtest/gtest.h"
#include "kernels/reference/error_metrics.h"
#include "kernels/reference/ops.h"
#include "tests/kernels/cpu/kernel_test_util.h"

namespace fuseserve {
namespace {

using cpu::LinearParams;
using testing::InputDistribution;

struct LinearCase {
  LinearParams params;
  InputDistribution distribution;
};

std::string CaseName(const ::testing::TestParamInfo<LinearCase>& info) {
  const LinearParams& p = info.param.params;
  return absl::StrCat("N", p.batch, "In", p.in_features, "Out", p.out_features, "_",
                      testing::DistributionName(info.param.distribution));
}

std::vector<LinearCase> AllCases() {
  const std::vector<LinearParams> shapes = {
      {1, 1, 1},      {1, 7, 5},       {3, 17, 33},
      {13, 64, 64},   {1, 1024, 2048},  // batch 1: the output columns are split over threads
      {256, 512, 96},                   // tall: the rows are split
      {5, 2000, 3},
  };
  std::vector<LinearCase> cases;
  for (const LinearParams& p : shapes) {
    for (InputDistribution d : {InputDistribution::kUniform01, InputDistribution::kNormal}) {
      cases.push_back({p, d});
    }
  }
  return cases;
}

class LinearAccuracyTest : public ::testing::TestWithParam<LinearCase> {};

// SPEC.md §1.4 fp32 tolerance: rel L2 <= 5e-6, max abs <= 1e-4.
TEST_P(LinearAccuracyTest, MatchesFloat64ReferenceWithinFp32Tolerance) {
  const LinearParams& p = GetParam().params;
  const InputDistribution d = GetParam().distribution;
  const auto input = testing::RandomInput(p.batch * p.in_features, d, 51);
  // PyTorch's default Linear init scale, U(-1/sqrt(in), 1/sqrt(in)), keeps
  // the outputs O(1) as in a real model.
  const float bound = 1.0f / std::sqrt(static_cast<float>(p.in_features));
  const auto weight = reference::RandomUniform(p.out_features * p.in_features, 52, -bound, bound);
  const auto bias = reference::RandomUniform(p.out_features, 53, -bound, bound);
  std::vector<float> output(p.batch * p.out_features, -7.0f);

  ThreadPool pool(3);
  ASSERT_TRUE(cpu::Linear(p, input.data(), weight.data(), bias.data(), output.data(), pool).ok());

  const auto expected =
      reference::Linear(reference::LinearShape{p.batch, p.in_features, p.out_features},
                        input.data(), weight.data(), bias.data());
  const reference::ErrorStats stats = reference::CompareToReference(output, expected);
  EXPECT_TRUE(stats.Within(reference::kFp32Tolerance)) << stats;
}

INSTANTIATE_TEST_SUITE_P(Shapes, LinearAccuracyTest, ::testing::ValuesIn(AllCases()), CaseName);

TEST(LinearTest, ComputesXTimesWeightTransposedPlusBias) {
  // x = [[1, 2]], W = [[1, 0], [0, 1], [3, 4]], b = [10, 20, 30].
  const std::vector<float> x = {1, 2};
  const std::vector<float> w = {1, 0, 0, 1, 3, 4};
  const std::vector<float> b = {10, 20, 30};
  std::vector<float> y(3);
  ThreadPool pool(1);
  ASSERT_TRUE(cpu::Linear({1, 2, 3}, x.data(), w.data(), b.data(), y.data(), pool).ok());
  EXPECT_EQ(y, (std::vector<float>{11, 22, 41}));
  ASSERT_TRUE(cpu::Linear({1, 2, 3}, x.data(), w.data(), nullptr, y.data(), pool).ok());
  EXPECT_EQ(y, (std::vector<float>{1, 2, 11}));
}

TEST(LinearTest, RejectsInvalidSizesAndNullPointers) {
  for (const LinearParams& p : {LinearParams{0, 2, 2}, LinearParams{2, 0, 2},
                                LinearParams{2, 2, -1}, LinearParams{2, int64_t{1} << 31, 2}}) {
    EXPECT_EQ(cpu::ValidateLinearParams(p).code(), absl::StatusCode::kInvalidArgument)
        << p.batch << " " << p.in_features << " " << p.out_features;
  }
  const absl::Status status = cpu::ValidateLinearParams({2, 0, 2});
  EXPECT_NE(status.message().find("in_features"), std::string::npos) << status;

  std::vector<float> data(4, 1.0f);
  ThreadPool pool(1);
  EXPECT_EQ(cpu::Linear({2, 2, 2}, nullptr, data.data(), nullptr, data.data(), pool).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cpu::Linear({2, 2, 2}, data.data(), nullptr, nullptr, data.data(), pool).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cpu::Linear({2, 2, 2}, data.data(), data.data(), nullptr, nullptr, pool).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace fuseserve
