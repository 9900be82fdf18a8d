#include "kernels/cuda/conv_transpose2d_gelu.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "gtest/gtest.h"
#include "kernels/cpu/gelu.h"
#include "kernels/cuda/conv_transpose2d_gelu_tiled.h"
#include "kernels/cuda/conv_transpose2d_gelu_wgmma.h"
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

// Weights and biases from U(-bound, bound) (PyTorch's initialisation range)
// and an N(0,1) input for `p`, from seeds seed, seed + 1 and seed + 2.
struct RandomCase {
  std::vector<float> weight;
  std::vector<float> bias;
  std::vector<float> input;
};

RandomCase MakeRandomCase(const ConvTranspose2dParams& p, uint64_t seed) {
  const float bound = InitBound(p);
  return {reference::RandomUniform(p.in_channels * p.out_channels * p.kernel_size * p.kernel_size,
                                   seed, -bound, bound),
          reference::RandomUniform(p.out_channels, seed + 1, -bound, bound),
          reference::RandomNormal(p.batch * p.in_channels * p.in_height * p.in_width, seed + 2)};
}

struct GpuResult {
  std::vector<float> output;
  std::vector<double> group_sums;  // empty when run without statistics
};

// Prepares the weight, runs the kernel on a fresh stream with the output
// poisoned with NaN (0xFF bytes) and the sums zeroed, and copies both back.
// num_groups 0: run without statistics (group_sums null). The input and
// output start `input_offset` and `output_offset` floats into their device
// buffers (cudaMalloc memory is 256-byte aligned), to run on pointers of
// lesser alignment. The stream does not synchronise with the legacy default
// stream, so every copy and fill before the launch is issued on it.
absl::StatusOr<GpuResult> RunOnGpu(const ConvTranspose2dParams& p, MathMode mode,
                                   const std::vector<float>& input,
                                   const std::vector<float>& weight,
                                   const std::vector<float>& bias, int64_t num_groups,
                                   int64_t input_offset = 0, int64_t output_offset = 0,
                                   ConvTransposeKernel kernel = ConvTransposeKernel::kAuto) {
  std::vector<float> prepared(PreparedConvTransposeWeightSize(p, mode));
  RETURN_IF_ERROR(PrepareConvTransposeWeight(p, mode, weight.data(), prepared.data()));
  const int64_t output_count = p.batch * p.out_channels * OutHeight(p) * OutWidth(p);
  const int64_t sums_count = num_groups > 0 ? 2 * p.batch * num_groups : 0;

  ASSIGN_OR_RETURN(Stream stream, Stream::Create());
  ASSIGN_OR_RETURN(DeviceBuffer d_input,
                   DeviceBuffer::Allocate((input_offset + input.size()) * sizeof(float)));
  ASSIGN_OR_RETURN(DeviceBuffer d_weight, DeviceBuffer::Allocate(prepared.size() * sizeof(float)));
  ASSIGN_OR_RETURN(DeviceBuffer d_bias, DeviceBuffer::Allocate(bias.size() * sizeof(float)));
  ASSIGN_OR_RETURN(DeviceBuffer d_output,
                   DeviceBuffer::Allocate((output_offset + output_count) * sizeof(float)));
  ASSIGN_OR_RETURN(DeviceBuffer d_sums, DeviceBuffer::Allocate(sums_count * sizeof(double)));
  float* const device_input = d_input.as<float>() + input_offset;
  float* const device_output = d_output.as<float>() + output_offset;
  RETURN_IF_CUDA_ERROR(cudaMemcpyAsync(device_input, input.data(), input.size() * sizeof(float),
                                       cudaMemcpyHostToDevice, stream.get()));
  RETURN_IF_CUDA_ERROR(cudaMemcpyAsync(d_weight.data(), prepared.data(), d_weight.bytes(),
                                       cudaMemcpyHostToDevice, stream.get()));
  RETURN_IF_CUDA_ERROR(cudaMemcpyAsync(d_bias.data(), bias.data(), d_bias.bytes(),
                                       cudaMemcpyHostToDevice, stream.get()));
  RETURN_IF_CUDA_ERROR(cudaMemsetAsync(d_output.data(), 0xFF, d_output.bytes(), stream.get()));
  if (sums_count > 0) {
    RETURN_IF_CUDA_ERROR(cudaMemsetAsync(d_sums.data(), 0, d_sums.bytes(), stream.get()));
  }

  RETURN_IF_ERROR(ConvTranspose2dBiasGeluOn(kernel, p, mode, device_input, d_weight.as<float>(),
                                            d_bias.as<float>(), device_output, num_groups,
                                            sums_count > 0 ? d_sums.as<double>() : nullptr,
                                            stream.get()));
  RETURN_IF_ERROR(stream.Synchronize());

  GpuResult result;
  result.output.resize(output_count);
  result.group_sums.resize(sums_count);
  RETURN_IF_CUDA_ERROR(cudaMemcpy(result.output.data(), device_output,
                                  output_count * sizeof(float), cudaMemcpyDeviceToHost));
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

// GELU(bias + ConvTranspose2d(input)) in float64.
std::vector<double> ReferenceOutput(const ConvTranspose2dParams& p, const std::vector<float>& input,
                                    const std::vector<float>& weight,
                                    const std::vector<float>& bias) {
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
  const std::vector<double> conv =
      reference::ConvTranspose2d<float>(shape, input.data(), weight.data(), bias.data());
  return reference::Gelu<double>(conv.data(), conv.size());
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

// Every case runs in both modes. Stride 1 in kTf32 with in_width % 4 == 0
// (the T_ cases) takes the tiled kernel (blocks of 512 flat pixels x 64
// channels, 8 input channels per pipeline stage); the other stride-1 runs
// (kFp32, and the S1_ cases' widths 1, 5 and 31 in kTf32) take the general
// tensor-core implicit GEMM (tiles of 128 pixels x 64 channels x 64 of
// K = C_in * k^2), with a cheaper gather when C_in is a multiple of 64 than
// otherwise; stride > 1 takes the direct FFMA kernel (16 channels per
// block). The cases put sizes on both sides of each tile: single pixels and
// channels, K = 1 and K not a multiple of 64, C_in not a multiple of 8 and
// more chunks than pipeline stages, C_out below and above 64 with a group
// straddling the channel tiles, planes smaller than a tile, an exact
// multiple of 512 and odd, tiles spanning many short rows and two long ones,
// kernel sizes 1 to 5, and padding 0 to beyond k - 1. The TwoStages cases'
// tiles fit only two pipeline stages on Hopper.
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
      MakeCase("T_K3_C64to64_40x36", 2, 64, 64, 40, 36, 3, 1, 0, 0, 8),
      MakeCase("T_K3_C13to24_9x8_P1", 2, 13, 24, 9, 8, 3, 1, 1, 0, 6),
      MakeCase("T_K3_C5to72_11x12_GroupAcrossTiles", 1, 5, 72, 11, 12, 3, 1, 0, 0, 3),
      MakeCase("T_K1_C29to17_16x32_Plane512", 2, 29, 17, 16, 32, 1, 1, 0, 0, 17),
      MakeCase("T_K3_C3to16_32x32_P1_Plane1024", 1, 3, 16, 32, 32, 3, 1, 1, 0, 4),
      MakeCase("T_K2_C8to64_8x12_OddPlane", 3, 8, 64, 8, 12, 2, 1, 0, 0, 4),
      MakeCase("T_K5_C17to3_20x20_P2_TwoStages", 1, 17, 3, 20, 20, 5, 1, 2, 0, 3),
      MakeCase("T_K5_C4to64_8x8", 1, 4, 64, 8, 8, 5, 1, 0, 0, 16),
      MakeCase("T_K4_C9to20_12x16_P2", 1, 9, 20, 12, 16, 4, 1, 2, 0, 5),
      MakeCase("T_K3_C16to8_5x4_Width4", 2, 16, 8, 5, 4, 3, 1, 0, 0, 2),
      MakeCase("T_K3_C8to8_3x516_P1_LongRowsTwoStages", 1, 8, 8, 3, 516, 3, 1, 1, 0, 1),
      MakeCase("T_K2_C8to8_2x900_LongRowsTwoStages", 1, 8, 8, 2, 900, 2, 1, 0, 0, 2),
      MakeCase("T_K1_C3to5_6x8_P1_PaddingBeyondKernel", 2, 3, 5, 6, 8, 1, 1, 1, 0, 5),
      MakeCase("T_K3_C1to1_1x4", 1, 1, 1, 1, 4, 3, 1, 0, 0, 1),
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

  const int64_t input_count = p.batch * p.in_channels * p.in_height * p.in_width;
  for (const bool normal : {false, true}) {
    const std::vector<float> input = normal ? reference::RandomNormal(input_count, 13)
                                            : reference::RandomUniform(input_count, 13);
    const std::vector<double> expected = ReferenceOutput(p, input, weight, bias);
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

const char* KernelName(ConvTransposeKernel kernel) {
  switch (kernel) {
    case ConvTransposeKernel::kAuto:
      return "auto";
    case ConvTransposeKernel::kWgmma:
      return "wgmma";
    case ConvTransposeKernel::kWgmmaGathers:
      return "wgmma (gathers)";
    case ConvTransposeKernel::kTiled:
      return "tiled";
    case ConvTransposeKernel::kImplicitGemm:
      return "implicit GEMM";
    case ConvTransposeKernel::kDirect:
      return "direct";
  }
  return "?";
}

// FUSESERVE_DISABLE_WGMMA=1 switches the wgmma kernel off (the racecheck
// run of scripts/gpu/run.sh).
bool WgmmaDisabled() {
  const char* disabled = std::getenv("FUSESERVE_DISABLE_WGMMA");
  return disabled != nullptr && std::string(disabled) == "1";
}

bool IsHopper() {
  int device = 0;
  int major = 0;
  return cudaGetDevice(&device) == cudaSuccess &&
         cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) ==
             cudaSuccess &&
         major == 9;
}

// The automatic choice runs one kernel per case; this runs every kernel that
// serves the case (each side of every dispatch rule), in both modes, on both
// input distributions, against the float64 reference and its own group sums.
// A kernel that does not serve a case says so with FailedPrecondition, and
// it must serve where its rule says it does: the wgmma kernel (with either
// producer) every stride-1 tf32 case whose stages fit (on a Hopper GPU,
// unless switched off by FUSESERVE_DISABLE_WGMMA=1), the tiled kernel
// every T_ case.
TEST_P(ConvTranspose2dGeluTest, EveryKernelServingTheCaseMatchesTheReference) {
  const ConvCase& c = GetParam();
  const ConvTranspose2dParams& p = c.params;
  const int64_t plane = OutHeight(p) * OutWidth(p);
  const float bound = InitBound(p);
  // The data of MatchesFloat64ReferenceWithGroupSumsInBothModes. (Other
  // seeds give S1_K5_C1to1_1x1_P2, one output of 1.7e-4 summed from terms
  // of ~1e-2, a relative error that no float32 kernel meets.)
  const std::vector<float> weight = reference::RandomUniform(
      p.in_channels * p.out_channels * p.kernel_size * p.kernel_size, 11, -bound, bound);
  const std::vector<float> bias = reference::RandomUniform(p.out_channels, 12, -bound, bound);
  const int64_t input_count = p.batch * p.in_channels * p.in_height * p.in_width;
  for (const bool normal : {false, true}) {
    const std::vector<float> input = normal ? reference::RandomNormal(input_count, 13)
                                            : reference::RandomUniform(input_count, 13);
    const std::vector<double> expected = ReferenceOutput(p, input, weight, bias);
    for (const MathMode mode : {MathMode::kFp32, MathMode::kTf32}) {
      for (const ConvTransposeKernel kernel :
           {ConvTransposeKernel::kWgmma, ConvTransposeKernel::kWgmmaGathers,
            ConvTransposeKernel::kTiled, ConvTransposeKernel::kImplicitGemm,
            ConvTransposeKernel::kDirect}) {
        const std::string label = absl::StrCat(KernelName(kernel), " ", ModeName(mode),
                                               normal ? " N(0,1)" : " U[0,1)", " input");
        absl::StatusOr<GpuResult> result =
            RunOnGpu(p, mode, input, weight, bias, c.num_groups, 0, 0, kernel);
        bool should_serve = kernel == ConvTransposeKernel::kDirect ||
                            (kernel == ConvTransposeKernel::kImplicitGemm && p.stride == 1);
        if (kernel == ConvTransposeKernel::kWgmma || kernel == ConvTransposeKernel::kWgmmaGathers) {
          should_serve = IsHopper() && !WgmmaDisabled() && conv_wgmma::Supports(p, mode);
        }
        if (kernel == ConvTransposeKernel::kTiled) {
          should_serve = mode == MathMode::kTf32 && c.name.rfind("T_", 0) == 0;
        }
        if (!should_serve) {
          EXPECT_TRUE(!result.ok() && result.status().code() == absl::StatusCode::kFailedPrecondition)
              << label << ": " << (result.ok() ? "ran" : result.status().ToString());
          continue;
        }
        ASSERT_TRUE(result.ok()) << label << ": " << result.status();
        const ErrorStats stats = CompareToReference(result->output, expected);
        EXPECT_TRUE(stats.Within(ToleranceOf(mode))) << label << ": " << stats;
        ExpectGroupSumsMatchOutput(result->output.data(), p.batch, p.out_channels, plane,
                                   c.num_groups, result->group_sums.data(), label);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, ConvTranspose2dGeluTest, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<ConvCase>& info) {
                           return info.param.name;
                         });

// The tiled kernel copies the input with 16-byte cp.async only from a
// 16-byte aligned input (4-byte copies otherwise) and stores to an output of
// any alignment. Offsets of 1, 2 and 4 floats take both copy paths; both
// compute the same sums in the same order, so the outputs are bitwise those
// of the aligned run.
TEST_F(ConvTranspose2dGeluTest, TiledKernelGivesTheSameOutputFromPointersOfAnyAlignment) {
  const ConvCase c = MakeCase("T_K3_C11to20_9x12", 2, 11, 20, 9, 12, 3, 1, 0, 0, 4);
  const ConvTranspose2dParams& p = c.params;
  ASSERT_TRUE(conv_tiled::Supports(p, MathMode::kTf32));
  const int64_t plane = OutHeight(p) * OutWidth(p);
  const auto [weight, bias, input] = MakeRandomCase(p, 41);

  absl::StatusOr<GpuResult> aligned = RunOnGpu(p, MathMode::kTf32, input, weight, bias, 0);
  ASSERT_TRUE(aligned.ok()) << aligned.status();
  const ErrorStats stats =
      CompareToReference(aligned->output, ReferenceOutput(p, input, weight, bias));
  EXPECT_TRUE(stats.Within(reference::kTf32Tolerance)) << stats;
  for (const int64_t offset : {1, 2, 4}) {
    absl::StatusOr<GpuResult> shifted =
        RunOnGpu(p, MathMode::kTf32, input, weight, bias, c.num_groups, offset, offset);
    ASSERT_TRUE(shifted.ok()) << "offset " << offset << ": " << shifted.status();
    EXPECT_EQ(0, std::memcmp(shifted->output.data(), aligned->output.data(),
                             aligned->output.size() * sizeof(float)))
        << "input and output " << offset << " floats past 256-byte alignment";
    ExpectGroupSumsMatchOutput(shifted->output.data(), p.batch, p.out_channels, plane,
                               c.num_groups, shifted->group_sums.data(),
                               absl::StrCat("offset ", offset));
  }
}

// The wgmma kernel's two producers fill each stage with the same values
// (row copies: 16-byte groups of input rows transposed in shared memory;
// gathers: one float per copy), so the outputs and sums are bitwise equal.
// Row copies serve the cases with in_width and the grid's width multiples
// of 4 (halo phases 0 and 2, channel counts not a multiple of 8, two
// stages, several samples); an input 1 float past 16-byte alignment takes
// the gathers under kWgmma, with the same output again.
TEST_F(ConvTranspose2dGeluTest, WgmmaRowCopiesGiveBitwiseTheGathersOutput) {
  if (!IsHopper() || WgmmaDisabled()) GTEST_SKIP() << "needs the wgmma kernel (Hopper)";
  int row_copy_cases = 0;
  bool halo_phases[4] = {false, false, false, false};
  for (const ConvCase& c : Cases()) {
    const ConvTranspose2dParams& p = c.params;
    if (!conv_wgmma::Supports(p, MathMode::kTf32) || !conv_wgmma::RowCopiesServe(p)) continue;
    ++row_copy_cases;
    halo_phases[(p.kernel_size - 1 - p.padding) % 4] = true;
    const auto [weight, bias, input] = MakeRandomCase(p, 51);
    absl::StatusOr<GpuResult> rows = RunOnGpu(p, MathMode::kTf32, input, weight, bias, c.num_groups,
                                              0, 0, ConvTransposeKernel::kWgmma);
    ASSERT_TRUE(rows.ok()) << c.name << ": " << rows.status();
    const ErrorStats stats =
        CompareToReference(rows->output, ReferenceOutput(p, input, weight, bias));
    EXPECT_TRUE(stats.Within(reference::kTf32Tolerance)) << c.name << ": " << stats;
    for (const auto& [kernel, offset] : {std::pair{ConvTransposeKernel::kWgmmaGathers, int64_t{0}},
                                         std::pair{ConvTransposeKernel::kWgmma, int64_t{1}}}) {
      const std::string label =
          absl::StrCat(c.name, " ", KernelName(kernel), ", input offset ", offset);
      absl::StatusOr<GpuResult> other =
          RunOnGpu(p, MathMode::kTf32, input, weight, bias, c.num_groups, offset, 0, kernel);
      ASSERT_TRUE(other.ok()) << label << ": " << other.status();
      EXPECT_EQ(0, std::memcmp(other->output.data(), rows->output.data(),
                               rows->output.size() * sizeof(float)))
          << label << ": output differs from the row copies'";
      EXPECT_EQ(0, std::memcmp(other->group_sums.data(), rows->group_sums.data(),
                               rows->group_sums.size() * sizeof(double)))
          << label << ": group sums differ from the row copies'";
    }
  }
  EXPECT_GE(row_copy_cases, 5);
  // Groups start at the tile's first pixel (halo 0 or 4) or 2 before it.
  EXPECT_TRUE(halo_phases[0] && halo_phases[2]);
}

// The wgmma kernel's epilogue GELU (GeluErfFast on the device, its exp2f
// within 2 ulp) against float64: with zero weights every output of channel
// c is GELU(bias[c]), so 16 launches of 64 channels put 1024 biases over
// [-12, 12] through it. Within 3e-7 max(1, |x|): the fit's 1e-7 (host
// test) plus exp2f's error.
TEST_F(ConvTranspose2dGeluTest, WgmmaEpilogueGeluMatchesFloat64) {
  if (!IsHopper() || WgmmaDisabled()) GTEST_SKIP() << "needs the wgmma kernel (Hopper)";
  const ConvCase c = MakeCase("S1_K3_C8to64_4x4_ZeroWeights", 1, 8, 64, 4, 4, 3, 1, 0, 0, 8);
  const ConvTranspose2dParams& p = c.params;
  ASSERT_TRUE(conv_wgmma::Supports(p, MathMode::kTf32));
  const int64_t plane = OutHeight(p) * OutWidth(p);
  const std::vector<float> weight(p.in_channels * p.out_channels * p.kernel_size * p.kernel_size,
                                  0.0f);
  const std::vector<float> input = reference::RandomNormal(
      p.batch * p.in_channels * p.in_height * p.in_width, 71);
  constexpr int kRounds = 16;
  double worst = 0.0;
  float worst_x = 0.0f;
  for (int round = 0; round < kRounds; ++round) {
    std::vector<float> bias(p.out_channels);
    for (int64_t channel = 0; channel < p.out_channels; ++channel) {
      bias[channel] = -12.0f + 24.0f * static_cast<float>(round * p.out_channels + channel) /
                                   static_cast<float>(kRounds * p.out_channels - 1);
    }
    absl::StatusOr<GpuResult> result = RunOnGpu(p, MathMode::kTf32, input, weight, bias, 0, 0,
                                                0, ConvTransposeKernel::kWgmma);
    ASSERT_TRUE(result.ok()) << result.status();
    for (int64_t channel = 0; channel < p.out_channels; ++channel) {
      const double x = bias[channel];
      const double expected = 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
      for (int64_t i = 0; i < plane; ++i) {
        const double error = std::abs(result->output[channel * plane + i] - expected) /
                             std::max(1.0, std::abs(x));
        if (error > worst) {
          worst = error;
          worst_x = bias[channel];
        }
      }
    }
  }
  EXPECT_LE(worst, 3e-7) << "at x = " << worst_x;
}

// Stride 1, no padding unless the caller sets it.
ConvTranspose2dParams Params(int64_t batch, int64_t in_channels, int64_t out_channels,
                             int64_t height, int64_t width, int64_t kernel_size) {
  ConvTranspose2dParams p;
  p.batch = batch;
  p.in_channels = in_channels;
  p.out_channels = out_channels;
  p.in_height = height;
  p.in_width = width;
  p.kernel_size = kernel_size;
  return p;
}

// Dispatch (conv_tiled::Supports) depends on the params and mode only; these
// run without a GPU.
ConvTranspose2dParams ReferenceShapeParams() { return Params(128, 64, 64, 256, 256, 3); }

TEST(ConvTranspose2dDispatchTest, TiledKernelServesExactlyTheTf32RunsOfTheTCases) {
  for (const ConvCase& c : Cases()) {
    const bool tiled_case = c.name.rfind("T_", 0) == 0;
    EXPECT_EQ(conv_tiled::Supports(c.params, MathMode::kTf32), tiled_case) << c.name;
    EXPECT_FALSE(conv_tiled::Supports(c.params, MathMode::kFp32)) << c.name;
  }
}

TEST(ConvTranspose2dDispatchTest, TiledKernelNeedsStride1Tf32WidthMultipleOf4AndFittingTiles) {
  const ConvTranspose2dParams base = ReferenceShapeParams();
  ASSERT_TRUE(conv_tiled::Supports(base, MathMode::kTf32));
  // The reference shape runs with three stages on Hopper (227 KB).
  EXPECT_LE(conv_tiled::SharedMemoryBytes(base, 3), 227 * 1024);
  EXPECT_FALSE(conv_tiled::Supports(base, MathMode::kFp32));

  ConvTranspose2dParams params = base;
  params.stride = 2;
  EXPECT_FALSE(conv_tiled::Supports(params, MathMode::kTf32));
  params = base;
  params.in_width = 254;
  EXPECT_FALSE(conv_tiled::Supports(params, MathMode::kTf32));
  params.in_width = 252;
  EXPECT_TRUE(conv_tiled::Supports(params, MathMode::kTf32));
  // Two stages of 8 channels x (2 + 2) rows of 16 K floats do not fit.
  params = base;
  params.in_width = 16384;
  EXPECT_GT(conv_tiled::SharedMemoryBytes(params, 2), 227 * 1024);
  EXPECT_FALSE(conv_tiled::Supports(params, MathMode::kTf32));
  // Nor do two stages of k = 9's weights (8 x 81 taps x 64 channels each).
  params = base;
  params.kernel_size = 9;
  EXPECT_FALSE(conv_tiled::Supports(params, MathMode::kTf32));
}

TEST(ConvTranspose2dDispatchTest, WgmmaKernelNeedsStride1Tf32AndThreeFittingStages) {
  const ConvTranspose2dParams base = ReferenceShapeParams();
  ASSERT_TRUE(conv_wgmma::Supports(base, MathMode::kTf32));
  // The reference shape runs with four stages on Hopper (227 KB).
  EXPECT_LE(conv_wgmma::SharedMemoryBytes(base, 4), 227 * 1024);
  EXPECT_FALSE(conv_wgmma::Supports(base, MathMode::kFp32));

  ConvTranspose2dParams params = base;
  params.stride = 2;
  EXPECT_FALSE(conv_wgmma::Supports(params, MathMode::kTf32));
  // Any width whose stages fit: no alignment rule, unlike the tiled kernel.
  params = base;
  params.in_width = 255;
  EXPECT_TRUE(conv_wgmma::Supports(params, MathMode::kTf32));
  params.in_width = 1;
  EXPECT_TRUE(conv_wgmma::Supports(params, MathMode::kTf32));
  // Three stages of two k - 1 = 2 rows of 4097 grid pixels do not fit.
  params.in_width = 4094;
  EXPECT_GT(conv_wgmma::SharedMemoryBytes(params, 3), 227 * 1024);
  EXPECT_FALSE(conv_wgmma::Supports(params, MathMode::kTf32));
  // Nor do three stages of k = 5's weights (25 taps x 2 KB) with a 20-wide image.
  params = Params(1, 17, 3, 20, 20, 5);
  params.padding = 2;
  EXPECT_FALSE(conv_wgmma::Supports(params, MathMode::kTf32));
  EXPECT_TRUE(conv_tiled::Supports(params, MathMode::kTf32));
}

// Row copies need whole 16-byte groups of input rows on the grid: in_width
// and W_out + k - 1 multiples of 4, k - 1 - padding >= 0, and a span of at
// most 1152 grid pixels.
TEST(ConvTranspose2dDispatchTest, WgmmaRowCopiesNeedWidthsOfFoursAndAShortSpan) {
  ConvTranspose2dParams p = ReferenceShapeParams();
  EXPECT_TRUE(conv_wgmma::RowCopiesServe(p));  // W 256, grid 260, halo 2
  p.in_width = 254;                            // grid 258
  EXPECT_FALSE(conv_wgmma::RowCopiesServe(p));
  p.in_width = 36;
  EXPECT_TRUE(conv_wgmma::RowCopiesServe(p));
  p.padding = 1;  // halo 1: grid 38
  EXPECT_FALSE(conv_wgmma::RowCopiesServe(p));
  p.kernel_size = 1;
  p.padding = 0;  // halo 0: grid 36
  EXPECT_TRUE(conv_wgmma::RowCopiesServe(p));
  p.in_width = 34;  // grid 34
  EXPECT_FALSE(conv_wgmma::RowCopiesServe(p));
  p = ReferenceShapeParams();
  p.in_width = 512;  // grid 516, span 512 + 2 x 517 rounded: 1568
  EXPECT_TRUE(conv_wgmma::Supports(p, MathMode::kTf32));
  EXPECT_FALSE(conv_wgmma::RowCopiesServe(p));
  p.kernel_size = 5;
  p.padding = 2;
  p.in_width = 128;  // grid 132, span 512 + 4 x 133 rounded: 1056
  EXPECT_TRUE(conv_wgmma::RowCopiesServe(p));
}

// The tiled kernel has instantiations for 2 and 3 stages, each for k = 3
// and for any k: the TwoStages cases run the 2-stage ones on Hopper, the
// other T_ cases the 3-stage ones.
TEST(ConvTranspose2dDispatchTest, TwoStagesCasesAreTheOnesWhoseThreeStagesExceedHopper) {
  bool two_stages_k3 = false;
  bool two_stages_other_k = false;
  for (const ConvCase& c : Cases()) {
    if (c.name.rfind("T_", 0) != 0) continue;
    const bool two_stages = c.name.find("TwoStages") != std::string::npos;
    EXPECT_EQ(conv_tiled::SharedMemoryBytes(c.params, 3) > 227 * 1024, two_stages) << c.name;
    EXPECT_LE(conv_tiled::SharedMemoryBytes(c.params, 2), 227 * 1024) << c.name;
    if (two_stages) {
      (c.params.kernel_size == 3 ? two_stages_k3 : two_stages_other_k) = true;
    }
  }
  EXPECT_TRUE(two_stages_k3);
  EXPECT_TRUE(two_stages_other_k);
}

TEST(ConvTranspose2dDispatchTest, PreparedSizeAddsTheTiledAndWgmmaLayoutsForStride1Tf32) {
  ConvTranspose2dParams p = ReferenceShapeParams();
  // General layout: K = 64 * 9 = 576 rows of 64 channels.
  const int64_t general = 576 * 64;
  EXPECT_EQ(PreparedConvTransposeWeightSize(p, MathMode::kFp32), general);
  EXPECT_EQ(conv_tiled::PreparedWeightSize(p), 64 * 64 * 9);
  EXPECT_EQ(conv_wgmma::PreparedWeightSize(p), 64 * 64 * 9);
  EXPECT_EQ(PreparedConvTransposeWeightSize(p, MathMode::kTf32), general + 2 * 64 * 64 * 9);
  p.stride = 2;
  EXPECT_EQ(PreparedConvTransposeWeightSize(p, MathMode::kTf32),
            PreparedConvTransposeWeightSize(p, MathMode::kFp32));
}

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
  ConvTranspose2dParams p = ReferenceShapeParams();
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
  // Everything before the launch goes on the launch's stream, which does
  // not synchronise with the legacy default stream.
  for (int64_t n = 0; n < p.batch; ++n) {
    ASSERT_EQ(cudaSuccess, cudaMemcpyAsync(d_input->as<float>() + n * in_sample,
                                           base.data() + n * kSampleShift,
                                           in_sample * sizeof(float), cudaMemcpyHostToDevice,
                                           stream->get()));
  }
  ASSERT_EQ(cudaSuccess, cudaMemcpyAsync(d_bias->data(), bias.data(), d_bias->bytes(),
                                         cudaMemcpyHostToDevice, stream->get()));

  std::vector<float> prepared(PreparedConvTransposeWeightSize(p, MathMode::kTf32));
  std::vector<float> output(out_sample);
  std::vector<float> actual;
  std::vector<double> expected;
  std::vector<double> sums(2 * p.batch * kGroups);
  for (const MathMode mode : {MathMode::kTf32, MathMode::kFp32}) {
    ASSERT_TRUE(PrepareConvTransposeWeight(p, mode, weight.data(), prepared.data()).ok());
    ASSERT_EQ(cudaSuccess, cudaMemcpyAsync(d_weight->data(), prepared.data(), d_weight->bytes(),
                                           cudaMemcpyHostToDevice, stream->get()));
    ASSERT_EQ(cudaSuccess,
              cudaMemsetAsync(d_output->data(), 0xFF, d_output->bytes(), stream->get()));
    ASSERT_EQ(cudaSuccess, cudaMemsetAsync(d_sums->data(), 0, d_sums->bytes(), stream->get()));
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

// The server prepares the weight once at load, with placeholder spatial
// sizes, and then runs every request size with it (the tiled kernel's
// eligibility depends on the width; its layout must not).
TEST(PrepareConvTransposeWeightTest, LayoutDoesNotDependOnBatchOrSpatialSizes) {
  for (MathMode mode : {MathMode::kTf32, MathMode::kFp32}) {
    for (int64_t stride : {1, 2}) {
      ConvTranspose2dParams base;
      base.batch = 1;
      base.in_channels = 13;
      base.out_channels = 24;
      base.kernel_size = 3;
      base.stride = stride;
      base.in_height = 1;
      base.in_width = 1;
      const std::vector<float> weight = reference::RandomNormal(13 * 24 * 9, 77);
      std::vector<float> expected(PreparedConvTransposeWeightSize(base, mode));
      ASSERT_TRUE(PrepareConvTransposeWeight(base, mode, weight.data(), expected.data()).ok());
      for (int64_t width : {3, 4, 256, 2000}) {
        ConvTranspose2dParams p = base;
        p.batch = 7;
        p.in_height = 5;
        p.in_width = width;
        SCOPED_TRACE(absl::StrCat(ModeName(mode), " stride ", stride, " width ", width));
        ASSERT_EQ(PreparedConvTransposeWeightSize(p, mode), static_cast<int64_t>(expected.size()));
        std::vector<float> prepared(expected.size());
        ASSERT_TRUE(PrepareConvTransposeWeight(p, mode, weight.data(), prepared.data()).ok());
        EXPECT_EQ(std::memcmp(prepared.data(), expected.data(), expected.size() * sizeof(float)),
                  0);
      }
    }
  }
}

TEST(PrepareConvTransposeWeightTest, PlacesEachWeightAtItsTapRowAndZeroPadsTheRest) {
  ConvTranspose2dParams p = Params(1, 3, 5, 4, 4, 2);
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
  ConvTranspose2dParams p = Params(1, 2, 3, 1, 1, 1);
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

// Where the tiled kernel reads w[ci, co, kh, kw], derived here from the PTX
// ISA's m16n8k8 .tf32 A fragment (A row-major 16 x 8, rows = output
// channels, columns = the 8 input channels of a chunk): lane 4 g + q holds
// a0 = (g, q), a1 = (g + 8, q), a2 = (g, q + 4), a3 = (g + 8, q + 4), and
// loads them as one float4. Blocks of 64 channels x 8 channels x one tap
// (4 m16 tiles x 32 lanes x 4) are ordered [channel tile][chunk][tap].
int64_t TiledPosition(const ConvTranspose2dParams& p, int64_t ci, int64_t co, int64_t tap) {
  const int64_t chunks = (p.in_channels + 7) / 8;
  const int64_t row = co % 16;
  const int64_t column = ci % 8;
  const int64_t lane = 4 * (row % 8) + column % 4;
  const int64_t element = (row < 8 ? 0 : 1) + (column < 4 ? 0 : 2);
  const int64_t block = (co / 64 * chunks + ci / 8) * p.kernel_size * p.kernel_size + tap;
  return block * 512 + co % 64 / 16 * 128 + lane * 4 + element;
}

TEST(PrepareConvTransposeWeightTest, AppendsTheTiledLayoutInMmaFragmentOrderForTf32) {
  ConvTranspose2dParams p = Params(1, 13, 72, 4, 8, 3);
  ASSERT_TRUE(conv_tiled::Supports(p, MathMode::kTf32));
  const int64_t k2 = p.kernel_size * p.kernel_size;
  // General layout: K = 13 * 9 = 117 -> 128 rows, 72 -> 128 columns; then
  // 2 channel tiles x 2 chunks x 9 taps x 512.
  const int64_t general = 128 * 128;
  const int64_t tiled_size = 2 * 2 * 9 * 512;
  const int64_t size = PreparedConvTransposeWeightSize(p, MathMode::kTf32);
  ASSERT_EQ(size, general + 2 * tiled_size);
  const std::vector<float> weight =
      reference::RandomNormal(p.in_channels * p.out_channels * k2, 51);
  std::vector<float> prepared(size, -1.0f);
  ASSERT_TRUE(PrepareConvTransposeWeight(p, MathMode::kTf32, weight.data(), prepared.data()).ok());
  const float* tiled = prepared.data() + general;

  // A few weights by hand: w[0, 0, 0, 0] is lane 0's a0 of the first block;
  // w[12, 71, 2, 2] (chunk 1, column 4; tile 1, m16 tile 0, row 7) is lane
  // 28's a2 of block (1 * 2 + 1) * 9 + 8; w[5, 25, 1, 0] (column 5, m16
  // tile 1, row 9) is lane 5's a3 of block 3.
  EXPECT_EQ(tiled[0], prepared[0]);
  EXPECT_EQ(tiled[((1 * 2 + 1) * 9 + 8) * 512 + 0 * 128 + 28 * 4 + 2],
            prepared[(8 * 13 + 12) * 128 + 71]);
  EXPECT_EQ(tiled[3 * 512 + 1 * 128 + 5 * 4 + 3], prepared[(3 * 13 + 5) * 128 + 25]);

  std::vector<bool> used(tiled_size, false);
  for (int64_t ci = 0; ci < p.in_channels; ++ci) {
    for (int64_t co = 0; co < p.out_channels; ++co) {
      for (int64_t tap = 0; tap < k2; ++tap) {
        const int64_t position = TiledPosition(p, ci, co, tap);
        // The general layout's value: the same TF32 rounding.
        EXPECT_EQ(tiled[position], prepared[(tap * p.in_channels + ci) * 128 + co])
            << "ci " << ci << " co " << co << " tap " << tap;
        const float raw = weight[(ci * p.out_channels + co) * k2 + tap];
        EXPECT_NEAR(tiled[position], raw, std::fabs(raw) * 0x1.0p-11f);
        used[position] = true;
      }
    }
  }
  for (int64_t i = 0; i < tiled_size; ++i) {
    if (!used[i]) {
      EXPECT_EQ(tiled[i], 0.0f) << "padding at tiled index " << i;
    }
  }
}

// The wgmma layout follows the tiled one: per (64-channel tile, 8-channel
// chunk, tap) a 64 x 8 operand as two K-halves of 64 rows x 4 channels.
TEST(PrepareConvTransposeWeightTest, AppendsTheWgmmaLayoutInCoreMatrixOrderForTf32) {
  ConvTranspose2dParams p = Params(1, 13, 72, 4, 8, 3);
  ASSERT_TRUE(conv_wgmma::Supports(p, MathMode::kTf32));
  const int64_t k2 = p.kernel_size * p.kernel_size;
  const int64_t general = 128 * 128;
  const int64_t tiled_size = conv_tiled::PreparedWeightSize(p);
  const int64_t wgmma_size = conv_wgmma::PreparedWeightSize(p);
  ASSERT_EQ(wgmma_size, 2 * 2 * 9 * 512);
  ASSERT_EQ(PreparedConvTransposeWeightSize(p, MathMode::kTf32), general + tiled_size + wgmma_size);
  const std::vector<float> weight =
      reference::RandomNormal(p.in_channels * p.out_channels * k2, 52);
  std::vector<float> prepared(general + tiled_size + wgmma_size, -1.0f);
  ASSERT_TRUE(PrepareConvTransposeWeight(p, MathMode::kTf32, weight.data(), prepared.data()).ok());
  const float* wgmma = prepared.data() + general + tiled_size;

  // By hand: w[12, 71, 2, 2] is chunk 1, K-half 1 (ci % 8 = 4), channel
  // tile 1, row 7, column 0 of block (1 * 2 + 1) * 9 + 8; w[5, 25, 1, 0] is
  // chunk 0, K-half 1, row 25, column 1 of block 3.
  EXPECT_EQ(wgmma[(((1 * 2 + 1) * 9 + 8) * 2 + 1) * 256 + 7 * 4 + 0],
            prepared[(8 * 13 + 12) * 128 + 71]);
  EXPECT_EQ(wgmma[(3 * 2 + 1) * 256 + 25 * 4 + 1], prepared[(3 * 13 + 5) * 128 + 25]);

  std::vector<bool> used(wgmma_size, false);
  for (int64_t ci = 0; ci < p.in_channels; ++ci) {
    for (int64_t co = 0; co < p.out_channels; ++co) {
      for (int64_t tap = 0; tap < k2; ++tap) {
        const int64_t position = conv_wgmma::WeightIndex(p, ci, co, tap);
        ASSERT_GE(position, 0);
        ASSERT_LT(position, wgmma_size);
        EXPECT_FALSE(used[position]) << "ci " << ci << " co " << co << " tap " << tap;
        EXPECT_EQ(wgmma[position], prepared[(tap * p.in_channels + ci) * 128 + co])
            << "ci " << ci << " co " << co << " tap " << tap;
        used[position] = true;
      }
    }
  }
  for (int64_t i = 0; i < wgmma_size; ++i) {
    if (!used[i]) {
      EXPECT_EQ(wgmma[i], 0.0f) << "padding at wgmma index " << i;
    }
  }
}

}  // namespace
}  // namespace fuseserve::cuda
