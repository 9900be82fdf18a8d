#include "kernels/cpu/group_norm.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/thread_pool.h"
#include "gtest/gtest.h"
#include "kernels/reference/error_metrics.h"
#include "kernels/reference/ops.h"
#include "tests/kernels/cpu/kernel_test_util.h"

namespace fuseserve {
namespace {

using cpu::GroupNormPrologue;
using testing::InputDistribution;

struct GroupNormCase {
  Shape shape;  // [N, C, *]
  int64_t num_groups;
  GroupNormPrologue prologue;
  InputDistribution distribution;
  bool in_place;
};

std::string CaseName(const ::testing::TestParamInfo<GroupNormCase>& info) {
  const GroupNormCase& c = info.param;
  return absl::StrCat("Shape", absl::StrJoin(c.shape, "x"), "G", c.num_groups,
                      c.prologue == GroupNormPrologue::kGeluErf ? "_Gelu" : "",
                      c.in_place ? "_InPlace" : "", "_", testing::DistributionName(c.distribution));
}

std::vector<GroupNormCase> AllCases() {
  const std::vector<std::pair<Shape, int64_t>> shapes = {
      {{1, 1}, 1},           // one element per group
      {{4, 6}, 3},           // rank 2, (C=6, G=3)
      {{3, 64}, 8},          // rank 2, (C=64, G=8)
      {{2, 6, 7}, 3},        // rank 3
      {{1, 6, 5, 3}, 6},     // rank 4, G = C
      {{2, 64, 5, 7}, 8},    // rank 4, (C=64, G=8)
      {{3, 4, 9, 11}, 1},    // rank 4, G = 1
      {{2, 6, 3, 4, 5}, 2},  // rank 5
      {{1, 8, 96, 96}, 2},   // large groups, split into chunks
  };
  std::vector<GroupNormCase> cases;
  for (const auto& [shape, groups] : shapes) {
    for (GroupNormPrologue prologue : {GroupNormPrologue::kNone, GroupNormPrologue::kGeluErf}) {
      for (InputDistribution d : {InputDistribution::kUniform01, InputDistribution::kNormal}) {
        for (bool in_place : {false, true}) {
          cases.push_back({shape, groups, prologue, d, in_place});
        }
      }
    }
  }
  return cases;
}

// The float64 reference of the op: the prologue (if any), then GroupNorm.
std::vector<double> Reference(const cpu::GroupNormParams& p, const std::vector<float>& input,
                              const std::vector<float>& weight, const std::vector<float>& bias) {
  const reference::GroupNormShape shape{p.batch, p.channels, p.spatial_size, p.num_groups, p.eps};
  if (p.prologue == GroupNormPrologue::kNone) {
    return reference::GroupNorm(shape, input.data(), weight.data(), bias.data());
  }
  const std::vector<double> activated =
      reference::Gelu(input.data(), static_cast<int64_t>(input.size()));
  const std::vector<double> w(weight.begin(), weight.end());
  const std::vector<double> b(bias.begin(), bias.end());
  return reference::GroupNorm(shape, activated.data(), w.data(), b.data());
}

class GroupNormAccuracyTest : public ::testing::TestWithParam<GroupNormCase> {};

// SPEC.md §1.4 fp32 tolerance: rel L2 <= 5e-6 and max abs <= 1e-4 against a
// float64 reference on the same float32 inputs, random affine parameters.
TEST_P(GroupNormAccuracyTest, MatchesFloat64ReferenceWithinFp32Tolerance) {
  const GroupNormCase& c = GetParam();
  auto params = cpu::GroupNormParamsForShape(c.shape, c.num_groups, 1e-5);
  ASSERT_TRUE(params.ok()) << params.status();
  params->prologue = c.prologue;
  const int64_t count = NumElements(c.shape);
  const auto input = testing::RandomInput(count, c.distribution, 11);
  const auto weight = testing::RandomAffineWeight(params->channels, 12);
  const auto bias = testing::RandomAffineBias(params->channels, 13);

  ThreadPool pool(3);
  std::vector<float> output = c.in_place ? input : std::vector<float>(count, -7.0f);
  ASSERT_TRUE(cpu::GroupNorm(*params, c.in_place ? output.data() : input.data(), weight.data(),
                             bias.data(), output.data(), pool)
                  .ok());

  const reference::ErrorStats stats =
      reference::CompareToReference(output, Reference(*params, input, weight, bias));
  EXPECT_TRUE(stats.Within(reference::kFp32Tolerance)) << stats;
}

INSTANTIATE_TEST_SUITE_P(Shapes, GroupNormAccuracyTest, ::testing::ValuesIn(AllCases()), CaseName);

// The reference groupnorm's group is 8 x 512 x 512 = 2 Mi elements. A large
// mean relative to the spread is where naive float sums of x and x^2 lose
// every digit of the variance.
TEST(GroupNormTest, KeepsFp32AccuracyOnTwoMillionElementGroupWithLargeMean) {
  const Shape shape = {1, 8, 512, 512};
  const int64_t count = NumElements(shape);
  const auto input = reference::RandomNormal(count, 21, 300.0f, 0.5f);
  const auto weight = testing::RandomAffineWeight(8, 22);
  const auto bias = testing::RandomAffineBias(8, 23);
  auto params = cpu::GroupNormParamsForShape(shape, 1, 1e-5);
  ASSERT_TRUE(params.ok());
  std::vector<float> output(count);
  ThreadPool pool(3);
  ASSERT_TRUE(
      cpu::GroupNorm(*params, input.data(), weight.data(), bias.data(), output.data(), pool).ok());
  const auto expected = reference::GroupNorm(reference::GroupNormShape{1, 8, 512 * 512, 1, 1e-5},
                                             input.data(), weight.data(), bias.data());
  const reference::ErrorStats stats = reference::CompareToReference(output, expected);
  EXPECT_TRUE(stats.Within(reference::kFp32Tolerance)) << stats;
}

TEST(GroupNormTest, ConstantGroupNormalizesToBias) {
  const std::vector<float> input(2 * 4 * 3, 2.5f);
  const std::vector<float> weight = {2.0f, 3.0f, 4.0f, 5.0f};
  const std::vector<float> bias = {0.1f, 0.2f, 0.3f, 0.4f};
  std::vector<float> output(input.size());
  ThreadPool pool(2);
  cpu::GroupNormParams p{2, 4, 3, 2, 1e-5, GroupNormPrologue::kNone};
  ASSERT_TRUE(
      cpu::GroupNorm(p, input.data(), weight.data(), bias.data(), output.data(), pool).ok());
  for (size_t i = 0; i < output.size(); ++i) {
    EXPECT_FLOAT_EQ(output[i], bias[(i / 3) % 4]) << i;
  }
}

// PyTorch: an Inf or NaN anywhere in a group makes the whole group NaN (its
// variance is NaN); the other groups are untouched.
TEST(GroupNormTest, NonFiniteValueMakesItsWholeGroupNan) {
  for (const float bad : {std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN()}) {
    SCOPED_TRACE(bad);
    std::vector<float> input = reference::RandomNormal(2 * 4 * 9, 41);
    input[9 * 4 + 5] = bad;  // sample 1, channel 0: group 2 of 4
    std::vector<float> output(input.size());
    ThreadPool pool(2);
    cpu::GroupNormParams p{2, 4, 9, 2, 1e-5, GroupNormPrologue::kNone};
    ASSERT_TRUE(cpu::GroupNorm(p, input.data(), nullptr, nullptr, output.data(), pool).ok());
    for (size_t i = 0; i < output.size(); ++i) {
      const bool in_bad_group = i / 18 == 2;
      EXPECT_EQ(std::isnan(output[i]), in_bad_group) << i << ": " << output[i];
    }
  }
}

TEST(GroupNormTest, NullAffineMeansIdentityAffine) {
  const auto input = reference::RandomNormal(3 * 6 * 10, 31);
  std::vector<float> output(input.size());
  ThreadPool pool(2);
  cpu::GroupNormParams p{3, 6, 10, 3, 1e-5, GroupNormPrologue::kNone};
  ASSERT_TRUE(cpu::GroupNorm(p, input.data(), nullptr, nullptr, output.data(), pool).ok());
  const auto expected = reference::GroupNorm<float>(reference::GroupNormShape{3, 6, 10, 3, 1e-5},
                                                    input.data(), nullptr, nullptr);
  EXPECT_TRUE(reference::CompareToReference(output, expected).Within(reference::kFp32Tolerance));
}

TEST(GroupNormTest, EpsEntersUnderTheSquareRoot) {
  // Group {0, 2}: mean 1, biased variance 1; with eps 3, rstd = 1/2.
  const std::vector<float> input = {0.0f, 2.0f};
  std::vector<float> output(2);
  ThreadPool pool(1);
  cpu::GroupNormParams p{1, 2, 1, 1, 3.0, GroupNormPrologue::kNone};
  ASSERT_TRUE(cpu::GroupNorm(p, input.data(), nullptr, nullptr, output.data(), pool).ok());
  EXPECT_FLOAT_EQ(output[0], -0.5f);
  EXPECT_FLOAT_EQ(output[1], 0.5f);
}

TEST(GroupNormTest, ParamsForShapeFlattensTrailingDimensions) {
  auto params = cpu::GroupNormParamsForShape({2, 6, 3, 4, 5}, 3, 1e-3);
  ASSERT_TRUE(params.ok());
  EXPECT_EQ(params->batch, 2);
  EXPECT_EQ(params->channels, 6);
  EXPECT_EQ(params->spatial_size, 60);
  EXPECT_EQ(params->num_groups, 3);
  EXPECT_EQ(params->eps, 1e-3);
  auto rank2 = cpu::GroupNormParamsForShape({5, 4}, 2, 1e-5);
  ASSERT_TRUE(rank2.ok());
  EXPECT_EQ(rank2->spatial_size, 1);
}

TEST(GroupNormTest, ParamsForShapeRejectsRankBelowTwo) {
  const auto status = cpu::GroupNormParamsForShape({8}, 2, 1e-5).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("rank >= 2"), std::string::npos) << status;
}

TEST(GroupNormTest, RejectsInvalidParameters) {
  const cpu::GroupNormParams valid{2, 6, 4, 3, 1e-5, GroupNormPrologue::kNone};
  EXPECT_TRUE(cpu::ValidateGroupNormParams(valid).ok());
  struct Bad {
    cpu::GroupNormParams params;
    std::string message_part;
  };
  std::vector<Bad> bad;
  auto with = [&](auto mutate, std::string message_part) {
    cpu::GroupNormParams p = valid;
    mutate(p);
    bad.push_back({p, std::move(message_part)});
  };
  with([](auto& p) { p.batch = 0; }, "batch");
  with([](auto& p) { p.channels = 0; }, "channels");
  with([](auto& p) { p.spatial_size = 0; }, "spatial_size");
  with([](auto& p) { p.num_groups = 0; }, "num_groups");
  with([](auto& p) { p.num_groups = 4; }, "must divide channels");
  with([](auto& p) { p.eps = 0; }, "eps");
  with([](auto& p) { p.eps = -1e-5; }, "eps");
  with([](auto& p) { p.eps = std::numeric_limits<double>::quiet_NaN(); }, "eps");
  with([](auto& p) { p.eps = std::numeric_limits<double>::infinity(); }, "eps");
  with([](auto& p) { p.spatial_size = int64_t{1} << 62; }, "too many elements");
  for (const Bad& b : bad) {
    const absl::Status status = cpu::ValidateGroupNormParams(b.params);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << b.message_part;
    EXPECT_NE(status.message().find(b.message_part), std::string::npos) << status;
  }
}

TEST(GroupNormTest, RejectsNullInputOrOutput) {
  std::vector<float> data(6, 1.0f);
  ThreadPool pool(1);
  const cpu::GroupNormParams p{1, 6, 1, 3, 1e-5, GroupNormPrologue::kNone};
  EXPECT_EQ(cpu::GroupNorm(p, nullptr, nullptr, nullptr, data.data(), pool).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cpu::GroupNorm(p, data.data(), nullptr, nullptr, nullptr, pool).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace fuseserve
