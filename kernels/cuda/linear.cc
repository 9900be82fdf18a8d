#include "kernels/cuda/linear.h"

#include <cublas_v2.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cuda/add_partials.h"
#include "kernels/cuda/alignment.h"
#include "kernels/cuda/skinny_linear.h"
#include "kernels/cuda/small_batch_linear.h"
#include "kernels/cuda/tf32_split.h"

namespace fuseserve::cuda {
namespace {

absl::Status CublasStatus(cublasStatus_t status, const char* what) {
  if (status == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cublasGetStatusName(status), " (",
                                          cublasGetStatusString(status), ")"));
}

int64_t SlicesOf(const LinearParams& params, const LinearOptions& options) {
  return options.tf32x3_slices > 0 ? options.tf32x3_slices : Tf32x3Slices(params.in_features);
}

// Floats of kTf32x3's scratch: the split x, then the slice partials.
int64_t SplitInputFloats(const LinearParams& p) { return p.batch * 2 * p.in_features; }
int64_t PartialFloats(const LinearParams& p, int64_t slices) {
  return slices * p.batch * p.out_features;
}

// Row-major C[N, F_out] = A[N, K] B[F_out, K]^T (+ beta C) as cuBLAS sees it:
// column-major C^T[F_out, N] = B^T^T A^T, B's storage being the
// column-major [K, F_out] matrix (OP_T) and A's the column-major [K, N] one.
// `lda`/`ldb` are the row strides of A and B (>= K: the 3xTF32 operands are
// halves of wider rows). Batched over `count` K slices: slice s reads A and
// B from column s * k and writes C + s * c_stride.
absl::Status RowMajorGemm(cublasHandle_t handle, cublasComputeType_t compute, int64_t n,
                          int64_t f_out, int64_t k, const float* a, int64_t lda, const float* b,
                          int64_t ldb, float beta, float* c, int64_t count = 1,
                          int64_t c_stride = 0) {
  const float alpha = 1.0f;
  if (count == 1) {
    return CublasStatus(
        cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(f_out),
                     static_cast<int>(n), static_cast<int>(k), &alpha, b, CUDA_R_32F,
                     static_cast<int>(ldb), a, CUDA_R_32F, static_cast<int>(lda), &beta, c,
                     CUDA_R_32F, static_cast<int>(f_out), compute, CUBLAS_GEMM_DEFAULT),
        "cublasGemmEx");
  }
  return CublasStatus(
      cublasGemmStridedBatchedEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(f_out),
                                 static_cast<int>(n), static_cast<int>(k), &alpha, b, CUDA_R_32F,
                                 static_cast<int>(ldb), k, a, CUDA_R_32F, static_cast<int>(lda),
                                 k, &beta, c, CUDA_R_32F, static_cast<int>(f_out), c_stride,
                                 static_cast<int>(count), compute, CUBLAS_GEMM_DEFAULT),
      "cublasGemmStridedBatchedEx");
}

absl::Status RunTf32x3(cublasHandle_t handle, const LinearParams& p, const float* x,
                       const float* prepared_weight, float* y, int64_t slices, float* workspace,
                       cudaStream_t stream) {
  float* split_x = workspace;  // row n = [big(x[n]) | small(x[n])]
  float* partials = workspace + SplitInputFloats(p);
  const int64_t k = p.in_features;
  RETURN_IF_ERROR(SplitTf32(x, p.batch, k, Tf32SplitOrder::kBigFirst, split_x, stream));
  const cublasComputeType_t tf32 = CUBLAS_COMPUTE_32F_FAST_TF32;
  // y = x_big · W_small + x_small · W_big: K = 2 F_in over both halves.
  RETURN_IF_ERROR(RowMajorGemm(handle, tf32, p.batch, p.out_features, 2 * k, split_x, 2 * k,
                               prepared_weight, 2 * k, 0.0f, y));
  // partials[s] = x_big · W_big over slice s.
  const int64_t slice = k / slices;
  RETURN_IF_ERROR(RowMajorGemm(handle, tf32, p.batch, p.out_features, slice, split_x, 2 * k,
                               prepared_weight + k, 2 * k, 0.0f, partials, slices,
                               p.batch * p.out_features));
  return AddPartials(y, partials, slices, p.batch * p.out_features, y, stream);
}

}  // namespace

