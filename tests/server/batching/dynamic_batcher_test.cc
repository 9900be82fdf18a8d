#include "server/batching/dynamic_batcher.h"

#include <algorithm>
#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "server/batching/fake_clock.h"

namespace fuseserve {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Batch = std::vector<std::unique_ptr<InferenceRequest>>;
using Ids = std::vector<std::string>;

// Real-time safety net for waits on other threads: a broken batcher makes a
// test fail instead of hang. Never reached when the test passes.
constexpr absl::Duration kTimeout = absl::Seconds(30);

// What happened to one request.
struct Outcome {
  std::atomic<int> answers{0};
  absl::Notification done;  // first answer recorded
  absl::Status status;
  RequestTimestamps timestamps;
  std::vector<float> output;

  bool WaitForAnswer() { return done.WaitForNotificationWithTimeout(kTimeout); }
};

// The batches fake instances received, shared by all instances of a batcher.
// While blocked, an instance records a batch and then waits in Execute until
// Release(): the way tests keep an instance busy.
class Recorder {
 public:
  void Block() {
    absl::MutexLock lock(&mu_);
    blocked_ = true;
  }
  void Release() {
    absl::MutexLock lock(&mu_);
    blocked_ = false;
  }

  void Record(const std::string& instance, const Batch& batch) {
    absl::MutexLock lock(&mu_);
    Ids ids;
    int64_t size = 0;
    for (const auto& request : batch) {
      ids.push_back(request->id);
      size += request->batch_size;
      EXPECT_EQ(request->input_shape.size(), batch.front()->input_shape.size());
      EXPECT_TRUE(std::equal(request->input_shape.begin() + 1, request->input_shape.end(),
                             batch.front()->input_shape.begin() + 1))
          << "batch mixes shapes";
    }
    batches_.push_back(ids);
    sizes_.push_back(size);
    instances_.push_back(instance);
    mu_.Await(absl::Condition(
        +[](bool* blocked) { return !*blocked; }, &blocked_));
  }

  // Blocks until `n` batches have been handed to instances.
  bool WaitForBatches(size_t n) {
    absl::MutexLock lock(&mu_);
    auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return batches_.size() >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&enough), kTimeout);
  }

  std::vector<Ids> batches() const {
    absl::MutexLock lock(&mu_);
    return batches_;
  }
  std::vector<int64_t> sizes() const {
    absl::MutexLock lock(&mu_);
    return sizes_;
  }
  std::vector<std::string> instances() const {
    absl::MutexLock lock(&mu_);
    return instances_;
  }

 private:
  mutable absl::Mutex mu_;
  bool blocked_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<Ids> batches_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> sizes_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> instances_ ABSL_GUARDED_BY(mu_);
};

// Answers OK, writing 2.0 into every output element. Requests with id
// "forget" are left unanswered and "twice" are answered twice, to check that
// the batcher holds instances to their contract.
class FakeInstance : public Instance {
 public:
  FakeInstance(std::string name, Recorder* recorder)
      : name_(std::move(name)), recorder_(recorder) {}

  const std::string& name() const override { return name_; }
  bool healthy() const override { return healthy_.load(); }
  void set_healthy(bool healthy) { healthy_.store(healthy); }

  // Called at the start of every Execute.
  void set_hook(std::function<void()> hook) { hook_ = std::move(hook); }

  void Execute(Batch& batch) override {
    if (hook_) hook_();
    recorder_->Record(name_, batch);
    for (const auto& request : batch) {
      if (request->id == "forget") continue;
      float* output = request->allocate_output(request->input_shape);
      std::fill(output, output + NumElements(request->input_shape), 2.0f);
      request->on_complete(absl::OkStatus(), request->timestamps);
      if (request->id == "twice") request->on_complete(absl::OkStatus(), request->timestamps);
    }
  }

 private:
  const std::string name_;
  Recorder* const recorder_;
  std::atomic<bool> healthy_{true};
  std::function<void()> hook_;
};

// Counts the pending gauge; the rest of ModelMetrics is not the batcher's.
class FakeMetrics : public ModelMetrics {
 public:
  void RecordSuccess(const RequestTimestamps&, int64_t, absl::Time) override {}
  void RecordFailure(FailureReason, const RequestTimestamps&, absl::Time) override {}
  void RecordExecution(int64_t, absl::Duration, absl::Duration, absl::Duration) override {}
  void AddPending(int64_t delta) override { pending_.fetch_add(delta); }
  ModelStatisticsSnapshot Snapshot() const override { return {}; }

  int64_t pending() const { return pending_.load(); }

 private:
  std::atomic<int64_t> pending_{0};
};

BatcherOptions Batching(int64_t max_batch_size, absl::Duration max_queue_delay,
                        std::vector<int64_t> preferred = {}) {
  BatcherOptions options;
  options.max_batch_size = max_batch_size;
  options.dynamic_batching = true;
  options.max_queue_delay = max_queue_delay;
  options.preferred_batch_sizes = std::move(preferred);
  return options;
}

class DynamicBatcherTest : public ::testing::Test {
 protected:
  void TearDown() override {
    recorder_.Release();
    batcher_.reset();
    // Whatever the test did, every request was answered exactly once and
    // left the pending gauge where it found it.
    for (size_t i = 0; i < outcomes_.size(); ++i) {
      EXPECT_EQ(outcomes_[i].answers.load(), 1) << "request #" << i;
    }
    EXPECT_EQ(metrics_.pending(), 0);
  }

  void Start(BatcherOptions options, int instance_count = 1) {
    std::vector<std::unique_ptr<Instance>> instances;
    for (int i = 0; i < instance_count; ++i) {
      auto instance = std::make_unique<FakeInstance>(absl::StrCat("fake#", i), &recorder_);
      instances_.push_back(instance.get());
      instances.push_back(std::move(instance));
    }
    batcher_ = std::make_unique<DynamicBatcher>(std::move(options), std::move(instances), &clock_,
                                                &metrics_);
  }

  // A request with the given id and full input shape (its batch size is the
  // leading dimension when the model batches). Its answer goes to the
  // returned Outcome.
  std::unique_ptr<InferenceRequest> MakeRequest(const std::string& id, Shape shape,
                                                Outcome** outcome_out = nullptr) {
    Outcome* outcome = &outcomes_.emplace_back();
    if (outcome_out != nullptr) *outcome_out = outcome;
    auto request = std::make_unique<InferenceRequest>();
    request->id = id;
    request->batch_size = batcher_->options().max_batch_size > 0 ? shape.front() : 1;
    request->input_shape = std::move(shape);
    request->input = input_.data();
    request->allocate_output = [outcome](const Shape& shape) {
      outcome->output.assign(NumElements(shape), 0.0f);
      return outcome->output.data();
    };
    request->on_complete = [outcome](const absl::Status& status,
                                     const RequestTimestamps& timestamps) {
      if (outcome->answers.fetch_add(1) > 0) return;
      outcome->status = status;
      outcome->timestamps = timestamps;
      outcome->done.Notify();
    };
    return request;
  }

