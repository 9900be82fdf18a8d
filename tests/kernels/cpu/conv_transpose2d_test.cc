#include "kernels/cpu/conv_transpose2d.h"

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

using cpu::ConvTranspose2dParams;
using testing::InputDistribution;

struct ConvCase {
  ConvTranspose2dParams params;
  InputDistribution distribution;
};

std::string CaseName(const ::testing::TestParamInfo<ConvCase>& info) {
  const ConvTranspose2dParams& p = info.param.params;
  return absl::StrCat("N", p.batch, "Ci", p.in_channels, "Co", p.out_channels, "H", p.in_height,
                      "W", p.in_width, "K", p.kernel_size, "S", p.stride, "P", p.padding, "Op",
                      p.output_padding, "_", testing::DistributionName(info.param.distribution));
}

reference::ConvTranspose2dShape ToReference(const ConvTranspose2dParams& p) {
  return {p.batch,       p.in_channels, p.out_channels, p.in_height,     p.in_width,
          p.kernel_size, p.stride,      p.padding,      p.output_padding};
}

std::vector<ConvCase> AllCases() {
  std::vector<ConvCase> cases;
  // Every kernel size 1..5 x stride 1..3 x padding 0..2 x legal output
  // padding, on a small odd-sized problem.
  for (int64_t k = 1; k <= 5; ++k) {
    for (int64_t s = 1; s <= 3; ++s) {
      for (int64_t pad = 0; pad <= 2; ++pad) {
        for (int64_t op = 0; op <= 1 && op < s; ++op) {
          ConvTranspose2dParams p{2, 3, 6, 5, 7, k, s, pad, op};
          if (cpu::ConvTranspose2dOutputSize(p.in_height, k, s, pad, op) < 1) continue;
          for (InputDistribution d : {InputDistribution::kUniform01, InputDistribution::kNormal}) {
            cases.push_back({p, d});
          }
        }
      }
    }
  }
  // Batch 1 and single pixels / channels.
  cases.push_back({{1, 1, 1, 1, 1, 1, 1, 0, 0}, InputDistribution::kNormal});
  cases.push_back({{1, 1, 1, 1, 1, 3, 2, 0, 1}, InputDistribution::kUniform01});
  cases.push_back({{1, 5, 3, 1, 9, 2, 3, 0, 2}, InputDistribution::kNormal});
  // Larger ones: the reference family's channel counts, a stride-2
  // upsampler, and a case whose column buffer is split into row tiles.
  cases.push_back({{3, 16, 64, 9, 11, 3, 1, 0, 0}, InputDistribution::kUniform01});
  cases.push_back({{3, 16, 64, 9, 11, 3, 1, 0, 0}, InputDistribution::kNormal});
  cases.push_back({{1, 32, 32, 16, 16, 4, 2, 1, 0}, InputDistribution::kNormal});
  cases.push_back({{1, 8, 64, 48, 64, 5, 1, 2, 0}, InputDistribution::kUniform01});
  return cases;
}

class ConvTranspose2dAccuracyTest : public ::testing::TestWithParam<ConvCase> {};

// SPEC.md §1.4 fp32 tolerance: rel L2 <= 5e-6 and max abs <= 1e-4 against a
// float64 reference on the same float32 inputs.
TEST_P(ConvTranspose2dAccuracyTest, MatchesFloat64ReferenceWithinFp32Tolerance) {
  const ConvTranspose2dParams& p = GetParam().params;
  const InputDistribution d = GetParam().distribution;
  const auto input = testing::RandomInput(p.batch * p.in_channels * p.in_height * p.in_width, d, 1);
  const auto weight =
      testing::RandomInput(p.in_channels * p.out_channels * p.kernel_size * p.kernel_size, d, 2);
  const auto bias = testing::RandomAffineBias(p.out_channels, 3);
  const reference::ConvTranspose2dShape shape = ToReference(p);
  std::vector<float> output(p.batch * p.out_channels * shape.out_height() * shape.out_width(),
                            -7.0f);

  ThreadPool pool(3);
  ASSERT_TRUE(
      cpu::ConvTranspose2d(p, input.data(), weight.data(), bias.data(), output.data(), pool).ok());

  const auto expected = reference::ConvTranspose2d(shape, input.data(), weight.data(), bias.data());
  const reference::ErrorStats stats = reference::CompareToReference(output, expected);
  EXPECT_TRUE(stats.Within(reference::kFp32Tolerance)) << stats;
}

INSTANTIATE_TEST_SUITE_P(Shapes, ConvTranspose2dAccuracyTest, ::testing::ValuesIn(AllCases()),
                         CaseName);

