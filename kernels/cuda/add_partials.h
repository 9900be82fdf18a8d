#pragma once

// out[i] = first[i] + partials[0][i] + ... + partials[num_partials - 1][i]
// in float32, in that order: the reduction of the K slices of a sliced
// matrix product (linear.h's 3xTF32 path).

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"

namespace fuseserve::cuda {

// partials: num_partials consecutive arrays of `count` floats. out may equal
// first; neither may overlap partials.
absl::Status AddPartials(const float* first, const float* partials, int64_t num_partials,
                         int64_t count, float* out, cudaStream_t stream);

}  // namespace fuseserve::cuda
