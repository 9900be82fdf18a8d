#pragma once

// The measurement rule (warm-up, then windows until the throughput of the
// last three agrees within a tolerance, or a cap) and the server-side view of
// the same windows from ModelStatistics deltas.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/grpc_service.pb.h"

namespace fuseserve::client {

struct MeasurementRule {
  int stable_windows = 3;  // how many consecutive windows must agree
  double stability = 0.1;  // relative tolerance on their throughput
  int max_windows = 10;
  bool fixed_duration = false;  // one window, no stability rule
};

enum class WindowDecision {
  kContinue,       // measure another window
  kStable,         // the last `stable_windows` agree
  kNotStable,      // `max_windows` reached without agreement
  kFixedDuration,  // the single fixed-duration window is done
};

// What to do after the windows measured so far (their throughputs, oldest first).
WindowDecision DecideAfterWindow(const std::vector<double>& window_throughputs,
                                 const MeasurementRule& rule);

// How many of the last windows the report merges: the agreeing ones when
// stable, the last `stable_windows` when not (the freshest steady state), all
// of them (one) for a fixed duration.
int WindowsToReport(WindowDecision decision, int windows_measured, const MeasurementRule& rule);

// "stable", "not_stable", "fixed_duration" (the JSON spelling).
std::string WindowDecisionName(WindowDecision decision);

// Cumulative server counters of one model (summed over its versions that match).
struct ServerCounters {
  uint64_t inference_count = 0;
  uint64_t execution_count = 0;
  uint64_t success_count = 0;
  uint64_t success_ns = 0;
  uint64_t fail_count = 0;
  uint64_t queue_count = 0;
  uint64_t queue_ns = 0;
  uint64_t compute_input_count = 0;
  uint64_t compute_input_ns = 0;
  uint64_t compute_infer_count = 0;
  uint64_t compute_infer_ns = 0;
  uint64_t compute_output_count = 0;
  uint64_t compute_output_ns = 0;
};

// Extracts `model` (and `version` when not empty) from a statistics answer;
// NotFound when it has no entry for it.
absl::StatusOr<ServerCounters> CountersFromStatistics(
    const inference::ModelStatisticsResponse& response, const std::string& model,
    const std::string& version);

// The server's own view of a stretch of time, per request (Triton's
// statistics count queue and compute durations once per request).
struct ServerSideStats {
  bool available = false;  // false when the server gives no statistics
  int64_t requests = 0;    // successful requests
  int64_t failed = 0;
  int64_t executions = 0;     // batched executions
  int64_t inferences = 0;     // rows (a batch-8 request counts 8)
  double avg_batch_size = 0;  // inferences / executions
  double avg_request_us = 0;  // server-side end to end
  double avg_queue_us = 0;
  double avg_compute_input_us = 0;
  double avg_compute_infer_us = 0;
  double avg_compute_output_us = 0;
};

// The difference `after - before` (counters are cumulative).
ServerSideStats ServerDelta(const ServerCounters& before, const ServerCounters& after);

}  // namespace fuseserve::client
