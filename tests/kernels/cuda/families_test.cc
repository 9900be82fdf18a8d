#include "kernels/cuda/families.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cmath>
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/thread_pool.h"
#include "gtest/gtest.h"
#include "kernels/cpu/bias_hardtanh_mish_group_norm.h"
#include "kernels/cpu/linear.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/resources.h"
#include "tests/kernels/cuda/device_copy.h"
#include "tests/kernels/cuda/gpu_test_fixtures.h"
#include "kernels/reference/error_metrics.h"
#include "kernels/reference/families.h"
#include "kernels/reference/ops.h"
#include "kernels/reference/test_data.h"

namespace fuseserve::cuda {
namespace {

using reference::CompareToReference;
using reference::ErrorStats;
using reference::Tolerance;

Tolerance ToleranceOf(MathMode mode) {
  return mode == MathMode::kFp32 ? reference::kFp32Tolerance : reference::kTf32Tolerance;
}

const char* ModeName(MathMode mode) { return mode == MathMode::kFp32 ? "fp32" : "tf32"; }

// Host data of one GEMM-family problem: PyTorch's Linear initialisation
// range for the weight and gemm bias, N(0,1) bias and GroupNorm bias,
// U[0.5, 1.5) GroupNorm weight.
struct GemmData {
  std::vector<float> input;
  std::vector<float> weight;
  std::vector<float> gemm_bias;
  std::vector<float> bias;
  std::vector<float> gn_weight;
  std::vector<float> gn_bias;
};

GemmData MakeGemmData(int64_t batch, int64_t in_features, int64_t out_features, bool normal,
                      uint64_t seed) {
  const float bound = 1.0f / std::sqrt(static_cast<float>(in_features));
  GemmData d;
  d.input = normal ? reference::RandomNormal(batch * in_features, seed)
                   : reference::RandomUniform(batch * in_features, seed);
  d.weight = reference::RandomUniform(out_features * in_features, seed + 1, -bound, bound);
  d.gemm_bias = reference::RandomUniform(out_features, seed + 2, -bound, bound);
  d.bias = reference::RandomNormal(out_features, seed + 3);
  d.gn_weight = reference::RandomUniform(out_features, seed + 4, 0.5f, 1.5f);
  d.gn_bias = reference::RandomNormal(out_features, seed + 5);
  return d;
}

GemmFamilyParams MakeGemmParams(int64_t batch, int64_t in_features, int64_t out_features,
                                int64_t num_groups, MathMode mode) {
  GemmFamilyParams p;
  p.linear = LinearParams{batch, in_features, out_features};
  p.epilogue.batch = batch;
  p.epilogue.channels = out_features;
  p.epilogue.num_groups = num_groups;
  p.mode = mode;
  return p;
}

// Float64 reference of `rows` rows of the problem (rows of the input only:
// every row is independent).
std::vector<double> GemmReferenceRows(const GemmFamilyParams& p, const GemmData& d,
                                      const std::vector<int64_t>& rows) {
  const int64_t in_features = p.linear.in_features;
  std::vector<float> input;
  for (int64_t row : rows) {
    input.insert(input.end(), d.input.begin() + row * in_features,
                 d.input.begin() + (row + 1) * in_features);
  }
  reference::GemmBiasHardtanhMishGroupNormShape shape;
  shape.batch = static_cast<int64_t>(rows.size());
  shape.in_features = in_features;
  shape.out_features = p.linear.out_features;
  shape.num_groups = p.epilogue.num_groups;
  return reference::GemmBiasHardtanhMishGroupNorm(shape, input.data(), d.weight.data(),
                                                  d.gemm_bias.data(), d.bias.data(),
                                                  d.gn_weight.data(), d.gn_bias.data());
}

std::vector<int64_t> AllRows(int64_t batch) {
  std::vector<int64_t> rows(batch);
  for (int64_t i = 0; i < batch; ++i) rows[i] = i;
  return rows;
}

class CudaFamiliesTest : public GpuCublasTest {
 protected:

