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

// What a ModelInfer call keeps alive until it completes: the decoded request
// (its aligned input copy, the shared-memory regions it reads and writes)
// and, for an output bound for shared memory that cannot be written in place,
// the buffer the instance writes it to first.
struct InferCall {
  DecodedInferRequest decoded;
  std::vector<float> output_staging;
};

// Where the instance writes the output of `shape`: the response's raw entry,
// or the shared-memory region the request named. The region is written in
// place when it is float-aligned and large enough (the decoder checked the
// size against the same shape), otherwise through output_staging.
float* AllocateOutput(InferCall& call, std::string* raw_output, const Shape& shape) {
  const int64_t count = NumElements(shape);
  const uint64_t bytes = static_cast<uint64_t>(count) * sizeof(float);
  if (!call.decoded.shared_memory_output.has_value()) {
    raw_output->resize(bytes);
    return reinterpret_cast<float*>(raw_output->data());
  }
  const SharedMemoryView& region = *call.decoded.shared_memory_output;
  if (bytes <= region.byte_size && reinterpret_cast<uintptr_t>(region.data) % alignof(float) == 0) {
    return reinterpret_cast<float*>(region.data);
  }
  call.output_staging.resize(count);
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

}  // namespace

InferenceService::InferenceService(InferenceServiceOptions options, const ModelManager* models,
                                   Clock* clock, SharedMemoryManager* shared_memory)
    : options_(std::move(options)), models_(models), clock_(clock), shared_memory_(shared_memory) {}

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
                                                       const inference::ModelInferRequest* request,
                                                       inference::ModelInferResponse* response) {
  const absl::Time received = clock_->Now();
  absl::StatusOr<const ModelVersionRecord*> found =
      models_->FindReady(request->model_name(), request->model_version());
  if (!found.ok()) return Finish(context, found.status());
  const ModelVersionRecord* record = *found;

  absl::StatusOr<DecodedInferRequest> decoded =
      DecodeInferRequest(*request, record->config(), record->model(), shared_memory_);
  if (!decoded.ok()) {
    RequestTimestamps timestamps;
    timestamps.received = received;
    record->metrics().RecordFailure(FailureReason::kOther, timestamps, clock_->Now());
    return Finish(context, decoded.status());
  }

  response->set_model_name(record->name());
  response->set_model_version(record->version_string());
  response->set_id(request->id());
  inference::ModelInferResponse::InferOutputTensor* output = response->add_outputs();
  output->set_name(record->config().output(0).name());
  output->set_datatype("FP32");
  for (int64_t dim : decoded->output_shape) output->add_shape(dim);
  // Every output has a raw entry, index-aligned with `outputs`; it stays empty
  // when the output goes to shared memory (as in Triton).
  std::string* raw_output = response->add_raw_output_contents();

  auto call = std::make_shared<InferCall>();
  call->decoded = *std::move(decoded);
  auto inference_request = std::make_unique<InferenceRequest>();
  inference_request->id = request->id();
  inference_request->input_shape = call->decoded.input_shape;
  inference_request->batch_size = call->decoded.batch_size;
  inference_request->input = call->decoded.input;
  inference_request->deadline = DeadlineOf(*context);
  inference_request->requested_timeout = call->decoded.timeout;
  inference_request->timestamps.received = received;
  inference_request->is_cancelled = [context] { return context->IsCancelled(); };
  // The output is written straight into the response message or the
  // shared-memory region.
  inference_request->allocate_output = [call, raw_output](const Shape& shape) {
    return AllocateOutput(*call, raw_output, shape);
  };
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  Clock* clock = clock_;
  const int64_t batch_size = call->decoded.batch_size;
  inference_request->on_complete = [reactor, record, clock, batch_size, call](
                                       const absl::Status& computed,
                                       const RequestTimestamps& timestamps) {
    const absl::Status status = computed.ok() ? FinishStagedOutput(*call) : computed;
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
