#pragma once

// The `gemm_bias_hardtanh_mish_groupnorm` family (SPEC.md §1.2):
//   y = GroupNorm(num_groups, out_features, eps)(Mish(Hardtanh(hardtanh_min,
//         hardtanh_max)(Linear(in_features, out_features)(x) + bias)))
// input [N, in_features] -> output [N, out_features].

#include <memory>

#include "absl/status/statusor.h"
#include "proto/model_config.pb.h"
#include "server/repository/safetensors.h"
#include "server/runtime/model.h"

namespace fuseserve {

inline constexpr char kGemmBiasHardtanhMishGroupNormFamily[] = "gemm_bias_hardtanh_mish_groupnorm";

// Parameters: in_features, out_features, num_groups, hardtanh_min (-1),
// hardtanh_max (1), eps (1e-5), precision (fp32). Weights: gemm.weight
// [out_features, in_features], gemm.bias, bias, groupnorm.weight,
// groupnorm.bias (each [out_features]).
absl::StatusOr<std::unique_ptr<Model>> CreateGemmBiasHardtanhMishGroupNormModel(
    const inference::ModelConfig& config, const SafetensorsFile& weights);

}  // namespace fuseserve
