#pragma once

// The whole server: metrics registry, model manager, gRPC and HTTP endpoints,
// wired together, and the shutdown sequence (SPEC.md §7): readiness goes
// false, new requests are refused, queued and running requests finish within
// the exit timeout, then the endpoints close.

#include <memory>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "common/thread_pool.h"
#include "server/grpc/grpc_server.h"
#include "server/grpc/inference_service.h"
#include "server/http/http_server.h"
#include "server/metrics/metrics_registry.h"
#include "server/runtime/batch_trace.h"
#include "server/runtime/model_manager.h"
#include "server/server_options.h"
#include "server/shm/shared_memory_manager.h"

namespace fuseserve {

class Server {
 public:
  // Loads the repository and starts serving. Fails when the repository
  // cannot be read or a port cannot be bound; a model failing to load does not.
  static absl::StatusOr<std::unique_ptr<Server>> Start(const ServerOptions& options);

  ~Server();

  int grpc_port() const { return grpc_->port(); }
  int metrics_port() const { return http_->port(); }

  // Drains and stops (bounded by the exit timeout). Idempotent.
  void Shutdown();

 private:
  Server() = default;
  void WatchReadiness();
  // nv_gpu_memory_* and nv_pinned_memory_pool_* (the page-locked answer pool).
  void RefreshMemoryMetrics();

  ServerOptions options_;
  std::unique_ptr<MetricsRegistry> metrics_;
  std::unique_ptr<ThreadPool> cpu_pool_;
  // Null unless --batch-trace-file; outlives the models that write to it.
  std::unique_ptr<BatchTraceWriter> batch_trace_;
  std::unique_ptr<ModelManager> models_;
  // Null unless --allow-shared-memory; its regions are unregistered at
  // shutdown, once no request is left to use them.
  std::unique_ptr<SharedMemoryManager> shared_memory_;
  std::unique_ptr<InferenceService> service_;
  std::unique_ptr<GrpcServer> grpc_;
  std::unique_ptr<HttpServer> http_;
  // Mirrors readiness into grpc.health.v1 until shutdown.
  std::thread readiness_watcher_;
  absl::Notification stopping_;
  bool started_ = false;
  bool shut_down_ = false;
};

}  // namespace fuseserve
