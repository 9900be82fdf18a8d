// Faults against the real server (issue 8, item 5): an injected device error
// fails its batch with INTERNAL and takes the model out of readiness without
// leaving any request unanswered; a model whose buffers do not fit in device
// memory fails its load alone; SIGTERM under load answers every accepted
// request and exits 0; a client killed mid-request leaves the server healthy.

#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/client/test_server.h"
#include "tests/e2e/reliability/reliability_testing.h"

extern char** environ;

namespace fuseserve::testing {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

const Shape kShape = {1, 8, 4, 4};

// The client process of the SIGKILL test: $FUSESERVE_INFER_CHILD when set
// (a GPU host runs a packed copy), else the one this build made.
std::string InferChildBinary() {
  const char* path = std::getenv("FUSESERVE_INFER_CHILD");
  return path != nullptr ? path : FUSESERVE_INFER_CHILD;
}

// Each test runs its own server on a repository of the small default models
// plus the groupnorm variants it adds, with the test-only parameters enabled.
class FaultsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto repository = TestRepository::Create();
    ASSERT_TRUE(repository.ok()) << repository.status();
    repository_ = *std::move(repository);
  }
  void TearDown() override { server_.reset(); }

  void Start(const std::vector<std::string>& extra_args = {}) {
    auto server = StartServer(*repository_, extra_args);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    stub_ = NewStub(*server_);
  }

  bool ServerReady() {
    grpc::ClientContext context;
    inference::ServerReadyResponse response;
    return stub_->ServerReady(&context, {}, &response).ok() && response.ready();
  }

  bool ModelReady(const std::string& model) {
    grpc::ClientContext context;
    inference::ModelReadyRequest request;
    request.set_name(model);
    inference::ModelReadyResponse response;
    return stub_->ModelReady(&context, request, &response).ok() && response.ready();
  }

  grpc::Status InferSmall(const std::string& model) {
    inference::ModelInferResponse response;
    return Infer(*stub_, MakeRequest(model, kShape, RandomValues(NumElements(kShape), 4)),
                 &response);
  }

  // Polls /metrics (up to 30 s) until `name{labels}` equals `value`.
  bool WaitForMetric(const std::string& name, const std::map<std::string, std::string>& labels,
                     double value) {
    const absl::Time give_up = absl::Now() + absl::Seconds(30);
    while (absl::Now() < give_up) {
      if (MetricValue(ScrapeMetrics(*server_), name, labels) == value) return true;
      absl::SleepFor(absl::Milliseconds(10));
    }
    return false;
  }

  std::unique_ptr<TestRepository> repository_;
  std::unique_ptr<ServerProcess> server_;
  std::unique_ptr<inference::GRPCInferenceService::Stub> stub_;
};

// One instance whose first batch fails as a device error would. Four requests
// form that batch (preferred_batch_size 4); two more wait behind it. The
// batch is answered INTERNAL; the instance is retired and the model is not
// ready, so the waiting requests and every later one are answered
// UNAVAILABLE at once (SPEC.md §3: not ready -> UNAVAILABLE); no request
// hangs. The other models keep serving.
TEST_F(FaultsTest, InjectedDeviceErrorFailsItsBatchWithInternalAndTheModelGoesUnready) {
  constexpr char kFaulty[] = "faulty_groupnorm";
  ASSERT_TRUE(repository_
                  ->AddGroupNorm(kFaulty, 4,
                                 "dynamic_batching { preferred_batch_size: [ 4 ] "
                                 "max_queue_delay_microseconds: 30000000 }\n"
                                 // One instance, also on a multi-GPU host
                                 // (KIND_AUTO places `count` per device).
                                 "instance_group [ { count: 1, kind: KIND_AUTO, gpus: [ 0 ] } ]\n" +
                                     ConfigParameter("fuseserve_test_fail_batch", "1"))
                  .ok());
  Start();
  ASSERT_TRUE(ModelReady(kFaulty));
  ASSERT_TRUE(ServerReady());

  const inference::ModelInferRequest request =
      MakeRequest(kFaulty, kShape, RandomValues(NumElements(kShape), 6));
  std::vector<std::unique_ptr<InferCall>> calls;
  for (int i = 0; i < 6; ++i) calls.push_back(StartInfer(*stub_, request));
  int internal = 0, unavailable = 0;
  for (const auto& call : calls) {
    ASSERT_TRUE(call->Wait(absl::Seconds(20))) << "a request was left without an answer";
    const std::string& message = call->status.error_message();
    if (call->status.error_code() == grpc::StatusCode::INTERNAL) {
      ++internal;
      EXPECT_THAT(message, AllOf(HasSubstr(kFaulty), HasSubstr("injected device error")));
    } else {
      ++unavailable;
      EXPECT_EQ(call->status.error_code(), grpc::StatusCode::UNAVAILABLE) << message;
      EXPECT_THAT(message, HasSubstr("unhealthy"));
    }
  }
  EXPECT_EQ(internal, 4);
  EXPECT_EQ(unavailable, 2);

  EXPECT_FALSE(ModelReady(kFaulty));
  EXPECT_FALSE(ServerReady());
  EXPECT_EQ(HttpStatus(*server_, absl::StrCat("/v2/models/", kFaulty, "/ready")), 503);
  EXPECT_EQ(HttpStatus(*server_, "/v2/health/ready"), 503);
  EXPECT_EQ(HttpStatus(*server_, "/v2/health/live"), 200);
  const absl::Time start = absl::Now();
  const grpc::Status later = InferSmall(kFaulty);
  EXPECT_EQ(later.error_code(), grpc::StatusCode::UNAVAILABLE) << later.error_message();
  EXPECT_THAT(later.error_message(), HasSubstr("unhealthy"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5)) << "not answered promptly";
  EXPECT_TRUE(InferSmall(kGroupNorm).ok());
  EXPECT_TRUE(ModelReady(kGroupNorm));
  EXPECT_EQ(MetricValue(ScrapeMetrics(*server_), "nv_inference_request_failure",
                        {{"model", kFaulty}, {"version", "1"}, {"reason", "BACKEND"}}),
            4);
  EXPECT_THAT(server_->Log(), HasSubstr("is unhealthy"));
}