  std::vector<float> RunGemm(const GemmFamilyParams& p, const GemmData& d) {
    DeviceBuffer input = ToDevice(d.input);
    DeviceBuffer weight = ToDevice(d.weight);
    DeviceBuffer gemm_bias = ToDevice(d.gemm_bias);
    DeviceBuffer bias = ToDevice(d.bias);
    DeviceBuffer gn_weight = ToDevice(d.gn_weight);
    DeviceBuffer gn_bias = ToDevice(d.gn_bias);
    const int64_t count = p.linear.batch * p.linear.out_features;
    DeviceBuffer output = PoisonedDevice(count);
    // The 3xTF32 copy of the weight, as the server prepares it at load.
    std::vector<float> split(Tf32x3WeightSize(p.linear));
    EXPECT_TRUE(PrepareTf32x3Weight(p.linear, d.weight.data(), split.data()).ok());
    DeviceBuffer tf32x3_weight = ToDevice(split);
    auto workspace = DeviceBuffer::Allocate(std::max<size_t>(GemmFamilyWorkspaceBytes(p), 16));
    EXPECT_TRUE(workspace.ok()) << workspace.status();
    if (!workspace.ok()) return {};
    GemmFamilyWeights w;
    w.weight = weight.as<float>();
    w.tf32x3_weight = tf32x3_weight.as<float>();
    w.gemm_bias = gemm_bias.as<float>();
    w.bias = bias.as<float>();
    w.gn_weight = gn_weight.as<float>();
    w.gn_bias = gn_bias.as<float>();
    const absl::Status status =
        RunGemmFamily(handle_, p, w, input.as<float>(), output.as<float>(), workspace->data(),
                      stream_.get());
    EXPECT_TRUE(status.ok()) << status;
    EXPECT_TRUE(stream_.Synchronize().ok());
    return ToHost(output, count);
  }

};

TEST_F(CudaFamiliesTest, GemmFamilyMatchesFloat64ReferenceOnOddShapes) {
  struct Shape {
    int64_t batch, in_features, out_features, num_groups;
  };
  uint64_t seed = 1;
  for (const Shape& s : std::vector<Shape>{{1, 17, 33, 3},
                                           {3, 64, 64, 2},
                                           {65, 100, 96, 3},
                                           {2, 33, 8192, 256},
                                           {5, 8192, 64, 8}}) {
    for (bool normal : {false, true}) {
      const GemmData d = MakeGemmData(s.batch, s.in_features, s.out_features, normal, seed);
      seed += 6;
      for (MathMode mode : {MathMode::kFp32, MathMode::kTf32}) {
        SCOPED_TRACE(absl::StrCat("N=", s.batch, " F_in=", s.in_features, " F_out=", s.out_features,
                                  " G=", s.num_groups, " ", ModeName(mode),
                                  normal ? " N(0,1)" : " U[0,1)"));
        const GemmFamilyParams p =
            MakeGemmParams(s.batch, s.in_features, s.out_features, s.num_groups, mode);
        const ErrorStats error =
            CompareToReference(RunGemm(p, d), GemmReferenceRows(p, d, AllRows(s.batch)));
        EXPECT_TRUE(error.Within(ToleranceOf(mode))) << error;
      }
    }
  }
}

TEST_F(CudaFamiliesTest, GemmFamilyBatchOneAtReferenceFeatures) {
  const GemmData d = MakeGemmData(1, 8192, 8192, /*normal=*/false, 40);
  for (MathMode mode : {MathMode::kFp32, MathMode::kTf32}) {
    SCOPED_TRACE(ModeName(mode));
    const GemmFamilyParams p = MakeGemmParams(1, 8192, 8192, 256, mode);
    const ErrorStats error = CompareToReference(RunGemm(p, d), GemmReferenceRows(p, d, {0}));
    EXPECT_TRUE(error.Within(ToleranceOf(mode))) << error;
  }
}

// The reference gemm shape (SPEC.md §1.2): 1024x8192 by 8192x8192, G=256.
// The whole output against the CPU backend, and three rows against the
// float64 reference (all 1024 would take minutes on the host).
TEST_F(CudaFamiliesTest, GemmFamilyAtReferenceShape) {
  constexpr int64_t kBatch = 1024;
  constexpr int64_t kFeatures = 8192;
  constexpr int64_t kGroups = 256;
  const GemmData d = MakeGemmData(kBatch, kFeatures, kFeatures, /*normal=*/false, 50);

  std::vector<float> cpu_output(kBatch * kFeatures);
  ASSERT_TRUE(cpu::Linear(cpu::LinearParams{kBatch, kFeatures, kFeatures}, d.input.data(),
                          d.weight.data(), d.gemm_bias.data(), cpu_output.data(),
                          ThreadPool::Default())
                  .ok());
  cpu::BiasHardtanhMishGroupNormParams cpu_epilogue;
  cpu_epilogue.batch = kBatch;
  cpu_epilogue.channels = kFeatures;
  cpu_epilogue.num_groups = kGroups;
  ASSERT_TRUE(cpu::BiasHardtanhMishGroupNorm(cpu_epilogue, cpu_output.data(), d.bias.data(),
                                             d.gn_weight.data(), d.gn_bias.data(),
                                             cpu_output.data(), ThreadPool::Default())
                  .ok());
  const std::vector<double> cpu_expected(cpu_output.begin(), cpu_output.end());
  const std::vector<int64_t> rows = {0, 511, kBatch - 1};

  for (MathMode mode : {MathMode::kFp32, MathMode::kTf32}) {
    SCOPED_TRACE(ModeName(mode));
    const GemmFamilyParams p = MakeGemmParams(kBatch, kFeatures, kFeatures, kGroups, mode);
    const std::vector<float> actual = RunGemm(p, d);
    ASSERT_EQ(actual.size(), cpu_expected.size());
    const ErrorStats vs_cpu = CompareToReference(actual, cpu_expected);
    EXPECT_TRUE(vs_cpu.Within(ToleranceOf(mode))) << "vs the CPU backend: " << vs_cpu;
    std::vector<float> sampled;
    for (int64_t row : rows) {
      sampled.insert(sampled.end(), actual.begin() + row * kFeatures,
                     actual.begin() + (row + 1) * kFeatures);
    }
    const ErrorStats vs_exact = CompareToReference(sampled, GemmReferenceRows(p, d, rows));
    EXPECT_TRUE(vs_exact.Within(ToleranceOf(mode))) << "vs float64 rows: " << vs_exact;
  }
}

TEST_F(CudaFamiliesTest, GroupNormFamilyMatchesFloat64Reference) {
  struct Shape {
    int64_t batch, channels, spatial_size, num_groups;
  };
  uint64_t seed = 60;
  for (const Shape& s : std::vector<Shape>{{1, 64, 35, 8}, {3, 6, 1, 3}, {2, 64, 1024, 8}}) {
    SCOPED_TRACE(
        absl::StrCat("[", s.batch, ", ", s.channels, ", ", s.spatial_size, "] G=", s.num_groups));
    GroupNormParams p;
    p.batch = s.batch;
    p.channels = s.channels;
    p.spatial_size = s.spatial_size;
    p.num_groups = s.num_groups;
    const int64_t count = s.batch * s.channels * s.spatial_size;
    const std::vector<float> input = reference::RandomNormal(count, seed++);
    const std::vector<float> weight = reference::RandomNormal(s.channels, seed++);
    const std::vector<float> bias = reference::RandomNormal(s.channels, seed++);
    DeviceBuffer in = ToDevice(input);
    DeviceBuffer w = ToDevice(weight);
    DeviceBuffer b = ToDevice(bias);
    DeviceBuffer out = PoisonedDevice(count);
    auto workspace = DeviceBuffer::Allocate(GroupNormFamilyWorkspaceBytes(p));
    ASSERT_TRUE(workspace.ok());
    const absl::Status status =
        RunGroupNormFamily(p, w.as<float>(), b.as<float>(), in.as<float>(), out.as<float>(),
                           workspace->data(), stream_.get());
    ASSERT_TRUE(status.ok()) << status;
    ASSERT_TRUE(stream_.Synchronize().ok());
    reference::GroupNormShape shape;
    shape.batch = s.batch;
    shape.channels = s.channels;
    shape.spatial_size = s.spatial_size;
    shape.num_groups = s.num_groups;
    const ErrorStats error = CompareToReference(
        ToHost(out, count), reference::GroupNorm(shape, input.data(), weight.data(), bias.data()));
    EXPECT_TRUE(error.Within(reference::kFp32Tolerance)) << error;
  }
}

// Small problems of every kind the convolution family allows (stride 1 and
// 2, padding, output_padding, batch 1) in both modes against the float64
// reference, with N(0,1) and U[0,1) inputs.
TEST_F(CudaFamiliesTest, ConvFamilyMatchesFloat64Reference) {
  struct Shape {
    int64_t batch, in_channels, out_channels, height, width, kernel, stride, padding,
        output_padding, num_groups;
  };
  uint64_t seed = 80;
  for (const Shape& s : std::vector<Shape>{{2, 3, 6, 5, 7, 3, 1, 0, 0, 3},
                                           {1, 4, 8, 9, 11, 4, 2, 1, 1, 4},
                                           {1, 16, 64, 12, 10, 3, 1, 0, 0, 8},
                                           {3, 5, 6, 6, 6, 2, 3, 0, 2, 2}}) {
    ConvFamilyParams p;
    p.conv.batch = s.batch;
    p.conv.in_channels = s.in_channels;
    p.conv.out_channels = s.out_channels;
    p.conv.in_height = s.height;
    p.conv.in_width = s.width;
    p.conv.kernel_size = s.kernel;
    p.conv.stride = s.stride;
    p.conv.padding = s.padding;
    p.conv.output_padding = s.output_padding;
    p.num_groups = s.num_groups;
    const int64_t out_h =
        ConvTranspose2dOutputSize(s.height, s.kernel, s.stride, s.padding, s.output_padding);
    const int64_t out_w =
        ConvTranspose2dOutputSize(s.width, s.kernel, s.stride, s.padding, s.output_padding);
    const int64_t out_count = s.batch * s.out_channels * out_h * out_w;
    const float bound = 1.0f / std::sqrt(static_cast<float>(s.out_channels * s.kernel * s.kernel));
    for (bool normal : {false, true}) {
      const int64_t in_count = s.batch * s.in_channels * s.height * s.width;
      const std::vector<float> input = normal ? reference::RandomNormal(in_count, seed)
                                              : reference::RandomUniform(in_count, seed);
      const std::vector<float> weight = reference::RandomUniform(
          s.in_channels * s.out_channels * s.kernel * s.kernel, seed + 1, -bound, bound);
      const std::vector<float> conv_bias =
          reference::RandomUniform(s.out_channels, seed + 2, -bound, bound);
      const std::vector<float> gn_weight =
          reference::RandomUniform(s.out_channels, seed + 3, 0.5f, 1.5f);
      const std::vector<float> gn_bias = reference::RandomNormal(s.out_channels, seed + 4);
      seed += 5;

      reference::ConvTransposeGeluGroupNormShape shape;
      shape.conv = reference::ConvTranspose2dShape{s.batch,  s.in_channels, s.out_channels,
                                                   s.height, s.width,       s.kernel,
                                                   s.stride, s.padding,     s.output_padding};
      shape.num_groups = s.num_groups;
      const std::vector<double> expected = reference::ConvTransposeGeluGroupNorm(
          shape, input.data(), weight.data(), conv_bias.data(), gn_weight.data(), gn_bias.data());

      for (MathMode mode : {MathMode::kFp32, MathMode::kTf32}) {
        SCOPED_TRACE(absl::StrCat("N=", s.batch, " C_in=", s.in_channels, " C_out=", s.out_channels,
                                  " ", s.height, "x", s.width, " k=", s.kernel, " s=", s.stride,
                                  " p=", s.padding, " op=", s.output_padding, " G=", s.num_groups,
                                  " ", ModeName(mode), normal ? " N(0,1)" : " U[0,1)"));
        p.mode = mode;
        std::vector<float> prepared(PreparedConvTransposeWeightSize(p.conv, mode));
        ASSERT_TRUE(PrepareConvTransposeWeight(p.conv, mode, weight.data(), prepared.data()).ok());
        DeviceBuffer d_input = ToDevice(input);
        DeviceBuffer d_prepared = ToDevice(prepared);
        DeviceBuffer d_bias = ToDevice(conv_bias);
        DeviceBuffer d_gn_weight = ToDevice(gn_weight);
        DeviceBuffer d_gn_bias = ToDevice(gn_bias);
        DeviceBuffer d_output = PoisonedDevice(out_count);
        auto workspace = DeviceBuffer::Allocate(ConvFamilyWorkspaceBytes(p));
        ASSERT_TRUE(workspace.ok());
        // Garbage in the workspace: RunConvFamily must zero its sums itself.
        ASSERT_EQ(cudaMemset(workspace->data(), 0x7F, workspace->bytes()), cudaSuccess);
        FinishUploads();
        ConvFamilyWeights w;
        w.prepared_weight = d_prepared.as<float>();
        w.bias = d_bias.as<float>();
        w.gn_weight = d_gn_weight.as<float>();
        w.gn_bias = d_gn_bias.as<float>();
        const absl::Status status = RunConvFamily(p, w, d_input.as<float>(), d_output.as<float>(),
                                                  workspace->data(), stream_.get());
        ASSERT_TRUE(status.ok()) << status;
        ASSERT_TRUE(stream_.Synchronize().ok());
        const ErrorStats error = CompareToReference(ToHost(d_output, out_count), expected);
        EXPECT_TRUE(error.Within(ToleranceOf(mode))) << error;
      }
    }
  }
}

// The GroupNorm beside the convolution (kConcurrent) gives bitwise the
// GroupNorm after it (kAfter), whatever the multiprocessors left to it: one,
// the default, all but one (the convolution on one), more than the device has
// (clamped), and with several tiles per sample. kAuto at a batch of at least
// kMinConcurrentGroupNormBatch picks it, and matches too.
TEST_F(CudaFamiliesTest, ConvFamilyConcurrentGroupNormMatchesTheSeparatePassBitwise) {
  ConvFamilyParams p;
  p.conv.in_channels = 8;
  p.conv.out_channels = 64;
  p.conv.kernel_size = 3;
  p.num_groups = 8;
  p.conv.batch = 1;
  p.conv.in_height = p.conv.in_width = 30;  // any size the shapes below share an answer with
  const absl::StatusOr<bool> gives = ConvTranspose2dGivesSampleSignals(p.conv, p.mode);
  ASSERT_TRUE(gives.ok()) << gives.status();
  if (!*gives) GTEST_SKIP() << "needs the wgmma convolution (Hopper)";
  int multiprocessors = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&multiprocessors, cudaDevAttrMultiProcessorCount, 0),
            cudaSuccess);
  struct Shape {
    int64_t batch, height, width;
  };
  uint64_t seed = 900;
  // 32 x 32 outputs: 3 tiles of 512 grid pixels per sample; 12 x 10 -> 14 x 12.
  for (const Shape& s : std::vector<Shape>{{9, 30, 30}, {8, 12, 10}}) {
    p.conv.batch = s.batch;
    p.conv.in_height = s.height;
    p.conv.in_width = s.width;
    const int64_t out_count = s.batch * 64 * (s.height + 2) * (s.width + 2);
    const std::vector<float> input =
        reference::RandomNormal(s.batch * 8 * s.height * s.width, seed);
    const std::vector<float> weight = reference::RandomUniform(8 * 64 * 9, seed + 1, -0.1f, 0.1f);
    const std::vector<float> conv_bias = reference::RandomNormal(64, seed + 2);
    const std::vector<float> gn_weight = reference::RandomUniform(64, seed + 3, 0.5f, 1.5f);
    const std::vector<float> gn_bias = reference::RandomNormal(64, seed + 4);
    seed += 5;
    std::vector<float> prepared(PreparedConvTransposeWeightSize(p.conv, p.mode));
    ASSERT_TRUE(PrepareConvTransposeWeight(p.conv, p.mode, weight.data(), prepared.data()).ok());
    DeviceBuffer d_input = ToDevice(input);
    DeviceBuffer d_prepared = ToDevice(prepared);
    DeviceBuffer d_bias = ToDevice(conv_bias);
    DeviceBuffer d_gn_weight = ToDevice(gn_weight);
    DeviceBuffer d_gn_bias = ToDevice(gn_bias);
    ConvFamilyWeights w;
    w.prepared_weight = d_prepared.as<float>();
    w.bias = d_bias.as<float>();
    w.gn_weight = d_gn_weight.as<float>();
    w.gn_bias = d_gn_bias.as<float>();
    auto run = [&](ConvGroupNormSchedule schedule, int group_norm_multiprocessors) {
      ConvFamilyParams q = p;
      q.options.schedule = schedule;
      q.options.group_norm_multiprocessors = group_norm_multiprocessors;
      DeviceBuffer d_output = PoisonedDevice(out_count);
      auto workspace = DeviceBuffer::Allocate(ConvFamilyWorkspaceBytes(q));
      EXPECT_TRUE(workspace.ok());
      if (!workspace.ok()) return std::vector<float>();
      // Garbage in the workspace: the signals must be zeroed by the run.
      EXPECT_EQ(cudaMemset(workspace->data(), 0x7F, workspace->bytes()), cudaSuccess);
      FinishUploads();
      const absl::Status status = RunConvFamily(q, w, d_input.as<float>(), d_output.as<float>(),
                                                workspace->data(), stream_.get());
      EXPECT_TRUE(status.ok()) << status;
      EXPECT_TRUE(stream_.Synchronize().ok());
      return ToHost(d_output, out_count);
    };
    const std::vector<float> after = run(ConvGroupNormSchedule::kAfter, 0);
    // Captured into a CUDA graph (as the GPU instances replay each batch
    // size; the capture keeps the programmatic launch) and replayed twice.
    {
      SCOPED_TRACE("CUDA graph");
      ConvFamilyParams q = p;
      q.options.schedule = ConvGroupNormSchedule::kConcurrent;
      DeviceBuffer d_output = PoisonedDevice(out_count);
      auto workspace = DeviceBuffer::Allocate(ConvFamilyWorkspaceBytes(q));
      ASSERT_TRUE(workspace.ok());
      const absl::StatusOr<GraphExecPtr> exec = CaptureOnStream([&] {
        return RunConvFamily(q, w, d_input.as<float>(), d_output.as<float>(), workspace->data(),
                             stream_.get());
      });
      ASSERT_TRUE(exec.ok()) << exec.status();
      for (int replay = 0; replay < 2; ++replay) {
        ASSERT_EQ(cudaMemset(d_output.data(), 0xFF, d_output.bytes()), cudaSuccess);
        FinishUploads();
        ASSERT_EQ(cudaGraphLaunch(exec->get(), stream_.get()), cudaSuccess);
        ASSERT_TRUE(stream_.Synchronize().ok());
        const std::vector<float> got = ToHost(d_output, out_count);
        EXPECT_EQ(std::memcmp(got.data(), after.data(), after.size() * sizeof(float)), 0)
            << "replay " << replay;
      }
    }
    for (const auto& [schedule, sms] : std::vector<std::pair<ConvGroupNormSchedule, int>>{
             {ConvGroupNormSchedule::kConcurrent, 1},
             {ConvGroupNormSchedule::kConcurrent, 0},
             {ConvGroupNormSchedule::kConcurrent, multiprocessors - 1},
             {ConvGroupNormSchedule::kConcurrent, multiprocessors + 10},
             {ConvGroupNormSchedule::kAuto, 0}}) {
      SCOPED_TRACE(absl::StrCat("N=", s.batch, " ", s.height, "x", s.width, " schedule ",
                                static_cast<int>(schedule), " sms ", sms));
      const std::vector<float> got = run(schedule, sms);
      ASSERT_EQ(got.size(), after.size());
      int64_t mismatches = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        if (std::memcmp(&got[i], &after[i], sizeof(float)) != 0) ++mismatches;
      }
      EXPECT_EQ(mismatches, 0);
    }
  }
}

