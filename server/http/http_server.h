#pragma once

// The HTTP side port (SPEC.md §5, default 8002): Prometheus metrics and the
// KServe v2 REST health paths, for scrapers and HTTP probes. Inference is
// gRPC only.
//
//   GET /metrics                                    200, text format 0.0.4
//   GET /v2/health/live                             200 | 503
//   GET /v2/health/ready                            200 | 503
//   GET /v2/models/{name}/ready                     200 | 503 | 404
//   GET /v2/models/{name}/versions/{version}/ready  200 | 503 | 404
//
// A true probe answers 200 with an empty body. A false one answers 503
// Service Unavailable with a JSON body {"error": "..."}: the server is up but
// cannot take the traffic now, which is what 503 means to load balancers and
// operators (Triton answers 400 here, which wrongly blames the client;
// Kubernetes probes treat both as failure). Unknown models and unknown paths
// answer 404 with {"error": "..."}.
//
// cpp-httplib serves on a background thread with a small worker pool, so a
// slow scrape does not hold up probes.

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace httplib {
class Server;
}  // namespace httplib

namespace fuseserve {

// What the routes answer from. Each function is called on a server worker
// thread, concurrently with the others and with itself.
struct HttpEndpoints {
  // Liveness: the process is up and not wedged.
  std::function<bool()> live;
  // Readiness: the server accepts inference requests now.
  std::function<bool()> ready;
  // Whether `model` (version `version`; "" = the model as a whole, i.e. any
  // version the server would route an unversioned request to) can serve.
  // NotFound for an unknown model or version (404); InvalidArgument for a
  // malformed version (400); any other error answers 503 with its message.
  std::function<absl::StatusOr<bool>(const std::string& model, const std::string& version)>
      model_ready;
  // The Prometheus text exposition (MetricsRegistry::SerializeText).
  std::function<std::string()> metrics_text;
};

class HttpServer {
 public:
  // Binds `address`:`port` (port 0 = an ephemeral port, see port()) and
  // starts serving `endpoints`, whose functions must all be set and callable
  // from any thread until Stop() returns. Fails with InvalidArgument for a
  // port outside [0, 65535] or an unset endpoint, and with Unavailable, naming
  // address:port, when the address cannot be bound (e.g. the port is in use).
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const std::string& address, int port,
                                                           HttpEndpoints endpoints);

  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // The bound port (the actual one when Start was given 0).
  int port() const { return port_; }

  // Stops accepting connections, lets requests in progress finish and joins
  // the serving threads. Idempotent; the destructor calls it. Returns within
  // about a second even while a client holds an idle keep-alive connection.
  void Stop();

 private:
  HttpServer(std::unique_ptr<httplib::Server> server, int port);

  const std::unique_ptr<httplib::Server> server_;
  const int port_;
  std::thread listener_;

  absl::Mutex stop_mu_;
  bool stopped_ ABSL_GUARDED_BY(stop_mu_) = false;
};

}  // namespace fuseserve
