// The .npy reader (client/npy.h) on arbitrary bytes: an accepted file holds
// exactly NumElements(shape) floats, and writing it back with SerializeNpy
// and reading that again gives the same array.

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "client/npy.h"
#include "common/shape.h"
#include "fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using fuseserve::fuzzing::Check;
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  const absl::StatusOr<fuseserve::client::NpyArray> array =
      fuseserve::client::ParseNpy(bytes, "fuzz.npy");
  if (!array.ok()) {
    Check(array.status().code() == absl::StatusCode::kInvalidArgument);
    Check(array.status().message().find("fuzz.npy") != absl::string_view::npos);
    return 0;
  }
  const absl::StatusOr<int64_t> count = fuseserve::CheckedNumElements(array->shape);
  Check(count.ok() && static_cast<size_t>(*count) == array->data.size());
  const absl::StatusOr<std::string> written =
      fuseserve::client::SerializeNpy(array->shape, array->data);
  Check(written.ok());
  const absl::StatusOr<fuseserve::client::NpyArray> reread =
      fuseserve::client::ParseNpy(*written, "rewritten.npy");
  Check(reread.ok() && reread->shape == array->shape);
  // Bitwise, so that NaN payloads compare equal.
  Check(reread->data.size() == array->data.size() &&
        (array->data.empty() || std::memcmp(reread->data.data(), array->data.data(),
                                            array->data.size() * sizeof(float)) == 0));
  return 0;
}