  Outcome& Enqueue(const std::string& id, Shape shape) {
    Outcome* outcome;
    batcher_->Enqueue(MakeRequest(id, std::move(shape), &outcome));
    return *outcome;
  }

  // Keeps the (single) instance busy with request "busy" until TearDown or
  // recorder_.Release(), so that the requests a test enqueues next stay queued.
  void OccupyInstance(Shape shape) {
    recorder_.Block();
    Enqueue("busy", std::move(shape));
    ASSERT_TRUE(recorder_.WaitForBatches(1));
  }

  FakeClock clock_;
  Recorder recorder_;
  FakeMetrics metrics_;
  std::vector<FakeInstance*> instances_;
  std::deque<Outcome> outcomes_;  // a deque: Outcome addresses stay valid
  std::vector<float> input_ = std::vector<float>(256, 1.0f);
  std::unique_ptr<DynamicBatcher> batcher_;
};

TEST_F(DynamicBatcherTest, MergesSameShapeRequestsUpToMaxBatchSize) {
  const absl::Time start = clock_.Now();
  Start(Batching(4, absl::Seconds(1)));
  for (int i = 0; i < 6; ++i) Enqueue(absl::StrCat("r", i), {1, 3});
  ASSERT_TRUE(recorder_.WaitForBatches(1));
  // The remaining two wait for the oldest one's queue delay.
  ASSERT_TRUE(clock_.WaitForWaiterWithDeadline(start + absl::Seconds(1)));
  clock_.Advance(absl::Seconds(1));
  ASSERT_TRUE(recorder_.WaitForBatches(2));
  EXPECT_THAT(recorder_.batches(), ElementsAre(Ids{"r0", "r1", "r2", "r3"}, Ids{"r4", "r5"}));
  for (Outcome& outcome : outcomes_) {
    ASSERT_TRUE(outcome.WaitForAnswer());
    EXPECT_TRUE(outcome.status.ok()) << outcome.status;
    EXPECT_THAT(outcome.output, ElementsAre(2.0f, 2.0f, 2.0f));
  }
}

TEST_F(DynamicBatcherTest, DoesNotMergeDifferentShapesAndOldestRequestLeadsEachBatch) {
  Start(Batching(2, absl::ZeroDuration()));
  OccupyInstance({1, 3});
  Enqueue("a", {1, 3});
  Enqueue("b", {1, 5});
  Enqueue("c", {1, 3});
  Enqueue("d", {1, 3});
  Enqueue("e", {1, 3});
  recorder_.Release();
  ASSERT_TRUE(recorder_.WaitForBatches(4));
  // After [a, c], "b" is the oldest: it runs next (alone: no other request
  // has its shape) although [d, e] would be a fuller batch.
  EXPECT_THAT(recorder_.batches(),
              ElementsAre(Ids{"busy"}, Ids{"a", "c"}, Ids{"b"}, Ids{"d", "e"}));
}

TEST_F(DynamicBatcherTest, CountsBatchSizesAndDoesNotLetSmallerRequestsOvertake) {
  Start(Batching(4, absl::ZeroDuration()));
  OccupyInstance({1, 2});
  Enqueue("a", {3, 2});
  Enqueue("b", {2, 2});  // 3 + 2 > 4: does not fit with "a"
  Enqueue("c", {1, 2});  // would fit with "a", but must not overtake "b"
  Enqueue("d", {2, 2});
  Enqueue("e", {2, 2});
  recorder_.Release();
  ASSERT_TRUE(recorder_.WaitForBatches(4));
  EXPECT_THAT(recorder_.batches(),
              ElementsAre(Ids{"busy"}, Ids{"a"}, Ids{"b", "c"}, Ids{"d", "e"}));
  EXPECT_THAT(recorder_.sizes(), ElementsAre(1, 3, 3, 4));
}

TEST_F(DynamicBatcherTest, DispatchesPreferredBatchSizeWithoutWaiting) {
  Start(Batching(8, absl::Seconds(1), {4, 2}));
  Enqueue("a", {1, 3});
  Enqueue("b", {1, 3});
  // The clock never moves: only the preferred size can trigger this batch.
  ASSERT_TRUE(recorder_.WaitForBatches(1));
  EXPECT_THAT(recorder_.batches(), ElementsAre(Ids{"a", "b"}));
}

TEST_F(DynamicBatcherTest, DispatchesLargestFormablePreferredBatchSize) {
  const absl::Time start = clock_.Now();
  Start(Batching(8, absl::Seconds(1), {4, 2}));
  OccupyInstance({2, 3});
  for (int i = 0; i < 5; ++i) Enqueue(absl::StrCat("r", i), {1, 3});
  recorder_.Release();
  ASSERT_TRUE(recorder_.WaitForBatches(2));
  ASSERT_TRUE(clock_.WaitForWaiterWithDeadline(start + absl::Seconds(1)));
  EXPECT_EQ(recorder_.batches().size(), 2u);
  clock_.Advance(absl::Seconds(1));
  ASSERT_TRUE(recorder_.WaitForBatches(3));
  EXPECT_THAT(recorder_.batches(),
              ElementsAre(Ids{"busy"}, Ids{"r0", "r1", "r2", "r3"}, Ids{"r4"}));
}

TEST_F(DynamicBatcherTest, FlushesWhenMaxQueueDelayExpires) {
  const absl::Time start = clock_.Now();
  Start(Batching(4, absl::Microseconds(100)));
  Outcome& a = Enqueue("a", {1, 3});
  ASSERT_TRUE(clock_.WaitForWaiterWithDeadline(start + absl::Microseconds(100)));
  clock_.Advance(absl::Microseconds(99));
  // Advance has re-evaluated the waiting worker's condition: still waiting.
  EXPECT_TRUE(recorder_.batches().empty());
  EXPECT_EQ(batcher_->queued(), 1);
  clock_.Advance(absl::Microseconds(1));
  ASSERT_TRUE(a.WaitForAnswer());
  EXPECT_TRUE(a.status.ok()) << a.status;
  EXPECT_THAT(recorder_.batches(), ElementsAre(Ids{"a"}));
  EXPECT_EQ(a.timestamps.enqueued, start);
  EXPECT_EQ(a.timestamps.exec_start, start + absl::Microseconds(100));
}

