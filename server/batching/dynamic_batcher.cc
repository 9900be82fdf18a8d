#include "server/batching/dynamic_batcher.h"

#include <algorithm>
#include <atomic>
#include <deque>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/thread_name.h"
#include "common/thread_pool.h"

namespace fuseserve {
namespace {

// How often the reaper asks queued requests whether their client has gone
// away: a cancelled request leaves the queue (and frees its slot) within
// this, not when its batch would have formed.
constexpr absl::Duration kCancellationPoll = absl::Milliseconds(50);

// A config field in microseconds (uint64 on the wire) as a Duration.
absl::StatusOr<absl::Duration> MicrosecondsField(uint64_t value, const char* field) {
  if (value > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return absl::InvalidArgumentError(absl::StrCat(field, " ", value, " is too large (at most ",
                                                   std::numeric_limits<int64_t>::max(), ")"));
  }
  return absl::Microseconds(static_cast<int64_t>(value));
}

// "request" or "request 'id'", for messages.
std::string RequestLabel(const InferenceRequest& request) {
  return request.id.empty() ? std::string("request") : absl::StrCat("request '", request.id, "'");
}

absl::Status NoHealthyInstance(const InferenceRequest& request) {
  return absl::UnavailableError(
      absl::StrCat(RequestLabel(request), " cannot run: every instance of the model is unhealthy"));
}

// Whether two batching requests may share a batch: equal shapes except in
// the leading (batch) dimension.
bool SameNonBatchShape(const Shape& a, const Shape& b) {
  if (a.empty() || b.empty()) return a == b;
  return std::equal(a.begin() + 1, a.end(), b.begin() + 1, b.end());
}

}  // namespace

absl::StatusOr<BatcherOptions> BatcherOptionsFromConfig(const inference::ModelConfig& config) {
  BatcherOptions options;
  if (config.max_batch_size() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_batch_size must be >= 0, got ", config.max_batch_size()));
  }
  options.max_batch_size = config.max_batch_size();
  if (!config.has_dynamic_batching()) return options;

  const inference::ModelDynamicBatching& batching = config.dynamic_batching();
  // A model that does not batch still gets the queue policy (bound and
  // timeouts); its requests just run one at a time.
  options.dynamic_batching = options.max_batch_size > 0;
  if (batching.priority_levels() > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("dynamic_batching.priority_levels ", batching.priority_levels(),
                     " is not supported: fuseserve has a single priority level"));
  }
  if (!batching.priority_queue_policy().empty()) {
    return absl::InvalidArgumentError(
        "dynamic_batching.priority_queue_policy is not supported: fuseserve has a single "
        "priority level (use default_queue_policy)");
  }
  for (int32_t size : batching.preferred_batch_size()) {
    if (options.max_batch_size == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("dynamic_batching.preferred_batch_size ", size,
                       " requires max_batch_size > 0 (the model does not batch)"));
    }
    if (size < 1 || size > options.max_batch_size) {
      return absl::InvalidArgumentError(absl::StrCat("dynamic_batching.preferred_batch_size ", size,
                                                     " must be in [1, ", options.max_batch_size,
                                                     "] (max_batch_size)"));
    }
    options.preferred_batch_sizes.push_back(size);
  }
  std::sort(options.preferred_batch_sizes.begin(), options.preferred_batch_sizes.end(),
            std::greater<int64_t>());
  options.preferred_batch_sizes.erase(
      std::unique(options.preferred_batch_sizes.begin(), options.preferred_batch_sizes.end()),
      options.preferred_batch_sizes.end());
  ASSIGN_OR_RETURN(options.max_queue_delay,
                   MicrosecondsField(batching.max_queue_delay_microseconds(),
                                     "dynamic_batching.max_queue_delay_microseconds"));

  const inference::ModelQueuePolicy& policy = batching.default_queue_policy();
  if (policy.timeout_action() != inference::ModelQueuePolicy::REJECT) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dynamic_batching.default_queue_policy.timeout_action ",
        inference::ModelQueuePolicy::TimeoutAction_Name(policy.timeout_action()),
        " is not supported: a request whose timeout expires in the queue is rejected (REJECT)"));
  }
  ASSIGN_OR_RETURN(
      options.default_timeout,
      MicrosecondsField(policy.default_timeout_microseconds(),
                        "dynamic_batching.default_queue_policy.default_timeout_microseconds"));
  options.allow_timeout_override = policy.allow_timeout_override();
  options.max_queue_size = policy.max_queue_size();
  return options;
}

