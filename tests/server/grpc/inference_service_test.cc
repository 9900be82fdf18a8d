// The system shared-memory extension over gRPC, against the whole server in
// this process (the small default repository on the CPU backend, ephemeral
// ports): the three SystemSharedMemory RPCs, and inference with the input
// and the output in a region of an object the test creates as a client does.
// One server allows shared memory, one does not.


#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/default_repository.h"
#include "common/logging.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/grpc_service.grpc.pb.h"
#include "server/server.h"
#include "tests/server/shm/test_shared_memory_object.h"
#include "tests/testing/test_dir.h"

namespace fuseserve {
namespace {

using ::testing::AllOf;
using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using testing::TestSharedMemoryObject;
using testing::UniqueSharedMemoryKey;
using ::testing::UnorderedElementsAre;

// groupnorm of the small repository: [N, 8, H, W] in and out.
constexpr char kModel[] = "groupnorm";
const Shape kShape = {2, 8, 3, 5};
constexpr int64_t kTensorBytes = 2 * 8 * 3 * 5 * sizeof(float);
constexpr size_t kObjectBytes = 4096;

std::vector<float> RandomValues(int64_t count) {
  std::mt19937 engine(7);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> values(count);
  for (float& value : values) value = dist(engine);
  return values;
}

inference::ModelInferRequest RequestWithoutData() {
  inference::ModelInferRequest request;
  request.set_model_name(kModel);
  request.set_id("shm-1");
  auto* input = request.add_inputs();
  input->set_name("input");
  input->set_datatype("FP32");
  for (int64_t dim : kShape) input->add_shape(dim);
  return request;
}

void SetSharedMemory(google::protobuf::Map<std::string, inference::InferParameter>* parameters,
                     const std::string& region, int64_t byte_size, int64_t offset) {
  (*parameters)["shared_memory_region"].set_string_param(region);
  (*parameters)["shared_memory_byte_size"].set_int64_param(byte_size);
  (*parameters)["shared_memory_offset"].set_int64_param(offset);
}

void AddSharedMemoryOutput(inference::ModelInferRequest* request, const std::string& region,
                           int64_t byte_size, int64_t offset) {
  auto* output = request->add_outputs();
  output->set_name("output");
  SetSharedMemory(output->mutable_parameters(), region, byte_size, offset);
}

class InferenceServiceSharedMemoryTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    SetMinLogSeverity(LogSeverity::kWarning);
    repository_ = new TestDir("fuseserve-shm-repo");
    ASSERT_TRUE(WriteDefaultRepository(repository_->path(), RepositorySize::kSmall).ok());
    allowing_ = StartServer(true).release();
    refusing_ = StartServer(false).release();
  }

  static void TearDownTestSuite() {
    delete allowing_;
    delete refusing_;
    delete repository_;  // and the directory
  }

  static std::unique_ptr<Server> StartServer(bool allow_shared_memory) {
    ServerOptions options;
    options.model_repository = repository_->path();
    options.grpc_address = "127.0.0.1";
    options.grpc_port = 0;
    options.metrics_address = "127.0.0.1";
    options.metrics_port = 0;
    options.exit_timeout_secs = 5;
    options.allow_shared_memory = allow_shared_memory;
    absl::StatusOr<std::unique_ptr<Server>> server = Server::Start(options);
    EXPECT_TRUE(server.ok()) << server.status();
    return server.ok() ? *std::move(server) : nullptr;
  }

  static std::unique_ptr<inference::GRPCInferenceService::Stub> StubFor(const Server* server) {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(INT32_MAX);
    return inference::GRPCInferenceService::NewStub(grpc::CreateCustomChannel(
        absl::StrCat("127.0.0.1:", server->grpc_port()), grpc::InsecureChannelCredentials(), args));
  }

  void SetUp() override {
    ASSERT_NE(allowing_, nullptr);
    ASSERT_NE(refusing_, nullptr);
    stub_ = StubFor(allowing_);
    refusing_stub_ = StubFor(refusing_);
    auto object = TestSharedMemoryObject::Create(kObjectBytes);
    ASSERT_TRUE(object.ok()) << object.status();
    object_ = *std::move(object);
  }

  void TearDown() override {
    if (stub_ != nullptr) Unregister("");
  }

  // Deadline for every call: a broken server fails the test instead of hanging.
  static void SetDeadline(grpc::ClientContext* context) {
    context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  }

