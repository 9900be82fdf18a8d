#include "server/grpc/queue_mailbox.h"

#include <atomic>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "grpcpp/completion_queue.h"

namespace fuseserve {
namespace {

// An item that records how often, and on which thread, it was delivered.
class Recorder final : public QueueMailbox::Item {
 public:
  void Deliver() override {
    deliveries.fetch_add(1);
    thread = std::this_thread::get_id();
  }
  std::atomic<int> deliveries{0};
  std::thread::id thread;
};

// The queue's thread: hands the mailbox its tags until the queue is shut
// down and drained; counts every other tag.
class QueueThread {
 public:
  explicit QueueThread(grpc::CompletionQueue* queue, QueueMailbox* mailbox)
      : thread_([this, queue, mailbox] {
          id_ = std::this_thread::get_id();
          started_.Notify();
          void* tag = nullptr;
          bool ok = false;
          while (queue->Next(&tag, &ok)) {
            if (mailbox->Owns(tag)) {
              mailbox->DeliverPosted();
            } else {
              ++other_tags_;
            }
          }
        }) {
    started_.WaitForNotification();
  }
  void Join() { thread_.join(); }
  std::thread::id id() const { return id_; }
  int other_tags() const { return other_tags_; }

 private:
  absl::Notification started_;
  std::thread::id id_;
  int other_tags_ = 0;
  std::thread thread_;
};

TEST(QueueMailboxTest, EveryItemPostedFromManyThreadsIsDeliveredOnceOnTheQueueThread) {
  grpc::CompletionQueue queue;
  QueueMailbox mailbox(&queue);
  QueueThread queue_thread(&queue, &mailbox);
  constexpr int kThreads = 4;
  constexpr int kPerThread = 2000;
  std::vector<Recorder> items(kThreads * kPerThread);
  std::vector<std::thread> posters;
  for (int t = 0; t < kThreads; ++t) {
    posters.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) mailbox.Post(&items[t * kPerThread + i]);
    });
  }
  for (std::thread& poster : posters) poster.join();
  // Delivery is asynchronous: wait for the last items.
  for (const Recorder& item : items) {
    while (item.deliveries.load() == 0) std::this_thread::yield();
  }
  queue.Shutdown();
  queue_thread.Join();
  for (const Recorder& item : items) {
    EXPECT_EQ(item.deliveries.load(), 1);
    EXPECT_EQ(item.thread, queue_thread.id());
  }
  EXPECT_EQ(queue_thread.other_tags(), 0);
  EXPECT_GE(mailbox.alarms_set(), 1);
  EXPECT_LE(mailbox.alarms_set(), kThreads * kPerThread);
}

TEST(QueueMailboxTest, ItemsPostedBeforeTheQueueThreadRunsShareOneAlarm) {
  grpc::CompletionQueue queue;
  QueueMailbox mailbox(&queue);
  std::vector<Recorder> items(50);
  for (Recorder& item : items) mailbox.Post(&item);
  EXPECT_EQ(mailbox.alarms_set(), 1);
  for (const Recorder& item : items) EXPECT_EQ(item.deliveries.load(), 0);

  QueueThread queue_thread(&queue, &mailbox);
  for (const Recorder& item : items) {
    while (item.deliveries.load() == 0) std::this_thread::yield();
  }
  // A later post, once the alarm has been taken, sets the next one.
  Recorder later;
  mailbox.Post(&later);
  while (later.deliveries.load() == 0) std::this_thread::yield();
  queue.Shutdown();
  queue_thread.Join();
  EXPECT_EQ(mailbox.alarms_set(), 2);
  for (const Recorder& item : items) EXPECT_EQ(item.deliveries.load(), 1);
  EXPECT_EQ(later.deliveries.load(), 1);
}

}  // namespace
}  // namespace fuseserve
