#pragma once

// Per-model (name, version) metrics: Triton's metric families (SPEC.md §6,
// REFERENCE.md §3.2) plus latency and batch-size histograms, and the
// cumulative numbers the ModelStatistics RPC reports. One ModelMetrics per
// loaded model version, owned by the MetricsRegistry; all methods are
// thread-safe and cheap (a few atomic updates and one short critical section,
// no lookups by name), callable from any thread.
//
// Counting rule (Triton's core/src/infer_stats.cc, which the statistics
// protocol and dashboards built on it assume):
//  - Per REQUEST, in RecordSuccess: success, queue and compute_{input,infer,
//    output} (each request of a batch adds its batch's compute durations, so
//    these sums are request-weighted), and inference_count += the request's
//    own batch size. So nv_inference_count == ModelStatistics.inference_count
//    == the inferences of SUCCESSFUL requests (a request of batch n counts n).
//  - Per REQUEST, in RecordFailure: fail and the failure counter of `reason`.
//  - Per EXECUTION, in RecordExecution: execution_count += 1 and
//    batch_stats[batch_size] (its compute durations, count 1).
//  When no request fails, the batch sizes of all executions sum to
//  inference_count; inference_count / execution_count is the average batch.
//
// Durations come from RequestTimestamps: request = finished - received,
// queue = exec_start - enqueued, compute_input = input_done - exec_start,
// compute_infer = infer_done - input_done, compute_output = output_done -
// infer_done. A duration whose end points are not both set, or whose end
// precedes its start, counts as zero: never negative.
//
// The Prometheus duration counters are in µs with sub-µs fractions (Triton
// truncates each request to whole µs); ModelStatisticsSnapshot is exact in ns.
// The latency histograms observe successful requests only, like the duration
// counters, so each histogram's _count equals nv_inference_request_success.

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

// Executions of one batch size: each count is the number of such executions.
struct BatchStat {
  DurationStat compute_input;
  DurationStat compute_infer;
  DurationStat compute_output;
};

// Everything ModelStatistics reports for one model version.
struct ModelStatisticsSnapshot {
  // ms since the epoch of the latest RecordSuccess, RecordFailure or
  // RecordExecution (wall clock when it was called); 0 = never.
  uint64_t last_inference_ms = 0;
  uint64_t inference_count = 0;               // successful inferences: batch of n counts n
  uint64_t execution_count = 0;               // one per batch execution
  DurationStat success;                       // end-to-end duration of successful requests
  DurationStat fail;                          // end-to-end duration of failed requests
  DurationStat queue;                         // per successful request
  DurationStat compute_input;                 // per successful request
  DurationStat compute_infer;                 // per successful request
  DurationStat compute_output;                // per successful request
  std::map<uint64_t, BatchStat> batch_stats;  // keyed by executed batch size
};

class ModelMetrics {
 public:
  virtual ~ModelMetrics() = default;

  // A request answered OK. `finished` is when its response was handed to the
  // transport; `batch_size` is the request's own batch (its leading
  // dimension, 1 for a model that does not batch). Adds its request, queue
  // and compute durations (from `timestamps`) to the counters, the histograms
  // and the statistics; inference_count += batch_size (negative counts 0).
  virtual void RecordSuccess(const RequestTimestamps& timestamps, int64_t batch_size,
                             absl::Time finished) = 0;

  // A request answered with an error after it was matched to this model:
  // fail += finished - timestamps.received; the reason's failure counter += 1.
  virtual void RecordFailure(FailureReason reason, const RequestTimestamps& timestamps,
                             absl::Time finished) = 0;

  // One batch execution of `batch_size` inferences (all requests of the
  // batch together) on an instance, successful or not: execution_count += 1,
  // batch_stats[batch_size] and the batch-size histogram. A negative
  // batch_size is recorded as 0, a negative duration as zero.
  virtual void RecordExecution(int64_t batch_size, absl::Duration compute_input,
                               absl::Duration compute_infer, absl::Duration compute_output) = 0;

  // nv_inference_pending_request_count: requests queued, not yet executing.
  // +1 when a request enters the queue, -1 when it leaves it (to execute, or
  // rejected, expired or cancelled there).
  virtual void AddPending(int64_t delta) = 0;

  virtual ModelStatisticsSnapshot Snapshot() const = 0;
};

}  // namespace fuseserve
