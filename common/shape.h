#pragma once

// Tensor shapes: a list of dimension sizes, outermost first (row-major).

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace fuseserve {

using Shape = std::vector<int64_t>;

// "[2, 3, 4]".
std::string ShapeToString(const Shape& shape);

// Product of the dimensions; InvalidArgument if any dimension is negative or
// the product overflows int64.
absl::StatusOr<int64_t> CheckedNumElements(const Shape& shape);

// Product of the dimensions of a shape already known to be valid.
int64_t NumElements(const Shape& shape);

}  // namespace fuseserve