// Buffers for a full batch of [1024, 8, 4096, 4096] take 1 TiB: far more
// than any GPU has. The model fails its load with a message that says so;
// the others load and serve.
TEST_F(FaultsTest, ModelWhoseBuffersExceedDeviceMemoryFailsItsLoadAlone) {
  constexpr char kHuge[] = "huge_groupnorm";
  // Fixed spatial dims, so that the buffers are allocated at load.
  ASSERT_TRUE(repository_
                  ->AddGroupNorm(kHuge, 1024, "instance_group [ { count: 1, kind: KIND_GPU } ]\n",
                                 /*channels=*/8, /*spatial=*/"4096, 4096")
                  .ok());
  Start();
  grpc::ClientContext metadata_context;
  inference::ModelMetadataRequest metadata_request;
  metadata_request.set_name(kGroupNorm);
  inference::ModelMetadataResponse metadata;
  ASSERT_TRUE(stub_->ModelMetadata(&metadata_context, metadata_request, &metadata).ok());
  if (!absl::StartsWith(metadata.properties().at("device"), "gpu")) {
    GTEST_SKIP() << "needs a GPU (KIND_AUTO placed the models on "
                 << metadata.properties().at("device") << ")";
  }

  grpc::ClientContext index_context;
  inference::RepositoryIndexResponse index;
  ASSERT_TRUE(stub_->RepositoryIndex(&index_context, {}, &index).ok());
  std::string reason;
  for (const auto& model : index.models()) {
    if (model.name() == kHuge) reason = model.reason();
  }
  EXPECT_THAT(reason, AllOf(HasSubstr("[1024, 8, 4096, 4096]"), HasSubstr("do not fit on GPU 0"),
                            HasSubstr("out of memory")));
  EXPECT_FALSE(ModelReady(kHuge));
  const grpc::Status refused = InferSmall(kHuge);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAVAILABLE) << refused.error_message();
  EXPECT_TRUE(InferSmall(kGroupNorm).ok());
  EXPECT_TRUE(ModelReady(kGroupNorm));
  EXPECT_EQ(HttpStatus(*server_, "/v2/health/live"), 200);
}

