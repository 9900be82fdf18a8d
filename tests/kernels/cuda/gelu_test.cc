#include "kernels/cuda/gelu.cuh"

#include <algorithm>
#include <cmath>

#include "gtest/gtest.h"

namespace fuseserve::cuda {
namespace {

double GeluFloat64(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }

// The fitted form on the host (libm's exp2f) against float64, on a grid of
// 2^20 + 1 points over [-12, 12] and at the fit's seams (t = 0 and the
// clamp at t = 4, x = +-4 sqrt(2)): within 1e-7 max(1, |x|), the erff
// form's own error with a correctly rounded erf. The device's exp2f
// (2 ulp) is checked through the wgmma kernel's epilogue on a GPU.
TEST(GeluErfFastTest, MatchesFloat64WithinFloat32Error) {
  constexpr int kPoints = 1 << 20;
  double worst = 0.0;
  float worst_x = 0.0f;
  const auto check = [&](float x) {
    const double error = std::abs(static_cast<double>(GeluErfFast(x)) - GeluFloat64(x)) /
                         std::max(1.0, std::abs(1.0 * x));
    if (error > worst) {
      worst = error;
      worst_x = x;
    }
  };
  for (int i = 0; i <= kPoints; ++i) check(-12.0f + 24.0f * static_cast<float>(i) / kPoints);
  for (const float x : {0.0f, -0.0f, 1e-30f, -1e-30f, 5.656854f, -5.656854f, 5.6568546f,
                        -5.6568546f, 30.0f, -30.0f, 1e6f, -1e6f}) {
    check(x);
  }
  EXPECT_LE(worst, 1e-7) << "at x = " << worst_x;
}

TEST(GeluErfFastTest, KeepsSignsZeroAndTheLinearTail) {
  EXPECT_EQ(GeluErfFast(0.0f), 0.0f);
  EXPECT_EQ(GeluErfFast(30.0f), 30.0f);
  EXPECT_EQ(GeluErfFast(1e6f), 1e6f);
  // Negative inputs give small negative outputs, never positive ones.
  for (const float x : {-0.5f, -1.0f, -3.0f, -5.0f, -8.0f}) {
    EXPECT_LT(GeluErfFast(x), 0.0f) << x;
    EXPECT_GT(GeluErfFast(x), x * 0.5f) << x;
  }
}

}  // namespace
}  // namespace fuseserve::cuda
