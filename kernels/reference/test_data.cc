#include "kernels/reference/test_data.h"

#include <cmath>

namespace fuseserve {
namespace reference {
namespace {

// SplitMix64: tiny, fast, statistically sound for test data.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}

  uint64_t Next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }

  // U[0, 1) with 53 random bits.
  double NextUnit() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

 private:
  uint64_t state_;
};

}  // namespace

std::vector<float> RandomUniform(int64_t count, uint64_t seed, float low, float high) {
  SplitMix64 rng(seed);
  std::vector<float> values(count);
  for (float& v : values) {
    v = static_cast<float>(low + (static_cast<double>(high) - low) * rng.NextUnit());
    // Rounding to float may land on `high`; keep the interval half-open.
    if (v >= high) v = std::nextafter(high, low);
  }
  return values;
}

std::vector<float> RandomNormal(int64_t count, uint64_t seed, float mean, float stddev) {
  SplitMix64 rng(seed);
  std::vector<float> values(count);
  constexpr double kTwoPi = 6.283185307179586476925;
  for (float& v : values) {
    // Box-Muller; 1 - u lies in (0, 1], so the log is finite.
    const double u1 = 1.0 - rng.NextUnit();
    const double u2 = rng.NextUnit();
    v = static_cast<float>(mean + stddev * std::sqrt(-2.0 * std::log(u1)) * std::cos(kTwoPi * u2));
  }
  return values;
}

}  // namespace reference
}  // namespace fuseserve
