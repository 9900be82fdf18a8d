#pragma once

// inference.GRPCInferenceService (KServe v2 as Triton defines it) on the gRPC
// callback API. Health, metadata, config, statistics, repository and system
// shared-memory RPCs answer inline; ModelInfer decodes the request against the
// model's config, hands it to the model's batcher and returns; the reactor is
// finished from the completion path. RPCs not overridden here (the CUDA
// shared-memory ones among them: `cuda_shared_memory` is not an extension we
// list) answer UNIMPLEMENTED.

#include <memory>
#include <string>

#include "proto/grpc_service.grpc.pb.h"
#include "server/batching/clock.h"
#include "server/runtime/host_buffer_pool.h"
#include "server/runtime/model_manager.h"
#include "server/shm/shared_memory_manager.h"

namespace fuseserve {

struct InferenceServiceOptions {
  std::string server_name = "fuseserve";
  std::string server_version;
  // ServerReady requires every model of the repository to be ready (Triton's
  // --strict-readiness); otherwise every model that loaded.
  bool strict_readiness = false;
  // Answers' output buffers are page-locked (needs a CUDA device), so that
  // GPU instances copy outputs into them directly.
  bool page_locked_outputs = false;
};

// ModelInfer is served as raw bytes (see infer_wire.h): a request's tensor is
// copied once, from the received bytes to where its batch is staged, and an
// answer's tensor is sent from the buffer it was computed into.
class InferenceService final
    : public inference::GRPCInferenceService::WithRawCallbackMethod_ModelInfer<
          inference::GRPCInferenceService::CallbackService> {
 public:
  // `models`, `clock` and `shared_memory` must outlive the service.
  // `shared_memory` null means the system_shared_memory extension is off
  // (--allow-shared-memory=false): it is not listed in ServerMetadata, its
  // three RPCs answer UNIMPLEMENTED and a request naming a region is
  // INVALID_ARGUMENT.
  InferenceService(InferenceServiceOptions options, const ModelManager* models, Clock* clock,
                   SharedMemoryManager* shared_memory = nullptr);

  grpc::ServerUnaryReactor* ServerLive(grpc::CallbackServerContext* context,
                                       const inference::ServerLiveRequest* request,
                                       inference::ServerLiveResponse* response) override;
  grpc::ServerUnaryReactor* ServerReady(grpc::CallbackServerContext* context,
                                        const inference::ServerReadyRequest* request,
                                        inference::ServerReadyResponse* response) override;
  grpc::ServerUnaryReactor* ModelReady(grpc::CallbackServerContext* context,
                                       const inference::ModelReadyRequest* request,
                                       inference::ModelReadyResponse* response) override;
  grpc::ServerUnaryReactor* ServerMetadata(grpc::CallbackServerContext* context,
                                           const inference::ServerMetadataRequest* request,
                                           inference::ServerMetadataResponse* response) override;
  grpc::ServerUnaryReactor* ModelMetadata(grpc::CallbackServerContext* context,
                                          const inference::ModelMetadataRequest* request,
                                          inference::ModelMetadataResponse* response) override;
  grpc::ServerUnaryReactor* ModelInfer(grpc::CallbackServerContext* context,
                                       const grpc::ByteBuffer* request,
                                       grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ModelConfig(grpc::CallbackServerContext* context,
                                        const inference::ModelConfigRequest* request,
                                        inference::ModelConfigResponse* response) override;
  grpc::ServerUnaryReactor* ModelStatistics(grpc::CallbackServerContext* context,
                                            const inference::ModelStatisticsRequest* request,
                                            inference::ModelStatisticsResponse* response) override;
  grpc::ServerUnaryReactor* RepositoryIndex(grpc::CallbackServerContext* context,
                                            const inference::RepositoryIndexRequest* request,
                                            inference::RepositoryIndexResponse* response) override;
  grpc::ServerUnaryReactor* SystemSharedMemoryStatus(
      grpc::CallbackServerContext* context,
      const inference::SystemSharedMemoryStatusRequest* request,
      inference::SystemSharedMemoryStatusResponse* response) override;
  grpc::ServerUnaryReactor* SystemSharedMemoryRegister(
      grpc::CallbackServerContext* context,
      const inference::SystemSharedMemoryRegisterRequest* request,
      inference::SystemSharedMemoryRegisterResponse* response) override;
  grpc::ServerUnaryReactor* SystemSharedMemoryUnregister(
      grpc::CallbackServerContext* context,
      const inference::SystemSharedMemoryUnregisterRequest* request,
      inference::SystemSharedMemoryUnregisterResponse* response) override;

  // Whether the server is ready (the same answer as ServerReady).
  bool Ready() const;

 private:
  InferenceServiceOptions options_;
  const ModelManager* models_;
  Clock* clock_;
  SharedMemoryManager* shared_memory_;
  // Answers' output tensors, reused across requests.
  std::shared_ptr<HostBufferPool> output_buffers_;
};

}  // namespace fuseserve