  grpc::Status Register(const std::string& name, const std::string& key, uint64_t offset,
                        uint64_t byte_size, inference::GRPCInferenceService::Stub* stub = nullptr) {
    grpc::ClientContext context;
    SetDeadline(&context);
    inference::SystemSharedMemoryRegisterRequest request;
    request.set_name(name);
    request.set_key(key);
    request.set_offset(offset);
    request.set_byte_size(byte_size);
    inference::SystemSharedMemoryRegisterResponse response;
    return (stub != nullptr ? stub : stub_.get())
        ->SystemSharedMemoryRegister(&context, request, &response);
  }

  grpc::Status Unregister(const std::string& name) {
    grpc::ClientContext context;
    SetDeadline(&context);
    inference::SystemSharedMemoryUnregisterRequest request;
    request.set_name(name);
    inference::SystemSharedMemoryUnregisterResponse response;
    return stub_->SystemSharedMemoryUnregister(&context, request, &response);
  }

  grpc::Status Status(const std::string& name,
                      inference::SystemSharedMemoryStatusResponse* response) {
    grpc::ClientContext context;
    SetDeadline(&context);
    inference::SystemSharedMemoryStatusRequest request;
    request.set_name(name);
    return stub_->SystemSharedMemoryStatus(&context, request, response);
  }

  grpc::Status Infer(const inference::ModelInferRequest& request,
                     inference::ModelInferResponse* response,
                     inference::GRPCInferenceService::Stub* stub = nullptr) {
    grpc::ClientContext context;
    SetDeadline(&context);
    return (stub != nullptr ? stub : stub_.get())->ModelInfer(&context, request, response);
  }

