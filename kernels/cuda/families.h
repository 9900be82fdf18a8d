#pragma once

// The three model families composed from the GPU ops, exactly as a GPU
// instance runs them on its stream (and as bench/ times them): no
// synchronisation, no allocation — the caller provides device buffers and
// the workspace.

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda/bias_hardtanh_mish_group_norm.h"
#include "kernels/cuda/conv_transpose2d_gelu.h"
#include "kernels/cuda/group_norm.h"
#include "kernels/cuda/linear.h"
#include "kernels/cuda/math_mode.h"

namespace fuseserve::cuda {

// convtranspose_gelu_groupnorm
//
// Where the GroupNorm runs. kAfter: a pass over the convolution's output
// once the convolution has finished (GroupNormApply). kConcurrent: beside
// the convolution, on multiprocessors it leaves free, each sample as soon as
// the convolution has written it (group_norm_concurrent.h); needs the wgmma
// convolution (ConvTranspose2dGivesSampleSignals) and
// GroupNormConcurrentSupports. kAuto: kConcurrent where it serves and the
// batch is at least kMinConcurrentGroupNormBatch, kAfter otherwise. Both give
// bitwise the same output.
enum class ConvGroupNormSchedule { kAuto, kAfter, kConcurrent };
struct ConvFamilyOptions {
  ConvGroupNormSchedule schedule = ConvGroupNormSchedule::kAuto;
  // kConcurrent: multiprocessors the convolution leaves to the GroupNorm;
  // 0: kDefaultGroupNormMultiprocessors.
  int group_norm_multiprocessors = 0;
};
inline constexpr int64_t kMinConcurrentGroupNormBatch = 8;
// 24 of the 132 of an H100 or H200 at the reference shape
// (bench/kernel_notes.md v20-v21: 16 was best while the convolution gathered
// its input by 4-byte copies; with row copies it runs faster and the
// normaliser needs more room to keep up: 20 and 24 alike on an H100, 24
// ~1.5% faster than 20 on an H200).
inline constexpr int kDefaultGroupNormMultiprocessors = 24;

struct ConvFamilyParams {
  ConvTranspose2dParams conv;
  int64_t num_groups = 0;
  float eps = 1e-5f;
  MathMode mode = MathMode::kTf32;
  ConvFamilyOptions options;  // kAuto unless a benchmark or test pins one
};
struct ConvFamilyWeights {
  const float* prepared_weight = nullptr;  // PrepareConvTransposeWeight layout
  const float* bias = nullptr;
  const float* gn_weight = nullptr;
  const float* gn_bias = nullptr;
};
size_t ConvFamilyWorkspaceBytes(const ConvFamilyParams& params);
absl::Status RunConvFamily(const ConvFamilyParams& params, const ConvFamilyWeights& weights,
                           const float* input, float* output, void* workspace,
                           cudaStream_t stream);

// gemm_bias_hardtanh_mish_groupnorm
struct GemmFamilyParams {
  LinearParams linear;
  BiasHardtanhMishGroupNormParams epilogue;  // batch/channels equal linear's
  MathMode mode = MathMode::kFp32;
  LinearOptions linear_options;  // kAuto unless a benchmark or test pins one
};
struct GemmFamilyWeights {
  const float* weight = nullptr;         // [F_out, F_in]
  const float* tf32x3_weight = nullptr;  // PrepareTf32x3Weight layout (kFp32), or null
  const float* gemm_bias = nullptr;
  const float* bias = nullptr;
  const float* gn_weight = nullptr;
  const float* gn_bias = nullptr;
};
// The linear's scratch (linear.h LinearWorkspaceBytes).
size_t GemmFamilyWorkspaceBytes(const GemmFamilyParams& params);
// `handle` is bound to `stream` by the caller.
absl::Status RunGemmFamily(cublasHandle_t handle, const GemmFamilyParams& params,
                           const GemmFamilyWeights& weights, const float* input, float* output,
                           void* workspace, cudaStream_t stream);

// groupnorm
size_t GroupNormFamilyWorkspaceBytes(const GroupNormParams& params);
absl::Status RunGroupNormFamily(const GroupNormParams& params, const float* gn_weight,
                                const float* gn_bias, const float* input, float* output,
                                void* workspace, cudaStream_t stream,
                                const GroupNormOptions& options = {});

}  // namespace fuseserve::cuda
