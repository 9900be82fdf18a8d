#include "server/grpc/infer_request_decoder.h"

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace fuseserve {
namespace {

using inference::InferParameter;
using inference::ModelInferRequest;

absl::Status Invalid(const std::string& message) {
  return absl::InvalidArgumentError(message);
}

// The config's full dims for the request: [-1] + dims when batching.
Shape ExpectedShape(const inference::ModelConfig& config) {
  Shape shape;
  if (config.max_batch_size() > 0) shape.push_back(-1);
  for (int64_t dim : config.input(0).dims()) shape.push_back(dim);
  return shape;
}

absl::Status CheckShape(const ModelInferRequest::InferInputTensor& tensor,
                        const inference::ModelConfig& config, Shape* shape) {
  shape->assign(tensor.shape().begin(), tensor.shape().end());
  const Shape expected = ExpectedShape(config);
  const std::string& name = tensor.name();
  if (shape->size() != expected.size()) {
    return Invalid(absl::StrCat("input \"", name, "\" has shape ", ShapeToString(*shape),
                                " of rank ", shape->size(), ", model expects rank ",
                                expected.size(), " ", ShapeToString(expected)));
  }
  const bool batching = config.max_batch_size() > 0;
  for (size_t i = 0; i < shape->size(); ++i) {
    if ((*shape)[i] <= 0) {
      return Invalid(absl::StrCat("input \"", name, "\" has shape ", ShapeToString(*shape),
                                  ": dimension ", i, batching && i == 0 ? " (the batch size)" : "",
                                  " must be positive"));
    }
    if (expected[i] != -1 && (*shape)[i] != expected[i]) {
      return Invalid(absl::StrCat("input \"", name, "\" has shape ", ShapeToString(*shape),
                                  ", model expects ", ShapeToString(expected),
                                  " (dimension ", i, " is ", (*shape)[i], ", expected ",
                                  expected[i], ")"));
    }
  }
  if (batching && (*shape)[0] > config.max_batch_size()) {
    return Invalid(absl::StrCat("input \"", name, "\" has batch size ", (*shape)[0],
                                ", which exceeds the model's max_batch_size of ",
                                config.max_batch_size()));
  }
  if (!CheckedNumElements(*shape).ok()) {
    return Invalid(absl::StrCat("input \"", name, "\" has shape ", ShapeToString(*shape),
                                ", which has more than INT64_MAX elements"));
  }
  return absl::OkStatus();
}

// Names the typed field carrying data of a type other than FP32, if any.
std::string NonFp32Contents(const inference::InferTensorContents& contents) {
  if (contents.bool_contents_size() > 0) return "bool_contents";
  if (contents.int_contents_size() > 0) return "int_contents";
  if (contents.int64_contents_size() > 0) return "int64_contents";
  if (contents.uint_contents_size() > 0) return "uint_contents";
  if (contents.uint64_contents_size() > 0) return "uint64_contents";
  if (contents.fp64_contents_size() > 0) return "fp64_contents";
  if (contents.bytes_contents_size() > 0) return "bytes_contents";
  return "";
}

bool HasAnyContents(const inference::InferTensorContents& contents) {
  return contents.fp32_contents_size() > 0 || !NonFp32Contents(contents).empty();
}

// The size of `num_elements` FP32 values in bytes, as text for messages.
std::string Fp32ByteCount(int64_t num_elements) {
  return num_elements <= INT64_MAX / static_cast<int64_t>(sizeof(float))
             ? absl::StrCat(num_elements * static_cast<int64_t>(sizeof(float)))
             : "more than INT64_MAX";
}

// Whether `byte_count` bytes are exactly `num_elements` FP32 values. Compared
// in elements: num_elements * 4 can overflow for hostile shapes.
bool IsFp32ByteCount(uint64_t byte_count, int64_t num_elements) {
  return byte_count % sizeof(float) == 0 &&
         byte_count / sizeof(float) == static_cast<uint64_t>(num_elements);
}

// Points decoded->input at the `num_elements` floats at `bytes`, or at a copy
// of them when they are not float-aligned (neither the transport nor a
// client's shared-memory offset promises alignment).
void PointInputAt(const void* bytes, int64_t num_elements, DecodedInferRequest* decoded) {
  if (reinterpret_cast<uintptr_t>(bytes) % alignof(float) == 0) {
    decoded->input = static_cast<const float*>(bytes);
    return;
  }
  decoded->aligned_copy.resize(num_elements);
  std::memcpy(decoded->aligned_copy.data(), bytes, num_elements * sizeof(float));
  decoded->input = decoded->aligned_copy.data();
}

// `status` with `prefix` (naming the tensor) before its message.
absl::Status Prefixed(const std::string& prefix, const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat(prefix, ": ", status.message()));
}

absl::StatusOr<int64_t> IntegerParameter(const std::string& key, const InferParameter& value) {
  switch (value.parameter_choice_case()) {
    case InferParameter::kInt64Param:
      if (value.int64_param() < 0) {
        return Invalid(absl::StrCat("parameter \"", key, "\" must not be negative, got ",
                                    value.int64_param()));
      }
      return value.int64_param();
    case InferParameter::kUint64Param:
      if (value.uint64_param() > static_cast<uint64_t>(INT64_MAX)) {
        return Invalid(absl::StrCat("parameter \"", key, "\" is out of range"));
      }
      return static_cast<int64_t>(value.uint64_param());
    default:
      return Invalid(
          absl::StrCat("parameter \"", key, "\" must be an int64_param or uint64_param"));
  }
}

// Triton's per-tensor shared-memory parameters.
constexpr char kRegionKey[] = "shared_memory_region";
constexpr char kByteSizeKey[] = "shared_memory_byte_size";
constexpr char kOffsetKey[] = "shared_memory_offset";

struct SharedMemoryParameters {
  std::string region;
  int64_t byte_size = 0;
  int64_t offset = 0;  // optional on the wire, 0 by default
};

// The shared-memory parameters of the tensor that `tensor` names in messages
// ("input \"x\""); nullopt when it has none. `allowed` is false when the
// server refuses shared memory.
absl::StatusOr<std::optional<SharedMemoryParameters>> ParseSharedMemoryParameters(
    const std::string& tensor, const google::protobuf::Map<std::string, InferParameter>& parameters,
    bool allowed) {
  const auto region = parameters.find(kRegionKey);
  const auto byte_size = parameters.find(kByteSizeKey);
  const auto offset = parameters.find(kOffsetKey);
  const auto none = parameters.end();
  if (region == none && byte_size == none && offset == none) return std::nullopt;
  if (!allowed) {
    return Invalid(absl::StrCat(tensor,
                                " uses shared memory, which this server does not allow (start "
                                "it with --allow-shared-memory=true)"));
  }
  if (region == none) {
    return Invalid(absl::StrCat(tensor, ": parameter \"",
                                byte_size != none ? kByteSizeKey : kOffsetKey,
                                "\" needs parameter \"", kRegionKey, "\""));
  }
  if (!region->second.has_string_param()) {
    return Invalid(absl::StrCat(tensor, ": parameter \"", kRegionKey, "\" must be a string_param"));
  }
  if (byte_size == none) {
    return Invalid(absl::StrCat(tensor, ": parameter \"", kRegionKey, "\" needs parameter \"",
                                kByteSizeKey, "\""));
  }
  SharedMemoryParameters result;
  result.region = region->second.string_param();
  absl::StatusOr<int64_t> value = IntegerParameter(kByteSizeKey, byte_size->second);
  if (!value.ok()) return Prefixed(tensor, value.status());
  result.byte_size = *value;
  if (offset != none) {
    value = IntegerParameter(kOffsetKey, offset->second);
    if (!value.ok()) return Prefixed(tensor, value.status());
    result.offset = *value;
  }
  return result;
}

absl::StatusOr<SharedMemoryView> FindRegion(const std::string& tensor,
                                            const SharedMemoryParameters& parameters,
                                            const SharedMemoryManager& shared_memory) {
  absl::StatusOr<SharedMemoryView> view =
      shared_memory.Find(parameters.region, parameters.offset, parameters.byte_size);
  if (!view.ok()) return Prefixed(tensor, view.status());
  return view;
}

absl::Status LocateSharedMemoryData(const ModelInferRequest& request,
                                    const std::vector<WireBytes>& raw, int64_t num_elements,
                                    const SharedMemoryParameters& parameters,
                                    const SharedMemoryManager& shared_memory,
                                    DecodedInferRequest* decoded) {
  const ModelInferRequest::InferInputTensor& tensor = request.inputs(0);
  const std::string input = absl::StrCat("input \"", tensor.name(), "\"");
  if (HasAnyContents(tensor.contents())) {
    return Invalid(absl::StrCat(input, " is in shared memory and must not also carry contents"));
  }
  if (!raw.empty()) {
    return Invalid(absl::StrCat("request has ", raw.size(),
                                " raw_input_contents entries, but its only input (", input,
                                ") is in shared memory"));
  }
  if (!IsFp32ByteCount(parameters.byte_size, num_elements)) {
    return Invalid(absl::StrCat(input, " has ", parameters.byte_size, " bytes in shared memory (",
                                kByteSizeKey, "), expected ", Fp32ByteCount(num_elements), " (",
                                num_elements, " FP32 values of shape ",
                                ShapeToString(decoded->input_shape), ")"));
  }
  ASSIGN_OR_RETURN(SharedMemoryView view, FindRegion(input, parameters, shared_memory));
  PointInputAt(view.data, num_elements, decoded);
  decoded->shared_memory_input = std::move(view);
  return absl::OkStatus();
}

absl::Status LocateData(const ModelInferRequest& request, const std::vector<WireBytes>& raw,
                        int64_t num_elements, const SharedMemoryManager* shared_memory,
                        DecodedInferRequest* decoded) {
  const ModelInferRequest::InferInputTensor& tensor = request.inputs(0);
  const std::string& name = tensor.name();
  const std::string non_fp32 = NonFp32Contents(tensor.contents());
  if (!non_fp32.empty()) {
    return Invalid(absl::StrCat("input \"", name, "\" has datatype FP32 but carries ",
                                non_fp32));
  }
  ASSIGN_OR_RETURN(std::optional<SharedMemoryParameters> in_shared_memory,
                   ParseSharedMemoryParameters(absl::StrCat("input \"", name, "\""),
                                               tensor.parameters(), shared_memory != nullptr));
  if (in_shared_memory.has_value()) {
    return LocateSharedMemoryData(request, raw, num_elements, *in_shared_memory, *shared_memory,
                                  decoded);
  }
  if (!raw.empty()) {
    if (HasAnyContents(tensor.contents())) {
      return Invalid(absl::StrCat("input \"", name,
                                  "\": contents field must not be specified when using "
                                  "raw_input_contents"));
    }
    if (raw.size() != 1) {
      return Invalid(absl::StrCat("request has ", raw.size(),
                                  " raw_input_contents entries for 1 input"));
    }
    const WireBytes& bytes = raw.front();
    if (!IsFp32ByteCount(bytes.size(), num_elements)) {
      return Invalid(absl::StrCat("input \"", name, "\" has ", bytes.size(),
                                  " bytes of raw data, expected ", Fp32ByteCount(num_elements),
                                  " (", num_elements, " FP32 values of shape ",
                                  ShapeToString(decoded->input_shape), ")"));
    }
    // One aligned piece is read in place; anything else is copied once, from
    // its pieces, by whoever stages the input.
    if (bytes.pieces().size() == 1 &&
        reinterpret_cast<uintptr_t>(bytes.pieces()[0].data) % alignof(float) == 0) {
      decoded->input = reinterpret_cast<const float*>(bytes.pieces()[0].data);
    } else {
      decoded->input_pieces = bytes;
    }
    return absl::OkStatus();
  }
  const auto& values = tensor.contents().fp32_contents();
  if (values.empty() && num_elements > 0) {
    return Invalid(absl::StrCat("input \"", name,
                                "\" has no data (neither raw_input_contents nor "
                                "contents.fp32_contents)"));
  }
  if (values.size() != num_elements) {
    return Invalid(absl::StrCat("input \"", name, "\" has ", values.size(),
                                " fp32_contents values, expected ", num_elements,
                                " (shape ", ShapeToString(decoded->input_shape), ")"));
  }
  decoded->input = values.data();
  return absl::OkStatus();
}

// Requested output `requested` in shared memory, when its parameters say so.
absl::Status LocateOutput(const ModelInferRequest& request,
                          const ModelInferRequest::InferRequestedOutputTensor& requested,
                          const SharedMemoryManager* shared_memory, DecodedInferRequest* decoded) {
  const std::string output = absl::StrCat("output \"", requested.name(), "\"");
  ASSIGN_OR_RETURN(
      std::optional<SharedMemoryParameters> in_shared_memory,
      ParseSharedMemoryParameters(output, requested.parameters(), shared_memory != nullptr));
  if (!in_shared_memory.has_value()) return absl::OkStatus();
  // Checked here rather than when the output is written: the shape is known
  // now, and the request then fails before it is computed. Compared in
  // elements, as for the input.
  const absl::StatusOr<int64_t> count = CheckedNumElements(decoded->output_shape);
  if (!count.ok() || static_cast<uint64_t>(in_shared_memory->byte_size) / sizeof(float) <
                         static_cast<uint64_t>(*count)) {
    // Triton's wording (server/src/grpc/infer_handler.cc).
    return Invalid(absl::StrCat(
        "shared memory size specified with the request for output '", requested.name(), "' (",
        in_shared_memory->byte_size, " bytes) should be at least ",
        count.ok() ? Fp32ByteCount(*count) : "more than INT64_MAX", " bytes to hold the results"));
  }
  ASSIGN_OR_RETURN(SharedMemoryView view, FindRegion(output, *in_shared_memory, *shared_memory));
  // The CPU backend computes a lone request from its input straight into its
  // output, which must therefore not alias it.
  if (decoded->shared_memory_input.has_value()) {
    const SharedMemoryView& input = *decoded->shared_memory_input;
    const uint64_t input_start = input.region->offset() + input.offset_in_region;
    const uint64_t output_start = view.region->offset() + view.offset_in_region;
    if (input.region->key() == view.region->key() && input_start < output_start + view.byte_size &&
        output_start < input_start + input.byte_size) {
      return Invalid(absl::StrCat(
          output, " (bytes ", output_start, " to ", output_start + view.byte_size,
          ") overlaps input \"", request.inputs(0).name(), "\" (bytes ", input_start, " to ",
          input_start + input.byte_size, ") in shared memory object '", view.region->key(), "'"));
    }
  }
  decoded->shared_memory_output = std::move(view);
  return absl::OkStatus();
}

absl::Status DecodeParameters(const ModelInferRequest& request, const std::string& model,
                              DecodedInferRequest* decoded) {
  for (const auto& [key, value] : request.parameters()) {
    if (key == "timeout") {
      ASSIGN_OR_RETURN(int64_t timeout_us, IntegerParameter(key, value));
      decoded->timeout = absl::Microseconds(timeout_us);
    } else if (key == "priority") {
      // One priority level: accepted (tritonclient always may send it), no effect.
      RETURN_IF_ERROR(IntegerParameter(key, value).status());
    } else if (key == "sequence_id" || key == "sequence_start" || key == "sequence_end") {
      const bool set = (value.has_bool_param() && value.bool_param()) ||
                       (value.has_int64_param() && value.int64_param() != 0) ||
                       (value.has_uint64_param() && value.uint64_param() != 0) ||
                       (value.has_string_param() && !value.string_param().empty());
      if (set) {
        return Invalid(absl::StrCat("parameter \"", key, "\": model \"", model,
                                    "\" does not support sequence batching"));
      }
    }
    // Other parameters (binary_data_output, user parameters) do not change
    // what the model computes.
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<DecodedInferRequest> DecodeInferRequest(const inference::ModelInferRequest& request,
                                                       const inference::ModelConfig& config,
                                                       const Model& model,
                                                       const SharedMemoryManager* shared_memory) {
  std::vector<WireBytes> raw(request.raw_input_contents_size());
  for (int i = 0; i < request.raw_input_contents_size(); ++i) {
    raw[i].Append(request.raw_input_contents(i).data(), request.raw_input_contents(i).size());
  }
  return DecodeInferRequest(request, raw, config, model, shared_memory);
}

absl::StatusOr<DecodedInferRequest> DecodeInferRequest(const inference::ModelInferRequest& request,
                                                       const std::vector<WireBytes>& raw,
                                                       const inference::ModelConfig& config,
                                                       const Model& model,
                                                       const SharedMemoryManager* shared_memory) {
  const std::string& input_name = config.input(0).name();
  if (request.inputs_size() != 1) {
    return Invalid(absl::StrCat("model \"", config.name(), "\" expects 1 input (\"",
                                input_name, "\"), request has ", request.inputs_size()));
  }
  const ModelInferRequest::InferInputTensor& tensor = request.inputs(0);
  if (tensor.name() != input_name) {
    return Invalid(absl::StrCat("unknown input \"", tensor.name(), "\" for model \"",
                                config.name(), "\" (expected \"", input_name, "\")"));
  }
  if (tensor.datatype() != "FP32") {
    return Invalid(absl::StrCat("input \"", tensor.name(), "\" has datatype \"",
                                tensor.datatype(), "\", model expects \"FP32\""));
  }
  DecodedInferRequest decoded;
  RETURN_IF_ERROR(CheckShape(tensor, config, &decoded.input_shape));
  decoded.batch_size = config.max_batch_size() > 0 ? decoded.input_shape[0] : 1;
  ASSIGN_OR_RETURN(decoded.output_shape, model.OutputShape(decoded.input_shape));
  RETURN_IF_ERROR(
      LocateData(request, raw, NumElements(decoded.input_shape), shared_memory, &decoded));

  const std::string& output_name = config.output(0).name();
  for (int i = 0; i < request.outputs_size(); ++i) {
    const auto& requested = request.outputs(i);
    if (requested.name() != output_name) {
      return Invalid(absl::StrCat("unknown output \"", requested.name(), "\" for model \"",
                                  config.name(), "\" (outputs: \"", output_name, "\")"));
    }
    if (i > 0) {
      return Invalid(absl::StrCat("output \"", output_name, "\" is requested more than once"));
    }
    // Triton's classification extension would answer top-k labels instead of
    // the tensor; answering the tensor would silently change the meaning.
    if (requested.parameters().contains("classification")) {
      return Invalid(absl::StrCat("output \"", output_name,
                                  "\" asks for classification, which this server does not "
                                  "support"));
    }
    RETURN_IF_ERROR(LocateOutput(request, requested, shared_memory, &decoded));
  }
  RETURN_IF_ERROR(DecodeParameters(request, config.name(), &decoded));
  return decoded;
}

}  // namespace fuseserve
