#pragma once

// Shared by the reliability e2e tests (issue 8): the server binary, a
// temporary repository of the small default models plus groupnorm variants
// that each test configures (queue bounds, delays, injected faults), gRPC
// stubs without message-size limits, concurrent ModelInfer calls, and the
// server's Prometheus metrics.

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/shape.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/grpc_service.grpc.pb.h"
#include "tests/e2e/server_process.h"
#include "tests/testing/test_dir.h"

namespace fuseserve::testing {

inline constexpr char kConv[] = "convtranspose_gelu_groupnorm";
inline constexpr char kGemm[] = "gemm_bias_hardtanh_mish_groupnorm";
inline constexpr char kGroupNorm[] = "groupnorm";

// The server binary: $FUSESERVE_BINARY when set (a GPU host runs a packed
// copy), else the one this build made.
std::string ServerBinary();

// Config text for `parameters { key: <key> value: { string_value: <value> } }`.
std::string ConfigParameter(const std::string& key, const std::string& value);

// A repository in a fresh temporary directory, removed with the object: the
// small default models (client/default_repository.h) plus the variants added
// with AddGroupNorm.
class TestRepository {
 public:
  static absl::StatusOr<std::unique_ptr<TestRepository>> Create();

  const std::string& path() const { return directory_.path(); }

  // Adds a groupnorm model `name` with the default groupnorm's weights (8
  // channels in 4 groups): input and output dims [channels, <spatial>] when
  // max_batch_size > 0, else [-1, channels, <spatial>]; `extra`
  // (dynamic_batching, instance_group, parameters) is appended to the config.
  // A `channels` other than 8 contradicts the weights, so that model fails to
  // load.
  absl::Status AddGroupNorm(const std::string& name, int max_batch_size, const std::string& extra,
                            int channels = 8, const std::string& spatial = "-1, -1");

 private:
  TestRepository() = default;
  TestDir directory_{"fuseserve-reliability"};
};

// Starts the server binary on `repository` with the test-only config
// parameters enabled (FUSESERVE_ENABLE_TEST_PARAMETERS=1 in its environment;
// server/runtime/model_manager.cc).
absl::StatusOr<std::unique_ptr<ServerProcess>> StartServer(
    const TestRepository& repository, const std::vector<std::string>& extra_args = {});

// A stub on a fresh channel to the server, with no message-size limits.
std::unique_ptr<inference::GRPCInferenceService::Stub> NewStub(const ServerProcess& server);

// A ModelInfer request for one FP32 input "input" with `values` as raw bytes.
inference::ModelInferRequest MakeRequest(const std::string& model, const Shape& shape,
                                         const std::vector<float>& values);

// One asynchronous ModelInfer call and its outcome.
struct InferCall {
  inference::ModelInferRequest request;
  grpc::ClientContext context;
  inference::ModelInferResponse response;
  grpc::Status status;
  absl::Time start;
  absl::Time end;
  absl::Notification done;

  absl::Duration latency() const { return end - start; }
  // Waits up to `timeout` for the answer.
  bool Wait(absl::Duration timeout = absl::Seconds(60)) {
    return done.WaitForNotificationWithTimeout(timeout);
  }
};

// Starts `request` on `stub` with a gRPC deadline `deadline` from now.
std::unique_ptr<InferCall> StartInfer(inference::GRPCInferenceService::Stub& stub,
                                      inference::ModelInferRequest request,
                                      absl::Duration deadline = absl::Seconds(60));

// ModelInfer, waiting for the answer (gRPC deadline 60 s).
grpc::Status Infer(inference::GRPCInferenceService::Stub& stub,
                   const inference::ModelInferRequest& request,
                   inference::ModelInferResponse* response);

// The server's /metrics text ("" if it cannot be fetched).
std::string ScrapeMetrics(const ServerProcess& server);

// {{"model", model}, {"version", "1"}}: the labels of a model's metrics.
std::map<std::string, std::string> ModelLabels(const std::string& model);

// GET `path` on the server's HTTP port; the status code, or -1 on failure.
int HttpStatus(const ServerProcess& server, const std::string& path);

// A fixture whose tests share one server, started for the suite on a
// TestRepository to which `Suite::AddModels(TestRepository&)` (an
// absl::Status-returning static of the fixture) adds its models.
template <typename Suite>
class SharedServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    absl::StatusOr<std::unique_ptr<TestRepository>> repository = TestRepository::Create();
    ASSERT_TRUE(repository.ok()) << repository.status();
    repository_ = repository->release();
    const absl::Status added = Suite::AddModels(*repository_);
    ASSERT_TRUE(added.ok()) << added;
    absl::StatusOr<std::unique_ptr<ServerProcess>> server = StartServer(*repository_);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = server->release();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
    delete repository_;
    repository_ = nullptr;
  }

  void SetUp() override {
    ASSERT_NE(server_, nullptr) << "the suite's server did not start";
    stub_ = NewStub(*server_);
  }

  static inline TestRepository* repository_ = nullptr;
  static inline ServerProcess* server_ = nullptr;
  std::unique_ptr<inference::GRPCInferenceService::Stub> stub_;
};

}  // namespace fuseserve::testing
