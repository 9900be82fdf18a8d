#pragma once

// Runs the real `fuseserve` binary as a child process for end-to-end tests:
// ephemeral ports (the server writes them to a --port-file), stderr captured
// to a file for failure messages, SIGTERM to stop, SIGKILL as a last resort.

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace fuseserve::testing {

class ServerProcess {
 public:
  // Starts `binary --model-repository=<repository> --grpc-port=0
  // --metrics-port=0 --port-file=... <extra_args>` and waits (up to
  // `startup_timeout`) until it has written its ports.
  static absl::StatusOr<std::unique_ptr<ServerProcess>> Start(
      const std::string& binary, const std::string& repository,
      const std::vector<std::string>& extra_args = {},
      absl::Duration startup_timeout = absl::Seconds(60));

  ~ServerProcess();  // SIGKILL if still running

  // The server's process id (-1 once it has exited).
  pid_t pid() const { return pid_; }
  int grpc_port() const { return grpc_port_; }
  int metrics_port() const { return metrics_port_; }
  std::string grpc_target() const;

  // Sends SIGTERM and waits for the exit; returns the exit code (or 128 +
  // signal). DeadlineExceeded if it does not exit within `timeout`.
  absl::StatusOr<int> Terminate(absl::Duration timeout = absl::Seconds(60));

  // Everything the server wrote to stderr so far.
  std::string Log() const;

  // The server's resident set size (VmRSS of /proc/<pid>/status), in bytes.
  absl::StatusOr<int64_t> ResidentBytes() const;

 private:
  ServerProcess() = default;

  pid_t pid_ = -1;
  int grpc_port_ = 0;
  int metrics_port_ = 0;
  std::string directory_;  // port file and log
};

// The value of the sample `name{labels}` in a Prometheus text exposition,
// whatever the label order (`name value` when `labels` is empty); -1 if
// absent.
double MetricValue(const std::string& text, const std::string& name,
                   const std::map<std::string, std::string>& labels);

}  // namespace fuseserve::testing
