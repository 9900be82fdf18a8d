#include "server/grpc/infer_request_decoder.h"

#include <cstdint>
#include <cstring>
#include <string>

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

absl::Status LocateData(const ModelInferRequest& request, int64_t num_elements,
                        DecodedInferRequest* decoded) {
  const ModelInferRequest::InferInputTensor& tensor = request.inputs(0);
  const std::string& name = tensor.name();
  const std::string non_fp32 = NonFp32Contents(tensor.contents());
  if (!non_fp32.empty()) {
    return Invalid(absl::StrCat("input \"", name, "\" has datatype FP32 but carries ",
                                non_fp32));
  }
  if (request.raw_input_contents_size() > 0) {
    if (HasAnyContents(tensor.contents())) {
      return Invalid(absl::StrCat("input \"", name,
                                  "\": contents field must not be specified when using "
                                  "raw_input_contents"));
    }
    if (request.raw_input_contents_size() != 1) {
      return Invalid(absl::StrCat("request has ", request.raw_input_contents_size(),
                                  " raw_input_contents entries for 1 input"));
    }
    const std::string& raw = request.raw_input_contents(0);
    // Compared in elements: num_elements * 4 can overflow for hostile shapes.
    if (raw.size() % sizeof(float) != 0 ||
        raw.size() / sizeof(float) != static_cast<uint64_t>(num_elements)) {
      const std::string expected_bytes =
          num_elements <= INT64_MAX / static_cast<int64_t>(sizeof(float))
              ? absl::StrCat(num_elements * static_cast<int64_t>(sizeof(float)))
              : "more than INT64_MAX";
      return Invalid(absl::StrCat("input \"", name, "\" has ", raw.size(),
                                  " bytes of raw data, expected ", expected_bytes, " (",
                                  num_elements, " FP32 values of shape ",
                                  ShapeToString(decoded->input_shape), ")"));
    }
    if (reinterpret_cast<uintptr_t>(raw.data()) % alignof(float) == 0) {
      decoded->input = reinterpret_cast<const float*>(raw.data());
    } else {
      // The transport does not promise float alignment; copy in that case.
      decoded->aligned_copy.resize(num_elements);
      std::memcpy(decoded->aligned_copy.data(), raw.data(), raw.size());
      decoded->input = decoded->aligned_copy.data();
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
      return Invalid(absl::StrCat("parameter \"", key,
                                  "\" must be an int64_param or uint64_param"));
  }
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

absl::StatusOr<DecodedInferRequest> DecodeInferRequest(
    const inference::ModelInferRequest& request, const inference::ModelConfig& config,
    const Model& model) {
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
  if (tensor.parameters().contains("shared_memory_region")) {
    return Invalid(absl::StrCat("input \"", tensor.name(),
                                "\" uses shared memory, which this server does not support"));
  }
  DecodedInferRequest decoded;
  RETURN_IF_ERROR(CheckShape(tensor, config, &decoded.input_shape));
  decoded.batch_size = config.max_batch_size() > 0 ? decoded.input_shape[0] : 1;
  ASSIGN_OR_RETURN(decoded.output_shape, model.OutputShape(decoded.input_shape));
  RETURN_IF_ERROR(LocateData(request, NumElements(decoded.input_shape), &decoded));

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
    if (requested.parameters().contains("shared_memory_region")) {
      return Invalid(absl::StrCat("output \"", output_name,
                                  "\" uses shared memory, which this server does not support"));
    }
    // Triton's classification extension would answer top-k labels instead of
    // the tensor; answering the tensor would silently change the meaning.
    if (requested.parameters().contains("classification")) {
      return Invalid(absl::StrCat("output \"", output_name,
                                  "\" asks for classification, which this server does not "
                                  "support"));
    }
  }
  RETURN_IF_ERROR(DecodeParameters(request, config.name(), &decoded));
  return decoded;
}

}  // namespace fuseserve
