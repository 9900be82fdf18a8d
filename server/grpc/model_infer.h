#pragma once

// ModelInfer's work, whichever gRPC API receives the call (the callback API or
// completion queues): parse the raw request, decode it against the model's
// config, hand it to the model's batcher, and serialise the answer once the
// batch has run. The caller only supplies the call's deadline, a way to ask
// whether the client has gone away, and what to do with the result.

#include <functional>
#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "grpcpp/support/byte_buffer.h"
#include "server/batching/clock.h"
#include "server/runtime/host_buffer_pool.h"
#include "server/runtime/model_manager.h"
#include "server/shm/shared_memory_manager.h"

namespace fuseserve {

struct InferCall;  // model_infer.cc

class ModelInferHandler {
 public:
  // A call's outcome, handed to the transport once the request has been
  // computed (or has failed). Finish turns it into the final status and the
  // serialised answer, and records the request in the model's metrics, on
  // whichever thread the transport sends from: the instance that computed the
  // request only hands it over (serialising, recording and releasing a call
  // cost a GPU instance ~10 us per answer, a quarter of its time per batch of
  // ~9 GEMM answers on an H200 host). Move-only; destroying it releases what
  // the call held (the received request and its buffers).
  class Answer {
   public:
    Answer() = default;
    Answer(Answer&&) noexcept = default;
    Answer& operator=(Answer&&) noexcept = default;
    ~Answer();

    // The final status and, when it is OK, the answer in `*serialized`
    // (taken with Swap: grpc::ByteBuffer has no move, and a copy is an
    // allocation and a reference per slice). Once.
    absl::Status Finish(grpc::ByteBuffer* serialized);

   private:
    friend class ModelInferHandler;
    explicit Answer(absl::Status failure) : failure_(std::move(failure)) {}
    explicit Answer(std::shared_ptr<InferCall> call) : call_(std::move(call)) {}

    absl::Status failure_;             // when the call never reached a batch
    std::shared_ptr<InferCall> call_;  // otherwise
  };

  // Called exactly once per Start, from any thread.
  using Done = std::function<void(Answer answer)>;

  // What Start needs to know of the call.
  struct CallInfo {
    absl::Time deadline = absl::InfiniteFuture();
    // True once the client has gone away; may be empty (never cancelled).
    std::function<bool()> is_cancelled;
  };

  // `models`, `clock` and `shared_memory` (null: the extension is off) must
  // outlive the handler. `page_locked_outputs`: answers' output buffers are
  // page-locked (needs a CUDA device), so GPU instances copy into them
  // directly.
  ModelInferHandler(const ModelManager* models, Clock* clock, SharedMemoryManager* shared_memory,
                    bool page_locked_outputs);

  // Handles one ModelInfer request. A request that cannot be parsed or
  // decoded, or names no ready model, is answered (through `done`) before
  // Start returns; any other is answered when its batch has run. `request`
  // is read only during the call: the bytes the batch needs are kept alive
  // by the handler.
  void Start(const grpc::ByteBuffer& request, CallInfo call, Done done) const;

  // The pool of answers' output buffers.
  const HostBufferPool& answer_buffers() const { return *output_buffers_; }

 private:
  const ModelManager* models_;
  Clock* clock_;
  SharedMemoryManager* shared_memory_;
  // Answers' output tensors, reused across requests.
  std::shared_ptr<HostBufferPool> output_buffers_;
};

}  // namespace fuseserve
