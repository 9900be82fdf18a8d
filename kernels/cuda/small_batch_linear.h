#pragma once

// y[N, F_out] = x[N, F_in] · W^T for small N in float32 FFMA, reading the
// weight once (a batch-of-one GEMM is a matrix-vector product bound by the
// weight's bytes; cuBLAS's SGEMM reaches ~57% of the bandwidth there). One
// warp per two weight rows streams them with 16-byte loads, several in
// flight per lane, and applies each loaded weight vector to all N rows of x.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"

namespace fuseserve::cuda {

// The largest batch the kernel takes (one accumulator per row of x).
inline constexpr int64_t kSmallBatchLinearMaxBatch = 8;

// True when SmallBatchLinear runs these arguments: 1 <= batch <=
// kSmallBatchLinearMaxBatch, in_features % 4 == 0, x and weight 16-byte
// aligned, sizes within 32-bit indexing of one row.
bool SmallBatchLinearSupports(int64_t batch, int64_t in_features, int64_t out_features,
                              const float* x, const float* weight);

// InvalidArgument (nothing launched) unless SmallBatchLinearSupports.
absl::Status SmallBatchLinear(int64_t batch, int64_t in_features, int64_t out_features,
                              const float* x, const float* weight, float* y,
                              cudaStream_t stream);

}  // namespace fuseserve::cuda
