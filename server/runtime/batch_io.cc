#include "server/runtime/batch_io.h"

#include <cstring>

namespace fuseserve {

Shape StackedInputShape(const std::vector<std::unique_ptr<InferenceRequest>>& batch) {
  Shape shape = batch.front()->input_shape;
  if (batch.size() == 1) return shape;
  int64_t total = 0;
  for (const auto& request : batch) total += request->batch_size;
  shape[0] = total;
  return shape;
}

Shape RequestOutputShape(const Shape& batch_output_shape, const InferenceRequest& request,
                         size_t batch_requests) {
  if (batch_requests == 1) return batch_output_shape;
  Shape shape = batch_output_shape;
  shape[0] = request.batch_size;
  return shape;
}

void CopyRequestInput(InferenceRequest& request, char* destination) {
  CopyRequestInputRange(request, 0, NumElements(request.input_shape) * sizeof(float), destination);
  ++request.host_copies;
}

void CopyRequestInputRange(const InferenceRequest& request, size_t offset, size_t size,
                           char* destination) {
  if (size == 0) return;
  if (request.input != nullptr) {
    std::memcpy(destination, reinterpret_cast<const char*>(request.input) + offset, size);
  } else {
    request.copy_input(offset, size, destination);
  }
}

void CompleteBatch(std::vector<std::unique_ptr<InferenceRequest>>& batch,
                   const absl::Status& status) {
  for (auto& request : batch) {
    request->on_complete(status, request->timestamps);
  }
}

}  // namespace fuseserve
