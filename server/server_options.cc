#include "server/server_options.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace fuseserve {
namespace {

// More answer-sending threads per model than this only add context switches.
constexpr int kMaxResponseThreads = 64;

absl::Status ParsePort(const std::string& flag, const std::string& value, int* port) {
  if (!absl::SimpleAtoi(value, port) || *port < 0 || *port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, " must be a port number in [0, 65535], got \"", value, "\""));
  }
  return absl::OkStatus();
}

absl::Status ParseThreadCount(const std::string& flag, const std::string& value, int max,
                              int* threads) {
  if (!absl::SimpleAtoi(value, threads) || *threads < 0 || *threads > max) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, " must be an integer in [0, ", max, "], got \"", value, "\""));
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

// The contents of the PEM file `path` that `flag` names. The message never
// quotes the file: it may be a private key.
absl::StatusOr<std::string> ReadPemFile(const std::string& flag, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, ": cannot open ", path, ": ", std::strerror(errno)));
  }
  std::error_code error;
  if (!std::filesystem::is_regular_file(path, error)) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, ": ", path, " is not a file"));
  }
  std::string pem((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return absl::InvalidArgumentError(absl::StrCat("--", flag, ": cannot read ", path));
  if (!absl::StrContains(pem, "-----BEGIN ")) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, ": ", path, " is not a PEM file (no \"-----BEGIN \" line)"));
  }
  return pem;
}

}  // namespace

int ResponseThreads(const ServerOptions& options) {
  if (options.response_threads.has_value()) return *options.response_threads;
  return options.grpc_infer_threads > 0 ? 0 : kCallbackApiResponseThreads;
}

absl::StatusOr<std::optional<GrpcTlsCredentials>> LoadGrpcTls(const GrpcSslOptions& ssl) {
  if (!ssl.enabled()) return std::nullopt;
  GrpcTlsCredentials tls;
  ASSIGN_OR_RETURN(tls.server_cert_pem, ReadPemFile("grpc-server-cert", ssl.server_cert));
  ASSIGN_OR_RETURN(tls.server_key_pem, ReadPemFile("grpc-server-key", ssl.server_key));
  if (!ssl.root_cert.empty()) {
    // Read, and so checked, even when unused (TLS that is not mutual).
    ASSIGN_OR_RETURN(std::string root_pem, ReadPemFile("grpc-root-cert", ssl.root_cert));
    if (ssl.use_mutual_auth) tls.client_ca_pem = std::move(root_pem);
  }
  tls.require_client_certificate = ssl.use_mutual_auth;
  return tls;
}

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
  --malloc-trim-interval-secs=N
                             return the free memory of glibc's malloc arenas
                             to the system every N seconds, and let no free()
                             hand a heap's top back in between (default 10;
                             0 = never, and glibc trims as by default)
  --max-request-bytes=N      largest gRPC request accepted, in bytes (default
                             and maximum 2147483647); larger ones get
                             RESOURCE_EXHAUSTED
  --response-threads=N       threads per model that deliver the answers of
                             executed batches, so that an instance starts its
                             next batch without waiting for them (0: the
                             instance's own thread delivers them; at most 64;
                             default 0 with --grpc-infer-threads above 0,
                             whose threads send the answers, else 4)
  --grpc-infer-threads=N     threads that receive ModelInfer calls and send
                             their answers, each serving a gRPC completion
                             queue of its own (default 6; 0: gRPC's callback
                             API and its own threads; at most 64)
  --grpc-use-ssl=BOOL        serve gRPC over TLS (default false); needs
                             --grpc-server-cert and --grpc-server-key
  --grpc-use-ssl-mutual=BOOL TLS that also requires a client certificate
                             signed by --grpc-root-cert (implies
                             --grpc-use-ssl; default false)
  --grpc-server-cert=FILE    PEM server certificate (chain)
  --grpc-server-key=FILE     PEM server private key (never logged)
  --grpc-root-cert=FILE      PEM CA certificate(s) that verify client
                             certificates (mutual TLS)
  --strict-readiness=BOOL    ready only if every model in the repository
                             loaded (default false: every model that loaded)
  --allow-shared-memory=BOOL let clients pass tensors through system shared
                             memory (Triton's system_shared_memory extension:
                             the SystemSharedMemory* RPCs and the
                             shared_memory_* tensor parameters; default false)
  --port-file=PATH           write {"grpc_port": P, "metrics_port": Q} to PATH
                             once serving
  --batch-trace-file=PATH    write every GPU batch's input, compute and output
                             phases to PATH as a Chrome trace (chrome://tracing,
                             Perfetto): shows copies overlapping compute
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
    } else if (flag == "malloc-trim-interval-secs") {
      if (!absl::SimpleAtoi(value, &options.malloc_trim_interval_secs) ||
          options.malloc_trim_interval_secs < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--malloc-trim-interval-secs must be a non-negative integer, got \"", value, "\""));
      }
    } else if (flag == "response-threads") {
      int threads = 0;
      RETURN_IF_ERROR(ParseThreadCount(flag, value, kMaxResponseThreads, &threads));
      options.response_threads = threads;
    } else if (flag == "grpc-infer-threads") {
      RETURN_IF_ERROR(
          ParseThreadCount(flag, value, kMaxGrpcInferThreads, &options.grpc_infer_threads));
    } else if (flag == "max-request-bytes") {
      if (!absl::SimpleAtoi(value, &options.max_request_bytes) || options.max_request_bytes < 1) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--max-request-bytes must be an integer in [1, 2147483647], got \"", value, "\""));
      }
    } else if (flag == "grpc-use-ssl") {
      RETURN_IF_ERROR(ParseBool(flag, value, &options.grpc_ssl.use_ssl));
    } else if (flag == "grpc-use-ssl-mutual") {
      RETURN_IF_ERROR(ParseBool(flag, value, &options.grpc_ssl.use_mutual_auth));
    } else if (flag == "grpc-server-cert") {
      options.grpc_ssl.server_cert = value;
    } else if (flag == "grpc-server-key") {
      options.grpc_ssl.server_key = value;
    } else if (flag == "grpc-root-cert") {
      options.grpc_ssl.root_cert = value;
    } else if (flag == "strict-readiness") {
      if (auto status = ParseBool(flag, value, &options.strict_readiness); !status.ok()) {
        return status;
      }
    } else if (flag == "allow-shared-memory") {
      RETURN_IF_ERROR(ParseBool(flag, value, &options.allow_shared_memory));
    } else if (flag == "port-file") {
      options.port_file = value;
    } else if (flag == "batch-trace-file") {
      options.batch_trace_file = value;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", flag, " (see --help)"));
    }
  }
  if (options.help) return options;
  if (options.model_repository.empty()) {
    return absl::InvalidArgumentError("--model-repository is required (see --help)");
  }
  const GrpcSslOptions& ssl = options.grpc_ssl;
  const char* tls_flag = ssl.use_mutual_auth ? "--grpc-use-ssl-mutual" : "--grpc-use-ssl";
  if (ssl.enabled() && ssl.server_cert.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(tls_flag, " needs --grpc-server-cert"));
  }
  if (ssl.enabled() && ssl.server_key.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(tls_flag, " needs --grpc-server-key"));
  }
  if (ssl.use_mutual_auth && ssl.root_cert.empty()) {
    return absl::InvalidArgumentError(
        "--grpc-use-ssl-mutual needs --grpc-root-cert (the CA that signs client certificates)");
  }
  return options;
}

}  // namespace fuseserve
