#pragma once

// The default model repository: one model per family at the reference
// hyper-parameters of SPEC.md §1, weights drawn from a fixed seed with
// PyTorch's default initialisation distributions (GroupNorm affine parameters
// random rather than 1/0, so that a wrong affine path cannot hide). Gives a
// fresh machine something real to serve; the small variant is for tests.

#include <string>

#include "absl/status/status.h"

namespace fuseserve {

enum class RepositorySize {
  kReference,  // SPEC.md §1 reference hyper-parameters
  kSmall,      // same families, tiny shapes (tests)
};

// Writes <directory>/<family>/config.pbtxt and <family>/1/model.safetensors
// for the three families. Existing files are replaced.
absl::Status WriteDefaultRepository(const std::string& directory, RepositorySize size,
                                    uint64_t seed = 2026);

}  // namespace fuseserve
