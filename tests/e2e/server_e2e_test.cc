// End to end: the real `fuseserve` binary on ephemeral ports with a temporary
// repository (the small default models plus a broken one), driven over gRPC
// and HTTP exactly as a client would.

#include <cmath>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <random>
#include <string>
#include <thread>
#include <system_error>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "client/default_repository.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "proto/grpc_service.grpc.pb.h"
#include "server/models/model_factory.h"
#include "server/repository/model_config_loader.h"
#include "server/repository/safetensors.h"
#include "server/repository/safetensors_writer.h"
#include "tests/e2e/repository_editing.h"
#include "tests/e2e/server_process.h"
#include "tests/testing/test_dir.h"

namespace fuseserve {
namespace {

using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;
using testing::CopyModel;
using testing::MetricValue;
using testing::ServerProcess;

constexpr char kConv[] = "convtranspose_gelu_groupnorm";
constexpr char kGemm[] = "gemm_bias_hardtanh_mish_groupnorm";
constexpr char kGroupNorm[] = "groupnorm";
constexpr char kBroken[] = "broken_groupnorm";

// The server binary: $FUSESERVE_BINARY when set (a GPU host runs a packed
// copy), else the one this build made.
const char* ServerBinary() {
  const char* path = std::getenv("FUSESERVE_BINARY");
  return path != nullptr ? path : FUSESERVE_BINARY;
}

// Writes into `root` the small default repository plus a groupnorm model
// whose weights lack "gn.bias" (it must fail alone, naming the tensor).
void WriteRepository(const std::filesystem::path& root) {
  const absl::Status written = WriteDefaultRepository(root.string(), RepositorySize::kSmall);
  EXPECT_TRUE(written.ok()) << written;
  const std::filesystem::path broken = root / kBroken;
  const absl::Status copied = CopyModel(root, kGroupNorm, kBroken);
  EXPECT_TRUE(copied.ok()) << copied;
  auto weights = SafetensorsFile::Open((root / kGroupNorm / "1" / "model.safetensors").string());
  EXPECT_TRUE(weights.ok());
  std::vector<NamedF32Tensor> tensors;
  const SafetensorsTensor& weight = (*weights)->tensors().at("gn.weight");
  const float* data = reinterpret_cast<const float*>(weight.data);
  tensors.push_back({"gn.weight", weight.shape, std::vector<float>(data, data + weight.byte_size / 4)});
  EXPECT_TRUE(WriteSafetensorsFile((broken / "1" / "model.safetensors").string(), tensors).ok());
}

// WriteRepository's models in a directory of their own (mkdtemp's name is
// unique even where a test process reuses the pid of an earlier one that
// left its repository behind), removed when the test ends, its assertions'
// early returns included.
class ScopedRepository {
 public:
  ScopedRepository() { WriteRepository(directory_.path()); }

  const std::string& path() const { return directory_.path(); }

 private:
  TestDir directory_{"fuseserve-e2e-repo"};
};

std::vector<float> RandomValues(int64_t count, uint32_t seed) {
  std::mt19937 engine(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> values(count);
  for (float& value : values) value = dist(engine);
  return values;
}

inference::ModelInferRequest MakeRequest(const std::string& model, const Shape& shape,
                                         const std::vector<float>& values) {
  inference::ModelInferRequest request;
  request.set_model_name(model);
  request.set_id("req-42");
  auto* input = request.add_inputs();
  input->set_name("input");
  input->set_datatype("FP32");
  for (int64_t dim : shape) input->add_shape(dim);
  request.add_raw_input_contents(std::string(reinterpret_cast<const char*>(values.data()),
                                             values.size() * sizeof(float)));
  return request;
}

// The output `model` of `repository` computes in-process on the same weights.
std::vector<float> ExpectedOutput(const std::string& repository, const std::string& model,
                                  const Shape& shape, const std::vector<float>& input) {
  auto config = LoadModelConfig((std::filesystem::path(repository) / model).string());
  EXPECT_TRUE(config.ok()) << config.status();
  auto weights = SafetensorsFile::Open(
      (std::filesystem::path(repository) / model / "1" / "model.safetensors").string());
  EXPECT_TRUE(weights.ok()) << weights.status();
  auto bound = CreateModel(*config, **weights);
  EXPECT_TRUE(bound.ok()) << bound.status();
  auto output_shape = (*bound)->OutputShape(shape);
  EXPECT_TRUE(output_shape.ok());
  std::vector<float> output(NumElements(*output_shape));
  ThreadPool pool(1);
  EXPECT_TRUE((*bound)->RunOnCpu(input.data(), shape, output.data(), pool).ok());
  return output;
}

// sqrt(sum (got - expected)^2 / sum expected^2).
double RelativeL2(const float* got, const std::vector<float>& expected) {
  double error = 0, norm = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    error += std::pow(double{got[i]} - expected[i], 2);
    norm += std::pow(double{expected[i]}, 2);
  }
  return std::sqrt(error / norm);
}

// One asynchronous ModelInfer; `done` is notified once it has its status.
struct AsyncInfer {
  // `request` must outlive the call.
  void Start(inference::GRPCInferenceService::Stub& stub,
             const inference::ModelInferRequest& request) {
    stub.async()->ModelInfer(&context, &request, &response, [this](grpc::Status result) {
      status = std::move(result);
      done.Notify();
    });
  }