TEST(ConvTranspose2dTest, OutputSizeFollowsPyTorchFormula) {
  EXPECT_EQ(cpu::ConvTranspose2dOutputSize(256, 3, 1, 0, 0), 258);
  EXPECT_EQ(cpu::ConvTranspose2dOutputSize(16, 4, 2, 1, 0), 32);
  EXPECT_EQ(cpu::ConvTranspose2dOutputSize(5, 3, 2, 1, 1), 10);
  EXPECT_EQ(cpu::ConvTranspose2dOutputSize(1, 1, 1, 1, 0), -1);
}

TEST(ConvTranspose2dTest, NullBiasMeansZeroBias) {
  const ConvTranspose2dParams p{2, 3, 4, 4, 5, 3, 2, 1, 1};
  const auto input = testing::RandomInput(2 * 3 * 4 * 5, InputDistribution::kNormal, 4);
  const auto weight = testing::RandomInput(3 * 4 * 9, InputDistribution::kNormal, 5);
  const reference::ConvTranspose2dShape shape = ToReference(p);
  std::vector<float> output(2 * 4 * shape.out_height() * shape.out_width());
  ThreadPool pool(2);
  ASSERT_TRUE(
      cpu::ConvTranspose2d(p, input.data(), weight.data(), nullptr, output.data(), pool).ok());
  const auto expected =
      reference::ConvTranspose2d<float>(shape, input.data(), weight.data(), nullptr);
  EXPECT_TRUE(reference::CompareToReference(output, expected).Within(reference::kFp32Tolerance));
}

TEST(ConvTranspose2dTest, RejectsInvalidParameters) {
  const ConvTranspose2dParams valid{1, 2, 2, 3, 3, 3, 2, 1, 1};
  EXPECT_TRUE(cpu::ValidateConvTranspose2dParams(valid).ok());

  struct Bad {
    ConvTranspose2dParams params;
    std::string message_part;
  };
  std::vector<Bad> bad;
  auto with = [&](auto mutate, std::string message_part) {
    ConvTranspose2dParams p = valid;
    mutate(p);
    bad.push_back({p, std::move(message_part)});
  };
  with([](auto& p) { p.batch = 0; }, "batch");
  with([](auto& p) { p.in_channels = 0; }, "in_channels");
  with([](auto& p) { p.out_channels = -1; }, "out_channels");
  with([](auto& p) { p.in_height = 0; }, "in_height");
  with([](auto& p) { p.in_width = 0; }, "in_width");
  with([](auto& p) { p.kernel_size = 0; }, "kernel_size");
  with([](auto& p) { p.stride = 0; }, "stride");
  with([](auto& p) { p.padding = -1; }, "padding");
  with([](auto& p) { p.output_padding = 2; }, "output_padding");
  with([](auto& p) { p.output_padding = -1; }, "output_padding");
  with(
      [](auto& p) {
        p.stride = 1;
        p.output_padding = 1;
      },
      "output_padding");
  with(
      [](auto& p) {
        p.in_height = 1;
        p.kernel_size = 1;
        p.padding = 1;
        p.output_padding = 0;
      },
      "output size");
  with([](auto& p) { p.batch = int64_t{1} << 62; }, "too many elements");
  for (const Bad& b : bad) {
    const absl::Status status = cpu::ValidateConvTranspose2dParams(b.params);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << b.message_part;
    EXPECT_NE(status.message().find(b.message_part), std::string::npos) << status;
  }
}

TEST(ConvTranspose2dTest, RejectsNullPointersAndBadParametersWithoutWriting) {
  const ConvTranspose2dParams p{1, 1, 1, 2, 2, 1, 1, 0, 0};
  std::vector<float> input(4, 1.0f), weight(1, 1.0f), output(4, 9.0f);
  ThreadPool pool(1);
  EXPECT_EQ(cpu::ConvTranspose2d(p, nullptr, weight.data(), nullptr, output.data(), pool).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cpu::ConvTranspose2d(p, input.data(), nullptr, nullptr, output.data(), pool).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cpu::ConvTranspose2d(p, input.data(), weight.data(), nullptr, nullptr, pool).code(),
            absl::StatusCode::kInvalidArgument);
  ConvTranspose2dParams bad = p;
  bad.stride = 0;
  EXPECT_EQ(
      cpu::ConvTranspose2d(bad, input.data(), weight.data(), nullptr, output.data(), pool).code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(output, std::vector<float>(4, 9.0f));
}

}  // namespace
}  // namespace fuseserve
