#pragma once

// Read-only access to a .safetensors file (the format of
// `safetensors.torch.save_file(model.state_dict(), path)`):
//   8 bytes   little-endian u64 N = header length
//   N bytes   JSON: {"name": {"dtype": "F32", "shape": [..],
//                     "data_offsets": [begin, end]}, ..., "__metadata__": {..}}
//   rest      the data; offsets are relative to the end of the header.
// Every offset, size and shape is validated against the file before any
// tensor is exposed, so a truncated or malicious file yields an error, never
// an out-of-bounds read.

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/shape.h"

namespace fuseserve {

struct SafetensorsTensor {
  std::string name;
  std::string dtype;  // "F32", "F16", "BF16", "F64", "I64", ...
  Shape shape;
  // Into the file's mapping; aligned to the element size (up to 8 bytes).
  // When the file places a tensor at a misaligned offset the data points into
  // an aligned copy owned by the SafetensorsFile instead, so a `const float*`
  // obtained from it is always valid to dereference.
  const std::byte* data = nullptr;
  size_t byte_size = 0;
};

class SafetensorsFile {
 public:
  // Maps and validates the file. Errors name the file and what is wrong.
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);

  // Validates an in-memory image (used by tests and fuzzers). The bytes are
  // copied.
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> FromBytes(
      std::string bytes, const std::string& display_name);

  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::map<std::string, SafetensorsTensor>& tensors() const { return tensors_; }

  // The tensor named `name`, checked to be F32 with exactly `expected_shape`.
  // NotFound / InvalidArgument messages name the tensor, the file and what
  // was expected, e.g. `tensor "gemm.weight" in /m/1/model.safetensors has
  // shape [8192, 4096], expected [8192, 8192] (gemm.weight = [out_features,
  // in_features])`. `what` describes the expected shape in words (may be empty).
  absl::StatusOr<const float*> GetF32(const std::string& name, const Shape& expected_shape,
                                      const std::string& what = "") const;

 private:
  SafetensorsFile() = default;
  // Validates the image at base_/size_ and fills tensors_.
  absl::Status Parse();
  // Points every misaligned tensor at an aligned copy of its data.
  void AlignTensorData();
  // InvalidArgument "invalid safetensors file <path>: <problem>".
  absl::Status Invalid(const std::string& problem) const;

  std::string path_;
  const std::byte* base_ = nullptr;  // whole file
  size_t size_ = 0;
  void* mapping_ = nullptr;  // mmap'ed region (null when owned_ is used)
  std::string owned_;        // in-memory image
  std::map<std::string, SafetensorsTensor> tensors_;
  // Aligned copies of tensors whose data is misaligned in the image.
  std::vector<std::unique_ptr<std::byte[]>> aligned_copies_;
};

}  // namespace fuseserve