  grpc::ClientContext context;
  inference::ModelInferResponse response;
  grpc::Status status;
  absl::Notification done;
};

// The accuracy a served model is held to: the CPU backend reproduces the
// in-process model; a GPU instance meets the contract of the precision it
// reports (SPEC.md §1.4).
struct Tolerance {
  double rel_l2;
  std::string device;
};

absl::StatusOr<Tolerance> ToleranceOf(inference::GRPCInferenceService::Stub& stub,
                                      const std::string& model) {
  inference::ModelMetadataRequest request;
  request.set_name(model);
  inference::ModelMetadataResponse metadata;
  grpc::ClientContext context;
  const grpc::Status status = stub.ModelMetadata(&context, request, &metadata);
  if (!status.ok()) return absl::InternalError("ModelMetadata: " + status.error_message());
  const std::string& device = metadata.properties().at("device");
  if (!absl::StartsWith(device, "gpu")) return Tolerance{1e-6, device};
  return Tolerance{metadata.properties().at("precision") == "tf32" ? 1e-3 : 5e-6, device};
}

class ServerE2eTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    repository_ = new ScopedRepository();
    auto server = ServerProcess::Start(ServerBinary(), repository_->path());
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = server->release();
  }
  static void TearDownTestSuite() {
    delete server_;
    delete repository_;
  }

  void SetUp() override {
    ASSERT_NE(server_, nullptr);
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(INT32_MAX);
    args.SetMaxSendMessageSize(INT32_MAX);
    channel_ = grpc::CreateCustomChannel(server_->grpc_target(),
                                         grpc::InsecureChannelCredentials(), args);
    stub_ = inference::GRPCInferenceService::NewStub(channel_);
  }

  grpc::Status Infer(const inference::ModelInferRequest& request,
                     inference::ModelInferResponse* response) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    return stub_->ModelInfer(&context, request, response);
  }

  std::vector<float> Expected(const std::string& model, const Shape& shape,
                              const std::vector<float>& input) {
    return ExpectedOutput(repository_->path(), model, shape, input);
  }

  static ScopedRepository* repository_;
  static ServerProcess* server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<inference::GRPCInferenceService::Stub> stub_;
};

ScopedRepository* ServerE2eTest::repository_ = nullptr;
ServerProcess* ServerE2eTest::server_ = nullptr;

TEST_F(ServerE2eTest, ReportsLivenessReadinessAndPerModelReadiness) {
  grpc::ClientContext live_context, ready_context;
  inference::ServerLiveResponse live;
  inference::ServerReadyResponse ready;
  ASSERT_TRUE(stub_->ServerLive(&live_context, {}, &live).ok());
  ASSERT_TRUE(stub_->ServerReady(&ready_context, {}, &ready).ok());
  EXPECT_TRUE(live.live());
  EXPECT_TRUE(ready.ready()) << "every model that loaded is ready";

  for (const auto& [model, expected] : std::map<std::string, bool>{
           {kConv, true}, {kGemm, true}, {kGroupNorm, true}, {kBroken, false}, {"nope", false}}) {
    grpc::ClientContext context;
    inference::ModelReadyRequest request;
    request.set_name(model);
    inference::ModelReadyResponse response;
    ASSERT_TRUE(stub_->ModelReady(&context, request, &response).ok());
    EXPECT_EQ(response.ready(), expected) << model;
  }
}

