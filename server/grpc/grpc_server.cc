#include "server/grpc/grpc_server.h"

#include <climits>

#include "absl/strings/str_cat.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"

namespace fuseserve {

absl::StatusOr<std::unique_ptr<GrpcServer>> GrpcServer::Start(const std::string& address,
                                                              int port, int max_request_bytes,
                                                              InferenceService* service) {
  grpc::EnableDefaultHealthCheckService(true);
  std::unique_ptr<GrpcServer> server(new GrpcServer());
  grpc::ServerBuilder builder;
  builder.SetMaxReceiveMessageSize(max_request_bytes);
  builder.SetMaxSendMessageSize(INT_MAX);
  const std::string endpoint = absl::StrCat(address, ":", port);
  builder.AddListeningPort(endpoint, grpc::InsecureServerCredentials(), &server->port_);
  builder.RegisterService(service);
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || server->port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve gRPC on ", endpoint, " (address in use or not local?)"));
  }
  server->SetServing(false);
  return server;
}

GrpcServer::~GrpcServer() { Shutdown(absl::Now()); }

void GrpcServer::SetServing(bool serving) {
  grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService();
  if (health == nullptr) return;
  health->SetServingStatus(serving);
  health->SetServingStatus("inference.GRPCInferenceService", serving);
}

void GrpcServer::Shutdown(absl::Time deadline) {
  if (shut_down_ || server_ == nullptr) return;
  shut_down_ = true;
  server_->Shutdown(absl::ToChronoTime(deadline));
  server_->Wait();
}

}  // namespace fuseserve
