#include "server/grpc/model_infer.h"

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/grpc/infer_request_decoder.h"
#include "server/grpc/infer_wire.h"
#include "server/runtime/inference_request.h"

namespace fuseserve {

// What a ModelInfer call keeps alive until it is answered: the received
// request (its raw input is read where it was received), the decoded request
// (the shared-memory regions it reads and writes), the answer's header and
// the buffer its output is computed into; and, once computed, what the
// answer is made of.
struct InferCall {
  WireInferRequest request;
  DecodedInferRequest decoded;
  inference::ModelInferResponse header;
  // The output, when it is not written into a shared-memory region.
  HostBuffer output;
  // An output bound for a shared-memory region that cannot be written in
  // place (not float-aligned) is computed here first.
  std::vector<float> output_staging;

  const ModelVersionRecord* record = nullptr;
  Clock* clock = nullptr;
  // Set when the request completes.
  absl::Status computed;
  RequestTimestamps timestamps;
};

namespace {

FailureReason FailureReasonOf(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
      return FailureReason::kRejected;
    case absl::StatusCode::kCancelled:
      return FailureReason::kCanceled;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
      return FailureReason::kOther;
    default:
      return FailureReason::kBackend;
  }
}

// Whether the output goes straight into its shared-memory region: the region
// is float-aligned and large enough (the decoder checked the size against
// the same shape).
bool OutputInRegionInPlace(const InferCall& call) {
  if (!call.decoded.shared_memory_output.has_value()) return false;
  const SharedMemoryView& region = *call.decoded.shared_memory_output;
  const uint64_t bytes =
      static_cast<uint64_t>(NumElements(call.decoded.output_shape)) * sizeof(float);
  return bytes <= region.byte_size &&
         reinterpret_cast<uintptr_t>(region.data) % alignof(float) == 0;
}

// Where the instance writes the output of `shape`: the answer's buffer, or
// the shared-memory region the request named (directly, or through
// output_staging).
float* AllocateOutput(InferCall& call, const Shape& shape) {
  if (!call.decoded.shared_memory_output.has_value()) {
    return reinterpret_cast<float*>(call.output.data());
  }
  if (OutputInRegionInPlace(call)) {
    return reinterpret_cast<float*>(call.decoded.shared_memory_output->data);
  }
  call.output_staging.resize(NumElements(shape));
  return call.output_staging.data();
}

// Copies a staged output into its shared-memory region. Internal, and nothing
// written, when it does not fit.
absl::Status FinishStagedOutput(InferCall& call) {
  if (call.output_staging.empty()) return absl::OkStatus();
  const SharedMemoryView& region = *call.decoded.shared_memory_output;
  const uint64_t bytes = call.output_staging.size() * sizeof(float);
  if (bytes > region.byte_size) {
    return absl::InternalError(absl::StrCat("the output has ", bytes, " bytes, more than the ",
                                            region.byte_size,
                                            " bytes of shared memory checked for it"));
  }
  std::memcpy(region.data, call.output_staging.data(), bytes);
  return absl::OkStatus();
}

// The answer: the header, and the output's raw entry: a slice over the
// output's buffer, handed to gRPC (returned to the pool once sent), or empty
// for an output placed in shared memory (as in Triton).
grpc::ByteBuffer SerializeAnswer(InferCall& call) {
  std::vector<grpc::Slice> raw(1);
  if (!call.decoded.shared_memory_output.has_value()) {
    char* data = call.output.data();
    const size_t size = call.output.size();
    raw[0] = grpc::Slice(data, size, &HostBuffer::Release, call.output.Detach());
  }
  return SerializeWireInferResponse(call.header, std::move(raw));
}

// Page-locked answer buffers are freed off the gRPC threads that return them.
HostBufferPool::Options AnswerBufferOptions(bool page_locked) {
  HostBufferPool::Options options;
  options.page_locked = page_locked;
  options.free_in_background = page_locked;
  return options;
}

}  // namespace

ModelInferHandler::Answer::~Answer() = default;

absl::Status ModelInferHandler::Answer::Finish(grpc::ByteBuffer* serialized) {
  if (call_ == nullptr) return failure_;
  InferCall& call = *call_;
  const absl::Status status = call.computed.ok() ? FinishStagedOutput(call) : call.computed;
  if (status.ok()) {
    grpc::ByteBuffer answer = SerializeAnswer(call);
    serialized->Swap(&answer);
  }
  const absl::Time finished = call.clock->Now();
  if (status.ok()) {
    call.record->metrics().RecordSuccess(call.timestamps, call.decoded.batch_size, finished);
  } else {
    call.record->metrics().RecordFailure(FailureReasonOf(status), call.timestamps, finished);
  }
  return status;
}

