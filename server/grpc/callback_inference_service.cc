#include "server/grpc/callback_inference_service.h"

#include <utility>

#include "server/grpc/grpc_deadline.h"
#include "server/grpc/status_conversion.h"

namespace fuseserve {

CallbackInferenceService::CallbackInferenceService(InferenceServiceOptions options,
                                                   const ModelManager* models, Clock* clock,
                                                   SharedMemoryManager* shared_memory)
    : InferenceRpcs(std::move(options), models, clock, shared_memory) {}

grpc::ServerUnaryReactor* CallbackInferenceService::ModelInfer(grpc::CallbackServerContext* context,
                                                               const grpc::ByteBuffer* request,
                                                               grpc::ByteBuffer* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  ModelInferHandler::CallInfo call;
  call.deadline = DeadlineOf(*context);
  call.is_cancelled = [context] { return context->IsCancelled(); };
  infer().Start(*request, std::move(call), [reactor, response](ModelInferHandler::Answer answer) {
    grpc::ByteBuffer serialized;
    const absl::Status status = answer.Finish(&serialized);
    if (status.ok()) response->Swap(&serialized);
    reactor->Finish(ToGrpcStatus(status));
  });
  return reactor;
}

}  // namespace fuseserve