class DynamicBatcher::Impl {
 public:
  Impl(BatcherOptions options, std::vector<std::unique_ptr<Instance>> instances, Clock* clock,
       ModelMetrics* metrics)
      : options_(std::move(options)),
        batching_(options_.dynamic_batching && options_.max_batch_size > 0),
        instances_(std::move(instances)),
        clock_(clock),
        metrics_(metrics),
        serving_instances_(static_cast<int64_t>(instances_.size())) {
    if (options_.response_threads > 0) {
      response_threads_ = std::make_unique<ThreadPool>(options_.response_threads, "fs-answer");
    }
    absl::MutexLock lock(&join_mu_);
    for (const std::unique_ptr<Instance>& instance : instances_) {
      workers_.emplace_back([this, raw = instance.get()] {
        NameCurrentThread("fsi:" + raw->name());
        WorkerLoop(raw);
      });
    }
    reaper_ = std::thread([this] {
      NameCurrentThread("fs-reaper");
      ReaperLoop();
    });
  }

  ~Impl() { Shutdown(clock_->Now()); }

  void Enqueue(std::unique_ptr<InferenceRequest> request) ABSL_LOCKS_EXCLUDED(mu_);
  void Flush() ABSL_LOCKS_EXCLUDED(mu_);
  void Shutdown(absl::Time deadline) ABSL_LOCKS_EXCLUDED(mu_, join_mu_);

  bool healthy() const {
    return !instances_.empty() && std::all_of(instances_.begin(), instances_.end(),
                                              [](const std::unique_ptr<Instance>& instance) {
                                                return instance->healthy();
                                              });
  }

