#pragma once

// Reading a model's config.pbtxt (protobuf text format of
// inference.ModelConfig, as Triton writes it) and checking the parts of it
// that do not depend on the model family. Family-specific checks (parameters,
// dims against weights) live in server/models.

#include <string>

#include "absl/status/statusor.h"
#include "proto/model_config.pb.h"

namespace fuseserve {

// Parses `pbtxt` with protobuf's TextFormat. On failure, InvalidArgument
// listing every parse error as "<display_path>:<line>:<column>: <error>"
// (1-based), e.g. `m/config.pbtxt:3:1: Message type "inference.ModelConfig"
// has no field named "max_batch".`.
absl::StatusOr<inference::ModelConfig> ParseModelConfig(const std::string& pbtxt,
                                                        const std::string& display_path);

// Reads and parses <model_dir>/config.pbtxt (NotFound when it is missing),
// then normalises and validates it. The result is what the ModelConfig RPC
// reports: every field as written, plus these defaults filled in:
//   - empty `name`: the directory's basename (a different name is an error);
//   - no `instance_group`: one group {kind: KIND_AUTO, count: 1}; a group's
//     `count: 0` becomes 1;
//   - no `version_policy`: latest {num_versions: 1}; `num_versions: 0`
//     becomes 1.
// Errors (InvalidArgument, naming config.pbtxt and the field): no `platform`
// (or `backend` given instead); max_batch_size < 0; not exactly one input and
// one output; a tensor without a name, not TYPE_FP32, with empty dims, a dim
// that is 0 or below -1, a `reshape`, or `is_shape_tensor`; an instance group
// with count < 0, kind KIND_MODEL or a negative GPU id; a `specific` version
// policy with no versions or a version < 1; a preferred_batch_size < 1 or,
// when max_batch_size > 0, above max_batch_size; a default_model_filename
// that is not a plain file name. `dynamic_batching` with max_batch_size 0 is
// accepted: such a model runs every request alone.
absl::StatusOr<inference::ModelConfig> LoadModelConfig(const std::string& model_dir);

// LoadModelConfig on text already read: `pbtxt` is the contents of
// <model_dir>/config.pbtxt (the directory is only used for its name and in
// messages; nothing is read from it). The config fuzzer's entry point.
absl::StatusOr<inference::ModelConfig> LoadModelConfigFromText(const std::string& pbtxt,
                                                               const std::string& model_dir);

}  // namespace fuseserve
