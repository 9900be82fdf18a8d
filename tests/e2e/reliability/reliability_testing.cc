#include "tests/e2e/reliability/reliability_testing.h"

#include <stdlib.h>

#include <chrono>
#include <climits>
#include <filesystem>
#include <fstream>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/default_repository.h"
#include "common/status_macros.h"
#include "httplib.h"

namespace fuseserve::testing {

std::string ServerBinary() {
  const char* path = std::getenv("FUSESERVE_BINARY");
  return path != nullptr ? path : FUSESERVE_BINARY;
}

std::string ConfigParameter(const std::string& key, const std::string& value) {
  return absl::StrCat("parameters { key: \"", key, "\" value: { string_value: \"", value,
                      "\" } }\n");
}

absl::StatusOr<std::unique_ptr<TestRepository>> TestRepository::Create() {
  std::unique_ptr<TestRepository> repository(new TestRepository());
  RETURN_IF_ERROR(WriteDefaultRepository(repository->path(), RepositorySize::kSmall));
  return repository;
}

absl::Status TestRepository::AddGroupNorm(const std::string& name, int max_batch_size,
                                          const std::string& extra, int channels,
                                          const std::string& spatial) {
  const std::filesystem::path model = std::filesystem::path(path()) / name;
  std::error_code error;
  std::filesystem::create_directories(model / "1", error);
  if (error) return absl::InternalError(absl::StrCat("cannot create ", model.string()));
  std::filesystem::copy_file(std::filesystem::path(path()) / kGroupNorm / "1" / "model.safetensors",
                             model / "1" / "model.safetensors", error);
  if (error) return absl::InternalError(absl::StrCat("cannot copy weights: ", error.message()));
  const std::string dims = absl::StrCat(max_batch_size > 0 ? "" : "-1, ", channels, ", ", spatial);
  std::ofstream config(model / "config.pbtxt", std::ios::trunc);
  config << "name: \"" << name << "\"\nplatform: \"groupnorm\"\nmax_batch_size: " << max_batch_size
         << "\ninput [ { name: \"input\", data_type: TYPE_FP32, dims: [ " << dims << " ] } ]\n"
         << "output [ { name: \"output\", data_type: TYPE_FP32, dims: [ " << dims << " ] } ]\n"
         << ConfigParameter("num_channels", absl::StrCat(channels))
         << ConfigParameter("num_groups", "4") << extra;
  if (!config.good()) return absl::InternalError(absl::StrCat("cannot write config of ", name));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ServerProcess>> StartServer(
    const TestRepository& repository, const std::vector<std::string>& extra_args) {
  // The child inherits the environment at start; only the server sees it.
  constexpr char kEnableTestParameters[] = "FUSESERVE_ENABLE_TEST_PARAMETERS";
  if (::setenv(kEnableTestParameters, "1", 1) != 0) return absl::InternalError("setenv failed");
  absl::StatusOr<std::unique_ptr<ServerProcess>> server =
      ServerProcess::Start(ServerBinary(), repository.path(), extra_args);
  ::unsetenv(kEnableTestParameters);
  return server;
}

std::unique_ptr<inference::GRPCInferenceService::Stub> NewStub(const ServerProcess& server) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(INT_MAX);
  args.SetMaxSendMessageSize(INT_MAX);
  return inference::GRPCInferenceService::NewStub(
      grpc::CreateCustomChannel(server.grpc_target(), grpc::InsecureChannelCredentials(), args));
}

inference::ModelInferRequest MakeRequest(const std::string& model, const Shape& shape,
                                         const std::vector<float>& values) {
  inference::ModelInferRequest request;
  request.set_model_name(model);
  request.set_id("reliability");
  inference::ModelInferRequest::InferInputTensor* input = request.add_inputs();
  input->set_name("input");
  input->set_datatype("FP32");
  for (int64_t dim : shape) input->add_shape(dim);
  request.add_raw_input_contents(
      std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float)));
  return request;
}

std::unique_ptr<InferCall> StartInfer(inference::GRPCInferenceService::Stub& stub,
                                      inference::ModelInferRequest request,
                                      absl::Duration deadline) {
  auto call = std::make_unique<InferCall>();
  call->request = std::move(request);
  call->context.set_deadline(absl::ToChronoTime(absl::Now() + deadline));
  call->start = absl::Now();
  InferCall* raw = call.get();
  stub.async()->ModelInfer(&raw->context, &raw->request, &raw->response,
                           [raw](grpc::Status status) {
                             raw->end = absl::Now();
                             raw->status = std::move(status);
                             raw->done.Notify();
                           });
  return call;
}

grpc::Status Infer(inference::GRPCInferenceService::Stub& stub,
                   const inference::ModelInferRequest& request,
                   inference::ModelInferResponse* response) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  return stub.ModelInfer(&context, request, response);
}

std::string ScrapeMetrics(const ServerProcess& server) {
  httplib::Client http("127.0.0.1", server.metrics_port());
  httplib::Result result = http.Get("/metrics");
  return result && result->status == 200 ? result->body : "";
}

std::map<std::string, std::string> ModelLabels(const std::string& model) {
  return {{"model", model}, {"version", "1"}};
}

int HttpStatus(const ServerProcess& server, const std::string& path) {
  httplib::Client http("127.0.0.1", server.metrics_port());
  httplib::Result result = http.Get(path);
  return result ? result->status : -1;
}

}  // namespace fuseserve::testing
