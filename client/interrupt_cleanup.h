#pragma once

// Turns SIGINT and SIGTERM into "clean up, then exit" for commands that hold
// resources outliving the process unless removed (shared-memory objects in
// /dev/shm, regions registered with a server).

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"

namespace fuseserve::client {

class InterruptCleanup {
 public:
  // Installs handlers for SIGINT and SIGTERM. The first such signal runs
  // `cleanup` on a watcher thread (never in the signal handler, so it may do
  // anything: RPCs, locks), writes "<name>: interrupted" to stderr, and ends
  // the process with exit code 128 + the signal number, without running
  // destructors (other threads may still be using what `cleanup` released).
  // FailedPrecondition when another InterruptCleanup is installed; Internal
  // when the system refuses a pipe or a handler.
  static absl::StatusOr<std::unique_ptr<InterruptCleanup>> Install(std::string name,
                                                                   std::function<void()> cleanup);

  InterruptCleanup(const InterruptCleanup&) = delete;
  InterruptCleanup& operator=(const InterruptCleanup&) = delete;

  // Restores the previous handlers and stops the watcher. A signal that
  // arrived before is fully handled (the process exits); one arriving after
  // gets the previous handling.
  ~InterruptCleanup();

 private:
  InterruptCleanup(int read_fd, int write_fd);

  const int read_fd_;
  const int write_fd_;
  std::thread watcher_;
};

}  // namespace fuseserve::client
