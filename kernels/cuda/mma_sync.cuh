#pragma once

// Device helpers shared by the tensor-core kernels (the transposed
// convolution's general and tiled implicit GEMMs): TF32 rounding and the
// mma.sync m16n8k8 TF32 instruction (sm_80+, also on Hopper). The cp.async
// copies they stage operands with are in cp_async.cuh.

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/cp_async.cuh"

namespace fuseserve::cuda {

// Round to nearest TF32 (ties away from zero), as bits for an MMA operand.
__device__ __forceinline__ uint32_t Tf32Bits(float value) {
  uint32_t bits;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(bits) : "f"(value));
  return bits;
}

__device__ __forceinline__ float RoundTf32(float value) { return __uint_as_float(Tf32Bits(value)); }

// d += a * b for one m16n8k8 TF32 tile, float32 accumulators.
__device__ __forceinline__ void MmaTf32(float (&d)[4], const uint32_t (&a)[4],
                                        const uint32_t (&b)[2]) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, "
      "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Zeroes a warp's [M][N] grid of m16n8 accumulator fragments.
template <int M, int N>
__device__ __forceinline__ void ZeroAccumulators(float (&acc)[M][N][4]) {
#pragma unroll
  for (int i = 0; i < M; ++i) {
#pragma unroll
    for (int j = 0; j < N; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;
    }
  }
}

}  // namespace fuseserve::cuda