absl::Status ValidateLinearParams(const LinearParams& params) {
  constexpr int64_t kMaxInt = std::numeric_limits<int>::max();
  if (params.batch < 1 || params.in_features < 1 || params.out_features < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("Linear sizes must be >= 1: batch ", params.batch, ", in_features ",
                     params.in_features, ", out_features ", params.out_features));
  }
  // 2 * in_features: the 3xTF32 operands' rows.
  if (params.batch > kMaxInt || 2 * params.in_features > kMaxInt ||
      params.out_features > kMaxInt) {
    return absl::InvalidArgumentError("Linear sizes must fit cuBLAS's 32-bit integers");
  }
  return absl::OkStatus();
}

int64_t Tf32x3Slices(int64_t in_features) {
  for (int64_t slices = 1; slices <= in_features; slices *= 2) {
    if (in_features % slices != 0) return 0;
    if (in_features / slices <= kTf32x3MaxSliceLength) return slices;
  }
  return 0;
}

int64_t Tf32x3WeightSize(const LinearParams& params) {
  if (!ValidateLinearParams(params).ok()) return 0;
  return params.out_features * 2 * params.in_features;
}

absl::Status PrepareTf32x3Weight(const LinearParams& params, const float* weight,
                                 float* prepared) {
  RETURN_IF_ERROR(ValidateLinearParams(params));
  return SplitTf32OnHost(weight, params.out_features, params.in_features,
                         Tf32SplitOrder::kSmallFirst, prepared);
}

absl::StatusOr<LinearAlgorithm> SelectLinearAlgorithm(const LinearParams& params, MathMode mode,
                                                      const float* x,
                                                      const LinearWeights& weights,
                                                      const LinearOptions& options) {
  RETURN_IF_ERROR(ValidateLinearParams(params));
  if (mode != MathMode::kFp32 && mode != MathMode::kTf32) {
    return absl::InvalidArgumentError("Linear: mode is not a MathMode value");
  }
  const bool small_batch = SmallBatchLinearSupports(params.batch, params.in_features,
                                                    params.out_features, x, weights.weight);
  const bool skinny = SkinnyLinearSupports(params.batch, params.in_features,
                                           params.out_features, x, weights.weight);
  const int64_t slices = SlicesOf(params, options);
  const bool tf32x3 = mode == MathMode::kFp32 && weights.tf32x3_weight != nullptr &&
                      slices > 0 && params.in_features % slices == 0;
  switch (options.algorithm) {
    case LinearAlgorithm::kAuto:
      if (skinny && mode == MathMode::kFp32 && params.batch >= kSkinnyAutoMinBatch &&
          params.batch <= kSkinnyAutoMaxBatch) {
        return LinearAlgorithm::kSkinny;
      }
      if (small_batch && (mode == MathMode::kFp32 || params.batch <= kSmallBatchTf32MaxBatch)) {
        return LinearAlgorithm::kSmallBatch;
      }
      if (tf32x3 && params.batch >= kTf32x3MinBatch) return LinearAlgorithm::kTf32x3;
      return LinearAlgorithm::kSgemm;
    case LinearAlgorithm::kSmallBatch:
      if (!small_batch) {
        return absl::InvalidArgumentError(absl::StrCat(
            "Linear: kSmallBatch needs batch <= ", kSmallBatchLinearMaxBatch,
            ", in_features % 4 == 0 and 16-byte aligned x and weight; batch ", params.batch,
            ", in_features ", params.in_features));
      }
      return LinearAlgorithm::kSmallBatch;
    case LinearAlgorithm::kSkinny:
      if (!skinny) {
        return absl::InvalidArgumentError(absl::StrCat(
            "Linear: kSkinny needs batch <= ", kSkinnyLinearMaxBatch, ", in_features % ",
            kSkinnyLinearStageColumns, " == 0 in K slices of at most ",
            kSkinnyLinearMaxSliceColumns, " and 16-byte aligned x and weight; batch ",
            params.batch, ", in_features ", params.in_features, ", out_features ",
            params.out_features));
      }
      return LinearAlgorithm::kSkinny;
    case LinearAlgorithm::kSgemm:
      return LinearAlgorithm::kSgemm;
    case LinearAlgorithm::kTf32x3:
      if (!tf32x3) {
        return absl::InvalidArgumentError(absl::StrCat(
            "Linear: kTf32x3 needs mode kFp32, a prepared tf32x3_weight and a slice count "
            "dividing in_features ",
            params.in_features, " (slices ", slices, ")"));
      }
      return LinearAlgorithm::kTf32x3;
  }
  return absl::InvalidArgumentError("Linear: algorithm is not a LinearAlgorithm value");
}

