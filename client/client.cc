#include "client/client.h"

#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"

namespace fuseserve::client {
namespace {

// absl::StatusCode and grpc::StatusCode share their numbering (both follow
// google.rpc.Code), so the server's code passes through unchanged.
absl::Status FromGrpc(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

void SetDeadline(grpc::ClientContext& context, absl::Duration timeout) {
  if (timeout != absl::InfiniteDuration()) {
    context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  }
}

// Runs one unary RPC with a deadline and converts its status.
template <typename Request, typename Response, typename Method>
absl::StatusOr<Response> Call(Method method, const Request& request, absl::Duration timeout) {
  grpc::ClientContext context;
  SetDeadline(context, timeout);
  Response response;
  RETURN_IF_ERROR(FromGrpc(method(&context, request, &response)));
  return response;
}

// Sets Triton's shared-memory parameters of one tensor; InvalidArgument for
// a location the protocol cannot express.
absl::Status SetSharedMemoryParameters(
    const std::string& what, const SharedMemoryLocation& location,
    google::protobuf::Map<std::string, inference::InferParameter>* parameters) {
  constexpr uint64_t kMaxInt64 = std::numeric_limits<int64_t>::max();
  if (location.region.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": shared memory needs a region name"));
  }
  if (location.byte_size > kMaxInt64 || location.offset > kMaxInt64) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": shared-memory byte size and offset must fit int64"));
  }
  (*parameters)["shared_memory_region"].set_string_param(location.region);
  (*parameters)["shared_memory_byte_size"].set_int64_param(
      static_cast<int64_t>(location.byte_size));
  if (location.offset != 0) {
    (*parameters)["shared_memory_offset"].set_int64_param(static_cast<int64_t>(location.offset));
  }
  return absl::OkStatus();
}

}  // namespace

// Inputs in shared memory get no raw_input_contents entry: the server takes
// the entries in order for the inputs that carry no shared_memory_region
// (Triton's rule).
absl::StatusOr<inference::ModelInferRequest> BuildInferRequest(const std::string& model,
                                                               const std::vector<Tensor>& inputs,
                                                               const InferOptions& options) {
  inference::ModelInferRequest request;
  request.set_model_name(model);
  request.set_model_version(options.model_version);
  request.set_id(options.request_id);
  for (const Tensor& tensor : inputs) {
    ASSIGN_OR_RETURN(const int64_t count, CheckedNumElements(tensor.shape));
    const std::string what = absl::StrCat("input \"", tensor.name, "\"");
    auto* input = request.add_inputs();
    input->set_name(tensor.name);
    input->set_datatype("FP32");
    for (int64_t dim : tensor.shape) input->add_shape(dim);
    if (tensor.shared_memory.has_value()) {
      if (!tensor.data.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, " has both data and a shared-memory location; give one"));
      }
      if (tensor.shared_memory->byte_size != static_cast<uint64_t>(count) * sizeof(float)) {
        return absl::InvalidArgumentError(absl::StrCat(
            what, ": shape ", ShapeToString(tensor.shape), " needs ", count * sizeof(float),
            " bytes, the shared-memory location holds ", tensor.shared_memory->byte_size));
      }
      RETURN_IF_ERROR(
          SetSharedMemoryParameters(what, *tensor.shared_memory, input->mutable_parameters()));
      continue;
    }
    if (static_cast<size_t>(count) != tensor.data.size()) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": shape ", ShapeToString(tensor.shape),
                                                     " holds ", count, " values, the tensor has ",
                                                     tensor.data.size()));
    }
    request.add_raw_input_contents(reinterpret_cast<const char*>(tensor.data.data()),
                                   tensor.data.size() * sizeof(float));
  }
  for (const std::string& name : options.outputs) request.add_outputs()->set_name(name);
  for (const auto& [name, location] : options.output_shared_memory) {
    inference::ModelInferRequest::InferRequestedOutputTensor* output = nullptr;
    for (auto& listed : *request.mutable_outputs()) {
      if (listed.name() == name) output = &listed;
    }
    if (output == nullptr) {
      output = request.add_outputs();
      output->set_name(name);
    }
    RETURN_IF_ERROR(SetSharedMemoryParameters(absl::StrCat("output \"", name, "\""), location,
                                              output->mutable_parameters()));
  }
  if (options.queue_timeout > absl::ZeroDuration()) {
    (*request.mutable_parameters())["timeout"].set_int64_param(
        absl::ToInt64Microseconds(options.queue_timeout));
  }
  return request;
}

