#pragma once

// Capping how many CTAs of a kernel run per SM, through dynamic shared
// memory the kernel does not use (the GroupNorm one-read schedules: fewer
// chunks in flight keep their second reads in L2). Internal to the CUDA
// backend.

#include <cstddef>

#include "absl/status/statusor.h"

namespace fuseserve::cuda {

// The dynamic shared memory to launch `kernel` with on the current device:
// the `used_bytes` the kernel itself needs, or more, so that at most
// `ctas_per_sm` of its CTAs fit on one SM (ctas_per_sm 0: no cap, exactly
// used_bytes). Raises the kernel's dynamic shared-memory limit when that is
// more than the default 48 KiB.
absl::StatusOr<size_t> ResidencyPadding(const void* kernel, int ctas_per_sm,
                                        size_t used_bytes = 0);

}  // namespace fuseserve::cuda