  int64_t queued() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return static_cast<int64_t>(queue_.size());
  }

  const BatcherOptions& options() const { return options_; }

 private:
  // A queued request. `request` is null once it has been taken out (into a
  // batch or an answer) and before the entry is erased.
  struct Entry {
    std::unique_ptr<InferenceRequest> request;
    // min(request->deadline, enqueued + timeout): past it, the request is
    // answered DEADLINE_EXCEEDED instead of executing.
    absl::Time deadline;
    // The queue timeout that applies (zero = none), for the message.
    absl::Duration timeout;

    // When the reaper must look at this entry again, seen at `now`: by its
    // deadline, or within a cancellation poll if its client may go away.
    absl::Time LookBy(absl::Time now) const {
      return request->is_cancelled ? std::min(deadline, now + kCancellationPoll) : deadline;
    }
  };

  // A request answered by the batcher itself, without executing.
  struct Answer {
    std::unique_ptr<InferenceRequest> request;
    absl::Status status;
  };

  using Batch = std::vector<std::unique_ptr<InferenceRequest>>;

  // The queue timeout of `request` under the model's queue policy (zero = none).
  absl::Duration TimeoutFor(const InferenceRequest& request) const;

  // Why `entry` must leave the queue unexecuted at `now` (cancelled, expired,
  // or still queued at the shutdown deadline); OK if it may still run.
  absl::Status DropStatusLocked(const Entry& entry, absl::Time now) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Erases entries whose request was taken out; keeps the pending gauge and
  // queue version in step.
  void EraseTakenLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // The batching decision, made by the leader at `now`. Moves requests that
  // must be dropped (met while scanning) into `dropped`. If a batch should run
  // now, moves it into `batch` (in arrival order) and returns InfiniteFuture();
  // otherwise returns when the oldest request's queue delay expires (or
  // InfiniteFuture() if the queue is empty).
  absl::Time FormBatchLocked(absl::Time now, Batch* batch, std::vector<Answer>* dropped)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Moves every request that must be dropped at `now` into `dropped`.
  // Returns the earliest time at which another one may have to be: the
  // earliest remaining deadline, or the shutdown deadline while stopping.
  absl::Time ReapLocked(absl::Time now, std::vector<Answer>* dropped)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // As the leader: returns true with a batch to run, or false when the
  // batcher is stopping and the queue is empty. Answers dropped requests on
  // the way (with `mu_` released).
  bool LeadLocked(Batch* batch, std::vector<Answer>* dropped) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Runs `batch` on `instance` and makes sure every request in it was
  // answered exactly once, whatever the instance did. Leaves `batch` empty.
  void Run(Instance* instance, Batch& batch) ABSL_LOCKS_EXCLUDED(mu_);

  // Delivers the answers an executed batch recorded: on the response
  // threads when there are some (split over them), else here.
  struct ExecutedBatch;
  void Deliver(std::shared_ptr<ExecutedBatch> executed);

  static void AnswerAll(std::vector<Answer>* answers);
  void AddPendingLocked(int64_t delta) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (metrics_ != nullptr && delta != 0) metrics_->AddPending(delta);
  }

  // Takes an instance that became unhealthy out of service. When it was the
  // last one, moves every queued request into `dropped` (UNAVAILABLE).
  void RetireLocked(const Instance& instance, std::vector<Answer>* dropped)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  void WorkerLoop(Instance* instance) ABSL_LOCKS_EXCLUDED(mu_);
  void ReaperLoop() ABSL_LOCKS_EXCLUDED(mu_);

  // Besides a kick, the reaper exits once a stopping batcher's queue has
  // been drained (by workers, which do not kick it).
  bool ReaperShouldWake() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return reaper_kick_ || (stopping_ && queue_.empty());
  }
  // Whether a request just queued may change what the waiting leader
  // decides (see waiting_); if not, it only joins the batch's count.
  bool LeaderMustRevisitLocked(const InferenceRequest& request)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  bool NoLeader() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !has_leader_; }
  bool QueueChanged() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return version_ != leader_seen_version_;
  }

  const BatcherOptions options_;
  // The threads that send executed batches' answers (options_.response_threads
  // > 0), so that an instance's thread goes back to its next batch as soon as
  // the batch's results are in, as Triton's backends hand responses to its
  // front end. Answering a request runs its on_complete: for the gRPC front
  // end, serialising the answer's header, recording metrics and Finish(),
  // which writes the answer to the socket from the calling thread. Reset by
  // Shutdown once the workers, its only users, have been joined.
  std::unique_ptr<ThreadPool> response_threads_;
  // Merging is on: dynamic_batching with max_batch_size > 0.
  const bool batching_;
  const std::vector<std::unique_ptr<Instance>> instances_;
  Clock* const clock_;
  ModelMetrics* const metrics_;

  mutable absl::Mutex mu_;
  // Queued requests in arrival order; none is executing.
  std::deque<Entry> queue_ ABSL_GUARDED_BY(mu_);
  // Bumped on every change the leader must react to (queue contents,
  // stopping); the leader sleeps until it differs from what it last saw.
  uint64_t version_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t leader_seen_version_ ABSL_GUARDED_BY(mu_) = 0;
  // The batch a leader waits to fill until its queue delay runs out: the
  // oldest request's non-batch shape and the samples of that shape queued.
  // Enqueue wakes the leader only for a request that fills it (to
  // max_batch_size or a preferred size); one that merely joins it, or has
  // another shape, changes nothing the leader decides before the delay, and
  // waking it for each would cost a context switch and a scan of the queue
  // per request. Unset while no leader waits for a fuller batch.
  struct WaitingBatch {
    Shape shape;
    int64_t total = 0;
  };
  std::optional<WaitingBatch> waiting_ ABSL_GUARDED_BY(mu_);
  // At most one idle worker (the leader) looks at the queue and waits for a
  // batch to form; the other idle workers wait for the role. This keeps an
  // arrival from waking every idle worker.
  bool has_leader_ ABSL_GUARDED_BY(mu_) = false;
  // Instances still taking batches: an instance that reports unhealthy after
  // a batch is retired (a sticky device error would fail every later batch).
  int64_t serving_instances_ ABSL_GUARDED_BY(mu_);
  bool accepting_ ABSL_GUARDED_BY(mu_) = true;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // Draining (Flush, or Shutdown): batches are dispatched without waiting
  // for fuller ones.
  bool flushing_ ABSL_GUARDED_BY(mu_) = false;
  // While stopping: requests still queued at this time are answered UNAVAILABLE.
  absl::Time drain_deadline_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  // The reaper sleeps until `reaper_wake_` (the earliest deadline it knows
  // of) or until `reaper_kick_` (an earlier deadline arrived, or shutdown).
  // It exists so that expiry is noticed on time even while every instance is
  // busy (Triton notices only when an instance frees: REFERENCE.md §2.2).
  absl::Time reaper_wake_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  bool reaper_kick_ ABSL_GUARDED_BY(mu_) = false;

  // Serializes Shutdown's joins (never held together with `mu_`).
  absl::Mutex join_mu_;
  std::vector<std::thread> workers_ ABSL_GUARDED_BY(join_mu_);
  std::thread reaper_ ABSL_GUARDED_BY(join_mu_);
};

