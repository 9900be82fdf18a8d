#pragma once

// The `convtranspose_gelu_groupnorm` family (SPEC.md §1.1):
//   y = GroupNorm(num_groups, out_channels, eps)(GELU_erf(ConvTranspose2d(
//         in_channels, out_channels, kernel_size, stride, padding,
//         output_padding)(x)))
// input [N, in_channels, H, W] -> output [N, out_channels, H_out, W_out].

#include <memory>

#include "absl/status/statusor.h"
#include "proto/model_config.pb.h"
#include "server/repository/safetensors.h"
#include "server/runtime/model.h"

namespace fuseserve {

inline constexpr char kConvTransposeGeluGroupNormFamily[] = "convtranspose_gelu_groupnorm";

// Parameters: in_channels, out_channels, kernel_size, stride (1), padding (0),
// output_padding (0), num_groups, eps (1e-5), precision (tf32). Weights:
// conv_transpose.weight [in_channels, out_channels, k, k],
// conv_transpose.bias [out_channels], group_norm.weight [out_channels],
// group_norm.bias [out_channels].
absl::StatusOr<std::unique_ptr<Model>> CreateConvTransposeGeluGroupNormModel(
    const inference::ModelConfig& config, const SafetensorsFile& weights);

}  // namespace fuseserve
