// The client library against the real server (small default repository,
// ephemeral ports): every method, the server's error codes and messages,
// async inference and deadlines, and the system shared-memory extension
// (against a second server started with --allow-shared-memory). The request
// encoding itself (BuildInferRequest) needs no server.

#include "client/client.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "client/shared_memory.h"
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
using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::IsSupersetOf;
using ::testing::Not;

class ClientTest : public fuseserve::testing::SuiteServerTest {
 protected:
  void SetUp() override {
    SuiteServerTest::SetUp();
    client_ = Client::Create(server_->process->grpc_target());
  }

  static Tensor Input(const Shape& shape, uint32_t seed) {
    return Tensor{"input", shape, RandomValues(NumElements(shape), seed)};
  }

  std::unique_ptr<Client> client_;
};

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
    const auto expected = ReferenceOutput(server_->repository(), model, input.shape, input.data);
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
      ReferenceOutput(server_->repository(), kGroupNormModel, input.shape, input.data);
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
    const auto expected = ReferenceOutput(server_->repository(), kGroupNormModel,
                                          inputs[index].shape, inputs[index].data);
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

TEST_F(ClientTest, SharedMemoryIsRefusedUnlessTheServerAllowsIt) {
  auto region = SystemSharedMemoryRegion::Create(UniqueSharedMemoryKey("client"), 64);
  ASSERT_TRUE(region.ok()) << region.status();
  EXPECT_FALSE(client_->RegisterSystemSharedMemory("refused", (*region)->key(), 64).ok());
  Tensor input{"input", {1, 8, 2, 2}, {}, SharedMemoryLocation{"refused", 128, 0}};
  EXPECT_FALSE(client_->Infer(kGroupNormModel, {input}).ok());
}

// The server with --allow-shared-memory.
class SharedMemoryClientTest : public ClientTest {
 protected:
  static void SetUpTestSuite() { StartSuiteServer({fuseserve::testing::kAllowSharedMemoryFlag}); }

  void TearDown() override { EXPECT_TRUE(client_->UnregisterSystemSharedMemory().ok()); }

  // A region registered whole under `name`.
  std::unique_ptr<SystemSharedMemoryRegion> Region(const std::string& name, uint64_t byte_size) {
    auto region = SystemSharedMemoryRegion::Create(UniqueSharedMemoryKey("client"), byte_size);
    EXPECT_TRUE(region.ok()) << region.status();
    if (!region.ok()) return nullptr;
    const absl::Status registered =
        client_->RegisterSystemSharedMemory(name, (*region)->key(), byte_size);
    EXPECT_TRUE(registered.ok()) << registered;
    return *std::move(region);
  }
};

TEST_F(SharedMemoryClientTest, RegisterStatusUnregisterRoundTrip) {
  auto a = SystemSharedMemoryRegion::Create(UniqueSharedMemoryKey("client"), 256);
  auto b = SystemSharedMemoryRegion::Create(UniqueSharedMemoryKey("client"), 256);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE(client_->RegisterSystemSharedMemory("a", (*a)->key(), 256).ok());
  ASSERT_TRUE(client_->RegisterSystemSharedMemory("b", (*b)->key(), 128, 64).ok());

  auto all = client_->SystemSharedMemoryStatus();
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->regions_size(), 2);
  const auto& b_status = all->regions().at("b");
  EXPECT_EQ(b_status.name(), "b");
  EXPECT_EQ(b_status.key(), (*b)->key());
  EXPECT_EQ(b_status.offset(), 64u);
  EXPECT_EQ(b_status.byte_size(), 128u);

  auto one = client_->SystemSharedMemoryStatus("a");
  ASSERT_TRUE(one.ok()) << one.status();
  ASSERT_EQ(one->regions_size(), 1);
  EXPECT_EQ(one->regions().at("a").key(), (*a)->key());
  EXPECT_EQ(one->regions().at("a").byte_size(), 256u);

  ASSERT_TRUE(client_->UnregisterSystemSharedMemory("a").ok());
  all = client_->SystemSharedMemoryStatus();
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->regions_size(), 1);
  EXPECT_EQ(all->regions().count("b"), 1u);
  EXPECT_FALSE(client_->SystemSharedMemoryStatus("a").ok());

  ASSERT_TRUE(client_->UnregisterSystemSharedMemory().ok());
  all = client_->SystemSharedMemoryStatus();
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->regions_size(), 0);
}

TEST_F(SharedMemoryClientTest, RegisteringAMissingKeyFails) {
  EXPECT_FALSE(
      client_->RegisterSystemSharedMemory("missing", UniqueSharedMemoryKey("never_created"), 64)
          .ok());
  const auto all = client_->SystemSharedMemoryStatus();
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->regions_size(), 0);
}

