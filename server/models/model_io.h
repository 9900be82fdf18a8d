#pragma once

// What a family's config says about its one FP32 input and one FP32 output,
// and the shape checks every family shares.
//
// "Full" dims include the batch dimension. With max_batch_size > 0 the
// config's dims exclude it (Triton's rule) and the full dims start with -1;
// otherwise the config's dims are the full dims. -1 is a dimension of any
// size.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/shape.h"
#include "proto/model_config.pb.h"

namespace fuseserve {

class ModelIo {
 public:
  // InvalidArgument unless max_batch_size >= 0, the config has exactly one
  // input and one output, both TYPE_FP32, and every dim is -1 or >= 1.
  // `dim_names` name the full input dims in messages, batch first (e.g.
  // {"batch", "channels", "height", "width"}); a family whose rank the config
  // decides passes a prefix and the rest are called "spatial".
  static absl::StatusOr<ModelIo> FromConfig(const inference::ModelConfig& config,
                                            std::vector<std::string> dim_names);

  bool batching() const { return max_batch_size_ > 0; }
  int64_t max_batch_size() const { return max_batch_size_; }
  const Shape& full_input_dims() const { return full_input_dims_; }
  const Shape& full_output_dims() const { return full_output_dims_; }

  // Load-time checks against what the parameters determine.
  // InvalidArgument unless the full input rank is `rank`.
  absl::Status CheckInputRank(size_t rank) const;
  // InvalidArgument unless the full input rank is at least `rank`.
  absl::Status CheckMinInputRank(size_t rank) const;
  // InvalidArgument unless full input dim `index` equals `expected`;
  // `source` says where `expected` comes from (e.g. "in_channels").
  absl::Status CheckInputDim(size_t index, int64_t expected, const std::string& source) const;
  // InvalidArgument unless the full output dims equal `expected` (-1 where
  // the output size depends on a variable input size).
  absl::Status CheckOutputDims(const Shape& expected) const;

  // Run-time check of a full input shape: its rank, every dimension >= 1,
  // the batch within max_batch_size, and every dimension the config fixes.
  // Messages name the dimension, e.g. "input dimension 1 (channels) is 32,
  // model expects 64".
  absl::Status CheckInputShape(const Shape& shape) const;

 private:
  ModelIo() = default;
  std::string DimName(size_t index) const;
  // The full dims written as the config writes them, e.g. input "input" dims
  // [64, -1, -1].
  std::string DescribeInput() const;
  std::string DescribeOutput() const;
  std::string ConfigDims(const Shape& full_dims) const;

  int64_t max_batch_size_ = 0;
  std::string input_name_;
  std::string output_name_;
  Shape full_input_dims_;
  Shape full_output_dims_;
  std::vector<std::string> dim_names_;
};

}  // namespace fuseserve
