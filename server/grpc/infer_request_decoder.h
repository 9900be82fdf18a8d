#pragma once

// Decodes and validates a ModelInferRequest against the model it addresses
// (SPEC.md §3): input names, datatype, shape against the config's dims and
// max_batch_size, byte count, raw vs typed contents, requested outputs and
// request parameters. Every rule failure is InvalidArgument with a message
// naming the tensor and the rule. Nothing here copies tensor data: the
// decoded input points into the request message.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/shape.h"
#include "proto/grpc_service.pb.h"
#include "proto/model_config.pb.h"
#include "server/runtime/model.h"

namespace fuseserve {

struct DecodedInferRequest {
  Shape input_shape;            // full shape, batch dimension included when batching
  int64_t batch_size = 1;
  const float* input = nullptr;  // into the request message (or aligned_copy)
  // Holds the input only when the message's bytes were not float-aligned.
  std::vector<float> aligned_copy;
  Shape output_shape;           // for the whole request
  absl::Duration timeout = absl::ZeroDuration();  // `timeout` parameter; 0 = none
};

absl::StatusOr<DecodedInferRequest> DecodeInferRequest(
    const inference::ModelInferRequest& request, const inference::ModelConfig& config,
    const Model& model);

}  // namespace fuseserve
