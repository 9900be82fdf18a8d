#pragma once

// The input of the fuzz targets that drive DecodeInferRequest: one byte
// choosing the model (FuzzModels(), modulo their count), then a serialized
// inference.ModelInferRequest, as it arrives over gRPC.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "fuzz/fuzz_models.h"
#include "proto/grpc_service.pb.h"

namespace fuseserve::fuzzing {

struct DecoderFuzzInput {
  const FuzzModel* model = nullptr;
  inference::ModelInferRequest request;
};

// nullopt when the bytes are not of that form (empty, or no message).
inline std::optional<DecoderFuzzInput> ParseDecoderFuzzInput(const uint8_t* data, size_t size) {
  if (size < 1) return std::nullopt;
  const std::vector<FuzzModel>& models = FuzzModels();
  DecoderFuzzInput input;
  input.model = &models[data[0] % models.size()];
  if (!input.request.ParseFromArray(data + 1, static_cast<int>(size - 1))) return std::nullopt;
  return input;
}

}  // namespace fuseserve::fuzzing
