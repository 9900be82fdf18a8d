#pragma once

// Command-line options of the `fuseserve` binary (SPEC.md §7).

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "server/grpc/grpc_server.h"
#include "server/grpc/inference_service.h"

namespace fuseserve {

// --response-threads' default while ModelInfer is on gRPC's callback API
// (--grpc-infer-threads=0): on an H100 host at gemm concurrency 64, 4 threads
// were ahead of none in 5 of 6 interleaved pairs, by ~4-5% on average
// (bench/results/2026-11-25-h100-serving-ab.md). On completion queues (the
// default) the default is none: answers go back to the queues' own threads,
// and answer threads would only hand them on
// (bench/results/2026-11-27-h200-grpc-answer-handback.md).
inline constexpr int kCallbackApiResponseThreads = 4;

// gRPC over TLS: Triton's --grpc-use-ssl* flags, same names and meaning. The
// paths name PEM files, read at start-up (LoadGrpcTls); their contents are
// never logged.
struct GrpcSslOptions {
  // TLS on the gRPC port; needs server_cert and server_key.
  bool use_ssl = false;
  // Clients must present a certificate that root_cert verifies. Implies
  // use_ssl (in Triton it "preempts --grpc-use-ssl") and needs root_cert.
  bool use_mutual_auth = false;
  std::string server_cert;
  std::string server_key;
  // CA certificates that verify client certificates. Read (and checked)
  // whenever given, used only with use_mutual_auth: without it no client
  // certificate is asked for.
  std::string root_cert;

  bool enabled() const { return use_ssl || use_mutual_auth; }
};

struct ServerOptions {
  std::string model_repository;
  std::string grpc_address = "0.0.0.0";
  int grpc_port = 8001;  // 0 = ephemeral (see port_file)
  std::string metrics_address = "0.0.0.0";
  int metrics_port = 8002;
  // Bound on draining queued and running requests after SIGTERM/SIGINT.
  int exit_timeout_secs = 30;
  // Every this many seconds the free memory glibc's malloc arenas hold goes
  // back to the system (common/malloc_trimmer.h); 0 = never.
  int malloc_trim_interval_secs = 10;
  // Largest gRPC request message accepted (bytes); larger ones are refused
  // with RESOURCE_EXHAUSTED before they are decoded. gRPC's own ceiling,
  // and Triton's default, is INT32_MAX.
  int max_request_bytes = 2147483647;
  // Threads per model that deliver executed requests' answers, so that an
  // instance starts its next batch without waiting for them; 0 = each
  // instance's own thread delivers its batch's answers. Unset: see
  // ResponseThreads.
  std::optional<int> response_threads;
  // ModelInfer on this many gRPC completion queues, a thread each; 0 = on
  // gRPC's callback API (InferenceServiceOptions::infer_threads).
  int grpc_infer_threads = kDefaultGrpcInferThreads;
  GrpcSslOptions grpc_ssl;
  // Ready only when every model of the repository loaded (Triton's default);
  // otherwise ready when every model that loaded is ready.
  bool strict_readiness = false;
  // Triton's system_shared_memory extension: clients may register POSIX
  // shared-memory objects and pass tensors through them. Off by default (as
  // Triton's --allow-client-shm): it lets any client that reaches the gRPC
  // port make the server map and write shared-memory objects it can open.
  bool allow_shared_memory = false;
  // When set, {"grpc_port": P, "metrics_port": Q} is written here once the
  // server is serving (for tests and supervisors that use port 0).
  std::string port_file;
  // When set, every GPU batch's phases (input, compute, output) are written
  // here as a Chrome trace (see server/runtime/batch_trace.h).
  std::string batch_trace_file;
  bool help = false;
};

// The answer threads per model the server runs: --response-threads when
// given, else none with ModelInfer on completion queues and
// kCallbackApiResponseThreads on the callback API.
int ResponseThreads(const ServerOptions& options);

// Parses --flag=value / --flag value arguments. InvalidArgument naming the
// flag for unknown flags and bad values; --model-repository is required
// unless --help is given. With TLS on, the certificate and key flags must be
// set (their files are read later, by the server).
absl::StatusOr<ServerOptions> ParseServerOptions(int argc, const char* const* argv);

// The TLS material the --grpc-* SSL flags name, read from their files;
// nullopt when TLS is off. InvalidArgument naming the flag and the path when a
// file is missing, unreadable, empty or not PEM (nothing of its contents is
// quoted).
absl::StatusOr<std::optional<GrpcTlsCredentials>> LoadGrpcTls(const GrpcSslOptions& ssl);

// The --help text.
std::string ServerUsage();

}  // namespace fuseserve
