#include "kernels/cpu/bias_hardtanh_mish_group_norm.h"

#include <cmath>
#include <limits>
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

using cpu::BiasHardtanhMishGroupNormParams;
using testing::InputDistribution;

struct EpilogueCase {
  BiasHardtanhMishGroupNormParams params;
  InputDistribution distribution;
  float input_scale;  // spreads N(0,1) inputs past the hardtanh bounds
  bool in_place;
};

std::string CaseName(const ::testing::TestParamInfo<EpilogueCase>& info) {
  const EpilogueCase& c = info.param;
  const auto bound = [](double v) {
    return absl::StrCat(v < 0 ? "m" : "", static_cast<int>(std::abs(v) * 10));
  };
  return absl::StrCat("N", c.params.batch, "C", c.params.channels, "G", c.params.num_groups, "Min",
                      bound(c.params.hardtanh_min), "Max", bound(c.params.hardtanh_max), "Scale",
                      static_cast<int>(c.input_scale), c.in_place ? "_InPlace" : "", "_",
                      testing::DistributionName(c.distribution));
}

std::vector<EpilogueCase> AllCases() {
  const std::vector<BiasHardtanhMishGroupNormParams> shapes = {
      {1, 1, 1, -1.0, 1.0, 1e-5},      {4, 6, 3, -1.0, 1.0, 1e-5},     {3, 64, 8, -1.0, 1.0, 1e-5},
      {7, 96, 3, -0.5, 2.0, 1e-5},     {2, 256, 256, -1.0, 1.0, 1e-5},  // one channel per group
      {1, 8192, 256, -1.0, 1.0, 1e-5},                                  // the reference shape's row
      {33, 1024, 32, -3.0, 3.0, 1e-3},
  };
  std::vector<EpilogueCase> cases;
  for (const auto& p : shapes) {
    for (InputDistribution d : {InputDistribution::kUniform01, InputDistribution::kNormal}) {
      for (bool in_place : {false, true}) {
        cases.push_back({p, d, d == InputDistribution::kNormal ? 2.0f : 1.0f, in_place});
      }
    }
  }
  // Wide bounds: Mish's far negative tail and its x > 20 branch.
  cases.push_back({{5, 96, 12, -30.0, 30.0, 1e-5}, InputDistribution::kNormal, 12.0f, false});
  cases.push_back({{3, 64, 2, -40.0, 25.0, 1e-5}, InputDistribution::kNormal, 25.0f, true});
  return cases;
}

class BiasHardtanhMishGroupNormAccuracyTest : public ::testing::TestWithParam<EpilogueCase> {};

// SPEC.md §1.4 fp32 tolerance: rel L2 <= 5e-6, max abs <= 1e-4, random
// (not 1/0) biases and GroupNorm affine parameters.
TEST_P(BiasHardtanhMishGroupNormAccuracyTest, MatchesFloat64ReferenceWithinFp32Tolerance) {
  const EpilogueCase& c = GetParam();
  const BiasHardtanhMishGroupNormParams& p = c.params;
  auto input = testing::RandomInput(p.batch * p.channels, c.distribution, 61);
  for (float& v : input) v *= c.input_scale;
  const auto bias = testing::RandomAffineBias(p.channels, 62);
  const auto gn_weight = testing::RandomAffineWeight(p.channels, 63);
  const auto gn_bias = testing::RandomAffineBias(p.channels, 64);

  ThreadPool pool(3);
  std::vector<float> output = c.in_place ? input : std::vector<float>(input.size(), -7.0f);
  ASSERT_TRUE(cpu::BiasHardtanhMishGroupNorm(p, c.in_place ? output.data() : input.data(),
                                             bias.data(), gn_weight.data(), gn_bias.data(),
                                             output.data(), pool)
                  .ok());

  const auto expected = reference::BiasHardtanhMishGroupNorm(
      reference::BiasHardtanhMishGroupNormShape{p.batch, p.channels, p.num_groups, p.hardtanh_min,
                                                p.hardtanh_max, p.eps},
      input.data(), bias.data(), gn_weight.data(), gn_bias.data());
  const reference::ErrorStats stats = reference::CompareToReference(output, expected);
  EXPECT_TRUE(stats.Within(reference::kFp32Tolerance)) << stats;
}

INSTANTIATE_TEST_SUITE_P(Shapes, BiasHardtanhMishGroupNormAccuracyTest,
                         ::testing::ValuesIn(AllCases()), CaseName);

