#pragma once

// Contract checks inside fuzz targets. A failed check aborts, so libFuzzer
// keeps the input as a crash reproducer (a fuzz target reports findings by
// crashing; the product code never aborts on bad input).

#include <cstddef>
#include <cstdint>
#include <cstdlib>

namespace fuseserve::fuzzing {

inline void Check(bool condition) {
  if (!condition) std::abort();
}

// Where Touch stores what it read: a volatile store keeps the compiler from
// dropping the reads.
inline volatile uint8_t touch_sink = 0;

// Reads every byte of [data, data + size) so that ASan checks the whole span.
inline void Touch(const void* data, size_t size) {
  uint8_t folded = 0;
  for (size_t i = 0; i < size; ++i) folded ^= static_cast<const uint8_t*>(data)[i];
  touch_sink = folded;
}

}  // namespace fuseserve::fuzzing
