#pragma once

// Binds a model family to its weights. Each family (one file per family in
// this directory) reads its hyper-parameters from the config's `parameters`
// (SPEC.md §2 lists the keys and defaults), checks them, checks the config's
// input/output dims against them, checks every weight tensor's presence,
// dtype and shape, and returns a Model that computes the family's function.

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/model_config.pb.h"
#include "server/repository/safetensors.h"
#include "server/runtime/model.h"

namespace fuseserve {

// The family names accepted as config.pbtxt `platform`.
const std::vector<std::string>& KnownModelFamilies();

// Creates the model for `config.platform()`. InvalidArgument (naming the
// parameter, tensor or dimension) when the config or weights are not valid;
// NotFound-style InvalidArgument when a weight tensor is missing.
absl::StatusOr<std::unique_ptr<Model>> CreateModel(const inference::ModelConfig& config,
                                                   const SafetensorsFile& weights);

}  // namespace fuseserve
