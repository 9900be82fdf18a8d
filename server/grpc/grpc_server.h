#pragma once

// The gRPC endpoint: inference.GRPCInferenceService plus grpc.health.v1.Health
// on one port, in plaintext or over TLS. Responses may be up to INT32_MAX
// bytes (tensors of tens of MB are normal here; Triton does the same);
// requests up to the configured limit (--max-request-bytes, INT32_MAX by
// default), beyond which gRPC answers RESOURCE_EXHAUSTED without handing the
// message to the service.
//
// In plaintext the port is fuseserve's own TcpListener, each connection handed
// to gRPC, so that Shutdown refuses new connections at connect time (which a
// load balancer retries elsewhere) and serves every one already accepted; over
// TLS it is gRPC's own listener (tcp_listener.h says why that difference).

#include <climits>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/server.h"
#include "grpcpp/completion_queue.h"
#include "server/grpc/grpc_service_host.h"
#include "server/grpc/tcp_listener.h"

namespace fuseserve {

// TLS material for the gRPC port: PEM text, not paths.
struct GrpcTlsCredentials {
  std::string server_cert_pem;  // the server's certificate chain
  std::string server_key_pem;
  // When set, a client must present a certificate that client_ca_pem
  // verifies, or its handshake fails (mutual TLS).
  bool require_client_certificate = false;
  std::string client_ca_pem;
};

struct GrpcServerOptions {
  std::string address = "0.0.0.0";
  int port = 0;  // 0 = ephemeral
  int max_request_bytes = INT_MAX;
  std::optional<GrpcTlsCredentials> tls;  // nullopt = plaintext
};

class GrpcServer {
 public:
  // Binds options.address:options.port and starts serving `host`'s service
  // (and its completion queues, a thread each); `host` must outlive the
  // server. Health starts NOT_SERVING. Unavailable when the port cannot be
  // bound or gRPC rejects the TLS material.
  static absl::StatusOr<std::unique_ptr<GrpcServer>> Start(const GrpcServerOptions& options,
                                                           GrpcServiceHost* host);
  ~GrpcServer();

  int port() const { return port_; }

  // grpc.health.v1 status of the whole server ("") and of
  // "inference.GRPCInferenceService": SERVING iff `serving` (readiness).
  void SetServing(bool serving);

  // Stops taking connections (plaintext: TcpListener::StopAccepting, giving
  // handshakes under way kHandshakeSettle), sends every connection a graceful
  // GOAWAY (streams the client started before it saw it are still served),
  // lets the RPCs in flight finish until `deadline`, then cancels the rest;
  // returns once every call has finished and the completion queues are
  // drained. Idempotent.
  void Shutdown(absl::Time deadline);

  // One round trip of even a distant client: a handshake under way when the
  // listener stops completes within it.
  static constexpr absl::Duration kHandshakeSettle = absl::Milliseconds(200);

 private:
  GrpcServer() = default;
  // Shuts the completion queues down and waits until they are drained.
  void ShutdownQueues();

  std::unique_ptr<TcpListener> listener_;  // null over TLS
  // The host's completion queues (destroyed after the server) and the
  // threads that serve them.
  std::vector<std::unique_ptr<grpc::ServerCompletionQueue>> queues_;
  std::unique_ptr<grpc::Server> server_;
  std::vector<std::thread> queue_threads_;
  int port_ = 0;
  bool shut_down_ = false;
};

}  // namespace fuseserve
