#pragma once

// The gRPC endpoint: inference.GRPCInferenceService plus grpc.health.v1.Health
// on one port. Responses may be up to INT32_MAX bytes (tensors of tens of MB
// are normal here; Triton does the same); requests up to the configured
// limit (--max-request-bytes, INT32_MAX by default), beyond which gRPC
// answers RESOURCE_EXHAUSTED without handing the message to the service.

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/server.h"
#include "server/grpc/inference_service.h"

namespace fuseserve {

class GrpcServer {
 public:
  // Binds address:port (port 0 = ephemeral) and starts serving `service`,
  // which must outlive the server. Health starts NOT_SERVING.
  static absl::StatusOr<std::unique_ptr<GrpcServer>> Start(const std::string& address, int port,
                                                           int max_request_bytes,
                                                           InferenceService* service);
  ~GrpcServer();

  int port() const { return port_; }

  // grpc.health.v1 status of the whole server ("") and of
  // "inference.GRPCInferenceService": SERVING iff `serving` (readiness).
  void SetServing(bool serving);

  // Stops accepting RPCs, lets those in flight finish until `deadline`, then
  // cancels the rest. Idempotent.
  void Shutdown(absl::Time deadline);

 private:
  GrpcServer() = default;

  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  bool shut_down_ = false;
};

}  // namespace fuseserve
