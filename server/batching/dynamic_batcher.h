#pragma once

// The per-model scheduler (SPEC.md §4, REFERENCE.md §2): one bounded queue,
// one worker thread per instance. A worker that is free takes queued requests
// in arrival order that share the first request's non-batch shape, up to
// max_batch_size; it prefers the largest preferred_batch_size that can be
// formed, waits up to max_queue_delay for a fuller batch, and dispatches at
// once when a full (max or preferred) batch is available. Requests that
// expire (timeout or deadline) or are cancelled before they start are
// answered here and never executed. With batching off every request runs
// alone. Every request handed to Enqueue is answered exactly once.

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
};

// Reads max_batch_size, dynamic_batching and its default_queue_policy.
// InvalidArgument for contradictions (e.g. a preferred size > max_batch_size,
// priority levels or a DELAY timeout action, which fuseserve does not support).
absl::StatusOr<BatcherOptions> BatcherOptionsFromConfig(const inference::ModelConfig& config);

class DynamicBatcher {
 public:
  // Starts one worker thread per instance. `metrics` receives the pending
  // gauge; `clock` must outlive the batcher.
  DynamicBatcher(BatcherOptions options, std::vector<std::unique_ptr<Instance>> instances,
                 Clock* clock, ModelMetrics* metrics);

  // Shutdown(now) if not called before.
  ~DynamicBatcher();

  DynamicBatcher(const DynamicBatcher&) = delete;
  DynamicBatcher& operator=(const DynamicBatcher&) = delete;

  // Takes the request. Answers it at once with UNAVAILABLE when the queue is
  // full ("... exceeds maximum queue size N") or the batcher is shutting down;
  // otherwise it is answered by an instance or by expiry/cancellation.
  void Enqueue(std::unique_ptr<InferenceRequest> request);

  // Stops accepting; queued and running requests finish until `deadline`,
  // after which those still queued are answered UNAVAILABLE. Joins the
  // workers. Idempotent.
  void Shutdown(absl::Time deadline);

  // False once any instance became unhealthy.
  bool healthy() const;

  // Requests queued and not yet executing.
  int64_t queued() const;

  const BatcherOptions& options() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fuseserve