ModelInferHandler::ModelInferHandler(const ModelManager* models, Clock* clock,
                                     SharedMemoryManager* shared_memory, bool page_locked_outputs)
    : models_(models),
      clock_(clock),
      shared_memory_(shared_memory),
      output_buffers_(HostBufferPool::Create(AnswerBufferOptions(page_locked_outputs))) {}

void ModelInferHandler::Start(const grpc::ByteBuffer& request, CallInfo info, Done done) const {
  const absl::Time received = clock_->Now();
  auto call = std::make_shared<InferCall>();
  absl::StatusOr<WireInferRequest> parsed = ParseWireInferRequest(request);
  if (!parsed.ok()) return done(Answer(parsed.status()));
  call->request = *std::move(parsed);
  const inference::ModelInferRequest& header = call->request.header;
  absl::StatusOr<const ModelVersionRecord*> found =
      models_->FindReady(header.model_name(), header.model_version());
  if (!found.ok()) return done(Answer(found.status()));
  const ModelVersionRecord* record = *found;

  absl::StatusOr<DecodedInferRequest> decoded = DecodeInferRequest(
      header, call->request.raw_input_contents, record->config(), record->model(), shared_memory_);
  if (!decoded.ok()) {
    RequestTimestamps timestamps;
    timestamps.received = received;
    record->metrics().RecordFailure(FailureReason::kOther, timestamps, clock_->Now());
    return done(Answer(decoded.status()));
  }
  call->decoded = *std::move(decoded);
  const DecodedInferRequest& request_data = call->decoded;
  if (!request_data.shared_memory_output.has_value()) {
    absl::StatusOr<HostBuffer> output = output_buffers_->Acquire(
        static_cast<size_t>(NumElements(request_data.output_shape)) * sizeof(float));
    if (!output.ok()) return done(Answer(output.status()));
    call->output = *std::move(output);
  }

  inference::ModelInferResponse& answer = call->header;
  answer.set_model_name(record->name());
  answer.set_model_version(record->version_string());
  answer.set_id(header.id());
  inference::ModelInferResponse::InferOutputTensor* output = answer.add_outputs();
  output->set_name(record->config().output(0).name());
  output->set_datatype("FP32");
  for (int64_t dim : request_data.output_shape) output->add_shape(dim);

  auto inference_request = std::make_unique<InferenceRequest>();
  inference_request->id = header.id();
  inference_request->input_shape = request_data.input_shape;
  inference_request->batch_size = request_data.batch_size;
  inference_request->input = request_data.input;
  if (request_data.input_pieces.has_value()) {
    inference_request->copy_input = [pieces = &*call->decoded.input_pieces](
                                        size_t offset, size_t size, char* destination) {
      pieces->CopyRangeTo(offset, size, destination);
    };
  }
  // Page-locked memory is copied to and from the device directly.
  inference_request->input_pinned =
      request_data.shared_memory_input.has_value() &&
      request_data.shared_memory_input->region->page_locked() &&
      request_data.input == reinterpret_cast<const float*>(request_data.shared_memory_input->data);
  inference_request->output_pinned =
      request_data.shared_memory_output.has_value()
          ? OutputInRegionInPlace(*call) && request_data.shared_memory_output->region->page_locked()
          : call->output.page_locked();
  inference_request->deadline = info.deadline;
  inference_request->requested_timeout = request_data.timeout;
  inference_request->timestamps.received = received;
  inference_request->is_cancelled = std::move(info.is_cancelled);
  inference_request->allocate_output = [target = call.get()](const Shape& shape) {
    return AllocateOutput(*target, shape);
  };
  call->record = record;
  call->clock = clock_;
  // The call is owned by on_complete until it runs, then by the answer, so
  // that it is released where the answer is finished, not on the instance's
  // thread. The request's other functions borrow it: nothing calls them
  // once the request is complete.
  inference_request->on_complete = [call = std::move(call), done = std::move(done)](
                                       const absl::Status& computed,
                                       const RequestTimestamps& timestamps) mutable {
    call->computed = computed;
    call->timestamps = timestamps;
    done(Answer(std::move(call)));
  };
  record->batcher().Enqueue(std::move(inference_request));
}

}  // namespace fuseserve
