#pragma once

// Per-model (name, version) metrics: Triton's metric families (SPEC.md §6,
// REFERENCE.md §3.2) plus latency and batch-size histograms, and the
// cumulative numbers the ModelStatistics RPC reports. One ModelMetrics per
// loaded model version, owned by the MetricsRegistry; all methods are
// thread-safe and cheap (atomic counters), callable from any thread.

#include <cstdint>
#include <map>
#include <string>

#include "absl/time/time.h"
#include "server/runtime/inference_request.h"

namespace fuseserve {

// Triton's failure categories, the `reason` label of
// nv_inference_request_failure.
enum class FailureReason {
  kRejected,  // queue full, request timeout expired in the queue
  kCanceled,  // client cancelled
  kBackend,   // execution failed
  kOther,     // anything else (e.g. invalid request after model lookup)
};

// Cumulative count and total duration, as StatisticDuration in the protocol.
struct DurationStat {
  uint64_t count = 0;
  uint64_t ns = 0;
};

struct BatchStat {
  DurationStat compute_input;
  DurationStat compute_infer;
  DurationStat compute_output;
};

// Everything ModelStatistics reports for one model version.
struct ModelStatisticsSnapshot {
  uint64_t last_inference_ms = 0;  // ms since the epoch; 0 = never
  uint64_t inference_count = 0;    // batch of n counts n
  uint64_t execution_count = 0;    // one per batch execution
  DurationStat success;            // end-to-end duration of successful requests
  DurationStat fail;
  DurationStat queue;
  DurationStat compute_input;
  DurationStat compute_infer;
  DurationStat compute_output;
  std::map<uint64_t, BatchStat> batch_stats;  // keyed by batch size
};

class ModelMetrics {
 public:
  virtual ~ModelMetrics() = default;

  // A request answered OK. `finished` is when its response was handed to the
  // transport. Adds its request/queue/compute durations (from `timestamps`)
  // to the counters, the histograms and the statistics; inference_count += batch_size.
  virtual void RecordSuccess(const RequestTimestamps& timestamps, int64_t batch_size,
                             absl::Time finished) = 0;

  // A request answered with an error after it was matched to this model.
  virtual void RecordFailure(FailureReason reason, const RequestTimestamps& timestamps,
                             absl::Time finished) = 0;

  // One batch execution of `batch_size` inferences on an instance.
  virtual void RecordExecution(int64_t batch_size, absl::Duration compute_input,
                               absl::Duration compute_infer,
                               absl::Duration compute_output) = 0;

  // nv_inference_pending_request_count: requests queued, not yet executing.
  virtual void AddPending(int64_t delta) = 0;

  virtual ModelStatisticsSnapshot Snapshot() const = 0;
};

}  // namespace fuseserve