absl::Duration DynamicBatcher::Impl::TimeoutFor(const InferenceRequest& request) const {
  const absl::Duration requested = request.requested_timeout;
  if (options_.default_timeout > absl::ZeroDuration()) {
    // A request may only shorten the policy's timeout, and only if allowed.
    if (options_.allow_timeout_override && requested > absl::ZeroDuration() &&
        requested < options_.default_timeout) {
      return requested;
    }
    return options_.default_timeout;
  }
  return std::max(requested, absl::ZeroDuration());
}

absl::Status DynamicBatcher::Impl::DropStatusLocked(const Entry& entry, absl::Time now) const {
  const InferenceRequest& request = *entry.request;
  if (request.is_cancelled && request.is_cancelled()) {
    return absl::CancelledError(
        absl::StrCat(RequestLabel(request), " was cancelled before it started executing"));
  }
  if (now >= entry.deadline) {
    const int64_t waited_us = absl::ToInt64Microseconds(now - request.timestamps.enqueued);
    if (entry.timeout > absl::ZeroDuration() &&
        entry.deadline == request.timestamps.enqueued + entry.timeout) {
      return absl::DeadlineExceededError(
          absl::StrCat(RequestLabel(request), " timed out in the queue after ", waited_us,
                       " us (queue timeout ", absl::ToInt64Microseconds(entry.timeout), " us)"));
    }
    return absl::DeadlineExceededError(absl::StrCat(RequestLabel(request),
                                                    " exceeded its deadline after waiting ",
                                                    waited_us, " us in the queue"));
  }
  if (stopping_ && now >= drain_deadline_) {
    return absl::UnavailableError(absl::StrCat("model is shutting down: ", RequestLabel(request),
                                               " was still queued at the shutdown deadline"));
  }
  return absl::OkStatus();
}

void DynamicBatcher::Impl::EraseTakenLocked() {
  const size_t before = queue_.size();
  queue_.erase(std::remove_if(queue_.begin(), queue_.end(),
                              [](const Entry& entry) { return entry.request == nullptr; }),
               queue_.end());
  const size_t removed = before - queue_.size();
  if (removed > 0) {
    ++version_;
    AddPendingLocked(-static_cast<int64_t>(removed));
  }
}

