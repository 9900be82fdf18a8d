#pragma once

// Closed loop: exactly `concurrency` requests outstanding; each answer
// immediately starts its replacement (from the gRPC callback, which never
// blocks), so the offered load follows the server's pace.

#include <memory>

#include "client/bench/load_driver.h"
#include "client/bench/load_tracker.h"
#include "client/bench/request_sender.h"

namespace fuseserve::client {

class ClosedLoopDriver : public LoadDriver, public std::enable_shared_from_this<ClosedLoopDriver> {
 public:
  // Create through std::make_shared: callbacks hold the driver alive.
  // `sender` must outlive every call the driver starts.
  ClosedLoopDriver(RequestSender* sender, std::shared_ptr<LoadTracker> tracker, int concurrency);

  void Start() override;
  void Stop() override;

 private:
  // Sends one request already registered with the tracker.
  void SendRegistered();

  RequestSender* const sender_;
  const std::shared_ptr<LoadTracker> tracker_;
  const int concurrency_;
};

}  // namespace fuseserve::client
