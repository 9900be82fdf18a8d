#pragma once

// Every RPC of inference.GRPCInferenceService but ModelInfer, on gRPC's
// callback API, over either of the two generated bases that differ only in
// how ModelInfer is received (`ModelInferApi`): CallbackModelInferApi or
// QueuedModelInferApi. The concrete services (callback_inference_service.h,
// queued_inference_service.h) add ModelInfer, through `infer()`.

#include <string>

#include "proto/grpc_service.grpc.pb.h"
#include "server/grpc/inference_service.h"
#include "server/grpc/model_infer.h"

namespace fuseserve {

// ModelInfer raw on the callback API; every other RPC on the callback API.
using CallbackModelInferApi = inference::GRPCInferenceService::WithRawCallbackMethod_ModelInfer<
    inference::GRPCInferenceService::CallbackService>;

// ModelInfer raw on completion queues; every other RPC on the callback API.
// WithRawMethod_ModelInfer must wrap the plain Service directly: gRPC makes a
// method asynchronous only while it is still synchronous (marking a callback
// method raw would keep its callback handler).
namespace queued_api {
using S = inference::GRPCInferenceService;
using QueuedModelInferApi = S::WithCallbackMethod_ServerLive<S::WithCallbackMethod_ServerReady<
    S::WithCallbackMethod_ModelReady<S::WithCallbackMethod_ServerMetadata<
        S::WithCallbackMethod_ModelMetadata<S::WithCallbackMethod_ModelStreamInfer<
            S::WithCallbackMethod_ModelConfig<S::WithCallbackMethod_ModelStatistics<
                S::WithCallbackMethod_RepositoryIndex<S::WithCallbackMethod_RepositoryModelLoad<
                    S::WithCallbackMethod_RepositoryModelUnload<
                        S::WithCallbackMethod_SystemSharedMemoryStatus<
                            S::WithCallbackMethod_SystemSharedMemoryRegister<
                                S::WithCallbackMethod_SystemSharedMemoryUnregister<
                                    S::WithCallbackMethod_CudaSharedMemoryStatus<
                                        S::WithCallbackMethod_CudaSharedMemoryRegister<
                                            S::WithCallbackMethod_CudaSharedMemoryUnregister<
                                                S::WithCallbackMethod_TraceSetting<
                                                    S::WithCallbackMethod_LogSettings<
                                                        S::WithRawMethod_ModelInfer<
                                                            S::Service>>>>>>>>>>>>>>>>>>>>;
}  // namespace queued_api
using queued_api::QueuedModelInferApi;

template <class ModelInferApi>
class InferenceRpcs : public ModelInferApi, public InferenceService {
 public:
  grpc::Service* service() override { return this; }
  bool Ready() const override;
  const HostBufferPool& answer_buffers() const override { return infer_.answer_buffers(); }

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

 protected:
  // See InferenceService::Create.
  InferenceRpcs(InferenceServiceOptions options, const ModelManager* models, Clock* clock,
                SharedMemoryManager* shared_memory);

  const InferenceServiceOptions& options() const { return options_; }
  const ModelInferHandler& infer() const { return infer_; }

 private:
  InferenceServiceOptions options_;
  const ModelManager* models_;
  SharedMemoryManager* shared_memory_;
  ModelInferHandler infer_;
};

extern template class InferenceRpcs<CallbackModelInferApi>;
extern template class InferenceRpcs<QueuedModelInferApi>;

}  // namespace fuseserve