TEST_F(ServerE2eTest, ServerMetadataListsExtensions) {
  grpc::ClientContext context;
  inference::ServerMetadataResponse response;
  ASSERT_TRUE(stub_->ServerMetadata(&context, {}, &response).ok());
  EXPECT_EQ(response.name(), "fuseserve");
  EXPECT_FALSE(response.version().empty());
  EXPECT_THAT(response.extensions(), ::testing::IsSupersetOf({"model_configuration", "statistics"}));
}

TEST_F(ServerE2eTest, ModelMetadataUsesTritonShapesAndReportsPrecision) {
  grpc::ClientContext context;
  inference::ModelMetadataRequest request;
  request.set_name(kConv);
  inference::ModelMetadataResponse response;
  ASSERT_TRUE(stub_->ModelMetadata(&context, request, &response).ok());
  EXPECT_EQ(response.platform(), kConv);
  EXPECT_THAT(response.versions(), UnorderedElementsAre("1"));
  ASSERT_EQ(response.inputs_size(), 1);
  EXPECT_EQ(response.inputs(0).name(), "input");
  EXPECT_EQ(response.inputs(0).datatype(), "FP32");
  EXPECT_THAT(response.inputs(0).shape(), ::testing::ElementsAre(-1, 8, 16, 16));
  EXPECT_THAT(response.outputs(0).shape(), ::testing::ElementsAre(-1, 8, 18, 18));
  EXPECT_EQ(response.properties().at("precision"), "tf32");
}

TEST_F(ServerE2eTest, ModelConfigReturnsTheNormalisedConfig) {
  grpc::ClientContext context;
  inference::ModelConfigRequest request;
  request.set_name(kGemm);
  inference::ModelConfigResponse response;
  ASSERT_TRUE(stub_->ModelConfig(&context, request, &response).ok());
  EXPECT_EQ(response.config().name(), kGemm);
  EXPECT_EQ(response.config().platform(), kGemm);
  EXPECT_EQ(response.config().max_batch_size(), 16);
  EXPECT_EQ(response.config().parameters().at("precision").string_value(), "fp32");
  EXPECT_EQ(response.config().parameters().at("num_groups").string_value(), "8");
}

TEST_F(ServerE2eTest, InfersEveryFamilyAndEchoesTheRequestId) {
  const std::map<std::string, Shape> shapes = {
      {kConv, {2, 8, 16, 16}}, {kGemm, {3, 64}}, {kGroupNorm, {2, 8, 5, 7}}};
  uint32_t seed = 1;
  for (const auto& [model, shape] : shapes) {
    const std::vector<float> input = RandomValues(NumElements(shape), seed++);
    inference::ModelInferResponse response;
    const grpc::Status status = Infer(MakeRequest(model, shape, input), &response);
    ASSERT_TRUE(status.ok()) << model << ": " << status.error_message();
    EXPECT_EQ(response.id(), "req-42");
    EXPECT_EQ(response.model_name(), model);
    EXPECT_EQ(response.model_version(), "1");
    ASSERT_EQ(response.outputs_size(), 1);
    ASSERT_EQ(response.raw_output_contents_size(), 1);
    const std::vector<float> expected = Expected(model, shape, input);
    ASSERT_EQ(response.raw_output_contents(0).size(), expected.size() * sizeof(float)) << model;
    const float* got = reinterpret_cast<const float*>(response.raw_output_contents(0).data());
    const absl::StatusOr<Tolerance> tolerance = ToleranceOf(*stub_, model);
    ASSERT_TRUE(tolerance.ok()) << tolerance.status();
    EXPECT_LE(RelativeL2(got, expected), tolerance->rel_l2) << model << " on " << tolerance->device;
  }
}

