#pragma once

// NumPy .npy files (format versions 1.0, 2.0 and 3.0), restricted to what
// fuseserve serves: little-endian float32 ('<f4') in C (row-major) order.
// Everything else (other dtypes, big-endian, Fortran order, structured
// arrays, truncated or trailing data, a bad magic string or header) is
// rejected with InvalidArgument naming the file and what to do about it.
// https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/shape.h"

namespace fuseserve::client {

struct NpyArray {
  Shape shape;              // empty for a 0-d array (one element)
  std::vector<float> data;  // NumElements(shape) values, row-major
};

// Parses the bytes of a .npy file; `name` (usually the path) names it in
// error messages.
absl::StatusOr<NpyArray> ParseNpy(absl::string_view bytes, absl::string_view name);

// Reads and parses a .npy file; NotFound when it cannot be opened (the
// message names the path and the reason).
absl::StatusOr<NpyArray> ReadNpyFile(const std::string& path);

// The bytes of a .npy file holding `data` with `shape` as '<f4' in C order:
// format 1.0, or 2.0 when the header does not fit 1.0's 16-bit length. The
// header is padded so that the data starts at a multiple of 64 bytes, as
// NumPy writes it. InvalidArgument when data.size() != NumElements(shape) or
// a dimension is negative.
absl::StatusOr<std::string> SerializeNpy(const Shape& shape, absl::Span<const float> data);

// SerializeNpy, written to `path` (replacing it).
absl::Status WriteNpyFile(const std::string& path, const Shape& shape,
                          absl::Span<const float> data);

}  // namespace fuseserve::client