  // The raw output of a plain request (no shared memory) for `input`.
  std::string PlainOutput(const std::vector<float>& input) {
    inference::ModelInferRequest request = RequestWithoutData();
    request.add_raw_input_contents(input.data(), kTensorBytes);
    inference::ModelInferResponse response;
    const grpc::Status status = Infer(request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(response.raw_output_contents_size(), 1);
    return status.ok() && response.raw_output_contents_size() == 1 ? response.raw_output_contents(0)
                                                                   : std::string();
  }

  std::vector<std::string> Extensions(inference::GRPCInferenceService::Stub* stub) {
    grpc::ClientContext context;
    SetDeadline(&context);
    inference::ServerMetadataResponse response;
    EXPECT_TRUE(stub->ServerMetadata(&context, {}, &response).ok());
    return {response.extensions().begin(), response.extensions().end()};
  }

  static TestDir* repository_;
  static Server* allowing_;
  static Server* refusing_;
  std::unique_ptr<inference::GRPCInferenceService::Stub> stub_;
  std::unique_ptr<inference::GRPCInferenceService::Stub> refusing_stub_;
  std::unique_ptr<TestSharedMemoryObject> object_;
};

TestDir* InferenceServiceSharedMemoryTest::repository_ = nullptr;
Server* InferenceServiceSharedMemoryTest::allowing_ = nullptr;
Server* InferenceServiceSharedMemoryTest::refusing_ = nullptr;

TEST_F(InferenceServiceSharedMemoryTest, ListsTheExtensionOnlyWhenAllowed) {
  EXPECT_THAT(Extensions(stub_.get()), Contains("system_shared_memory"));
  EXPECT_THAT(Extensions(refusing_stub_.get()), Not(Contains("system_shared_memory")));
  EXPECT_THAT(Extensions(stub_.get()), Not(Contains("cuda_shared_memory")));
}

TEST_F(InferenceServiceSharedMemoryTest, RegistersReportsAndUnregistersRegions) {
  ASSERT_TRUE(Register("in", object_->key(), 0, 1024).ok());
  ASSERT_TRUE(Register("out", object_->key(), 1024, 2048).ok());

  inference::SystemSharedMemoryStatusResponse all;
  ASSERT_TRUE(Status("", &all).ok());
  ASSERT_EQ(all.regions_size(), 2);
  const auto& out = all.regions().at("out");
  EXPECT_EQ(out.name(), "out");
  EXPECT_EQ(out.key(), object_->key());
  EXPECT_EQ(out.offset(), 1024u);
  EXPECT_EQ(out.byte_size(), 2048u);

  inference::SystemSharedMemoryStatusResponse one;
  ASSERT_TRUE(Status("in", &one).ok());
  ASSERT_EQ(one.regions_size(), 1);
  EXPECT_EQ(one.regions().at("in").byte_size(), 1024u);

  ASSERT_TRUE(Unregister("in").ok());
  inference::SystemSharedMemoryStatusResponse after;
  ASSERT_TRUE(Status("", &after).ok());
  EXPECT_EQ(after.regions_size(), 1);
  EXPECT_TRUE(after.regions().contains("out"));

  ASSERT_TRUE(Unregister("").ok());
  inference::SystemSharedMemoryStatusResponse none;
  ASSERT_TRUE(Status("", &none).ok());
  EXPECT_EQ(none.regions_size(), 0);
}

TEST_F(InferenceServiceSharedMemoryTest, AnswersRegistrationErrorsWithTritonCodes) {
  ASSERT_TRUE(Register("r", object_->key(), 0, 64).ok());

  const grpc::Status duplicate = Register("r", object_->key(), 0, 64);
  EXPECT_EQ(duplicate.error_code(), grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_EQ(duplicate.error_message(), "shared memory region 'r' already in manager");

  EXPECT_EQ(Register("x", UniqueSharedMemoryKey(), 0, 64).error_code(),
            grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(Register("x", "relative", 0, 64).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Register("x", object_->key(), kObjectBytes - 8, 16).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Register("", object_->key(), 0, 64).error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  inference::SystemSharedMemoryStatusResponse status;
  const grpc::Status unknown = Status("x", &status);
  EXPECT_EQ(unknown.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(unknown.error_message(), "Unable to find system shared memory region: 'x'");
  EXPECT_TRUE(Unregister("x").ok()) << "unregistering an unknown name succeeds, as in Triton";
}

// Input and output in shared memory, each alone and together: the output
// equals the plain gRPC answer bit for bit, and the response carries the
// output's name, datatype and shape with an empty raw entry when it is in
// shared memory.
TEST_F(InferenceServiceSharedMemoryTest, InfersWithInputAndOutputInSharedMemory) {
  const std::vector<float> input = RandomValues(NumElements(kShape));
  const std::string expected = PlainOutput(input);
  ASSERT_EQ(expected.size(), static_cast<size_t>(kTensorBytes));

  // Input at 0; output at a 4-byte-aligned offset that is not 8-aligned.
  constexpr int64_t kOutputOffset = 1028;
  std::memcpy(object_->data(), input.data(), kTensorBytes);
  ASSERT_TRUE(Register("in", object_->key(), 0, kTensorBytes).ok());
  ASSERT_TRUE(Register("out", object_->key(), kOutputOffset - 4, 2048).ok());

  for (const bool input_in_shm : {true, false}) {
    for (const bool output_in_shm : {true, false}) {
      if (!input_in_shm && !output_in_shm) continue;
      SCOPED_TRACE(
          absl::StrCat("input in shm: ", input_in_shm, ", output in shm: ", output_in_shm));
      std::memset(object_->data() + kOutputOffset, 0, kTensorBytes);
      inference::ModelInferRequest request = RequestWithoutData();
      if (input_in_shm) {
        SetSharedMemory(request.mutable_inputs(0)->mutable_parameters(), "in", kTensorBytes, 0);
      } else {
        request.add_raw_input_contents(input.data(), kTensorBytes);
      }
      if (output_in_shm) AddSharedMemoryOutput(&request, "out", kTensorBytes, 4);

      inference::ModelInferResponse response;
      const grpc::Status status = Infer(request, &response);

      ASSERT_TRUE(status.ok()) << status.error_message();
      EXPECT_EQ(response.id(), "shm-1");
      ASSERT_EQ(response.outputs_size(), 1);
      EXPECT_EQ(response.outputs(0).name(), "output");
      EXPECT_EQ(response.outputs(0).datatype(), "FP32");
      EXPECT_THAT(response.outputs(0).shape(), ::testing::ElementsAreArray(kShape));
      EXPECT_THAT(response.outputs(0).parameters(), IsEmpty());
      ASSERT_EQ(response.raw_output_contents_size(), 1);
      if (output_in_shm) {
        EXPECT_THAT(response.raw_output_contents(0), IsEmpty());
        EXPECT_EQ(std::memcmp(object_->data() + kOutputOffset, expected.data(), kTensorBytes), 0);
      } else {
        EXPECT_EQ(response.raw_output_contents(0), expected);
      }
    }
  }
}

// An input at an offset that is not float-aligned is copied; an output there
// is staged and copied in. Both still match the plain answer bit for bit.
TEST_F(InferenceServiceSharedMemoryTest, InfersWithUnalignedInputAndOutput) {
  const std::vector<float> input = RandomValues(NumElements(kShape));
  const std::string expected = PlainOutput(input);
  ASSERT_EQ(expected.size(), static_cast<size_t>(kTensorBytes));
  std::memcpy(object_->data() + 3, input.data(), kTensorBytes);
  ASSERT_TRUE(Register("r", object_->key(), 0, kObjectBytes).ok());
  inference::ModelInferRequest request = RequestWithoutData();
  SetSharedMemory(request.mutable_inputs(0)->mutable_parameters(), "r", kTensorBytes, 3);
  AddSharedMemoryOutput(&request, "r", kTensorBytes, 2001);

  inference::ModelInferResponse response;
  const grpc::Status status = Infer(request, &response);

  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(std::memcmp(object_->data() + 2001, expected.data(), kTensorBytes), 0);
}

TEST_F(InferenceServiceSharedMemoryTest, RefusesBadSharedMemoryRequestsBeforeComputing) {
  ASSERT_TRUE(Register("r", object_->key(), 0, kObjectBytes).ok());
  inference::ModelInferResponse response;

  inference::ModelInferRequest small_output = RequestWithoutData();
  SetSharedMemory(small_output.mutable_inputs(0)->mutable_parameters(), "r", kTensorBytes, 0);
  AddSharedMemoryOutput(&small_output, "r", kTensorBytes - 4, 2048);
  const grpc::Status too_small = Infer(small_output, &response);
  EXPECT_EQ(too_small.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(too_small.error_message(),
            absl::StrCat("shared memory size specified with the request for output 'output' (",
                         kTensorBytes - 4, " bytes) should be at least ", kTensorBytes,
                         " bytes to hold the results"));

  inference::ModelInferRequest unknown = RequestWithoutData();
  SetSharedMemory(unknown.mutable_inputs(0)->mutable_parameters(), "nope", kTensorBytes, 0);
  const grpc::Status not_found = Infer(unknown, &response);
  EXPECT_EQ(not_found.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(not_found.error_message(),
            "input \"input\": Unable to find shared memory region: 'nope'");

  inference::ModelInferRequest outside = RequestWithoutData();
  SetSharedMemory(outside.mutable_inputs(0)->mutable_parameters(), "r", kTensorBytes,
                  kObjectBytes - 8);
  EXPECT_EQ(Infer(outside, &response).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(InferenceServiceSharedMemoryTest, ServerWithoutTheFlagRefusesSharedMemory) {
  inference::SystemSharedMemoryStatusRequest status_request;
  inference::SystemSharedMemoryStatusResponse status_response;
  inference::SystemSharedMemoryUnregisterRequest unregister_request;
  inference::SystemSharedMemoryUnregisterResponse unregister_response;
  grpc::ClientContext status_context, unregister_context;
  SetDeadline(&status_context);
  SetDeadline(&unregister_context);
  const grpc::Status calls[] = {
      Register("r", object_->key(), 0, 64, refusing_stub_.get()),
      refusing_stub_->SystemSharedMemoryStatus(&status_context, status_request, &status_response),
      refusing_stub_->SystemSharedMemoryUnregister(&unregister_context, unregister_request,
                                                   &unregister_response),
  };
  for (const grpc::Status& status : calls) {
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNIMPLEMENTED);
    EXPECT_THAT(status.error_message(), AllOf(HasSubstr("system shared memory is disabled"),
                                              HasSubstr("--allow-shared-memory=true")));
  }

  inference::ModelInferRequest request = RequestWithoutData();
  SetSharedMemory(request.mutable_inputs(0)->mutable_parameters(), "r", kTensorBytes, 0);
  inference::ModelInferResponse response;
  const grpc::Status infer = Infer(request, &response, refusing_stub_.get());
  EXPECT_EQ(infer.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(infer.error_message(), HasSubstr("input \"input\" uses shared memory"));
}

TEST_F(InferenceServiceSharedMemoryTest, CudaSharedMemoryStaysUnimplemented) {
  grpc::ClientContext context;
  SetDeadline(&context);
  inference::CudaSharedMemoryStatusResponse response;

  EXPECT_EQ(stub_->CudaSharedMemoryStatus(&context, {}, &response).error_code(),
            grpc::StatusCode::UNIMPLEMENTED);
}

}  // namespace
}  // namespace fuseserve
