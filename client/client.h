#pragma once

// A typed C++ client for fuseserve (and any KServe v2 / Triton gRPC server):
// health, metadata, config, statistics and inference, sync and async, with
// deadlines and INT32_MAX message sizes. Errors come back as absl::Status
// carrying the server's gRPC code and message.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/shape.h"
#include "grpcpp/channel.h"
#include "grpcpp/security/credentials.h"
#include "proto/grpc_service.grpc.pb.h"

namespace fuseserve::client {

// Where a tensor's bytes lie in a system shared-memory region registered with
// the server (Client::RegisterSystemSharedMemory): tritonclient's
// InferInput/InferRequestedOutput::SetSharedMemory(region_name, byte_size,
// offset), sent as the tensor's shared_memory_region / shared_memory_byte_size
// / shared_memory_offset parameters.
struct SharedMemoryLocation {
  std::string region;      // the name the region was registered under
  uint64_t byte_size = 0;  // input: the tensor's bytes; output: the room for it
  uint64_t offset = 0;     // from the start of the registered region
};

// A float32 tensor, row-major: in host memory (`data`), or in system shared
// memory (`shared_memory`, with `data` empty).
struct Tensor {
  std::string name;
  Shape shape;
  std::vector<float> data;
  // On an input: the server reads the tensor from there instead of from the
  // request, whose message then carries no bytes for it; `data` must be empty
  // and byte_size must be the shape's 4 * NumElements. On a result's output:
  // the server wrote the output there (see InferOptions::output_shared_memory);
  // byte_size is then the output's size.
  std::optional<SharedMemoryLocation> shared_memory = std::nullopt;
};

// How a connection is secured, with tritonclient's names (its
// InferenceServerClient(url, ssl, root_certificates, private_key,
// certificate_chain)). The strings are paths to PEM files.
struct TlsOptions {
  bool ssl = false;
  // CA certificates that verify the server; empty = gRPC's default roots.
  std::string root_certificates;
  // The client's own key and certificate chain, for servers that require
  // client certificates (mutual TLS); both or neither.
  std::string private_key;
  std::string certificate_chain;
};

// Channel credentials for `tls`: plaintext without `ssl`, else TLS with the
// files read. InvalidArgument naming the file when one cannot be read, when
// only one of private_key and certificate_chain is given, or when a file is
// given without `ssl` (silently sending plaintext would be worse).
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const TlsOptions& tls);

struct InferOptions {
  std::string model_version;  // empty = the server's choice
  std::string request_id;
  absl::Duration timeout = absl::InfiniteDuration();    // gRPC deadline from the call
  absl::Duration queue_timeout = absl::ZeroDuration();  // the `timeout` request parameter; 0 = none
  std::vector<std::string> outputs;                     // empty = all outputs
  // Outputs the server writes into system shared memory instead of the
  // response, by output name. Each is requested whether `outputs` lists it or
  // not; as with any named output, the others then come back only when
  // `outputs` lists them. Such an output comes back with its shape, empty
  // `data` and `shared_memory` saying where it lies: read it from the region
  // (SystemSharedMemoryRegion::Floats) without a copy, once the call has
  // returned. (A server without the extension may ignore the request and
  // answer inline; the output then comes back with `data` and no
  // `shared_memory`.)
  std::map<std::string, SharedMemoryLocation> output_shared_memory;
};

struct InferResult {
  std::string model_name;
  std::string model_version;
  std::string id;
  std::vector<Tensor> outputs;  // in the response's order
};

// The ModelInferRequest that Client::Infer sends for these arguments:
// FP32 inputs as raw_input_contents or shared-memory parameters, requested
// outputs, the `timeout` parameter. For callers that send requests
// themselves (the load generator). InvalidArgument when a tensor's data or
// shared-memory location disagrees with its shape.
absl::StatusOr<inference::ModelInferRequest> BuildInferRequest(const std::string& model,
                                                               const std::vector<Tensor>& inputs,
                                                               const InferOptions& options);

