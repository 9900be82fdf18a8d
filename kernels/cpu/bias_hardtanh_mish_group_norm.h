#pragma once

// The epilogue of the GEMM family (SPEC.md §1.2) on y[N, F]:
//   v = Mish(Hardtanh(min, max)(y + bias)),  Mish(x) = x * tanh(softplus(x)),
//   softplus(x) = log1p(exp(x)), or x when x > 20 (PyTorch's threshold),
// then GroupNorm over groups of F/G consecutive channels of each row:
//   out = (v - mean) * rsqrt(var + eps) * gn_weight + gn_bias (biased var).
// The elementwise part and the statistics are evaluated in double, each
// output rounded once to float32.

#include <cstdint>

#include "absl/status/status.h"
#include "common/thread_pool.h"

namespace fuseserve {
namespace cpu {

struct BiasHardtanhMishGroupNormParams {
  int64_t batch = 0;
  int64_t channels = 0;
  int64_t num_groups = 0;
  double hardtanh_min = -1.0;
  double hardtanh_max = 1.0;
  double eps = 1e-5;
};

// InvalidArgument unless every size >= 1, num_groups divides channels,
// hardtanh_min <= hardtanh_max (both finite), eps finite and > 0.
absl::Status ValidateBiasHardtanhMishGroupNormParams(const BiasHardtanhMishGroupNormParams& params);

// input, output: [batch, channels]; output may equal input (in place),
// otherwise they must not overlap. bias, gn_weight, gn_bias: [channels], each
// may be null (0, 1 and 0 respectively).
absl::Status BiasHardtanhMishGroupNorm(const BiasHardtanhMishGroupNormParams& params,
                                       const float* input, const float* bias,
                                       const float* gn_weight, const float* gn_bias, float* output,
                                       ThreadPool& pool);

}  // namespace cpu
}  // namespace fuseserve
