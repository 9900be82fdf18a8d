#include "client/bench/measurement.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "client/bench/statistics.h"

namespace fuseserve::client {

WindowDecision DecideAfterWindow(const std::vector<double>& window_throughputs,
                                 const MeasurementRule& rule) {
  const int measured = static_cast<int>(window_throughputs.size());
  if (rule.fixed_duration) {
    return measured >= 1 ? WindowDecision::kFixedDuration : WindowDecision::kContinue;
  }
  if (measured >= rule.stable_windows) {
    const std::vector<double> last(window_throughputs.end() - rule.stable_windows,
                                   window_throughputs.end());
    if (WithinTolerance(last, rule.stability)) return WindowDecision::kStable;
  }
  return measured >= rule.max_windows ? WindowDecision::kNotStable : WindowDecision::kContinue;
}

int WindowsToReport(WindowDecision decision, int windows_measured, const MeasurementRule& rule) {
  if (decision == WindowDecision::kFixedDuration) return std::min(windows_measured, 1);
  return std::min(windows_measured, rule.stable_windows);
}

std::string WindowDecisionName(WindowDecision decision) {
  switch (decision) {
    case WindowDecision::kContinue:
      return "in_progress";
    case WindowDecision::kStable:
      return "stable";
    case WindowDecision::kNotStable:
      return "not_stable";
    case WindowDecision::kFixedDuration:
      return "fixed_duration";
  }
  return "unknown";
}

absl::StatusOr<ServerCounters> CountersFromStatistics(
    const inference::ModelStatisticsResponse& response, const std::string& model,
    const std::string& version) {
  ServerCounters counters;
  bool found = false;
  for (const inference::ModelStatistics& stats : response.model_stats()) {
    if (stats.name() != model || (!version.empty() && stats.version() != version)) continue;
    found = true;
    const inference::InferStatistics& infer = stats.inference_stats();
    counters.inference_count += stats.inference_count();
    counters.execution_count += stats.execution_count();
    counters.success_count += infer.success().count();
    counters.success_ns += infer.success().ns();
    counters.fail_count += infer.fail().count();
    counters.queue_count += infer.queue().count();
    counters.queue_ns += infer.queue().ns();
    counters.compute_input_count += infer.compute_input().count();
    counters.compute_input_ns += infer.compute_input().ns();
    counters.compute_infer_count += infer.compute_infer().count();
    counters.compute_infer_ns += infer.compute_infer().ns();
    counters.compute_output_count += infer.compute_output().count();
    counters.compute_output_ns += infer.compute_output().ns();
  }
  if (!found) {
    return absl::NotFoundError(absl::StrCat("the statistics have no entry for model \"", model,
                                            "\"", version.empty() ? "" : " version ", version));
  }
  return counters;
}

namespace {

// Counters only grow; a restarted server would make them shrink, which
// reads as "nothing happened" rather than as a huge unsigned difference.
int64_t Delta(uint64_t before, uint64_t after) {
  return after >= before ? static_cast<int64_t>(after - before) : 0;
}

double AverageUs(uint64_t ns_before, uint64_t ns_after, uint64_t count_before,
                 uint64_t count_after) {
  const int64_t count = Delta(count_before, count_after);
  if (count == 0) return 0;
  return static_cast<double>(Delta(ns_before, ns_after)) / 1000.0 / static_cast<double>(count);
}

}  // namespace

ServerSideStats ServerDelta(const ServerCounters& before, const ServerCounters& after) {
  ServerSideStats stats;
  stats.available = true;
  stats.requests = Delta(before.success_count, after.success_count);
  stats.failed = Delta(before.fail_count, after.fail_count);
  stats.executions = Delta(before.execution_count, after.execution_count);
  stats.inferences = Delta(before.inference_count, after.inference_count);
  stats.avg_batch_size = stats.executions == 0 ? 0
                                               : static_cast<double>(stats.inferences) /
                                                     static_cast<double>(stats.executions);
  stats.avg_request_us =
      AverageUs(before.success_ns, after.success_ns, before.success_count, after.success_count);
  stats.avg_queue_us =
      AverageUs(before.queue_ns, after.queue_ns, before.queue_count, after.queue_count);
  stats.avg_compute_input_us = AverageUs(before.compute_input_ns, after.compute_input_ns,
                                         before.compute_input_count, after.compute_input_count);
  stats.avg_compute_infer_us = AverageUs(before.compute_infer_ns, after.compute_infer_ns,
                                         before.compute_infer_count, after.compute_infer_count);
  stats.avg_compute_output_us = AverageUs(before.compute_output_ns, after.compute_output_ns,
                                          before.compute_output_count, after.compute_output_count);
  return stats;
}

}  // namespace fuseserve::client
