#pragma once

// The GEMM family's epilogue on the GPU, in one kernel: for y[N, F] (the
// matrix product without bias), out = GroupNorm(Mish(Hardtanh(y + gemm_bias
// + bias))) with groups of F/G consecutive channels of one row, affine —
// one read and one write of y.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"

namespace fuseserve::cuda {

struct BiasHardtanhMishGroupNormParams {
  int64_t batch = 0;
  int64_t channels = 0;
  int64_t num_groups = 0;
  float hardtanh_min = -1.0f;
  float hardtanh_max = 1.0f;
  float eps = 1e-5f;
};

absl::Status ValidateBiasHardtanhMishGroupNormParams(const BiasHardtanhMishGroupNormParams& p);

// output may equal input, otherwise they must not overlap. gemm_bias and
// bias: [F]; gn_weight, gn_bias: [F]; each of these four may be null (0, 0,
// 1 and 0). Validation: sizes >= 1, num_groups divides channels, finite
// hardtanh bounds with min <= max, eps finite and > 0.
absl::Status BiasHardtanhMishGroupNorm(const BiasHardtanhMishGroupNormParams& params,
                                       const float* input, const float* gemm_bias,
                                       const float* bias, const float* gn_weight,
                                       const float* gn_bias, float* output, cudaStream_t stream);

}  // namespace fuseserve::cuda
