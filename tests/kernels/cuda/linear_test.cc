#include "kernels/cuda/linear.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/thread_pool.h"
#include "gtest/gtest.h"
#include "kernels/cpu/linear.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/resources.h"
#include "kernels/cuda/skinny_linear.h"
#include "kernels/cuda/small_batch_linear.h"
#include "kernels/reference/error_metrics.h"
#include "kernels/reference/ops.h"
#include "kernels/reference/test_data.h"
#include "tests/kernels/cuda/device_copy.h"
#include "tests/kernels/cuda/gpu_test_fixtures.h"

namespace fuseserve::cuda {
namespace {

using reference::CompareToReference;
using reference::ErrorStats;
using reference::Tolerance;

Tolerance ToleranceOf(MathMode mode) {
  return mode == MathMode::kFp32 ? reference::kFp32Tolerance : reference::kTf32Tolerance;
}

const char* ModeName(MathMode mode) { return mode == MathMode::kFp32 ? "fp32" : "tf32"; }

const char* AlgorithmName(LinearAlgorithm algorithm) {
  switch (algorithm) {
    case LinearAlgorithm::kAuto: return "auto";
    case LinearAlgorithm::kSmallBatch: return "small batch";
    case LinearAlgorithm::kSgemm: return "sgemm";
    case LinearAlgorithm::kTf32x3: return "3xtf32";
    case LinearAlgorithm::kSkinny: return "skinny";
  }
  return "?";
}

LinearOptions Forced(LinearAlgorithm algorithm, int64_t tf32x3_slices = 0) {
  LinearOptions options;
  options.algorithm = algorithm;
  options.tf32x3_slices = tf32x3_slices;
  return options;
}

// Floats past the output and bytes past the workspace that a run must leave
// untouched.
constexpr int64_t kGuardFloats = 64;
constexpr size_t kGuardBytes = 256;

uint32_t Bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

// True when every float is the poison pattern (all bits set).
bool AllPoisoned(const float* values, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    if (Bits(values[i]) != 0xffffffffu) return false;
  }
  return true;
}

std::vector<unsigned char> BytesAt(const void* device, size_t bytes) {
  std::vector<unsigned char> host(bytes);
  EXPECT_EQ(cudaMemcpy(host.data(), device, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  return host;
}

class CudaLinearTest : public GpuCublasTest {
 protected:

  // y = x W^T on the GPU (kAuto, with the workspace it asks for), into a
  // NaN-poisoned output.
  std::vector<float> Run(const LinearParams& params, MathMode mode, const std::vector<float>& x,
                         const std::vector<float>& weight) {
    DeviceBuffer dx = ToDevice(x);
    DeviceBuffer dw = ToDevice(weight);
    auto dy = DeviceBuffer::Allocate(params.batch * params.out_features * sizeof(float));
    EXPECT_TRUE(dy.ok());
    if (!dy.ok()) return {};
    const size_t workspace_bytes = LinearWorkspaceBytes(params, mode);
    auto workspace = DeviceBuffer::Allocate(std::max<size_t>(workspace_bytes, 16));
    EXPECT_TRUE(workspace.ok()) << workspace.status();
    if (!workspace.ok()) return {};
    EXPECT_EQ(cudaMemset(dy->data(), 0xFF, dy->bytes()), cudaSuccess);
    FinishUploads();
    const absl::Status status = Linear(handle_, params, mode, dx.as<float>(),
                                       LinearWeights{dw.as<float>(), nullptr}, dy->as<float>(),
                                       workspace->data(), stream_.get());
    EXPECT_TRUE(status.ok()) << status;
    EXPECT_TRUE(stream_.Synchronize().ok());
    return ToHost(*dy, params.batch * params.out_features);
  }

  // Linear with `options` on device operands, into a NaN-poisoned output,
  // with a NaN-filled workspace of exactly LinearWorkspaceBytes(params,
  // options) (null when that is 0). Both have a poisoned guard tail that
  // must come back untouched.
  std::vector<float> RunWithOptions(const LinearParams& params, MathMode mode, const float* x,
                                    const LinearWeights& weights, const LinearOptions& options) {
    const int64_t count = params.batch * params.out_features;
    DeviceBuffer y = PoisonedDevice(count + kGuardFloats);
    const size_t workspace_bytes = LinearWorkspaceBytes(params, mode, options);
    auto workspace = DeviceBuffer::Allocate(workspace_bytes + kGuardBytes);
    EXPECT_TRUE(workspace.ok()) << workspace.status();
    if (!workspace.ok()) return {};
    EXPECT_EQ(cudaMemset(workspace->data(), 0xFF, workspace->bytes()), cudaSuccess);
    FinishUploads();
    const absl::Status status =
        Linear(handle_, params, mode, x, weights, y.as<float>(),
               workspace_bytes == 0 ? nullptr : workspace->data(), stream_.get(), options);
    EXPECT_TRUE(status.ok()) << status;
    EXPECT_TRUE(stream_.Synchronize().ok());
    std::vector<float> out = ToHost(y, count + kGuardFloats);
    EXPECT_TRUE(AllPoisoned(out.data() + count, kGuardFloats)) << "wrote past the output";
    const std::vector<unsigned char> tail =
        BytesAt(workspace->as<unsigned char>() + workspace_bytes, kGuardBytes);
    for (unsigned char byte : tail) {
      if (byte != 0xFF) {
        ADD_FAILURE() << "wrote past the workspace of " << workspace_bytes << " bytes";
        break;
      }
    }
    out.resize(count);
    return out;
  }

};

// Odd, non-square shapes in both modes against cpu::Linear (float32
// sgemm) and, where it is quick, the float64 reference. The handle is left
// in TF32 math mode on purpose: kFp32 must not pick TF32 up from it (with
// F_in = 8192 a TF32 product misses the fp32 tolerance by two orders).
TEST_F(CudaLinearTest, MatchesCpuAndFloat64ReferenceOnOddShapes) {
  ASSERT_EQ(cublasSetMathMode(handle_, CUBLAS_TF32_TENSOR_OP_MATH), CUBLAS_STATUS_SUCCESS);
  ThreadPool& pool = ThreadPool::Default();
  uint64_t seed = 1;
  for (int64_t batch : {1, 3, 65}) {
    for (int64_t in_features : {17, 64, 8192}) {
      for (int64_t out_features : {33, 8192}) {
        LinearParams params{batch, in_features, out_features};
        const float bound = 1.0f / std::sqrt(static_cast<float>(in_features));
        const std::vector<float> x = (seed % 2 == 0)
                                         ? reference::RandomNormal(batch * in_features, seed)
                                         : reference::RandomUniform(batch * in_features, seed);
        const std::vector<float> weight =
            reference::RandomUniform(out_features * in_features, seed + 1, -bound, bound);
        seed += 2;

        std::vector<float> cpu_y(batch * out_features);
        ASSERT_TRUE(cpu::Linear(cpu::LinearParams{batch, in_features, out_features}, x.data(),
                                weight.data(), nullptr, cpu_y.data(), pool)
                        .ok());
        const std::vector<double> cpu_expected(cpu_y.begin(), cpu_y.end());
        const bool small = batch * in_features * out_features <= (int64_t{1} << 26);
        std::vector<double> exact;
        if (small) {
          exact = reference::Linear(reference::LinearShape{batch, in_features, out_features},
                                    x.data(), weight.data(), static_cast<const float*>(nullptr));
        }
        for (MathMode mode : {MathMode::kFp32, MathMode::kTf32}) {
          SCOPED_TRACE(absl::StrCat("N=", batch, " F_in=", in_features, " F_out=", out_features,
                                    mode == MathMode::kFp32 ? " fp32" : " tf32"));
          const std::vector<float> actual = Run(params, mode, x, weight);
          const ErrorStats vs_cpu = CompareToReference(actual, cpu_expected);
          EXPECT_TRUE(vs_cpu.Within(ToleranceOf(mode))) << "vs cpu::Linear: " << vs_cpu;
          if (small) {
            const ErrorStats vs_exact = CompareToReference(actual, exact);
            EXPECT_TRUE(vs_exact.Within(ToleranceOf(mode))) << "vs float64: " << vs_exact;
          }
        }
      }
    }
  }
}

// A transposition mistake shows at once on a 2x3 by 3x4 product.
TEST_F(CudaLinearTest, ComputesRowMajorXTimesWeightTransposedExactly) {
  const LinearParams params{2, 3, 4};
  const std::vector<float> x = {1, 2, 3, 4, 5, 6};
  const std::vector<float> weight = {1, 0, 0, 0, 1, 0, 0, 0, 1, 1, 1, 1};
  const std::vector<float> expected = {1, 2, 3, 6, 4, 5, 6, 15};
  EXPECT_EQ(Run(params, MathMode::kFp32, x, weight), expected);
}

TEST(CudaLinearValidationTest, RejectsInvalidSizesAndNullPointers) {
  EXPECT_TRUE(ValidateLinearParams(LinearParams{1, 1, 1}).ok());
  EXPECT_EQ(ValidateLinearParams(LinearParams{0, 4, 4}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateLinearParams(LinearParams{4, 0, 4}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateLinearParams(LinearParams{4, 4, 0}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateLinearParams(LinearParams{int64_t{1} << 31, 4, 4}).code(),
            absl::StatusCode::kInvalidArgument);
  float dummy = 0.0f;
  EXPECT_EQ(Linear(nullptr, LinearParams{1, 1, 1}, MathMode::kFp32, &dummy,
                   LinearWeights{&dummy, nullptr}, &dummy, nullptr, nullptr)
                .code(),
            absl::StatusCode::kInvalidArgument);
}

// The algorithm kAuto resolves to in these tests' shapes (in_features a
// multiple of 4, cudaMalloc-aligned operands, a prepared 3xTF32 weight),
// as linear.h states the rule.
LinearAlgorithm AutoChoice(const LinearParams& p, MathMode mode) {
  if (mode == MathMode::kFp32 && p.batch >= kSkinnyAutoMinBatch &&
      p.batch <= kSkinnyAutoMaxBatch && p.in_features % kSkinnyLinearStageColumns == 0) {
    return LinearAlgorithm::kSkinny;
  }
  const int64_t small_batch_max =
      mode == MathMode::kFp32 ? kSmallBatchLinearMaxBatch : kSmallBatchTf32MaxBatch;
  if (p.batch <= small_batch_max) return LinearAlgorithm::kSmallBatch;
  if (mode == MathMode::kFp32 && p.batch >= kTf32x3MinBatch && Tf32x3Slices(p.in_features) > 0) {
    return LinearAlgorithm::kTf32x3;
  }
  return LinearAlgorithm::kSgemm;
}

struct AlgorithmCase {
  MathMode mode;
  LinearOptions options;
  LinearAlgorithm runs;  // what SelectLinearAlgorithm resolves options to

  std::string ToString() const {
    std::string name = absl::StrCat(AlgorithmName(options.algorithm), " ", ModeName(mode));
    if (runs == LinearAlgorithm::kTf32x3) {
      absl::StrAppend(&name, " slices ", options.tf32x3_slices);
    }
    return name;
  }
};

// Each algorithm the shape admits, forced, in each mode it runs in (3xTF32
// with 1 and 2 slices and the default), and kAuto in both modes.
std::vector<AlgorithmCase> AlgorithmCasesFor(const LinearParams& p) {
  std::vector<AlgorithmCase> cases;
  for (MathMode mode : {MathMode::kFp32, MathMode::kTf32}) {
    if (p.batch <= kSmallBatchLinearMaxBatch) {
      cases.push_back({mode, Forced(LinearAlgorithm::kSmallBatch), LinearAlgorithm::kSmallBatch});
    }
    if (p.batch <= kSkinnyLinearMaxBatch && p.in_features % kSkinnyLinearStageColumns == 0) {
      cases.push_back({mode, Forced(LinearAlgorithm::kSkinny), LinearAlgorithm::kSkinny});
    }
    cases.push_back({mode, Forced(LinearAlgorithm::kSgemm), LinearAlgorithm::kSgemm});
    cases.push_back({mode, LinearOptions{}, AutoChoice(p, mode)});
  }
  for (int64_t slices : {1, 2, 0}) {
    if (slices == 0 || p.in_features % slices == 0) {
      cases.push_back(
          {MathMode::kFp32, Forced(LinearAlgorithm::kTf32x3, slices), LinearAlgorithm::kTf32x3});
    }
  }
  return cases;
}

// Every algorithm forced explicitly against the float64 reference at its
// mode's tolerance, on U[0,1) and N(0,1) inputs with PyTorch-like weights
// U(-1/sqrt(F_in), 1/sqrt(F_in)): 3xTF32 on shapes with 2 and 4 default
// slices (the slices of 3000 are 750 long: cuBLAS's K slices start at
// offsets that are not multiples of 4), odd F_out, every small batch, and
// skinny batches (padded and not, in one slice and split).
TEST_F(CudaLinearTest, EachAlgorithmMeetsItsModeToleranceAgainstFloat64) {
  std::vector<LinearParams> shapes = {{130, 2048, 300}, {131, 3000, 77},   {16, 4096, 257},
                                      {64, 1024, 130},  {kSkinnyAutoMinBatch, 192, 33}};
  for (int64_t batch = 1; batch <= kSmallBatchLinearMaxBatch; ++batch) {
    shapes.push_back({batch, 4096, 257});
  }
  uint64_t seed = 300;
  for (const LinearParams& p : shapes) {
    const float bound = 1.0f / std::sqrt(static_cast<float>(p.in_features));
    const std::vector<float> weight =
        reference::RandomUniform(p.out_features * p.in_features, seed++, -bound, bound);
    std::vector<float> prepared(Tf32x3WeightSize(p));
    ASSERT_TRUE(PrepareTf32x3Weight(p, weight.data(), prepared.data()).ok());
    DeviceBuffer dw = ToDevice(weight);
    DeviceBuffer dprepared = ToDevice(prepared);
    const LinearWeights weights{dw.as<float>(), dprepared.as<float>()};
    for (bool normal : {false, true}) {
      const std::vector<float> x = normal ? reference::RandomNormal(p.batch * p.in_features, seed++)
                                          : reference::RandomUniform(p.batch * p.in_features, seed++);
      DeviceBuffer dx = ToDevice(x);
      const std::vector<double> expected =
          reference::Linear(reference::LinearShape{p.batch, p.in_features, p.out_features},
                            x.data(), weight.data(), static_cast<const float*>(nullptr));
      for (const AlgorithmCase& c : AlgorithmCasesFor(p)) {
        SCOPED_TRACE(absl::StrCat("N=", p.batch, " F_in=", p.in_features, " F_out=",
                                  p.out_features, normal ? " N(0,1) " : " U[0,1) ", c.ToString()));
        const absl::StatusOr<LinearAlgorithm> runs =
            SelectLinearAlgorithm(p, c.mode, dx.as<float>(), weights, c.options);
        ASSERT_TRUE(runs.ok()) << runs.status();
        EXPECT_EQ(*runs, c.runs) << AlgorithmName(*runs);
        const ErrorStats error = CompareToReference(
            RunWithOptions(p, c.mode, dx.as<float>(), weights, c.options), expected);
        EXPECT_TRUE(error.Within(ToleranceOf(c.mode))) << error;
      }
    }
  }
}

// Arguments an algorithm cannot run are rejected before anything is
// enqueued: the output stays poisoned.
TEST_F(CudaLinearTest, RejectsWhatCannotRunWithoutWritingTheOutput) {
  const LinearParams p{130, 1024, 20};
  const std::vector<float> weight = reference::RandomUniform(p.out_features * p.in_features, 7);
  std::vector<float> prepared(Tf32x3WeightSize(p));
  ASSERT_TRUE(PrepareTf32x3Weight(p, weight.data(), prepared.data()).ok());
  DeviceBuffer dx = ToDevice(reference::RandomUniform(p.batch * p.in_features, 8));
  DeviceBuffer dw = ToDevice(weight);
  DeviceBuffer dprepared = ToDevice(prepared);
  const int64_t count = p.batch * p.out_features;
  DeviceBuffer y = PoisonedDevice(count);
  const LinearOptions tf32x3 = Forced(LinearAlgorithm::kTf32x3);
  auto workspace = DeviceBuffer::Allocate(LinearWorkspaceBytes(p, MathMode::kFp32, tf32x3));
  ASSERT_TRUE(workspace.ok()) << workspace.status();
  const LinearWeights weights{dw.as<float>(), dprepared.as<float>()};
  void* ws = workspace->data();
  struct Case {
    const char* name;
    MathMode mode;
    const float* x;
    LinearWeights weights;
    float* y;
    void* workspace;
    LinearOptions options;
  };
  float* out = y.as<float>();
  const float* x = dx.as<float>();
  FinishUploads();
  for (const Case& c : std::vector<Case>{
           {"3xtf32 in tf32 mode", MathMode::kTf32, x, weights, out, ws, tf32x3},
           {"3xtf32 without a prepared weight", MathMode::kFp32, x,
            LinearWeights{dw.as<float>(), nullptr}, out, ws, tf32x3},
           {"3xtf32 with 3 slices of 1024", MathMode::kFp32, x, weights, out, ws,
            Forced(LinearAlgorithm::kTf32x3, 3)},
           {"3xtf32 without a workspace", MathMode::kFp32, x, weights, out, nullptr, tf32x3},
           {"3xtf32 with a misaligned workspace", MathMode::kFp32, x, weights, out,
            static_cast<char*>(ws) + 4, tf32x3},
           {"small batch at batch 130", MathMode::kFp32, x, weights, out, ws,
            Forced(LinearAlgorithm::kSmallBatch)},
           {"skinny at batch 130", MathMode::kFp32, x, weights, out, ws,
            Forced(LinearAlgorithm::kSkinny)},
           {"null x", MathMode::kFp32, nullptr, weights, out, ws, LinearOptions{}},
           {"null weight", MathMode::kFp32, x, LinearWeights{nullptr, dprepared.as<float>()}, out,
            ws, LinearOptions{}},
           {"null y", MathMode::kFp32, x, weights, nullptr, ws, LinearOptions{}}}) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(
        Linear(handle_, p, c.mode, c.x, c.weights, c.y, c.workspace, stream_.get(), c.options)
            .code(),
        absl::StatusCode::kInvalidArgument);
  }
  ASSERT_TRUE(stream_.Synchronize().ok());
  const std::vector<float> host = ToHost(y, count);
  EXPECT_TRUE(AllPoisoned(host.data(), count));
}

// Host pointers stand in for device ones in the selection tests: only their
// addresses are read.
alignas(16) const float kBuffer[64] = {};
const float* const kX = kBuffer;
const LinearWeights kPrepared{kBuffer + 16, kBuffer + 32};
const LinearWeights kUnprepared{kBuffer + 16, nullptr};

absl::StatusOr<LinearAlgorithm> Select(int64_t batch, int64_t in_features, MathMode mode,
                                       const LinearWeights& weights = kPrepared,
                                       const LinearOptions& options = {},
                                       const float* x = kX) {
  return SelectLinearAlgorithm(LinearParams{batch, in_features, 64}, mode, x, weights, options);
}

// A status or value printed for failure messages.
std::string Describe(const absl::StatusOr<LinearAlgorithm>& selected) {
  return selected.ok() ? AlgorithmName(*selected) : selected.status().ToString();
}

void ExpectSelects(const absl::StatusOr<LinearAlgorithm>& selected, LinearAlgorithm expected) {
  EXPECT_TRUE(selected.ok() && *selected == expected)
      << "selected " << Describe(selected) << ", expected " << AlgorithmName(expected);
}

void ExpectInvalid(const absl::StatusOr<LinearAlgorithm>& selected) {
  EXPECT_EQ(selected.status().code(), absl::StatusCode::kInvalidArgument) << Describe(selected);
}

TEST(LinearAlgorithmTest, Tf32x3SlicesAreTheFewestPowerOfTwoWithinTheMaxSliceLength) {
  EXPECT_EQ(Tf32x3Slices(1), 1);
  EXPECT_EQ(Tf32x3Slices(1024), 1);
  EXPECT_EQ(Tf32x3Slices(1030), 2);
  EXPECT_EQ(Tf32x3Slices(2048), 2);
  EXPECT_EQ(Tf32x3Slices(3000), 4);
  EXPECT_EQ(Tf32x3Slices(8192), 8);
  EXPECT_EQ(Tf32x3Slices(12288), 16);
  // No power of two both divides these and cuts them to <= 1024.
  EXPECT_EQ(Tf32x3Slices(1025), 0);
  EXPECT_EQ(Tf32x3Slices(2050), 0);
  for (int64_t in_features : {1, 1024, 1030, 2048, 3000, 8192, 12288}) {
    const int64_t slices = Tf32x3Slices(in_features);
    EXPECT_EQ(in_features % slices, 0) << in_features;
    EXPECT_LE(in_features / slices, kTf32x3MaxSliceLength) << in_features;
  }
}

TEST(LinearAlgorithmTest, AutoPicksSmallBatchUpToEightAlignedRowsWhereSkinnyDoesNot) {
  for (int64_t batch = 1; batch <= kSmallBatchLinearMaxBatch; ++batch) {
    for (MathMode mode : {MathMode::kFp32, MathMode::kTf32}) {
      for (const LinearWeights& weights : {kPrepared, kUnprepared}) {
        SCOPED_TRACE(absl::StrCat("batch ", batch, " ", ModeName(mode)));
        // kTf32 leaves batches past kSmallBatchTf32MaxBatch to one TF32 pass;
        // kFp32 gives those from kSkinnyAutoMinBatch to kSkinny where it runs
        // (in_features 8192, not 4).
        const LinearAlgorithm expected =
            mode == MathMode::kTf32 && batch > kSmallBatchTf32MaxBatch ? LinearAlgorithm::kSgemm
                                                                      : LinearAlgorithm::kSmallBatch;
        const LinearAlgorithm expected_8192 =
            mode == MathMode::kFp32 && batch >= kSkinnyAutoMinBatch ? LinearAlgorithm::kSkinny
                                                                    : expected;
        ExpectSelects(Select(batch, 8192, mode, weights), expected_8192);
        ExpectSelects(Select(batch, 4, mode, weights), expected);
      }
    }
  }
}

TEST(LinearAlgorithmTest, AutoPicksSkinnyInFp32BetweenItsBatchBoundsOnWholeStages) {
  for (int64_t batch : {kSkinnyAutoMinBatch, kSmallBatchLinearMaxBatch, int64_t{16},
                        kSkinnyAutoMaxBatch}) {
    for (int64_t in_features : {8192, 64, 192}) {
      for (const LinearWeights& weights : {kPrepared, kUnprepared}) {
        SCOPED_TRACE(absl::StrCat("batch ", batch, " in_features ", in_features));
        ExpectSelects(Select(batch, in_features, MathMode::kFp32, weights),
                      LinearAlgorithm::kSkinny);
        // kTf32 keeps its own rule (kSmallBatch, then one TF32 pass):
        // kSkinny is only taken when pinned there.
        ExpectSelects(Select(batch, in_features, MathMode::kTf32, weights),
                      batch <= kSmallBatchTf32MaxBatch ? LinearAlgorithm::kSmallBatch
                                                       : LinearAlgorithm::kSgemm);
      }
    }
  }
}

TEST(LinearAlgorithmTest, AutoPicksSgemmWhereSmallBatchAndSkinnyCannotRunBelowTf32x3MinBatch) {
  ExpectSelects(Select(kSmallBatchLinearMaxBatch + 1, 8192, MathMode::kTf32),
                LinearAlgorithm::kSgemm);
  ExpectSelects(Select(16, 1000, MathMode::kFp32), LinearAlgorithm::kSgemm);  // not whole stages
  ExpectSelects(Select(16, 8192, MathMode::kFp32, kPrepared, {}, kX + 1), LinearAlgorithm::kSgemm);
  for (MathMode mode : {MathMode::kFp32, MathMode::kTf32}) {
    SCOPED_TRACE(ModeName(mode));
    ExpectSelects(Select(kSkinnyAutoMaxBatch + 1, 8192, mode), LinearAlgorithm::kSgemm);
    ExpectSelects(Select(kSkinnyLinearMaxBatch + 1, 8192, mode), LinearAlgorithm::kSgemm);
    ExpectSelects(Select(kTf32x3MinBatch - 1, 8192, mode), LinearAlgorithm::kSgemm);
    ExpectSelects(Select(1, 1030, mode), LinearAlgorithm::kSgemm);  // in_features % 4 == 2
    ExpectSelects(Select(1, 1027, mode), LinearAlgorithm::kSgemm);
    ExpectSelects(Select(1, 8192, mode, kPrepared, {}, kX + 1), LinearAlgorithm::kSgemm);
    ExpectSelects(Select(1, 8192, mode, LinearWeights{kBuffer + 17, kBuffer + 32}),
                  LinearAlgorithm::kSgemm);
  }
}

TEST(LinearAlgorithmTest, AutoPicksTf32x3InFp32FromMinBatchWithAPreparedWeight) {
  for (int64_t batch : {kTf32x3MinBatch, int64_t{1024}}) {
    for (int64_t in_features : {8192, 3000, 1030, 1024, 4}) {
      SCOPED_TRACE(absl::StrCat("batch ", batch, " in_features ", in_features));
      ExpectSelects(Select(batch, in_features, MathMode::kFp32), LinearAlgorithm::kTf32x3);
    }
  }
  // Misaligned x does not matter to it.
  ExpectSelects(Select(kTf32x3MinBatch, 8192, MathMode::kFp32, kPrepared, {}, kX + 1),
                LinearAlgorithm::kTf32x3);
}

TEST(LinearAlgorithmTest, AutoPicksSgemmFromMinBatchWhenTf32x3CannotRun) {
  const int64_t batch = kTf32x3MinBatch;
  ExpectSelects(Select(batch, 8192, MathMode::kTf32), LinearAlgorithm::kSgemm);
  ExpectSelects(Select(batch, 8192, MathMode::kFp32, kUnprepared), LinearAlgorithm::kSgemm);
  ExpectSelects(Select(batch, 1025, MathMode::kFp32), LinearAlgorithm::kSgemm);  // no slices
  ExpectSelects(Select(batch, 2050, MathMode::kFp32), LinearAlgorithm::kSgemm);  // no slices
  // An explicit slice count that does not divide in_features.
  ExpectSelects(Select(batch, 1024, MathMode::kFp32, kPrepared, Forced(LinearAlgorithm::kAuto, 3)),
                LinearAlgorithm::kSgemm);
}

TEST(LinearAlgorithmTest, ExplicitAlgorithmsRunWhereTheirConditionsHold) {
  for (MathMode mode : {MathMode::kFp32, MathMode::kTf32}) {
    SCOPED_TRACE(ModeName(mode));
    // kSgemm runs anything, also what kAuto would give to another algorithm.
    ExpectSelects(Select(1, 8192, mode, kPrepared, Forced(LinearAlgorithm::kSgemm)),
                  LinearAlgorithm::kSgemm);
    ExpectSelects(Select(1024, 8192, mode, kPrepared, Forced(LinearAlgorithm::kSgemm)),
                  LinearAlgorithm::kSgemm);
    ExpectSelects(Select(1, 1025, mode, kUnprepared, Forced(LinearAlgorithm::kSgemm), kX + 1),
                  LinearAlgorithm::kSgemm);
    ExpectSelects(Select(8, 4, mode, kUnprepared, Forced(LinearAlgorithm::kSmallBatch)),
                  LinearAlgorithm::kSmallBatch);
    ExpectSelects(Select(1, 64, mode, kUnprepared, Forced(LinearAlgorithm::kSkinny)),
                  LinearAlgorithm::kSkinny);
    ExpectSelects(
        Select(kSkinnyLinearMaxBatch, 8192, mode, kPrepared, Forced(LinearAlgorithm::kSkinny)),
        LinearAlgorithm::kSkinny);
  }
  // kTf32x3 below kTf32x3MinBatch, and with slice counts other than the
  // default, including one longer than kTf32x3MaxSliceLength.
  ExpectSelects(Select(1, 8192, MathMode::kFp32, kPrepared, Forced(LinearAlgorithm::kTf32x3)),
                LinearAlgorithm::kTf32x3);
  ExpectSelects(Select(130, 2048, MathMode::kFp32, kPrepared, Forced(LinearAlgorithm::kTf32x3, 1)),
                LinearAlgorithm::kTf32x3);
  ExpectSelects(Select(130, 1024, MathMode::kFp32, kPrepared, Forced(LinearAlgorithm::kTf32x3, 4)),
                LinearAlgorithm::kTf32x3);
  ExpectSelects(Select(130, 1025, MathMode::kFp32, kPrepared, Forced(LinearAlgorithm::kTf32x3, 5)),
                LinearAlgorithm::kTf32x3);
}

TEST(LinearAlgorithmTest, ExplicitAlgorithmsThatCannotRunAreInvalidArguments) {
  const LinearOptions tf32x3 = Forced(LinearAlgorithm::kTf32x3);
  ExpectInvalid(Select(130, 8192, MathMode::kTf32, kPrepared, tf32x3));
  ExpectInvalid(Select(130, 8192, MathMode::kFp32, kUnprepared, tf32x3));
  ExpectInvalid(Select(130, 1024, MathMode::kFp32, kPrepared, Forced(LinearAlgorithm::kTf32x3, 3)));
  ExpectInvalid(
      Select(130, 1024, MathMode::kFp32, kPrepared, Forced(LinearAlgorithm::kTf32x3, 2048)));
  ExpectInvalid(Select(130, 1025, MathMode::kFp32, kPrepared, tf32x3));  // no default slices
  const LinearOptions small_batch = Forced(LinearAlgorithm::kSmallBatch);
  for (MathMode mode : {MathMode::kFp32, MathMode::kTf32}) {
    SCOPED_TRACE(ModeName(mode));
    ExpectInvalid(Select(kSmallBatchLinearMaxBatch + 1, 8192, mode, kPrepared, small_batch));
    ExpectInvalid(Select(1, 1030, mode, kPrepared, small_batch));
    ExpectInvalid(Select(1, 8192, mode, kPrepared, small_batch, kX + 1));
    ExpectInvalid(Select(1, 8192, mode, LinearWeights{kBuffer + 18, nullptr}, small_batch));
    const LinearOptions skinny = Forced(LinearAlgorithm::kSkinny);
    ExpectInvalid(Select(kSkinnyLinearMaxBatch + 1, 8192, mode, kPrepared, skinny));
    ExpectInvalid(Select(16, 1000, mode, kPrepared, skinny));
    ExpectInvalid(Select(16, 32, mode, kPrepared, skinny));
    ExpectInvalid(Select(16, 8192, mode, kPrepared, skinny, kX + 2));
    ExpectInvalid(Select(16, 8192, mode, LinearWeights{kBuffer + 17, nullptr}, skinny));
  }
}

TEST(LinearAlgorithmTest, RejectsInvalidSizesModesAndAlgorithms) {
  ExpectInvalid(Select(0, 8192, MathMode::kFp32));
  ExpectInvalid(Select(1, 0, MathMode::kFp32));
  ExpectInvalid(SelectLinearAlgorithm(LinearParams{1, 8, 0}, MathMode::kFp32, kX, kPrepared));
  ExpectInvalid(Select(1, 8192, static_cast<MathMode>(7)));
  ExpectInvalid(Select(1, 8192, MathMode::kFp32, kPrepared,
                       Forced(static_cast<LinearAlgorithm>(7))));
}

TEST(LinearWorkspaceTest, SmallBatchAndSgemmNeedNone) {
  for (const LinearParams& p : std::vector<LinearParams>{
           {1, 4, 1}, {8, 4096, 257}, {130, 2048, 300}, {1024, 8192, 8192}}) {
    SCOPED_TRACE(absl::StrCat(p.batch, "x", p.in_features, "x", p.out_features));
    const MathMode fp32 = MathMode::kFp32;
    EXPECT_EQ(LinearWorkspaceBytes(p, fp32, Forced(LinearAlgorithm::kSmallBatch)), 0u);
    EXPECT_EQ(LinearWorkspaceBytes(p, fp32, Forced(LinearAlgorithm::kSgemm)), 0u);
  }
}

// Room for the split x [N, 2 F_in] and a [N, F_out] partial per slice,
// whether kTf32x3 is forced or kAuto may pick it (kFp32).
TEST(LinearWorkspaceTest, Tf32x3HoldsTheSplitInputAndTheSlicePartials) {
  for (const LinearParams& p : std::vector<LinearParams>{
           {1, 8, 3}, {130, 2048, 300}, {131, 3000, 77}, {1024, 8192, 8192}}) {
    for (int64_t slices : {0, 1, 2}) {
      SCOPED_TRACE(absl::StrCat(p.batch, "x", p.in_features, "x", p.out_features, " slices ",
                                slices));
      const int64_t used = slices > 0 ? slices : Tf32x3Slices(p.in_features);
      const size_t needed = static_cast<size_t>(p.batch * 2 * p.in_features +
                                                used * p.batch * p.out_features) *
                            sizeof(float);
      const MathMode fp32 = MathMode::kFp32;
      EXPECT_GE(LinearWorkspaceBytes(p, fp32, Forced(LinearAlgorithm::kTf32x3, slices)), needed);
      EXPECT_GE(LinearWorkspaceBytes(p, fp32, Forced(LinearAlgorithm::kAuto, slices)), needed);
    }
  }
}

// The K-slice partials of the largest batch kSkinny may run at or below
// params.batch, whether kSkinny is forced (either mode) or kAuto may pick
// it (kFp32).
TEST(LinearWorkspaceTest, SkinnyHoldsItsSlicePartials) {
  for (const LinearParams& p : std::vector<LinearParams>{
           {1, 256, 131}, {16, 8192, 8192}, {64, 4096, 257}, {1024, 8192, 8192}}) {
    SCOPED_TRACE(absl::StrCat(p.batch, "x", p.in_features, "x", p.out_features));
    const size_t needed = SkinnyLinearWorkspaceBytes(std::min(p.batch, kSkinnyLinearMaxBatch),
                                                     p.in_features, p.out_features);
    ASSERT_GT(needed, 0u);
    for (MathMode mode : {MathMode::kFp32, MathMode::kTf32}) {
      EXPECT_EQ(LinearWorkspaceBytes(p, mode, Forced(LinearAlgorithm::kSkinny)), needed);
    }
    EXPECT_GE(LinearWorkspaceBytes(p, MathMode::kFp32), needed);
  }
  // One slice: straight into y.
  EXPECT_EQ(LinearWorkspaceBytes(LinearParams{16, 192, 5}, MathMode::kFp32,
                                 Forced(LinearAlgorithm::kSkinny)),
            0u);
}

// kTf32 never runs kTf32x3 or kSkinny on its own, so kAuto reserves nothing there.
TEST(LinearWorkspaceTest, Tf32ModeNeedsNone) {
  EXPECT_EQ(LinearWorkspaceBytes(LinearParams{1024, 8192, 8192}, MathMode::kTf32), 0u);
  EXPECT_GT(LinearWorkspaceBytes(LinearParams{1024, 8192, 8192}, MathMode::kFp32), 0u);
}

TEST(LinearWorkspaceTest, InvalidSizesNeedNone) {
  EXPECT_EQ(LinearWorkspaceBytes(LinearParams{0, 8192, 8192}, MathMode::kFp32,
                                 Forced(LinearAlgorithm::kTf32x3)),
            0u);
  EXPECT_EQ(LinearWorkspaceBytes(LinearParams{130, 8192, 0}, MathMode::kFp32), 0u);
}

// Row o of the prepared weight is [small(W[o]) | big(W[o])]: big a TF32
// value (low 13 mantissa bits zero) within half a TF32 unit of W, small
// the exact rest.
TEST(Tf32x3WeightTest, PreparedRowsHoldTheSmallThenTheBigHalf) {
  const LinearParams p{1, 5, 3};
  const std::vector<float> weight = reference::RandomNormal(p.out_features * p.in_features, 9);
  ASSERT_EQ(Tf32x3WeightSize(p), 2 * p.out_features * p.in_features);
  std::vector<float> prepared(Tf32x3WeightSize(p), std::nanf(""));
  ASSERT_TRUE(PrepareTf32x3Weight(p, weight.data(), prepared.data()).ok());
  for (int64_t o = 0; o < p.out_features; ++o) {
    for (int64_t i = 0; i < p.in_features; ++i) {
      const float w = weight[o * p.in_features + i];
      const float small = prepared[o * 2 * p.in_features + i];
      const float big = prepared[o * 2 * p.in_features + p.in_features + i];
      SCOPED_TRACE(absl::StrCat("o ", o, " i ", i, ": w ", w, " big ", big, " small ", small));
      EXPECT_EQ(Bits(big) & 0x1fffu, 0u);
      EXPECT_EQ(big + small, w);
      EXPECT_LE(std::fabs(small), std::ldexp(std::fabs(w), -11));
    }
  }
}

TEST(Tf32x3WeightTest, RejectsInvalidSizesAndNullPointers) {
  float weight[4] = {};
  float prepared[8] = {};
  EXPECT_EQ(Tf32x3WeightSize(LinearParams{1, 0, 4}), 0);
  EXPECT_EQ(PrepareTf32x3Weight(LinearParams{1, 0, 4}, weight, prepared).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PrepareTf32x3Weight(LinearParams{1, 2, 2}, nullptr, prepared).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PrepareTf32x3Weight(LinearParams{1, 2, 2}, weight, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace fuseserve::cuda