absl::Time DynamicBatcher::Impl::FormBatchLocked(absl::Time now, Batch* batch,
                                                 std::vector<Answer>* dropped) {
  // Candidates: the oldest live request, then later ones of the same
  // non-batch shape, in arrival order, while they fit in max_batch_size.
  // Requests of other shapes are passed over and keep their place, so the
  // oldest request always leads the next batch and none starves.
  std::vector<Entry*> candidates;
  int64_t total = 0;
  size_t preferred_count = 0;  // candidates forming the largest preferred size
  bool full = false;           // waiting cannot make this batch any larger
  for (Entry& entry : queue_) {
    absl::Status drop = DropStatusLocked(entry, now);
    if (!drop.ok()) {
      dropped->push_back(Answer{std::move(entry.request), std::move(drop)});
      continue;
    }
    const InferenceRequest& request = *entry.request;
    if (!candidates.empty()) {
      if (!SameNonBatchShape(candidates.front()->request->input_shape, request.input_shape)) {
        continue;
      }
      // Stop at the first one that does not fit rather than skip it: a later,
      // smaller request must not overtake it.
      if (total + request.batch_size > options_.max_batch_size) {
        full = true;
        break;
      }
    }
    candidates.push_back(&entry);
    total += request.batch_size;
    if (!batching_) {
      full = true;
      break;
    }
    if (std::find(options_.preferred_batch_sizes.begin(), options_.preferred_batch_sizes.end(),
                  total) != options_.preferred_batch_sizes.end()) {
      preferred_count = candidates.size();
    }
    if (total >= options_.max_batch_size) {
      full = true;
      break;
    }
  }

  absl::Time wake = absl::InfiniteFuture();
  size_t take = 0;
  if (!candidates.empty()) {
    const absl::Time flush_at =
        candidates.front()->request->timestamps.enqueued + options_.max_queue_delay;
    if (preferred_count > 0) {
      take = preferred_count;
    } else if (full || flushing_ || options_.max_queue_delay <= absl::ZeroDuration() ||
               now >= flush_at) {
      // While draining no request should wait for one that may never come.
      take = candidates.size();
    } else {
      wake = flush_at;
    }
  }
  if (wake != absl::InfiniteFuture()) {
    waiting_ = WaitingBatch{candidates.front()->request->input_shape, total};
  } else {
    waiting_.reset();
  }
  for (size_t i = 0; i < take; ++i) {
    candidates[i]->request->timestamps.exec_start = now;
    batch->push_back(std::move(candidates[i]->request));
  }
  EraseTakenLocked();
  return wake;
}

absl::Time DynamicBatcher::Impl::ReapLocked(absl::Time now, std::vector<Answer>* dropped) {
  absl::Time next = stopping_ ? drain_deadline_ : absl::InfiniteFuture();
  for (Entry& entry : queue_) {
    absl::Status drop = DropStatusLocked(entry, now);
    if (!drop.ok()) {
      dropped->push_back(Answer{std::move(entry.request), std::move(drop)});
    } else {
      next = std::min(next, entry.LookBy(now));
    }
  }
  EraseTakenLocked();
  return next;
}

bool DynamicBatcher::Impl::LeadLocked(Batch* batch, std::vector<Answer>* dropped) {
  while (true) {
    const absl::Time wake = FormBatchLocked(clock_->Now(), batch, dropped);
    if (!batch->empty()) return true;  // the caller answers `dropped` unlocked
    if (!dropped->empty()) {
      mu_.Unlock();
      AnswerAll(dropped);
      mu_.Lock();
      continue;  // the queue may have changed meanwhile
    }
    if (stopping_ && queue_.empty()) return false;
    leader_seen_version_ = version_;
    clock_->AwaitWithDeadline(&mu_, absl::Condition(this, &Impl::QueueChanged), wake);
  }
}

void DynamicBatcher::Impl::WorkerLoop(Instance* instance) {
  Batch batch;
  std::vector<Answer> dropped;
  mu_.Lock();
  while (instance->healthy()) {
    clock_->AwaitWithDeadline(&mu_, absl::Condition(this, &Impl::NoLeader), absl::InfiniteFuture());
    has_leader_ = true;
    const bool run = LeadLocked(&batch, &dropped);
    has_leader_ = false;
    if (!run) {
      mu_.Unlock();
      return;
    }
    mu_.Unlock();
    AnswerAll(&dropped);
    Run(instance, batch);
    batch.clear();
    mu_.Lock();
  }
  RetireLocked(*instance, &dropped);
  mu_.Unlock();
  AnswerAll(&dropped);
}

void DynamicBatcher::Impl::RetireLocked(const Instance& instance, std::vector<Answer>* dropped) {
  --serving_instances_;
  FS_LOG(ERROR) << "instance " << instance.name() << " is unhealthy and takes no more batches ("
                << serving_instances_ << " healthy instance(s) left)";
  if (serving_instances_ > 0) return;
  for (Entry& entry : queue_) {
    absl::Status status = NoHealthyInstance(*entry.request);
    dropped->push_back(Answer{std::move(entry.request), std::move(status)});
  }
  EraseTakenLocked();
}

