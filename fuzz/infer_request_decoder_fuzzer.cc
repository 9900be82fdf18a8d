// ModelInfer request parsing and decoding as the server does them: the bytes
// go through the raw-bytes parser (server/grpc/infer_wire.h) cut into slices,
// as the transport hands them over, then decoding and validation
// (server/grpc/infer_request_decoder.h) against real models of every family,
// then the CPU run of every request the decoder accepts: whatever it lets
// through must be safe to compute. Differential check: whenever protobuf
// parses the bytes, the raw-bytes parser must too, with the same fields and
// the same raw entries.
//
// Input: one byte choosing the model (FuzzModels(), modulo their count) and
// the slice size, then a serialized inference.ModelInferRequest.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/shape.h"
#include "common/thread_pool.h"
#include "fuzz/fuzz_check.h"
#include "fuzz/fuzz_models.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"
#include "proto/grpc_service.pb.h"
#include "server/grpc/infer_request_decoder.h"
#include "server/grpc/infer_wire.h"

namespace fuseserve::fuzzing {
namespace {

void CheckAccepted(const FuzzModel& fuzz_model, const DecodedInferRequest& decoded) {
  const inference::ModelConfig& config = fuzz_model.config;
  const size_t rank = config.input(0).dims_size() + (config.max_batch_size() > 0 ? 1 : 0);
  Check(decoded.input_shape.size() == rank);
  const absl::StatusOr<int64_t> count = CheckedNumElements(decoded.input_shape);
  Check(count.ok() && *count > 0);
  // In place (aligned), or left in the received pieces, with exactly the
  // input's bytes.
  Check(decoded.input != nullptr || decoded.input_pieces.has_value());
  if (decoded.input != nullptr) {
    Check(reinterpret_cast<uintptr_t>(decoded.input) % alignof(float) == 0);
  } else {
    Check(decoded.input_pieces->size() == static_cast<size_t>(*count) * sizeof(float));
  }
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
  std::vector<float> gathered;
  const float* input = decoded.input;
  if (input == nullptr) {
    gathered.resize(*count);
    decoded.input_pieces->CopyTo(reinterpret_cast<char*>(gathered.data()));
    input = gathered.data();
  }
  std::vector<float> output(NumElements(decoded.output_shape));
  const absl::Status run =
      fuzz_model.model->RunOnCpu(input, decoded.input_shape, output.data(), *pool);
  Check(run.ok());
}

// `bytes` as the transport may hand them over: slices of `slice_size`.
grpc::ByteBuffer Sliced(const uint8_t* bytes, size_t size, size_t slice_size) {
  std::vector<grpc::Slice> slices;
  for (size_t at = 0; at < size; at += slice_size) {
    slices.emplace_back(bytes + at, std::min(slice_size, size - at));
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

// `message` serialised deterministically (map entries sorted): equal
// messages give equal bytes, NaN payloads included (a field-by-field
// comparison would find NaN unequal to itself).
std::string DeterministicBytes(const google::protobuf::Message& message) {
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream stream(&bytes);
    google::protobuf::io::CodedOutputStream output(&stream);
    output.SetSerializationDeterministic(true);
    message.SerializeToCodedStream(&output);
  }
  return bytes;
}

// Protobuf's parse of the same bytes, where it succeeds, must agree.
void CheckAgreesWithProtobuf(const uint8_t* bytes, size_t size,
                             const absl::StatusOr<WireInferRequest>& parsed) {
  inference::ModelInferRequest whole;
  if (!whole.ParseFromArray(bytes, static_cast<int>(size))) return;
  Check(parsed.ok());
  Check(parsed->raw_input_contents.size() ==
        static_cast<size_t>(whole.raw_input_contents_size()));
  for (size_t i = 0; i < parsed->raw_input_contents.size(); ++i) {
    std::string contents(parsed->raw_input_contents[i].size(), '\0');
    parsed->raw_input_contents[i].CopyTo(contents.data());
    Check(contents == whole.raw_input_contents(static_cast<int>(i)));
  }
  whole.clear_raw_input_contents();
  Check(DeterministicBytes(parsed->header) == DeterministicBytes(whole));
}

}  // namespace
}  // namespace fuseserve::fuzzing

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fuseserve::fuzzing;
  if (size < 1) return 0;
  const std::vector<FuzzModel>& models = FuzzModels();
  const FuzzModel& fuzz_model = models[data[0] % models.size()];
  const size_t slice_size = 1 + (data[0] / models.size()) % 64;
  const absl::StatusOr<fuseserve::WireInferRequest> parsed =
      fuseserve::ParseWireInferRequest(Sliced(data + 1, size - 1, slice_size));
  CheckAgreesWithProtobuf(data + 1, size - 1, parsed);
  if (!parsed.ok()) {
    Check(parsed.status().code() == absl::StatusCode::kInvalidArgument);
    return 0;
  }
  const absl::StatusOr<fuseserve::DecodedInferRequest> decoded = fuseserve::DecodeInferRequest(
      parsed->header, parsed->raw_input_contents, fuzz_model.config, *fuzz_model.model);
  if (decoded.ok()) {
    CheckAccepted(fuzz_model, *decoded);
  } else {
    // Rejections are InvalidArgument (SPEC.md §3: a bad tensor).
    Check(decoded.status().code() == absl::StatusCode::kInvalidArgument);
    Check(!decoded.status().message().empty());
  }
  return 0;
}
