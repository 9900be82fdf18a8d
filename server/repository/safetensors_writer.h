#pragma once

// Writes F32 tensors in the safetensors format that SafetensorsFile reads and
// `safetensors.torch.load_file` accepts. Used by the default-repository
// generator and by tests that need weight files.

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/shape.h"

namespace fuseserve {

struct NamedF32Tensor {
  std::string name;
  Shape shape;
  std::vector<float> data;  // row-major, NumElements(shape) values
};

// The file image: 8-byte little-endian header length, the JSON header padded
// with spaces to a multiple of 8 bytes (as the Python library pads it, which
// keeps every F32 tensor 4-byte aligned in a page-aligned mapping), then each
// tensor's data in the order given, back to back.
//
// Writes exactly what it is given and does not validate: a tensor whose data
// does not match its shape, or a repeated name, yields a file that readers
// reject (tests rely on this to build invalid files). WriteSafetensorsFile
// validates first.
std::string SerializeSafetensors(const std::vector<NamedF32Tensor>& tensors);

// Checks that names are unique and non-empty and that each tensor's data has
// NumElements(shape) values (InvalidArgument otherwise), then writes the image
// to a temporary file beside `path` and renames it over `path`, so a reader
// never sees a partial file.
absl::Status WriteSafetensorsFile(const std::string& path,
                                  const std::vector<NamedF32Tensor>& tensors);

}  // namespace fuseserve
