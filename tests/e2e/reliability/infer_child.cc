// A client process for faults_test's "SIGKILL of a client mid-request":
//   reliability_infer_child <host:port> <model> <dim>...
// sends one ModelInfer of that FP32 input shape (zeros, as raw bytes) and
// waits for the answer; the test kills it while the server holds the request.
// Exits 0 on an OK answer, 1 otherwise, 2 on bad arguments.

#include <climits>
#include <cstdint>
#include <iostream>
#include <string>

#include "absl/strings/numbers.h"
#include "grpcpp/grpcpp.h"
#include "proto/grpc_service.grpc.pb.h"

int main(int argc, char** argv) {
  if (argc < 4) {
    std::cerr << "usage: " << argv[0] << " <host:port> <model> <dim>...\n";
    return 2;
  }
  inference::ModelInferRequest request;
  request.set_model_name(argv[2]);
  inference::ModelInferRequest::InferInputTensor* input = request.add_inputs();
  input->set_name("input");
  input->set_datatype("FP32");
  int64_t elements = 1;
  for (int i = 3; i < argc; ++i) {
    int64_t dim = 0;
    if (!absl::SimpleAtoi(argv[i], &dim) || dim <= 0 || dim > INT32_MAX / 4) {
      std::cerr << "bad dimension " << argv[i] << "\n";
      return 2;
    }
    input->add_shape(dim);
    elements *= dim;
    if (elements > INT32_MAX / 4) {
      std::cerr << "the request would exceed 2 GiB\n";
      return 2;
    }
  }
  request.add_raw_input_contents(std::string(elements * sizeof(float), '\0'));

  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(INT_MAX);
  args.SetMaxSendMessageSize(INT_MAX);
  auto stub = inference::GRPCInferenceService::NewStub(
      grpc::CreateCustomChannel(argv[1], grpc::InsecureChannelCredentials(), args));
  grpc::ClientContext context;
  inference::ModelInferResponse response;
  const grpc::Status status = stub->ModelInfer(&context, request, &response);
  if (!status.ok()) {
    std::cerr << "ModelInfer failed: " << status.error_message() << "\n";
    return 1;
  }
  return 0;
}
