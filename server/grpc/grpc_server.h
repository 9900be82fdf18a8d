#pragma once

// The gRPC endpoint: inference.GRPCInferenceService plus grpc.health.v1.Health
// on one port, with message limits of INT32_MAX both ways (tensors of tens of
// MB are normal here; Triton does the same).

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