namespace {

// Outputs come from raw_output_contents, index-aligned with `outputs` (what
// the protocol requires of every server); typed fp32_contents are accepted
// from servers that send no raw entries at all. An output placed in shared
// memory (`in_shared_memory`) has an empty raw entry, or none.
absl::StatusOr<InferResult> DecodeResponse(
    const inference::ModelInferResponse& response,
    const std::map<std::string, SharedMemoryLocation>& in_shared_memory) {
  InferResult result;
  result.model_name = response.model_name();
  result.model_version = response.model_version();
  result.id = response.id();
  const bool raw = response.raw_output_contents_size() > 0;
  if (raw && response.raw_output_contents_size() != response.outputs_size()) {
    return absl::InternalError(absl::StrCat("the response has ", response.outputs_size(),
                                            " outputs but ", response.raw_output_contents_size(),
                                            " raw_output_contents entries"));
  }
  for (int i = 0; i < response.outputs_size(); ++i) {
    const auto& output = response.outputs(i);
    if (output.datatype() != "FP32") {
      return absl::UnimplementedError(absl::StrCat("output \"", output.name(), "\" has datatype ",
                                                   output.datatype(), "; only FP32 is supported"));
    }
    Tensor tensor;
    tensor.name = output.name();
    tensor.shape.assign(output.shape().begin(), output.shape().end());
    const absl::StatusOr<int64_t> count = CheckedNumElements(tensor.shape);
    if (!count.ok()) {
      return absl::InternalError(
          absl::StrCat("output \"", output.name(), "\": ", count.status().message()));
    }
    const uint64_t byte_size = static_cast<uint64_t>(*count) * sizeof(float);
    const auto shared = in_shared_memory.find(output.name());
    const bool answered_inline =
        raw ? !response.raw_output_contents(i).empty() : output.contents().fp32_contents_size() > 0;
    if (shared != in_shared_memory.end() && !answered_inline) {
      if (byte_size > shared->second.byte_size) {
        return absl::InternalError(absl::StrCat("output \"", output.name(), "\": shape ",
                                                ShapeToString(tensor.shape), " needs ", byte_size,
                                                " bytes, more than the ", shared->second.byte_size,
                                                " of its shared-memory location"));
      }
      tensor.shared_memory = shared->second;
      tensor.shared_memory->byte_size = byte_size;
    } else if (raw) {
      const std::string& bytes = response.raw_output_contents(i);
      if (bytes.size() != byte_size) {
        return absl::InternalError(absl::StrCat("output \"", output.name(), "\": shape ",
                                                ShapeToString(tensor.shape), " needs ", byte_size,
                                                " bytes, raw_output_contents has ", bytes.size()));
      }
      tensor.data.resize(*count);
      if (*count > 0) std::memcpy(tensor.data.data(), bytes.data(), bytes.size());
    } else {
      const auto& values = output.contents().fp32_contents();
      if (values.size() != *count) {
        return absl::InternalError(absl::StrCat("output \"", output.name(), "\": shape ",
                                                ShapeToString(tensor.shape), " holds ", *count,
                                                " values, fp32_contents has ", values.size()));
      }
      tensor.data.assign(values.begin(), values.end());
    }
    result.outputs.push_back(std::move(tensor));
  }
  return result;
}

// The contents of the PEM file `path` that `flag` names. Errors never quote
// the file: it may be a private key.
absl::StatusOr<std::string> ReadPemFile(const char* flag, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": cannot open ", path, ": ", std::strerror(errno)));
  }
  std::error_code error;
  if (!std::filesystem::is_regular_file(path, error)) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": ", path, " is not a file"));
  }
  std::string pem((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return absl::InvalidArgumentError(absl::StrCat(flag, ": cannot read ", path));
  if (pem.find("-----BEGIN ") == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": ", path, " is not a PEM file"));
  }
  return pem;
}

