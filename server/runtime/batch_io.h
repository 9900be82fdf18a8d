#pragma once

// Shape arithmetic shared by every backend's instances: the stacked input
// shape of a batch and each request's slice of the batch's output.

#include <memory>
#include <vector>

#include "common/shape.h"
#include "server/runtime/inference_request.h"

namespace fuseserve {

// The input shape of the whole batch: the first request's shape with the
// leading dimension replaced by the sum of the batch sizes. For a batch of one
// request, its own shape (also when the model does not batch).
Shape StackedInputShape(const std::vector<std::unique_ptr<InferenceRequest>>& batch);

// The output shape of one request of the batch: `batch_output_shape` with the
// leading dimension replaced by the request's batch size (or the whole shape
// for a batch of one request).
Shape RequestOutputShape(const Shape& batch_output_shape, const InferenceRequest& request,
                         size_t batch_requests);

// Copies `request`'s input (wherever it lies) to `destination` and counts the
// copy in its host_copies.
void CopyRequestInput(InferenceRequest& request, char* destination);

// Copies bytes [offset, offset + size) of `request`'s input to
// `destination`, counting nothing (the caller counts one copy per request).
// Safe from several threads at once for disjoint ranges.
void CopyRequestInputRange(const InferenceRequest& request, size_t offset, size_t size,
                           char* destination);

// Answers every request of the batch with `status` (timestamps as they are).
void CompleteBatch(std::vector<std::unique_ptr<InferenceRequest>>& batch,
                   const absl::Status& status);

}  // namespace fuseserve