TEST(CudaFamiliesValidationTest, RejectsMismatchedOrInvalidShapesBeforeAnyWork) {
  GemmFamilyParams gemm = MakeGemmParams(4, 16, 32, 4, MathMode::kFp32);
  gemm.epilogue.channels = 16;
  EXPECT_EQ(RunGemmFamily(nullptr, gemm, GemmFamilyWeights{}, nullptr, nullptr, nullptr, nullptr)
                .code(),
            absl::StatusCode::kInvalidArgument);
  gemm = MakeGemmParams(4, 16, 32, 5, MathMode::kFp32);
  EXPECT_EQ(RunGemmFamily(nullptr, gemm, GemmFamilyWeights{}, nullptr, nullptr, nullptr, nullptr)
                .code(),
            absl::StatusCode::kInvalidArgument);

  ConvFamilyParams conv;
  conv.conv.batch = 2;
  conv.conv.in_channels = 3;
  conv.conv.out_channels = 6;
  conv.conv.in_height = 5;
  conv.conv.in_width = 5;
  conv.conv.kernel_size = 3;
  conv.num_groups = 3;
  // The sums (2 x 2 x 3 doubles), 2 sample signals (16 bytes rounded up),
  // 16 bytes of the concurrent GroupNorm's scratch.
  EXPECT_EQ(ConvFamilyWorkspaceBytes(conv), 2 * 2 * 3 * sizeof(double) + 16 + 16);
  conv.num_groups = 4;
  EXPECT_EQ(ConvFamilyWorkspaceBytes(conv), 0u);
  EXPECT_EQ(RunConvFamily(conv, ConvFamilyWeights{}, nullptr, nullptr, nullptr, nullptr).code(),
            absl::StatusCode::kInvalidArgument);

  // A pinned concurrent GroupNorm where the convolution cannot give sample
  // signals (stride 2: not the wgmma kernel), and a negative multiprocessor
  // count: both refused before any work.
  conv.num_groups = 3;
  float dummy = 0.0f;
  conv.conv.stride = 2;
  conv.options.schedule = ConvGroupNormSchedule::kConcurrent;
  EXPECT_EQ(RunConvFamily(conv, ConvFamilyWeights{}, &dummy, &dummy, &dummy, nullptr).code(),
            absl::StatusCode::kFailedPrecondition);
  conv.conv.stride = 1;
  conv.options.group_norm_multiprocessors = -1;
  EXPECT_EQ(RunConvFamily(conv, ConvFamilyWeights{}, &dummy, &dummy, &dummy, nullptr).code(),
            absl::StatusCode::kInvalidArgument);

  GroupNormParams gn;
  gn.batch = 1;
  gn.channels = 6;
  gn.num_groups = 4;
  EXPECT_EQ(GroupNormFamilyWorkspaceBytes(gn), 0u);
}

}  // namespace
}  // namespace fuseserve::cuda
