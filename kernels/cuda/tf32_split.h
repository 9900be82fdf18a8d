#pragma once

// Splitting float32 values into TF32 pairs for 3xTF32 products (linear.h):
// value = big + small, big = value rounded to nearest TF32 (ties away from
// zero, as cvt.rna.tf32.f32), small = value - big, exact in float32. A
// tensor core reading big sees it unchanged; small's own TF32 rounding
// loses only ~2^-22 of the value. Where rounding up would overflow to
// infinity, big is the truncated value instead, so small stays finite.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"

namespace fuseserve::cuda {

// The order of the two halves in each output row.
enum class Tf32SplitOrder {
  kBigFirst,    // out row = [big(in row) | small(in row)]
  kSmallFirst,  // out row = [small(in row) | big(in row)]
};

// Host: `in` is row-major [rows, cols]; `out` receives [rows, 2 * cols].
// For load-time weight preparation.
absl::Status SplitTf32OnHost(const float* in, int64_t rows, int64_t cols, Tf32SplitOrder order,
                             float* out);

// Device: the same split of a device matrix, enqueued on `stream`. `in` and
// `out` must not overlap.
absl::Status SplitTf32(const float* in, int64_t rows, int64_t cols, Tf32SplitOrder order,
                       float* out, cudaStream_t stream);

}  // namespace fuseserve::cuda
