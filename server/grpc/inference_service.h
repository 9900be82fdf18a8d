#pragma once

// inference.GRPCInferenceService (KServe v2 as Triton defines it). Health,
// metadata, config, statistics, repository and system shared-memory RPCs
// answer inline on gRPC's callback API. ModelInfer is received as raw bytes
// (infer_wire.h) and served either on completion queues, each with a thread
// of its own (the default: less gRPC CPU per call, see
// queued_inference_service.h), or on the callback API; the work is the same
// (model_infer.h). RPCs not overridden (the CUDA shared-memory ones among
// them: `cuda_shared_memory` is not an extension we list) answer
// UNIMPLEMENTED.

#include <memory>
#include <string>

#include "server/batching/clock.h"
#include "server/grpc/grpc_service_host.h"
#include "server/runtime/host_buffer_pool.h"
#include "server/runtime/model_manager.h"
#include "server/shm/shared_memory_manager.h"

namespace fuseserve {

// --grpc-infer-threads' default (see queued_inference_service.h).
inline constexpr int kDefaultGrpcInferThreads = 6;
inline constexpr int kMaxGrpcInferThreads = 64;

struct InferenceServiceOptions {
  std::string server_name = "fuseserve";
  std::string server_version;
  // ServerReady requires every model of the repository to be ready (Triton's
  // --strict-readiness); otherwise every model that loaded.
  bool strict_readiness = false;
  // Answers' output buffers are page-locked (needs a CUDA device), so that
  // GPU instances copy outputs into them directly.
  bool page_locked_outputs = false;
  // ModelInfer on this many completion queues, a thread each; 0 = on gRPC's
  // callback API.
  int infer_threads = kDefaultGrpcInferThreads;
};

class InferenceService : public GrpcServiceHost {
 public:
  // `models`, `clock` and `shared_memory` must outlive the service.
  // `shared_memory` null means the system_shared_memory extension is off
  // (--allow-shared-memory=false): it is not listed in ServerMetadata, its
  // three RPCs answer UNIMPLEMENTED and a request naming a region is
  // INVALID_ARGUMENT.
  static std::unique_ptr<InferenceService> Create(InferenceServiceOptions options,
                                                  const ModelManager* models, Clock* clock,
                                                  SharedMemoryManager* shared_memory = nullptr);

  // Whether the server is ready (the same answer as ServerReady).
  virtual bool Ready() const = 0;

  // The pool of ModelInfer answers' output buffers (page-locked where
  // InferenceServiceOptions::page_locked_outputs), for metrics.
  virtual const HostBufferPool& answer_buffers() const = 0;
};

}  // namespace fuseserve
