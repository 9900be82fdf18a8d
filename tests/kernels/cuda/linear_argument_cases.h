#pragma once

// Shared by the argument tests of the linear kernels (small_batch_linear,
// skinny_linear): host pointers stand in for device ones there, since only
// their addresses are read, and each case names what makes it unsupported.

#include <cstdint>

namespace fuseserve::cuda {

// 16-byte aligned host storage whose addresses stand in for x and weight.
alignas(16) inline const float kHostOperands[64] = {};

struct LinearArgumentCase {
  const char* name;
  int64_t batch;
  int64_t in_features;
  int64_t out_features;
  const float* x;
  const float* weight;
};

}  // namespace fuseserve::cuda