TEST_F(SharedMemoryClientTest, InferThroughSharedMemoryEqualsPlainInferAndTheReference) {
  const std::vector<std::pair<std::string, Shape>> cases = {
      {kConvModel, {2, 8, 16, 16}}, {kGemmModel, {3, 64}}, {kGroupNormModel, {2, 8, 5, 7}}};
  uint32_t seed = 40;
  for (const auto& [model, shape] : cases) {
    SCOPED_TRACE(model);
    const Tensor input = Input(shape, seed++);
    auto plain = client_->Infer(model, {input});
    ASSERT_TRUE(plain.ok()) << plain.status();
    ASSERT_EQ(plain->outputs.size(), 1u);
    const uint64_t input_bytes = input.data.size() * sizeof(float);
    const uint64_t output_bytes = plain->outputs[0].data.size() * sizeof(float);

    // Both tensors at non-zero offsets, the output region larger than needed.
    auto input_region = Region("in", 64 + input_bytes);
    auto output_region = Region("out", 128 + output_bytes + 100);
    ASSERT_TRUE(input_region && output_region);
    ASSERT_TRUE(input_region->WriteFloats(64, input.data).ok());
    Tensor shared{"input", shape, {}, SharedMemoryLocation{"in", input_bytes, 64}};
    InferOptions options;
    options.request_id = "shm-" + model;
    options.output_shared_memory["output"] = {"out", output_bytes + 100, 128};
    auto result = client_->Infer(model, {shared}, options);
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_EQ(result->id, "shm-" + model);
    ASSERT_EQ(result->outputs.size(), 1u);
    const Tensor& output = result->outputs[0];
    EXPECT_EQ(output.name, "output");
    EXPECT_EQ(output.shape, plain->outputs[0].shape);
    EXPECT_TRUE(output.data.empty());
    ASSERT_TRUE(output.shared_memory.has_value());
    EXPECT_EQ(output.shared_memory->region, "out");
    EXPECT_EQ(output.shared_memory->offset, 128u);
    EXPECT_EQ(output.shared_memory->byte_size, output_bytes);

    const auto values = output_region->Floats(128, NumElements(output.shape));
    ASSERT_TRUE(values.ok()) << values.status();
    const std::vector<float> got(values->begin(), values->end());
    EXPECT_LE(RelativeL2Error(got, plain->outputs[0].data), 1e-6);
    const auto expected = ReferenceOutput(server_->repository(), model, shape, input.data);
    ASSERT_TRUE(expected.ok()) << expected.status();
    EXPECT_LE(RelativeL2Error(got, *expected), 1e-6);
    ASSERT_TRUE(client_->UnregisterSystemSharedMemory().ok());
  }
}

TEST_F(SharedMemoryClientTest, MixesASharedMemoryInputWithAnInlineOutput) {
  const Tensor input = Input({1, 8, 3, 3}, 50);
  auto region = Region("in", input.data.size() * sizeof(float));
  ASSERT_TRUE(region);
  ASSERT_TRUE(region->WriteFloats(0, input.data).ok());
  const Tensor shared{"input", input.shape, {}, SharedMemoryLocation{"in", region->size(), 0}};
  auto result = client_->Infer(kGroupNormModel, {shared});
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->outputs.size(), 1u);
  EXPECT_FALSE(result->outputs[0].shared_memory.has_value());
  const auto expected =
      ReferenceOutput(server_->repository(), kGroupNormModel, input.shape, input.data);
  ASSERT_TRUE(expected.ok()) << expected.status();
  EXPECT_LE(RelativeL2Error(result->outputs[0].data, *expected), 1e-6);
}

TEST_F(SharedMemoryClientTest, AsyncInferThroughSharedMemory) {
  const Tensor input = Input({2, 64}, 51);
  const uint64_t bytes = input.data.size() * sizeof(float);
  auto input_region = Region("in", bytes);
  auto output_region = Region("out", bytes);  // gemm: [2, 64] in, [2, 64] out
  ASSERT_TRUE(input_region && output_region);
  ASSERT_TRUE(input_region->WriteFloats(0, input.data).ok());
  InferOptions options;
  options.output_shared_memory["output"] = {"out", bytes, 0};
  auto completions = std::make_shared<Completions>(1);
  client_->AsyncInfer(kGemmModel,
                      {{"input", input.shape, {}, SharedMemoryLocation{"in", bytes, 0}}}, options,
                      [completions](absl::StatusOr<InferResult> result) {
                        completions->Add(0, std::move(result));
                      });
  const auto results = completions->Wait();
  ASSERT_TRUE(results[0].second.ok()) << results[0].second.status();
  const Tensor& output = results[0].second->outputs.at(0);
  ASSERT_TRUE(output.shared_memory.has_value());
  const auto values = output_region->Floats(0, NumElements(output.shape));
  ASSERT_TRUE(values.ok()) << values.status();
  const auto expected = ReferenceOutput(server_->repository(), kGemmModel, input.shape, input.data);
  ASSERT_TRUE(expected.ok()) << expected.status();
  EXPECT_LE(RelativeL2Error(std::vector<float>(values->begin(), values->end()), *expected), 1e-6);
}