TEST_F(ServerE2eTest, MalformedRequestsGetPreciseCodesAndTheServerKeepsServing) {
  const std::vector<float> values = RandomValues(8 * 4 * 4, 7);
  struct Case {
    std::string name;
    inference::ModelInferRequest request;
    grpc::StatusCode code;
    std::string message;
  };
  std::vector<Case> cases;
  cases.push_back({"unknown model", MakeRequest("nope", {1, 8, 4, 4}, values),
                   grpc::StatusCode::NOT_FOUND, "unknown model"});
  cases.push_back({"failed model", MakeRequest(kBroken, {1, 8, 4, 4}, values),
                   grpc::StatusCode::UNAVAILABLE, "gn.bias"});
  auto wrong_name = MakeRequest(kGroupNorm, {1, 8, 4, 4}, values);
  wrong_name.mutable_inputs(0)->set_name("x");
  cases.push_back({"wrong input name", wrong_name, grpc::StatusCode::INVALID_ARGUMENT, "\"x\""});
  auto wrong_type = MakeRequest(kGroupNorm, {1, 8, 4, 4}, values);
  wrong_type.mutable_inputs(0)->set_datatype("FP16");
  cases.push_back({"wrong datatype", wrong_type, grpc::StatusCode::INVALID_ARGUMENT, "FP16"});
  cases.push_back({"wrong channels", MakeRequest(kGroupNorm, {1, 4, 8, 4}, values),
                   grpc::StatusCode::INVALID_ARGUMENT, "dimension 1"});
  auto short_bytes = MakeRequest(kGroupNorm, {1, 8, 4, 4}, values);
  short_bytes.mutable_raw_input_contents(0)->resize(10);
  cases.push_back({"byte count", short_bytes, grpc::StatusCode::INVALID_ARGUMENT, "10 bytes"});
  const std::vector<float> big = RandomValues(9 * 8 * 4, 3);
  cases.push_back({"batch too large", MakeRequest(kGroupNorm, {9, 8, 4, 1}, big),
                   grpc::StatusCode::INVALID_ARGUMENT, "max_batch_size"});
  for (const Case& test : cases) {
    inference::ModelInferResponse response;
    const grpc::Status status = Infer(test.request, &response);
    EXPECT_EQ(status.error_code(), test.code) << test.name << ": " << status.error_message();
    EXPECT_THAT(status.error_message(), HasSubstr(test.message)) << test.name;
  }
  inference::ModelInferResponse response;
  EXPECT_TRUE(Infer(MakeRequest(kGroupNorm, {1, 8, 4, 4}, values), &response).ok());
}

TEST_F(ServerE2eTest, RepositoryIndexExplainsTheFailedModel) {
  grpc::ClientContext context;
  inference::RepositoryIndexResponse response;
  ASSERT_TRUE(stub_->RepositoryIndex(&context, {}, &response).ok());
  std::map<std::string, std::string> states, reasons;
  for (const auto& model : response.models()) {
    states[model.name()] = model.state();
    reasons[model.name()] = model.reason();
  }
  EXPECT_EQ(states[kConv], "READY");
  EXPECT_EQ(states[kGemm], "READY");
  EXPECT_EQ(states[kGroupNorm], "READY");
  EXPECT_EQ(states[kBroken], "UNAVAILABLE");
  EXPECT_THAT(reasons[kBroken], HasSubstr("gn.bias"));
}

TEST_F(ServerE2eTest, HttpHealthEndpointsFollowReadiness) {
  httplib::Client http("127.0.0.1", server_->metrics_port());
  EXPECT_EQ(http.Get("/v2/health/live")->status, 200);
  EXPECT_EQ(http.Get("/v2/health/ready")->status, 200);
  EXPECT_EQ(http.Get("/v2/models/groupnorm/ready")->status, 200);
  EXPECT_EQ(http.Get("/v2/models/groupnorm/versions/1/ready")->status, 200);
  EXPECT_EQ(http.Get("/v2/models/broken_groupnorm/ready")->status, 503);
  EXPECT_EQ(http.Get("/v2/models/nope/ready")->status, 404);
}

// On a GPU host (scripts/gpu/run.sh sets FUSESERVE_EXPECT_GPU=1) KIND_AUTO
// must place every model on the GPU, and GPU memory must be reported.
TEST_F(ServerE2eTest, PlacesModelsOnTheGpuWhenOneIsPresent) {
  if (std::getenv("FUSESERVE_EXPECT_GPU") == nullptr) {
    GTEST_SKIP() << "not a GPU host (set FUSESERVE_EXPECT_GPU=1 on one)";
  }
  for (const char* model : {kConv, kGemm, kGroupNorm}) {
    grpc::ClientContext context;
    inference::ModelMetadataRequest request;
    request.set_name(model);
    inference::ModelMetadataResponse response;
    ASSERT_TRUE(stub_->ModelMetadata(&context, request, &response).ok()) << model;
    EXPECT_THAT(response.properties().at("device"), ::testing::StartsWith("gpu")) << model;
  }
  httplib::Client http("127.0.0.1", server_->metrics_port());
  auto metrics = http.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_THAT(metrics->body, HasSubstr("nv_gpu_memory_used_bytes{gpu_uuid=\"GPU-"));
}

