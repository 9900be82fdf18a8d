// ModelInfer request decoding and validation (server/grpc/infer_request_decoder.h)
// against real models of every family, then the CPU run of every request the
// decoder accepts: whatever it lets through must be safe to compute.
//
// Input: one byte choosing the model (FuzzModels(), modulo their count), then
// a serialized inference.ModelInferRequest (as it arrives over gRPC).

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/shape.h"
#include "common/thread_pool.h"
#include "fuzz/fuzz_check.h"
#include "fuzz/fuzz_models.h"
#include "proto/grpc_service.pb.h"
#include "server/grpc/infer_request_decoder.h"

namespace fuseserve::fuzzing {
namespace {

void CheckAccepted(const FuzzModel& fuzz_model, const DecodedInferRequest& decoded) {
  const inference::ModelConfig& config = fuzz_model.config;
  const size_t rank = config.input(0).dims_size() + (config.max_batch_size() > 0 ? 1 : 0);
  Check(decoded.input_shape.size() == rank);
  const absl::StatusOr<int64_t> count = CheckedNumElements(decoded.input_shape);
  Check(count.ok() && *count > 0);
  Check(decoded.input != nullptr);
  Check(reinterpret_cast<uintptr_t>(decoded.input) % alignof(float) == 0);
  if (config.max_batch_size() > 0) {
    Check(decoded.batch_size == decoded.input_shape[0]);
    Check(decoded.batch_size >= 1 && decoded.batch_size <= config.max_batch_size());
  } else {
    Check(decoded.batch_size == 1);
  }
  Check(decoded.timeout >= absl::ZeroDuration());
  const absl::StatusOr<Shape> output_shape = fuzz_model.model->OutputShape(decoded.input_shape);
  Check(output_shape.ok() && *output_shape == decoded.output_shape);

  // Every input value is read (ASan checks the span) and the model runs on
  // them, as a batch of one request would.
  static ThreadPool* const pool = new ThreadPool(1);
  std::vector<float> output(NumElements(decoded.output_shape));
  const absl::Status run =
      fuzz_model.model->RunOnCpu(decoded.input, decoded.input_shape, output.data(), *pool);
  Check(run.ok());
}

}  // namespace
}  // namespace fuseserve::fuzzing

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fuseserve::fuzzing;
  if (size < 1) return 0;
  const std::vector<FuzzModel>& models = FuzzModels();
  const FuzzModel& fuzz_model = models[data[0] % models.size()];
  inference::ModelInferRequest request;
  if (!request.ParseFromArray(data + 1, static_cast<int>(size - 1))) return 0;
  const absl::StatusOr<fuseserve::DecodedInferRequest> decoded =
      fuseserve::DecodeInferRequest(request, fuzz_model.config, *fuzz_model.model);
  if (decoded.ok()) {
    CheckAccepted(fuzz_model, *decoded);
  } else {
    // Rejections are InvalidArgument (SPEC.md §3: a bad tensor).
    Check(decoded.status().code() == absl::StatusCode::kInvalidArgument);
    Check(!decoded.status().message().empty());
  }
  return 0;
}
