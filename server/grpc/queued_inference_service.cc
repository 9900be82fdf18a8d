#include "server/grpc/queued_inference_service.h"

#include <atomic>
#include <memory>
#include <utility>

#include "grpcpp/alarm.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/async_unary_call.h"
#include "server/grpc/grpc_deadline.h"
#include "server/grpc/status_conversion.h"

namespace fuseserve {
namespace {

// One ModelInfer call on a completion queue, from the request for it to its
// deletion. Its events arrive as tags on its queue and are handled by the
// queue's one thread, which alone counts them.
//
// Who sends the answer: while other calls are in flight, the thread that
// completes the request hands the call back to its queue's thread (an alarm
// already due on its queue), which sends it. gRPC spends less CPU per call
// that way than when a call is answered from another thread, and the
// instances are not held up by sends (bench/results/
// 2026-11-27-h200-grpc-answer-handback.md). A call alone in flight is
// answered at once by the completing thread: nothing else is waiting, and the
// queue thread's wake-up would add to its latency.
class QueuedInferCall {
 public:
  // Asks gRPC for the next ModelInfer call on `queue`.
  static void RequestNext(QueuedModelInferApi* service, const ModelInferHandler* infer,
                          grpc::ServerCompletionQueue* queue, std::atomic<int>* in_flight) {
    new QueuedInferCall(service, infer, queue, in_flight);
  }

  // Handles `tag`, one of a call's tags taken from its queue with gRPC's
  // `ok`. Deletes the call once no tag of it is left to come.
  static void Handle(void* tag, bool ok) {
    const Tag& event = *static_cast<Tag*>(tag);
    QueuedInferCall* call = event.call;
    switch (event.kind) {
      case Tag::kArrived:
        if (!ok) {
          // The server is shutting down and the call never started: gRPC
          // delivers no other tag of it.
          delete call;
          return;
        }
        RequestNext(call->service_, call->infer_, call->queue_, call->in_flight_);
        call->awaited_ = 2;  // answered and done
        call->in_flight_->fetch_add(1, std::memory_order_relaxed);
        call->Start();
        return;
      case Tag::kHandedBack:
        // Not counted: the answered tag follows it.
        call->SendAnswer();
        return;
      case Tag::kDone:
        // Delivered once the call is over, answered or not; only then does
        // IsCancelled say whether the client went away.
        if (call->context_.IsCancelled()) call->cancelled_->store(true, std::memory_order_release);
        break;
      case Tag::kAnswered:
        break;
    }
    if (--call->awaited_ == 0) delete call;
  }

 private:
  struct Tag {
    enum Kind { kArrived, kHandedBack, kAnswered, kDone };
    QueuedInferCall* call;
    Kind kind;
  };

  QueuedInferCall(QueuedModelInferApi* service, const ModelInferHandler* infer,
                  grpc::ServerCompletionQueue* queue, std::atomic<int>* in_flight)
      : service_(service),
        infer_(infer),
        queue_(queue),
        in_flight_(in_flight),
        responder_(&context_) {
    context_.AsyncNotifyWhenDone(&done_tag_);
    service_->RequestModelInfer(&context_, &request_, &responder_, queue_, queue_, &arrived_tag_);
  }

  void Start() {
    ModelInferHandler::CallInfo info;
    info.deadline = DeadlineOf(context_);
    info.is_cancelled = [cancelled = cancelled_] {
      return cancelled->load(std::memory_order_acquire);
    };
    infer_->Start(request_, std::move(info),
                  [this](const absl::Status& status, grpc::ByteBuffer answer) {
                    Answer(status, std::move(answer));
                  });
  }

  // From any thread, once: keeps the answer, and sends it or hands the call
  // back to its queue's thread (see the class comment). The queue outlives
  // the call: GrpcServer shuts it down only once the server has, i.e. once
  // every call has been deleted.
  void Answer(const absl::Status& status, grpc::ByteBuffer answer) {
    status_ = status;
    answer_ = std::move(answer);
    if (in_flight_->fetch_sub(1, std::memory_order_relaxed) == 1) {
      SendAnswer();
      return;
    }
    hand_back_.Set(queue_, gpr_time_0(GPR_CLOCK_MONOTONIC), &handed_back_tag_);
  }

  // Starts the answer. The call may be deleted as soon as Finish has started
  // it: nothing of it is touched after.
  void SendAnswer() {
    if (!status_.ok()) {
      responder_.FinishWithError(ToGrpcStatus(status_), &answered_tag_);
      return;
    }
    responder_.Finish(answer_, grpc::Status::OK, &answered_tag_);
  }

  QueuedModelInferApi* const service_;
  const ModelInferHandler* const infer_;
  grpc::ServerCompletionQueue* const queue_;
  // Calls of the service that have arrived and are not answered yet.
  std::atomic<int>* const in_flight_;
  grpc::ServerContext context_;
  grpc::ByteBuffer request_;
  absl::Status status_;
  grpc::ByteBuffer answer_;
  grpc::Alarm hand_back_;
  grpc::ServerAsyncResponseWriter<grpc::ByteBuffer> responder_;
  // Set when the client has gone away; read by the batcher, which may hold
  // the request's is_cancelled past the call's answer.
  std::shared_ptr<std::atomic<bool>> cancelled_ = std::make_shared<std::atomic<bool>>(false);
  // Tags still to come once the call has arrived (queue thread only).
  int awaited_ = 0;
  Tag arrived_tag_{this, Tag::kArrived};
  Tag handed_back_tag_{this, Tag::kHandedBack};
  Tag answered_tag_{this, Tag::kAnswered};
  Tag done_tag_{this, Tag::kDone};
};

}  // namespace

QueuedInferenceService::QueuedInferenceService(InferenceServiceOptions options,
                                               const ModelManager* models, Clock* clock,
                                               SharedMemoryManager* shared_memory)
    : InferenceRpcs(std::move(options), models, clock, shared_memory) {}

void QueuedInferenceService::ServeCompletionQueue(grpc::ServerCompletionQueue* queue) {
  for (int i = 0; i < kCallsRequestedPerQueue; ++i) {
    QueuedInferCall::RequestNext(this, &infer(), queue, &in_flight_);
  }
  void* tag = nullptr;
  bool ok = false;
  while (queue->Next(&tag, &ok)) QueuedInferCall::Handle(tag, ok);
}

}  // namespace fuseserve
