#include "server/http/http_server.h"

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "nlohmann/json.hpp"

namespace fuseserve {
namespace {

using ::testing::HasSubstr;

// Endpoints answering from fields the test sets; remembers the last
// model_ready arguments.
struct FakeServerState {
  std::atomic<bool> live{true};
  std::atomic<bool> ready{true};
  absl::Mutex mu;
  absl::StatusOr<bool> model_ready ABSL_GUARDED_BY(mu) = true;
  std::string last_model ABSL_GUARDED_BY(mu);
  std::string last_version ABSL_GUARDED_BY(mu);
  std::string metrics = "nv_inference_count{model=\"m\",version=\"1\"} 7\n";

  HttpEndpoints Endpoints() {
    HttpEndpoints e;
    e.live = [this] { return live.load(); };
    e.ready = [this] { return ready.load(); };
    e.model_ready = [this](const std::string& model,
                           const std::string& version) -> absl::StatusOr<bool> {
      absl::MutexLock lock(&mu);
      last_model = model;
      last_version = version;
      return model_ready;
    };
    e.metrics_text = [this] { return metrics; };
    return e;
  }
};

class HttpServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<HttpServer>> server =
        HttpServer::Start("127.0.0.1", 0, state_.Endpoints());
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
  }

  httplib::Result Get(const std::string& path) {
    httplib::Client client("127.0.0.1", server_->port());
    client.set_connection_timeout(5);
    client.set_read_timeout(5);
    return client.Get(path.c_str());
  }

  void SetModelReady(absl::StatusOr<bool> ready) {
    absl::MutexLock lock(&state_.mu);
    state_.model_ready = std::move(ready);
  }

  FakeServerState state_;
  std::unique_ptr<HttpServer> server_;
};

// The "error" member of a JSON error body ("" when the body is not one).
std::string ErrorMessage(const httplib::Result& res) {
  const nlohmann::json body = nlohmann::json::parse(res->body, nullptr, false);
  if (!body.is_object() || !body.contains("error") || !body["error"].is_string()) return "";
  return body["error"].get<std::string>();
}

TEST_F(HttpServerTest, BindsAnEphemeralPortForPortZero) {
  EXPECT_GT(server_->port(), 0);
  EXPECT_LE(server_->port(), 65535);
}

TEST_F(HttpServerTest, ServesMetricsInPrometheusTextFormat) {
  const httplib::Result res = Get("/metrics");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_EQ(res->body, state_.metrics);
}

TEST_F(HttpServerTest, HealthProbesAnswer200WithEmptyBodyWhenTrue) {
  for (const char* path : {"/v2/health/live", "/v2/health/ready"}) {
    const httplib::Result res = Get(path);
    ASSERT_TRUE(res) << path << ": " << httplib::to_string(res.error());
    EXPECT_EQ(res->status, 200) << path;
    EXPECT_EQ(res->body, "") << path;
  }
}

TEST_F(HttpServerTest, LiveAnswers503WhenNotLive) {
  state_.live = false;
  const httplib::Result res = Get("/v2/health/live");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 503);
  EXPECT_THAT(ErrorMessage(res), HasSubstr("not live"));
  EXPECT_EQ(Get("/v2/health/ready")->status, 200);
}

TEST_F(HttpServerTest, ReadyAnswers503WhenNotReady) {
  state_.ready = false;
  const httplib::Result res = Get("/v2/health/ready");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 503);
  EXPECT_EQ(res->get_header_value("Content-Type"), "application/json");
  EXPECT_THAT(ErrorMessage(res), HasSubstr("not ready"));
  EXPECT_EQ(Get("/v2/health/live")->status, 200);
}

TEST_F(HttpServerTest, ModelReadyAsksForTheModelWithoutVersion) {
  const httplib::Result res = Get("/v2/models/resnet_50/ready");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->body, "");
  absl::MutexLock lock(&state_.mu);
  EXPECT_EQ(state_.last_model, "resnet_50");
  EXPECT_EQ(state_.last_version, "");
}

TEST_F(HttpServerTest, VersionedModelReadyAsksForThatVersion) {
  const httplib::Result res = Get("/v2/models/gn/versions/3/ready");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200);
  absl::MutexLock lock(&state_.mu);
  EXPECT_EQ(state_.last_model, "gn");
  EXPECT_EQ(state_.last_version, "3");
}

TEST_F(HttpServerTest, ModelReadyAnswers503WhenTheModelIsNotReady) {
  SetModelReady(false);
  const httplib::Result res = Get("/v2/models/gn/versions/2/ready");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 503);
  EXPECT_THAT(ErrorMessage(res), HasSubstr("'gn' version 2 is not ready"));
}

TEST_F(HttpServerTest, UnknownModelAnswers404WithJsonError) {
  SetModelReady(absl::NotFoundError("unknown model 'nope'"));
  for (const char* path : {"/v2/models/nope/ready", "/v2/models/nope/versions/1/ready"}) {
    const httplib::Result res = Get(path);
    ASSERT_TRUE(res) << path << ": " << httplib::to_string(res.error());
    EXPECT_EQ(res->status, 404) << path;
    EXPECT_EQ(res->get_header_value("Content-Type"), "application/json") << path;
    EXPECT_EQ(ErrorMessage(res), "unknown model 'nope'") << path;
  }
}