// The group normalization of three values a, b, c (no affine, eps ~ 0).
std::vector<double> Normalize3(double a, double b, double c) {
  const double mean = (a + b + c) / 3;
  const double var =
      ((a - mean) * (a - mean) + (b - mean) * (b - mean) + (c - mean) * (c - mean)) / 3;
  const double rstd = 1.0 / std::sqrt(var);
  return {(a - mean) * rstd, (b - mean) * rstd, (c - mean) * rstd};
}

TEST(BiasHardtanhMishGroupNormTest, AddsBiasAndClampsBeforeMish) {
  // x + bias = {-5, 0, 5}: with bounds [-1, 1] the group is
  // {mish(-1), mish(0), mish(1)}; with [-5, 5] it is {mish(-5), 0, mish(5)}.
  const std::vector<float> input = {-4.0f, 1.0f, 3.0f};
  const std::vector<float> bias = {-1.0f, -1.0f, 2.0f};
  std::vector<float> output(3);
  ThreadPool pool(1);
  ASSERT_TRUE(cpu::BiasHardtanhMishGroupNorm({1, 3, 1, -1.0, 1.0, 1e-12}, input.data(), bias.data(),
                                             nullptr, nullptr, output.data(), pool)
                  .ok());
  std::vector<double> expected = Normalize3(reference::Mish(-1.0), 0.0, reference::Mish(1.0));
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(output[i], expected[i], 1e-6) << i;

  ASSERT_TRUE(cpu::BiasHardtanhMishGroupNorm({1, 3, 1, -5.0, 5.0, 1e-12}, input.data(), bias.data(),
                                             nullptr, nullptr, output.data(), pool)
                  .ok());
  expected = Normalize3(reference::Mish(-5.0), 0.0, reference::Mish(5.0));
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(output[i], expected[i], 1e-6) << i;
}

TEST(BiasHardtanhMishGroupNormTest, EqualHardtanhBoundsGiveTheGroupNormBias) {
  const auto input = reference::RandomNormal(2 * 8, 71);
  const std::vector<float> gn_bias = {1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<float> output(input.size());
  ThreadPool pool(1);
  ASSERT_TRUE(cpu::BiasHardtanhMishGroupNorm({2, 8, 2, 0.5, 0.5, 1e-5}, input.data(), nullptr,
                                             nullptr, gn_bias.data(), output.data(), pool)
                  .ok());
  for (size_t i = 0; i < output.size(); ++i) EXPECT_FLOAT_EQ(output[i], gn_bias[i % 8]);
}

TEST(BiasHardtanhMishGroupNormTest, RejectsInvalidParameters) {
  const BiasHardtanhMishGroupNormParams valid{2, 6, 3, -1.0, 1.0, 1e-5};
  EXPECT_TRUE(cpu::ValidateBiasHardtanhMishGroupNormParams(valid).ok());
  struct Bad {
    BiasHardtanhMishGroupNormParams params;
    std::string message_part;
  };
  std::vector<Bad> bad;
  auto with = [&](auto mutate, std::string message_part) {
    BiasHardtanhMishGroupNormParams p = valid;
    mutate(p);
    bad.push_back({p, std::move(message_part)});
  };
  with([](auto& p) { p.batch = 0; }, "batch");
  with([](auto& p) { p.channels = 0; }, "channels");
  with([](auto& p) { p.num_groups = 0; }, "num_groups");
  with([](auto& p) { p.num_groups = 4; }, "must divide channels");
  with([](auto& p) { p.hardtanh_min = 2.0; }, "hardtanh_min <= hardtanh_max");
  with([](auto& p) { p.hardtanh_max = std::numeric_limits<double>::infinity(); },
       "hardtanh_min <= hardtanh_max");
  with([](auto& p) { p.eps = 0.0; }, "eps");
  with([](auto& p) { p.eps = std::numeric_limits<double>::quiet_NaN(); }, "eps");
  for (const Bad& b : bad) {
    const absl::Status status = cpu::ValidateBiasHardtanhMishGroupNormParams(b.params);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << b.message_part;
    EXPECT_NE(status.message().find(b.message_part), std::string::npos) << status;
  }
  std::vector<float> data(12);
  ThreadPool pool(1);
  EXPECT_EQ(
      cpu::BiasHardtanhMishGroupNorm(valid, nullptr, nullptr, nullptr, nullptr, data.data(), pool)
          .code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      cpu::BiasHardtanhMishGroupNorm(valid, data.data(), nullptr, nullptr, nullptr, nullptr, pool)
          .code(),
      absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace fuseserve