// A server of its own, so that its counters start from zero.
TEST(ServerE2eMetricsTest, MetricsAndStatisticsCountExactlyAndSigtermExitsCleanly) {
  const ScopedRepository scoped_repository;
  const std::string& repository = scoped_repository.path();
  auto server = ServerProcess::Start(ServerBinary(), repository);
  ASSERT_TRUE(server.ok()) << server.status();
  auto channel = grpc::CreateChannel((*server)->grpc_target(), grpc::InsecureChannelCredentials());
  auto stub = inference::GRPCInferenceService::NewStub(channel);

  constexpr int kRequests = 5;
  const Shape shape = {2, 8, 3, 3};
  const std::vector<float> values = RandomValues(NumElements(shape), 11);
  for (int i = 0; i < kRequests; ++i) {
    grpc::ClientContext context;
    inference::ModelInferResponse response;
    ASSERT_TRUE(stub->ModelInfer(&context, MakeRequest(kGroupNorm, shape, values), &response).ok());
  }
  {
    grpc::ClientContext context;
    inference::ModelInferResponse response;
    auto bad = MakeRequest(kGroupNorm, shape, values);
    bad.mutable_inputs(0)->set_datatype("INT8");
    EXPECT_FALSE(stub->ModelInfer(&context, bad, &response).ok());
  }

  httplib::Client http("127.0.0.1", (*server)->metrics_port());
  auto metrics = http.Get("/metrics");
  ASSERT_TRUE(metrics);
  ASSERT_EQ(metrics->status, 200);
  const std::map<std::string, std::string> labels = {{"model", kGroupNorm}, {"version", "1"}};
  EXPECT_EQ(MetricValue(metrics->body, "nv_inference_request_success", labels), kRequests);
  EXPECT_EQ(MetricValue(metrics->body, "nv_inference_count", labels), 2 * kRequests);
  EXPECT_EQ(MetricValue(metrics->body, "nv_inference_exec_count", labels), kRequests);
  EXPECT_EQ(MetricValue(metrics->body, "nv_inference_request_failure",
                        {{"model", kGroupNorm}, {"version", "1"}, {"reason", "OTHER"}}),
            1);
  EXPECT_EQ(MetricValue(metrics->body, "nv_inference_pending_request_count", labels), 0);
  EXPECT_EQ(MetricValue(metrics->body, "nv_inference_request_duration_histogram_us_count", labels),
            kRequests);
  // Triton's pinned-memory gauges: the page-locked pool of answer buffers,
  // which holds the answers' buffers once they are sent (refreshed every
  // 250 ms). Answers are page-locked only on a GPU host.
  if (std::getenv("FUSESERVE_EXPECT_GPU") == nullptr) {
    EXPECT_EQ(MetricValue(metrics->body, "nv_pinned_memory_pool_total_bytes", {}), 0);
    EXPECT_EQ(MetricValue(metrics->body, "nv_pinned_memory_pool_used_bytes", {}), 0);
  } else {
    double held = 0;
    for (int attempt = 0; attempt < 40 && held <= 0; ++attempt) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      auto refreshed = http.Get("/metrics");
      ASSERT_TRUE(refreshed);
      held = MetricValue(refreshed->body, "nv_pinned_memory_pool_total_bytes", {});
    }
    EXPECT_GE(held, NumElements(shape) * sizeof(float)) << "an answer's buffer is held";
  }

  grpc::ClientContext context;
  inference::ModelStatisticsRequest request;
  request.set_name(kGroupNorm);
  inference::ModelStatisticsResponse statistics;
  ASSERT_TRUE(stub->ModelStatistics(&context, request, &statistics).ok());
  ASSERT_EQ(statistics.model_stats_size(), 1);
  const auto& stats = statistics.model_stats(0);
  EXPECT_EQ(stats.inference_count(), 2u * kRequests);
  EXPECT_EQ(stats.execution_count(), static_cast<uint64_t>(kRequests));
  EXPECT_EQ(stats.inference_stats().success().count(), static_cast<uint64_t>(kRequests));
  EXPECT_EQ(stats.inference_stats().fail().count(), 1u);
  EXPECT_GT(stats.inference_stats().compute_infer().ns(), 0u);

  absl::StatusOr<int> exit_code = (*server)->Terminate();
  ASSERT_TRUE(exit_code.ok()) << exit_code.status();
  EXPECT_EQ(*exit_code, 0) << (*server)->Log();
  EXPECT_THAT((*server)->Log(), HasSubstr("loaded model groupnorm"));
}

