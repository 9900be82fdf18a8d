// The client library against the real server (small default repository,
// ephemeral ports): every method, the server's error codes and messages,
// async inference and deadlines.

#include "client/client.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "grpcpp/client_context.h"
#include "gtest/gtest.h"
#include "tests/client/test_server.h"

namespace fuseserve::client {
namespace {

using fuseserve::testing::kConvModel;
using fuseserve::testing::kGemmModel;
using fuseserve::testing::kGroupNormModel;
using fuseserve::testing::kSlowModel;
using fuseserve::testing::RandomValues;
using fuseserve::testing::ReferenceOutput;
using fuseserve::testing::RelativeL2Error;
using fuseserve::testing::TestServer;
using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::IsSupersetOf;
using ::testing::Not;

class ClientTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto server = fuseserve::testing::StartTestServer(FUSESERVE_BINARY);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = server->release();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }

  void SetUp() override {
    ASSERT_NE(server_, nullptr);
    client_ = Client::Create(server_->process->grpc_target());
  }

  static Tensor Input(const Shape& shape, uint32_t seed) {
    return Tensor{"input", shape, RandomValues(NumElements(shape), seed)};
  }

  static TestServer* server_;
  std::unique_ptr<Client> client_;
};

TestServer* ClientTest::server_ = nullptr;

TEST_F(ClientTest, ReportsLivenessReadinessAndModelReadiness) {
  auto live = client_->ServerLive();
  ASSERT_TRUE(live.ok()) << live.status();
  EXPECT_TRUE(*live);
  auto ready = client_->ServerReady();
  ASSERT_TRUE(ready.ok()) << ready.status();
  EXPECT_TRUE(*ready);
  for (const char* model : {kConvModel, kGemmModel, kGroupNormModel, kSlowModel}) {
    auto model_ready = client_->ModelReady(model);
    ASSERT_TRUE(model_ready.ok()) << model << ": " << model_ready.status();
    EXPECT_TRUE(*model_ready) << model;
  }
  auto version_ready = client_->ModelReady(kGroupNormModel, "1");
  ASSERT_TRUE(version_ready.ok());
  EXPECT_TRUE(*version_ready);
  auto unknown = client_->ModelReady("no_such_model");
  ASSERT_TRUE(unknown.ok()) << unknown.status();
  EXPECT_FALSE(*unknown);
}

TEST_F(ClientTest, ServerMetadataListsExtensions) {
  auto metadata = client_->ServerMetadata();
  ASSERT_TRUE(metadata.ok()) << metadata.status();
  EXPECT_EQ(metadata->name(), "fuseserve");
  EXPECT_THAT(metadata->extensions(), IsSupersetOf({"model_configuration", "statistics"}));
}

TEST_F(ClientTest, ModelMetadataAndConfigDescribeTheModel) {
  auto metadata = client_->ModelMetadata(kGroupNormModel);
  ASSERT_TRUE(metadata.ok()) << metadata.status();
  EXPECT_EQ(metadata->name(), kGroupNormModel);
  ASSERT_EQ(metadata->inputs_size(), 1);
  EXPECT_EQ(metadata->inputs(0).name(), "input");
  EXPECT_EQ(metadata->inputs(0).datatype(), "FP32");
  EXPECT_THAT(metadata->inputs(0).shape(), ::testing::ElementsAre(-1, 8, -1, -1));

  auto config = client_->ModelConfig(kGemmModel, "1");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->config().platform(), kGemmModel);
  EXPECT_EQ(config->config().max_batch_size(), 16);
}

