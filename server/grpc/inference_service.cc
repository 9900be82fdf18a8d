#include "server/grpc/inference_service.h"

#include <memory>
#include <utility>

#include "server/grpc/callback_inference_service.h"
#include "server/grpc/queued_inference_service.h"

namespace fuseserve {

std::unique_ptr<InferenceService> InferenceService::Create(InferenceServiceOptions options,
                                                           const ModelManager* models, Clock* clock,
                                                           SharedMemoryManager* shared_memory) {
  if (options.infer_threads > 0) {
    return std::make_unique<QueuedInferenceService>(std::move(options), models, clock,
                                                    shared_memory);
  }
  return std::make_unique<CallbackInferenceService>(std::move(options), models, clock,
                                                    shared_memory);
}

}  // namespace fuseserve
