#pragma once

// How a matrix product is computed on the GPU (SPEC.md §1.4):
//  kFp32: float32-class results (FFMA, or error-compensated tensor-core math
//         such as 3xTF32): rel L2 <= 5e-6, max abs <= 1e-4;
//  kTf32: one TF32 tensor-core pass: rel L2 <= 1e-3, max abs <= 1e-2.

namespace fuseserve::cuda {

enum class MathMode { kFp32, kTf32 };

}  // namespace fuseserve::cuda