// One asynchronous call's state, alive until its callback has run.
struct AsyncCall {
  grpc::ClientContext context;
  inference::ModelInferRequest request;
  inference::ModelInferResponse response;
  std::map<std::string, SharedMemoryLocation> output_shared_memory;
  std::function<void(absl::StatusOr<InferResult>)> done;
};

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const TlsOptions& tls) {
  grpc::SslCredentialsOptions ssl;
  const struct {
    const char* flag;
    const std::string& path;
    std::string* pem;
  } files[] = {{"--root-certificates", tls.root_certificates, &ssl.pem_root_certs},
               {"--private-key", tls.private_key, &ssl.pem_private_key},
               {"--certificate-chain", tls.certificate_chain, &ssl.pem_cert_chain}};
  if (!tls.ssl) {
    for (const auto& file : files) {
      if (!file.path.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat(file.flag, " is given but TLS is off (add --ssl)"));
      }
    }
    return grpc::InsecureChannelCredentials();
  }
  if (tls.private_key.empty() != tls.certificate_chain.empty()) {
    return absl::InvalidArgumentError(
        "--private-key and --certificate-chain go together (the client's key and certificate)");
  }
  for (const auto& file : files) {
    if (file.path.empty()) continue;
    ASSIGN_OR_RETURN(*file.pem, ReadPemFile(file.flag, file.path));
  }
  return grpc::SslCredentials(ssl);
}

std::unique_ptr<Client> Client::Create(const std::string& target) {
  return Create(target, grpc::InsecureChannelCredentials());
}

std::unique_ptr<Client> Client::Create(const std::string& target,
                                       std::shared_ptr<grpc::ChannelCredentials> credentials) {
  grpc::ChannelArguments args;
  args.SetMaxSendMessageSize(INT_MAX);
  args.SetMaxReceiveMessageSize(INT_MAX);
  return std::unique_ptr<Client>(
      new Client(grpc::CreateCustomChannel(target, std::move(credentials), args)));
}

Client::Client(std::shared_ptr<grpc::Channel> channel)
    : channel_(std::move(channel)), stub_(inference::GRPCInferenceService::NewStub(channel_)) {}

inference::GRPCInferenceService::Stub& Client::stub() { return *stub_; }

absl::StatusOr<bool> Client::ServerLive(absl::Duration timeout) {
  ASSIGN_OR_RETURN(
      auto response,
      (Call<inference::ServerLiveRequest, inference::ServerLiveResponse>(
          [this](auto* c, const auto& q, auto* r) { return stub_->ServerLive(c, q, r); },
          inference::ServerLiveRequest(), timeout)));
  return response.live();
}

absl::StatusOr<bool> Client::ServerReady(absl::Duration timeout) {
  ASSIGN_OR_RETURN(
      auto response,
      (Call<inference::ServerReadyRequest, inference::ServerReadyResponse>(
          [this](auto* c, const auto& q, auto* r) { return stub_->ServerReady(c, q, r); },
          inference::ServerReadyRequest(), timeout)));
  return response.ready();
}

absl::StatusOr<bool> Client::ModelReady(const std::string& model, const std::string& version,
                                        absl::Duration timeout) {
  inference::ModelReadyRequest request;
  request.set_name(model);
  request.set_version(version);
  ASSIGN_OR_RETURN(
      auto response,
      (Call<inference::ModelReadyRequest, inference::ModelReadyResponse>(
          [this](auto* c, const auto& q, auto* r) { return stub_->ModelReady(c, q, r); }, request,
          timeout)));
  return response.ready();
}

absl::StatusOr<inference::ServerMetadataResponse> Client::ServerMetadata(absl::Duration timeout) {
  return Call<inference::ServerMetadataRequest, inference::ServerMetadataResponse>(
      [this](auto* c, const auto& q, auto* r) { return stub_->ServerMetadata(c, q, r); },
      inference::ServerMetadataRequest(), timeout);
}

absl::StatusOr<inference::ModelMetadataResponse> Client::ModelMetadata(const std::string& model,
                                                                       const std::string& version,
                                                                       absl::Duration timeout) {
  inference::ModelMetadataRequest request;
  request.set_name(model);
  request.set_version(version);
  return Call<inference::ModelMetadataRequest, inference::ModelMetadataResponse>(
      [this](auto* c, const auto& q, auto* r) { return stub_->ModelMetadata(c, q, r); }, request,
      timeout);
}

absl::StatusOr<inference::ModelConfigResponse> Client::ModelConfig(const std::string& model,
                                                                   const std::string& version,
                                                                   absl::Duration timeout) {
  inference::ModelConfigRequest request;
  request.set_name(model);
  request.set_version(version);
  return Call<inference::ModelConfigRequest, inference::ModelConfigResponse>(
      [this](auto* c, const auto& q, auto* r) { return stub_->ModelConfig(c, q, r); }, request,
      timeout);
}

absl::StatusOr<inference::ModelStatisticsResponse> Client::ModelStatistics(
    const std::string& model, const std::string& version, absl::Duration timeout) {
  inference::ModelStatisticsRequest request;
  request.set_name(model);
  request.set_version(version);
  return Call<inference::ModelStatisticsRequest, inference::ModelStatisticsResponse>(
      [this](auto* c, const auto& q, auto* r) { return stub_->ModelStatistics(c, q, r); }, request,
      timeout);
}

