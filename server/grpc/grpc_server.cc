#include "server/grpc/grpc_server.h"

#include <climits>
#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/thread_name.h"
#include "grpc/grpc.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"
#include "grpcpp/server_posix.h"

namespace fuseserve {
namespace {

std::shared_ptr<grpc::ServerCredentials> ServerCredentials(
    const std::optional<GrpcTlsCredentials>& tls) {
  if (!tls.has_value()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions ssl(
      tls->require_client_certificate ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                                      : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  ssl.pem_key_cert_pairs.push_back({tls->server_key_pem, tls->server_cert_pem});
  if (tls->require_client_certificate) ssl.pem_root_certs = tls->client_ca_pem;
  return grpc::SslServerCredentials(ssl);
}

}  // namespace

absl::StatusOr<std::unique_ptr<GrpcServer>> GrpcServer::Start(const GrpcServerOptions& options,
                                                              GrpcServiceHost* host) {
  grpc::EnableDefaultHealthCheckService(true);
  std::unique_ptr<GrpcServer> server(new GrpcServer());
  grpc::ServerBuilder builder;
  builder.SetMaxReceiveMessageSize(options.max_request_bytes);
  builder.SetMaxSendMessageSize(INT_MAX);
  // gRPC's own listener (TLS) would set SO_REUSEPORT: a second server on the
  // same port would then bind too and take half the connections.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  const std::string endpoint = absl::StrCat(options.address, ":", options.port);
  if (options.tls.has_value()) {
    builder.AddListeningPort(endpoint, ServerCredentials(options.tls), &server->port_);
  } else {
    absl::StatusOr<std::unique_ptr<TcpListener>> listener =
        TcpListener::Listen(options.address, options.port);
    if (!listener.ok()) {
      // The listener's message names the address.
      return absl::Status(listener.status().code(),
                          absl::StrCat("cannot serve gRPC: ", listener.status().message()));
    }
    server->listener_ = *std::move(listener);
    server->port_ = server->listener_->port();
  }
  builder.RegisterService(host->service());
  for (int i = 0; i < host->completion_queues(); ++i) {
    server->queues_.push_back(builder.AddCompletionQueue());
  }
  server->server_ = builder.BuildAndStart();
  if (server->server_ != nullptr && server->listener_ != nullptr) {
    grpc::Server* grpc_server = server->server_.get();
    server->listener_->Start(
        [grpc_server](int fd) { grpc::AddInsecureChannelFromFd(grpc_server, fd); });
  }
  if (server->server_ == nullptr || server->port_ == 0) {
    // The destructor shuts a server that started down, queues included.
    if (server->server_ == nullptr) server->ShutdownQueues();
    return absl::UnavailableError(absl::StrCat(
        "cannot serve gRPC on ", endpoint,
        options.tls.has_value() ? " (address in use or not local, or gRPC rejected the TLS "
                                  "certificate or key: see its log line above)"
                                : " (address in use or not local?)"));
  }
  for (const std::unique_ptr<grpc::ServerCompletionQueue>& queue : server->queues_) {
    server->queue_threads_.emplace_back([host, queue = queue.get()] {
      NameCurrentThread("fs-grpc-queue");
      host->ServeCompletionQueue(queue);
    });
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
  if (listener_ != nullptr) listener_->StopAccepting(kHandshakeSettle);
  // Returns once every call has finished: the queues' threads keep serving
  // until then (the answers of calls in flight complete on them).
  server_->Shutdown(absl::ToChronoTime(deadline));
  server_->Wait();
  ShutdownQueues();
}

void GrpcServer::ShutdownQueues() {
  for (const std::unique_ptr<grpc::ServerCompletionQueue>& queue : queues_) queue->Shutdown();
  if (queue_threads_.empty()) {
    // No thread served them (the server did not start): drain them here.
    void* tag = nullptr;
    bool ok = false;
    for (const std::unique_ptr<grpc::ServerCompletionQueue>& queue : queues_) {
      while (queue->Next(&tag, &ok)) {
      }
    }
  }
  for (std::thread& thread : queue_threads_) thread.join();
  queue_threads_.clear();
}

}  // namespace fuseserve
