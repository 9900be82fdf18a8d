#pragma once

// PyTorch's Linear: y[N, F_out] = x[N, F_in] * W^T + b, W: [F_out, F_in].

#include <cstdint>

#include "absl/status/status.h"
#include "common/thread_pool.h"

namespace fuseserve {
namespace cpu {

struct LinearParams {
  int64_t batch = 0;
  int64_t in_features = 0;
  int64_t out_features = 0;
};

// InvalidArgument unless every size >= 1 and fits OpenBLAS's 32-bit integers.
absl::Status ValidateLinearParams(const LinearParams& params);

// input: [batch, in_features]; weight: [out_features, in_features];
// bias: [out_features] or null; output: [batch, out_features], not aliasing
// input. float32 sgemm (float32 accumulation).
absl::Status Linear(const LinearParams& params, const float* input, const float* weight,
                    const float* bias, float* output, ThreadPool& pool);

}  // namespace cpu
}  // namespace fuseserve