class Client {
 public:
  // Connects lazily to `target` ("host:port"), in plaintext or with
  // `credentials` (see MakeChannelCredentials).
  static std::unique_ptr<Client> Create(const std::string& target);
  static std::unique_ptr<Client> Create(const std::string& target,
                                        std::shared_ptr<grpc::ChannelCredentials> credentials);

  // Waits until every AsyncInfer call has finished (its `done` may still be
  // running). Do not destroy a Client from inside a `done` callback.
  ~Client();

  absl::StatusOr<bool> ServerLive(absl::Duration timeout = absl::Seconds(10));
  absl::StatusOr<bool> ServerReady(absl::Duration timeout = absl::Seconds(10));
  absl::StatusOr<bool> ModelReady(const std::string& model, const std::string& version = "",
                                  absl::Duration timeout = absl::Seconds(10));
  absl::StatusOr<inference::ServerMetadataResponse> ServerMetadata(
      absl::Duration timeout = absl::Seconds(10));
  absl::StatusOr<inference::ModelMetadataResponse> ModelMetadata(
      const std::string& model, const std::string& version = "",
      absl::Duration timeout = absl::Seconds(10));
  absl::StatusOr<inference::ModelConfigResponse> ModelConfig(
      const std::string& model, const std::string& version = "",
      absl::Duration timeout = absl::Seconds(10));
  absl::StatusOr<inference::ModelStatisticsResponse> ModelStatistics(
      const std::string& model = "", const std::string& version = "",
      absl::Duration timeout = absl::Seconds(10));
  absl::StatusOr<inference::RepositoryIndexResponse> RepositoryIndex(
      absl::Duration timeout = absl::Seconds(10));

  // Triton's system shared-memory extension (the server must run on the same
  // host and allow it; fuseserve needs --allow-shared-memory). Registers
  // `byte_size` bytes starting `offset` bytes into the POSIX shared-memory
  // object `key` (e.g. "/input_simple", see SystemSharedMemoryRegion) under
  // `name`, which tensors then use as their SharedMemoryLocation::region.
  absl::Status RegisterSystemSharedMemory(const std::string& name, const std::string& key,
                                          uint64_t byte_size, uint64_t offset = 0,
                                          absl::Duration timeout = absl::Seconds(10));
  // Unregisters region `name`, or every registered region (this client's and
  // everyone else's) when `name` is empty. The server unmaps it; the object
  // itself lives on until its creator removes it.
  absl::Status UnregisterSystemSharedMemory(const std::string& name = "",
                                            absl::Duration timeout = absl::Seconds(10));
  // The registered region `name`, or all of them when `name` is empty.
  absl::StatusOr<inference::SystemSharedMemoryStatusResponse> SystemSharedMemoryStatus(
      const std::string& name = "", absl::Duration timeout = absl::Seconds(10));

  // Synchronous inference: inputs sent as raw_input_contents, or read by the
  // server from shared memory (Tensor::shared_memory).
  absl::StatusOr<InferResult> Infer(const std::string& model, const std::vector<Tensor>& inputs,
                                    const InferOptions& options = {});

  // Asynchronous inference: `done` is called once, on a gRPC thread (or on
  // the calling thread before AsyncInfer returns when `inputs` are invalid).
  // Thread-safe; any number of calls may be outstanding.
  void AsyncInfer(const std::string& model, const std::vector<Tensor>& inputs,
                  const InferOptions& options,
                  std::function<void(absl::StatusOr<InferResult>)> done);

  // The underlying stub, for callers that build requests themselves (the
  // load generator pre-serialises its requests).
  inference::GRPCInferenceService::Stub& stub();

 private:
  explicit Client(std::shared_ptr<grpc::Channel> channel);

  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<inference::GRPCInferenceService::Stub> stub_;

  // AsyncInfer calls whose gRPC state (ClientContext) still exists. A
  // ClientContext holds a reference to the channel; if the last one were
  // dropped on gRPC's callback thread, the channel's teardown would join that
  // very thread (grpc/grpc#37858) and crash. The destructor therefore waits
  // for this to reach zero, so the channel always dies on the caller's thread.
  absl::Mutex mutex_;
  int async_in_flight_ ABSL_GUARDED_BY(mutex_) = 0;
};

}  // namespace fuseserve::client
