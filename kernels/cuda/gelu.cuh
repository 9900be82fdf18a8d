#pragma once

// Exact (erf) GELU as a device function, shared by the kernels that fuse it
// (GroupNorm's prologue, the transposed convolution's epilogue). PyTorch's
// nn.GELU() default (approximate='none'): 0.5 * x * (1 + erf(x / sqrt(2))),
// written with erfc so that large negative x keeps its relative accuracy
// (1 + erf(t) cancels there; erfc(-t) does not).

#include <cuda_runtime.h>

namespace fuseserve::cuda {

__device__ __forceinline__ float GeluErf(float x) {
  return 0.5f * x * erfcf(-x * 0.70710678118654752440f);
}

}  // namespace fuseserve::cuda
