#pragma once

// The `groupnorm` family (SPEC.md §1.3):
//   y = GroupNorm(num_groups, num_channels, eps)(x),  x: [N, C, *], rank >= 2.

#include <memory>

#include "absl/status/statusor.h"
#include "proto/model_config.pb.h"
#include "server/repository/safetensors.h"
#include "server/runtime/model.h"

namespace fuseserve {

inline constexpr char kGroupNormFamily[] = "groupnorm";

// Parameters: num_channels, num_groups, eps (1e-5). `precision` is accepted
// ("fp32" or "tf32", as the server reports it back in the config) but the
// family has no matrix part: it always computes, and reports, fp32.
// Weights: gn.weight [num_channels], gn.bias [num_channels].
absl::StatusOr<std::unique_ptr<Model>> CreateGroupNormModel(const inference::ModelConfig& config,
                                                            const SafetensorsFile& weights);

}  // namespace fuseserve
