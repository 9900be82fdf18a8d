#pragma once

// The 16-byte alignment the kernels' float4 paths need of their operands.

#include <cstdint>

namespace fuseserve::cuda {

inline bool Aligned16(const void* pointer) {
  return reinterpret_cast<uintptr_t>(pointer) % 16 == 0;
}

}  // namespace fuseserve::cuda