absl::StatusOr<inference::RepositoryIndexResponse> Client::RepositoryIndex(absl::Duration timeout) {
  return Call<inference::RepositoryIndexRequest, inference::RepositoryIndexResponse>(
      [this](auto* c, const auto& q, auto* r) { return stub_->RepositoryIndex(c, q, r); },
      inference::RepositoryIndexRequest(), timeout);
}

absl::Status Client::RegisterSystemSharedMemory(const std::string& name, const std::string& key,
                                                uint64_t byte_size, uint64_t offset,
                                                absl::Duration timeout) {
  inference::SystemSharedMemoryRegisterRequest request;
  request.set_name(name);
  request.set_key(key);
  request.set_offset(offset);
  request.set_byte_size(byte_size);
  return Call<inference::SystemSharedMemoryRegisterRequest,
              inference::SystemSharedMemoryRegisterResponse>(
             [this](auto* c, const auto& q, auto* r) {
               return stub_->SystemSharedMemoryRegister(c, q, r);
             },
             request, timeout)
      .status();
}

absl::Status Client::UnregisterSystemSharedMemory(const std::string& name, absl::Duration timeout) {
  inference::SystemSharedMemoryUnregisterRequest request;
  request.set_name(name);
  return Call<inference::SystemSharedMemoryUnregisterRequest,
              inference::SystemSharedMemoryUnregisterResponse>(
             [this](auto* c, const auto& q, auto* r) {
               return stub_->SystemSharedMemoryUnregister(c, q, r);
             },
             request, timeout)
      .status();
}

absl::StatusOr<inference::SystemSharedMemoryStatusResponse> Client::SystemSharedMemoryStatus(
    const std::string& name, absl::Duration timeout) {
  inference::SystemSharedMemoryStatusRequest request;
  request.set_name(name);
  return Call<inference::SystemSharedMemoryStatusRequest,
              inference::SystemSharedMemoryStatusResponse>(
      [this](auto* c, const auto& q, auto* r) { return stub_->SystemSharedMemoryStatus(c, q, r); },
      request, timeout);
}

absl::StatusOr<InferResult> Client::Infer(const std::string& model,
                                          const std::vector<Tensor>& inputs,
                                          const InferOptions& options) {
  ASSIGN_OR_RETURN(const inference::ModelInferRequest request,
                   BuildInferRequest(model, inputs, options));
  ASSIGN_OR_RETURN(
      const auto response,
      (Call<inference::ModelInferRequest, inference::ModelInferResponse>(
          [this](auto* c, const auto& q, auto* r) { return stub_->ModelInfer(c, q, r); }, request,
          options.timeout)));
  return DecodeResponse(response, options.output_shared_memory);
}

void Client::AsyncInfer(const std::string& model, const std::vector<Tensor>& inputs,
                        const InferOptions& options,
                        std::function<void(absl::StatusOr<InferResult>)> done) {
  absl::StatusOr<inference::ModelInferRequest> request = BuildInferRequest(model, inputs, options);
  if (!request.ok()) {
    done(request.status());
    return;
  }
  auto* call = new AsyncCall;
  call->request = *std::move(request);
  call->output_shared_memory = options.output_shared_memory;
  call->done = std::move(done);
  SetDeadline(call->context, options.timeout);
  {
    absl::MutexLock lock(&mutex_);
    ++async_in_flight_;
  }
  stub_->async()->ModelInfer(
      &call->context, &call->request, &call->response, [this, call](grpc::Status status) {
        absl::Status converted = FromGrpc(status);
        absl::StatusOr<InferResult> result =
            converted.ok() ? DecodeResponse(call->response, call->output_shared_memory)
                           : std::move(converted);
        std::function<void(absl::StatusOr<InferResult>)> done = std::move(call->done);
        // The call's state goes before the count drops (see async_in_flight_);
        // the count drops before `done` runs, so that a `done` which lets its
        // owner go on to destroy the Client cannot hold up the destructor.
        delete call;
        {
          absl::MutexLock lock(&mutex_);
          --async_in_flight_;
        }
        done(std::move(result));
      });
}

Client::~Client() {
  absl::MutexLock lock(&mutex_);
  mutex_.Await(absl::Condition(
      +[](int* in_flight) { return *in_flight == 0; }, &async_in_flight_));
}

}  // namespace fuseserve::client
