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

// The same function as PyTorch's CUDA kernel writes it, 0.5 x (1 + erf(x /
// sqrt(2))): well under half GeluErf's instructions (erff against erfcf),
// for epilogues that evaluate it for every output element of a
// compute-bound kernel (the tiled transposed convolution: the erfc form
// made its epilogue 2/3 of the kernel's instructions). 1 + erf cancels for
// large negative x, so the relative accuracy there is lost, but the
// absolute error stays ~1e-7 |x|, far inside SPEC's absolute and
// L2-relative contracts.
__device__ __forceinline__ float GeluErfShort(float x) {
  return 0.5f * x * (1.0f + erff(x * 0.70710678118654752440f));
}

}  // namespace fuseserve::cuda
