#pragma once

// Open loop: requests issued at a target rate from one scheduling thread,
// whether or not earlier ones were answered, so a server that cannot keep up
// shows a growing backlog (and, once its queue is full, UNAVAILABLE answers)
// instead of silently slowing the client down.

#include <cstdint>
#include <memory>
#include <random>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/bench/bench_options.h"
#include "client/bench/load_driver.h"
#include "client/bench/load_tracker.h"
#include "client/bench/request_sender.h"

namespace fuseserve::client {

// Inter-arrival gaps for a target rate: exponential (Poisson process) or
// constant. Deterministic for a given seed.
class ArrivalSchedule {
 public:
  ArrivalSchedule(double rate_per_s, Arrivals arrivals, uint64_t seed);

  absl::Duration NextGap();

 private:
  const double rate_per_s_;
  const Arrivals arrivals_;
  std::mt19937_64 engine_;
  std::exponential_distribution<double> exponential_;
};

class OpenLoopDriver : public LoadDriver {
 public:
  // `sender` must outlive every call the driver starts.
  OpenLoopDriver(RequestSender* sender, std::shared_ptr<LoadTracker> tracker, double rate_per_s,
                 Arrivals arrivals, uint64_t seed);
  ~OpenLoopDriver() override;  // stops and joins the scheduler

  void Start() override;
  void Stop() override;

 private:
  void Run();

  RequestSender* const sender_;
  const std::shared_ptr<LoadTracker> tracker_;
  ArrivalSchedule schedule_;  // used by the scheduler thread only

  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread scheduler_;
};

}  // namespace fuseserve::client
