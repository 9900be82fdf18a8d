#include "server/http/http_server.h"

#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <memory>
#include <string>
#include <system_error>
#include <utility>

#include "absl/memory/memory.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/thread_name.h"
#include "httplib.h"
#include "nlohmann/json.hpp"

namespace fuseserve {
namespace {

// Enough that a slow scrape and a keep-alive scraper connection (each holds a
// worker) leave room for the kubelet's probes; small, as these routes are cheap.
constexpr size_t kWorkerThreads = 4;

// An idle keep-alive connection holds a worker and delays Stop() until it
// times out, so keep it short; scrapers and probes reconnect cheaply.
constexpr time_t kKeepAliveTimeoutSec = 1;

constexpr char kMetricsContentType[] = "text/plain; version=0.0.4; charset=utf-8";

std::string ErrorJson(const std::string& message) {
  // `replace`: a model name from the URL may not be valid UTF-8.
  return nlohmann::json{{"error", message}}.dump(-1, ' ', false,
                                                 nlohmann::json::error_handler_t::replace);
}

void ReplyError(httplib::Response& res, int status, const std::string& message) {
  res.status = status;
  res.set_content(ErrorJson(message), "application/json");
}

// 200 with an empty body, or 503 saying `why_not`.
void ReplyProbe(httplib::Response& res, bool ok, const std::string& why_not) {
  if (ok) {
    res.status = 200;
  } else {
    ReplyError(res, 503, why_not);
  }
}

void ReplyModelReady(const HttpEndpoints& endpoints, const std::string& model,
                     const std::string& version, httplib::Response& res) {
  const absl::StatusOr<bool> ready = endpoints.model_ready(model, version);
  if (ready.ok()) {
    ReplyProbe(res, *ready,
               version.empty()
                   ? absl::StrCat("model '", model, "' is not ready")
                   : absl::StrCat("model '", model, "' version ", version, " is not ready"));
    return;
  }
  const std::string message(ready.status().message());
  switch (ready.status().code()) {
    case absl::StatusCode::kNotFound:
      ReplyError(res, 404, message);
      return;
    case absl::StatusCode::kInvalidArgument:
      ReplyError(res, 400, message);
      return;
    default:
      ReplyError(res, 503, message);
      return;
  }
}

// Error handler: unrouted requests (and httplib's own 4xx) get a JSON body
// like ours; responses that already carry one are left alone.
httplib::Server::HandlerResponse ReplyUnrouted(const httplib::Request& req,
                                               httplib::Response& res) {
  if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
  const std::string message =
      res.status == 404 ? absl::StrCat("no route for ", req.method, " ", req.path)
                        : absl::StrCat("HTTP ", res.status, " for ", req.method, " ", req.path);
  res.set_content(ErrorJson(message), "application/json");
  return httplib::Server::HandlerResponse::Handled;
}

void InstallRoutes(httplib::Server& server, std::shared_ptr<const HttpEndpoints> endpoints) {
  server.Get("/metrics", [endpoints](const httplib::Request&, httplib::Response& res) {
    res.status = 200;
    res.set_content(endpoints->metrics_text(), kMetricsContentType);
  });
  server.Get("/v2/health/live", [endpoints](const httplib::Request&, httplib::Response& res) {
    ReplyProbe(res, endpoints->live(), "server is not live");
  });
  server.Get("/v2/health/ready", [endpoints](const httplib::Request&, httplib::Response& res) {
    ReplyProbe(res, endpoints->ready(), "server is not ready");
  });
  server.Get(R"(/v2/models/([^/]+)/ready)",
             [endpoints](const httplib::Request& req, httplib::Response& res) {
               ReplyModelReady(*endpoints, req.matches[1].str(), "", res);
             });
  server.Get(R"(/v2/models/([^/]+)/versions/([^/]+)/ready)",
             [endpoints](const httplib::Request& req, httplib::Response& res) {
               ReplyModelReady(*endpoints, req.matches[1].str(), req.matches[2].str(), res);
             });
  server.set_error_handler(httplib::Server::HandlerWithResponse(ReplyUnrouted));
}

}  // namespace

HttpServer::HttpServer(std::unique_ptr<httplib::Server> server, int port)
    : server_(std::move(server)), port_(port) {}

HttpServer::~HttpServer() { Stop(); }

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const std::string& address, int port,
                                                              HttpEndpoints endpoints) {
  if (port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("HTTP port ", port, " is outside [0, 65535]"));
  }
  if (!endpoints.live || !endpoints.ready || !endpoints.model_ready || !endpoints.metrics_text) {
    return absl::InvalidArgumentError(
        "HttpEndpoints: live, ready, model_ready and metrics_text must all be set");
  }

  auto server = std::make_unique<httplib::Server>();
  server->new_task_queue = [] { return new httplib::ThreadPool(kWorkerThreads); };
  // httplib's default sets SO_REUSEPORT, which on Linux lets a second server
  // bind a port already in use and silently share its traffic. SO_REUSEADDR
  // alone still allows a quick restart over connections in TIME_WAIT.
  server->set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  server->set_keep_alive_timeout(kKeepAliveTimeoutSec);
  InstallRoutes(*server, std::make_shared<const HttpEndpoints>(std::move(endpoints)));

  errno = 0;
  const int bound_port = port == 0 ? server->bind_to_any_port(address)
                                   : (server->bind_to_port(address, port) ? port : -1);
  if (bound_port < 0) {
    // httplib reports only failure; errno still holds bind()'s reason when
    // bind() was what failed (name resolution does not set these codes).
    const int error = errno;
    const bool bind_error = error == EADDRINUSE || error == EADDRNOTAVAIL || error == EACCES;
    return absl::UnavailableError(
        absl::StrCat("cannot serve HTTP on ", address, ":", port, ": ",
                     bind_error ? std::generic_category().message(error)
                                : std::string("the address cannot be resolved or bound")));
  }

  auto http = absl::WrapUnique(new HttpServer(std::move(server), bound_port));
  auto listen_returned = std::make_shared<std::atomic<bool>>(false);
  httplib::Server* raw = http->server_.get();
  http->listener_ = std::thread([raw, listen_returned] {
    NameCurrentThread("fs-http");  // httplib's workers start here and inherit it
    raw->listen_after_bind();
    listen_returned->store(true);
  });
  // httplib's stop() is a no-op until the accept loop has started, so Stop()
  // could otherwise miss it and join forever. The socket is already
  // listening: clients connecting meanwhile wait in its backlog.
  while (!raw->is_running() && !listen_returned->load()) {
    absl::SleepFor(absl::Microseconds(100));
  }
  return http;
}

void HttpServer::Stop() {
  absl::MutexLock lock(&stop_mu_);
  if (stopped_) return;
  stopped_ = true;
  server_->stop();
  if (listener_.joinable()) listener_.join();
}

}  // namespace fuseserve
