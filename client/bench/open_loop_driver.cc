#include "client/bench/open_loop_driver.h"

#include <utility>

namespace fuseserve::client {

ArrivalSchedule::ArrivalSchedule(double rate_per_s, Arrivals arrivals, uint64_t seed)
    : rate_per_s_(rate_per_s), arrivals_(arrivals), engine_(seed), exponential_(rate_per_s) {}

absl::Duration ArrivalSchedule::NextGap() {
  const double seconds =
      arrivals_ == Arrivals::kPoisson ? exponential_(engine_) : 1.0 / rate_per_s_;
  return absl::Seconds(seconds);
}

OpenLoopDriver::OpenLoopDriver(RequestSender* sender, std::shared_ptr<LoadTracker> tracker,
                               double rate_per_s, Arrivals arrivals, uint64_t seed)
    : sender_(sender), tracker_(std::move(tracker)), schedule_(rate_per_s, arrivals, seed) {}

OpenLoopDriver::~OpenLoopDriver() { Stop(); }

void OpenLoopDriver::Start() {
  scheduler_ = std::thread([this] { Run(); });
}

void OpenLoopDriver::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (scheduler_.joinable()) scheduler_.join();
  tracker_->StopAccepting();
}

void OpenLoopDriver::Run() {
  // Send times follow the schedule from the start, not from the previous
  // send, so a late send is followed by prompt ones (the rate is kept).
  absl::Time next = absl::Now();
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (mu_.AwaitWithDeadline(absl::Condition(&stopping_), next)) return;
    }
    if (!tracker_->TryBeginSend()) return;
    sender_->Send([tracker = tracker_](int code, int64_t latency_ns) {
      tracker->OnAnswered(code, latency_ns);
    });
    next += schedule_.NextGap();
  }
}

}  // namespace fuseserve::client
