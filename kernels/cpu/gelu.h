#pragma once

// GELU, exact erf form: 0.5 * x * (1 + erf(x / sqrt(2))), as
// torch.nn.functional.gelu computes it by default (approximate="none").

#include <cmath>
#include <cstdint>

#include "absl/status/status.h"
#include "common/thread_pool.h"

namespace fuseserve {
namespace cpu {

// Evaluated in double as 0.5 * x * erfc(-x / sqrt(2)), the same function
// written without the cancellation of 1 + erf(...) for negative x.
inline double GeluErf(double x) {
  constexpr double kSqrtHalf = 0.70710678118654752440;
  return 0.5 * x * std::erfc(-x * kSqrtHalf);
}

// output[i] = GeluErf(input[i]) for i in [0, count); input may equal output.
absl::Status Gelu(const float* input, int64_t count, float* output, ThreadPool& pool);

}  // namespace cpu
}  // namespace fuseserve
