#pragma once

// Reading a family's weights out of a safetensors file by their PyTorch
// state_dict names.

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/shape.h"
#include "server/repository/safetensors.h"

namespace fuseserve {

// A copy of tensor `name`, which must be F32 with exactly `shape` (`what`
// describes the shape in words for the message, e.g. "[out_channels]"). The
// file's mapping does not outlive loading, so models keep copies. Every
// failure, a missing tensor included, is InvalidArgument naming the tensor:
// the weights contradict the config.
absl::StatusOr<std::vector<float>> CopyF32Tensor(const SafetensorsFile& file,
                                                 const std::string& name, const Shape& shape,
                                                 const std::string& what);

// InvalidArgument naming the first tensor of the file that is not in
// `expected`, as PyTorch's strict load_state_dict rejects unexpected keys: a
// file saved from another module is an error, not a partial match.
absl::Status CheckNoUnexpectedTensors(const SafetensorsFile& file,
                                      const std::vector<std::string>& expected);

}  // namespace fuseserve
