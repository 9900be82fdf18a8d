#pragma once

// The per-model scheduler (SPEC.md §4, REFERENCE.md §2): one bounded queue,
// one worker thread per instance. A worker that is free takes queued requests
// in arrival order that share the first request's non-batch shape, up to
// max_batch_size; it prefers the largest preferred_batch_size that can be
// formed, waits up to max_queue_delay for a fuller batch, and dispatches at
// once when a full (max or preferred) batch is available. The oldest request
// always leads the next batch (requests of other shapes keep their place and
// never starve), and a later request never overtakes an earlier one of its
// shape that does not fit. Requests that expire (timeout or deadline) or are
// cancelled before they start are answered here and never executed; a
// dedicated thread notices expiry on time even while every instance is busy.
// With batching off every request runs alone. An instance that reports
// unhealthy after a batch takes no more batches (a sticky device error would
// fail them all); the other instances serve the queue, and once none is left
// every queued and every new request is answered UNAVAILABLE. Every request
// handed to Enqueue is answered exactly once.

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/model_config.pb.h"
#include "server/batching/clock.h"
#include "server/metrics/model_metrics.h"
#include "server/runtime/inference_request.h"
#include "server/runtime/instance.h"

namespace fuseserve {

struct BatcherOptions {
  // Largest total batch (sum of requests' batch sizes) one execution may
  // take. 0 = the model does not batch: each request is executed alone.
  int64_t max_batch_size = 0;

  // Merge requests at all (config has `dynamic_batching` and max_batch_size > 0).
  bool dynamic_batching = false;

  // Batch sizes to dispatch at once when formable, largest first.
  std::vector<int64_t> preferred_batch_sizes;

  // How long the oldest request may wait for a fuller batch.
  absl::Duration max_queue_delay = absl::ZeroDuration();

  // Queue bound in requests; 0 = unbounded. Beyond it: UNAVAILABLE.
  int64_t max_queue_size = 0;

  // Queue policy timeout (0 = none) and whether a request's own `timeout`
  // may shorten it. With no policy timeout a request's own timeout applies.
  absl::Duration default_timeout = absl::ZeroDuration();
  bool allow_timeout_override = false;

  // Threads that deliver an executed batch's answers (a ThreadPool),
  // at least 4 answers per thread; 0 = the instance's own thread delivers
  // them before its next batch, as it does for any batch of fewer than 4.
  // Not from the model config: the server's --response-threads.
  int response_threads = 0;
};

// Reads max_batch_size, dynamic_batching and its default_queue_policy
// (preferred sizes come back sorted largest first, without duplicates).
// InvalidArgument for contradictions (a negative max_batch_size, a preferred
// size outside [1, max_batch_size], a time that does not fit int64 µs) and for
// what fuseserve does not support: priority levels > 1, priority queue
// policies, a DELAY timeout action. preserve_ordering is accepted: every
// response goes to its own unary call, so there is no stream to order.
absl::StatusOr<BatcherOptions> BatcherOptionsFromConfig(const inference::ModelConfig& config);

class DynamicBatcher {
 public:
  // Starts one worker thread per instance, plus one thread that answers
  // requests whose deadline passes while they are queued. `metrics` (may be
  // null) receives the pending gauge: +1 per queued request, -1 when it
  // leaves the queue for any reason. `clock` must outlive the batcher.
  DynamicBatcher(BatcherOptions options, std::vector<std::unique_ptr<Instance>> instances,
                 Clock* clock, ModelMetrics* metrics);

  // Shutdown(now) if not called before.
  ~DynamicBatcher();

  DynamicBatcher(const DynamicBatcher&) = delete;
  DynamicBatcher& operator=(const DynamicBatcher&) = delete;

  // Takes the request and sets its `enqueued` timestamp. Answers it at once
  // (on the calling thread) with UNAVAILABLE when the queue is full ("...
  // exceeds maximum queue size of N"), the batcher is shutting down ("model
  // is shutting down") or it has no healthy instance, and with
  // INVALID_ARGUMENT when its batch size exceeds max_batch_size. Otherwise it
  // is answered by an instance (its batch's `exec_start` set when
  // dispatched) or, without executing, with
  // DEADLINE_EXCEEDED once min(request->deadline, enqueued + queue timeout)
  // passes, CANCELLED once is_cancelled() returns true (asked whenever the
  // queue changes, and every 50 ms while the request waits), or UNAVAILABLE if it
  // is still queued at the shutdown deadline or when the last healthy
  // instance is retired. The queue timeout is the
  // policy's default_timeout (shortened by requested_timeout when
  // allow_timeout_override), else requested_timeout. Expiry is noticed on
  // time even while every instance is busy. `is_cancelled` is called with the
  // batcher's lock held: it must be cheap and must not call into the batcher.
  // on_complete and Instance::Execute are never called with the lock held.
  void Enqueue(std::unique_ptr<InferenceRequest> request);

  // The first step of a drain: from now on queued requests are dispatched
  // without waiting for fuller batches, and so are the ones that still
  // arrive (they are accepted as before). Idempotent.
  void Flush();

  // Stops accepting; queued and running requests finish until `deadline`
  // (on the batcher's clock; queued ones are dispatched without waiting for
  // fuller batches), after which those still queued are answered
  // UNAVAILABLE. Returns once the queue is empty and no batch is running
  // (a running batch is never interrupted). Idempotent; a later call may
  // bring the deadline forward. Must not be called from on_complete or
  // Instance::Execute (it joins the threads that call them).
  void Shutdown(absl::Time deadline);

  // False once any instance became unhealthy (or if there is none).
  bool healthy() const;

  // Requests queued and not yet executing.
  int64_t queued() const;

  const BatcherOptions& options() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fuseserve
