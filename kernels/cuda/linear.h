#pragma once

// y[N, F_out] = x[N, F_in] · W^T (W is PyTorch's [F_out, F_in]) on cuBLAS, in
// the precision asked for: kFp32 = SGEMM without TF32 (CUBLAS_COMPUTE_32F),
// kTf32 = CUBLAS_COMPUTE_32F_FAST_TF32. The bias is left to the epilogue.

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda/math_mode.h"

namespace fuseserve::cuda {

struct LinearParams {
  int64_t batch = 0;
  int64_t in_features = 0;
  int64_t out_features = 0;
};

absl::Status ValidateLinearParams(const LinearParams& params);

// `handle` must already be bound to `stream` by the caller
// (cublasSetStream) — the instance owns both. Linear sets the handle's
// pointer mode to host and, for kFp32, its math mode to CUBLAS_DEFAULT_MATH
// (a TF32 math mode would otherwise let CUBLAS_COMPUTE_32F use TF32).
// cuBLAS failures come back as Internal naming the cublasStatus_t.
absl::Status Linear(cublasHandle_t handle, const LinearParams& params, MathMode mode,
                    const float* x, const float* weight, float* y);

}  // namespace fuseserve::cuda
