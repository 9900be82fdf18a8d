#include "server/server.h"

#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/thread_name.h"
#include "server/runtime/page_locked_memory.h"

namespace fuseserve {
namespace {

// How often readiness (which an instance failure can change) is mirrored
// into the gRPC health service, and GPU memory into its gauges.
constexpr absl::Duration kReadinessPollInterval = absl::Milliseconds(250);

// How the gRPC port is secured, for the start-up log: modes and paths only,
// never file contents.
std::string DescribeGrpcSecurity(const GrpcSslOptions& ssl) {
  if (ssl.use_mutual_auth) {
    return absl::StrCat("TLS with client certificates verified by ", ssl.root_cert,
                        " (certificate ", ssl.server_cert, ")");
  }
  if (ssl.use_ssl) return absl::StrCat("TLS (certificate ", ssl.server_cert, ")");
  return "plaintext";
}

}  // namespace

absl::StatusOr<std::unique_ptr<Server>> Server::Start(const ServerOptions& options) {
  // TLS files first: a wrong path should not wait for the models to load.
  ASSIGN_OR_RETURN(std::optional<GrpcTlsCredentials> tls, LoadGrpcTls(options.grpc_ssl));
  if (!tls.has_value() &&
      (!options.grpc_ssl.server_cert.empty() || !options.grpc_ssl.server_key.empty() ||
       !options.grpc_ssl.root_cert.empty())) {
    FS_LOG(WARNING) << "TLS certificate or key flags are set but --grpc-use-ssl and "
                       "--grpc-use-ssl-mutual are false: gRPC is served in plaintext";
  }
  std::unique_ptr<Server> server(new Server());
  server->options_ = options;
  server->metrics_ = MetricsRegistry::Create();
  server->cpu_pool_ = std::make_unique<ThreadPool>();

  ModelManagerOptions manager_options;
  manager_options.repository = options.model_repository;
  manager_options.clock = Clock::Real();
  manager_options.metrics = server->metrics_.get();
  manager_options.cpu_pool = server->cpu_pool_.get();
  manager_options.response_threads = ResponseThreads(options);
  if (!options.batch_trace_file.empty()) {
    ASSIGN_OR_RETURN(server->batch_trace_, BatchTraceWriter::Open(options.batch_trace_file));
    manager_options.batch_trace = server->batch_trace_.get();
  }
  ASSIGN_OR_RETURN(server->models_, ModelManager::Load(manager_options));

  InferenceServiceOptions service_options;
  service_options.server_version = FUSESERVE_VERSION;
  service_options.strict_readiness = options.strict_readiness;
  service_options.page_locked_outputs = PageLockedMemoryAvailable();
  if (options.allow_shared_memory) {
    // Regions are page-locked when there is a GPU: instances then copy
    // tensors between them and the device directly.
    server->shared_memory_ = std::make_unique<SharedMemoryManager>(
        SharedMemoryManager::kDefaultMaxRegions, PageLockedMemoryAvailable());
  }
  service_options.infer_threads = options.grpc_infer_threads;
  server->service_ = InferenceService::Create(std::move(service_options), server->models_.get(),
                                              Clock::Real(), server->shared_memory_.get());
  GrpcServerOptions grpc_options;
  grpc_options.address = options.grpc_address;
  grpc_options.port = options.grpc_port;
  grpc_options.max_request_bytes = options.max_request_bytes;
  grpc_options.tls = std::move(tls);
  ASSIGN_OR_RETURN(server->grpc_, GrpcServer::Start(grpc_options, server->service_.get()));

  HttpEndpoints endpoints;
  Server* self = server.get();
  endpoints.live = [] { return true; };
  endpoints.ready = [self] { return self->service_->Ready(); };
  endpoints.model_ready = [self](const std::string& model,
                                 const std::string& version) -> absl::StatusOr<bool> {
    ASSIGN_OR_RETURN(const ModelVersionRecord* record, self->models_->Find(model, version));
    return record->ready();
  };
  endpoints.metrics_text = [self] { return self->metrics_->SerializeText(); };
  ASSIGN_OR_RETURN(server->http_, HttpServer::Start(options.metrics_address, options.metrics_port,
                                                    std::move(endpoints)));

  server->RefreshMemoryMetrics();
  server->grpc_->SetServing(server->service_->Ready());
  server->started_ = true;
  server->readiness_watcher_ = std::thread([self] {
    NameCurrentThread("fs-readiness");
    self->WatchReadiness();
  });
  FS_LOG(INFO) << "serving gRPC on " << options.grpc_address << ":" << server->grpc_port() << " ("
               << DescribeGrpcSecurity(options.grpc_ssl) << "), metrics and health on http://"
               << options.metrics_address << ":" << server->metrics_port()
               << " (ready: " << (server->service_->Ready() ? "yes" : "no")
               << "; system shared memory: " << (options.allow_shared_memory ? "allowed" : "off")
               << ")";
  return server;
}

Server::~Server() { Shutdown(); }

void Server::RefreshMemoryMetrics() {
  models_->RefreshGpuMemoryMetrics(*metrics_);
  const HostBufferPool& answers = service_->answer_buffers();
  if (answers.page_locked()) {
    const HostBufferPool::Usage usage = answers.usage();
    metrics_->SetPinnedMemoryPool(static_cast<int64_t>(usage.held_bytes),
                                  static_cast<int64_t>(usage.in_use_bytes));
  }
}

void Server::WatchReadiness() {
  bool serving = service_->Ready();
  while (!stopping_.WaitForNotificationWithTimeout(kReadinessPollInterval)) {
    RefreshMemoryMetrics();
    const bool ready = service_->Ready();
    if (ready != serving) {
      FS_LOG(INFO) << "readiness changed to " << (ready ? "ready" : "not ready");
      grpc_->SetServing(ready);
      serving = ready;
    }
  }
}

void Server::Shutdown() {
  // A server that failed to start is torn down by its members' destructors.
  if (!started_ || shut_down_) return;
  shut_down_ = true;
  const absl::Time deadline = absl::Now() + absl::Seconds(options_.exit_timeout_secs);
  stopping_.Notify();
  readiness_watcher_.join();
  grpc_->SetServing(false);
  // The drain, in an order that loses no request a client or a load balancer
  // could not retry elsewhere:
  // 1. readiness goes false (the HTTP probe too) and queued requests run
  //    without waiting for fuller batches; the models still accept
  //    (answering UNAVAILABLE here would fail requests that nginx had
  //    already sent and cannot resend);
  // 2. gRPC refuses new connections at connect time (retried elsewhere),
  //    serves those already accepted, sends a graceful GOAWAY and waits for
  //    the RPCs in flight until `deadline`;
  // 3. the models stop; what is left (only past the deadline) is answered
  //    UNAVAILABLE.
  models_->BeginDrain();
  grpc_->Shutdown(deadline);
  models_->Shutdown(deadline);
  if (shared_memory_ != nullptr) shared_memory_->Unregister("");
  http_->Stop();
  FS_LOG(INFO) << "shut down";
}

}  // namespace fuseserve