// Eight clients send back to back while every batch takes 50 ms; SIGTERM
// arrives mid-run. The requests in flight at SIGTERM complete, and each
// client's requests succeed until the one the server refuses: UNAVAILABLE
// from the service (shutting down) or from a closed port, or CANCELLED by
// gRPC's own shutdown for a call that had not reached the service yet. A call
// that reached the service is cancelled by gRPC only at the exit deadline,
// which the shutdown must not reach: so no accepted request is lost. The
// server exits 0 within its exit timeout.
TEST_F(FaultsTest, SigtermUnderLoadAnswersEveryAcceptedRequestAndExitsZero) {
  constexpr char kBusy[] = "busy_groupnorm";
  constexpr int kClients = 8;
  ASSERT_TRUE(repository_
                  ->AddGroupNorm(kBusy, 8,
                                 "dynamic_batching { }\n"
                                 "instance_group [ { count: 2, kind: KIND_AUTO } ]\n" +
                                     ConfigParameter("fuseserve_test_execution_delay_us", "50000"))
                  .ok());
  Start({"--exit-timeout-secs=10"});

  struct Outcome {
    grpc::Status status;
    absl::Time end;
  };
  absl::Mutex mu;
  std::vector<std::vector<Outcome>> outcomes(kClients);
  int succeeded = 0;
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&, c] {
      auto stub = NewStub(*server_);
      const inference::ModelInferRequest request =
          MakeRequest(kBusy, kShape, RandomValues(NumElements(kShape), c));
      while (true) {
        inference::ModelInferResponse response;
        const grpc::Status status = Infer(*stub, request, &response);
        absl::MutexLock lock(&mu);
        outcomes[c].push_back({status, absl::Now()});
        if (!status.ok()) return;
        ++succeeded;
      }
    });
  }
  {
    absl::MutexLock lock(&mu);
    auto loaded = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return succeeded >= 3 * kClients; };
    ASSERT_TRUE(mu.AwaitWithTimeout(absl::Condition(&loaded), absl::Seconds(60)));
  }
  const absl::Time sigterm = absl::Now();
  absl::StatusOr<int> exit_code = server_->Terminate(absl::Seconds(30));
  const absl::Duration shutdown = absl::Now() - sigterm;
  for (std::thread& client : clients) client.join();

  ASSERT_TRUE(exit_code.ok()) << exit_code.status();
  EXPECT_EQ(*exit_code, 0) << server_->Log();
  EXPECT_LT(shutdown, absl::Seconds(10)) << "the exit timeout";
  int completed_after_sigterm = 0;
  for (int c = 0; c < kClients; ++c) {
    ASSERT_FALSE(outcomes[c].empty());
    for (const Outcome& outcome : outcomes[c]) {
      if (outcome.status.ok() && outcome.end > sigterm) ++completed_after_sigterm;
    }
    // Only the last request of a client failed: it was refused, not lost.
    const Outcome& last = outcomes[c].back();
    ASSERT_FALSE(last.status.ok());
    const std::string& message = last.status.error_message();
    if (last.status.error_code() == grpc::StatusCode::CANCELLED) continue;
    EXPECT_EQ(last.status.error_code(), grpc::StatusCode::UNAVAILABLE) << message;
    // Refused by the front end or by the batcher (after the front end's
    // check, before the batcher's); not the batcher's "still queued at the
    // shutdown deadline", which would be a lost request.
    EXPECT_TRUE(absl::StrContains(message, "not ready: server is shutting down") ||
                message == "model is shutting down" ||
                absl::StrContains(message, "failed to connect") ||
                absl::StrContains(message, "Connection refused"))
        << "client " << c << ": a request failed in a way that may have lost it: " << message;
  }
  EXPECT_GE(completed_after_sigterm, 1) << "no request was in flight at SIGTERM\n"
                                        << server_->Log();
  EXPECT_THAT(server_->Log(), HasSubstr("draining"));
}

// A client process sends an 8 MiB request to a model that holds it in the
// queue for up to 3 s and is SIGKILLed while the server holds it. The server
// notices the cancellation, drops the request without executing it, and
// goes on serving.
TEST_F(FaultsTest, SigkillOfAClientMidRequestLeavesTheServerHealthy) {
  constexpr char kHolding[] = "holding_groupnorm";
  ASSERT_TRUE(repository_
                  ->AddGroupNorm(kHolding, 8,
                                 "dynamic_batching { max_queue_delay_microseconds: 3000000 }\n"
                                 "instance_group [ { count: 1, kind: KIND_AUTO } ]\n")
                  .ok());
  Start();

  std::vector<std::string> args = {
      InferChildBinary(), server_->grpc_target(), kHolding, "1", "8", "512", "512"};
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  pid_t child = -1;
  ASSERT_EQ(posix_spawn(&child, argv[0], nullptr, nullptr, argv.data(), environ), 0);
  const bool queued = WaitForMetric("nv_inference_pending_request_count", ModelLabels(kHolding), 1);
  ASSERT_EQ(kill(child, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(queued) << "the client's request never reached the queue";
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "the client ended first";

  EXPECT_TRUE(WaitForMetric("nv_inference_request_failure",
                            {{"model", kHolding}, {"version", "1"}, {"reason", "CANCELED"}}, 1));
  const std::string metrics = ScrapeMetrics(*server_);
  EXPECT_EQ(MetricValue(metrics, "nv_inference_pending_request_count", ModelLabels(kHolding)), 0);
  EXPECT_LE(MetricValue(metrics, "nv_inference_exec_count", ModelLabels(kHolding)), 0)
      << "the abandoned request was executed";
  EXPECT_TRUE(ServerReady());
  EXPECT_TRUE(ModelReady(kHolding));
  EXPECT_TRUE(InferSmall(kGroupNorm).ok());
}

}  // namespace
}  // namespace fuseserve::testing
