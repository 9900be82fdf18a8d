#pragma once

// A load pattern: something that starts issuing requests through a
// RequestSender, registering each with a LoadTracker, until stopped.

namespace fuseserve::client {

class LoadDriver {
 public:
  virtual ~LoadDriver() = default;

  // Begins issuing requests; returns at once.
  virtual void Start() = 0;

  // Issues nothing more (requests in flight still get answered and counted).
  // Returns once no further request will be started.
  virtual void Stop() = 0;
};

}  // namespace fuseserve::client