// A batch that has run: its requests and the answer each was given, kept
// until they are delivered to the requests' own on_complete.
struct DynamicBatcher::Impl::ExecutedBatch {
  struct Answer {
    // The request's on_complete, as the front end set it.
    std::function<void(const absl::Status&, const RequestTimestamps&)> deliver;
    std::atomic<bool> answered{false};
    absl::Status status;
    RequestTimestamps timestamps;
  };

  explicit ExecutedBatch(size_t size) : answers(size) {}

  // Delivers answers [begin, end) and lets their requests go.
  void DeliverRange(size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) {
      answers[i].deliver(answers[i].status, answers[i].timestamps);
      requests[i].reset();
    }
  }

  Batch requests;
  std::vector<Answer> answers;
};

void DynamicBatcher::Impl::Run(Instance* instance, Batch& batch) {
  // Instance::Execute promises to answer every request once before it
  // returns. Hold it to that: a request it leaves unanswered is answered
  // INTERNAL here, and a second answer is ignored, so that SPEC.md's "no
  // request is ever left without an answer" survives a faulty instance.
  // The instance's answers are recorded and delivered once it has returned.
  auto executed = std::make_shared<ExecutedBatch>(batch.size());
  for (size_t i = 0; i < batch.size(); ++i) {
    ExecutedBatch::Answer& answer = executed->answers[i];
    answer.deliver = std::move(batch[i]->on_complete);
    batch[i]->on_complete = [&answer](const absl::Status& status,
                                      const RequestTimestamps& timestamps) {
      if (answer.answered.exchange(true)) return;
      answer.status = status;
      answer.timestamps = timestamps;
    };
  }
  instance->Execute(batch);
  for (size_t i = 0; i < batch.size(); ++i) {
    ExecutedBatch::Answer& answer = executed->answers[i];
    if (answer.answered.load()) continue;
    answer.status = absl::InternalError(
        absl::StrCat("instance ", instance->name(), " did not answer ", RequestLabel(*batch[i])));
    answer.timestamps = batch[i]->timestamps;
  }
  executed->requests = std::move(batch);
  batch.clear();
  Deliver(std::move(executed));
}

void DynamicBatcher::Impl::Deliver(std::shared_ptr<ExecutedBatch> executed) {
  // Fewer answers than this per task cost more in waking a thread (and in
  // latency: ~15 us at concurrency 1 on the CPU backend) than sending them
  // elsewhere saves the instance (an answer takes a few microseconds to send).
  constexpr size_t kMinAnswersPerTask = 4;
  const size_t size = executed->answers.size();
  if (response_threads_ == nullptr || size < kMinAnswersPerTask) {
    executed->DeliverRange(0, size);
    return;
  }
  const size_t threads = static_cast<size_t>(response_threads_->num_workers());
  const size_t per_task = std::max(kMinAnswersPerTask, (size + threads - 1) / threads);
  for (size_t begin = 0; begin < size; begin += per_task) {
    const size_t end = std::min(size, begin + per_task);
    response_threads_->Post([executed, begin, end] { executed->DeliverRange(begin, end); });
  }
}

void DynamicBatcher::Impl::ReaperLoop() {
  std::vector<Answer> dropped;
  mu_.Lock();
  while (true) {
    const absl::Time next = ReapLocked(clock_->Now(), &dropped);
    if (!dropped.empty()) {
      mu_.Unlock();
      AnswerAll(&dropped);
      mu_.Lock();
      continue;
    }
    if (stopping_ && queue_.empty()) break;
    reaper_wake_ = next;
    reaper_kick_ = false;
    clock_->AwaitWithDeadline(&mu_, absl::Condition(this, &Impl::ReaperShouldWake), next);
  }
  mu_.Unlock();
}

