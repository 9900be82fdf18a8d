#include "server/grpc/queued_inference_service.h"

#include <atomic>
#include <memory>
#include <utility>

#include "grpcpp/server_context.h"
#include "grpcpp/support/async_unary_call.h"
#include "server/grpc/grpc_deadline.h"
#include "server/grpc/queue_mailbox.h"
#include "server/grpc/status_conversion.h"

namespace fuseserve {
namespace {

// One ModelInfer call on a completion queue, from the request for it to its
// deletion. Its events arrive as tags on its queue and are handled by the
// queue's one thread, which alone counts them.
//
// Who sends the answer: while other calls are in flight, the thread that
// completes the request hands the call back to its queue's thread (through
// the queue's mailbox), which sends it. gRPC spends less CPU per call that
// way than when a call is answered from another thread, and the instances
// are not held up by sends (bench/results/
// 2026-11-27-h200-grpc-answer-handback.md). A call alone in flight is
// answered at once by the completing thread: nothing else is waiting, and the
// queue thread's wake-up would add to its latency.
class QueuedInferCall final : public QueueMailbox::Item {
 public:
  // What the calls of one completion queue share.
  struct Queue {
    QueuedModelInferApi* service;
    const ModelInferHandler* infer;
    grpc::ServerCompletionQueue* queue;
    QueueMailbox* mailbox;        // the queue's
    std::atomic<int>* in_flight;  // the service's, over every queue
  };

  // Asks gRPC for the next ModelInfer call on `queue`.
  static void RequestNext(const Queue* queue) { new QueuedInferCall(queue); }

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
        RequestNext(call->queue_);
        call->awaited_ = 2;  // answered and done
        call->queue_->in_flight->fetch_add(1, std::memory_order_relaxed);
        call->Start();
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
    enum Kind { kArrived, kAnswered, kDone };
    QueuedInferCall* call;
    Kind kind;
  };

  explicit QueuedInferCall(const Queue* queue) : queue_(queue), responder_(&context_) {
    context_.AsyncNotifyWhenDone(&done_tag_);
    queue_->service->RequestModelInfer(&context_, &request_, &responder_, queue_->queue,
                                       queue_->queue, &arrived_tag_);
  }

  void Start() {
    ModelInferHandler::CallInfo info;
    info.deadline = DeadlineOf(context_);
    info.is_cancelled = [cancelled = cancelled_] {
      return cancelled->load(std::memory_order_acquire);
    };
    queue_->infer->Start(request_, std::move(info),
                         [this](ModelInferHandler::Answer answer) { Complete(std::move(answer)); });
  }

  // From any thread, once: keeps the answer, and sends it or hands the call
  // back to its queue's thread (see the class comment), which then also
  // finishes the answer (serialises it, records it, releases the request).
  // The queue and its mailbox outlive the call: GrpcServer shuts the queue
  // down only once the server has, i.e. once every call has been deleted.
  void Complete(ModelInferHandler::Answer answer) {
    answer_ = std::move(answer);
    if (queue_->in_flight->fetch_sub(1, std::memory_order_relaxed) == 1) {
      SendAnswer();
      return;
    }
    queue_->mailbox->Post(this);
  }

  // On the queue's thread, handed back. Not counted in awaited_: the
  // answered tag follows.
  void Deliver() override { SendAnswer(); }

  // Finishes the answer and starts sending it. The call may be deleted as
  // soon as Finish has started it: nothing of it is touched after.
  void SendAnswer() {
    grpc::ByteBuffer serialized;  // Finish takes its own reference
    const absl::Status status = answer_.Finish(&serialized);
    answer_ = {};  // the request's bytes and buffers, released on this thread
    if (!status.ok()) {
      responder_.FinishWithError(ToGrpcStatus(status), &answered_tag_);
      return;
    }
    responder_.Finish(serialized, grpc::Status::OK, &answered_tag_);
  }

  const Queue* const queue_;
  grpc::ServerContext context_;
  grpc::ByteBuffer request_;
  ModelInferHandler::Answer answer_;
  grpc::ServerAsyncResponseWriter<grpc::ByteBuffer> responder_;
  // Set when the client has gone away; read by the batcher, which may hold
  // the request's is_cancelled past the call's answer.
  std::shared_ptr<std::atomic<bool>> cancelled_ = std::make_shared<std::atomic<bool>>(false);
  // Tags still to come once the call has arrived (queue thread only).
  int awaited_ = 0;
  Tag arrived_tag_{this, Tag::kArrived};
  Tag answered_tag_{this, Tag::kAnswered};
  Tag done_tag_{this, Tag::kDone};
};

}  // namespace

QueuedInferenceService::QueuedInferenceService(InferenceServiceOptions options,
                                               const ModelManager* models, Clock* clock,
                                               SharedMemoryManager* shared_memory)
    : InferenceRpcs(std::move(options), models, clock, shared_memory) {}

void QueuedInferenceService::ServeCompletionQueue(grpc::ServerCompletionQueue* queue) {
  // Both outlive every call of the queue: the loop ends once the queue is
  // shut down and drained, which is after the server's last call is gone.
  QueueMailbox mailbox(queue);
  const QueuedInferCall::Queue calls{this, &infer(), queue, &mailbox, &in_flight_};
  for (int i = 0; i < kCallsRequestedPerQueue; ++i) QueuedInferCall::RequestNext(&calls);
  void* tag = nullptr;
  bool ok = false;
  while (queue->Next(&tag, &ok)) {
    if (mailbox.Owns(tag)) {
      mailbox.DeliverPosted();
    } else {
      QueuedInferCall::Handle(tag, ok);
    }
  }
}

}  // namespace fuseserve
