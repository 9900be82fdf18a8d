#pragma once

// Command-line options of the `fuseserve` binary (SPEC.md §7).

#include <string>

#include "absl/status/statusor.h"

namespace fuseserve {

struct ServerOptions {
  std::string model_repository;
  std::string grpc_address = "0.0.0.0";
  int grpc_port = 8001;  // 0 = ephemeral (see port_file)
  std::string metrics_address = "0.0.0.0";
  int metrics_port = 8002;
  // Bound on draining queued and running requests after SIGTERM/SIGINT.
  int exit_timeout_secs = 30;
  // Largest gRPC request message accepted (bytes); larger ones are refused
  // with RESOURCE_EXHAUSTED before they are decoded. gRPC's own ceiling,
  // and Triton's default, is INT32_MAX.
  int max_request_bytes = 2147483647;
  // Ready only when every model of the repository loaded (Triton's default);
  // otherwise ready when every model that loaded is ready.
  bool strict_readiness = false;
  // When set, {"grpc_port": P, "metrics_port": Q} is written here once the
  // server is serving (for tests and supervisors that use port 0).
  std::string port_file;
  bool help = false;
};

// Parses --flag=value / --flag value arguments. InvalidArgument naming the
// flag for unknown flags and bad values; --model-repository is required
// unless --help is given.
absl::StatusOr<ServerOptions> ParseServerOptions(int argc, const char* const* argv);

// The --help text.
std::string ServerUsage();

}  // namespace fuseserve
