#pragma once

// Warp and block sum reductions shared by the normalisation kernels.
//
// Assumptions: every lane of the warp (every thread of the block for
// BlockSum2) calls these with the full mask, blockDim.x is a multiple of 32
// and at most 1024, and the block calls BlockSum2 uniformly. The result is
// deterministic: the order of additions depends on the launch shape only.

#include <cuda_runtime.h>

namespace fuseserve::cuda {

template <typename T>
__device__ __forceinline__ T WarpSum(T value) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    value += __shfl_xor_sync(0xffffffffu, value, offset);
  }
  return value;
}

// Sums (a, b) over the block; the totals are valid in thread 0 only.
// Synchronises the block twice at most (its shared scratch is reusable once
// the call returns).
__device__ __forceinline__ double2 BlockSum2(double a, double b) {
  __shared__ double2 warp_sums[32];
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  a = WarpSum(a);
  b = WarpSum(b);
  if (lane == 0) warp_sums[warp] = make_double2(a, b);
  __syncthreads();
  double2 total = make_double2(0.0, 0.0);
  if (warp == 0) {
    const int num_warps = static_cast<int>(blockDim.x >> 5);
    if (lane < num_warps) total = warp_sums[lane];
    total.x = WarpSum(total.x);
    total.y = WarpSum(total.y);
  }
  __syncthreads();
  return total;
}

}  // namespace fuseserve::cuda
