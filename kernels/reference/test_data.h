#pragma once

// Deterministic random test data (a fixed seed gives the same numbers on
// every run and machine: the generator and the conversions are our own, not
// the implementation-defined std:: distributions).

#include <cstdint>
#include <vector>

namespace fuseserve {
namespace reference {

// U[low, high), like torch.rand scaled.
std::vector<float> RandomUniform(int64_t count, uint64_t seed, float low = 0.0f, float high = 1.0f);

// N(mean, stddev^2), like torch.randn scaled.
std::vector<float> RandomNormal(int64_t count, uint64_t seed, float mean = 0.0f,
                                float stddev = 1.0f);

}  // namespace reference
}  // namespace fuseserve
