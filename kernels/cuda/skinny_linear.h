#pragma once

// y[N, F_out] = x[N, F_in] · W^T for serving-sized batches (N up to 48) at
// float32 accuracy, reading the weight once. At these N a GEMM is bound by
// the weight's bytes (8192x8192: 268 MB against ~2 GFLOP at N = 16), yet
// cuBLAS's SGEMM takes ~2.4x the weight-read time there, and an FFMA kernel
// is bound by feeding x to the FMAs (bench/kernel_notes.md, v6).
//
// 3xTF32 on the tensor cores (mma.sync m16n8k8): x is the MMA's A (16 rows
// per tile, the batch padded), W's rows its B; both are split into TF32
// halves (x_big W_big into one accumulator, the cross products into
// another). A CTA of 8 warps owns 128 weight rows and one K slice; x is
// staged in shared memory in 64-column stages (cp.async, double-buffered)
// and split there once per CTA, W in registers as it is loaded. Inf and NaN
// inputs give what a float32 product gives. The K slices' partial sums go to the
// workspace and are added in slice order (add_partials.h), so the result is
// deterministic and independent of the GPU. Like linear.h's kTf32x3, no
// accumulator chains more than kSkinnyLinearMaxSliceColumns columns.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"

namespace fuseserve::cuda {

// The largest batch the kernel takes: three 16-row tiles (its accumulators
// live in registers, and its x stages in 45 KB of static shared memory).
inline constexpr int64_t kSkinnyLinearMaxBatch = 48;
// in_features must be a multiple of this (one shared-memory stage of x).
inline constexpr int64_t kSkinnyLinearStageColumns = 64;
// The most K slices a call splits into.
inline constexpr int64_t kSkinnyLinearMaxSlices = 16;
// The longest K slice (TF32 accumulators add with truncation; linear.h's
// kTf32x3MaxSliceLength is the same bound).
inline constexpr int64_t kSkinnyLinearMaxSliceColumns = 1024;

// True when SkinnyLinear runs these arguments: 1 <= batch <=
// kSkinnyLinearMaxBatch, in_features a multiple of kSkinnyLinearStageColumns
// within 32-bit indexing whose slices (SkinnyLinearSlices) are at most
// kSkinnyLinearMaxSliceColumns long, x and weight 16-byte aligned and
// non-null.
bool SkinnyLinearSupports(int64_t batch, int64_t in_features, int64_t out_features, const float* x,
                          const float* weight);

// The number of K slices SkinnyLinear splits in_features into: the largest
// power of two up to kSkinnyLinearMaxSlices that divides in_features into
// whole stages and keeps the grid within 512 CTAs (about four per SM of an
// H100/H200, whatever the batch); 1 when no split applies. A function of the
// shape only, so the summation order is too.
int64_t SkinnyLinearSlices(int64_t in_features, int64_t out_features);

// Bytes of device workspace SkinnyLinear needs (the slice partials): 0 when
// it runs in one slice.
size_t SkinnyLinearWorkspaceBytes(int64_t batch, int64_t in_features, int64_t out_features);

// InvalidArgument (nothing launched) unless SkinnyLinearSupports, y is
// non-null and, when SkinnyLinearWorkspaceBytes > 0, workspace is a 16-byte
// aligned buffer of that size not overlapping y.
absl::Status SkinnyLinear(int64_t batch, int64_t in_features, int64_t out_features, const float* x,
                          const float* weight, float* y, void* workspace, cudaStream_t stream);

}  // namespace fuseserve::cuda
