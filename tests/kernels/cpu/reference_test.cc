// Anchors the float64 references (kernels/reference) to PyTorch itself: the
// expected numbers below are PyTorch float64 results
// (torch.nn.functional.conv_transpose2d / gelu / linear / hardtanh / mish /
// group_norm) on the same deterministic inputs, x_i = scale * sin(a*i + b).
// Also covers the error metrics and the test data generators.

#include <cmath>
#include <limits>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/reference/error_metrics.h"
#include "kernels/reference/families.h"
#include "kernels/reference/ops.h"
#include "kernels/reference/test_data.h"

namespace fuseserve {
namespace reference {
namespace {

std::vector<double> Pattern(int64_t count, double a, double b, double scale = 1.0,
                            double offset = 0.0) {
  std::vector<double> values(count);
  for (int64_t i = 0; i < count; ++i) values[i] = scale * std::sin(a * i + b) + offset;
  return values;
}

// sum_i y_i * cos(0.13 i): sensitive to every element and to its position.
double Checksum(const std::vector<double>& y) {
  double sum = 0;
  for (size_t i = 0; i < y.size(); ++i) sum += y[i] * std::cos(0.13 * static_cast<double>(i));
  return sum;
}

constexpr double kGoldenTolerance = 1e-12;

ConvTranspose2dShape GoldenConvShape() {
  // N=2, C_in=3, C_out=4, 3x5 input, k=3, stride 2, padding 1, output_padding 1.
  return ConvTranspose2dShape{2, 3, 4, 3, 5, 3, 2, 1, 1};
}

TEST(ReferenceTest, ConvTranspose2dMatchesPyTorch) {
  const ConvTranspose2dShape shape = GoldenConvShape();
  ASSERT_EQ(shape.out_height(), 6);
  ASSERT_EQ(shape.out_width(), 10);
  const auto x = Pattern(2 * 3 * 3 * 5, 0.7, 0.3);
  const auto w = Pattern(3 * 4 * 3 * 3, 0.37, 1.1, 0.5);
  const auto b = Pattern(4, 1.3, 0.2, 0.1);
  const auto y = ConvTranspose2d(shape, x.data(), w.data(), b.data());
  ASSERT_EQ(y.size(), 480u);
  EXPECT_NEAR(Checksum(y), 19.547258482300798, kGoldenTolerance);
  EXPECT_NEAR(y[0], -0.066274430608542281, kGoldenTolerance);
  EXPECT_NEAR(y[7], 0.80087589447020668, kGoldenTolerance);
  EXPECT_NEAR(y[100], -0.22791564016053334, kGoldenTolerance);
  EXPECT_NEAR(y[479], -0.062556084537068929, kGoldenTolerance);
}

TEST(ReferenceTest, ConvTransposeGeluGroupNormMatchesPyTorch) {
  const auto x = Pattern(2 * 3 * 3 * 5, 0.7, 0.3);
  const auto w = Pattern(3 * 4 * 3 * 3, 0.37, 1.1, 0.5);
  const auto b = Pattern(4, 1.3, 0.2, 0.1);
  const auto gn_w = Pattern(4, 0.9, 0.5, 0.5, 1.0);
  const auto gn_b = Pattern(4, 1.7, 0.1, 0.3);
  const auto y =
      ConvTransposeGeluGroupNorm(ConvTransposeGeluGroupNormShape{GoldenConvShape(), 2, 1e-5},
                                 x.data(), w.data(), b.data(), gn_w.data(), gn_b.data());
  ASSERT_EQ(y.size(), 480u);
  EXPECT_NEAR(Checksum(y), 14.44679161334205, kGoldenTolerance);
  EXPECT_NEAR(y[0], -0.63726162666063579, kGoldenTolerance);
  EXPECT_NEAR(y[33], 0.25518338603625201, kGoldenTolerance);
  EXPECT_NEAR(y[200], -0.40909457285293466, kGoldenTolerance);
  EXPECT_NEAR(y[479], -0.68117565701170713, kGoldenTolerance);
}

TEST(ReferenceTest, GemmBiasHardtanhMishGroupNormMatchesPyTorch) {
  // N=3, F_in=5, F_out=6, G=3, Hardtanh(-0.5, 0.8): some values clamp.
  const auto x = Pattern(3 * 5, 0.45, 0.6, 0.6);
  const auto w = Pattern(6 * 5, 0.29, 0.9, 0.5);
  const auto gemm_b = Pattern(6, 0.8, 0.4, 0.2);
  const auto b = Pattern(6, 1.1, 0.7, 0.3);
  const auto gn_w = Pattern(6, 0.6, 0.2, 0.5, 1.0);
  const auto gn_b = Pattern(6, 1.9, 0.3, 0.4);
  const auto y = GemmBiasHardtanhMishGroupNorm(
      GemmBiasHardtanhMishGroupNormShape{3, 5, 6, 3, -0.5, 0.8, 1e-5}, x.data(), w.data(),
      gemm_b.data(), b.data(), gn_w.data(), gn_b.data());
  ASSERT_EQ(y.size(), 18u);
  EXPECT_NEAR(Checksum(y), 0.4701296336065719, kGoldenTolerance);
  EXPECT_NEAR(y[0], 1.2155930944240654, kGoldenTolerance);
  EXPECT_NEAR(y[5], -1.1152455636176153, kGoldenTolerance);
  EXPECT_NEAR(y[11], 0.79514260476115184, kGoldenTolerance);
  EXPECT_NEAR(y[17], -1.0145496347363234, kGoldenTolerance);
}

TEST(ReferenceTest, GroupNormRank4MatchesPyTorch) {
  // [2, 6, 2, 3], G=3.
  const auto x = Pattern(2 * 6 * 2 * 3, 0.53, 0.8, 3.0, 1.5);
  const auto gn_w = Pattern(6, 0.77, 0.1, 0.5, 1.0);
  const auto gn_b = Pattern(6, 1.23, 0.4, 0.3);
  const auto y = GroupNorm(GroupNormShape{2, 6, 6, 3, 1e-5}, x.data(), gn_w.data(), gn_b.data());
  ASSERT_EQ(y.size(), 72u);
  EXPECT_NEAR(Checksum(y), 7.3695098040510691, kGoldenTolerance);
  EXPECT_NEAR(y[0], 1.1749215819865342, kGoldenTolerance);
  EXPECT_NEAR(y[13], 2.1625091237353167, kGoldenTolerance);
  EXPECT_NEAR(y[40], 0.090625479435170367, kGoldenTolerance);
  EXPECT_NEAR(y[71], 0.67154887186903478, kGoldenTolerance);
}

TEST(ReferenceTest, FloatAndDoubleInputsGiveTheSameResult) {
  const std::vector<float> xf = RandomNormal(2 * 6 * 4, 101);
  const std::vector<double> xd(xf.begin(), xf.end());
  const GroupNormShape shape{2, 6, 4, 3, 1e-5};
  EXPECT_EQ(GroupNorm<float>(shape, xf.data(), nullptr, nullptr),
            GroupNorm<double>(shape, xd.data(), nullptr, nullptr));
}

TEST(ErrorMetricsTest, ComputesRelativeL2AndMaxAbs) {
  const std::vector<float> actual = {1.0f, 2.0f, 2.0f, 4.0f};
  const std::vector<double> expected = {1.0, 2.0, 3.0, 4.0};
  const ErrorStats stats = CompareToReference(actual, expected);
  EXPECT_DOUBLE_EQ(stats.max_abs, 1.0);
  EXPECT_EQ(stats.worst_index, 2);
  EXPECT_DOUBLE_EQ(stats.rel_l2, 1.0 / std::sqrt(30.0));
  EXPECT_FALSE(stats.Within(kTf32Tolerance));
  EXPECT_NE(stats.ToString().find("at [2]"), std::string::npos) << stats;
}

TEST(ErrorMetricsTest, ExactMatchIsZeroError) {
  const ErrorStats stats =
      CompareToReference(std::vector<float>{0.5f, -1.0f}, std::vector<double>{0.5, -1.0});
  EXPECT_EQ(stats.rel_l2, 0.0);
  EXPECT_EQ(stats.max_abs, 0.0);
  EXPECT_TRUE(stats.Within(kFp32Tolerance));
}

TEST(ErrorMetricsTest, NanSizeMismatchAndNonzeroOverZeroReferenceFail) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_FALSE(CompareToReference(std::vector<float>{1.0f, nan}, std::vector<double>{1.0, 1.0})
                   .Within(kTf32Tolerance));
  EXPECT_FALSE(CompareToReference(std::vector<float>{nan, 1.0f}, std::vector<double>{1.0, 1.0})
                   .Within(kTf32Tolerance));
  EXPECT_FALSE(CompareToReference(std::vector<float>{1.0f}, std::vector<double>{1.0, 1.0})
                   .Within(kTf32Tolerance));
  EXPECT_TRUE(
      std::isinf(CompareToReference(std::vector<float>{1e-9f}, std::vector<double>{0.0}).rel_l2));
}

TEST(TestDataTest, IsDeterministicAndHasTheRequestedMoments) {
  EXPECT_EQ(RandomUniform(1000, 7), RandomUniform(1000, 7));
  EXPECT_NE(RandomUniform(1000, 7), RandomUniform(1000, 8));
  const auto u = RandomUniform(100000, 9, 2.0f, 3.0f);
  const auto n = RandomNormal(100000, 10, 1.0f, 2.0f);
  double u_sum = 0, n_sum = 0, n_sq = 0;
  for (float v : u) {
    ASSERT_GE(v, 2.0f);
    ASSERT_LT(v, 3.0f);
    u_sum += v;
  }
  for (float v : n) {
    n_sum += v;
    n_sq += (v - 1.0) * (v - 1.0);
  }
  EXPECT_NEAR(u_sum / u.size(), 2.5, 0.01);
  EXPECT_NEAR(n_sum / n.size(), 1.0, 0.03);
  EXPECT_NEAR(std::sqrt(n_sq / n.size()), 2.0, 0.03);
}

}  // namespace
}  // namespace reference
}  // namespace fuseserve
