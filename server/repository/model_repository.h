#pragma once

// The layout of a model repository (Triton's, SPEC.md §2):
//   <root>/<model-name>/config.pbtxt
//   <root>/<model-name>/<version>/model.safetensors   (version: positive integer)
// This file finds the model directories and the versions of a model that its
// version policy selects; it opens no weights and parses no configs.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/model_config.pb.h"

namespace fuseserve {

struct RepositoryModelEntry {
  std::string name;       // the directory's name, which is the model's name
  std::string directory;  // <root>/<name>
};

// Every non-hidden (not starting with '.') subdirectory of `root`, sorted by
// name. Files are ignored. This is where the repository is confined: no model
// it returns can make the loader read outside `root`.
//   - A symbolic link is followed only when its target is a directory inside
//     `root`; a link that points outside `root` or is broken is skipped.
//   - A model is skipped when a symbolic link among its entries or its
//     subdirectories' entries (config.pbtxt, <version>/, <version>/<weights>
//     and their siblings) resolves outside `root` or cannot be resolved, or
//     when one of those directories cannot be listed.
// Each skip's reason (naming the path and where it leads) is appended to
// `*skipped`, or logged as a warning when `skipped` is null. Hard links and
// mounts are not links: whoever can place those controls the filesystem.
// Names need no checking: a directory entry never contains '/' or NUL, and
// "." and ".." are hidden. Requests never reach the filesystem at all: they
// name models that this listing found.
// NotFound when `root` does not exist, InvalidArgument when it is not a
// directory.
absl::StatusOr<std::vector<RepositoryModelEntry>> ListRepository(
    const std::string& root, std::vector<std::string>* skipped = nullptr);

struct ModelVersion {
  int64_t version = 0;
  std::string directory;     // <model_dir>/<version>
  std::string weights_path;  // <directory>/<default_model_filename or model.safetensors>
};

// The versions of the model in `model_dir` that `config.version_policy()`
// selects, sorted ascending. Version directories are subdirectories whose
// names are positive decimal integers; other entries are ignored.
//   latest {num_versions: n}: the n highest (n = 0 or no policy: 1);
//   all: every version;
//   specific {versions: [...]}: exactly those (NotFound naming a listed
//   version that has no directory).
// Each selected version must contain the weights file
// (`default_model_filename`, else "model.safetensors"); NotFound naming its
// path otherwise. NotFound when the model has no version directory at all;
// InvalidArgument when two directories name the same version ("1", "01").
absl::StatusOr<std::vector<ModelVersion>> SelectVersions(const std::string& model_dir,
                                                         const inference::ModelConfig& config);

}  // namespace fuseserve
