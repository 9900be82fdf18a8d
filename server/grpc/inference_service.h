#pragma once

// inference.GRPCInferenceService (KServe v2 as Triton defines it) on the gRPC
// callback API. Health, metadata, config, statistics and repository RPCs
// answer inline; ModelInfer decodes the request against the model's config,
// hands it to the model's batcher and returns; the reactor is finished from
// the completion path. RPCs not overridden here answer UNIMPLEMENTED.

#include <string>

#include "proto/grpc_service.grpc.pb.h"
#include "server/batching/clock.h"
#include "server/runtime/model_manager.h"

namespace fuseserve {

struct InferenceServiceOptions {
  std::string server_name = "fuseserve";
  std::string server_version;
  // ServerReady requires every model of the repository to be ready (Triton's
  // --strict-readiness); otherwise every model that loaded.
  bool strict_readiness = false;
};

class InferenceService final : public inference::GRPCInferenceService::CallbackService {
 public:
  // `models` and `clock` must outlive the service.
  InferenceService(InferenceServiceOptions options, const ModelManager* models, Clock* clock);

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
                                       const inference::ModelInferRequest* request,
                                       inference::ModelInferResponse* response) override;
  grpc::ServerUnaryReactor* ModelConfig(grpc::CallbackServerContext* context,
                                        const inference::ModelConfigRequest* request,
                                        inference::ModelConfigResponse* response) override;
  grpc::ServerUnaryReactor* ModelStatistics(grpc::CallbackServerContext* context,
                                            const inference::ModelStatisticsRequest* request,
                                            inference::ModelStatisticsResponse* response) override;
  grpc::ServerUnaryReactor* RepositoryIndex(grpc::CallbackServerContext* context,
                                            const inference::RepositoryIndexRequest* request,
                                            inference::RepositoryIndexResponse* response) override;

  // Whether the server is ready (the same answer as ServerReady).
  bool Ready() const;

 private:
  InferenceServiceOptions options_;
  const ModelManager* models_;
  Clock* clock_;
};

}  // namespace fuseserve
