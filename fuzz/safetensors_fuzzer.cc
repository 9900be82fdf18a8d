// The safetensors reader (server/repository/safetensors.h) on arbitrary file
// images: a file it accepts must expose only bytes inside the image (or its
// aligned copies), with the sizes its header promises; then the model
// families bind their weights from it, as a model load would.

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/shape.h"
#include "fuzz/fuzz_check.h"
#include "fuzz/fuzz_models.h"
#include "server/models/model_factory.h"
#include "server/repository/safetensors.h"

namespace fuseserve::fuzzing {
namespace {

void CheckAccepted(const SafetensorsFile& file) {
  for (const auto& [name, tensor] : file.tensors()) {
    Check(name == tensor.name);
    const absl::StatusOr<int64_t> count = CheckedNumElements(tensor.shape);
    Check(count.ok());
    Check(*count == 0 || tensor.byte_size % static_cast<size_t>(*count) == 0);
    Touch(tensor.data, tensor.byte_size);
    if (tensor.dtype == "F32") {
      Check(tensor.byte_size == static_cast<size_t>(*count) * sizeof(float));
      const absl::StatusOr<const float*> values = file.GetF32(name, tensor.shape);
      Check(values.ok());
      Check(reinterpret_cast<uintptr_t>(*values) % alignof(float) == 0);
      Touch(*values, tensor.byte_size);
    }
  }
}

}  // namespace
}  // namespace fuseserve::fuzzing

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fuseserve::fuzzing;
  absl::StatusOr<std::unique_ptr<fuseserve::SafetensorsFile>> file =
      fuseserve::SafetensorsFile::FromBytes(std::string(reinterpret_cast<const char*>(data), size),
                                            "fuzz.safetensors");
  if (!file.ok()) {
    Check(file.status().code() == absl::StatusCode::kInvalidArgument);
    return 0;
  }
  CheckAccepted(**file);
  for (const FuzzModel& fuzz_model : FuzzModels()) {
    const absl::StatusOr<std::unique_ptr<fuseserve::Model>> model =
        fuseserve::CreateModel(fuzz_model.config, **file);
    Check(model.ok() || model.status().code() == absl::StatusCode::kInvalidArgument ||
          model.status().code() == absl::StatusCode::kNotFound);
  }
  return 0;
}
