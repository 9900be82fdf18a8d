#include "kernels/cuda/linear.h"

#include <cublas_v2.h>

#include <cstdint>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace fuseserve::cuda {
namespace {

absl::Status CublasStatus(cublasStatus_t status, const char* what) {
  if (status == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cublasGetStatusName(status), " (",
                                          cublasGetStatusString(status), ")"));
}

}  // namespace

absl::Status ValidateLinearParams(const LinearParams& params) {
  constexpr int64_t kMaxInt = std::numeric_limits<int>::max();
  if (params.batch < 1 || params.in_features < 1 || params.out_features < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("Linear sizes must be >= 1: batch ", params.batch, ", in_features ",
                     params.in_features, ", out_features ", params.out_features));
  }
  if (params.batch > kMaxInt || params.in_features > kMaxInt || params.out_features > kMaxInt) {
    return absl::InvalidArgumentError("Linear sizes must fit cuBLAS's 32-bit integers");
  }
  return absl::OkStatus();
}

// Row-major y[N, F_out] = x[N, F_in] W^T is, read column-major,
// y^T[F_out, N] = W^T^T x^T: cuBLAS sees W's storage as the column-major
// [F_in, F_out] matrix (lda = F_in) and transposes it (OP_T), and x's storage
// as the column-major [F_in, N] matrix (ldb = F_in) untransposed; the result
// is column-major [F_out, N] with ldc = F_out, i.e. row-major y.
absl::Status Linear(cublasHandle_t handle, const LinearParams& params, MathMode mode,
                    const float* x, const float* weight, float* y) {
  RETURN_IF_ERROR(ValidateLinearParams(params));
  if (handle == nullptr || x == nullptr || weight == nullptr || y == nullptr) {
    return absl::InvalidArgumentError("Linear: handle, x, weight and y must be non-null");
  }
  cublasComputeType_t compute_type;
  switch (mode) {
    case MathMode::kFp32:
      // CUBLAS_COMPUTE_32F still takes TF32 tensor cores when the handle's
      // math mode is CUBLAS_TF32_TENSOR_OP_MATH, so the mode is pinned here.
      compute_type = CUBLAS_COMPUTE_32F;
      RETURN_IF_ERROR(
          CublasStatus(cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH), "cublasSetMathMode"));
      break;
    case MathMode::kTf32:
      compute_type = CUBLAS_COMPUTE_32F_FAST_TF32;
      break;
    default:
      return absl::InvalidArgumentError("Linear: mode is not a MathMode value");
  }
  const int m = static_cast<int>(params.out_features);
  const int n = static_cast<int>(params.batch);
  const int k = static_cast<int>(params.in_features);
  // alpha and beta live on the host.
  RETURN_IF_ERROR(
      CublasStatus(cublasSetPointerMode(handle, CUBLAS_POINTER_MODE_HOST), "cublasSetPointerMode"));
  const float alpha = 1.0f;
  const float beta = 0.0f;
  return CublasStatus(
      cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, weight, CUDA_R_32F, k, x,
                   CUDA_R_32F, k, &beta, y, CUDA_R_32F, m, compute_type, CUBLAS_GEMM_DEFAULT),
      "cublasGemmEx");
}

}  // namespace fuseserve::cuda