TEST_F(DynamicBatcherTest, DispatchesFullBatchWithoutWaiting) {
  Start(Batching(3, absl::Seconds(1)));
  Enqueue("a", {1, 3});
  Enqueue("b", {2, 3});
  ASSERT_TRUE(recorder_.WaitForBatches(1));
  EXPECT_THAT(recorder_.batches(), ElementsAre(Ids{"a", "b"}));
}

TEST_F(DynamicBatcherTest, ZeroQueueDelayDispatchesWhatIsQueued) {
  Start(Batching(4, absl::ZeroDuration()));
  Outcome& a = Enqueue("a", {1, 3});
  ASSERT_TRUE(a.WaitForAnswer());
  EXPECT_TRUE(a.status.ok()) << a.status;
  EXPECT_THAT(recorder_.batches(), ElementsAre(Ids{"a"}));
}

TEST_F(DynamicBatcherTest, RejectsRequestsBeyondMaxQueueSize) {
  BatcherOptions options = Batching(4, absl::ZeroDuration());
  options.max_queue_size = 2;
  Start(options);
  OccupyInstance({1, 3});
  Enqueue("a", {1, 3});
  Enqueue("b", {1, 3});
  EXPECT_EQ(batcher_->queued(), 2);
  EXPECT_EQ(metrics_.pending(), 2);
  Outcome& c = Enqueue("c", {1, 3});
  // Answered on the spot, before Enqueue returned.
  ASSERT_TRUE(c.done.HasBeenNotified());
  EXPECT_EQ(c.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(c.status.message(), HasSubstr("exceeds maximum queue size of 2"));
  EXPECT_THAT(c.status.message(), HasSubstr("'c'"));
  recorder_.Release();
  ASSERT_TRUE(recorder_.WaitForBatches(2));
  EXPECT_THAT(recorder_.batches(), ElementsAre(Ids{"busy"}, Ids{"a", "b"}));
}

TEST_F(DynamicBatcherTest, RejectsBatchLargerThanMaxBatchSize) {
  Start(Batching(2, absl::ZeroDuration()));
  Outcome& a = Enqueue("a", {3, 3});
  ASSERT_TRUE(a.done.HasBeenNotified());
  EXPECT_EQ(a.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(a.status.message(), HasSubstr("batch size 3, more than max_batch_size 2"));
}

// Queue timeouts under every combination of policy and request, checked
// while the only instance is busy: the expiry must be noticed without the
// instance becoming free (Triton's known bug, REFERENCE.md §2.2).
struct TimeoutCase {
  std::string name;
  absl::Duration default_timeout;
  bool allow_timeout_override;
  absl::Duration requested_timeout;
  absl::Duration deadline_in;  // request->deadline = enqueue time + this
  absl::Duration expires_after;
  std::string message;
};

void PrintTo(const TimeoutCase& param, std::ostream* os) { *os << param.name; }

class QueueTimeoutTest : public DynamicBatcherTest,
                         public ::testing::WithParamInterface<TimeoutCase> {};

TEST_P(QueueTimeoutTest, ExpiresInQueueWhileInstanceIsBusy) {
  const TimeoutCase& param = GetParam();
  BatcherOptions options = Batching(4, absl::ZeroDuration());
  options.default_timeout = param.default_timeout;
  options.allow_timeout_override = param.allow_timeout_override;
  Start(options);
  OccupyInstance({4, 3});
  Outcome* outcome;
  auto request = MakeRequest("a", {1, 3}, &outcome);
  request->requested_timeout = param.requested_timeout;
  request->deadline = clock_.Now() + param.deadline_in;
  batcher_->Enqueue(std::move(request));

  clock_.Advance(param.expires_after - absl::Microseconds(1));
  EXPECT_FALSE(outcome->done.HasBeenNotified());
  clock_.Advance(absl::Microseconds(1));
  ASSERT_TRUE(outcome->WaitForAnswer());
  EXPECT_EQ(outcome->status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(outcome->status.message(), param.message);
  EXPECT_EQ(outcome->timestamps.exec_start, absl::InfinitePast());
  EXPECT_EQ(batcher_->queued(), 0);
  EXPECT_EQ(metrics_.pending(), 0);
  recorder_.Release();
  batcher_->Shutdown(absl::InfiniteFuture());
  EXPECT_THAT(recorder_.batches(), ElementsAre(Ids{"busy"}));
}

INSTANTIATE_TEST_SUITE_P(
    Policies, QueueTimeoutTest,
    ::testing::Values(
        TimeoutCase{"PolicyDefaultTimeout", absl::Microseconds(100), false, absl::ZeroDuration(),
                    absl::InfiniteDuration(), absl::Microseconds(100),
                    "request 'a' timed out in the queue after 100 us (queue timeout 100 us)"},
        TimeoutCase{"RequestedTimeoutWithoutPolicy", absl::ZeroDuration(), false,
                    absl::Microseconds(50), absl::InfiniteDuration(), absl::Microseconds(50),
                    "request 'a' timed out in the queue after 50 us (queue timeout 50 us)"},
        TimeoutCase{"RequestedTimeoutShortensPolicyWhenOverrideAllowed", absl::Microseconds(100),
                    true, absl::Microseconds(50), absl::InfiniteDuration(), absl::Microseconds(50),
                    "request 'a' timed out in the queue after 50 us (queue timeout 50 us)"},
        TimeoutCase{"RequestedTimeoutIgnoredWithoutOverride", absl::Microseconds(100), false,
                    absl::Microseconds(50), absl::InfiniteDuration(), absl::Microseconds(100),
                    "request 'a' timed out in the queue after 100 us (queue timeout 100 us)"},
        TimeoutCase{"RequestedTimeoutCannotLengthenPolicy", absl::Microseconds(100), true,
                    absl::Microseconds(500), absl::InfiniteDuration(), absl::Microseconds(100),
                    "request 'a' timed out in the queue after 100 us (queue timeout 100 us)"},
        TimeoutCase{"RequestDeadline", absl::ZeroDuration(), false, absl::ZeroDuration(),
                    absl::Microseconds(30), absl::Microseconds(30),
                    "request 'a' exceeded its deadline after waiting 30 us in the queue"},
        TimeoutCase{"RequestDeadlineBeforePolicyTimeout", absl::Microseconds(100), false,
                    absl::ZeroDuration(), absl::Microseconds(30), absl::Microseconds(30),
                    "request 'a' exceeded its deadline after waiting 30 us in the queue"}),
    [](const ::testing::TestParamInfo<TimeoutCase>& info) { return info.param.name; });

TEST_F(DynamicBatcherTest, CancelledRequestIsNeverExecuted) {
  Start(Batching(4, absl::ZeroDuration()));
  OccupyInstance({4, 3});
  std::atomic<bool> cancelled{false};
  Outcome* a;
  auto request = MakeRequest("a", {1, 3}, &a);
  request->is_cancelled = [&cancelled] { return cancelled.load(); };
  batcher_->Enqueue(std::move(request));
  Outcome& b = Enqueue("b", {1, 3});
  cancelled.store(true);
  recorder_.Release();
  ASSERT_TRUE(a->WaitForAnswer());
  ASSERT_TRUE(b.WaitForAnswer());
  EXPECT_EQ(a->status.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(a->status.message(), "request 'a' was cancelled before it started executing");
  EXPECT_TRUE(b.status.ok()) << b.status;
  EXPECT_THAT(recorder_.batches(), ElementsAre(Ids{"busy"}, Ids{"b"}));
}

TEST_F(DynamicBatcherTest, CancellationIsNoticedWhileInstanceIsBusy) {
  Start(Batching(4, absl::ZeroDuration()));
  OccupyInstance({4, 3});
  std::atomic<bool> cancelled{false};
  Outcome* a;
  auto request = MakeRequest("a", {1, 3}, &a);
  request->is_cancelled = [&cancelled] { return cancelled.load(); };
  batcher_->Enqueue(std::move(request));
  cancelled.store(true);
  // The reaper's cancellation poll (every 50 ms while a request that can be
  // cancelled waits) drops it without waiting for the instance.
  clock_.Advance(absl::Milliseconds(50));
  ASSERT_TRUE(a->WaitForAnswer());
  EXPECT_EQ(a->status.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(recorder_.batches().size(), 1u);
}

// Nothing else happens in the batcher (no arrival, no deadline, a queue
// delay far away): the reaper's poll still finds the cancelled request.
TEST_F(DynamicBatcherTest, CancellationIsNoticedByPollingWhileTheBatchWaits) {
  const absl::Time start = clock_.Now();
  Start(Batching(4, absl::Seconds(30)));
  std::atomic<bool> cancelled{false};
  Outcome* a;
  auto request = MakeRequest("a", {1, 3}, &a);
  request->is_cancelled = [&cancelled] { return cancelled.load(); };
  batcher_->Enqueue(std::move(request));
  ASSERT_TRUE(clock_.WaitForWaiterWithDeadline(start + absl::Milliseconds(50)));
  cancelled.store(true);
  clock_.Advance(absl::Milliseconds(50));
  ASSERT_TRUE(a->WaitForAnswer());
  EXPECT_EQ(a->status.code(), absl::StatusCode::kCancelled);
  EXPECT_TRUE(recorder_.batches().empty());
}

TEST_F(DynamicBatcherTest, TwoInstancesExecuteBatchesConcurrently) {
  Start(Batching(4, absl::ZeroDuration()), /*instance_count=*/2);
  recorder_.Block();
  Enqueue("a", {4, 3});
  ASSERT_TRUE(recorder_.WaitForBatches(1));
  Enqueue("b", {4, 3});
  // Both batches are inside Execute at once: neither has been released.
  ASSERT_TRUE(recorder_.WaitForBatches(2));
  std::vector<std::string> instances = recorder_.instances();
  std::sort(instances.begin(), instances.end());
  EXPECT_THAT(instances, ElementsAre("fake#0", "fake#1"));
  recorder_.Release();
}

TEST_F(DynamicBatcherTest, ModelWithoutBatchingRunsEachRequestAlone) {
  BatcherOptions options;  // max_batch_size 0: shapes have no batch dimension
  options.max_queue_delay = absl::Seconds(1);
  Start(options);
  OccupyInstance({3});
  Enqueue("a", {3});
  Enqueue("b", {3});
  Enqueue("c", {3});
  recorder_.Release();
  ASSERT_TRUE(recorder_.WaitForBatches(4));
  EXPECT_THAT(recorder_.batches(), ElementsAre(Ids{"busy"}, Ids{"a"}, Ids{"b"}, Ids{"c"}));
}

TEST_F(DynamicBatcherTest, WithoutDynamicBatchingRunsEachRequestAlone) {
  BatcherOptions options = Batching(4, absl::Seconds(1));
  options.dynamic_batching = false;
  Start(options);
  OccupyInstance({1, 3});
  Enqueue("a", {1, 3});
  Enqueue("b", {2, 3});
  recorder_.Release();
  ASSERT_TRUE(recorder_.WaitForBatches(3));
  EXPECT_THAT(recorder_.batches(), ElementsAre(Ids{"busy"}, Ids{"a"}, Ids{"b"}));
  EXPECT_THAT(recorder_.sizes(), ElementsAre(1, 1, 2));
}

TEST_F(DynamicBatcherTest, ShutdownDrainsQueuedRequestsWithoutWaitingForFullerBatches) {
  const absl::Time start = clock_.Now();
  Start(Batching(4, absl::Seconds(1)));
  OccupyInstance({4, 3});
  Outcome& a = Enqueue("a", {1, 3});
  Outcome& b = Enqueue("b", {1, 3});
  std::thread shutdown([&] { batcher_->Shutdown(start + absl::Seconds(5)); });
  // The expiry thread now waits for the shutdown deadline: shutdown began.
  ASSERT_TRUE(clock_.WaitForWaiterWithDeadline(start + absl::Seconds(5)));
  Outcome& late = Enqueue("late", {1, 3});
  ASSERT_TRUE(late.done.HasBeenNotified());
  EXPECT_EQ(late.status, absl::UnavailableError("model is shutting down"));
  recorder_.Release();
  shutdown.join();
  EXPECT_TRUE(a.status.ok()) << a.status;
  EXPECT_TRUE(b.status.ok()) << b.status;
  EXPECT_THAT(recorder_.batches(), ElementsAre(Ids{"busy"}, Ids{"a", "b"}));
  EXPECT_EQ(clock_.Now(), start);
}

TEST_F(DynamicBatcherTest, FlushRunsQueuedAndLaterRequestsWithoutTheQueueDelayAndKeepsAccepting) {
  const absl::Time start = clock_.Now();
  Start(Batching(4, absl::Seconds(1)));
  Outcome& a = Enqueue("a", {1, 3});
  // The leader waits for a fuller batch until the queue delay passes...
  ASSERT_TRUE(clock_.WaitForWaiterWithDeadline(start + absl::Seconds(1)));
  EXPECT_EQ(batcher_->queued(), 1);
  // ...until the drain begins: it runs at once, on the same clock reading.
  batcher_->Flush();
  ASSERT_TRUE(a.WaitForAnswer());
  EXPECT_TRUE(a.status.ok()) << a.status;
  // A request arriving afterwards is accepted and does not wait either.
  Outcome& late = Enqueue("late", {1, 3});
  ASSERT_TRUE(late.WaitForAnswer());
  EXPECT_TRUE(late.status.ok()) << late.status;
  batcher_->Flush();  // idempotent
  EXPECT_THAT(recorder_.batches(), ElementsAre(Ids{"a"}, Ids{"late"}));
  EXPECT_EQ(clock_.Now(), start);
}

TEST_F(DynamicBatcherTest, ShutdownAnswersRequestsStillQueuedAtItsDeadline) {
  const absl::Time start = clock_.Now();
  Start(Batching(4, absl::ZeroDuration()));
  OccupyInstance({4, 3});
  Outcome& a = Enqueue("a", {1, 3});
  std::thread shutdown([&] { batcher_->Shutdown(start + absl::Microseconds(100)); });
  ASSERT_TRUE(clock_.WaitForWaiterWithDeadline(start + absl::Microseconds(100)));
  clock_.Advance(absl::Microseconds(100));
  ASSERT_TRUE(a.WaitForAnswer());
  EXPECT_EQ(a.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(a.status.message(), HasSubstr("model is shutting down"));
  // The running batch is not interrupted.
  EXPECT_FALSE(outcomes_.front().done.HasBeenNotified());
  recorder_.Release();
  shutdown.join();
  EXPECT_TRUE(outcomes_.front().status.ok());
  EXPECT_THAT(recorder_.batches(), ElementsAre(Ids{"busy"}));
}

TEST_F(DynamicBatcherTest, DestructorAnswersQueuedRequests) {
  Start(Batching(4, absl::Seconds(1)));
  Outcome& a = Enqueue("a", {1, 3});
  batcher_.reset();
  ASSERT_TRUE(a.done.HasBeenNotified());
  EXPECT_EQ(a.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(recorder_.batches().empty());
}

TEST_F(DynamicBatcherTest, EnqueueAfterShutdownIsRejected) {
  Start(Batching(4, absl::ZeroDuration()));
  batcher_->Shutdown(clock_.Now());
  batcher_->Shutdown(clock_.Now());  // idempotent
  Outcome& a = Enqueue("a", {1, 3});
  ASSERT_TRUE(a.done.HasBeenNotified());
  EXPECT_EQ(a.status, absl::UnavailableError("model is shutting down"));
}

TEST_F(DynamicBatcherTest, HealthyWhileEveryInstanceIsHealthy) {
  Start(Batching(4, absl::ZeroDuration()), /*instance_count=*/2);
  EXPECT_TRUE(batcher_->healthy());
  instances_[1]->set_healthy(false);
  EXPECT_FALSE(batcher_->healthy());
}

// The instance that runs the first batch reports unhealthy from then on (as
// after a sticky device error).
void FailFirstExecutingInstance(const std::vector<FakeInstance*>& instances) {
  auto first = std::make_shared<std::atomic<bool>>(true);
  for (FakeInstance* instance : instances) {
    instance->set_hook([first, instance] {
      if (first->exchange(false)) instance->set_healthy(false);
    });
  }
}

TEST_F(DynamicBatcherTest, UnhealthyInstanceTakesNoMoreBatchesAndTheOthersServeTheQueue) {
  Start(Batching(4, absl::ZeroDuration()), /*instance_count=*/2);
  FailFirstExecutingInstance(instances_);
  recorder_.Block();
  Enqueue("a", {1, 3});
  ASSERT_TRUE(recorder_.WaitForBatches(1));
  Enqueue("b", {1, 3});
  ASSERT_TRUE(recorder_.WaitForBatches(2));  // both instances are busy now
  Outcome& c = Enqueue("c", {1, 3});
  Outcome& d = Enqueue("d", {1, 3});
  recorder_.Release();
  ASSERT_TRUE(c.WaitForAnswer());
  ASSERT_TRUE(d.WaitForAnswer());
  Outcome& e = Enqueue("e", {1, 3});
  ASSERT_TRUE(e.WaitForAnswer());

  EXPECT_TRUE(c.status.ok()) << c.status;
  EXPECT_TRUE(d.status.ok()) << d.status;
  EXPECT_TRUE(e.status.ok()) << e.status;
  EXPECT_FALSE(batcher_->healthy());
  const std::vector<std::string> instances = recorder_.instances();
  ASSERT_EQ(instances.size(), 4u);
  EXPECT_THAT(recorder_.batches(), ElementsAre(Ids{"a"}, Ids{"b"}, Ids{"c", "d"}, Ids{"e"}));
  EXPECT_NE(instances[0], instances[1]);
  EXPECT_EQ(instances[2], instances[1]) << "the unhealthy instance ran another batch";
  EXPECT_EQ(instances[3], instances[1]) << "the unhealthy instance ran another batch";
}

TEST_F(DynamicBatcherTest, WithoutHealthyInstancesQueuedAndNewRequestsAreUnavailable) {
  Start(Batching(4, absl::ZeroDuration()));
  FailFirstExecutingInstance(instances_);
  recorder_.Block();
  Outcome& a = Enqueue("a", {1, 3});
  ASSERT_TRUE(recorder_.WaitForBatches(1));
  Outcome& b = Enqueue("b", {1, 3});
  Outcome& c = Enqueue("c", {2, 3});
  recorder_.Release();
  ASSERT_TRUE(b.WaitForAnswer());
  ASSERT_TRUE(c.WaitForAnswer());
  Outcome& late = Enqueue("late", {1, 3});

  ASSERT_TRUE(a.WaitForAnswer());
  EXPECT_TRUE(a.status.ok()) << "the batch that was running is answered by its instance";
  EXPECT_EQ(b.status, absl::UnavailableError(
                          "request 'b' cannot run: every instance of the model is unhealthy"));
  EXPECT_EQ(c.status.code(), absl::StatusCode::kUnavailable);
  ASSERT_TRUE(late.done.HasBeenNotified()) << "rejected at once";
  EXPECT_EQ(late.status,
            absl::UnavailableError(
                "request 'late' cannot run: every instance of the model is unhealthy"));
  EXPECT_THAT(recorder_.batches(), ElementsAre(Ids{"a"}));
  EXPECT_EQ(batcher_->queued(), 0);
}

// The tests that hold instances to their contract, run with the answers
// delivered by the instance's thread (0) and by response threads (2).
class DynamicBatcherDeliveryTest : public DynamicBatcherTest,
                                   public ::testing::WithParamInterface<int> {
 protected:
  BatcherOptions Delivered(BatcherOptions options) {
    options.response_threads = GetParam();
    return options;
  }
};

INSTANTIATE_TEST_SUITE_P(ResponseThreads, DynamicBatcherDeliveryTest, ::testing::Values(0, 2),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return absl::StrCat("ResponseThreads", info.param);
                         });

TEST_P(DynamicBatcherDeliveryTest, AnswersRequestsAnInstanceLeftUnansweredExactlyOnce) {
  Start(Delivered(Batching(4, absl::Seconds(1))));
  Outcome& forget = Enqueue("forget", {1, 3});
  Outcome& twice = Enqueue("twice", {1, 3});
  Enqueue("ok", {2, 3});
  ASSERT_TRUE(forget.WaitForAnswer());
  EXPECT_EQ(forget.status.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(forget.status.message(), HasSubstr("fake#0 did not answer request 'forget'"));
  EXPECT_TRUE(twice.status.ok());
  // TearDown checks that "twice" was answered only once.
}

TEST_F(DynamicBatcherTest, CallsInstancesAndCompletionsWithoutHoldingItsLock) {
  Start(Batching(2, absl::ZeroDuration()));
  // Re-entering the batcher would deadlock if its lock were held.
  instances_[0]->set_hook([this] { batcher_->queued(); });
  std::vector<Outcome*> outcomes;
  for (int i = 0; i < 3; ++i) {
    Outcome* outcome;
    auto request = MakeRequest(absl::StrCat("r", i), {1, 3}, &outcome);
    request->on_complete = [this, done = std::move(request->on_complete)](
                               const absl::Status& status, const RequestTimestamps& timestamps) {
      batcher_->queued();
      done(status, timestamps);
    };
    batcher_->Enqueue(std::move(request));
    outcomes.push_back(outcome);
  }
  for (Outcome* outcome : outcomes) ASSERT_TRUE(outcome->WaitForAnswer());
  batcher_->Shutdown(absl::InfiniteFuture());
}

// Many producers, two instances, a small queue, cancelled and expired
// requests: whatever the interleaving, every request is answered exactly
// once (checked in TearDown), batches respect shapes and max_batch_size,
// and no cancelled or expired request runs.
TEST_P(DynamicBatcherDeliveryTest, AnswersEveryRequestExactlyOnceUnderConcurrentProducers) {
  BatcherOptions options = Delivered(Batching(4, absl::ZeroDuration(), {2}));
  options.max_queue_size = 8;
  Start(options, /*instance_count=*/2);
  enum Kind { kRuns, kCancelled, kExpired };
  auto make = [this](Kind kind, int n, Outcome** outcome) {
    const Shape shape = n % 3 == 0 ? Shape{2, 3} : (n % 3 == 1 ? Shape{1, 3} : Shape{1, 5});
    const char* prefix = kind == kCancelled ? "cancelled" : (kind == kExpired ? "expired" : "ok");
    auto request = MakeRequest(absl::StrCat(prefix, n), shape, outcome);
    if (kind == kCancelled) request->is_cancelled = [] { return true; };
    if (kind == kExpired) request->deadline = clock_.Now() - absl::Microseconds(1);
    return request;
  };
  std::vector<std::pair<Kind, Outcome*>> outcomes;
  // Into an empty queue first, so that each kind is certainly accepted once.
  for (Kind kind : {kCancelled, kExpired, kRuns}) {
    Outcome* outcome;
    batcher_->Enqueue(make(kind, -1, &outcome));
    outcomes.emplace_back(kind, outcome);
  }
  constexpr int kProducers = 4;
  constexpr int kRequestsEach = 250;
  std::vector<std::vector<std::unique_ptr<InferenceRequest>>> requests(kProducers);
  for (int p = 0; p < kProducers; ++p) {
    for (int i = 0; i < kRequestsEach; ++i) {
      const int n = p * kRequestsEach + i;
      const Kind kind = n % 7 == 0 ? kCancelled : (n % 11 == 0 ? kExpired : kRuns);
      Outcome* outcome;
      requests[p].push_back(make(kind, n, &outcome));
      outcomes.emplace_back(kind, outcome);
    }
  }
  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; ++p) {
    producers.emplace_back([this, &requests, p] {
      for (auto& request : requests[p]) batcher_->Enqueue(std::move(request));
    });
  }
  for (std::thread& producer : producers) producer.join();
  batcher_->Shutdown(absl::InfiniteFuture());

  const absl::StatusCode expected[] = {absl::StatusCode::kOk, absl::StatusCode::kCancelled,
                                       absl::StatusCode::kDeadlineExceeded};
  std::map<absl::StatusCode, int> codes;
  for (const auto& [kind, outcome] : outcomes) {
    ASSERT_TRUE(outcome->done.HasBeenNotified());
    const absl::Status& status = outcome->status;
    ++codes[status.code()];
    if (status.code() == absl::StatusCode::kUnavailable) {
      EXPECT_THAT(status.message(), HasSubstr("exceeds maximum queue size of 8"));
    } else {
      EXPECT_EQ(status.code(), expected[kind]) << status;
    }
  }
  EXPECT_GT(codes[absl::StatusCode::kOk], 0);
  EXPECT_GT(codes[absl::StatusCode::kCancelled], 0);
  EXPECT_GT(codes[absl::StatusCode::kDeadlineExceeded], 0);
  int executed = 0;
  for (const Ids& batch : recorder_.batches()) {
    for (const std::string& id : batch) {
      EXPECT_EQ(id.rfind("ok", 0), 0u) << id << " was executed";
      ++executed;
    }
  }
  EXPECT_EQ(executed, codes[absl::StatusCode::kOk]);
  for (int64_t size : recorder_.sizes()) EXPECT_LE(size, 4);
  EXPECT_EQ(batcher_->queued(), 0);
}

TEST_F(DynamicBatcherTest, RequestsThatOnlyJoinAWaitingBatchDoNotWakeTheLeader) {
  Start(Batching(8, absl::Seconds(1), {4}));
  // The worker that leads: learnt from a first batch (a preferred size, so
  // it runs at once).
  std::atomic<std::thread::id> worker;
  instances_[0]->set_hook([&worker] { worker.store(std::this_thread::get_id()); });
  ASSERT_TRUE(Enqueue("first", {4, 3}).WaitForAnswer());
  // The leader asks every queued request whether it was cancelled each time
  // it looks at the queue: r0's count is how often it looked (the reaper's
  // scans, on its own thread, are not counted).
  std::atomic<int> looks{0};
  Outcome* r0;
  auto request = MakeRequest("r0", {1, 3}, &r0);
  request->is_cancelled = [&looks, &worker] {
    if (std::this_thread::get_id() == worker.load()) looks.fetch_add(1);
    return false;
  };
  batcher_->Enqueue(std::move(request));
  const absl::Time flush_at = clock_.Now() + absl::Seconds(1);
  ASSERT_TRUE(clock_.WaitForWaiterWithDeadline(flush_at));
  const int looks_while_waiting = looks.load();
  Enqueue("r1", {1, 3});  // 2 samples: not a preferred size
  Outcome& other = Enqueue("other", {1, 5});  // another shape cannot join the batch
  Outcome& r2 = Enqueue("r2", {1, 3});  // 3 samples
  // A woken leader would look again within microseconds; it was not woken.
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(looks.load(), looks_while_waiting);
  EXPECT_FALSE(r2.done.HasBeenNotified());
  // The fourth sample makes the preferred size: the leader dispatches at once.
  Outcome& r3 = Enqueue("r3", {1, 3});
  ASSERT_TRUE(r3.WaitForAnswer());
  EXPECT_THAT(recorder_.batches(), ElementsAre(Ids{"first"}, Ids{"r0", "r1", "r2", "r3"}));
  EXPECT_GT(looks.load(), looks_while_waiting);
  clock_.Advance(absl::Seconds(1));
  ASSERT_TRUE(r0->WaitForAnswer());
  // "other" runs once its delay has passed: before `worker` and `looks`, which
  // the instance's hook and r0 point at, go out of scope.
  ASSERT_TRUE(other.WaitForAnswer());
}

TEST_F(DynamicBatcherTest, ARequestThatFillsTheWaitingBatchWakesTheLeader) {
  Start(Batching(3, absl::Seconds(1)));
  Enqueue("a", {1, 3});
  ASSERT_TRUE(clock_.WaitForWaiterWithDeadline(clock_.Now() + absl::Seconds(1)));
  Enqueue("b", {1, 3});
  Outcome& c = Enqueue("c", {1, 3});  // max_batch_size: no waiting for the delay
  ASSERT_TRUE(c.WaitForAnswer());
  Outcome& d = Enqueue("d", {1, 3});
  ASSERT_TRUE(clock_.WaitForWaiterWithDeadline(clock_.Now() + absl::Seconds(1)));
  Outcome& e = Enqueue("e", {3, 3});  // would overflow: the waiting batch goes alone
  ASSERT_TRUE(d.WaitForAnswer());
  ASSERT_TRUE(e.WaitForAnswer());  // itself a full batch
  EXPECT_THAT(recorder_.batches(), ElementsAre(Ids{"a", "b", "c"}, Ids{"d"}, Ids{"e"}));
}

// Response threads (BatcherOptions::response_threads).

TEST_F(DynamicBatcherTest, WithResponseThreadsTheInstanceRunsItsNextBatchWhileAnswersAreSent) {
  BatcherOptions options = Batching(4, absl::ZeroDuration());
  options.response_threads = 1;
  Start(options);
  OccupyInstance({1, 3});
  absl::Notification release;
  Outcome* slow;
  auto request = MakeRequest("slow", {1, 3}, &slow);
  request->on_complete = [&release, done = std::move(request->on_complete)](
                             const absl::Status& status, const RequestTimestamps& timestamps) {
    EXPECT_TRUE(release.WaitForNotificationWithTimeout(kTimeout));
    done(status, timestamps);
  };
  batcher_->Enqueue(std::move(request));
  for (const char* id : {"a", "b", "c"}) Enqueue(id, {1, 3});
  recorder_.Release();
  ASSERT_TRUE(recorder_.WaitForBatches(2));
  Outcome& next = Enqueue("next", {1, 3});
  // The only instance takes "next" while "slow"'s answer is still being sent.
  EXPECT_TRUE(recorder_.WaitForBatches(3));
  EXPECT_FALSE(slow->done.HasBeenNotified());
  release.Notify();
  ASSERT_TRUE(slow->WaitForAnswer());
  ASSERT_TRUE(next.WaitForAnswer());
  EXPECT_THAT(recorder_.batches(),
              ElementsAre(Ids{"busy"}, Ids{"slow", "a", "b", "c"}, Ids{"next"}));
  EXPECT_TRUE(slow->status.ok());
  EXPECT_TRUE(next.status.ok());
  EXPECT_THAT(slow->output, ::testing::Each(2.0f));
}

TEST_F(DynamicBatcherTest, WithResponseThreadsOnlyBatchesOfFourOrMoreAreAnsweredElsewhere) {
  BatcherOptions options = Batching(4, absl::ZeroDuration());
  options.response_threads = 1;
  Start(options);
  std::atomic<std::thread::id> instance_thread;
  instances_[0]->set_hook([&instance_thread] { instance_thread.store(std::this_thread::get_id()); });
  // Requests whose answers note whether the instance's thread sent them.
  std::map<std::string, bool> by_instance;  // written before each `done`
  auto enqueue = [&](const std::string& id) {
    Outcome* outcome;
    auto request = MakeRequest(id, {1, 3}, &outcome);
    request->on_complete = [&, id, done = std::move(request->on_complete)](
                               const absl::Status& status, const RequestTimestamps& timestamps) {
      by_instance[id] = std::this_thread::get_id() == instance_thread.load();
      done(status, timestamps);
    };
    batcher_->Enqueue(std::move(request));
    return outcome;
  };
  OccupyInstance({1, 3});
  std::vector<Outcome*> four;
  for (const char* id : {"a", "b", "c", "d"}) four.push_back(enqueue(id));
  recorder_.Release();
  for (Outcome* outcome : four) ASSERT_TRUE(outcome->WaitForAnswer());
  Outcome* alone = enqueue("alone");
  ASSERT_TRUE(alone->WaitForAnswer());
  EXPECT_THAT(recorder_.batches(),
              ElementsAre(Ids{"busy"}, Ids{"a", "b", "c", "d"}, Ids{"alone"}));
  EXPECT_TRUE(by_instance.at("alone"));
  for (const char* id : {"a", "b", "c", "d"}) EXPECT_FALSE(by_instance.at(id)) << id;
}

TEST_F(DynamicBatcherTest, ResponseThreadsSendOneBatchsAnswersInParallel) {
  BatcherOptions options = Batching(8, absl::Seconds(1));
  options.response_threads = 2;
  Start(options);
  absl::Mutex mu;
  int started = 0;
  std::atomic<int> overlapped{0};
  std::vector<Outcome*> outcomes;
  for (int i = 0; i < 8; ++i) {
    Outcome* outcome;
    auto request = MakeRequest(absl::StrCat("r", i), {1, 3}, &outcome);
    // Each answer waits until two have started: only answers sent by two
    // threads at once get past the first one of each thread in time.
    request->on_complete = [&, done = std::move(request->on_complete)](
                               const absl::Status& status, const RequestTimestamps& timestamps) {
      {
        absl::MutexLock lock(&mu);
        ++started;
        auto two = [&started] { return started >= 2; };
        if (mu.AwaitWithTimeout(absl::Condition(&two), kTimeout)) overlapped.fetch_add(1);
      }
      done(status, timestamps);
    };
    batcher_->Enqueue(std::move(request));  // the eighth fills the batch
    outcomes.push_back(outcome);
  }
  for (Outcome* outcome : outcomes) ASSERT_TRUE(outcome->WaitForAnswer());
  EXPECT_THAT(recorder_.batches(), ElementsAre(Ids{"r0", "r1", "r2", "r3", "r4", "r5", "r6", "r7"}));
  EXPECT_EQ(overlapped.load(), 8);
}

TEST_F(DynamicBatcherTest, ShutdownReturnsOnlyOnceResponseThreadsHaveSentEveryAnswer) {
  BatcherOptions options = Batching(4, absl::ZeroDuration());
  options.response_threads = 1;
  Start(options);
  std::vector<Outcome*> outcomes;
  for (int i = 0; i < 12; ++i) {
    Outcome* outcome;
    auto request = MakeRequest(absl::StrCat("r", i), {1, 3}, &outcome);
    request->on_complete = [done = std::move(request->on_complete)](
                               const absl::Status& status, const RequestTimestamps& timestamps) {
      absl::SleepFor(absl::Milliseconds(2));  // a slow network
      done(status, timestamps);
    };
    batcher_->Enqueue(std::move(request));
    outcomes.push_back(outcome);
  }
  batcher_->Shutdown(absl::InfiniteFuture());
  for (Outcome* outcome : outcomes) {
    EXPECT_TRUE(outcome->done.HasBeenNotified());
    EXPECT_TRUE(outcome->status.ok()) << outcome->status;
  }
}

// BatcherOptionsFromConfig.

inference::ModelConfig ParseConfig(const std::string& text) {
  inference::ModelConfig config;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &config)) << text;
  return config;
}

TEST(BatcherOptionsFromConfigTest, WithoutDynamicBatchingEachRequestRunsAlone) {
  absl::StatusOr<BatcherOptions> options =
      BatcherOptionsFromConfig(ParseConfig("max_batch_size: 8"));
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->max_batch_size, 8);
  EXPECT_FALSE(options->dynamic_batching);
  EXPECT_TRUE(options->preferred_batch_sizes.empty());
  EXPECT_EQ(options->max_queue_size, 0);
  EXPECT_EQ(options->default_timeout, absl::ZeroDuration());
}

TEST(BatcherOptionsFromConfigTest, ReadsDynamicBatchingAndQueuePolicy) {
  absl::StatusOr<BatcherOptions> options = BatcherOptionsFromConfig(ParseConfig(R"pb(
    max_batch_size: 16
    dynamic_batching {
      preferred_batch_size: [ 4, 16, 8, 4 ]
      max_queue_delay_microseconds: 500
      preserve_ordering: true
      priority_levels: 1
      default_queue_policy {
        max_queue_size: 256
        default_timeout_microseconds: 20000
        allow_timeout_override: true
      }
    }
  )pb"));
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->max_batch_size, 16);
  EXPECT_TRUE(options->dynamic_batching);
  EXPECT_THAT(options->preferred_batch_sizes, ElementsAre(16, 8, 4));
  EXPECT_EQ(options->max_queue_delay, absl::Microseconds(500));
  EXPECT_EQ(options->max_queue_size, 256);
  EXPECT_EQ(options->default_timeout, absl::Milliseconds(20));
  EXPECT_TRUE(options->allow_timeout_override);
}

TEST(BatcherOptionsFromConfigTest, ModelWithoutBatchingKeepsQueuePolicyButDoesNotMerge) {
  absl::StatusOr<BatcherOptions> options = BatcherOptionsFromConfig(ParseConfig(R"pb(
    max_batch_size: 0
    dynamic_batching { default_queue_policy { max_queue_size: 3 } }
  )pb"));
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_FALSE(options->dynamic_batching);
  EXPECT_EQ(options->max_queue_size, 3);
}

struct InvalidConfigCase {
  std::string name;
  std::string config;
  std::string message;
};

void PrintTo(const InvalidConfigCase& param, std::ostream* os) { *os << param.name; }

class InvalidBatcherConfigTest : public ::testing::TestWithParam<InvalidConfigCase> {};

TEST_P(InvalidBatcherConfigTest, IsRejectedWithPreciseMessage) {
  absl::StatusOr<BatcherOptions> options = BatcherOptionsFromConfig(ParseConfig(GetParam().config));
  ASSERT_FALSE(options.ok());
  EXPECT_EQ(options.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(options.status().message(), GetParam().message);
}

INSTANTIATE_TEST_SUITE_P(
    Configs, InvalidBatcherConfigTest,
    ::testing::Values(
        InvalidConfigCase{"NegativeMaxBatchSize", "max_batch_size: -1",
                          "max_batch_size must be >= 0, got -1"},
        InvalidConfigCase{"PreferredAboveMax",
                          "max_batch_size: 8 dynamic_batching { preferred_batch_size: [ 4, 9 ] }",
                          "dynamic_batching.preferred_batch_size 9 must be in [1, 8] "
                          "(max_batch_size)"},
        InvalidConfigCase{"PreferredZero",
                          "max_batch_size: 8 dynamic_batching { preferred_batch_size: 0 }",
                          "dynamic_batching.preferred_batch_size 0 must be in [1, 8] "
                          "(max_batch_size)"},
        InvalidConfigCase{"PreferredWithoutBatching",
                          "max_batch_size: 0 dynamic_batching { preferred_batch_size: 2 }",
                          "dynamic_batching.preferred_batch_size 2 requires max_batch_size > 0 "
                          "(the model does not batch)"},
        InvalidConfigCase{"DelayTimeoutAction",
                          "max_batch_size: 8 dynamic_batching { default_queue_policy { "
                          "timeout_action: DELAY } }",
                          "dynamic_batching.default_queue_policy.timeout_action DELAY is not "
                          "supported: a request whose timeout expires in the queue is rejected "
                          "(REJECT)"},
        InvalidConfigCase{"PriorityLevels",
                          "max_batch_size: 8 dynamic_batching { priority_levels: 2 }",
                          "dynamic_batching.priority_levels 2 is not supported: fuseserve has a "
                          "single priority level"},
        InvalidConfigCase{"PriorityQueuePolicy",
                          "max_batch_size: 8 dynamic_batching { priority_queue_policy { key: 1 "
                          "value: { max_queue_size: 4 } } }",
                          "dynamic_batching.priority_queue_policy is not supported: fuseserve "
                          "has a single priority level (use default_queue_policy)"},
        InvalidConfigCase{"HugeQueueDelay",
                          "max_batch_size: 8 dynamic_batching { max_queue_delay_microseconds: "
                          "18446744073709551615 }",
                          "dynamic_batching.max_queue_delay_microseconds 18446744073709551615 is "
                          "too large (at most 9223372036854775807)"}),
    [](const ::testing::TestParamInfo<InvalidConfigCase>& info) { return info.param.name; });

}  // namespace
}  // namespace fuseserve
