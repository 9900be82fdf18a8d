#pragma once

// Runs one load level end to end: start the load, warm up, measure windows
// until the measurement rule says stop, stop the load, wait (bounded) for
// every outstanding answer, and summarise.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/bench/bench_options.h"
#include "client/bench/measurement.h"
#include "client/bench/request_sender.h"
#include "client/bench/statistics.h"

namespace fuseserve::client {

struct LevelSpec {
  LoadMode mode = LoadMode::kClosedLoop;
  int concurrency = 1;    // closed loop
  double rate_per_s = 0;  // open loop
  Arrivals arrivals = Arrivals::kPoisson;
  uint64_t seed = 1;  // open-loop arrival times
};

struct LevelSettings {
  MeasurementRule rule;
  absl::Duration warmup = absl::Seconds(1);
  absl::Duration window = absl::Seconds(2);  // the fixed duration when rule.fixed_duration
  absl::Duration drain_timeout = absl::Seconds(60);
  int64_t inferences_per_request = 1;
};

struct LevelResult {
  LevelSpec spec;

  WindowDecision decision = WindowDecision::kContinue;
  int windows_measured = 0;
  int windows_reported = 0;                   // the last ones, merged into the figures below
  double measured_s = 0;                      // length of the reported windows
  std::vector<double> window_requests_per_s;  // every measured window, oldest first

  // Client side, over the reported windows (successful requests).
  double requests_per_s = 0;
  double inferences_per_s = 0;
  LatencySummary latency;

  // Every request of the level (warm-up and drain included).
  int64_t sent = 0;
  int64_t answered = 0;
  int64_t succeeded = 0;
  int64_t failed = 0;
  int64_t lost = 0;                               // sent - answered when the drain wait ended
  std::map<std::string, int64_t> errors_by_code;  // "UNAVAILABLE" -> count

  // Load the client offered over the reported windows (open loop: against the target).
  double send_rate_per_s = 0;
  int64_t max_outstanding = 0;
  int64_t outstanding_at_end = 0;  // backlog when the measurement ended
  int completion_queues = 0;       // the queues its calls completed on (0: callback API)

  ServerSideStats server;    // over the reported windows
  std::string server_error;  // why `server` is unavailable
};

// Cumulative server counters of the benchmarked model, fetched at window
// boundaries; an error leaves the level's server-side figures unavailable.
using ServerCountersSource = std::function<absl::StatusOr<ServerCounters>()>;

// A one-line status while the level runs (null = none).
using ProgressSink = std::function<void(const std::string&)>;

LevelResult RunLevel(const LevelSpec& spec, const LevelSettings& settings, RequestSender& sender,
                     const ServerCountersSource& server_counters, const ProgressSink& progress);

// "concurrency 16" / "rate 100/s".
std::string LevelName(const LevelSpec& spec);

}  // namespace fuseserve::client
