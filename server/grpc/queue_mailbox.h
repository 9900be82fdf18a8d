#pragma once

// Work handed from any thread to the one thread that serves a gRPC completion
// queue, waking that thread as seldom as possible (issue 6).
//
// Why: a ModelInfer answer is sent by the queue's thread that received the
// call (gRPC spends less CPU per call that way, bench/results/
// 2026-11-27-h200-grpc-answer-handback.md). Handing each answer back through
// its own alarm cost the GPU instance ~7 us per answer (the alarm's
// completion and the kick of the queue's poller), ~60 of the ~450 us it took
// per batch of ~9 GEMM answers on an H200 host. Here the first item posted
// while no alarm is pending sets one; the items posted until the queue's
// thread takes the alarm's tag ride along with it.
//
// Usage: the queue's thread passes every tag for which Owns() is true to
// DeliverPosted(); any thread may Post. The mailbox must outlive its
// queue's last Next (an alarm still pending holds its tag).

#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/alarm.h"
#include "grpcpp/completion_queue.h"

namespace fuseserve {

class QueueMailbox {
 public:
  // What is posted: delivered once, on the queue's thread.
  class Item {
   public:
    virtual void Deliver() = 0;

   protected:
    ~Item() = default;
  };

  explicit QueueMailbox(grpc::CompletionQueue* queue) : queue_(queue) {}
  QueueMailbox(const QueueMailbox&) = delete;
  QueueMailbox& operator=(const QueueMailbox&) = delete;

  // From any thread: `item` is delivered on the queue's thread once the
  // alarm pending now, or the one this call sets, comes out of the queue.
  void Post(Item* item) ABSL_LOCKS_EXCLUDED(mu_);

  // Whether `tag`, taken from the queue, is this mailbox's.
  bool Owns(const void* tag) const { return tag == this; }

  // On the queue's thread, with this mailbox's tag: delivers every item
  // posted so far, in the order they were posted.
  void DeliverPosted() ABSL_LOCKS_EXCLUDED(mu_);

  // Alarms set so far (for tests).
  int alarms_set() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  grpc::CompletionQueue* const queue_;
  mutable absl::Mutex mu_;
  std::vector<Item*> posted_ ABSL_GUARDED_BY(mu_);
  bool alarm_pending_ ABSL_GUARDED_BY(mu_) = false;
  int alarms_set_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<Item*> delivering_;  // the queue's thread's, reused
  // Set only while no tag of it is pending (alarm_pending_ false).
  grpc::Alarm alarm_;
};

}  // namespace fuseserve
