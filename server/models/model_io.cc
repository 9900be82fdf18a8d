#include "server/models/model_io.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace fuseserve {
namespace {

absl::Status CheckTensorConfig(const char* kind, const std::string& name,
                               inference::DataType data_type,
                               const google::protobuf::RepeatedField<int64_t>& dims) {
  if (data_type != inference::TYPE_FP32) {
    return absl::InvalidArgumentError(absl::StrCat(kind, " \"", name, "\" has data_type ",
                                                   inference::DataType_Name(data_type),
                                                   ", expected TYPE_FP32"));
  }
  for (int i = 0; i < dims.size(); ++i) {
    if (dims[i] != -1 && dims[i] < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(kind, " \"", name, "\" dims [", absl::StrJoin(dims, ", "), "]: dimension ",
                       i, " is ", dims[i], ", must be -1 (variable) or positive"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModelIo> ModelIo::FromConfig(const inference::ModelConfig& config,
                                            std::vector<std::string> dim_names) {
  if (config.max_batch_size() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_batch_size must be >= 0, got ", config.max_batch_size()));
  }
  if (config.input_size() != 1 || config.output_size() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("platform ", config.platform(), " has one input and one output, config has ",
                     config.input_size(), " input(s) and ", config.output_size(), " output(s)"));
  }
  const inference::ModelInput& input = config.input(0);
  const inference::ModelOutput& output = config.output(0);
  RETURN_IF_ERROR(CheckTensorConfig("input", input.name(), input.data_type(), input.dims()));
  RETURN_IF_ERROR(CheckTensorConfig("output", output.name(), output.data_type(), output.dims()));

  ModelIo io;
  io.max_batch_size_ = config.max_batch_size();
  io.input_name_ = input.name();
  io.output_name_ = output.name();
  if (io.batching()) {
    io.full_input_dims_.push_back(-1);
    io.full_output_dims_.push_back(-1);
  }
  io.full_input_dims_.insert(io.full_input_dims_.end(), input.dims().begin(), input.dims().end());
  io.full_output_dims_.insert(io.full_output_dims_.end(), output.dims().begin(),
                              output.dims().end());
  io.dim_names_ = std::move(dim_names);
  return io;
}

std::string ModelIo::DimName(size_t index) const {
  return index < dim_names_.size() ? dim_names_[index] : "spatial";
}

std::string ModelIo::ConfigDims(const Shape& full_dims) const {
  const size_t first = batching() && !full_dims.empty() ? 1 : 0;
  return ShapeToString(Shape(full_dims.begin() + first, full_dims.end()));
}

std::string ModelIo::DescribeInput() const {
  return absl::StrCat("input \"", input_name_, "\" dims ", ConfigDims(full_input_dims_));
}

std::string ModelIo::DescribeOutput() const {
  return absl::StrCat("output \"", output_name_, "\" dims ", ConfigDims(full_output_dims_));
}

absl::Status ModelIo::CheckInputRank(size_t rank) const {
  if (full_input_dims_.size() == rank) return absl::OkStatus();
  std::vector<std::string> names;
  for (size_t i = batching() ? 1 : 0; i < rank; ++i) names.push_back(DimName(i));
  return absl::InvalidArgumentError(absl::StrCat(
      DescribeInput(), ": expected ", names.size(), " dims (", absl::StrJoin(names, ", "), ")",
      batching() ? " after the batch dimension (max_batch_size > 0)"
                 : ", batch dimension included (max_batch_size is 0)"));
}

absl::Status ModelIo::CheckMinInputRank(size_t rank) const {
  if (full_input_dims_.size() >= rank) return absl::OkStatus();
  std::vector<std::string> names;
  for (size_t i = batching() ? 1 : 0; i < rank; ++i) names.push_back(DimName(i));
  names.push_back("...");
  return absl::InvalidArgumentError(
      absl::StrCat(DescribeInput(), ": expected at least ", rank - (batching() ? 1 : 0), " dims (",
                   absl::StrJoin(names, ", "), ")",
                   batching() ? " after the batch dimension (max_batch_size > 0)"
                              : ", batch dimension included (max_batch_size is 0)"));
}

absl::Status ModelIo::CheckInputDim(size_t index, int64_t expected,
                                    const std::string& source) const {
  const int64_t actual = full_input_dims_[index];
  if (actual == expected) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      DescribeInput(), ": dimension ", index - (batching() ? 1 : 0), " (", DimName(index), ") is ",
      actual, actual == -1 ? " (variable)" : "", ", expected ", expected, " (", source, ")"));
}

absl::Status ModelIo::CheckOutputDims(const Shape& expected) const {
  if (full_output_dims_ == expected) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(DescribeOutput(), " do not match the input dims and parameters, which give ",
                   ConfigDims(expected), " (-1 = variable)"));
}

absl::Status ModelIo::CheckInputShape(const Shape& shape) const {
  if (shape.size() != full_input_dims_.size()) {
    std::vector<std::string> names;
    for (size_t i = 0; i < full_input_dims_.size(); ++i) names.push_back(DimName(i));
    return absl::InvalidArgumentError(absl::StrCat(
        "input shape ", ShapeToString(shape), " has rank ", shape.size(), ", model expects rank ",
        full_input_dims_.size(), " (", absl::StrJoin(names, ", "), ")"));
  }
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < 1) {
      return absl::InvalidArgumentError(absl::StrCat("input dimension ", i, " (", DimName(i),
                                                     ") is ", shape[i], ", must be positive"));
    }
    if (full_input_dims_[i] != -1 && shape[i] != full_input_dims_[i]) {
      return absl::InvalidArgumentError(absl::StrCat("input dimension ", i, " (", DimName(i),
                                                     ") is ", shape[i], ", model expects ",
                                                     full_input_dims_[i]));
    }
  }
  if (batching() && shape[0] > max_batch_size_) {
    return absl::InvalidArgumentError(
        absl::StrCat("input batch size ", shape[0], " exceeds max_batch_size ", max_batch_size_));
  }
  return CheckedNumElements(shape).status();
}

}  // namespace fuseserve