// --max-request-bytes: gRPC refuses a larger request before it is decoded,
// with RESOURCE_EXHAUSTED, and the server goes on serving smaller ones.
TEST(ServerE2eCommandLineTest, RefusesRequestsAboveMaxRequestBytesAndKeepsServing) {
  const ScopedRepository scoped_repository;
  const std::string& repository = scoped_repository.path();
  auto server = ServerProcess::Start(ServerBinary(), repository, {"--max-request-bytes=65536"});
  ASSERT_TRUE(server.ok()) << server.status();
  auto channel = grpc::CreateChannel((*server)->grpc_target(), grpc::InsecureChannelCredentials());
  auto stub = inference::GRPCInferenceService::NewStub(channel);

  const Shape large = {1, 8, 64, 64};  // 128 KiB of raw input
  inference::ModelInferResponse refused;
  grpc::ClientContext refused_context;
  const grpc::Status too_large = stub->ModelInfer(
      &refused_context, MakeRequest(kGroupNorm, large, RandomValues(NumElements(large), 7)),
      &refused);
  EXPECT_EQ(too_large.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << too_large.error_message();

  const Shape small = {1, 8, 8, 8};  // 2 KiB
  inference::ModelInferResponse answered;
  grpc::ClientContext answered_context;
  const grpc::Status ok = stub->ModelInfer(
      &answered_context, MakeRequest(kGroupNorm, small, RandomValues(NumElements(small), 8)),
      &answered);
  EXPECT_TRUE(ok.ok()) << ok.error_message();
  EXPECT_EQ(answered.raw_output_contents_size(), 1);

  auto exit_code = (*server)->Terminate();
  ASSERT_TRUE(exit_code.ok()) << exit_code.status();
  EXPECT_EQ(*exit_code, 0) << (*server)->Log();
}

// Two servers never share a gRPC port (gRPC's own listener would have set
// SO_REUSEPORT and split the connections between them): the second one
// stops, naming the address.
TEST(ServerE2eCommandLineTest, GrpcPortInUseStopsTheSecondServerNamingTheAddress) {
  const ScopedRepository scoped_repository;
  const std::string& repository = scoped_repository.path();
  auto first = ServerProcess::Start(ServerBinary(), repository);
  ASSERT_TRUE(first.ok()) << first.status();
  const std::string port = std::to_string((*first)->grpc_port());
  auto second = ServerProcess::Start(ServerBinary(), repository,
                                     {"--grpc-address=127.0.0.1", "--grpc-port=" + port},
                                     absl::Seconds(30));
  ASSERT_FALSE(second.ok());
  EXPECT_THAT(std::string(second.status().message()),
              HasSubstr("cannot serve gRPC: cannot bind 127.0.0.1:" + port));
  EXPECT_THAT(std::string(second.status().message()), HasSubstr("in use"));
}

TEST(ServerE2eCommandLineTest, RejectsAMissingRepositoryWithAClearMessage) {
  auto server = ServerProcess::Start(ServerBinary(), "/nonexistent/repository", {},
                                     absl::Seconds(20));
  ASSERT_FALSE(server.ok());
  EXPECT_THAT(std::string(server.status().message()), HasSubstr("/nonexistent/repository"));
}

// How a server receives ModelInfer and sends answers: completion-queue
// threads (the default, which send the answers of calls handed back to them;
// one of them, to exercise a single queue; answers handed back from response
// threads) or gRPC's callback API, with or without response threads.
struct InferPath {
  const char* name;
  std::vector<std::string> flags;
};

void PrintTo(const InferPath& path, std::ostream* os) { *os << path.name; }

std::string InferPathName(const ::testing::TestParamInfo<InferPath>& info) {
  return info.param.name;
}

const InferPath kInferPaths[] = {
    {"Defaults", {}},
    {"QueuesAndResponseThreads", {"--response-threads=2"}},
    {"OneQueueNoResponseThreads", {"--grpc-infer-threads=1", "--response-threads=0"}},
    {"CallbackApiAndResponseThreads", {"--grpc-infer-threads=0", "--response-threads=2"}},
    {"CallbackApiNoResponseThreads", {"--grpc-infer-threads=0", "--response-threads=0"}},
};

class ServerE2eInferPathTest : public ::testing::TestWithParam<InferPath> {};

INSTANTIATE_TEST_SUITE_P(Paths, ServerE2eInferPathTest, ::testing::ValuesIn(kInferPaths),
                         InferPathName);

// Concurrent requests, batched, are each answered with their own output; a
// request for an unknown model, sent among them, gets NOT_FOUND.
TEST_P(ServerE2eInferPathTest, AnswersConcurrentRequestsWithTheirOwnOutputs) {
  const ScopedRepository scoped_repository;
  const std::string& repository = scoped_repository.path();
  auto server = ServerProcess::Start(ServerBinary(), repository, GetParam().flags);
  ASSERT_TRUE(server.ok()) << server.status();
  auto channel = grpc::CreateChannel((*server)->grpc_target(), grpc::InsecureChannelCredentials());
  auto stub = inference::GRPCInferenceService::NewStub(channel);

  constexpr int kRequests = 48;
  const Shape shape = {1, 64};
  struct Call : AsyncInfer {
    std::vector<float> input;
    inference::ModelInferRequest request;
  };
  std::vector<std::unique_ptr<Call>> calls;
  for (int i = 0; i < kRequests; ++i) {
    calls.push_back(std::make_unique<Call>());
    Call* call = calls.back().get();
    call->input = RandomValues(NumElements(shape), 100 + i);
    call->request = MakeRequest(kGemm, shape, call->input);
    call->context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    call->Start(*stub, call->request);
  }
  inference::ModelInferRequest unknown = MakeRequest("no_such_model", shape, calls[0]->input);
  inference::ModelInferResponse unknown_response;
  grpc::ClientContext unknown_context;
  const grpc::Status unknown_status =
      stub->ModelInfer(&unknown_context, unknown, &unknown_response);
  EXPECT_EQ(unknown_status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(unknown_status.error_message(), HasSubstr("no_such_model"));
  const absl::StatusOr<Tolerance> tolerance = ToleranceOf(*stub, kGemm);
  ASSERT_TRUE(tolerance.ok()) << tolerance.status();
  for (auto& call : calls) {
    ASSERT_TRUE(call->done.WaitForNotificationWithTimeout(absl::Seconds(60)));
    ASSERT_TRUE(call->status.ok()) << call->status.error_message();
    const std::vector<float> expected = ExpectedOutput(repository, kGemm, shape, call->input);
    ASSERT_EQ(call->response.raw_output_contents(0).size(), expected.size() * sizeof(float));
    const float* got = reinterpret_cast<const float*>(call->response.raw_output_contents(0).data());
    EXPECT_LE(RelativeL2(got, expected), tolerance->rel_l2) << "on " << tolerance->device;
  }
  absl::StatusOr<int> exit_code = (*server)->Terminate();
  ASSERT_TRUE(exit_code.ok()) << exit_code.status();
  EXPECT_EQ(*exit_code, 0) << (*server)->Log();
}

}  // namespace
}  // namespace fuseserve

