#include "kernels/cuda/conv_transpose2d_gelu.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "gtest/gtest.h"
#include "kernels/cpu/gelu.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/resources.h"
#include "kernels/reference/error_metrics.h"
#include "kernels/reference/ops.h"
#include "kernels/reference/test_data.h"

namespace fuseserve::cuda {
namespace {

using reference::CompareToReference;
using reference::ErrorStats;
using reference::Tolerance;

const char* ModeName(MathMode mode) { return mode == MathMode::kTf32 ? "tf32" : "fp32"; }

Tolerance ToleranceOf(MathMode mode) {
  return mode == MathMode::kTf32 ? reference::kTf32Tolerance : reference::kFp32Tolerance;
}

int64_t OutHeight(const ConvTranspose2dParams& p) {
  return ConvTranspose2dOutputSize(p.in_height, p.kernel_size, p.stride, p.padding,
                                   p.output_padding);
}
int64_t OutWidth(const ConvTranspose2dParams& p) {
  return ConvTranspose2dOutputSize(p.in_width, p.kernel_size, p.stride, p.padding,
                                   p.output_padding);
}

// PyTorch's default ConvTranspose2d initialisation bound, 1/sqrt(fan_in) with
// fan_in = out_channels * k * k (weight [C_in, C_out, k, k]).
float InitBound(const ConvTranspose2dParams& p) {
  return 1.0f / std::sqrt(static_cast<float>(p.out_channels * p.kernel_size * p.kernel_size));
}

struct GpuResult {
  std::vector<float> output;
  std::vector<double> group_sums;  // empty when run without statistics
};

// Prepares the weight, runs the kernel on a fresh stream with the output
// poisoned with NaN (0xFF bytes) and the sums zeroed, and copies both back.
// num_groups 0: run without statistics (group_sums null).
absl::StatusOr<GpuResult> RunOnGpu(const ConvTranspose2dParams& p, MathMode mode,
                                   const std::vector<float>& input,
                                   const std::vector<float>& weight,
                                   const std::vector<float>& bias, int64_t num_groups) {
  std::vector<float> prepared(PreparedConvTransposeWeightSize(p, mode));
  RETURN_IF_ERROR(PrepareConvTransposeWeight(p, mode, weight.data(), prepared.data()));
  const int64_t output_count = p.batch * p.out_channels * OutHeight(p) * OutWidth(p);
  const int64_t sums_count = num_groups > 0 ? 2 * p.batch * num_groups : 0;

  ASSIGN_OR_RETURN(Stream stream, Stream::Create());
  ASSIGN_OR_RETURN(DeviceBuffer d_input, DeviceBuffer::Allocate(input.size() * sizeof(float)));
  ASSIGN_OR_RETURN(DeviceBuffer d_weight, DeviceBuffer::Allocate(prepared.size() * sizeof(float)));
  ASSIGN_OR_RETURN(DeviceBuffer d_bias, DeviceBuffer::Allocate(bias.size() * sizeof(float)));
  ASSIGN_OR_RETURN(DeviceBuffer d_output, DeviceBuffer::Allocate(output_count * sizeof(float)));
  ASSIGN_OR_RETURN(DeviceBuffer d_sums, DeviceBuffer::Allocate(sums_count * sizeof(double)));
  RETURN_IF_CUDA_ERROR(cudaMemcpy(d_input.data(), input.data(), d_input.bytes(),
                                  cudaMemcpyHostToDevice));
  RETURN_IF_CUDA_ERROR(cudaMemcpy(d_weight.data(), prepared.data(), d_weight.bytes(),
                                  cudaMemcpyHostToDevice));
  RETURN_IF_CUDA_ERROR(cudaMemcpy(d_bias.data(), bias.data(), d_bias.bytes(),
                                  cudaMemcpyHostToDevice));
  RETURN_IF_CUDA_ERROR(cudaMemset(d_output.data(), 0xFF, d_output.bytes()));
  if (sums_count > 0) RETURN_IF_CUDA_ERROR(cudaMemset(d_sums.data(), 0, d_sums.bytes()));

  RETURN_IF_ERROR(ConvTranspose2dBiasGelu(p, mode, d_input.as<float>(), d_weight.as<float>(),
                                          d_bias.as<float>(), d_output.as<float>(), num_groups,
                                          sums_count > 0 ? d_sums.as<double>() : nullptr,
                                          stream.get()));
  RETURN_IF_ERROR(stream.Synchronize());

  GpuResult result;
  result.output.resize(output_count);
  result.group_sums.resize(sums_count);
  RETURN_IF_CUDA_ERROR(cudaMemcpy(result.output.data(), d_output.data(), d_output.bytes(),
                                  cudaMemcpyDeviceToHost));
  if (sums_count > 0) {
    RETURN_IF_CUDA_ERROR(cudaMemcpy(result.group_sums.data(), d_sums.data(), d_sums.bytes(),
                                    cudaMemcpyDeviceToHost));
  }
  return result;
}

// Checks the kernel's (sum, sum of squares) of each (sample, group) of
// `output` ([batch, C, plane]) against sums formed here from the same floats:
// only the summation order differs, so 1e-6 relative (to the sum of
// magnitudes) is generous.
void ExpectGroupSumsMatchOutput(const float* output, int64_t batch, int64_t channels,
                                int64_t plane, int64_t num_groups, const double* group_sums,
                                const std::string& label) {
  const int64_t group_size = channels / num_groups * plane;
  for (int64_t n = 0; n < batch; ++n) {
    for (int64_t g = 0; g < num_groups; ++g) {
      const float* values = output + (n * num_groups + g) * group_size;
      double sum = 0;
      double magnitude = 0;
      double sum_squares = 0;
      for (int64_t i = 0; i < group_size; ++i) {
        sum += values[i];
        magnitude += std::fabs(values[i]);
        sum_squares += static_cast<double>(values[i]) * values[i];
      }
      const double* actual = group_sums + 2 * (n * num_groups + g);
      EXPECT_NEAR(actual[0], sum, 1e-6 * magnitude + 1e-30)
          << label << " sample " << n << " group " << g;
      EXPECT_NEAR(actual[1], sum_squares, 1e-6 * sum_squares + 1e-30)
          << label << " sample " << n << " group " << g;
    }
  }
}

struct ConvCase {
  std::string name;
  ConvTranspose2dParams params;
  int64_t num_groups;
};

std::ostream& operator<<(std::ostream& os, const ConvCase& c) { return os << c.name; }

ConvCase MakeCase(std::string name, int64_t batch, int64_t in_channels, int64_t out_channels,
                  int64_t height, int64_t width, int64_t kernel_size, int64_t stride,
                  int64_t padding, int64_t output_padding, int64_t num_groups) {
  ConvCase c;
  c.name = std::move(name);
  c.params.batch = batch;
  c.params.in_channels = in_channels;
  c.params.out_channels = out_channels;
  c.params.in_height = height;
  c.params.in_width = width;
  c.params.kernel_size = kernel_size;
  c.params.stride = stride;
  c.params.padding = padding;
  c.params.output_padding = output_padding;
  c.num_groups = num_groups;
  return c;
}

// Stride 1 takes the tensor-core implicit GEMM (tiles of 128 pixels x 64
// channels x 64 of K = C_in * k^2), with a cheaper gather when C_in is a
// multiple of 64 (the C_in = 64 cases) than otherwise; stride > 1 takes the
// direct FFMA kernel (16 channels per block). The cases put sizes on both
// sides of each tile: single pixels and channels, K = 1 and K not a multiple
// of 64, C_out above 64 with a group straddling the channel tiles, pixel
// counts not a multiple of 128, and padding beyond k - 1.
std::vector<ConvCase> Cases() {
  return {
      // name, N, C_in, C_out, H, W, k, stride, padding, output_padding, groups
      MakeCase("S1_All1", 1, 1, 1, 1, 1, 1, 1, 0, 0, 1),
      MakeCase("S1_K3_C3to17_7x5_P1", 3, 3, 17, 7, 5, 3, 1, 1, 0, 17),
      MakeCase("S1_K5_C17to3_33x31_P2", 1, 17, 3, 33, 31, 5, 1, 2, 0, 3),
      MakeCase("S1_K3_C64to64_33x31", 3, 64, 64, 33, 31, 3, 1, 0, 0, 8),
      MakeCase("S1_K4_C64to17_7x5_P2", 1, 64, 17, 7, 5, 4, 1, 2, 0, 17),
      MakeCase("S1_K2_C3to64_33x31", 1, 3, 64, 33, 31, 2, 1, 0, 0, 16),
      MakeCase("S1_K1_PaddingBeyondKernel", 3, 3, 3, 7, 5, 1, 1, 2, 0, 3),
      MakeCase("S1_K3_C17to81_GroupAcrossTiles", 1, 17, 81, 7, 5, 3, 1, 1, 0, 3),
      MakeCase("S1_K5_C1to1_1x1_P2", 1, 1, 1, 1, 1, 5, 1, 2, 0, 1),
      MakeCase("S2_K3_C3to17_7x5_P1_Op1", 3, 3, 17, 7, 5, 3, 2, 1, 1, 17),
      MakeCase("S2_K4_C17to64_33x31_P1", 1, 17, 64, 33, 31, 4, 2, 1, 0, 8),
      MakeCase("S2_K1_C17to17_7x5_Op1", 1, 17, 17, 7, 5, 1, 2, 0, 1, 1),
      MakeCase("S2_K5_C64to81_7x5_P2_Op1", 1, 64, 81, 7, 5, 5, 2, 2, 1, 3),
      MakeCase("S3_K5_C64to3_7x5_P2_Op1", 1, 64, 3, 7, 5, 5, 3, 2, 1, 3),
      MakeCase("S3_K1_All1", 3, 1, 1, 1, 1, 1, 3, 0, 0, 1),
      MakeCase("S3_K2_C3to17_33x31_P1", 1, 3, 17, 33, 31, 2, 3, 1, 0, 17),
      MakeCase("S3_K3_C1to64_1x1_Op1", 3, 1, 64, 1, 1, 3, 3, 0, 1, 64),
  };
}

class ConvTranspose2dGeluTest : public ::testing::TestWithParam<ConvCase> {
 protected:
  void SetUp() override {
    if (DeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  }
};

TEST_P(ConvTranspose2dGeluTest, MatchesFloat64ReferenceWithGroupSumsInBothModes) {
  const ConvCase& c = GetParam();
  const ConvTranspose2dParams& p = c.params;
  ASSERT_TRUE(ValidateConvTranspose2dParams(p).ok()) << ValidateConvTranspose2dParams(p);
  const int64_t plane = OutHeight(p) * OutWidth(p);
  const float bound = InitBound(p);
  const std::vector<float> weight = reference::RandomUniform(
      p.in_channels * p.out_channels * p.kernel_size * p.kernel_size, 11, -bound, bound);
  const std::vector<float> bias = reference::RandomUniform(p.out_channels, 12, -bound, bound);
  reference::ConvTranspose2dShape shape;
  shape.batch = p.batch;
  shape.in_channels = p.in_channels;
  shape.out_channels = p.out_channels;
  shape.in_height = p.in_height;
  shape.in_width = p.in_width;
  shape.kernel_size = p.kernel_size;
  shape.stride = p.stride;
  shape.padding = p.padding;
  shape.output_padding = p.output_padding;

  const int64_t input_count = p.batch * p.in_channels * p.in_height * p.in_width;
  for (const bool normal : {false, true}) {
    const std::vector<float> input = normal ? reference::RandomNormal(input_count, 13)
                                            : reference::RandomUniform(input_count, 13);
    const std::vector<double> conv =
        reference::ConvTranspose2d<float>(shape, input.data(), weight.data(), bias.data());
    const std::vector<double> expected = reference::Gelu<double>(conv.data(), conv.size());
    for (const MathMode mode : {MathMode::kFp32, MathMode::kTf32}) {
      const std::string label =
          absl::StrCat(ModeName(mode), normal ? " N(0,1)" : " U[0,1)", " input");
      absl::StatusOr<GpuResult> result = RunOnGpu(p, mode, input, weight, bias, c.num_groups);
      ASSERT_TRUE(result.ok()) << label << ": " << result.status();
      const ErrorStats stats = CompareToReference(result->output, expected);
      EXPECT_TRUE(stats.Within(ToleranceOf(mode))) << label << ": " << stats;
      ExpectGroupSumsMatchOutput(result->output.data(), p.batch, p.out_channels, plane,
                                 c.num_groups, result->group_sums.data(), label);

      // Without statistics the same kernel writes the same output.
      absl::StatusOr<GpuResult> plain = RunOnGpu(p, mode, input, weight, bias, 0);
      ASSERT_TRUE(plain.ok()) << label << ": " << plain.status();
      EXPECT_EQ(0, std::memcmp(plain->output.data(), result->output.data(),
                               result->output.size() * sizeof(float)))
          << label << ": output differs when run without group sums";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, ConvTranspose2dGeluTest, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<ConvCase>& info) {
                           return info.param.name;
                         });

// GELU(bias + transposed convolution) at one output element, in double.
double ReferenceAt(const ConvTranspose2dParams& p, const float* sample_input, const float* weight,
                   const float* bias, int64_t co, int64_t oh, int64_t ow) {
  double acc = bias[co];
  const int64_t k = p.kernel_size;
  for (int64_t kh = 0; kh < k; ++kh) {
    const int64_t th = oh + p.padding - kh;
    if (th < 0 || th % p.stride != 0 || th / p.stride >= p.in_height) continue;
    for (int64_t kw = 0; kw < k; ++kw) {
      const int64_t tw = ow + p.padding - kw;
      if (tw < 0 || tw % p.stride != 0 || tw / p.stride >= p.in_width) continue;
      for (int64_t ci = 0; ci < p.in_channels; ++ci) {
        acc += static_cast<double>(
                   sample_input[(ci * p.in_height + th / p.stride) * p.in_width + tw / p.stride]) *
               weight[((ci * p.out_channels + co) * k + kh) * k + kw];
      }
    }
  }
  return cpu::GeluErf(acc);
}

class ConvTranspose2dGeluReferenceShapeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (DeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  }
};

// SPEC §1 family A: 128x64x256x256, k 3, stride 1 -> 128x64x258x258 (545M
// outputs, more than 2^31 bytes of output and of input). Every output is
// checked for having been written (no NaN left from the poison) and every
// (sample, group)'s sums against the output; 32 sampled outputs per sample
// are checked against a float64 evaluation. Sample n of the input is the
// window at n * 977 of one longer random vector, so samples differ without
// generating the whole batch on the host.
TEST_F(ConvTranspose2dGeluReferenceShapeTest, MatchesSampledReferenceAndGroupSums) {
  ConvTranspose2dParams p;
  p.batch = 128;
  p.in_channels = 64;
  p.out_channels = 64;
  p.in_height = 256;
  p.in_width = 256;
  p.kernel_size = 3;
  constexpr int64_t kGroups = 8;
  constexpr int64_t kSampleShift = 977;
  constexpr int64_t kSamplesPerImage = 32;
  const int64_t in_sample = p.in_channels * p.in_height * p.in_width;
  const int64_t out_plane = OutHeight(p) * OutWidth(p);
  const int64_t out_sample = p.out_channels * out_plane;
  const float bound = InitBound(p);
  const std::vector<float> weight = reference::RandomUniform(
      p.in_channels * p.out_channels * p.kernel_size * p.kernel_size, 21, -bound, bound);
  const std::vector<float> bias = reference::RandomUniform(p.out_channels, 22, -bound, bound);
  const std::vector<float> base =
      reference::RandomUniform(in_sample + p.batch * kSampleShift, 23);
  const std::vector<float> picks =
      reference::RandomUniform(p.batch * kSamplesPerImage, 24);

  auto stream = Stream::Create();
  auto d_input = DeviceBuffer::Allocate(p.batch * in_sample * sizeof(float));
  auto d_weight = DeviceBuffer::Allocate(
      PreparedConvTransposeWeightSize(p, MathMode::kTf32) * sizeof(float));
  auto d_bias = DeviceBuffer::Allocate(p.out_channels * sizeof(float));
  auto d_output = DeviceBuffer::Allocate(p.batch * out_sample * sizeof(float));
  auto d_sums = DeviceBuffer::Allocate(2 * p.batch * kGroups * sizeof(double));
  ASSERT_TRUE(stream.ok() && d_input.ok() && d_weight.ok() && d_bias.ok() && d_output.ok() &&
              d_sums.ok());
  for (int64_t n = 0; n < p.batch; ++n) {
    ASSERT_EQ(cudaSuccess, cudaMemcpy(d_input->as<float>() + n * in_sample,
                                      base.data() + n * kSampleShift, in_sample * sizeof(float),
                                      cudaMemcpyHostToDevice));
  }
  ASSERT_EQ(cudaSuccess, cudaMemcpy(d_bias->data(), bias.data(), d_bias->bytes(),
                                    cudaMemcpyHostToDevice));

  std::vector<float> prepared(PreparedConvTransposeWeightSize(p, MathMode::kTf32));
  std::vector<float> output(out_sample);
  std::vector<float> actual;
  std::vector<double> expected;
  std::vector<double> sums(2 * p.batch * kGroups);
  for (const MathMode mode : {MathMode::kTf32, MathMode::kFp32}) {
    ASSERT_TRUE(PrepareConvTransposeWeight(p, mode, weight.data(), prepared.data()).ok());
    ASSERT_EQ(cudaSuccess, cudaMemcpy(d_weight->data(), prepared.data(), d_weight->bytes(),
                                      cudaMemcpyHostToDevice));
    ASSERT_EQ(cudaSuccess, cudaMemset(d_output->data(), 0xFF, d_output->bytes()));
    ASSERT_EQ(cudaSuccess, cudaMemset(d_sums->data(), 0, d_sums->bytes()));
    auto start = Event::Create();
    auto stop = Event::Create();
    ASSERT_TRUE(start.ok() && stop.ok());
    ASSERT_TRUE(start->Record(stream->get()).ok());
    const absl::Status launched = ConvTranspose2dBiasGelu(
        p, mode, d_input->as<float>(), d_weight->as<float>(), d_bias->as<float>(),
        d_output->as<float>(), kGroups, d_sums->as<double>(), stream->get());
    ASSERT_TRUE(launched.ok()) << launched;
    ASSERT_TRUE(stop->Record(stream->get()).ok());
    ASSERT_TRUE(stream->Synchronize().ok());
    absl::StatusOr<float> ms = stop->ElapsedMsSince(*start);
    ASSERT_TRUE(ms.ok());
    RecordProperty(absl::StrCat(ModeName(mode), "_kernel_ms"), std::to_string(*ms));
    ASSERT_EQ(cudaSuccess, cudaMemcpy(sums.data(), d_sums->data(), d_sums->bytes(),
                                      cudaMemcpyDeviceToHost));

    actual.clear();
    expected.clear();
    for (int64_t n = 0; n < p.batch; ++n) {
      ASSERT_EQ(cudaSuccess,
                cudaMemcpy(output.data(), d_output->as<float>() + n * out_sample,
                           out_sample * sizeof(float), cudaMemcpyDeviceToHost));
      int64_t non_finite = 0;
      for (const float v : output) non_finite += std::isfinite(v) ? 0 : 1;
      ASSERT_EQ(non_finite, 0) << ModeName(mode) << " sample " << n;
      ExpectGroupSumsMatchOutput(output.data(), 1, p.out_channels, out_plane, kGroups,
                                 sums.data() + 2 * n * kGroups,
                                 absl::StrCat(ModeName(mode), " sample ", n));
      for (int64_t s = 0; s < kSamplesPerImage; ++s) {
        const int64_t index = std::min<int64_t>(
            out_sample - 1, static_cast<int64_t>(picks[n * kSamplesPerImage + s] * out_sample));
        const int64_t co = index / out_plane;
        const int64_t oh = index % out_plane / OutWidth(p);
        const int64_t ow = index % OutWidth(p);
        actual.push_back(output[index]);
        expected.push_back(ReferenceAt(p, base.data() + n * kSampleShift, weight.data(),
                                       bias.data(), co, oh, ow));
      }
    }
    const ErrorStats stats = CompareToReference(actual, expected);
    EXPECT_TRUE(stats.Within(ToleranceOf(mode))) << ModeName(mode) << ": " << stats;
  }
}

// Argument checks happen before anything touches the device, so these run
// on machines without a GPU too. No pointer here is ever dereferenced.
class ConvTranspose2dGeluValidationTest : public ::testing::Test {
 protected:
  ConvTranspose2dGeluValidationTest() {
    params_.batch = 2;
    params_.in_channels = 3;
    params_.out_channels = 4;
    params_.in_height = 5;
    params_.in_width = 5;
    params_.kernel_size = 3;
  }

