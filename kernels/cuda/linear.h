#pragma once

// y[N, F_out] = x[N, F_in] · W^T (W is PyTorch's [F_out, F_in]) on the GPU,
// in the precision asked for (math_mode.h). The bias is left to the
// epilogue. Algorithms (SelectLinearAlgorithm picks one for kAuto):
//  - kSmallBatch: our FFMA kernel for small N, one read of W
//    (small_batch_linear.h); float32-exact, used in both modes (kTf32 only
//    up to kSmallBatchTf32MaxBatch, where one TF32 pass overtakes it);
//  - kSkinny: our 3xTF32 tensor-core kernel for serving batches up to
//    kSkinnyLinearMaxBatch, one read of W, K split over CTAs
//    (skinny_linear.h); float32 accuracy, kAuto's choice in kFp32 from
//    kSkinnyAutoMinBatch to kSkinnyAutoMaxBatch;
//  - kSgemm: cuBLAS, CUBLAS_COMPUTE_32F (FFMA) for kFp32, one TF32 pass
//    (CUBLAS_COMPUTE_32F_FAST_TF32) for kTf32;
//  - kTf32x3 (kFp32 only): 3xTF32 on cuBLAS's TF32 tensor cores. x is split
//    into big + small TF32 halves per call (workspace), W once at load
//    (PrepareTf32x3Weight: each row [W_small | W_big]). One GEMM over the
//    concatenated K gives x_big·W_small + x_small·W_big; the large product
//    x_big·W_big runs as a strided batch over K slices of at most
//    kTf32x3MaxSliceLength, summed afterwards in float32 (AddPartials).
//    The slicing is for accuracy: the tensor cores add into their float32
//    accumulator with truncation, an error that grows with the number of
//    MMAs chained into one accumulator (SPEC's fp32 contract is rel L2
//    5e-6), so no chain of the large product is longer than one slice. The
//    small products are ~2^-11 of the result, so their chain needs no cut.

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/cuda/math_mode.h"
#include "kernels/cuda/skinny_linear.h"

namespace fuseserve::cuda {

struct LinearParams {
  int64_t batch = 0;
  int64_t in_features = 0;
  int64_t out_features = 0;
};

absl::Status ValidateLinearParams(const LinearParams& params);

enum class LinearAlgorithm { kAuto, kSmallBatch, kSgemm, kTf32x3, kSkinny };

// kAuto's largest kSmallBatch batch in kTf32 mode (kFp32:
// kSmallBatchLinearMaxBatch). Measured on an H200 at 8192x8192: the kernel
// takes 0.077 ms at batch 1 and 0.142 at 8, cuBLAS's one TF32 pass ~0.11
// at any batch up to 8.
inline constexpr int64_t kSmallBatchTf32MaxBatch = 4;

// kAuto's kSkinny batches in kFp32 (below them kSmallBatch, above them
// SGEMM). Measured on an H200 at 8192x8192 (bench/kernel_notes.md, v6):
// kSkinny takes 0.092-0.094 ms from 1 to 16 rows, 0.133 at 32 and 0.207 at
// 48; kSmallBatch 0.076 at 1, 0.106 at 2 and 0.142 at 8; SGEMM 0.151 at
// 16, 0.211 at 32 and 0.213-0.214 at 48 and 64.
inline constexpr int64_t kSkinnyAutoMinBatch = 2;
inline constexpr int64_t kSkinnyAutoMaxBatch = kSkinnyLinearMaxBatch;

// Longest K run of the large 3xTF32 product chained into one accumulator.
inline constexpr int64_t kTf32x3MaxSliceLength = 1024;
// kAuto takes kTf32x3 from this batch on (kFp32, weight prepared); below it
// cuBLAS's SGEMM, which reads the weight once instead of 3 times, is as fast.
inline constexpr int64_t kTf32x3MinBatch = 128;

struct LinearOptions {
  LinearAlgorithm algorithm = LinearAlgorithm::kAuto;
  // kTf32x3: number of K slices of the large product; 0 picks
  // Tf32x3Slices(in_features). Must divide in_features.
  int64_t tf32x3_slices = 0;
};

struct LinearWeights {
  const float* weight = nullptr;         // [F_out, F_in]
  const float* tf32x3_weight = nullptr;  // PrepareTf32x3Weight layout, or null: no kTf32x3
};

// The fewest power-of-two slices (dividing in_features) that keep each
// slice within kTf32x3MaxSliceLength, or 0 when none does (then kAuto never
// picks kTf32x3).
int64_t Tf32x3Slices(int64_t in_features);

// Floats of the 3xTF32 weight: [F_out, 2 * F_in].
int64_t Tf32x3WeightSize(const LinearParams& params);
// Host, at load time: prepared row o = [W[o] - big(W[o]) | big(W[o])]
// (tf32_split.h's rounding).
absl::Status PrepareTf32x3Weight(const LinearParams& params, const float* weight,
                                 float* prepared);

// The algorithm Linear runs for these arguments; InvalidArgument when an
// explicit choice cannot run them.
absl::StatusOr<LinearAlgorithm> SelectLinearAlgorithm(const LinearParams& params, MathMode mode,
                                                      const float* x,
                                                      const LinearWeights& weights,
                                                      const LinearOptions& options = {});

// Device scratch Linear may need for `params` in `mode` with `options` (the
// split x and the slice partials of kTf32x3, the K-slice partials of
// kSkinny), for any algorithm kAuto may pick at this batch or a smaller one:
// none in kTf32, which runs neither on its own.
size_t LinearWorkspaceBytes(const LinearParams& params, MathMode mode,
                            const LinearOptions& options = {});

// `handle` must already be bound to `stream` by the caller (cublasSetStream)
// — the instance owns both. Linear sets the handle's pointer mode to host
// and its math mode to CUBLAS_DEFAULT_MATH (a TF32 math mode would
// otherwise let CUBLAS_COMPUTE_32F use TF32). workspace: at least
// LinearWorkspaceBytes(params, mode, options) bytes, 16-byte aligned (may be null
// when that is 0). cuBLAS failures come back as Internal naming the
// cublasStatus_t.
absl::Status Linear(cublasHandle_t handle, const LinearParams& params, MathMode mode,
                    const float* x, const LinearWeights& weights, float* y, void* workspace,
                    cudaStream_t stream, const LinearOptions& options = {});

}  // namespace fuseserve::cuda
