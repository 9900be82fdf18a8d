#include "client/bench/level_runner.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/bench/closed_loop_driver.h"
#include "client/bench/load_tracker.h"
#include "client/bench/open_loop_driver.h"

namespace fuseserve::client {

namespace {

constexpr absl::Duration kProgressInterval = absl::Milliseconds(250);
// After a drain timeout the remaining calls are cancelled; their (local)
// cancellation answers come back promptly, this only bounds the wait.
constexpr absl::Duration kCancelWait = absl::Seconds(5);

// Sleeps for `duration`, refreshing the progress line meanwhile.
void WaitWithProgress(absl::Duration duration, const ProgressSink& progress,
                      const std::function<std::string()>& status) {
  const absl::Time end = absl::Now() + duration;
  if (!progress) {
    absl::SleepFor(duration);
    return;
  }
  for (absl::Time now = absl::Now(); now < end; now = absl::Now()) {
    progress(status());
    absl::SleepFor(std::min(kProgressInterval, end - now));
  }
}

double PerSecond(int64_t count, absl::Duration duration) {
  const double seconds = absl::ToDoubleSeconds(duration);
  return seconds > 0 ? static_cast<double>(count) / seconds : 0;
}

}  // namespace

std::string LevelName(const LevelSpec& spec) {
  return spec.mode == LoadMode::kClosedLoop ? absl::StrCat("concurrency ", spec.concurrency)
                                            : absl::StrFormat("rate %g/s", spec.rate_per_s);
}

LevelResult RunLevel(const LevelSpec& spec, const LevelSettings& settings, RequestSender& sender,
                     const ServerCountersSource& server_counters, const ProgressSink& progress) {
  LevelResult result;
  result.spec = spec;
  const std::string name = LevelName(spec);
  auto tracker = std::make_shared<LoadTracker>();
  std::shared_ptr<LoadDriver> driver;
  if (spec.mode == LoadMode::kClosedLoop) {
    driver = std::make_shared<ClosedLoopDriver>(&sender, tracker, spec.concurrency);
  } else {
    driver = std::make_shared<OpenLoopDriver>(&sender, tracker, spec.rate_per_s, spec.arrivals,
                                              spec.seed);
  }

  // A closed loop of N keeps at most N calls in flight: no more queues than that.
  result.completion_queues =
      sender.UseQueuesFor(spec.mode == LoadMode::kClosedLoop ? spec.concurrency : 0);

  std::vector<WindowSample> windows;
  std::vector<ServerCounters> boundaries;  // boundaries[i] .. boundaries[i+1] = window i
  auto fetch_counters = [&] {
    if (!result.server_error.empty()) return;
    absl::StatusOr<ServerCounters> counters = server_counters();
    if (counters.ok()) {
      boundaries.push_back(*counters);
    } else {
      result.server_error = std::string(counters.status().message());
    }
  };
  auto status_line = [&](const std::string& phase) {
    const LoadTotals totals = tracker->Totals();
    std::string line = absl::StrCat(name, " | ", phase);
    if (!windows.empty()) {
      const WindowSample& last = windows.back();
      absl::StrAppendFormat(
          &line, " | last window %.1f infer/s",
          PerSecond(last.succeeded, last.duration) * settings.inferences_per_request);
    }
    absl::StrAppend(&line, " | ", totals.outstanding, " outstanding | ", totals.answered,
                    " answered | ", totals.failed, " errors");
    return line;
  };

  driver->Start();
  WaitWithProgress(settings.warmup, progress, [&] { return status_line("warm-up"); });
  tracker->TakeWindow();  // warm-up samples are not measured
  fetch_counters();

  std::vector<double> throughputs;
  WindowDecision decision = WindowDecision::kContinue;
  while (decision == WindowDecision::kContinue) {
    const std::string phase =
        settings.rule.fixed_duration
            ? absl::StrFormat("measuring %s", absl::FormatDuration(settings.window))
            : absl::StrCat("window ", windows.size() + 1, "/", settings.rule.max_windows);
    WaitWithProgress(settings.window, progress, [&] { return status_line(phase); });
    windows.push_back(tracker->TakeWindow());
    fetch_counters();
    throughputs.push_back(PerSecond(windows.back().succeeded, windows.back().duration));
    decision = DecideAfterWindow(throughputs, settings.rule);
  }
  result.outstanding_at_end = tracker->Totals().outstanding;

  driver->Stop();
  if (progress) progress(status_line("waiting for outstanding answers"));
  // The level's accounting is what was answered by the drain deadline.
  const bool drained = tracker->WaitUntilIdle(absl::Now() + settings.drain_timeout);
  const LoadTotals totals = tracker->Totals();
  if (!drained) {
    // Whatever is unanswered now is lost; cancel it so that it cannot leak
    // into the next level.
    sender.CancelAll();
    tracker->WaitUntilIdle(absl::Now() + kCancelWait);
  }
  result.sent = totals.sent;
  result.answered = totals.answered;
  result.succeeded = totals.succeeded;
  result.failed = totals.failed;
  result.lost = totals.sent - totals.answered;
  for (const auto& [code, count] : totals.errors_by_code) {
    result.errors_by_code[absl::StatusCodeToString(static_cast<absl::StatusCode>(code))] += count;
  }

  result.decision = decision;
  result.windows_measured = static_cast<int>(windows.size());
  result.windows_reported = WindowsToReport(decision, result.windows_measured, settings.rule);
  result.window_requests_per_s = throughputs;
  absl::Duration measured;
  int64_t succeeded = 0, sent = 0;
  std::vector<int64_t> latencies;
  for (int i = result.windows_measured - result.windows_reported; i < result.windows_measured;
       ++i) {
    const WindowSample& window = windows[i];
    measured += window.duration;
    succeeded += window.succeeded;
    sent += window.sent;
    result.max_outstanding = std::max(result.max_outstanding, window.max_outstanding);
    latencies.insert(latencies.end(), window.latencies_ns.begin(), window.latencies_ns.end());
  }
  result.measured_s = absl::ToDoubleSeconds(measured);
  result.requests_per_s = PerSecond(succeeded, measured);
  result.inferences_per_s = result.requests_per_s * settings.inferences_per_request;
  result.send_rate_per_s = PerSecond(sent, measured);
  result.latency = SummarizeLatencies(&latencies);

  if (result.server_error.empty() &&
      boundaries.size() == static_cast<size_t>(result.windows_measured) + 1) {
    result.server = ServerDelta(boundaries[result.windows_measured - result.windows_reported],
                                boundaries[result.windows_measured]);
  }
  return result;
}

}  // namespace fuseserve::client
