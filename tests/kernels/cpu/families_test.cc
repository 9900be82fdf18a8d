// The whole families composed from the CPU ops exactly as server/models runs
// them, against the float64 family references. (The `groupnorm` family is
// the group_norm op alone: group_norm_test.cc.)

#include "kernels/reference/families.h"

#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/thread_pool.h"
#include "gtest/gtest.h"
#include "kernels/cpu/bias_hardtanh_mish_group_norm.h"
#include "kernels/cpu/conv_transpose2d.h"
#include "kernels/cpu/group_norm.h"
#include "kernels/cpu/linear.h"
#include "kernels/reference/error_metrics.h"
#include "tests/kernels/cpu/kernel_test_util.h"

namespace fuseserve {
namespace {

using testing::InputDistribution;

// Weights scaled like PyTorch's default init (bound 1/sqrt(fan_in)), so that
// activations stay O(1) and GELU / Hardtanh see both of their regimes.
std::vector<float> ScaledWeights(int64_t count, InputDistribution d, uint64_t seed,
                                 int64_t fan_in) {
  std::vector<float> w = testing::RandomInput(count, d, seed);
  const float scale = 1.0f / std::sqrt(static_cast<float>(fan_in));
  for (float& v : w) v *= scale;
  return w;
}

struct ConvFamilyCase {
  reference::ConvTransposeGeluGroupNormShape shape;
  InputDistribution distribution;
};

std::string ConvCaseName(const ::testing::TestParamInfo<ConvFamilyCase>& info) {
  const auto& c = info.param.shape.conv;
  return absl::StrCat("N", c.batch, "Ci", c.in_channels, "Co", c.out_channels, "H", c.in_height,
                      "W", c.in_width, "K", c.kernel_size, "S", c.stride, "P", c.padding, "Op",
                      c.output_padding, "G", info.param.shape.num_groups, "_",
                      testing::DistributionName(info.param.distribution));
}

std::vector<ConvFamilyCase> ConvCases() {
  const std::vector<reference::ConvTransposeGeluGroupNormShape> shapes = {
      {{1, 3, 6, 5, 7, 3, 2, 1, 1}, 3, 1e-5},
      {{2, 16, 64, 12, 12, 3, 1, 0, 0}, 8, 1e-5},  // the reference shape, smaller
      {{3, 4, 8, 6, 5, 4, 3, 2, 2}, 2, 1e-5},
      {{2, 5, 4, 9, 4, 1, 1, 0, 0}, 4, 1e-3},
      {{1, 2, 6, 3, 3, 5, 2, 2, 1}, 1, 1e-5},
  };
  std::vector<ConvFamilyCase> cases;
  for (const auto& s : shapes) {
    for (InputDistribution d : {InputDistribution::kUniform01, InputDistribution::kNormal}) {
      cases.push_back({s, d});
    }
  }
  return cases;
}

class ConvTransposeGeluGroupNormFamilyTest : public ::testing::TestWithParam<ConvFamilyCase> {};

// SPEC.md §1.4 fp32 tolerance: rel L2 <= 5e-6, max abs <= 1e-4.
TEST_P(ConvTransposeGeluGroupNormFamilyTest, MatchesFloat64ReferenceWithinFp32Tolerance) {
  const auto& s = GetParam().shape;
  const auto& c = s.conv;
  const InputDistribution d = GetParam().distribution;
  const auto input =
      testing::RandomInput(c.batch * c.in_channels * c.in_height * c.in_width, d, 81);
  const auto weight = ScaledWeights(c.in_channels * c.out_channels * c.kernel_size * c.kernel_size,
                                    d, 82, c.in_channels * c.kernel_size * c.kernel_size);
  const auto bias = testing::RandomAffineBias(c.out_channels, 83);
  const auto gn_weight = testing::RandomAffineWeight(c.out_channels, 84);
  const auto gn_bias = testing::RandomAffineBias(c.out_channels, 85);
  std::vector<float> output(c.batch * c.out_channels * c.out_height() * c.out_width());

  ThreadPool pool(3);
  const cpu::ConvTranspose2dParams conv{c.batch,     c.in_channels, c.out_channels,
                                        c.in_height, c.in_width,    c.kernel_size,
                                        c.stride,    c.padding,     c.output_padding};
  ASSERT_TRUE(
      cpu::ConvTranspose2d(conv, input.data(), weight.data(), bias.data(), output.data(), pool)
          .ok());
  const cpu::GroupNormParams gn{c.batch,      c.out_channels, c.out_height() * c.out_width(),
                                s.num_groups, s.eps,          cpu::GroupNormPrologue::kGeluErf};
  ASSERT_TRUE(
      cpu::GroupNorm(gn, output.data(), gn_weight.data(), gn_bias.data(), output.data(), pool)
          .ok());

  const auto expected = reference::ConvTransposeGeluGroupNorm(
      s, input.data(), weight.data(), bias.data(), gn_weight.data(), gn_bias.data());
  const reference::ErrorStats stats = reference::CompareToReference(output, expected);
  EXPECT_TRUE(stats.Within(reference::kFp32Tolerance)) << stats;
}

INSTANTIATE_TEST_SUITE_P(Shapes, ConvTransposeGeluGroupNormFamilyTest,
                         ::testing::ValuesIn(ConvCases()), ConvCaseName);

struct GemmFamilyCase {
  reference::GemmBiasHardtanhMishGroupNormShape shape;
  InputDistribution distribution;
};

std::string GemmCaseName(const ::testing::TestParamInfo<GemmFamilyCase>& info) {
  const auto& s = info.param.shape;
  return absl::StrCat("N", s.batch, "In", s.in_features, "Out", s.out_features, "G", s.num_groups,
                      "_", testing::DistributionName(info.param.distribution));
}

std::vector<GemmFamilyCase> GemmCases() {
  const std::vector<reference::GemmBiasHardtanhMishGroupNormShape> shapes = {
      {1, 64, 32, 4, -1.0, 1.0, 1e-5},
      {5, 100, 96, 3, -0.5, 0.5, 1e-5},
      {64, 512, 512, 16, -1.0, 1.0, 1e-5},
      {2, 256, 8192, 256, -1.0, 1.0, 1e-5},  // the reference shape's G and F_out
      {3, 33, 6, 6, -2.0, 1.5, 1e-4},
  };
  std::vector<GemmFamilyCase> cases;
  for (const auto& s : shapes) {
    for (InputDistribution d : {InputDistribution::kUniform01, InputDistribution::kNormal}) {
      cases.push_back({s, d});
    }
  }
  return cases;
}

class GemmBiasHardtanhMishGroupNormFamilyTest : public ::testing::TestWithParam<GemmFamilyCase> {};

// SPEC.md §1.4 fp32 tolerance: rel L2 <= 5e-6, max abs <= 1e-4.
TEST_P(GemmBiasHardtanhMishGroupNormFamilyTest, MatchesFloat64ReferenceWithinFp32Tolerance) {
  const auto& s = GetParam().shape;
  const InputDistribution d = GetParam().distribution;
  const auto input = testing::RandomInput(s.batch * s.in_features, d, 91);
  const auto weight =
      ScaledWeights(s.out_features * s.in_features, InputDistribution::kNormal, 92, s.in_features);
  const auto gemm_bias = testing::RandomAffineBias(s.out_features, 93);
  const auto bias = testing::RandomAffineBias(s.out_features, 94);
  const auto gn_weight = testing::RandomAffineWeight(s.out_features, 95);
  const auto gn_bias = testing::RandomAffineBias(s.out_features, 96);
  std::vector<float> output(s.batch * s.out_features);

  ThreadPool pool(3);
  ASSERT_TRUE(cpu::Linear({s.batch, s.in_features, s.out_features}, input.data(), weight.data(),
                          gemm_bias.data(), output.data(), pool)
                  .ok());
  ASSERT_TRUE(cpu::BiasHardtanhMishGroupNorm(
                  {s.batch, s.out_features, s.num_groups, s.hardtanh_min, s.hardtanh_max, s.eps},
                  output.data(), bias.data(), gn_weight.data(), gn_bias.data(), output.data(), pool)
                  .ok());

  const auto expected =
      reference::GemmBiasHardtanhMishGroupNorm(s, input.data(), weight.data(), gemm_bias.data(),
                                               bias.data(), gn_weight.data(), gn_bias.data());
  const reference::ErrorStats stats = reference::CompareToReference(output, expected);
  EXPECT_TRUE(stats.Within(reference::kFp32Tolerance)) << stats;
}

INSTANTIATE_TEST_SUITE_P(Shapes, GemmBiasHardtanhMishGroupNormFamilyTest,
                         ::testing::ValuesIn(GemmCases()), GemmCaseName);

}  // namespace
}  // namespace fuseserve