TEST_F(SharedMemoryClientTest, AnOutputRegionTooSmallIsAnError) {
  const Tensor input = Input({2, 64}, 52);
  auto output_region = Region("small", 16);
  ASSERT_TRUE(output_region);
  InferOptions options;
  options.output_shared_memory["output"] = {"small", 16, 0};
  const auto result = client_->Infer(kGemmModel, {input}, options);
  EXPECT_FALSE(result.ok());
}

TEST(BuildInferRequestTest, SharedMemoryTensorsCarryTritonsParametersAndNoBytes) {
  const std::vector<Tensor> inputs = {
      {"a", {2, 3}, {}, SharedMemoryLocation{"region_a", 24, 0}},
      {"b", {1}, {5.0f}},
      {"c", {4}, {}, SharedMemoryLocation{"region_c", 16, 32}},
  };
  InferOptions options;
  options.outputs = {"y", "x"};
  options.output_shared_memory["x"] = {"region_x", 100, 8};
  options.output_shared_memory["z"] = {"region_z", 50, 0};
  const auto request = BuildInferRequest("m", inputs, options);
  ASSERT_TRUE(request.ok()) << request.status();

  // Only the inline input has bytes; Triton pairs them with inputs in order.
  ASSERT_EQ(request->raw_input_contents_size(), 1);
  EXPECT_EQ(request->raw_input_contents(0).size(), sizeof(float));
  const auto& a = request->inputs(0).parameters();
  EXPECT_EQ(a.at("shared_memory_region").string_param(), "region_a");
  EXPECT_EQ(a.at("shared_memory_byte_size").int64_param(), 24);
  EXPECT_EQ(a.count("shared_memory_offset"), 0u);
  EXPECT_TRUE(request->inputs(1).parameters().empty());
  EXPECT_EQ(request->inputs(2).parameters().at("shared_memory_offset").int64_param(), 32);

  // Listed outputs keep their place; a shared-memory output not listed is added.
  ASSERT_EQ(request->outputs_size(), 3);
  EXPECT_EQ(request->outputs(0).name(), "y");
  EXPECT_TRUE(request->outputs(0).parameters().empty());
  EXPECT_EQ(request->outputs(1).name(), "x");
  EXPECT_EQ(request->outputs(1).parameters().at("shared_memory_region").string_param(), "region_x");
  EXPECT_EQ(request->outputs(1).parameters().at("shared_memory_byte_size").int64_param(), 100);
  EXPECT_EQ(request->outputs(1).parameters().at("shared_memory_offset").int64_param(), 8);
  EXPECT_EQ(request->outputs(2).name(), "z");
  EXPECT_EQ(request->outputs(2).parameters().at("shared_memory_region").string_param(), "region_z");
}

TEST(BuildInferRequestTest, RefusesSharedMemoryThatDisagreesWithTheTensor) {
  const auto both =
      BuildInferRequest("m", {{"a", {2}, {1.0f, 2.0f}, SharedMemoryLocation{"r", 8, 0}}}, {});
  EXPECT_THAT(both.status().message(), HasSubstr("both data and a shared-memory location"));
  const auto short_region =
      BuildInferRequest("m", {{"a", {2, 3}, {}, SharedMemoryLocation{"r", 20, 0}}}, {});
  EXPECT_THAT(short_region.status().message(), HasSubstr("needs 24 bytes"));
  const auto unnamed = BuildInferRequest("m", {{"a", {1}, {}, SharedMemoryLocation{"", 4, 0}}}, {});
  EXPECT_THAT(unnamed.status().message(), HasSubstr("needs a region name"));
  InferOptions options;
  options.output_shared_memory["y"] = {"r", uint64_t{1} << 63, 0};
  const auto huge = BuildInferRequest("m", {}, options);
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ClientWithoutServerTest, UnreachableServersAreUnavailable) {
  // Port 1 on the loopback: nothing listens there, the connection is refused.
  auto client = Client::Create("127.0.0.1:1");
  const auto live = client->ServerLive(absl::Seconds(20));
  EXPECT_EQ(live.status().code(), absl::StatusCode::kUnavailable) << live.status();
}

}  // namespace
}  // namespace fuseserve::client
