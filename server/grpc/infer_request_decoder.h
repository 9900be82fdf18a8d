#pragma once

// Decodes and validates a ModelInferRequest against the model it addresses
// (SPEC.md §3): input names, datatype, shape against the config's dims and
// max_batch_size, byte count, raw vs typed contents vs system shared memory
// (Triton's shared_memory_region / shared_memory_byte_size /
// shared_memory_offset tensor parameters), requested outputs and request
// parameters. Every rule failure is InvalidArgument with a message naming the
// tensor and the rule, except a shared-memory region that is not registered:
// NotFound, as in Triton. Nothing here copies tensor data unless it is not
// float-aligned: the decoded input points into the request message or into
// the shared-memory region.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/shape.h"
#include "proto/grpc_service.pb.h"
#include "proto/model_config.pb.h"
#include "server/grpc/infer_wire.h"
#include "server/runtime/model.h"
#include "server/shm/shared_memory_manager.h"

namespace fuseserve {

struct DecodedInferRequest {
  Shape input_shape;            // full shape, batch dimension included when batching
  int64_t batch_size = 1;
  // Into the request message or shared_memory_input (or aligned_copy); null
  // when the raw input is not one float-aligned piece (see input_pieces).
  const float* input = nullptr;
  // The raw input's bytes where the transport left them, when `input` is
  // null: copied once, straight to where the input is staged. Points into
  // the request, which must outlive it.
  std::optional<WireBytes> input_pieces;
  // Holds the input only when its bytes were not float-aligned.
  std::vector<float> aligned_copy;
  Shape output_shape;           // for the whole request
  absl::Duration timeout = absl::ZeroDuration();  // `timeout` parameter; 0 = none
  // Set when the input is read from a shared-memory region: exactly its
  // bytes. Keeps the region mapped while the decoded request is alive.
  std::optional<SharedMemoryView> shared_memory_input;
  // Set when the output is to be written to a shared-memory region: at least
  // its bytes (the response then carries an empty raw_output_contents entry
  // for it). Keeps the region mapped while the decoded request is alive.
  std::optional<SharedMemoryView> shared_memory_output;
};

// `shared_memory` resolves the regions that tensors name; nullptr means the
// server refuses shared memory (started without --allow-shared-memory), and
// a tensor that uses it is InvalidArgument.
absl::StatusOr<DecodedInferRequest> DecodeInferRequest(
    const inference::ModelInferRequest& request, const inference::ModelConfig& config,
    const Model& model, const SharedMemoryManager* shared_memory = nullptr);

// The same for a request parsed by ParseWireInferRequest: `request` is its
// header (its own raw_input_contents are ignored) and `raw` its
// raw_input_contents entries.
absl::StatusOr<DecodedInferRequest> DecodeInferRequest(
    const inference::ModelInferRequest& request, const std::vector<WireBytes>& raw,
    const inference::ModelConfig& config, const Model& model,
    const SharedMemoryManager* shared_memory = nullptr);

}  // namespace fuseserve