namespace fuseserve {
namespace {

// SIGTERM with requests queued: every accepted request is answered OK, the
// queue delay is not waited out, and the server exits 0 (SPEC.md §7). The
// model waits up to 30 s to fill a batch of 8, so the 6 requests stay queued
// until the shutdown dispatches them — on any device speed.
class ServerE2eShutdownTest : public ::testing::TestWithParam<InferPath> {};

INSTANTIATE_TEST_SUITE_P(Paths, ServerE2eShutdownTest, ::testing::ValuesIn(kInferPaths),
                         InferPathName);

// The default repository plus patient_groupnorm, a copy of the groupnorm
// model that waits up to 30 s to fill a batch of 8; a server on it and a stub.
// Members are destroyed in reverse: the server stops before its repository
// is removed.
struct PatientServer {
  std::optional<ScopedRepository> repository;
  std::unique_ptr<ServerProcess> server;
  std::unique_ptr<inference::GRPCInferenceService::Stub> stub;
};

void StartPatientServer(const std::vector<std::string>& flags, PatientServer* out) {
  const std::string& repository = out->repository.emplace().path();
  ASSERT_TRUE(CopyModel(repository, kGroupNorm, "patient_groupnorm",
                        [](inference::ModelConfig& config) {
                          config.mutable_dynamic_batching()->set_max_queue_delay_microseconds(
                              30000000);
                        })
                  .ok());
  auto server = ServerProcess::Start(ServerBinary(), repository, flags);
  ASSERT_TRUE(server.ok()) << server.status();
  out->server = *std::move(server);
  out->stub = inference::GRPCInferenceService::NewStub(
      grpc::CreateChannel(out->server->grpc_target(), grpc::InsecureChannelCredentials()));
}

// Polls the server's metric `name` of patient_groupnorm (with `extra_labels`)
// until it equals `value`, for at most 20 s; returns the last value read.
double AwaitPatientMetric(const ServerProcess& server, const std::string& name, double value,
                          std::map<std::string, std::string> extra_labels = {}) {
  httplib::Client http("127.0.0.1", server.metrics_port());
  std::map<std::string, std::string> labels = {{"model", "patient_groupnorm"}, {"version", "1"}};
  labels.insert(extra_labels.begin(), extra_labels.end());
  const absl::Time give_up = absl::Now() + absl::Seconds(20);
  double seen = -1;
  while (absl::Now() < give_up && seen != value) {
    auto metrics = http.Get("/metrics");
    if (metrics) seen = MetricValue(metrics->body, name, labels);
    absl::SleepFor(absl::Milliseconds(5));
  }
  return seen;
}

TEST_P(ServerE2eShutdownTest, SigtermDrainsQueuedRequests) {
  PatientServer patient;
  ASSERT_NO_FATAL_FAILURE(StartPatientServer(GetParam().flags, &patient));
  ServerProcess* server = patient.server.get();

  constexpr int kRequests = 6;
  const Shape shape = {1, 8, 32, 32};
  const inference::ModelInferRequest request =
      MakeRequest("patient_groupnorm", shape, RandomValues(NumElements(shape), 5));
  std::vector<std::unique_ptr<AsyncInfer>> calls;
  for (int i = 0; i < kRequests; ++i) {
    calls.push_back(std::make_unique<AsyncInfer>());
    calls.back()->Start(*patient.stub, request);
  }
  // Wait until the server holds all of them in its queue, then stop it.
  ASSERT_EQ(AwaitPatientMetric(*server, "nv_inference_pending_request_count", kRequests),
            kRequests);
  const absl::Time stop = absl::Now();
  absl::StatusOr<int> exit_code = server->Terminate();
  ASSERT_TRUE(exit_code.ok()) << exit_code.status();
  EXPECT_EQ(*exit_code, 0) << server->Log();
  EXPECT_LT(absl::Now() - stop, absl::Seconds(20)) << "shutdown waited for the queue delay";
  for (auto& call : calls) {
    ASSERT_TRUE(call->done.WaitForNotificationWithTimeout(absl::Seconds(60)));
    ASSERT_TRUE(call->status.ok()) << call->status.error_message();
    EXPECT_EQ(call->response.raw_output_contents(0).size(), NumElements(shape) * sizeof(float));
  }
  EXPECT_THAT(server->Log(), HasSubstr("draining"));
}

// A client that gives up on a queued request: the server notices within its
// queue's poll, drops the request with CANCELLED (counted as a CANCELED
// failure) without waiting for the batch to fill, and keeps serving.
TEST_P(ServerE2eInferPathTest, ClientCancellationDropsItsQueuedRequest) {
  PatientServer patient;
  ASSERT_NO_FATAL_FAILURE(StartPatientServer(GetParam().flags, &patient));
  ServerProcess* server = patient.server.get();

  const Shape shape = {1, 8, 16, 16};
  const inference::ModelInferRequest request =
      MakeRequest("patient_groupnorm", shape, RandomValues(NumElements(shape), 11));
  AsyncInfer call;
  call.Start(*patient.stub, request);
  ASSERT_EQ(AwaitPatientMetric(*server, "nv_inference_pending_request_count", 1), 1);
  call.context.TryCancel();
  ASSERT_TRUE(call.done.WaitForNotificationWithTimeout(absl::Seconds(20)));
  EXPECT_EQ(call.status.error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_EQ(AwaitPatientMetric(*server, "nv_inference_request_failure", 1, {{"reason", "CANCELED"}}),
            1)
      << server->Log();
  EXPECT_EQ(AwaitPatientMetric(*server, "nv_inference_pending_request_count", 0), 0);

  // The server still answers, on the same connection.
  const inference::ModelInferRequest next =
      MakeRequest(kGroupNorm, shape, RandomValues(NumElements(shape), 12));
  inference::ModelInferResponse response;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  EXPECT_TRUE(patient.stub->ModelInfer(&context, next, &response).ok());
  absl::StatusOr<int> exit_code = server->Terminate();
  ASSERT_TRUE(exit_code.ok()) << exit_code.status();
  EXPECT_EQ(*exit_code, 0) << server->Log();
}

}  // namespace
}  // namespace fuseserve
