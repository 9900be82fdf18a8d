#include "client/bench/closed_loop_driver.h"

#include <utility>

namespace fuseserve::client {

ClosedLoopDriver::ClosedLoopDriver(RequestSender* sender, std::shared_ptr<LoadTracker> tracker,
                                   int concurrency)
    : sender_(sender), tracker_(std::move(tracker)), concurrency_(concurrency) {}

void ClosedLoopDriver::Start() {
  for (int i = 0; i < concurrency_ && tracker_->TryBeginSend(); ++i) SendRegistered();
}

void ClosedLoopDriver::Stop() { tracker_->StopAccepting(); }

void ClosedLoopDriver::SendRegistered() {
  sender_->Send([self = shared_from_this()](int code, int64_t latency_ns) {
    if (self->tracker_->OnAnswered(code, latency_ns, /*reissue=*/true)) self->SendRegistered();
  });
}

}  // namespace fuseserve::client
