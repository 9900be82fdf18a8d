#include "kernels/cuda/tf32_split.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cuda/cuda_status.h"

namespace fuseserve::cuda {
namespace {

constexpr int kThreads = 256;
// Enough CTAs to fill any current GPU several times over; the kernel is a
// grid-stride loop.
constexpr int64_t kMaxBlocks = 4096;

// The shared rounding rule on raw bits: round half away from zero to 10
// mantissa bits; truncate instead when that would overflow to infinity.
__host__ __device__ __forceinline__ uint32_t BigBits(uint32_t bits) {
  if ((bits & 0x7f800000u) == 0x7f800000u) return bits;  // inf or NaN: as is
  const uint32_t rounded = (bits + 0x1000u) & 0xffffe000u;
  if ((rounded & 0x7f800000u) == 0x7f800000u) return bits & 0xffffe000u;
  return rounded;
}

__global__ void __launch_bounds__(kThreads)
    SplitTf32Kernel(const float* __restrict__ in, int64_t rows, int64_t cols, bool big_first,
                    float* __restrict__ out) {
  const int64_t total = rows * cols;
  for (int64_t i = int64_t{blockIdx.x} * kThreads + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * kThreads) {
    const int64_t row = i / cols;
    const int64_t col = i - row * cols;
    const float value = in[i];
    const float big = __uint_as_float(BigBits(__float_as_uint(value)));
    const float small = value - big;
    float* out_row = out + row * 2 * cols;
    out_row[big_first ? col : cols + col] = big;
    out_row[big_first ? cols + col : col] = small;
  }
}

absl::Status Validate(const float* in, int64_t rows, int64_t cols, const float* out) {
  if (rows < 1 || cols < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("SplitTf32 sizes must be >= 1: rows ", rows, ", cols ", cols));
  }
  if (cols > std::numeric_limits<int64_t>::max() / 2 / rows) {
    return absl::InvalidArgumentError("SplitTf32 output size overflows int64");
  }
  if (in == nullptr || out == nullptr) {
    return absl::InvalidArgumentError("SplitTf32: in and out must be non-null");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status SplitTf32OnHost(const float* in, int64_t rows, int64_t cols, Tf32SplitOrder order,
                             float* out) {
  RETURN_IF_ERROR(Validate(in, rows, cols, out));
  const bool big_first = order == Tf32SplitOrder::kBigFirst;
  for (int64_t row = 0; row < rows; ++row) {
    for (int64_t col = 0; col < cols; ++col) {
      const float value = in[row * cols + col];
      uint32_t bits;
      std::memcpy(&bits, &value, sizeof(bits));
      bits = BigBits(bits);
      float big;
      std::memcpy(&big, &bits, sizeof(big));
      float* out_row = out + row * 2 * cols;
      out_row[big_first ? col : cols + col] = big;
      out_row[big_first ? cols + col : col] = value - big;
    }
  }
  return absl::OkStatus();
}

absl::Status SplitTf32(const float* in, int64_t rows, int64_t cols, Tf32SplitOrder order,
                       float* out, cudaStream_t stream) {
  RETURN_IF_ERROR(Validate(in, rows, cols, out));
  const int64_t blocks = std::min<int64_t>((rows * cols + kThreads - 1) / kThreads, kMaxBlocks);
  SplitTf32Kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      in, rows, cols, order == Tf32SplitOrder::kBigFirst, out);
  return CudaStatus(cudaGetLastError(), "SplitTf32 kernel launch");
}

}  // namespace fuseserve::cuda
