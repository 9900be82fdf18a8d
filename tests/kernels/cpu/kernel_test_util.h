#pragma once

// Inputs for the kernel accuracy tests: SPEC.md §1.4 measures accuracy on
// torch.rand-style U[0, 1) inputs AND on N(0, 1) inputs, with random (not 1/0)
// GroupNorm affine parameters.

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/reference/test_data.h"

namespace fuseserve {
namespace testing {

enum class InputDistribution { kUniform01, kNormal };

inline std::string DistributionName(InputDistribution distribution) {
  return distribution == InputDistribution::kUniform01 ? "Uniform01" : "Normal";
}

inline std::vector<float> RandomInput(int64_t count, InputDistribution distribution,
                                      uint64_t seed) {
  return distribution == InputDistribution::kUniform01 ? reference::RandomUniform(count, seed)
                                                       : reference::RandomNormal(count, seed);
}

// GroupNorm scale: U[0.5, 1.5), never the identity.
inline std::vector<float> RandomAffineWeight(int64_t count, uint64_t seed) {
  return reference::RandomUniform(count, seed, 0.5f, 1.5f);
}

// GroupNorm shift / biases: N(0, 0.5^2).
inline std::vector<float> RandomAffineBias(int64_t count, uint64_t seed) {
  return reference::RandomNormal(count, seed, 0.0f, 0.5f);
}

}  // namespace testing
}  // namespace fuseserve
