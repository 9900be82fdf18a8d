#pragma once

// Exact (erf) GELU as a device function, shared by the kernels that fuse it
// (GroupNorm's prologue, the transposed convolution's epilogue). PyTorch's
// nn.GELU() default (approximate='none'): 0.5 * x * (1 + erf(x / sqrt(2))),
// written with erfc so that large negative x keeps its relative accuracy
// (1 + erf(t) cancels there; erfc(-t) does not).

#include <cuda_runtime.h>
#include <math.h>

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

// The same function with half of erff's instructions, for the wgmma
// convolution's epilogue (~30 of its ~52 instructions per output element
// were erff, which evaluates and selects between two approximations:
// bench/kernel_notes.md v11b). With t = |x| / sqrt(2),
//   1 + erf(x / sqrt(2)) = 2 - erfc(t) (x >= 0) or erfc(t) (x < 0),
// and erfc(t) = 2^p(t), p a degree-9 polynomial fitted to log2(erfc(t)) on
// [0, 4] (weighted least squares, float32 coefficients refitted one by
// one); t is clamped to 4, where erfc is 1.5e-8. Evaluated in float32 with an
// exact exp2 the absolute error is at most 9.7e-8 max(1, |x|) over
// [-12, 12] (the erff form's, with a correctly rounded erf: 1.0e-7), and
// for x < 0 the relative accuracy does not cancel away. exp2f adds at most 2
// ulp of erfc(t). Tests: GeluErfFastMatchesFloat64 (host),
// the wgmma kernel's GELU test (device).
__host__ __device__ __forceinline__ float GeluErfFast(float x) {
  const float t = fminf(fabsf(x) * 0.70710678118654752440f, 4.0f);
  float p = 1.1050307e-05f;
  p = fmaf(p, t, -0.00014714761f);
  p = fmaf(p, t, 0.0008233417f);
  p = fmaf(p, t, -0.0022184288f);
  p = fmaf(p, t, 1.1604471e-05f);
  p = fmaf(p, t, 0.027779795f);
  p = fmaf(p, t, -0.14833145f);
  p = fmaf(p, t, -0.9184377f);
  p = fmaf(p, t, -1.6279078f);
  p = fmaf(p, t, 1.0139019e-08f);
  const float complement = exp2f(p);  // erfc(t)
  return 0.5f * x * (x >= 0.0f ? 2.0f - complement : complement);
}

}  // namespace fuseserve::cuda