void DynamicBatcher::Impl::AnswerAll(std::vector<Answer>* answers) {
  for (Answer& answer : *answers) {
    answer.request->on_complete(answer.status, answer.request->timestamps);
  }
  answers->clear();
}

void DynamicBatcher::Impl::Enqueue(std::unique_ptr<InferenceRequest> request) {
  const absl::Time now = clock_->Now();
  request->timestamps.enqueued = now;
  if (options_.max_batch_size > 0 && request->batch_size > options_.max_batch_size) {
    const absl::Status status = absl::InvalidArgumentError(
        absl::StrCat(RequestLabel(*request), " has batch size ", request->batch_size,
                     ", more than max_batch_size ", options_.max_batch_size));
    request->on_complete(status, request->timestamps);
    return;
  }
  const absl::Duration timeout = TimeoutFor(*request);
  absl::Time deadline = request->deadline;
  if (timeout > absl::ZeroDuration()) deadline = std::min(deadline, now + timeout);
  Entry entry{std::move(request), deadline, timeout};

  absl::Status rejection;
  {
    absl::MutexLock lock(&mu_);
    if (!accepting_) {
      rejection = absl::UnavailableError("model is shutting down");
    } else if (instances_.empty()) {
      rejection = absl::UnavailableError("model has no execution instances");
    } else if (serving_instances_ == 0) {
      rejection = NoHealthyInstance(*entry.request);
    } else if (options_.max_queue_size > 0 &&
               static_cast<int64_t>(queue_.size()) >= options_.max_queue_size) {
      rejection = absl::UnavailableError(
          absl::StrCat("queue is full: ", RequestLabel(*entry.request),
                       " exceeds maximum queue size of ", options_.max_queue_size));
    } else {
      if (entry.LookBy(now) < reaper_wake_) reaper_kick_ = true;
      if (LeaderMustRevisitLocked(*entry.request)) ++version_;
      queue_.push_back(std::move(entry));
      AddPendingLocked(1);
      return;
    }
  }
  entry.request->on_complete(rejection, entry.request->timestamps);
}

bool DynamicBatcher::Impl::LeaderMustRevisitLocked(const InferenceRequest& request) {
  if (!waiting_.has_value()) return true;
  if (!SameNonBatchShape(waiting_->shape, request.input_shape)) return false;
  const int64_t total = waiting_->total + request.batch_size;
  const std::vector<int64_t>& preferred = options_.preferred_batch_sizes;
  if (total >= options_.max_batch_size ||
      std::find(preferred.begin(), preferred.end(), total) != preferred.end()) {
    return true;
  }
  waiting_->total = total;
  return false;
}

void DynamicBatcher::Impl::Flush() {
  absl::MutexLock lock(&mu_);
  flushing_ = true;
  ++version_;
}

void DynamicBatcher::Impl::Shutdown(absl::Time deadline) {
  {
    absl::MutexLock lock(&mu_);
    accepting_ = false;
    stopping_ = true;
    flushing_ = true;
    drain_deadline_ = std::min(drain_deadline_, deadline);
    ++version_;
    reaper_kick_ = true;
  }
  absl::MutexLock lock(&join_mu_);
  for (std::thread& worker : workers_) {
    if (worker.joinable()) worker.join();
  }
  if (reaper_.joinable()) reaper_.join();
  response_threads_.reset();  // delivers every answer still queued
}

DynamicBatcher::DynamicBatcher(BatcherOptions options,
                               std::vector<std::unique_ptr<Instance>> instances, Clock* clock,
                               ModelMetrics* metrics)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(instances), clock, metrics)) {}

DynamicBatcher::~DynamicBatcher() = default;

void DynamicBatcher::Enqueue(std::unique_ptr<InferenceRequest> request) {
  impl_->Enqueue(std::move(request));
}

void DynamicBatcher::Flush() { impl_->Flush(); }

void DynamicBatcher::Shutdown(absl::Time deadline) { impl_->Shutdown(deadline); }

bool DynamicBatcher::healthy() const { return impl_->healthy(); }

int64_t DynamicBatcher::queued() const { return impl_->queued(); }

const BatcherOptions& DynamicBatcher::options() const { return impl_->options(); }

}  // namespace fuseserve