  absl::Status Launch(const ConvTranspose2dParams& params, int64_t num_groups, double* sums) {
    return ConvTranspose2dBiasGelu(params, MathMode::kTf32, buffer_, buffer_, buffer_, buffer_,
                                   num_groups, sums, nullptr);
  }

  ConvTranspose2dParams params_;
  alignas(16) float buffer_[4] = {};
  double sums_[2] = {};
};

TEST_F(ConvTranspose2dGeluValidationTest, AcceptsTheBaseParams) {
  EXPECT_TRUE(ValidateConvTranspose2dParams(params_).ok());
  EXPECT_EQ(OutHeight(params_), 7);
}

TEST_F(ConvTranspose2dGeluValidationTest, RejectsZeroSizes) {
  for (int64_t ConvTranspose2dParams::*field :
       {&ConvTranspose2dParams::batch, &ConvTranspose2dParams::in_channels,
        &ConvTranspose2dParams::out_channels, &ConvTranspose2dParams::in_height,
        &ConvTranspose2dParams::in_width, &ConvTranspose2dParams::kernel_size,
        &ConvTranspose2dParams::stride}) {
    ConvTranspose2dParams params = params_;
    params.*field = 0;
    EXPECT_EQ(ValidateConvTranspose2dParams(params).code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(Launch(params, 1, sums_).code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(PreparedConvTransposeWeightSize(params, MathMode::kTf32), 0);
  }
}

TEST_F(ConvTranspose2dGeluValidationTest, RejectsOutputPaddingNotBelowStride) {
  ConvTranspose2dParams params = params_;
  params.stride = 2;
  params.output_padding = 2;
  EXPECT_EQ(Launch(params, 1, sums_).code(), absl::StatusCode::kInvalidArgument);
  params.stride = 1;
  params.output_padding = 1;
  EXPECT_EQ(Launch(params, 1, sums_).code(), absl::StatusCode::kInvalidArgument);
  params.output_padding = -1;
  EXPECT_EQ(Launch(params, 1, sums_).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(ConvTranspose2dGeluValidationTest, RejectsPaddingThatEmptiesTheOutput) {
  ConvTranspose2dParams params = params_;
  params.padding = 4;  // 5 - 1 - 8 + 2 + 1 = -1
  EXPECT_EQ(Launch(params, 1, sums_).code(), absl::StatusCode::kInvalidArgument);
  params.padding = -1;
  EXPECT_EQ(Launch(params, 1, sums_).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(ConvTranspose2dGeluValidationTest, RejectsGroupsThatDoNotDivideOutputChannels) {
  EXPECT_EQ(Launch(params_, 3, sums_).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Launch(params_, 0, sums_).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Launch(params_, 8, sums_).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(ConvTranspose2dGeluValidationTest, RejectsNullPointersAndMisalignedWeight) {
  EXPECT_EQ(ConvTranspose2dBiasGelu(params_, MathMode::kTf32, nullptr, buffer_, buffer_, buffer_,
                                    1, sums_, nullptr)
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ConvTranspose2dBiasGelu(params_, MathMode::kTf32, buffer_, nullptr, buffer_, buffer_,
                                    1, sums_, nullptr)
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ConvTranspose2dBiasGelu(params_, MathMode::kTf32, buffer_, buffer_, buffer_, nullptr,
                                    1, sums_, nullptr)
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ConvTranspose2dBiasGelu(params_, MathMode::kTf32, buffer_, buffer_ + 1, buffer_,
                                    buffer_, 1, sums_, nullptr)
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(ConvTranspose2dGeluValidationTest, RejectsBatchBeyondTheGridLimit) {
  ConvTranspose2dParams params = params_;
  params.batch = 65536;
  EXPECT_EQ(ValidateConvTranspose2dParams(params).code(), absl::StatusCode::kInvalidArgument);
}

TEST(PrepareConvTransposeWeightTest, PlacesEachWeightAtItsTapRowAndZeroPadsTheRest) {
  ConvTranspose2dParams p;
  p.batch = 1;
  p.in_channels = 3;
  p.out_channels = 5;
  p.in_height = 4;
  p.in_width = 4;
  p.kernel_size = 2;
  const int64_t k = p.kernel_size;
  const std::vector<float> weight =
      reference::RandomNormal(p.in_channels * p.out_channels * k * k, 31);
  const int64_t size = PreparedConvTransposeWeightSize(p, MathMode::kFp32);
  // Rows padded to the 64-row K tile, columns to the 64-channel N tile.
  ASSERT_EQ(size, 64 * 64);
  std::vector<float> prepared(size, -1.0f);
  ASSERT_TRUE(PrepareConvTransposeWeight(p, MathMode::kFp32, weight.data(), prepared.data()).ok());
  std::vector<bool> used(size, false);
  for (int64_t ci = 0; ci < p.in_channels; ++ci) {
    for (int64_t co = 0; co < p.out_channels; ++co) {
      for (int64_t tap = 0; tap < k * k; ++tap) {
        const int64_t index = (tap * p.in_channels + ci) * 64 + co;
        EXPECT_EQ(prepared[index], weight[(ci * p.out_channels + co) * k * k + tap]);
        used[index] = true;
      }
    }
  }
  for (int64_t i = 0; i < size; ++i) {
    if (!used[i]) {
      EXPECT_EQ(prepared[i], 0.0f) << "padding at " << i;
    }
  }
}

TEST(PrepareConvTransposeWeightTest, RoundsToTf32OnlyInTf32Mode) {
  ConvTranspose2dParams p;
  p.batch = 1;
  p.in_channels = 2;
  p.out_channels = 3;
  p.in_height = 1;
  p.in_width = 1;
  p.kernel_size = 1;
  const std::vector<float> weight = {1.0f + 0x1.0p-12f, 1.0f + 0x1.8p-11f, -1.0f - 0x1.0p-10f,
                                     0.1f, -3.0e-20f, 1.0f};
  std::vector<float> prepared(PreparedConvTransposeWeightSize(p, MathMode::kTf32));
  ASSERT_TRUE(PrepareConvTransposeWeight(p, MathMode::kTf32, weight.data(), prepared.data()).ok());
  for (int64_t i = 0; i < 6; ++i) {
    const int64_t ci = i / 3;
    const int64_t co = i % 3;
    const float value = prepared[ci * 64 + co];
    uint32_t bits;
    std::memcpy(&bits, &value, sizeof(bits));
    EXPECT_EQ(bits & 0x1fffu, 0u) << "weight " << i << " keeps more than 10 mantissa bits";
    EXPECT_NEAR(value, weight[i], std::fabs(weight[i]) * 0x1.0p-11f) << "weight " << i;
  }
  EXPECT_EQ(prepared[0], 1.0f);                // 2^-12 rounds down
  EXPECT_EQ(prepared[1], 1.0f + 0x1.0p-10f);   // 1.5 * 2^-11 rounds up
  EXPECT_EQ(prepared[2], -1.0f - 0x1.0p-10f);  // exact
  ASSERT_TRUE(PrepareConvTransposeWeight(p, MathMode::kFp32, weight.data(), prepared.data()).ok());
  EXPECT_EQ(prepared[64 + 0], 0.1f);  // (ci 1, co 0) = weight[3], unrounded
}

}  // namespace
}  // namespace fuseserve::cuda
