#include "client/bench/load_tracker.h"

#include <algorithm>
#include <utility>

namespace fuseserve::client {

LoadTracker::LoadTracker(absl::Time start) : window_start_(start) {}

bool LoadTracker::TryBeginSend() {
  absl::MutexLock lock(&mu_);
  if (!accepting_) return false;
  ++totals_.sent;
  ++totals_.outstanding;
  ++window_.sent;
  window_.max_outstanding = std::max(window_.max_outstanding, totals_.outstanding);
  return true;
}

bool LoadTracker::OnAnswered(int code, int64_t latency_ns, bool reissue) {
  absl::MutexLock lock(&mu_);
  ++totals_.answered;
  --totals_.outstanding;
  if (code == 0) {
    ++totals_.succeeded;
    ++window_.succeeded;
    window_.latencies_ns.push_back(latency_ns);
  } else {
    ++totals_.failed;
    ++window_.failed;
    ++totals_.errors_by_code[code];
  }
  if (!reissue || !accepting_) return false;
  ++totals_.sent;
  ++totals_.outstanding;
  ++window_.sent;
  return true;
}

void LoadTracker::StopAccepting() {
  absl::MutexLock lock(&mu_);
  accepting_ = false;
}

WindowSample LoadTracker::TakeWindow(absl::Time now) {
  absl::MutexLock lock(&mu_);
  WindowSample sample = std::move(window_);
  sample.duration = now - window_start_;
  window_ = WindowSample();
  // The next window starts with what is in flight now.
  window_.max_outstanding = totals_.outstanding;
  window_start_ = now;
  return sample;
}

bool LoadTracker::WaitUntilIdle(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !accepting_ && totals_.outstanding == 0;
  };
  return mu_.AwaitWithDeadline(absl::Condition(&idle), deadline);
}

LoadTotals LoadTracker::Totals() const {
  absl::MutexLock lock(&mu_);
  return totals_;
}

}  // namespace fuseserve::client
