#include "server/grpc/inference_rpcs.h"

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "server/grpc/status_conversion.h"

namespace fuseserve {
namespace {

grpc::ServerUnaryReactor* Finish(grpc::CallbackServerContext* context,
                                 const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
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

}  // namespace

template <class ModelInferApi>
InferenceRpcs<ModelInferApi>::InferenceRpcs(InferenceServiceOptions options,
                                            const ModelManager* models, Clock* clock,
                                            SharedMemoryManager* shared_memory)
    : options_(std::move(options)),
      models_(models),
      shared_memory_(shared_memory),
      infer_(models, clock, shared_memory, options_.page_locked_outputs) {}

template <class ModelInferApi>
bool InferenceRpcs<ModelInferApi>::Ready() const { return models_->Ready(options_.strict_readiness); }

template <class ModelInferApi>
grpc::ServerUnaryReactor* InferenceRpcs<ModelInferApi>::ServerLive(grpc::CallbackServerContext* context,
                                                       const inference::ServerLiveRequest*,
                                                       inference::ServerLiveResponse* response) {
  response->set_live(true);
  return Finish(context, absl::OkStatus());
}

template <class ModelInferApi>
grpc::ServerUnaryReactor* InferenceRpcs<ModelInferApi>::ServerReady(
    grpc::CallbackServerContext* context, const inference::ServerReadyRequest*,
    inference::ServerReadyResponse* response) {
  response->set_ready(Ready());
  return Finish(context, absl::OkStatus());
}

template <class ModelInferApi>
grpc::ServerUnaryReactor* InferenceRpcs<ModelInferApi>::ModelReady(grpc::CallbackServerContext* context,
                                                       const inference::ModelReadyRequest* request,
                                                       inference::ModelReadyResponse* response) {
  // As Triton: an unknown model is simply not ready.
  absl::StatusOr<const ModelVersionRecord*> record =
      models_->Find(request->name(), request->version());
  response->set_ready(record.ok() && (*record)->ready());
  return Finish(context, absl::OkStatus());
}

template <class ModelInferApi>
grpc::ServerUnaryReactor* InferenceRpcs<ModelInferApi>::ServerMetadata(
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

template <class ModelInferApi>
grpc::ServerUnaryReactor* InferenceRpcs<ModelInferApi>::ModelMetadata(
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

template <class ModelInferApi>
grpc::ServerUnaryReactor* InferenceRpcs<ModelInferApi>::ModelConfig(grpc::CallbackServerContext* context,
                                                        const inference::ModelConfigRequest* request,
                                                        inference::ModelConfigResponse* response) {
  absl::StatusOr<const ModelVersionRecord*> found =
      models_->FindReady(request->name(), request->version());
  if (!found.ok()) return Finish(context, found.status());
  *response->mutable_config() = (*found)->config();
  return Finish(context, absl::OkStatus());
}

template <class ModelInferApi>
grpc::ServerUnaryReactor* InferenceRpcs<ModelInferApi>::ModelStatistics(
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

template <class ModelInferApi>
grpc::ServerUnaryReactor* InferenceRpcs<ModelInferApi>::RepositoryIndex(
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

template <class ModelInferApi>
grpc::ServerUnaryReactor* InferenceRpcs<ModelInferApi>::SystemSharedMemoryStatus(
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

template <class ModelInferApi>
grpc::ServerUnaryReactor* InferenceRpcs<ModelInferApi>::SystemSharedMemoryRegister(
    grpc::CallbackServerContext* context,
    const inference::SystemSharedMemoryRegisterRequest* request,
    inference::SystemSharedMemoryRegisterResponse*) {
  if (shared_memory_ == nullptr) return Finish(context, SharedMemoryDisabled());
  return Finish(context, shared_memory_->Register(request->name(), request->key(),
                                                  request->offset(), request->byte_size()));
}

template <class ModelInferApi>
grpc::ServerUnaryReactor* InferenceRpcs<ModelInferApi>::SystemSharedMemoryUnregister(
    grpc::CallbackServerContext* context,
    const inference::SystemSharedMemoryUnregisterRequest* request,
    inference::SystemSharedMemoryUnregisterResponse*) {
  if (shared_memory_ == nullptr) return Finish(context, SharedMemoryDisabled());
  shared_memory_->Unregister(request->name());
  return Finish(context, absl::OkStatus());
}

template class InferenceRpcs<CallbackModelInferApi>;
template class InferenceRpcs<QueuedModelInferApi>;

}  // namespace fuseserve
