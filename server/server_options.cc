#include "server/server_options.h"

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace fuseserve {
namespace {

absl::Status ParsePort(const std::string& flag, const std::string& value, int* port) {
  if (!absl::SimpleAtoi(value, port) || *port < 0 || *port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, " must be a port number in [0, 65535], got \"", value, "\""));
  }
  return absl::OkStatus();
}

absl::Status ParseBool(const std::string& flag, const std::string& value, bool* out) {
  if (value == "true" || value == "1") {
    *out = true;
  } else if (value == "false" || value == "0") {
    *out = false;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, " must be true or false, got \"", value, "\""));
  }
  return absl::OkStatus();
}

}  // namespace

std::string ServerUsage() {
  return R"(Usage: fuseserve --model-repository=DIR [options]

Serves the models of a Triton-layout model repository over gRPC (KServe v2 /
Triton protocol, plus grpc.health.v1) and exposes Prometheus metrics and HTTP
health endpoints.

Options:
  --model-repository=DIR     model repository (required)
  --grpc-port=PORT           gRPC port (default 8001; 0 = any free port)
  --grpc-address=ADDR        gRPC bind address (default 0.0.0.0)
  --metrics-port=PORT        HTTP port for /metrics and /v2/health/* (default 8002)
  --metrics-address=ADDR     HTTP bind address (default 0.0.0.0)
  --exit-timeout-secs=N      on SIGTERM/SIGINT, how long queued and running
                             requests may take to finish (default 30)
  --max-request-bytes=N      largest gRPC request accepted, in bytes (default
                             and maximum 2147483647); larger ones get
                             RESOURCE_EXHAUSTED
  --strict-readiness=BOOL    ready only if every model in the repository
                             loaded (default false: every model that loaded)
  --port-file=PATH           write {"grpc_port": P, "metrics_port": Q} to PATH
                             once serving
  --help                     show this text
)";
}

absl::StatusOr<ServerOptions> ParseServerOptions(int argc, const char* const* argv) {
  ServerOptions options;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      options.help = true;
      continue;
    }
    if (!absl::StartsWith(arg, "--")) {
      return absl::InvalidArgumentError(absl::StrCat("unexpected argument \"", arg, "\""));
    }
    std::string flag = arg.substr(2);
    std::string value;
    const size_t equals = flag.find('=');
    if (equals != std::string::npos) {
      value = flag.substr(equals + 1);
      flag = flag.substr(0, equals);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      return absl::InvalidArgumentError(absl::StrCat("--", flag, " needs a value"));
    }
    if (flag == "model-repository") {
      options.model_repository = value;
    } else if (flag == "grpc-port") {
      if (auto status = ParsePort(flag, value, &options.grpc_port); !status.ok()) return status;
    } else if (flag == "grpc-address") {
      options.grpc_address = value;
    } else if (flag == "metrics-port") {
      if (auto status = ParsePort(flag, value, &options.metrics_port); !status.ok()) return status;
    } else if (flag == "metrics-address") {
      options.metrics_address = value;
    } else if (flag == "exit-timeout-secs") {
      if (!absl::SimpleAtoi(value, &options.exit_timeout_secs) || options.exit_timeout_secs < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--exit-timeout-secs must be a non-negative integer, got \"", value, "\""));
      }
    } else if (flag == "max-request-bytes") {
      if (!absl::SimpleAtoi(value, &options.max_request_bytes) || options.max_request_bytes < 1) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--max-request-bytes must be an integer in [1, 2147483647], got \"", value, "\""));
      }
    } else if (flag == "strict-readiness") {
      if (auto status = ParseBool(flag, value, &options.strict_readiness); !status.ok()) {
        return status;
      }
    } else if (flag == "port-file") {
      options.port_file = value;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", flag, " (see --help)"));
    }
  }
  if (!options.help && options.model_repository.empty()) {
    return absl::InvalidArgumentError("--model-repository is required (see --help)");
  }
  return options;
}

}  // namespace fuseserve
