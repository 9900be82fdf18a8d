#pragma once

// ModelInfer on gRPC's callback API (--grpc-infer-threads=0): gRPC's own
// threads run each call's handler, and the reactor is finished from whichever
// thread completes the request.

#include "server/grpc/inference_rpcs.h"

namespace fuseserve {

class CallbackInferenceService final : public InferenceRpcs<CallbackModelInferApi> {
 public:
  // See InferenceService::Create.
  CallbackInferenceService(InferenceServiceOptions options, const ModelManager* models,
                           Clock* clock, SharedMemoryManager* shared_memory);

  grpc::ServerUnaryReactor* ModelInfer(grpc::CallbackServerContext* context,
                                       const grpc::ByteBuffer* request,
                                       grpc::ByteBuffer* response) override;
};

}  // namespace fuseserve