TEST_F(ClientTest, UnknownModelsAreNotFoundWithTheServersMessage) {
  const auto metadata = client_->ModelMetadata("no_such_model");
  EXPECT_EQ(metadata.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(metadata.status().message(), HasSubstr("no_such_model"));
  EXPECT_EQ(client_->ModelConfig("no_such_model").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(client_->ModelStatistics("no_such_model").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(client_->ModelMetadata(kGroupNormModel, "7").status().code(),
            absl::StatusCode::kNotFound);
  const auto infer = client_->Infer("no_such_model", {Input({1, 8, 2, 2}, 1)});
  EXPECT_EQ(infer.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(infer.status().message(), HasSubstr("no_such_model"));
}

TEST_F(ClientTest, InferMatchesTheCpuReferenceForEveryFamily) {
  const std::vector<std::pair<std::string, Shape>> cases = {
      {kConvModel, {2, 8, 16, 16}}, {kGemmModel, {3, 64}}, {kGroupNormModel, {2, 8, 5, 7}}};
  uint32_t seed = 10;
  for (const auto& [model, shape] : cases) {
    const Tensor input = Input(shape, seed++);
    InferOptions options;
    options.request_id = "client-" + model;
    options.timeout = absl::Seconds(60);
    options.outputs = {"output"};
    auto result = client_->Infer(model, {input}, options);
    ASSERT_TRUE(result.ok()) << model << ": " << result.status();
    EXPECT_EQ(result->model_name, model);
    EXPECT_EQ(result->model_version, "1");
    EXPECT_EQ(result->id, "client-" + model);
    ASSERT_EQ(result->outputs.size(), 1u);
    EXPECT_EQ(result->outputs[0].name, "output");
    const auto expected = ReferenceOutput(server_->repository, model, input.shape, input.data);
    ASSERT_TRUE(expected.ok()) << expected.status();
    EXPECT_EQ(static_cast<size_t>(NumElements(result->outputs[0].shape)), expected->size());
    EXPECT_LE(RelativeL2Error(result->outputs[0].data, *expected), 1e-6) << model;
  }
}

TEST_F(ClientTest, TensorsLargerThanGrpcsDefaultFourMebibyteLimitPassBothWays) {
  const Tensor input = Input({1, 8, 384, 384}, 11);  // 4.5 MiB in, 4.5 MiB out
  InferOptions options;
  options.timeout = absl::Seconds(60);
  auto result = client_->Infer(kGroupNormModel, {input}, options);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->outputs.size(), 1u);
  const auto expected =
      ReferenceOutput(server_->repository, kGroupNormModel, input.shape, input.data);
  ASSERT_TRUE(expected.ok()) << expected.status();
  EXPECT_LE(RelativeL2Error(result->outputs[0].data, *expected), 1e-6);
}

TEST_F(ClientTest, BadShapesAreInvalidArgumentWithTheServersMessage) {
  // groupnorm has 8 channels; 3 must be refused by the server, naming the input.
  const auto result = client_->Infer(kGroupNormModel, {Input({2, 3, 4, 4}, 2)});
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(result.status().message(), HasSubstr("input"));
}

TEST_F(ClientTest, TensorsWhoseDataDisagreesWithTheirShapeAreRefusedBeforeSending) {
  Tensor input = Input({1, 8, 2, 2}, 3);
  input.data.pop_back();
  const auto result = client_->Infer(kGroupNormModel, {input});
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(result.status().message(), HasSubstr("holds 32 values, the tensor has 31"));
}

// Collects a fixed number of async completions. Shared with the callbacks,
// which may still be unwinding when Wait() returns.
class Completions {
 public:
  explicit Completions(int expected) : expected_(expected) {}
  void Add(int index, absl::StatusOr<InferResult> result) {
    absl::MutexLock lock(&mutex_);
    results_.emplace_back(index, std::move(result));
  }
  std::vector<std::pair<int, absl::StatusOr<InferResult>>> Wait() {
    absl::MutexLock lock(&mutex_);
    mutex_.Await(absl::Condition(this, &Completions::Done));
    return results_;
  }

 private:
  bool Done() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    return static_cast<int>(results_.size()) >= expected_;
  }

  absl::Mutex mutex_;
  const int expected_;
  std::vector<std::pair<int, absl::StatusOr<InferResult>>> results_ ABSL_GUARDED_BY(mutex_);
};

TEST_F(ClientTest, AsyncInferAnswersEveryRequestWithItsOwnResult) {
  constexpr int kRequests = 6;
  std::vector<Tensor> inputs;
  for (int i = 0; i < kRequests; ++i) inputs.push_back(Input({1, 8, 3, 3}, 100 + i));
  auto completions = std::make_shared<Completions>(kRequests);
  for (int i = 0; i < kRequests; ++i) {
    InferOptions options;
    options.request_id = std::to_string(i);
    options.timeout = absl::Seconds(60);
    client_->AsyncInfer(kGroupNormModel, {inputs[i]}, options,
                        [completions, i](absl::StatusOr<InferResult> result) {
                          completions->Add(i, std::move(result));
                        });
  }
  const auto results = completions->Wait();
  ASSERT_EQ(results.size(), static_cast<size_t>(kRequests));
  for (const auto& [index, result] : results) {
    ASSERT_TRUE(result.ok()) << index << ": " << result.status();
    EXPECT_EQ(result->id, std::to_string(index));
    const auto expected = ReferenceOutput(server_->repository, kGroupNormModel, inputs[index].shape,
                                          inputs[index].data);
    ASSERT_TRUE(expected.ok());
    ASSERT_EQ(result->outputs.size(), 1u);
    EXPECT_LE(RelativeL2Error(result->outputs[0].data, *expected), 1e-6) << index;
  }
}

TEST_F(ClientTest, AsyncInferReportsErrorsThroughTheCallback) {
  auto completions = std::make_shared<Completions>(2);
  client_->AsyncInfer("no_such_model", {Input({1, 8, 2, 2}, 4)}, {},
                      [completions](absl::StatusOr<InferResult> result) {
                        completions->Add(0, std::move(result));
                      });
  Tensor bad = Input({1, 8, 2, 2}, 5);
  bad.data.push_back(1.0f);
  client_->AsyncInfer(kGroupNormModel, {bad}, {},
                      [completions](absl::StatusOr<InferResult> result) {
                        completions->Add(1, std::move(result));
                      });
  for (const auto& [index, result] : completions->Wait()) {
    EXPECT_EQ(result.status().code(),
              index == 0 ? absl::StatusCode::kNotFound : absl::StatusCode::kInvalidArgument)
        << index << ": " << result.status();
  }
}

TEST_F(ClientTest, CallsPastTheirDeadlineFailWithDeadlineExceeded) {
  // slow_groupnorm holds a lone request for 30 s waiting for a batch.
  InferOptions options;
  options.timeout = absl::Milliseconds(200);
  const auto sync = client_->Infer(kSlowModel, {Input({1, 8, 2, 2}, 6)}, options);
  EXPECT_EQ(sync.status().code(), absl::StatusCode::kDeadlineExceeded) << sync.status();

  auto completions = std::make_shared<Completions>(1);
  client_->AsyncInfer(kSlowModel, {Input({1, 8, 2, 2}, 7)}, options,
                      [completions](absl::StatusOr<InferResult> result) {
                        completions->Add(0, std::move(result));
                      });
  const auto async = completions->Wait();
  EXPECT_EQ(async[0].second.status().code(), absl::StatusCode::kDeadlineExceeded);
}

TEST_F(ClientTest, QueueTimeoutIsEnforcedByTheServer) {
  InferOptions options;
  options.timeout = absl::Seconds(60);
  options.queue_timeout = absl::Milliseconds(5);
  const auto result = client_->Infer(kSlowModel, {Input({1, 8, 2, 2}, 8)}, options);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kDeadlineExceeded) << result.status();
  // The server's own message, not the client's "Deadline Exceeded".
  EXPECT_NE(result.status().message(), "Deadline Exceeded");
}

TEST_F(ClientTest, ModelStatisticsCountEveryAnsweredRequest) {
  auto before = client_->ModelStatistics(kConvModel);
  ASSERT_TRUE(before.ok()) << before.status();
  ASSERT_EQ(before->model_stats_size(), 1);
  ASSERT_TRUE(client_->Infer(kConvModel, {Input({2, 8, 16, 16}, 9)}).ok());
  auto after = client_->ModelStatistics(kConvModel, "1");
  ASSERT_TRUE(after.ok()) << after.status();
  ASSERT_EQ(after->model_stats_size(), 1);
  EXPECT_EQ(after->model_stats(0).name(), kConvModel);
  EXPECT_EQ(after->model_stats(0).inference_stats().success().count(),
            before->model_stats(0).inference_stats().success().count() + 1);
  EXPECT_EQ(after->model_stats(0).inference_count(), before->model_stats(0).inference_count() + 2);

  auto all = client_->ModelStatistics();
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_GE(all->model_stats_size(), 4);
}

TEST_F(ClientTest, RepositoryIndexListsEveryModel) {
  auto index = client_->RepositoryIndex();
  ASSERT_TRUE(index.ok()) << index.status();
  std::vector<std::string> names;
  for (const auto& model : index->models()) names.push_back(model.name());
  EXPECT_THAT(names, IsSupersetOf({kConvModel, kGemmModel, kGroupNormModel, kSlowModel}));
  EXPECT_THAT(names, Not(Contains("no_such_model")));
}

TEST_F(ClientTest, StubGivesRawProtocolAccess) {
  grpc::ClientContext context;
  inference::ServerLiveResponse response;
  ASSERT_TRUE(client_->stub().ServerLive(&context, {}, &response).ok());
  EXPECT_TRUE(response.live());
}

TEST(ClientWithoutServerTest, UnreachableServersAreUnavailable) {
  // Port 1 on the loopback: nothing listens there, the connection is refused.
  auto client = Client::Create("127.0.0.1:1");
  const auto live = client->ServerLive(absl::Seconds(20));
  EXPECT_EQ(live.status().code(), absl::StatusCode::kUnavailable) << live.status();
}

}  // namespace
}  // namespace fuseserve::client