size_t LinearWorkspaceBytes(const LinearParams& params, MathMode mode,
                            const LinearOptions& options) {
  if (!ValidateLinearParams(params).ok()) return 0;
  const bool auto_fp32 = options.algorithm == LinearAlgorithm::kAuto && mode == MathMode::kFp32;
  size_t bytes = 0;
  if (auto_fp32 || options.algorithm == LinearAlgorithm::kSkinny) {
    // The largest batch kSkinny can run at or below params.batch.
    bytes = SkinnyLinearWorkspaceBytes(std::min(params.batch, kSkinnyLinearMaxBatch),
                                       params.in_features, params.out_features);
  }
  const int64_t slices = SlicesOf(params, options);
  if ((auto_fp32 || (options.algorithm == LinearAlgorithm::kTf32x3 && mode == MathMode::kFp32)) &&
      slices > 0) {
    bytes = std::max(bytes, static_cast<size_t>(SplitInputFloats(params) +
                                                 PartialFloats(params, slices)) *
                                sizeof(float));
  }
  return bytes;
}

absl::Status Linear(cublasHandle_t handle, const LinearParams& params, MathMode mode,
                    const float* x, const LinearWeights& weights, float* y, void* workspace,
                    cudaStream_t stream, const LinearOptions& options) {
  ASSIGN_OR_RETURN(const LinearAlgorithm algorithm,
                   SelectLinearAlgorithm(params, mode, x, weights, options));
  if (handle == nullptr || x == nullptr || weights.weight == nullptr || y == nullptr) {
    return absl::InvalidArgumentError("Linear: handle, x, weight and y must be non-null");
  }
  if (algorithm == LinearAlgorithm::kSmallBatch) {
    return SmallBatchLinear(params.batch, params.in_features, params.out_features, x,
                            weights.weight, y, stream);
  }
  if (algorithm == LinearAlgorithm::kSkinny) {
    return SkinnyLinear(params.batch, params.in_features, params.out_features, x, weights.weight,
                        y, workspace, stream);
  }
  // CUBLAS_COMPUTE_32F still takes TF32 tensor cores when the handle's math
  // mode is CUBLAS_TF32_TENSOR_OP_MATH, so the mode is pinned here.
  RETURN_IF_ERROR(
      CublasStatus(cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH), "cublasSetMathMode"));
  RETURN_IF_ERROR(
      CublasStatus(cublasSetPointerMode(handle, CUBLAS_POINTER_MODE_HOST), "cublasSetPointerMode"));
  if (algorithm == LinearAlgorithm::kTf32x3) {
    if (workspace == nullptr || !Aligned16(workspace)) {
      return absl::InvalidArgumentError(
          "Linear: kTf32x3 needs a 16-byte aligned workspace of LinearWorkspaceBytes");
    }
    return RunTf32x3(handle, params, x, weights.tf32x3_weight, y, SlicesOf(params, options),
                     static_cast<float*>(workspace), stream);
  }
  const cublasComputeType_t compute =
      mode == MathMode::kFp32 ? CUBLAS_COMPUTE_32F : CUBLAS_COMPUTE_32F_FAST_TF32;
  return RowMajorGemm(handle, compute, params.batch, params.out_features, params.in_features, x,
                      params.in_features, weights.weight, params.in_features, 0.0f, y);
}

}  // namespace fuseserve::cuda