TEST_F(HttpServerTest, MalformedVersionAnswers400) {
  SetModelReady(absl::InvalidArgumentError("version 'x' is not a positive integer"));
  const httplib::Result res = Get("/v2/models/gn/versions/x/ready");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 400);
  EXPECT_EQ(ErrorMessage(res), "version 'x' is not a positive integer");
}

TEST_F(HttpServerTest, OtherModelReadyErrorsAnswer503WithTheirMessage) {
  SetModelReady(absl::UnavailableError("server exiting"));
  const httplib::Result res = Get("/v2/models/gn/ready");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 503);
  EXPECT_EQ(ErrorMessage(res), "server exiting");
}

TEST_F(HttpServerTest, UnknownPathsAnswer404WithJsonError) {
  for (const char* path : {"/", "/v2/health", "/v2/health/started", "/metrics/extra",
                           "/v2/models/a/b/ready", "/v2/models//ready"}) {
    const httplib::Result res = Get(path);
    ASSERT_TRUE(res) << path << ": " << httplib::to_string(res.error());
    EXPECT_EQ(res->status, 404) << path;
    EXPECT_EQ(res->get_header_value("Content-Type"), "application/json") << path;
    EXPECT_THAT(ErrorMessage(res), HasSubstr(path)) << path;
  }
}

TEST_F(HttpServerTest, OtherMethodsOnKnownPathsAnswer404) {
  httplib::Client client("127.0.0.1", server_->port());
  const httplib::Result res = client.Post("/metrics", "x", "text/plain");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 404);
  EXPECT_THAT(ErrorMessage(res), HasSubstr("POST /metrics"));
}

TEST_F(HttpServerTest, SlowScrapeDoesNotBlockProbes) {
  absl::Notification scrape_started;
  absl::Notification release_scrape;
  HttpEndpoints endpoints = state_.Endpoints();
  endpoints.metrics_text = [&] {
    scrape_started.Notify();
    release_scrape.WaitForNotification();
    return std::string("slow\n");
  };
  absl::StatusOr<std::unique_ptr<HttpServer>> slow =
      HttpServer::Start("127.0.0.1", 0, std::move(endpoints));
  ASSERT_TRUE(slow.ok()) << slow.status();
  const int port = (*slow)->port();

  std::string scraped;
  std::thread scraper([port, &scraped] {
    httplib::Client client("127.0.0.1", port);
    const httplib::Result res = client.Get("/metrics");
    if (res) scraped = res->body;
  });
  scrape_started.WaitForNotification();

  httplib::Client prober("127.0.0.1", port);
  prober.set_read_timeout(5);
  const httplib::Result probe = prober.Get("/v2/health/live");
  release_scrape.Notify();
  scraper.join();

  ASSERT_TRUE(probe) << httplib::to_string(probe.error());
  EXPECT_EQ(probe->status, 200);
  EXPECT_EQ(scraped, "slow\n");
}

TEST_F(HttpServerTest, StopIsIdempotentAndClosesThePort) {
  const int port = server_->port();
  server_->Stop();
  server_->Stop();

  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(5);
  EXPECT_FALSE(client.Get("/v2/health/live"));
}

TEST_F(HttpServerTest, StartingOnAPortInUseFailsWithUnavailable) {
  const int port = server_->port();
  absl::StatusOr<std::unique_ptr<HttpServer>> second =
      HttpServer::Start("127.0.0.1", port, state_.Endpoints());
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(second.status().message(), HasSubstr(absl::StrCat("127.0.0.1:", port)));
  // The running server is unaffected.
  EXPECT_EQ(Get("/v2/health/live")->status, 200);
}

TEST(HttpServerStartTest, RejectsPortsOutOfRange) {
  FakeServerState state;
  for (int port : {-1, 65536}) {
    absl::StatusOr<std::unique_ptr<HttpServer>> server =
        HttpServer::Start("127.0.0.1", port, state.Endpoints());
    ASSERT_FALSE(server.ok()) << port;
    EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument) << port;
  }
}

TEST(HttpServerStartTest, RejectsUnsetEndpoints) {
  FakeServerState state;
  HttpEndpoints endpoints = state.Endpoints();
  endpoints.model_ready = nullptr;
  absl::StatusOr<std::unique_ptr<HttpServer>> server =
      HttpServer::Start("127.0.0.1", 0, std::move(endpoints));
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(HttpServerStartTest, RejectsAnAddressThatCannotBeBound) {
  FakeServerState state;
  absl::StatusOr<std::unique_ptr<HttpServer>> server =
      HttpServer::Start("192.0.2.1", 0, state.Endpoints());
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(server.status().message(), HasSubstr("192.0.2.1:0"));
}

}  // namespace
}  // namespace fuseserve
