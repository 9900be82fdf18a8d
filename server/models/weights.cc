#include "server/models/weights.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace fuseserve {

absl::StatusOr<std::vector<float>> CopyF32Tensor(const SafetensorsFile& file,
                                                 const std::string& name, const Shape& shape,
                                                 const std::string& what) {
  absl::StatusOr<const float*> data = file.GetF32(name, shape, what);
  if (!data.ok()) {
    return absl::InvalidArgumentError(data.status().message());
  }
  return std::vector<float>(*data, *data + NumElements(shape));
}

absl::Status CheckNoUnexpectedTensors(const SafetensorsFile& file,
                                      const std::vector<std::string>& expected) {
  for (const auto& entry : file.tensors()) {
    if (std::find(expected.begin(), expected.end(), entry.first) == expected.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("unexpected tensor \"", entry.first, "\" in ", file.path(),
                       " (this platform's weights are: ", absl::StrJoin(expected, ", "), ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace fuseserve
