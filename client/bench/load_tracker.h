#pragma once

// Thread-safe accounting of one load level: how many requests were sent,
// answered and are still outstanding, errors by gRPC code, and the samples of
// the current measurement window. Completions arrive on gRPC threads; the
// level runner takes a window at each boundary.

#include <cstdint>
#include <map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace fuseserve::client {

// What happened between two window boundaries. A request belongs to the
// window in which its answer arrived.
struct WindowSample {
  absl::Duration duration;
  int64_t sent = 0;
  int64_t succeeded = 0;
  int64_t failed = 0;
  int64_t max_outstanding = 0;
  std::vector<int64_t> latencies_ns;  // successful requests only
};

struct LoadTotals {
  int64_t sent = 0;
  int64_t answered = 0;  // succeeded + failed
  int64_t succeeded = 0;
  int64_t failed = 0;
  int64_t outstanding = 0;                // sent - answered
  std::map<int, int64_t> errors_by_code;  // grpc::StatusCode value -> count
};

class LoadTracker {
 public:
  explicit LoadTracker(absl::Time start = absl::Now());

  // Registers one request about to be sent; false (and nothing registered)
  // once StopAccepting() was called.
  bool TryBeginSend();

  // Records the answer of one request (`code` 0 = OK). With `reissue`, a
  // replacement request is registered in the same step when still accepting
  // (closed loop), so `outstanding` never dips while the loop runs and
  // WaitUntilIdle cannot return between an answer and its replacement.
  // Returns whether the replacement was registered.
  bool OnAnswered(int code, int64_t latency_ns, bool reissue = false);

  // No further TryBeginSend / reissue succeeds.
  void StopAccepting();

  // The samples since the previous call (or construction), ending the window at `now`.
  WindowSample TakeWindow(absl::Time now = absl::Now());

  // Blocks until nothing is outstanding and no more sends are accepted, or
  // until `deadline`; returns whether it became idle.
  bool WaitUntilIdle(absl::Time deadline);

  LoadTotals Totals() const;

 private:
  mutable absl::Mutex mu_;
  bool accepting_ ABSL_GUARDED_BY(mu_) = true;
  LoadTotals totals_ ABSL_GUARDED_BY(mu_);
  absl::Time window_start_ ABSL_GUARDED_BY(mu_);
  WindowSample window_ ABSL_GUARDED_BY(mu_);
};

}  // namespace fuseserve::client
