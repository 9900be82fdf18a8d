#pragma once

// Test repositories derived from the default one: a model copied under a new
// name with its config edited as a ModelConfig, so that a test states the
// change it needs (a longer batching delay, say) instead of matching the
// default config's text.

#include <filesystem>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "proto/model_config.pb.h"

namespace fuseserve::testing {

// Copies model `source` of `repository` (its config and its version 1's
// weights) to a new model `name`: the config is renamed, then `edit` (when
// given) changes it. Errors name the file that could not be read or written.
absl::Status CopyModel(const std::filesystem::path& repository, const std::string& source,
                       const std::string& name,
                       const std::function<void(inference::ModelConfig&)>& edit = nullptr);

}  // namespace fuseserve::testing
