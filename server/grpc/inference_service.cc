#include "server/grpc/inference_service.h"

#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/grpc/infer_request_decoder.h"
#include "server/grpc/infer_wire.h"
#include "server/grpc/status_conversion.h"
#include "server/runtime/inference_request.h"

namespace fuseserve {
namespace {

grpc::ServerUnaryReactor* Finish(grpc::CallbackServerContext* context,
                                 const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

// The gRPC deadline on the server's clock (InfiniteFuture when none was set).
absl::Time DeadlineOf(const grpc::CallbackServerContext& context) {
  const auto deadline = context.deadline();
  // gRPC reports "no deadline" as a time point centuries away.
  if (deadline >= std::chrono::system_clock::now() + std::chrono::hours(24 * 365 * 100)) {
    return absl::InfiniteFuture();
  }
  return absl::FromChrono(deadline);
}

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

void FillTensorMetadata(const std::string& name, const google::protobuf::RepeatedField<int64_t>& dims,
                        bool batching,
                        inference::ModelMetadataResponse::TensorMetadata* tensor) {
  tensor->set_name(name);
  tensor->set_datatype("FP32");
  // Triton's rule: the full shape is [-1] + dims when the model batches.
  if (batching) tensor->add_shape(-1);
  for (int64_t dim : dims) tensor->add_shape(dim);
}

void FillDuration(const DurationStat& from, inference::StatisticDuration* to) {
  to->set_count(from.count);
  to->set_ns(from.ns);
}

void FillStatistics(const ModelVersionRecord& record, inference::ModelStatistics* stats) {
  const ModelStatisticsSnapshot snapshot = record.metrics().Snapshot();
  stats->set_name(record.name());
  stats->set_version(record.version_string());
  stats->set_last_inference(snapshot.last_inference_ms);
  stats->set_inference_count(snapshot.inference_count);
  stats->set_execution_count(snapshot.execution_count);
  inference::InferStatistics* infer = stats->mutable_inference_stats();
  FillDuration(snapshot.success, infer->mutable_success());
  FillDuration(snapshot.fail, infer->mutable_fail());
  FillDuration(snapshot.queue, infer->mutable_queue());
  FillDuration(snapshot.compute_input, infer->mutable_compute_input());
  FillDuration(snapshot.compute_infer, infer->mutable_compute_infer());
  FillDuration(snapshot.compute_output, infer->mutable_compute_output());
  infer->mutable_cache_hit();
  infer->mutable_cache_miss();
  for (const auto& [batch_size, batch] : snapshot.batch_stats) {
    inference::InferBatchStatistics* out = stats->add_batch_stats();
    out->set_batch_size(batch_size);
    FillDuration(batch.compute_input, out->mutable_compute_input());
    FillDuration(batch.compute_infer, out->mutable_compute_infer());
    FillDuration(batch.compute_output, out->mutable_compute_output());
  }
}

absl::Status SharedMemoryDisabled() {
  return absl::UnimplementedError(
      "system shared memory is disabled on this server (start it with "
      "--allow-shared-memory=true)");
}

// What a ModelInfer call keeps alive until it completes: the received
// request (its raw input is read where it was received), the decoded request
// (the shared-memory regions it reads and writes), the answer's header and
// the buffer its output is computed into.
struct InferCall {
  WireInferRequest request;
  DecodedInferRequest decoded;
  inference::ModelInferResponse header;
  // The output, when it is not written into a shared-memory region.
  HostBuffer output;
  // An output bound for a shared-memory region that cannot be written in
  // place (not float-aligned) is computed here first.
  std::vector<float> output_staging;
};

// Whether the output goes straight into its shared-memory region: the region
// is float-aligned and large enough (the decoder checked the size against
// the same shape).
bool OutputInRegionInPlace(const InferCall& call) {
  if (!call.decoded.shared_memory_output.has_value()) return false;
  const SharedMemoryView& region = *call.decoded.shared_memory_output;
  const uint64_t bytes = static_cast<uint64_t>(NumElements(call.decoded.output_shape)) *
                         sizeof(float);
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

}  // namespace

InferenceService::InferenceService(InferenceServiceOptions options, const ModelManager* models,
                                   Clock* clock, SharedMemoryManager* shared_memory)
    : options_(std::move(options)),
      models_(models),
      clock_(clock),
      shared_memory_(shared_memory),
      output_buffers_(HostBufferPool::Create({options_.page_locked_outputs})) {}

bool InferenceService::Ready() const { return models_->Ready(options_.strict_readiness); }

grpc::ServerUnaryReactor* InferenceService::ServerLive(grpc::CallbackServerContext* context,
                                                       const inference::ServerLiveRequest*,
                                                       inference::ServerLiveResponse* response) {
  response->set_live(true);
  return Finish(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* InferenceService::ServerReady(
    grpc::CallbackServerContext* context, const inference::ServerReadyRequest*,
    inference::ServerReadyResponse* response) {
  response->set_ready(Ready());
  return Finish(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* InferenceService::ModelReady(grpc::CallbackServerContext* context,
                                                       const inference::ModelReadyRequest* request,
                                                       inference::ModelReadyResponse* response) {
  // As Triton: an unknown model is simply not ready.
  absl::StatusOr<const ModelVersionRecord*> record =
      models_->Find(request->name(), request->version());
  response->set_ready(record.ok() && (*record)->ready());
  return Finish(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* InferenceService::ServerMetadata(
    grpc::CallbackServerContext* context, const inference::ServerMetadataRequest*,
    inference::ServerMetadataResponse* response) {
  response->set_name(options_.server_name);
  response->set_version(options_.server_version);
  for (const char* extension : {"model_configuration", "statistics", "parameters"}) {
    response->add_extensions(extension);
  }
  if (shared_memory_ != nullptr) response->add_extensions("system_shared_memory");
  return Finish(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* InferenceService::ModelMetadata(
    grpc::CallbackServerContext* context, const inference::ModelMetadataRequest* request,
    inference::ModelMetadataResponse* response) {
  absl::StatusOr<const ModelVersionRecord*> found =
      models_->FindReady(request->name(), request->version());
  if (!found.ok()) return Finish(context, found.status());
  const ModelVersionRecord& record = **found;
  const inference::ModelConfig& config = record.config();
  response->set_name(record.name());
  response->set_platform(config.platform());
  for (const ModelVersionRecord* version : models_->All()) {
    if (version->name() == record.name() && version->loaded()) {
      response->add_versions(version->version_string());
    }
  }
  const bool batching = config.max_batch_size() > 0;
  FillTensorMetadata(config.input(0).name(), config.input(0).dims(), batching,
                     response->add_inputs());
  FillTensorMetadata(config.output(0).name(), config.output(0).dims(), batching,
                     response->add_outputs());
  (*response->mutable_properties())["precision"] = PrecisionName(record.model().precision());
  (*response->mutable_properties())["device"] = record.device();
  return Finish(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* InferenceService::ModelConfig(grpc::CallbackServerContext* context,
                                                        const inference::ModelConfigRequest* request,
                                                        inference::ModelConfigResponse* response) {
  absl::StatusOr<const ModelVersionRecord*> found =
      models_->FindReady(request->name(), request->version());
  if (!found.ok()) return Finish(context, found.status());
  *response->mutable_config() = (*found)->config();
  return Finish(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* InferenceService::ModelStatistics(
    grpc::CallbackServerContext* context, const inference::ModelStatisticsRequest* request,
    inference::ModelStatisticsResponse* response) {
  std::vector<const ModelVersionRecord*> records;
  if (request->name().empty()) {
    records = models_->All();
  } else if (request->version().empty()) {
    absl::StatusOr<std::vector<const ModelVersionRecord*>> versions =
        models_->Versions(request->name());
    if (!versions.ok()) return Finish(context, versions.status());
    records = *std::move(versions);
  } else {
    absl::StatusOr<const ModelVersionRecord*> record =
        models_->Find(request->name(), request->version());
    if (!record.ok()) return Finish(context, record.status());
    records.push_back(*record);
  }
  for (const ModelVersionRecord* record : records) {
    if (record->loaded()) FillStatistics(*record, response->add_model_stats());
  }
  return Finish(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* InferenceService::RepositoryIndex(
    grpc::CallbackServerContext* context, const inference::RepositoryIndexRequest* request,
    inference::RepositoryIndexResponse* response) {
  for (const ModelVersionRecord* record : models_->All()) {
    const bool ready = record->ready();
    if (request->ready() && !ready) continue;
    inference::RepositoryIndexResponse::ModelIndex* index = response->add_models();
    index->set_name(record->name());
    index->set_version(record->version_string());
    index->set_state(ready ? "READY" : "UNAVAILABLE");
    index->set_reason(record->reason());
  }
  return Finish(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* InferenceService::SystemSharedMemoryStatus(
    grpc::CallbackServerContext* context, const inference::SystemSharedMemoryStatusRequest* request,
    inference::SystemSharedMemoryStatusResponse* response) {
  if (shared_memory_ == nullptr) return Finish(context, SharedMemoryDisabled());
  absl::StatusOr<std::vector<std::shared_ptr<const SharedMemoryRegion>>> regions =
      shared_memory_->Status(request->name());
  if (!regions.ok()) return Finish(context, regions.status());
  for (const std::shared_ptr<const SharedMemoryRegion>& region : *regions) {
    inference::SystemSharedMemoryStatusResponse::RegionStatus& status =
        (*response->mutable_regions())[region->name()];
    status.set_name(region->name());
    status.set_key(region->key());
    status.set_offset(region->offset());
    status.set_byte_size(region->byte_size());
  }
  return Finish(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* InferenceService::SystemSharedMemoryRegister(
    grpc::CallbackServerContext* context,
    const inference::SystemSharedMemoryRegisterRequest* request,
    inference::SystemSharedMemoryRegisterResponse*) {
  if (shared_memory_ == nullptr) return Finish(context, SharedMemoryDisabled());
  return Finish(context, shared_memory_->Register(request->name(), request->key(),
                                                  request->offset(), request->byte_size()));
}

grpc::ServerUnaryReactor* InferenceService::SystemSharedMemoryUnregister(
    grpc::CallbackServerContext* context,
    const inference::SystemSharedMemoryUnregisterRequest* request,
    inference::SystemSharedMemoryUnregisterResponse*) {
  if (shared_memory_ == nullptr) return Finish(context, SharedMemoryDisabled());
  shared_memory_->Unregister(request->name());
  return Finish(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* InferenceService::ModelInfer(grpc::CallbackServerContext* context,
                                                       const grpc::ByteBuffer* request,
                                                       grpc::ByteBuffer* response) {
  const absl::Time received = clock_->Now();
  auto call = std::make_shared<InferCall>();
  absl::StatusOr<WireInferRequest> parsed = ParseWireInferRequest(*request);
  if (!parsed.ok()) return Finish(context, parsed.status());
  call->request = *std::move(parsed);
  const inference::ModelInferRequest& header = call->request.header;
  absl::StatusOr<const ModelVersionRecord*> found =
      models_->FindReady(header.model_name(), header.model_version());
  if (!found.ok()) return Finish(context, found.status());
  const ModelVersionRecord* record = *found;

  absl::StatusOr<DecodedInferRequest> decoded =
      DecodeInferRequest(header, call->request.raw_input_contents, record->config(),
                         record->model(), shared_memory_);
  if (!decoded.ok()) {
    RequestTimestamps timestamps;
    timestamps.received = received;
    record->metrics().RecordFailure(FailureReason::kOther, timestamps, clock_->Now());
    return Finish(context, decoded.status());
  }
  call->decoded = *std::move(decoded);
  const DecodedInferRequest& request_data = call->decoded;
  if (!request_data.shared_memory_output.has_value()) {
    absl::StatusOr<HostBuffer> output = output_buffers_->Acquire(
        static_cast<size_t>(NumElements(request_data.output_shape)) * sizeof(float));
    if (!output.ok()) return Finish(context, output.status());
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
    inference_request->copy_input = [call](char* destination) {
      call->decoded.input_pieces->CopyTo(destination);
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
  inference_request->deadline = DeadlineOf(*context);
  inference_request->requested_timeout = request_data.timeout;
  inference_request->timestamps.received = received;
  inference_request->is_cancelled = [context] { return context->IsCancelled(); };
  inference_request->allocate_output = [call](const Shape& shape) {
    return AllocateOutput(*call, shape);
  };
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  Clock* clock = clock_;
  const int64_t batch_size = request_data.batch_size;
  inference_request->on_complete = [reactor, record, clock, batch_size, call, response](
                                       const absl::Status& computed,
                                       const RequestTimestamps& timestamps) {
    const absl::Status status = computed.ok() ? FinishStagedOutput(*call) : computed;
    if (status.ok()) *response = SerializeAnswer(*call);
    const absl::Time finished = clock->Now();
    if (status.ok()) {
      record->metrics().RecordSuccess(timestamps, batch_size, finished);
    } else {
      record->metrics().RecordFailure(FailureReasonOf(status), timestamps, finished);
    }
    reactor->Finish(ToGrpcStatus(status));
  };
  record->batcher().Enqueue(std::move(inference_request));
  return reactor;
}

}  // namespace fuseserve
